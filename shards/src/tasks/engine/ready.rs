//! A queue's ready tasks, in the order they lease: higher priority first, then smaller
//! order. Each entry is the task's slot in the engine's [`TaskTable`](crate::tasks::table),
//! not its id, and the tasks of one priority share one inner map keyed by order alone, so a
//! ready task costs 12 bytes of key and value in a B-tree (docs/TASKS.md, "Memory per
//! waiting task"). Most queues use one priority, so there is one inner map.
//!
//! `ReadyAges` counts ready tasks per submission millisecond, for the age of the oldest: a
//! burst submitted in one millisecond shares one entry.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::ops::Bound;

use super::ReadyKey;
use crate::tasks::table::Slot;

#[derive(Debug, Default)]
pub(super) struct ReadySet {
    levels: BTreeMap<Reverse<i64>, BTreeMap<i64, Slot>>,
    len: usize,
    /// The last level that emptied, kept with its node for the next level to start: a queue
    /// that a worker keeps empty (each task leased as it comes) then allocates no node per
    /// task.
    spare: Option<BTreeMap<i64, Slot>>,
}

impl ReadySet {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(super) fn insert(&mut self, (priority, order): ReadyKey, slot: Slot) {
        let spare = &mut self.spare;
        if self
            .levels
            .entry(priority)
            .or_insert_with(|| spare.take().unwrap_or_default())
            .insert(order, slot)
            .is_none()
        {
            self.len += 1;
        }
    }

    pub(super) fn remove(&mut self, (priority, order): &ReadyKey) -> Option<Slot> {
        let level = self.levels.get_mut(priority)?;
        let slot = level.remove(order)?;
        if level.is_empty() {
            let emptied = self.levels.remove(priority);
            if self.spare.is_none() {
                self.spare = emptied;
            }
        }
        self.len -= 1;
        Some(slot)
    }

    #[cfg(test)]
    pub(super) fn get(&self, (priority, order): &ReadyKey) -> Option<Slot> {
        self.levels.get(priority)?.get(order).copied()
    }

    /// The task that leases next.
    pub(super) fn first(&self) -> Option<(ReadyKey, Slot)> {
        let (priority, level) = self.levels.first_key_value()?;
        let (order, slot) = level.first_key_value()?;
        Some(((*priority, *order), *slot))
    }

    /// Every entry, in lease order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (ReadyKey, Slot)> + '_ {
        self.levels.iter().flat_map(|(priority, level)| {
            level
                .iter()
                .map(move |(order, slot)| ((*priority, *order), *slot))
        })
    }

    /// The entries after `after` (all of them for `None`), in lease order: a page of
    /// TASK.LIST from its cursor.
    pub(super) fn after(
        &self,
        after: Option<ReadyKey>,
    ) -> impl Iterator<Item = (ReadyKey, Slot)> + '_ {
        let from = after.map_or(Bound::Unbounded, |(priority, _)| Bound::Included(priority));
        self.levels
            .range((from, Bound::Unbounded))
            .flat_map(move |(priority, level)| {
                let lower = match after {
                    Some((p, order)) if p == *priority => Bound::Excluded(order),
                    _ => Bound::Unbounded,
                };
                level
                    .range((lower, Bound::Unbounded))
                    .map(move |(order, slot)| ((*priority, *order), *slot))
            })
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = ReadyKey> + '_ {
        self.iter().map(|(key, _)| key)
    }

    #[cfg(test)]
    pub(super) fn slots(&self) -> impl Iterator<Item = Slot> + '_ {
        self.iter().map(|(_, slot)| slot)
    }
}

/// How many ready tasks were submitted in each millisecond.
#[derive(Debug, Default)]
pub(super) struct ReadyAges {
    counts: BTreeMap<u64, u32>,
}

impl ReadyAges {
    pub(super) fn insert(&mut self, submitted_ms: u64) {
        *self.counts.entry(submitted_ms).or_default() += 1;
    }

    pub(super) fn remove(&mut self, submitted_ms: u64) {
        if let Some(count) = self.counts.get_mut(&submitted_ms) {
            *count -= 1;
            if *count == 0 {
                self.counts.remove(&submitted_ms);
            }
        }
    }

    /// When the oldest ready task was submitted.
    pub(super) fn oldest(&self) -> Option<u64> {
        self.counts.first_key_value().map(|(ms, _)| *ms)
    }

    /// Ready tasks counted.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.counts.values().map(|c| *c as usize).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The same entries, in the same order, as one flat map of (priority, order).
        #[test]
        fn orders_as_a_flat_map(ops in prop::collection::vec((any::<bool>(), -2i64..3, 0i64..200), 1..600)) {
            let mut set = ReadySet::default();
            let mut model = BTreeMap::new();
            for (n, (insert, priority, order)) in ops.into_iter().enumerate() {
                let key = (Reverse(priority), order);
                if insert {
                    set.insert(key, n as Slot);
                    model.insert(key, n as Slot);
                } else {
                    prop_assert_eq!(set.remove(&key), model.remove(&key));
                }
                prop_assert_eq!(set.len(), model.len());
                prop_assert_eq!(set.first(), model.first_key_value().map(|(k, v)| (*k, *v)));
            }
            let flat: Vec<(ReadyKey, Slot)> = model.iter().map(|(k, v)| (*k, *v)).collect();
            prop_assert_eq!(set.iter().collect::<Vec<_>>(), flat.clone());
            for (i, (key, _)) in flat.iter().enumerate() {
                prop_assert_eq!(set.after(Some(*key)).collect::<Vec<_>>(), flat[i + 1..].to_vec());
            }
            let missing = (Reverse(0), 1_000);
            let later: Vec<_> = model.range((Bound::Excluded(missing), Bound::Unbounded)).map(|(k, v)| (*k, *v)).collect();
            prop_assert_eq!(set.after(Some(missing)).collect::<Vec<_>>(), later);
        }
    }

    #[test]
    fn ages_count_per_millisecond() {
        let mut ages = ReadyAges::default();
        for ms in [5, 3, 3, 9] {
            ages.insert(ms);
        }
        assert_eq!((ages.oldest(), ages.len()), (Some(3), 4));
        ages.remove(3);
        assert_eq!(ages.oldest(), Some(3));
        ages.remove(3);
        assert_eq!(ages.oldest(), Some(5));
    }
}
