//! `ACL LOG`: the refusals (a command, a key, a channel, a login), newest first. A refusal
//! like one of the last ten within a minute (same reason, context, object and user) counts
//! on that entry instead of adding one, as Redis does; the log keeps `acllog-max-len`.

use std::collections::VecDeque;

use bytes::Bytes;
use wetask_protocol::Frame;

/// Entries closer than this in time are one entry when they match (Redis's 60 s).
const GROUPING_MS: u64 = 60_000;
/// How many of the newest entries a refusal is compared with.
const SCANNED: usize = 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Command,
    Key,
    Channel,
    Auth,
}

impl Reason {
    fn name(self) -> &'static str {
        match self {
            Reason::Command => "command",
            Reason::Key => "key",
            Reason::Channel => "channel",
            Reason::Auth => "auth",
        }
    }
}

/// Where the refused command came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Context {
    Toplevel,
    Multi,
    Lua,
}

impl Context {
    fn name(self) -> &'static str {
        match self {
            Context::Toplevel => "toplevel",
            Context::Multi => "multi",
            Context::Lua => "lua",
        }
    }
}

pub struct Entry {
    count: u64,
    reason: Reason,
    context: Context,
    object: Bytes,
    username: Bytes,
    client_info: String,
    id: u64,
    created_ms: u64,
    updated_ms: u64,
}

#[derive(Default)]
pub struct AclLog {
    entries: VecDeque<Entry>,
    next_id: u64,
}

/// One refusal, for [`AclLog::add`].
pub struct Refusal {
    pub reason: Reason,
    pub context: Context,
    pub object: Bytes,
    pub username: Bytes,
    pub client_info: String,
}

impl AclLog {
    pub fn add(&mut self, refusal: Refusal, now_ms: u64, max_len: usize) {
        let matching = self.entries.iter().take(SCANNED).position(|e| {
            e.reason == refusal.reason
                && e.context == refusal.context
                && e.updated_ms.abs_diff(now_ms) <= GROUPING_MS
                && e.object == refusal.object
                && e.username == refusal.username
        });
        if let Some(at) = matching {
            let mut entry = self.entries.remove(at).expect("found");
            entry.count += 1;
            entry.client_info = refusal.client_info;
            entry.updated_ms = now_ms;
            self.entries.push_front(entry);
            return;
        }
        self.entries.push_front(Entry {
            count: 1,
            reason: refusal.reason,
            context: refusal.context,
            object: refusal.object,
            username: refusal.username,
            client_info: refusal.client_info,
            id: self.next_id,
            created_ms: now_ms,
            updated_ms: now_ms,
        });
        self.next_id += 1;
        self.entries.truncate(max_len);
    }

    pub fn reset(&mut self) {
        self.entries.clear();
    }

    /// The newest `count` entries, as `ACL LOG` answers them (Redis 7.2's ten fields).
    pub fn reply(&self, count: usize, now_ms: u64) -> Frame {
        let text = |s: &str| Frame::Bulk(Bytes::copy_from_slice(s.as_bytes()));
        Frame::Array(
            self.entries
                .iter()
                .take(count)
                .map(|e| {
                    Frame::Map(vec![
                        (text("count"), Frame::Integer(e.count as i64)),
                        (text("reason"), text(e.reason.name())),
                        (text("context"), text(e.context.name())),
                        (text("object"), Frame::Bulk(e.object.clone())),
                        (text("username"), Frame::Bulk(e.username.clone())),
                        (
                            text("age-seconds"),
                            Frame::Double(now_ms.saturating_sub(e.updated_ms) as f64 / 1000.0),
                        ),
                        (text("client-info"), text(&e.client_info)),
                        (text("entry-id"), Frame::Integer(e.id as i64)),
                        (
                            text("timestamp-created"),
                            Frame::Integer(e.created_ms as i64),
                        ),
                        (
                            text("timestamp-last-updated"),
                            Frame::Integer(e.updated_ms as i64),
                        ),
                    ])
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(object: &str) -> Refusal {
        Refusal {
            reason: Reason::Key,
            context: Context::Toplevel,
            object: Bytes::copy_from_slice(object.as_bytes()),
            username: Bytes::from_static(b"u"),
            client_info: String::new(),
        }
    }

    fn counts(log: &AclLog) -> Vec<(String, u64)> {
        log.entries
            .iter()
            .map(|e| (String::from_utf8_lossy(&e.object).into_owned(), e.count))
            .collect()
    }

    #[test]
    fn like_refusals_within_a_minute_count_on_one_entry() {
        let mut log = AclLog::default();
        log.add(refusal("a"), 1_000, 128);
        log.add(refusal("b"), 2_000, 128);
        log.add(refusal("a"), 3_000, 128);
        assert_eq!(counts(&log), [("a".into(), 2), ("b".into(), 1)]);
        log.add(refusal("a"), 3_000 + GROUPING_MS, 128);
        assert_eq!(
            counts(&log)[0],
            ("a".into(), 3),
            "a minute after the last one"
        );
        log.add(refusal("a"), 3_000 + 2 * GROUPING_MS + 1, 128);
        assert_eq!(
            counts(&log).len(),
            3,
            "more than a minute later: a new entry"
        );
    }

    #[test]
    fn the_log_keeps_its_newest_entries() {
        let mut log = AclLog::default();
        for i in 0..20 {
            log.add(refusal(&i.to_string()), 1_000, 5);
        }
        assert_eq!(log.entries.len(), 5);
        assert_eq!(counts(&log)[0].0, "19");
        assert_eq!(log.entries[0].id, 19);
    }
}
