//! What a scrape reads, over one loopback connection to the server's own port, as
//! redis_exporter reads a Redis: `INFO all`, the queues (`TASK.QUEUES`, then `TASK.STATS
//! … LATENCY` for each, pipelined), and the workers (`TASK.WORKERS`). The commands gather
//! from every shard through the mesh as any client's do, so a scrape never runs on a shard
//! thread; a deadline bounds the whole exchange.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use wetask_protocol::{Frame, FrameDecoder, Limits};

/// The whole scrape's exchange must finish within this.
pub const DEADLINE: Duration = Duration::from_secs(5);
/// Queues beyond this many are left out of one scrape (their families would swamp it).
pub const QUEUES_MAX: usize = 10_000;

/// One queue's numbers (`TASK.STATS queue LATENCY`).
#[derive(Debug, Default)]
pub struct QueueReport {
    pub fields: BTreeMap<String, i64>,
    pub bounds_ms: Vec<i64>,
    pub waiting: Vec<i64>,
    pub running: Vec<i64>,
}

/// Everything one scrape read.
#[derive(Debug, Default)]
pub struct Scrape {
    /// INFO's fields by section (lower case), in order.
    pub info: BTreeMap<String, Vec<(String, String)>>,
    pub queues: Vec<(String, QueueReport)>,
    pub workers: usize,
}

struct Link {
    conn: TcpStream,
    decoder: FrameDecoder,
    buffer: BytesMut,
    deadline: Instant,
}

impl Link {
    fn send(&mut self, commands: &[Vec<String>]) -> Result<(), String> {
        let mut out = Vec::new();
        for args in commands {
            wetask_protocol::encode_command(&mut out, args);
        }
        self.conn
            .write_all(&out)
            .map_err(|e| format!("cannot write to the server: {e}"))
    }

    fn reply(&mut self) -> Result<Frame, String> {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match self.decoder.decode(&mut self.buffer) {
                Ok(Some(frame)) => return Ok(frame),
                Ok(None) => {}
                Err(e) => return Err(format!("malformed reply: {e:?}")),
            }
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err("the scrape ran past its deadline".into());
            }
            let _ = self.conn.set_read_timeout(Some(left));
            match self.conn.read(&mut chunk) {
                Ok(0) => return Err("the server closed the connection".into()),
                Ok(n) => self.buffer.extend_from_slice(&chunk[..n]),
                Err(e) => return Err(format!("cannot read from the server: {e}")),
            }
        }
    }

    fn request(&mut self, args: &[&str]) -> Result<Frame, String> {
        self.send(&[args.iter().map(|s| s.to_string()).collect()])?;
        match self.reply()? {
            Frame::Error(e) => Err(String::from_utf8_lossy(&e).into_owned()),
            frame => Ok(frame),
        }
    }
}

fn text(frame: &Frame) -> String {
    match frame {
        Frame::Bulk(b) | Frame::Simple(b) => String::from_utf8_lossy(b).into_owned(),
        Frame::Verbatim(_, b) => String::from_utf8_lossy(b).into_owned(),
        Frame::Integer(n) => n.to_string(),
        _ => String::new(),
    }
}

/// INFO's text as fields by section.
pub fn parse_info(info: &str) -> BTreeMap<String, Vec<(String, String)>> {
    let mut sections: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    let mut section = String::new();
    for line in info.lines() {
        if let Some(name) = line.strip_prefix("# ") {
            section = name.trim().to_ascii_lowercase();
        } else if let Some((key, value)) = line.split_once(':') {
            sections
                .entry(section.clone())
                .or_default()
                .push((key.to_string(), value.trim().to_string()));
        }
    }
    sections
}

/// A map reply (RESP2 pairs or RESP3 map) as (field, value) pairs.
fn pairs(frame: Frame) -> Vec<(String, Frame)> {
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

fn integers(frame: &Frame) -> Vec<i64> {
    match frame {
        Frame::Array(items) => items
            .iter()
            .map(|i| match i {
                Frame::Integer(n) => *n,
                _ => 0,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn queue_report(frame: Frame) -> QueueReport {
    let mut report = QueueReport::default();
    for (name, value) in pairs(frame) {
        match (name.as_str(), &value) {
            ("bucket_bounds_ms", v) => report.bounds_ms = integers(v),
            ("waiting_buckets", v) => report.waiting = integers(v),
            ("running_buckets", v) => report.running = integers(v),
            (_, Frame::Integer(n)) => {
                report.fields.insert(name, *n);
            }
            _ => {}
        }
    }
    report
}

/// Reads one scrape from the server at `addr`, logging in with `password` when the default
/// user needs one.
pub fn scrape(addr: std::net::SocketAddr, password: Option<&str>) -> Result<Scrape, String> {
    let deadline = Instant::now() + DEADLINE;
    let conn = TcpStream::connect_timeout(&addr, DEADLINE)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    let _ = conn.set_nodelay(true);
    let _ = conn.set_write_timeout(Some(DEADLINE));
    let mut link = Link {
        conn,
        decoder: FrameDecoder::new(Limits::default()),
        buffer: BytesMut::new(),
        deadline,
    };
    if let Some(password) = password {
        link.request(&["AUTH", password])?;
    }
    link.request(&["CLIENT", "SETNAME", "wetask-metrics"])?;
    let info = text(&link.request(&["INFO", "all"])?);
    let names: Vec<String> = match link.request(&["TASK.QUEUES"])? {
        Frame::Array(items) => items.iter().map(text).take(QUEUES_MAX).collect(),
        _ => Vec::new(),
    };
    let stats: Vec<Vec<String>> = names
        .iter()
        .map(|q| vec!["TASK.STATS".into(), q.clone(), "LATENCY".into()])
        .collect();
    link.send(&stats)?;
    let mut queues = Vec::with_capacity(names.len());
    for name in names {
        let report = match link.reply()? {
            Frame::Error(e) => return Err(String::from_utf8_lossy(&e).into_owned()),
            frame => queue_report(frame),
        };
        queues.push((name, report));
    }
    let workers = match link.request(&["TASK.WORKERS"])? {
        Frame::Array(items) => items.len(),
        Frame::Map(pairs) => pairs.len(),
        _ => 0,
    };
    Ok(Scrape {
        info: parse_info(&info),
        queues,
        workers,
    })
}

/// The value of `key` in a `a=1,b=2` field (commandstats, keyspace).
pub fn subfield(value: &str, key: &str) -> Option<f64> {
    value
        .split(',')
        .filter_map(|part| part.split_once('='))
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_is_read_by_section() {
        let info = parse_info("# Server\r\nredis_version:7.2.4\r\n\r\n# Keyspace\r\ndb0:keys=3,expires=1,avg_ttl=0\r\n");
        assert_eq!(info["server"], [("redis_version".into(), "7.2.4".into())]);
        let db0 = &info["keyspace"][0].1;
        assert_eq!(subfield(db0, "keys"), Some(3.0));
        assert_eq!(subfield(db0, "expires"), Some(1.0));
    }
}
