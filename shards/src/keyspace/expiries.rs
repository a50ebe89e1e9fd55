//! `Expiries`: the keyspace's side table of keys with a TTL and their expiry times, what
//! active expiry and the `volatile-*` eviction policies sample (Redis's `expires` dict).
//!
//! Entries sit densely in a vector, so a random one is one index away, and a
//! [`GrowingIndex`] of their positions finds a key's entry by its hash. The index grows a
//! step at a time, as the keyspace's own table does: an `IndexMap` here grew in one go, and
//! the slowest of 3M `SET key v EX 10000` took 89–94 ms against Redis's 4.5–5 ms
//! (docs/perf-notes.md, "The keyspace's expiries grow a step at a time"). Each entry keeps
//! its key's hash, so moving it to the larger table reads no key.

use std::hash::BuildHasher;

use crate::hashing::Hasher;
use crate::keyspace::growing::GrowingIndex;
use crate::values::key::Key;

struct Expiry {
    hash: u64,
    key: Key,
    at_ms: u64,
}

#[derive(Default)]
pub struct Expiries {
    entries: Vec<Expiry>,
    index: GrowingIndex,
    hasher: Hasher,
}

impl Expiries {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The expiry of `key`, if it has one.
    pub fn get(&self, key: &[u8]) -> Option<u64> {
        self.position(key).map(|pos| self.entries[pos].at_ms)
    }

    #[cfg(test)]
    pub fn contains_key(&self, key: &[u8]) -> bool {
        self.position(key).is_some()
    }

    /// The key and expiry at `index` (below `len`): a random sample's pick.
    pub fn get_index(&self, index: usize) -> Option<(&[u8], u64)> {
        self.entries
            .get(index)
            .map(|entry| (entry.key.as_slice(), entry.at_ms))
    }

    /// Sets `key`'s expiry, adding it when it has none yet.
    pub fn set(&mut self, key: &[u8], at_ms: u64) {
        let hash = self.hasher.hash_one(key);
        if let Some(pos) = self.find(hash, key) {
            self.entries[pos].at_ms = at_ms;
            return;
        }
        let pos = self.entries.len();
        self.entries.push(Expiry {
            hash,
            key: Key::new(key),
            at_ms,
        });
        self.index
            .insert(hash, pos as u32, Self::hash_at(&self.entries));
        self.migrate();
    }

    /// Takes `key`'s expiry out; the last entry moves into its place.
    pub fn remove(&mut self, key: &[u8]) -> Option<u64> {
        let hash = self.hasher.hash_one(key);
        let entries = &self.entries;
        let pos =
            self.index
                .remove(hash, |p| entries[p as usize].key.as_slice() == key)? as usize;
        let last = self.entries.len() - 1;
        let removed = self.entries.swap_remove(pos);
        if pos != last {
            let moved = self.entries[pos].hash;
            self.index
                .relocate(moved, last as u32, pos as u32, Self::hash_at(&self.entries));
        }
        self.migrate();
        Some(removed.at_ms)
    }

    pub fn clear(&mut self) {
        self.entries = Vec::new();
        self.index.clear();
    }

    fn position(&self, key: &[u8]) -> Option<usize> {
        self.find(self.hasher.hash_one(key), key)
    }

    fn find(&self, hash: u64, key: &[u8]) -> Option<usize> {
        let entries = &self.entries;
        self.index
            .find(hash, |p| entries[p as usize].key.as_slice() == key)
            .map(|p| p as usize)
    }

    /// The hash kept with each position's entry, for the index's growth.
    fn hash_at(entries: &[Expiry]) -> impl Fn(u32) -> Option<u64> + '_ {
        move |pos| entries.get(pos as usize).map(|entry| entry.hash)
    }

    /// Moves a few entries to the growing index (after every insert or removal).
    fn migrate(&mut self) {
        let end = self.entries.len() as u32;
        self.index.migrate(end, Self::hash_at(&self.entries));
    }

    /// Checks that the index and the entries agree (tests).
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        assert_eq!(self.index.len(), self.entries.len());
        self.index.check_invariants();
        for (pos, entry) in self.entries.iter().enumerate() {
            assert_eq!(entry.hash, self.hasher.hash_one(entry.key.as_slice()));
            assert_eq!(self.position(entry.key.as_slice()), Some(pos));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;
    use crate::keyspace::growing::INCREMENTAL_FROM;

    #[derive(Clone, Debug)]
    enum Op {
        Set(u16, u64),
        Remove(u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Keys from a small range, so removals and updates hit, and long enough ones to
        // be stored on the heap as well as inline.
        prop_oneof![
            3 => (0u16..200, 1u64..1000).prop_map(|(k, at)| Op::Set(k, at)),
            1 => (0u16..200).prop_map(Op::Remove),
        ]
    }

    fn key(k: u16) -> Vec<u8> {
        if k.is_multiple_of(7) {
            format!("a-longer-key-that-lives-on-the-heap:{k}").into_bytes()
        } else {
            format!("k{k}").into_bytes()
        }
    }

    proptest! {
        /// Any sequence of sets and removals, across many growths of the index, leaves the
        /// same expiries as a plain map, each found, each sampled at one index.
        #[test]
        fn expiries_agree_with_a_map(ops in proptest::collection::vec(op(), 1..600)) {
            let mut expiries = Expiries::default();
            let mut model: HashMap<Vec<u8>, u64> = HashMap::new();
            for op in ops {
                match op {
                    Op::Set(k, at) => {
                        expiries.set(&key(k), at);
                        model.insert(key(k), at);
                    }
                    Op::Remove(k) => {
                        prop_assert_eq!(expiries.remove(&key(k)), model.remove(&key(k)));
                    }
                }
                expiries.check_invariants();
            }
            prop_assert_eq!(expiries.len(), model.len());
            for (k, &at) in &model {
                prop_assert_eq!(expiries.get(k), Some(at));
            }
            let mut sampled: Vec<_> = (0..expiries.len())
                .map(|i| expiries.get_index(i).map(|(k, at)| (k.to_vec(), at)).unwrap())
                .collect();
            sampled.sort();
            let mut expected: Vec<_> = model.into_iter().collect();
            expected.sort();
            prop_assert_eq!(sampled, expected);
        }
    }

    #[test]
    fn the_index_grows_a_step_at_a_time() {
        let mut expiries = Expiries::default();
        let mut grew = false;
        for k in 0..(INCREMENTAL_FROM as u64 * 40) {
            expiries.set(format!("key:{k}").as_bytes(), k + 1);
            if let Some(moving) = expiries.index.moving() {
                // A growth never moves everything in the insert that starts it.
                grew |= moving > 0;
            }
            expiries.check_invariants();
        }
        assert!(grew, "the index grew incrementally at least once");
        for k in (0..(INCREMENTAL_FROM as u64 * 40)).step_by(3) {
            assert_eq!(expiries.remove(format!("key:{k}").as_bytes()), Some(k + 1));
            expiries.check_invariants();
        }
        assert_eq!(expiries.get(b"key:1"), Some(2));
        assert_eq!(expiries.get(b"key:0"), None);
        expiries.clear();
        assert!(expiries.is_empty());
        assert_eq!(expiries.get(b"key:1"), None);
    }
}
