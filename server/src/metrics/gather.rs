//! What a scrape reads, over one loopback connection to the server's own port, as
//! redis_exporter reads a Redis: `INFO all`, the queues (`TASK.QUEUES`, then `TASK.STATS
//! … LATENCY` for each, pipelined), and the workers (`TASK.WORKERS`). The commands gather
//! from every shard through the mesh as any client's do, so a scrape never runs on a shard
//! thread; a deadline bounds the whole exchange.

use std::collections::BTreeMap;
use std::time::Duration;

use wetask_protocol::Frame;

use crate::loopback::{pairs, text};

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

/// Reads one scrape from the server itself, logged in as `--monitor-user` or the default
/// user.
pub fn scrape(globals: &crate::globals::Globals) -> Result<Scrape, String> {
    let mut link = crate::loopback::helper(globals, "wetask-metrics", DEADLINE)?;
    let info = text(&link.request(&["INFO", "all"])?);
    let names = crate::loopback::queue_names(&mut link, QUEUES_MAX)?;
    let stats: Vec<Vec<&str>> = names
        .iter()
        .map(|q| vec!["TASK.STATS", q.as_str(), "LATENCY"])
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
