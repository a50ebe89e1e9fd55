//! The stream value: entries keyed by `ms-seq` ids in increasing order, each a list of
//! field/value pairs, the bookkeeping XINFO and XADD need (the last id ever given, how many
//! entries were ever added), and its consumer groups: per group the last delivered id, the
//! pending entries list (who holds which entry since when, delivered how often) and the
//! consumers with the ids each holds.

use std::collections::BTreeMap;

use bytes::Bytes;

pub use super::stream_id::StreamId;

/// What a group's `entries-read` and `lag` are worked out from (Redis's
/// `streamRangeHasTombstones` and `streamEstimateDistanceFromFirstEverEntry`).
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub len: u64,
    pub first: Option<StreamId>,
    pub last_id: StreamId,
    pub max_deleted: StreamId,
    pub entries_added: u64,
}

impl Shape {
    /// True when an entry from `start` on was deleted.
    pub fn has_tombstones_from(&self, start: StreamId) -> bool {
        let Some(first) = self.first else {
            return false;
        };
        if self.max_deleted == StreamId::MIN || first > self.max_deleted {
            return false;
        }
        start <= self.max_deleted
    }

    /// How many entries were ever added up to and including `id`, when that is knowable.
    pub fn entries_read_at(&self, id: StreamId) -> Option<u64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if self.len == 0 && id < self.last_id {
            return Some(self.entries_added);
        }
        if id == self.last_id {
            return Some(self.entries_added);
        }
        if id > self.last_id {
            return None;
        }
        let first = self.first?;
        if self.max_deleted == StreamId::MIN || self.max_deleted < first {
            if id < first {
                return Some(self.entries_added - self.len);
            }
            if id == first {
                return Some(self.entries_added - self.len + 1);
            }
        }
        None
    }
}

/// One entry's field/value pairs, flattened.
pub type Fields = Vec<Bytes>;

/// An entry delivered to a consumer and not yet acknowledged.
#[derive(Clone, Debug, PartialEq)]
pub struct Pending {
    pub consumer: Bytes,
    pub delivered_ms: u64,
    pub deliveries: u64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Consumer {
    /// When it last tried to read or claim (XINFO's `idle`, Redis 7.2's `seen-time`).
    pub seen_ms: u64,
    /// When it last read or claimed something; `None` never (Redis 7.2's `active-time`).
    pub active_ms: Option<u64>,
    pub pending: std::collections::BTreeSet<StreamId>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Group {
    pub last_delivered: StreamId,
    pub entries_read: Option<u64>,
    pub pending: BTreeMap<StreamId, Pending>,
    pub consumers: indexmap::IndexMap<Bytes, Consumer>,
}

impl Group {
    /// The consumer named `name`, created when missing; returns whether it was created.
    pub fn consumer(&mut self, name: &Bytes, now_ms: u64) -> (&mut Consumer, bool) {
        let created = !self.consumers.contains_key(name);
        let consumer = self
            .consumers
            .entry(name.clone())
            .or_insert_with(|| Consumer {
                seen_ms: now_ms,
                active_ms: None,
                pending: Default::default(),
            });
        (consumer, created)
    }

    /// Hands entry `id` to `consumer` (moving it from another consumer's list if claimed).
    pub fn assign(&mut self, id: StreamId, consumer: &Bytes, now_ms: u64, deliveries: u64) {
        if let Some(old) = self.pending.get(&id) {
            let previous = old.consumer.clone();
            if let Some(c) = self.consumers.get_mut(&previous) {
                c.pending.remove(&id);
            }
        }
        self.pending.insert(
            id,
            Pending {
                consumer: consumer.clone(),
                delivered_ms: now_ms,
                deliveries,
            },
        );
        self.consumer(consumer, now_ms).0.pending.insert(id);
    }

    /// Acknowledges `id`; returns whether it was pending.
    pub fn ack(&mut self, id: StreamId) -> bool {
        match self.pending.remove(&id) {
            Some(p) => {
                if let Some(c) = self.consumers.get_mut(&p.consumer) {
                    c.pending.remove(&id);
                }
                true
            }
            None => false,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stream {
    entries: BTreeMap<StreamId, Fields>,
    /// Consumer groups by name, in creation order.
    pub groups: indexmap::IndexMap<Bytes, Group>,
    /// The greatest id ever added (a new id must be greater, even after deletions).
    pub last_id: StreamId,
    /// How many entries were ever added.
    pub entries_added: u64,
    /// The greatest id ever deleted by XDEL (trimming does not count, as in Redis).
    pub max_deleted_id: StreamId,
    /// How Redis would pack the entries into nodes (what `~` trimming removes whole).
    pub nodes: crate::values::stream_nodes::Nodes,
}

impl Stream {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The id XADD gives for `*` at `now_ms`; `None` when the stream is exhausted.
    pub fn auto_id(&self, now_ms: u64) -> Option<StreamId> {
        if now_ms > self.last_id.ms {
            Some(StreamId { ms: now_ms, seq: 0 })
        } else {
            self.last_id.next()
        }
    }

    /// Adds an entry; the caller has checked that `id` is greater than `last_id`.
    pub fn add(&mut self, id: StreamId, fields: Fields) {
        debug_assert!(id > self.last_id || self.entries_added == 0);
        self.nodes.add(id, &fields);
        self.entries.insert(id, fields);
        self.last_id = id;
        self.entries_added += 1;
    }

    /// XDEL of one entry.
    pub fn remove(&mut self, id: StreamId) -> bool {
        let removed = self.entries.remove(&id).is_some();
        if removed {
            self.nodes.remove(id);
            if id > self.max_deleted_id {
                self.max_deleted_id = id;
            }
        }
        removed
    }

    /// Entries with ids in `from..=to`, ascending (or descending with `rev`), at most
    /// `count`.
    pub fn range(
        &self,
        from: StreamId,
        to: StreamId,
        rev: bool,
        count: usize,
    ) -> Vec<(StreamId, &Fields)> {
        if from > to {
            return Vec::new();
        }
        let range = self
            .entries
            .range(from..=to)
            .map(|(id, fields)| (*id, fields));
        if rev {
            range.rev().take(count).collect()
        } else {
            range.take(count).collect()
        }
    }

    pub fn get(&self, id: StreamId) -> Option<&Fields> {
        self.entries.get(&id)
    }

    pub fn last_entry_id(&self) -> Option<StreamId> {
        self.entries.keys().next_back().copied()
    }

    /// The facts Redis's consumer-group counters are estimated from.
    pub fn shape(&self) -> Shape {
        Shape {
            len: self.entries.len() as u64,
            first: self.first_id(),
            last_id: self.last_id,
            max_deleted: self.max_deleted_id,
            entries_added: self.entries_added,
        }
    }

    /// How many entries have ids below `id`.
    pub fn count_below(&self, id: StreamId) -> usize {
        self.entries.range(..id).count()
    }

    pub fn first_id(&self) -> Option<StreamId> {
        self.entries.keys().next().copied()
    }

    /// Trims to at most `maxlen` entries (oldest first), removing at most `limit`; returns
    /// how many went.
    pub fn trim_maxlen(&mut self, maxlen: usize, limit: usize) -> usize {
        let mut removed = 0;
        while self.entries.len() > maxlen && removed < limit {
            let (id, _) = self.entries.pop_first().expect("non-empty");
            self.nodes.remove(id);
            removed += 1;
        }
        removed
    }

    /// Removes entries with ids below `min_id`, at most `limit`; returns how many went.
    pub fn trim_minid(&mut self, min_id: StreamId, limit: usize) -> usize {
        let mut removed = 0;
        while removed < limit {
            match self.entries.first_key_value() {
                Some((&id, _)) if id < min_id => {
                    self.entries.pop_first();
                    self.nodes.remove(id);
                    removed += 1;
                }
                _ => break,
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_order_and_step() {
        assert_eq!(StreamId::parse(b"5-3", 0), Some(StreamId { ms: 5, seq: 3 }));
        assert_eq!(StreamId::parse(b"5", 9), Some(StreamId { ms: 5, seq: 9 }));
        assert_eq!(StreamId::parse(b"5-", 0), None);
        assert_eq!(StreamId::parse(b"-5", 0), None);
        assert_eq!(StreamId::parse(b"a-1", 0), None);
        assert!(StreamId { ms: 1, seq: 9 } < StreamId { ms: 2, seq: 0 });
        assert_eq!(
            StreamId {
                ms: 1,
                seq: u64::MAX
            }
            .next(),
            Some(StreamId { ms: 2, seq: 0 })
        );
        assert_eq!(StreamId::MIN.prev(), None);
        let mut s = Stream::default();
        assert_eq!(s.auto_id(7), Some(StreamId { ms: 7, seq: 0 }));
        s.add(StreamId { ms: 7, seq: 0 }, vec![]);
        assert_eq!(s.auto_id(7), Some(StreamId { ms: 7, seq: 1 }));
        assert_eq!(
            s.auto_id(3),
            Some(StreamId { ms: 7, seq: 1 }),
            "never backwards"
        );
    }
}
