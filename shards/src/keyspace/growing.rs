//! `GrowingIndex`: a hash table of `u32` positions into storage its owner keeps (the
//! keyspace's node vector, its expiries, the task table's slots), searched by the hash of what each
//! position holds, that grows incrementally, as Redis rehashes its dicts.
//!
//! Once a large table is full, a table twice its size takes the new entries, and each call
//! of [`GrowingIndex::migrate`] (the owner makes one after every insert or removal) moves the
//! entries of the next `MIGRATE_STEP` positions over. Growing in one go hashes every entry
//! again while the shard waits, each from cold memory: the slowest of 3M SETs took 365 ms
//! (Redis 3.9 ms), and filling one queue to 2M tasks stalled its shard for up to 514 ms
//! (docs/perf-notes.md, "The job flow's hand-off, allocations and the index's growth").
//!
//! Invariant while growing: every position below the growth's cursor has its entry in the
//! new table; at or above it, an entry may be in either.

use hashbrown::HashTable;

/// A table of fewer entries grows in one go (a pause of well under a millisecond).
#[cfg(not(test))]
const INCREMENTAL_FROM: usize = 4096;
/// Positions whose entries one `migrate` moves to the new table.
#[cfg(not(test))]
const MIGRATE_STEP: u32 = 32;
// Small in tests, so that the owners' tests run through many growths, each over many steps.
#[cfg(test)]
pub(crate) const INCREMENTAL_FROM: usize = 24;
#[cfg(test)]
const MIGRATE_STEP: u32 = 3;

#[derive(Default)]
pub struct GrowingIndex {
    table: HashTable<u32>,
    /// While growing: the full table `table` replaced, emptied by `migrate`.
    old: Option<Old>,
}

struct Old {
    table: HashTable<u32>,
    /// The next position whose entry moves.
    next: u32,
}

impl GrowingIndex {
    /// Entries in both tables.
    pub fn len(&self) -> usize {
        self.table.len() + self.old.as_ref().map_or(0, |old| old.table.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries still in the old table (`None` when not growing).
    pub fn moving(&self) -> Option<usize> {
        self.old.as_ref().map(|old| old.table.len())
    }

    /// The position filed under `hash` that `is` accepts.
    pub fn find(&self, hash: u64, is: impl Fn(u32) -> bool) -> Option<u32> {
        let is = |&p: &u32| is(p);
        match self.table.find(hash, is) {
            Some(&pos) => Some(pos),
            None => self.old.as_ref()?.table.find(hash, is).copied(),
        }
    }

    /// The first position filed under `hash`, unchecked: a prefetch's guess.
    pub fn guess(&self, hash: u64) -> Option<u32> {
        let old = self.old.as_ref().map(|old| &old.table);
        let first = self.table.iter_hash(hash).next();
        first
            .or_else(|| old.and_then(|t| t.iter_hash(hash).next()))
            .copied()
    }

    /// Removes the entry filed under `hash` that `is` accepts; its position.
    pub fn remove(&mut self, hash: u64, is: impl Fn(u32) -> bool) -> Option<u32> {
        let is = |&p: &u32| is(p);
        let entry = match self.table.find_entry(hash, is) {
            Ok(entry) => entry,
            Err(_) => self.old.as_mut()?.table.find_entry(hash, is).ok()?,
        };
        Some(entry.remove().0)
    }

    /// Files `pos`, not yet filed, under `hash`. `hash_of(p)` is the hash of what position
    /// `p` holds (`None`: nothing); `pos` must already hold its entry's item. A full table
    /// starts growing here.
    pub fn insert(&mut self, hash: u64, pos: u32, hash_of: impl Fn(u32) -> Option<u64>) {
        if self.old.is_none()
            && self.table.len() >= INCREMENTAL_FROM
            && self.table.len() >= self.table.capacity()
        {
            let larger = HashTable::with_capacity(self.table.len() * 2);
            let full = std::mem::replace(&mut self.table, larger);
            self.old = Some(Old {
                table: full,
                next: 0,
            });
        }
        self.table
            .insert_unique(hash, pos, |&p| hash_of(p).expect("a filed position"));
    }

    /// The entry filed under `hash` for position `from` now stands for `to` (a removal
    /// that swapped the last item into a hole); `to` must already hold the item.
    pub fn relocate(
        &mut self,
        hash: u64,
        from: u32,
        to: u32,
        hash_of: impl Fn(u32) -> Option<u64>,
    ) {
        if let Some(entry) = self.table.find_mut(hash, |&p| p == from) {
            *entry = to;
            return;
        }
        let old = self.old.as_mut().expect("every position is filed");
        let entry = old
            .table
            .find_entry(hash, |&p| p == from)
            .expect("every position is filed");
        if to < old.next {
            // Below the cursor an entry must be in the new table.
            entry.remove();
            self.table
                .insert_unique(hash, to, |&p| hash_of(p).expect("a filed position"));
        } else {
            *entry.into_mut() = to;
        }
    }

    /// While growing: moves the entries of the next `MIGRATE_STEP` positions (of those below
    /// `end`, the owner's extent) to the new table, and drops the old one once past `end`.
    pub fn migrate(&mut self, end: u32, hash_of: impl Fn(u32) -> Option<u64>) {
        let Some(old) = self.old.as_mut() else {
            return;
        };
        let stop = end.min(old.next.saturating_add(MIGRATE_STEP));
        for pos in old.next..stop {
            let Some(hash) = hash_of(pos) else {
                continue;
            };
            // A position emptied and filled again since the growth began is in the new
            // table only.
            if let Ok(entry) = old.table.find_entry(hash, |&p| p == pos) {
                entry.remove();
                self.table
                    .insert_unique(hash, pos, |&p| hash_of(p).expect("a filed position"));
            }
        }
        old.next = old.next.max(stop);
        if old.next >= end {
            debug_assert!(old.table.is_empty(), "every entry moved");
            self.old = None;
        }
    }

    /// Moves every entry left in the old table (before a bulk load's `reserve`).
    pub fn finish_growth(&mut self, end: u32, hash_of: impl Fn(u32) -> Option<u64>) {
        while self.old.is_some() {
            self.migrate(end, &hash_of);
        }
    }

    /// Makes room for `additional` more entries at once (not while growing: finish first).
    pub fn reserve(&mut self, additional: usize, hash_of: impl Fn(u32) -> Option<u64>) {
        debug_assert!(self.old.is_none(), "finish the growth first");
        self.table
            .reserve(additional, |&p| hash_of(p).expect("a filed position"));
    }

    pub fn clear(&mut self) {
        *self = GrowingIndex::default();
    }

    /// Checks the growth's invariant (tests).
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        if let Some(old) = &self.old {
            assert!(old.table.iter().all(|&p| p >= old.next));
        }
    }
}
