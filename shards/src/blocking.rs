//! Which keys of a shard have clients blocked on them (BLPOP, BLMOVE, BZPOPMIN, XREAD …), in
//! the order they blocked, and which of those keys received data since the server last looked.
//!
//! The shard only keeps waiter ids; the server owns what each waiter wants and where its
//! answer goes (`server/src/commands/blocking.rs`). A command that adds to a list, a sorted set or a
//! stream calls [`Blocked::signal`]; after the command the server takes the ready keys and
//! serves their waiters, oldest first, as Redis does in `handleClientsBlockedOnKeys`.

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;

use crate::keyspace::DATABASES;

#[derive(Default)]
pub struct Blocked {
    /// Per database: key -> waiter ids, oldest first. A key with no waiter is removed.
    keys: Vec<HashMap<Bytes, VecDeque<u64>>>,
    /// Keys that got data and have waiters, each listed once, in signal order.
    ready: Vec<(usize, Bytes)>,
    waiting_keys: usize,
}

impl Blocked {
    fn db(&mut self, db: usize) -> &mut HashMap<Bytes, VecDeque<u64>> {
        if self.keys.is_empty() {
            self.keys = (0..DATABASES).map(|_| HashMap::new()).collect();
        }
        &mut self.keys[db]
    }

    /// Queues `waiter` on `key` (last in line).
    pub fn watch(&mut self, db: usize, key: &Bytes, waiter: u64) {
        let queue = self.db(db).entry(key.clone()).or_default();
        let fresh = queue.is_empty();
        if !queue.contains(&waiter) {
            queue.push_back(waiter);
        }
        if fresh {
            self.waiting_keys += 1;
        }
    }

    /// Takes `waiter` off `key`'s line.
    pub fn unwatch(&mut self, db: usize, key: &[u8], waiter: u64) {
        if self.waiting_keys == 0 {
            return;
        }
        let map = self.db(db);
        let Some(queue) = map.get_mut(key) else {
            return;
        };
        queue.retain(|&w| w != waiter);
        if queue.is_empty() {
            map.remove(key);
            self.waiting_keys -= 1;
        }
    }

    /// Notes that `key` may now satisfy a waiter (cheap when nobody waits on anything).
    pub fn signal(&mut self, db: usize, key: &[u8]) {
        if self.waiting_keys == 0 || !self.keys[db].contains_key(key) {
            return;
        }
        if !self.ready.iter().any(|(d, k)| *d == db && k[..] == *key) {
            let key = self.keys[db]
                .get_key_value(key)
                .map(|(k, _)| k.clone())
                .expect("checked above");
            self.ready.push((db, key));
        }
    }

    /// Notes every key of `db` with waiters as possibly ready (SWAPDB brought other data).
    pub fn signal_db(&mut self, db: usize) {
        if self.waiting_keys == 0 {
            return;
        }
        let keys: Vec<Bytes> = self.keys[db].keys().cloned().collect();
        for key in keys {
            self.signal(db, &key);
        }
    }

    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// The keys signalled since the last call, in signal order.
    pub fn take_ready(&mut self) -> Vec<(usize, Bytes)> {
        std::mem::take(&mut self.ready)
    }

    /// The waiters on `key`, oldest first.
    pub fn waiters(&self, db: usize, key: &[u8]) -> Vec<u64> {
        self.keys
            .get(db)
            .and_then(|m| m.get(key))
            .map(|q| q.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Keys with at least one waiter (INFO's `blocking_keys`).
    pub fn waiting_keys(&self) -> usize {
        self.waiting_keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiters_queue_in_order_and_signals_only_count_watched_keys() {
        let mut b = Blocked::default();
        let key = Bytes::from_static(b"k");
        b.signal(0, b"k");
        assert!(!b.has_ready());
        b.watch(0, &key, 7);
        b.watch(0, &key, 3);
        b.watch(0, &key, 7);
        assert_eq!(b.waiters(0, b"k"), vec![7, 3]);
        b.signal(1, b"k");
        b.signal(0, b"other");
        assert!(!b.has_ready());
        b.signal(0, b"k");
        b.signal(0, b"k");
        assert_eq!(b.take_ready(), vec![(0, key.clone())]);
        b.unwatch(0, b"k", 7);
        b.unwatch(0, b"k", 3);
        assert_eq!(b.waiting_keys(), 0);
        assert!(b.waiters(0, b"k").is_empty());
    }
}
