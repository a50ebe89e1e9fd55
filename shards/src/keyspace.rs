//! One database of one shard: the key table, values, and expiry.
//!
//! Keys live in an insertion-indexed map so that a random key, an expiry sample and a SCAN
//! step are O(1) by position. Removal swaps the last entry into the hole; SCAN walks
//! positions from high to low so that a swap only ever moves an unvisited key into a
//! visited position's place as a *duplicate*, never skipping a key present throughout
//! (Redis's SCAN guarantee). Keys with a TTL are also kept in `volatile`, the set that
//! active expiry samples, as Redis samples its `expires` dict.

use bytes::Bytes;
use indexmap::{IndexMap, IndexSet};

use crate::glob::glob_match;
use crate::key::Key;

type Hasher = foldhash::fast::RandomState;

/// The value of a key. Later families add their own variants here.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Str(Bytes),
}

impl Value {
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
        }
    }
}

/// A stored value and its absolute expiry in unix milliseconds (`NO_EXPIRY` for none).
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub value: Value,
    pub expire_at_ms: u64,
}

pub const NO_EXPIRY: u64 = 0;

impl Entry {
    pub fn new(value: Value) -> Self {
        Entry {
            value,
            expire_at_ms: NO_EXPIRY,
        }
    }

    pub fn is_expired(&self, now_ms: u64) -> bool {
        self.expire_at_ms != NO_EXPIRY && self.expire_at_ms <= now_ms
    }
}

#[derive(Default)]
pub struct Db {
    entries: IndexMap<Key, Entry, Hasher>,
    volatile: IndexSet<Key, Hasher>,
    expired_count: u64,
}

impl Db {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn volatile_len(&self) -> usize {
        self.volatile.len()
    }

    /// Keys removed because their TTL passed (lazily or by sampling).
    pub fn expired_count(&self) -> u64 {
        self.expired_count
    }

    /// The live entry for `key`, removing it first if it has expired (lazy expiry).
    pub fn get(&mut self, key: &[u8], now_ms: u64) -> Option<&mut Entry> {
        let index = self.entries.get_index_of(key)?;
        if self.entries[index].is_expired(now_ms) {
            self.remove(key);
            self.expired_count += 1;
            return None;
        }
        Some(&mut self.entries[index])
    }

    pub fn contains(&mut self, key: &[u8], now_ms: u64) -> bool {
        self.get(key, now_ms).is_some()
    }

    /// Stores `entry` under `key`, replacing any old value and its TTL. The key bytes are
    /// copied so the stored key never pins a network read buffer.
    pub fn insert(&mut self, key: &[u8], entry: Entry) {
        let has_ttl = entry.expire_at_ms != NO_EXPIRY;
        match self.entries.get_index_of(key) {
            Some(index) => {
                self.entries[index] = entry;
                if has_ttl {
                    let owned = self.entries.get_index(index).expect("present").0.clone();
                    self.volatile.insert(owned);
                } else {
                    self.volatile.swap_remove(key);
                }
            }
            None => {
                let owned = Key::new(key);
                if has_ttl {
                    self.volatile.insert(owned.clone());
                }
                self.entries.insert(owned, entry);
            }
        }
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        let entry = self.entries.swap_remove(key)?;
        if entry.expire_at_ms != NO_EXPIRY {
            self.volatile.swap_remove(key);
        }
        Some(entry)
    }

    /// Removes a live key; an expired one counts as absent.
    pub fn remove_live(&mut self, key: &[u8], now_ms: u64) -> Option<Entry> {
        let entry = self.remove(key)?;
        if entry.is_expired(now_ms) {
            self.expired_count += 1;
            return None;
        }
        Some(entry)
    }

    /// Sets or clears (`NO_EXPIRY`) the TTL of an existing key.
    pub fn set_expiry(&mut self, key: &[u8], expire_at_ms: u64) {
        let Some((_, owned, entry)) = self.entries.get_full_mut(key) else {
            return;
        };
        entry.expire_at_ms = expire_at_ms;
        if expire_at_ms == NO_EXPIRY {
            self.volatile.swap_remove(key);
        } else {
            self.volatile.insert(owned.clone());
        }
    }

    pub fn clear(&mut self) {
        self.entries = IndexMap::default();
        self.volatile = IndexSet::default();
    }

    /// Samples up to `samples` keys with a TTL and removes the expired ones. Returns
    /// (sampled, expired) so the caller can decide whether to go round again, as Redis's
    /// active expire cycle does.
    pub fn expire_sample(&mut self, now_ms: u64, samples: usize) -> (usize, usize) {
        let mut sampled = 0;
        let mut expired = 0;
        while sampled < samples && !self.volatile.is_empty() {
            let index = fastrand::usize(..self.volatile.len());
            let key = self.volatile.get_index(index).expect("in range").clone();
            sampled += 1;
            let dead = self
                .entries
                .get(key.as_slice())
                .is_some_and(|e| e.is_expired(now_ms));
            if dead {
                self.remove(key.as_slice());
                self.expired_count += 1;
                expired += 1;
            }
        }
        (sampled, expired)
    }

    /// A random live key, trying a bounded number of times to skip expired ones.
    pub fn random_key(&mut self, now_ms: u64) -> Option<Bytes> {
        for _ in 0..100 {
            if self.entries.is_empty() {
                return None;
            }
            let index = fastrand::usize(..self.entries.len());
            let (key, entry) = self.entries.get_index(index).expect("in range");
            if !entry.is_expired(now_ms) {
                return Some(key.to_bytes());
            }
            let key = key.clone();
            self.remove(key.as_slice());
            self.expired_count += 1;
        }
        None
    }

    /// Every live key matching `pattern`.
    pub fn keys(&self, pattern: &[u8], now_ms: u64) -> Vec<Bytes> {
        let all = pattern == b"*";
        self.entries
            .iter()
            .filter(|(key, entry)| {
                !entry.is_expired(now_ms) && (all || glob_match(pattern, key.as_slice()))
            })
            .map(|(key, _)| key.to_bytes())
            .collect()
    }

    /// One SCAN step. `cursor` 0 starts; otherwise it is one past the highest position not yet
    /// visited. Visits about `count` positions, from high to low, and returns the next cursor
    /// (0 when done) and the matching keys.
    pub fn scan(
        &self,
        cursor: u64,
        count: usize,
        filter: &ScanFilter,
        now_ms: u64,
    ) -> (u64, Vec<Bytes>) {
        let len = self.entries.len() as u64;
        let mut upper = if cursor == 0 { len } else { cursor.min(len) };
        let mut keys = Vec::new();
        let mut visited = 0;
        while upper > 0 && visited < count.max(1) {
            upper -= 1;
            visited += 1;
            let (key, entry) = self.entries.get_index(upper as usize).expect("in range");
            if entry.is_expired(now_ms) || !filter.accepts(key.as_slice(), entry) {
                continue;
            }
            keys.push(key.to_bytes());
        }
        (upper, keys)
    }
}

/// SCAN's MATCH and TYPE options.
#[derive(Default, Clone, Debug)]
pub struct ScanFilter {
    pub pattern: Option<Bytes>,
    pub type_name: Option<String>,
}

impl ScanFilter {
    fn accepts(&self, key: &[u8], entry: &Entry) -> bool {
        if let Some(pattern) = &self.pattern {
            if !glob_match(pattern, key) {
                return false;
            }
        }
        match &self.type_name {
            Some(name) => name.eq_ignore_ascii_case(entry.value.type_name()),
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(s: &str) -> Entry {
        Entry::new(Value::Str(Bytes::copy_from_slice(s.as_bytes())))
    }

    #[test]
    fn lazy_expiry_hides_and_removes() {
        let mut db = Db::default();
        db.insert(
            b"k",
            Entry {
                expire_at_ms: 100,
                ..string("v")
            },
        );
        assert_eq!(db.volatile_len(), 1);
        assert!(db.get(b"k", 99).is_some());
        assert!(db.get(b"k", 100).is_none());
        assert_eq!(db.len(), 0);
        assert_eq!(db.volatile_len(), 0);
    }

    #[test]
    fn active_sampling_removes_only_expired() {
        let mut db = Db::default();
        for i in 0..100 {
            let at = if i % 2 == 0 { 50 } else { 500 };
            db.insert(
                format!("k{i}").as_bytes(),
                Entry {
                    expire_at_ms: at,
                    ..string("v")
                },
            );
        }
        db.insert(b"forever", string("v"));
        for _ in 0..50 {
            db.expire_sample(100, 20);
        }
        assert_eq!(db.len(), 51);
        assert_eq!(db.volatile_len(), 50);
    }

    #[test]
    fn scan_sees_every_key_present_throughout_despite_deletes() {
        let mut db = Db::default();
        for i in 0..1000 {
            db.insert(format!("k{i}").as_bytes(), string("v"));
        }
        let mut seen = std::collections::HashSet::new();
        let mut cursor = 0;
        let mut round = 0;
        loop {
            let (next, keys) = db.scan(cursor, 10, &ScanFilter::default(), 0);
            seen.extend(keys);
            // Delete keys that were present from the start, but only odd-numbered ones.
            db.remove(format!("k{}", round * 2 + 1).as_bytes());
            round += 1;
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        for i in (0..1000).step_by(2) {
            assert!(seen.contains(format!("k{i}").as_bytes()), "missed k{i}");
        }
    }
}
