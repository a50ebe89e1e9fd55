//! Test support: start the real `wetask` binary on a free port and talk RESP to it.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use wetask_protocol::{encode, Frame, FrameDecoder, Protocol};

pub struct Server {
    pub child: Child,
    pub port: u16,
    /// Every log line the server printed so far.
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// The data directory made for this server (removed when it is dropped), unless the
    /// test passed its own `--dir` or `--appendonly`.
    own_dir: Option<std::path::PathBuf>,
}

/// A fresh, empty directory under the system's temporary one.
pub fn temp_dir(what: &str) -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "wetask-{what}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temporary directory");
    dir
}

impl Server {
    pub fn start(args: &[&str]) -> Server {
        Server::start_with_env(args, &[])
    }

    /// As [`Server::start`], with these variables in the server's environment.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Server {
        // $WETASK_TEST_WRAPPER runs the server under a tool (`gdb -batch -ex run -ex bt
        // --args`, `valgrind`) when chasing a crash.
        let wrapper = std::env::var("WETASK_TEST_WRAPPER").unwrap_or_default();
        let mut words = wrapper.split_whitespace();
        let mut command = match words.next() {
            Some(tool) => {
                let mut command = Command::new(tool);
                command.args(words).arg(env!("CARGO_BIN_EXE_wetask"));
                command
            }
            None => Command::new(env!("CARGO_BIN_EXE_wetask")),
        };
        // Each server journals into its own directory (durability is on by default).
        let own_dir =
            (!args.iter().any(|a| *a == "--dir" || *a == "--appendonly")).then(|| temp_dir("data"));
        if let Some(dir) = &own_dir {
            command.arg("--dir").arg(dir);
        }
        let mut child = command
            .args(["--port", "0", "--log-level"])
            .arg(std::env::var("WETASK_TEST_LOG_LEVEL").unwrap_or_else(|_| "info".into()))
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start wetask");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        // The lines before "listening on" are kept too (start-up's own reports).
        let mut early = Vec::new();
        let port = loop {
            let line = lines
                .next()
                .expect("wetask exited before listening")
                .expect("log line");
            early.push(line.clone());
            if let Some(rest) = line.split("listening on ").nth(1) {
                let addr = rest.split_whitespace().next().expect("address");
                break addr.rsplit(':').next().unwrap().parse().expect("port");
            }
        };
        // Keep draining the log so the server never blocks on a full pipe; keep it in
        // $WETASK_TEST_LOG_DIR/wetask-PORT.log when that is set (for chasing a flaky test).
        let mut keep = std::env::var_os("WETASK_TEST_LOG_DIR").map(|dir| {
            let path = std::path::Path::new(&dir).join(format!("wetask-{port}.log"));
            std::fs::File::create(path).expect("test log file")
        });
        let log = std::sync::Arc::new(std::sync::Mutex::new(early));
        let kept = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if let Some(file) = keep.as_mut() {
                    let _ = writeln!(file, "{line}");
                }
                kept.lock().unwrap().push(line);
            }
        });
        Server {
            child,
            port,
            log,
            own_dir,
        }
    }

    /// The log lines printed so far that contain `needle`.
    pub fn log_lines(&self, needle: &str) -> Vec<String> {
        let log = self.log.lock().unwrap();
        log.iter().filter(|l| l.contains(needle)).cloned().collect()
    }

    /// Waits (up to 10 s) for a log line containing `needle`.
    pub fn wait_log(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(line) = self.log_lines(needle).pop() {
                return line;
            }
            assert!(Instant::now() < deadline, "no log line with {needle:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn client(&self) -> Client {
        let mut client = Client::connect(self.port);
        client.server_pid = Some(self.child.id());
        client
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.wait()
    }

    pub fn wait(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "server did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = &self.own_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

pub struct Client {
    pub stream: TcpStream,
    decoder: FrameDecoder,
    buf: BytesMut,
    pub protocol: Protocol,
    /// The server's process, when known: a reply that never comes prints its state.
    pub server_pid: Option<u32>,
}

impl Client {
    pub fn connect(port: u16) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.set_nodelay(true).unwrap();
        Client {
            stream,
            decoder: FrameDecoder::default(),
            buf: BytesMut::new(),
            protocol: Protocol::Resp2,
            server_pid: None,
        }
    }

    pub fn send(&mut self, args: &[&[u8]]) {
        let frame = Frame::Array(
            args.iter()
                .map(|a| Frame::Bulk(bytes::Bytes::copy_from_slice(a)))
                .collect(),
        );
        let mut out = Vec::new();
        encode(&mut out, &frame, Protocol::Resp2);
        self.stream.write_all(&out).expect("write");
    }

    /// Writes raw bytes. Errors are ignored: a server that closes on bad input may reset
    /// the connection before all of a large hostile write is taken.
    pub fn raw(&mut self, bytes: &[u8]) {
        let _ = self.stream.write_all(bytes);
    }

    /// The next reply, or None when the server closed the connection.
    pub fn read(&mut self) -> Option<Frame> {
        self.try_read().unwrap_or_else(|e| {
            let state = self.server_pid.map(|pid| self.diagnose(pid));
            panic!("read failed: {e}\n{}", state.unwrap_or_default())
        })
    }

    /// What a reply that never came left behind: the server's threads (state, kernel wait
    /// channel), its io_uring rings (heads, tails, overflow) and this connection's socket on
    /// the server side (bytes queued in each direction). Tells a request stuck in the kernel
    /// from one the server took and did not answer.
    pub fn diagnose(&self, pid: u32) -> String {
        let mut out = format!("--- server {pid} at the timeout ---\n");
        // $WETASK_TEST_GDB: every thread's stack too (gdb attaches to the live server).
        if std::env::var_os("WETASK_TEST_GDB").is_some() {
            if let Ok(stacks) = std::process::Command::new("gdb")
                .args([
                    "-p",
                    &pid.to_string(),
                    "-batch",
                    "-ex",
                    "thread apply all bt",
                ])
                .output()
            {
                out += &String::from_utf8_lossy(&stacks.stdout);
            }
        }
        let read = |path: String| std::fs::read_to_string(path).unwrap_or_default();
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
            for task in tasks.flatten() {
                let dir = task.path().display().to_string();
                let stat = read(format!("{dir}/stat"));
                let state = stat.rsplit(") ").next().unwrap_or("").split(' ').next();
                out += &format!(
                    "thread {} {}: state {} wchan {}\n",
                    task.file_name().to_string_lossy(),
                    read(format!("{dir}/comm")).trim(),
                    state.unwrap_or("?"),
                    read(format!("{dir}/wchan")).trim()
                );
            }
        }
        if let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
            for fd in fds.flatten() {
                // An eventfd shows its count, a ring its heads, tails and overflow.
                const RING_FIELDS: &[&str] = &[
                    "SqHead",
                    "SqTail",
                    "CachedSqHead",
                    "CqHead",
                    "CqTail",
                    "CachedCqTail",
                    "SQEs",
                    "CQEs",
                    "CqOverflowList",
                ];
                let target = std::fs::read_link(fd.path()).unwrap_or_default();
                let target = target.to_string_lossy();
                let (kind, fields): (&str, &[&str]) = if target.contains("eventfd") {
                    ("eventfd", &["eventfd-count"])
                } else if target.contains("io_uring") {
                    ("ring fd", RING_FIELDS)
                } else {
                    continue;
                };
                let name = fd.file_name().to_string_lossy().into_owned();
                let info = read(format!("/proc/{pid}/fdinfo/{name}"));
                let wanted: Vec<&str> = info
                    .lines()
                    .filter(|l| fields.iter().any(|k| l.starts_with(k)))
                    .collect();
                out += &format!("{kind} {name}: {}\n", wanted.join(" "));
            }
        }
        if let (Ok(local), Ok(peer)) = (self.stream.local_addr(), self.stream.peer_addr()) {
            // /proc/net/tcp: "sl local rem st tx_queue:rx_queue ...", ports in hex.
            let server_side = format!(":{:04X}", peer.port());
            let client_side = format!(":{:04X}", local.port());
            for line in read("/proc/net/tcp".into()).lines() {
                let cols: Vec<&str> = line.split_whitespace().collect();
                if cols.len() > 4
                    && cols[1].ends_with(&server_side)
                    && cols[2].ends_with(&client_side)
                {
                    out += &format!(
                        "server socket: state {} tx:rx queued {}\n",
                        cols[3], cols[4]
                    );
                }
            }
            // What the shards say they wait on, asked on a fresh connection (which may get
            // no answer either: a short timeout).
            if let Ok(mut probe) = TcpStream::connect(peer) {
                let _ = probe.set_read_timeout(Some(Duration::from_secs(3)));
                let _ = probe.write_all(b"INFO shards\r\nCLIENT LIST\r\n");
                let mut text = Vec::new();
                let mut chunk = [0u8; 16384];
                while let Ok(n) = std::io::Read::read(&mut probe, &mut chunk) {
                    if n == 0 {
                        break;
                    }
                    text.extend_from_slice(&chunk[..n]);
                }
                out += &String::from_utf8_lossy(&text).replace("\r\n", "\n");
            }
        }
        out
    }

    /// The next reply, None when the server closed the connection, or the read error (a
    /// timeout: no reply within the read timeout).
    pub fn try_read(&mut self) -> std::io::Result<Option<Frame>> {
        Ok(loop {
            match self.decoder.decode(&mut self.buf) {
                Ok(Some(frame)) => break Some(frame),
                Ok(None) => {}
                Err(e) => {
                    let head = &self.buf[..self.buf.len().min(200)];
                    return Err(std::io::Error::other(format!(
                        "invalid reply ({e:?}): {:?}",
                        String::from_utf8_lossy(head)
                    )));
                }
            }
            let mut chunk = [0u8; 16384];
            match self.stream.read(&mut chunk) {
                Ok(0) => break None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break None,
                Err(e) => return Err(e),
            }
        })
    }

    /// Sends a command written as space-separated words and returns its reply.
    pub fn cmd(&mut self, line: &str) -> Frame {
        let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        self.send(&args);
        self.read().expect("a reply")
    }

    pub fn cmd_args(&mut self, args: &[&[u8]]) -> Frame {
        self.send(args);
        self.read().expect("a reply")
    }

    pub fn closed(&mut self) -> bool {
        self.read().is_none()
    }
}

/// A field of a RESP2 flat map (TASK.GET, TASK.STATS …).
pub fn field(frame: &Frame, name: &str) -> Frame {
    let Frame::Array(items) = frame else {
        panic!("expected a flat map, got {frame:?}")
    };
    items
        .chunks(2)
        .find(|pair| pair[0] == bulk(name))
        .map(|pair| pair[1].clone())
        .unwrap_or_else(|| panic!("no field {name} in {frame:?}"))
}

pub fn bulk(s: &str) -> Frame {
    Frame::Bulk(bytes::Bytes::copy_from_slice(s.as_bytes()))
}

pub fn int(n: i64) -> Frame {
    Frame::Integer(n)
}

pub fn ok() -> Frame {
    Frame::ok()
}

pub fn err(s: &str) -> Frame {
    Frame::error(s)
}

pub fn array(items: Vec<Frame>) -> Frame {
    Frame::Array(items)
}

/// Bulk strings of an array reply, sorted.
pub fn sorted_strings(frame: Frame) -> Vec<String> {
    let Frame::Array(items) = frame else {
        panic!("not an array: {frame:?}")
    };
    let mut out: Vec<String> = items
        .into_iter()
        .map(|f| String::from_utf8(f.as_bytes().expect("string").to_vec()).unwrap())
        .collect();
    out.sort();
    out
}

/// Runs a scenario on each server kind: io_uring with two shards and with one, and the
/// glommio fallback with two. Printed only when a scenario fails: which kind it was.
pub fn each_server(scenario: fn(&Server)) {
    for args in [
        &["--shards", "2"][..],
        &["--shards", "1"][..],
        &["--shards", "2", "--io", "glommio"][..],
    ] {
        let server = Server::start(args);
        println!("server {args:?} on port {}", server.port);
        scenario(&server);
    }
}

/// A key named `prefix…` that lives on shard `shard` of two.
pub fn key_on(prefix: &str, shard: usize) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|k| wetask_shards::shard_of(k.as_bytes(), 2) == shard)
        .expect("some key hashes there")
}

/// Waits until the server reports `n` clients parked in blocking commands (INFO clients'
/// `blocked_clients`), so a test can order what happens next after them.
pub fn wait_blocked(server: &Server, n: usize) {
    let mut c = server.client();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let blocked = info_field(&mut c, "clients", "blocked_clients") as usize;
        if blocked >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "only {blocked} of {n} clients blocked"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A numeric field of `INFO section`, e.g. `info_field(c, "memory", "used_memory")`.
pub fn info_field(c: &mut Client, section: &str, field: &str) -> u64 {
    let Frame::Bulk(text) = c.cmd(&format!("INFO {section}")) else {
        panic!("INFO {section} failed")
    };
    String::from_utf8_lossy(&text)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")).map(str::to_string))
        .unwrap_or_else(|| panic!("no {field} in INFO {section}"))
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{field} is not a number"))
}
