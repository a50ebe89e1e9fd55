//! Whole entries in and out of a shard's keyspace, for the cross-shard operations
//! (`server/src/routing/cross.rs`): taken, lent, restored, cloned or put, with what a
//! restored key owes its WATCHers and blocked clients.

use super::*;

impl Shard {
    /// Removes a key and hands its entry over (the first half of a cross-shard move).
    pub fn take_entry(&mut self, db: usize, key: &[u8]) -> Option<Entry> {
        self.touch_key(db, key);
        self.blocked.signal_gone(db, key);
        let now = self.now_ms;
        let taken = self.dbs[db].remove_live(key, now);
        if let Some(journal) = self.journal_turn() {
            crate::persist::journal::ops::put_del(journal, db, key);
        }
        taken
    }

    /// Lends a key's entry to a cross-shard operation's coordinator: removed here without
    /// counting as a change for WATCH (it comes back with [`Shard::restore_entry`]).
    pub fn lend_entry(&mut self, db: usize, key: &[u8]) -> Option<Entry> {
        let now = self.now_ms;
        self.dbs[db].remove_live(key, now)
    }

    /// Takes back a lent entry; `written` says the operation changed it (WATCH then counts
    /// the key as modified).
    pub fn restore_entry(&mut self, db: usize, key: &[u8], entry: Entry, written: bool) {
        if written {
            if let Some(journal) = self.journal_turn() {
                crate::persist::journal::ops::put_put(journal, db, key, &entry);
            }
        }
        self.dbs[db].insert(key, entry);
        if written {
            self.touch_key(db, key);
        }
    }

    /// A cross-shard operation stored `key` here: ready for the waiters of its new value's
    /// kind, and for a blocked XREADGROUP whose stream it replaced.
    pub(super) fn signal_stored(&mut self, db: usize, key: &[u8]) {
        let now = self.now_ms;
        if let Some(type_name) = self.dbs[db].probe_type(key, now) {
            self.blocked.signal_value(db, key, type_name);
        }
        self.blocked.signal_gone(db, key);
    }

    /// A copy of a key's entry (for a cross-shard COPY).
    pub fn clone_entry(&mut self, db: usize, key: &[u8]) -> Option<Entry> {
        let now = self.now_ms;
        self.dbs[db].get(key, now).map(|e| e.to_entry())
    }

    /// Stores an entry handed over from another shard. With `replace` false it refuses
    /// (returns false) when the key exists.
    pub fn put_entry(&mut self, db: usize, key: &[u8], entry: Entry, replace: bool) -> bool {
        let now = self.now_ms;
        if !replace && self.dbs[db].contains(key, now) {
            return false;
        }
        if let Some(journal) = self.journal_turn() {
            crate::persist::journal::ops::put_put(journal, db, key, &entry);
        }
        self.dbs[db].insert(key, entry);
        self.signal_stored(db, key);
        self.touch_key(db, key);
        true
    }
}
