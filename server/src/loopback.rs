//! A blocking RESP connection from one of the server's own helper threads (the metrics
//! scrape, the dashboard) to its own port. The helpers talk to the shards as any client
//! does, so their work is gathered through the mesh and never runs on a shard thread, and
//! ACL applies to them as to anyone. Every exchange has a deadline.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use wetask_protocol::{Frame, FrameDecoder, Limits};

use crate::globals::Globals;

/// The server's own address, as a helper thread reaches it: the bind address, or loopback
/// when it binds every address.
pub fn own_address(globals: &Globals) -> SocketAddr {
    let port = globals.port.load(std::sync::atomic::Ordering::Relaxed);
    let host: std::net::IpAddr = match globals.config.bind.parse() {
        Ok(ip) if !std::net::IpAddr::is_unspecified(&ip) => ip,
        _ => std::net::Ipv4Addr::LOCALHOST.into(),
    };
    (host, port).into()
}

/// Logs a helper's connection in: as `--monitor-user` when it is set, else as the default
/// user with `requirepass` (when there is one).
pub fn log_in(link: &mut Link, globals: &Globals) -> Result<(), String> {
    match &globals.config.monitor_user {
        Some(user) => {
            let password = globals.config.monitor_password.as_deref().unwrap_or("");
            link.request(&["AUTH", user.as_str(), password])?;
        }
        None => {
            let password = globals.requirepass.lock().expect("requirepass").clone();
            if let Some(password) = password {
                link.request(&["AUTH", password.as_str()])?;
            }
        }
    }
    Ok(())
}

/// A helper's connection to the server itself: connected, logged in ([`log_in`]) and named
/// `name` in CLIENT LIST (where its user may set a name), every exchange within `within`.
pub fn helper(globals: &Globals, name: &str, within: Duration) -> Result<Link, String> {
    let mut link = Link::connect(own_address(globals), within)?;
    log_in(&mut link, globals)?;
    let _ = link.request(&["CLIENT", "SETNAME", name]);
    Ok(link)
}

/// Why an exchange with the server failed.
#[derive(Debug)]
pub enum LinkError {
    /// The server answered with an error reply (a refusal, a bad argument): the link goes on.
    Reply(String),
    /// The link broke, or ran past its deadline mid-reply: its state is unknown.
    Broken(String),
}

impl std::fmt::Display for LinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkError::Reply(text) | LinkError::Broken(text) => f.write_str(text),
        }
    }
}

impl From<LinkError> for String {
    fn from(err: LinkError) -> String {
        err.to_string()
    }
}

pub struct Link {
    conn: TcpStream,
    decoder: FrameDecoder,
    buffer: BytesMut,
    deadline: Instant,
}

impl Link {
    /// Connects with `within` as the deadline of the connect and of what follows until
    /// [`Link::set_deadline`] moves it.
    pub fn connect(addr: SocketAddr, within: Duration) -> Result<Link, String> {
        let conn = TcpStream::connect_timeout(&addr, within)
            .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
        let _ = conn.set_nodelay(true);
        let _ = conn.set_write_timeout(Some(within));
        Ok(Link {
            conn,
            decoder: FrameDecoder::new(Limits::default()),
            buffer: BytesMut::new(),
            deadline: Instant::now() + within,
        })
    }

    /// Every exchange from now on must end within `within`.
    pub fn set_deadline(&mut self, within: Duration) {
        self.deadline = Instant::now() + within;
        let _ = self.conn.set_write_timeout(Some(within));
    }

    /// Sends commands without waiting for their replies (a pipeline).
    pub fn send<A: AsRef<[u8]>>(&mut self, commands: &[Vec<A>]) -> Result<(), LinkError> {
        let mut out = Vec::new();
        for args in commands {
            wetask_protocol::encode_command(&mut out, args);
        }
        self.conn
            .write_all(&out)
            .map_err(|e| LinkError::Broken(format!("cannot write to the server: {e}")))
    }

    /// The next reply, error replies included.
    pub fn reply(&mut self) -> Result<Frame, LinkError> {
        let broken = |text: String| Err(LinkError::Broken(text));
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match self.decoder.decode(&mut self.buffer) {
                Ok(Some(frame)) => return Ok(frame),
                Ok(None) => {}
                Err(e) => return broken(format!("malformed reply: {e:?}")),
            }
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return broken("the server did not answer in time".into());
            }
            let _ = self.conn.set_read_timeout(Some(left));
            match self.conn.read(&mut chunk) {
                Ok(0) => return broken("the server closed the connection".into()),
                Ok(n) => self.buffer.extend_from_slice(&chunk[..n]),
                Err(e) => return broken(format!("cannot read from the server: {e}")),
            }
        }
    }

    /// One command and its reply; an error reply is [`LinkError::Reply`] with its text.
    pub fn request<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Frame, LinkError> {
        self.send(&[args.iter().map(|a| a.as_ref()).collect::<Vec<&[u8]>>()])?;
        match self.reply()? {
            Frame::Error(e) => Err(LinkError::Reply(String::from_utf8_lossy(&e).into_owned())),
            frame => Ok(frame),
        }
    }
}

/// TASK.QUEUES: the first `max` queues' names.
pub fn queue_names(link: &mut Link, max: usize) -> Result<Vec<String>, LinkError> {
    Ok(match link.request(&["TASK.QUEUES"])? {
        Frame::Array(items) => items.iter().map(text).take(max).collect(),
        _ => Vec::new(),
    })
}

/// A queue's `TASK.STATS` integer fields, or the refusal.
pub type Stats = Result<BTreeMap<String, i64>, String>;

/// `TASK.STATS` of each queue, pipelined.
pub fn queue_stats(link: &mut Link, queues: &[String]) -> Result<Vec<Stats>, LinkError> {
    let commands: Vec<Vec<&str>> = queues.iter().map(|q| vec!["TASK.STATS", q]).collect();
    link.send(&commands)?;
    let mut out = Vec::with_capacity(queues.len());
    for _ in queues {
        out.push(match link.reply()? {
            Frame::Error(e) => Err(String::from_utf8_lossy(&e).into_owned()),
            frame => Ok(pairs(frame)
                .into_iter()
                .filter_map(|(name, value)| match value {
                    Frame::Integer(n) => Some((name, n)),
                    _ => None,
                })
                .collect()),
        });
    }
    Ok(out)
}

/// A scalar reply as text (lossy for bytes that are not UTF-8); empty for the others.
pub fn text(frame: &Frame) -> String {
    match frame {
        Frame::Bulk(b) | Frame::Simple(b) => String::from_utf8_lossy(b).into_owned(),
        Frame::Verbatim(_, b) => String::from_utf8_lossy(b).into_owned(),
        Frame::Integer(n) => n.to_string(),
        _ => String::new(),
    }
}

/// A scalar reply's bytes (an integer's digits); `None` for nil and the others.
pub fn bytes(frame: &Frame) -> Option<Bytes> {
    match frame {
        Frame::Bulk(b) | Frame::Simple(b) | Frame::Verbatim(_, b) => Some(b.clone()),
        Frame::Integer(n) => Some(Bytes::from(n.to_string())),
        _ => None,
    }
}

/// A map reply (RESP2 pairs or RESP3 map) as (field, value) pairs.
pub fn pairs(frame: Frame) -> Vec<(String, Frame)> {
    match frame {
        Frame::Map(pairs) => pairs.into_iter().map(|(k, v)| (text(&k), v)).collect(),
        Frame::Array(items) => {
            let mut out = Vec::new();
            let mut items = items.into_iter();
            while let (Some(k), Some(v)) = (items.next(), items.next()) {
                out.push((text(&k), v));
            }
            out
        }
        _ => Vec::new(),
    }
}
