//! `TaskTable`: every task a shard knows, by id. Tasks live in fixed chunks of slots, and a
//! hash table of slot numbers (4 bytes each) finds them by id, as the keyspace finds its
//! nodes: no second copy of the id as a key, no hash-table slack around a whole task, and a
//! slot number that stays the task's until it is removed, so a queue's ready set holds slot
//! numbers rather than ids (docs/TASKS.md, "Memory per waiting task").
//!
//! A removed task's slot goes on a free list and the next insert takes it: whoever holds a
//! slot number must drop it when the task leaves (the engine's ready sets do; its invariant
//! check proves it).
//!
//! The index grows incrementally, as Redis's dicts rehash ([`GrowingIndex`]): each insert
//! or removal moves a few slots' entries to the larger table.

use bytes::Bytes;

use super::model::Task;
use crate::hashing::Hasher;
use crate::keyspace::growing::GrowingIndex;

/// A task's place in the table, fixed while it is there.
pub type Slot = u32;

/// Slots per chunk: a chunk is allocated and written whole (at most this many slots stand
/// empty), so while the table grows one insert in `CHUNK` pays for a chunk's fresh pages.
/// 64 slots are ~11 KB; 1024 slots (172 KB, 42 page faults) stalled that one insert for
/// tens of microseconds, and the job flow's p99 with it (docs/perf-notes.md).
const CHUNK: usize = 64;

#[derive(Default)]
pub struct TaskTable {
    chunks: Vec<Box<[Option<Task>]>>,
    free: Vec<Slot>,
    index: GrowingIndex,
    hasher: Hasher,
    len: usize,
}

impl std::fmt::Debug for TaskTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskTable").field("len", &self.len).finish()
    }
}

impl TaskTable {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn hash(hasher: &Hasher, id: &[u8]) -> u64 {
        use std::hash::BuildHasher;
        hasher.hash_one(id)
    }

    fn cell(chunks: &[Box<[Option<Task>]>], slot: Slot) -> &Option<Task> {
        &chunks[slot as usize / CHUNK][slot as usize % CHUNK]
    }

    /// The hash of the id in each slot (`None`: an empty slot), for the index's growth.
    fn hash_at<'a>(
        chunks: &'a [Box<[Option<Task>]>],
        hasher: &'a Hasher,
    ) -> impl Fn(Slot) -> Option<u64> + 'a {
        move |slot| {
            let task = Self::cell(chunks, slot).as_ref()?;
            Some(Self::hash(hasher, &task.id))
        }
    }

    /// Moves a few entries to the growing index (after every insert or removal).
    fn migrate(&mut self) {
        let end = (self.chunks.len() * CHUNK) as Slot;
        self.index
            .migrate(end, Self::hash_at(&self.chunks, &self.hasher));
    }

    /// Whether `slot` holds the task `id`.
    fn holds(chunks: &[Box<[Option<Task>]>], slot: Slot, id: &[u8]) -> bool {
        Self::cell(chunks, slot)
            .as_ref()
            .is_some_and(|t| t.id == id)
    }

    /// The task in `slot`; the slot must hold one.
    pub fn at(&self, slot: Slot) -> &Task {
        Self::cell(&self.chunks, slot)
            .as_ref()
            .expect("an occupied slot")
    }

    pub fn at_mut(&mut self, slot: Slot) -> &mut Task {
        self.chunks[slot as usize / CHUNK][slot as usize % CHUNK]
            .as_mut()
            .expect("an occupied slot")
    }

    pub fn slot_of(&self, id: &[u8]) -> Option<Slot> {
        let chunks = &self.chunks;
        self.index.find(Self::hash(&self.hasher, id), |slot| {
            Self::holds(chunks, slot, id)
        })
    }

    /// Asks for the cell of task `id` to be brought into the cache (its id's bytes must be
    /// at hand already: they are hashed). Only a hint: a wrong guess costs a wasted prefetch.
    pub fn prefetch(&self, id: &[u8]) {
        if let Some(slot) = self.index.guess(Self::hash(&self.hasher, id)) {
            let chunk = &self.chunks[slot as usize / CHUNK];
            let cell: *const Option<Task> = &chunk[slot as usize % CHUNK];
            crate::keyspace::prefetch::prefetch_read(cell.cast());
        }
    }

    pub fn get(&self, id: &[u8]) -> Option<&Task> {
        self.slot_of(id).map(|slot| self.at(slot))
    }

    pub fn get_mut(&mut self, id: &[u8]) -> Option<&mut Task> {
        let slot = self.slot_of(id)?;
        Some(self.at_mut(slot))
    }

    pub fn contains_key(&self, id: &[u8]) -> bool {
        self.slot_of(id).is_some()
    }

    /// Adds `task`, or replaces the task with its id (keeping that one's slot); returns the
    /// slot and the task replaced.
    pub fn insert(&mut self, task: Task) -> (Slot, Option<Task>) {
        if let Some(slot) = self.slot_of(&task.id) {
            return (slot, self.at_mut_cell(slot).replace(task));
        }
        (self.insert_new(task), None)
    }

    /// Adds `task`, whose id the caller knows is not here (one lookup fewer); returns its
    /// slot.
    pub fn insert_new(&mut self, task: Task) -> Slot {
        debug_assert!(!self.contains_key(&task.id), "a new id");
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                let slot = (self.chunks.len() * CHUNK) as Slot;
                self.chunks.push((0..CHUNK).map(|_| None).collect());
                self.free.extend((slot + 1..slot + CHUNK as Slot).rev());
                slot
            }
        };
        let hash = Self::hash(&self.hasher, &task.id);
        *self.at_mut_cell(slot) = Some(task);
        self.index
            .insert(hash, slot, Self::hash_at(&self.chunks, &self.hasher));
        self.len += 1;
        self.migrate();
        slot
    }

    fn at_mut_cell(&mut self, slot: Slot) -> &mut Option<Task> {
        &mut self.chunks[slot as usize / CHUNK][slot as usize % CHUNK]
    }

    pub fn remove(&mut self, id: &[u8]) -> Option<Task> {
        let chunks = &self.chunks;
        let slot = self.index.remove(Self::hash(&self.hasher, id), |slot| {
            Self::holds(chunks, slot, id)
        })?;
        self.len -= 1;
        self.free.push(slot);
        let task = self.at_mut_cell(slot).take();
        self.migrate();
        task
    }

    /// Every task, in slot order.
    pub fn values(&self) -> impl Iterator<Item = &Task> {
        self.chunks.iter().flat_map(|c| c.iter().flatten())
    }

    /// Every task's id, in slot order.
    pub fn keys(&self) -> impl Iterator<Item = &Bytes> {
        self.values().map(|t| &t.id)
    }
}

impl<K: AsRef<[u8]> + ?Sized> std::ops::Index<&K> for TaskTable {
    type Output = Task;

    /// The task with this id, which must be there.
    fn index(&self, id: &K) -> &Task {
        self.get(id.as_ref()).expect("a known task")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::model::{State, SubmitOptions};
    use proptest::prelude::*;

    fn task(id: &str) -> Task {
        Task::new(
            Bytes::copy_from_slice(id.as_bytes()),
            Bytes::from_static(b"q"),
            Bytes::new(),
            SubmitOptions::default(),
            State::Queued,
            0,
            0,
        )
    }

    proptest! {
        /// The table agrees with a map through any mix of inserts, replacements and removals,
        /// and a slot stays its task's while the task is there.
        #[test]
        fn behaves_as_a_map(ops in prop::collection::vec((any::<bool>(), 0u16..3000), 1..4000)) {
            let mut table = TaskTable::default();
            let mut model = std::collections::HashMap::new();
            for (insert, n) in ops {
                let id = format!("t{n}");
                if insert {
                    let (slot, old) = table.insert(task(&id));
                    let was = model.insert(id.clone(), slot);
                    prop_assert_eq!(old.is_some(), was.is_some());
                    if let Some(was) = was {
                        prop_assert_eq!(was, slot);
                    }
                } else {
                    prop_assert_eq!(table.remove(id.as_bytes()).is_some(), model.remove(&id).is_some());
                }
                prop_assert_eq!(table.len(), model.len());
            }
            for (id, slot) in &model {
                prop_assert_eq!(table.slot_of(id.as_bytes()), Some(*slot));
                prop_assert_eq!(&table.at(*slot).id[..], id.as_bytes());
            }
            prop_assert_eq!(table.values().count(), model.len());
        }

        /// The same while the index grows incrementally: lookups and removals find entries
        /// in either table, and a slot freed and taken again mid-growth is indexed once.
        #[test]
        fn behaves_as_a_map_while_growing(ops in prop::collection::vec((0u8..4, 0u16..400), 1..3000)) {
            let mut table = TaskTable::default();
            let mut model = std::collections::HashMap::new();
            let mut grew = false;
            for (op, n) in ops {
                let id = format!("t{n}");
                if op > 0 {
                    let (slot, _) = table.insert(task(&id));
                    model.insert(id.clone(), slot);
                } else {
                    prop_assert_eq!(table.remove(id.as_bytes()).is_some(), model.remove(&id).is_some());
                }
                grew |= table.index.moving().is_some();
                prop_assert_eq!(table.index.len(), model.len(), "each task indexed once");
                table.index.check_invariants();
                let probe = format!("t{}", n / 2);
                prop_assert_eq!(table.slot_of(probe.as_bytes()), model.get(&probe).copied());
            }
            for (id, slot) in &model {
                prop_assert_eq!(table.slot_of(id.as_bytes()), Some(*slot));
            }
            prop_assert!(grew || model.len() < 64, "{} entries and never grew", model.len());
        }
    }

    #[test]
    fn a_large_index_grows_a_step_at_a_time() {
        let mut table = TaskTable::default();
        let mut growths = 0;
        for n in 0..2000 {
            let was_growing = table.index.moving().is_some();
            table.insert_new(task(&format!("t{n}")));
            if let (false, Some(moving)) = (was_growing, table.index.moving()) {
                growths += 1;
                assert!(
                    moving >= crate::keyspace::growing::INCREMENTAL_FROM,
                    "only a large index grows incrementally"
                );
                assert!(
                    table.index.len() - moving < moving,
                    "the entries move over a few at a time"
                );
            }
        }
        assert!(growths >= 3, "2000 tasks: {growths} growths");
        for n in 0..2000 {
            assert!(table.slot_of(format!("t{n}").as_bytes()).is_some());
        }
    }
}
