//! The lease index by owner: which tasks each client or worker holds, so that its
//! connection's end (or its worker's GRACE running out) hands them back.
//!
//! A worker's loop holds one task at a time, so an owner's leases start as a single id kept
//! inline and become a hash set only from the second: a lease and its ACK then cost no
//! allocation and no hashing of the id (docs/perf-notes.md, "The job flow's hand-off").

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use bytes::Bytes;

use super::Hasher;

/// Notes `id` as leased to `owner` in the owner index.
pub(super) fn index(by_owner: &mut HashMap<u64, OwnerLeases, Hasher>, owner: u64, id: Bytes) {
    match by_owner.entry(owner) {
        Entry::Occupied(mut leases) => leases.get_mut().insert(id),
        Entry::Vacant(slot) => {
            slot.insert(OwnerLeases::One(id));
        }
    }
}

/// The ids leased to one owner (never empty: an owner with none has no entry).
#[derive(Debug)]
pub(super) enum OwnerLeases {
    One(Bytes),
    Many(HashSet<Bytes, Hasher>),
}

impl OwnerLeases {
    pub(super) fn insert(&mut self, id: Bytes) {
        match self {
            OwnerLeases::One(held) if *held == id => {}
            OwnerLeases::One(held) => {
                let mut ids = HashSet::with_capacity_and_hasher(2, Hasher::default());
                ids.insert(std::mem::take(held));
                ids.insert(id);
                *self = OwnerLeases::Many(ids);
            }
            OwnerLeases::Many(ids) => {
                ids.insert(id);
            }
        }
    }

    /// Removes `id`; true when the owner holds nothing more (its entry should go).
    pub(super) fn remove(&mut self, id: &[u8]) -> bool {
        match self {
            OwnerLeases::One(held) => held == id,
            OwnerLeases::Many(ids) => {
                ids.remove(id);
                ids.is_empty()
            }
        }
    }

    pub(super) fn len(&self) -> usize {
        match self {
            OwnerLeases::One(_) => 1,
            OwnerLeases::Many(ids) => ids.len(),
        }
    }

    #[cfg(test)]
    pub(super) fn contains(&self, id: &[u8]) -> bool {
        match self {
            OwnerLeases::One(held) => held == id,
            OwnerLeases::Many(ids) => ids.contains(id),
        }
    }

    /// The ids, in id order (not the set's seeded hash order: replays must not depend on it).
    pub(super) fn into_sorted(self) -> Vec<Bytes> {
        match self {
            OwnerLeases::One(id) => vec![id],
            OwnerLeases::Many(ids) => {
                let mut ids: Vec<Bytes> = ids.into_iter().collect();
                ids.sort_unstable();
                ids
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn one_lease_then_many_then_none() {
        let mut leases = OwnerLeases::One(id("a"));
        leases.insert(id("a"));
        assert_eq!(leases.len(), 1);
        leases.insert(id("c"));
        leases.insert(id("b"));
        assert_eq!(leases.len(), 3);
        assert!(leases.contains(b"b") && !leases.contains(b"d"));
        assert!(!leases.remove(b"a"));
        assert!(!leases.remove(b"d"));
        assert_eq!(leases.into_sorted(), vec![id("b"), id("c")]);
        let mut single = OwnerLeases::One(id("x"));
        assert!(!single.remove(b"y"), "another id leaves the one held");
        assert!(single.remove(b"x"));
    }
}
