//! Starting the servers under test, each pinned to a CPU, and reading their cost from /proc.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to answer its first PING (a restart loads its data first).
const START_TIMEOUT: Duration = Duration::from_secs(300);

/// Persistence for a server under test: the fsync policy and the data directory. Both
/// servers get the same: Redis with `appendonly yes` and this `appendfsync`, WeTask with
/// its journal and this `appendfsync`.
#[derive(Clone, Copy, Debug)]
pub struct Durable<'a> {
    pub fsync: &'a str,
    pub dir: &'a std::path::Path,
}

/// A fresh, empty directory for one server's data.
pub fn data_dir() -> io::Result<PathBuf> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "wetask-bench-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Bytes in the files under `dir`, recursively.
pub fn dir_bytes(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

#[derive(Clone, Debug)]
pub enum ServerKind {
    /// `journal: false` runs without persistence whatever the workload asks
    /// (`journal-cost`'s baseline).
    Wetask {
        binary: PathBuf,
        shards: usize,
        journal: bool,
    },
    Redis {
        binary: PathBuf,
    },
}

impl ServerKind {
    /// This server with `shards` shards, for a row that sets its own (`Kind::Load::shards`);
    /// Redis has one thread whatever the row says.
    pub fn with_shards(&self, shards: usize) -> ServerKind {
        match self {
            ServerKind::Wetask {
                binary, journal, ..
            } => ServerKind::Wetask {
                binary: binary.clone(),
                shards,
                journal: *journal,
            },
            redis => redis.clone(),
        }
    }

    pub fn label(&self) -> &'static str {
        match self {
            ServerKind::Wetask { .. } => "wetask",
            ServerKind::Redis { .. } => "redis",
        }
    }
}

pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    /// Time from spawn to the first PONG.
    pub boot: Duration,
}

/// A free TCP port on loopback (bound, then released).
pub fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Pins the calling (child) process to `cpu`.
fn pin_to(cpu: usize) -> io::Result<()> {
    // SAFETY: sched_setaffinity on the current process with a zeroed, filled cpu_set_t.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Pins the current thread (the load generator) to `cpu`.
pub fn pin_self(cpu: usize) -> io::Result<()> {
    pin_to(cpu)
}

impl Server {
    /// Starts a server without persistence.
    pub fn start(kind: &ServerKind, cpu: usize) -> io::Result<Server> {
        Server::start_in(kind, cpu, None)
    }

    /// Starts a server, with persistence when `durable` says so.
    pub fn start_in(kind: &ServerKind, cpu: usize, durable: Option<Durable>) -> io::Result<Server> {
        let port = free_port()?;
        let mut command = match kind {
            ServerKind::Wetask {
                binary,
                shards,
                journal,
            } => {
                let mut c = Command::new(binary);
                c.args(["--port", &port.to_string(), "--shards", &shards.to_string()]);
                c.args(["--cpus", &cpu.to_string(), "--log-level", "warn"]);
                match durable {
                    Some(d) if *journal => {
                        c.args(["--appendfsync", d.fsync, "--dir"]).arg(d.dir);
                    }
                    // Redis below runs without persistence then; so does WeTask.
                    _ => {
                        c.args(["--appendonly", "no"]);
                    }
                }
                c
            }
            ServerKind::Redis { binary } => {
                let mut c = Command::new(binary);
                c.args(["--port", &port.to_string(), "--save", ""]);
                match durable {
                    Some(d) => {
                        c.args(["--appendonly", "yes", "--appendfsync", d.fsync, "--dir"])
                            .arg(d.dir);
                    }
                    None => {
                        c.args(["--appendonly", "no"]);
                    }
                }
                c
            }
        };
        command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .stdin(Stdio::null());
        // SAFETY: the pre-exec hook only calls sched_setaffinity, which is async-signal-safe.
        unsafe { command.pre_exec(move || pin_to(cpu)) };
        let started = Instant::now();
        let child = command.spawn()?;
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let mut server = Server {
            child,
            addr,
            boot: Duration::ZERO,
        };
        loop {
            if ping(addr).is_ok() {
                server.boot = started.elapsed();
                return Ok(server);
            }
            if started.elapsed() > START_TIMEOUT {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{} did not answer PING", kind.label()),
                ));
            }
            if let Some(status) = server.child.try_wait()? {
                return Err(io::Error::other(format!(
                    "{} exited at start: {status}",
                    kind.label()
                )));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// utime + stime of every thread, in microseconds.
    pub fn cpu_time_us(&self) -> io::Result<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid()))?;
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or("", |(_, rest)| rest)
            .split_whitespace()
            .collect();
        let ticks: f64 =
            fields[11].parse::<f64>().unwrap_or(0.0) + fields[12].parse::<f64>().unwrap_or(0.0);
        // SAFETY: sysconf has no preconditions.
        let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        Ok(ticks * 1e6 / per_second)
    }

    /// Resident set size in bytes.
    pub fn rss_bytes(&self) -> io::Result<u64> {
        let statm = std::fs::read_to_string(format!("/proc/{}/statm", self.pid()))?;
        let pages: u64 = statm
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
        Ok(pages * page)
    }

    /// The server's identity from INFO: `wetask 0.1.0` or `redis 7.0.15`.
    pub fn version(&self) -> io::Result<String> {
        let info = command(self.addr, b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")?;
        let field = |name: &str| {
            info.lines().find_map(|l| {
                l.strip_prefix(&format!("{name}:"))
                    .map(|v| v.trim().to_string())
            })
        };
        Ok(match field("wetask_version") {
            Some(v) => format!("wetask {v}"),
            None => format!(
                "redis {}",
                field("redis_version").unwrap_or_else(|| "?".into())
            ),
        })
    }

    pub fn stop(mut self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Sends one command (as RESP words) and returns the reply text.
pub fn ask(addr: SocketAddr, words: &[&str]) -> io::Result<String> {
    let mut bytes = Vec::new();
    wetask_protocol::encode_command(&mut bytes, words);
    command(addr, &bytes)
}

fn ping(addr: SocketAddr) -> io::Result<()> {
    let reply = command(addr, b"PING\r\n")?;
    if reply.starts_with("+PONG") {
        Ok(())
    } else {
        Err(io::Error::other(reply))
    }
}

/// Sends one raw command and returns the reply text (enough for PING and INFO).
fn command(addr: SocketAddr, bytes: &[u8]) -> io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(bytes)?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = stream.read(&mut chunk)?;
        reply.extend_from_slice(&chunk[..n]);
        if n == 0 || complete(&reply) {
            break;
        }
    }
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

/// True once `reply` holds one whole simple or bulk reply.
fn complete(reply: &[u8]) -> bool {
    let Some(end) = reply.windows(2).position(|w| w == b"\r\n") else {
        return false;
    };
    match reply[0] {
        b'$' | b'=' => {
            let len: usize = std::str::from_utf8(&reply[1..end])
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            reply.len() >= end + 2 + len + 2
        }
        _ => true,
    }
}
