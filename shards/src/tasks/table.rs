//! `TaskTable`: every task a shard knows, by id. Tasks live in fixed chunks of slots, and a
//! hash table of slot numbers (4 bytes each) finds them by id, as the keyspace finds its
//! nodes: no second copy of the id as a key, no hash-table slack around a whole task, and a
//! slot number that stays the task's until it is removed, so a queue's ready set holds slot
//! numbers rather than ids (docs/TASKS.md, "Memory per waiting task").
//!
//! A removed task's slot goes on a free list and the next insert takes it: whoever holds a
//! slot number must drop it when the task leaves (the engine's ready sets do; its invariant
//! check proves it).

use bytes::Bytes;
use hashbrown::HashTable;

use super::model::Task;
use crate::hashing::Hasher;

/// A task's place in the table, fixed while it is there.
pub type Slot = u32;

/// Slots per chunk: a chunk is allocated whole, so at most this many slots stand empty.
const CHUNK: usize = 1024;

#[derive(Default)]
pub struct TaskTable {
    chunks: Vec<Box<[Option<Task>]>>,
    free: Vec<Slot>,
    index: HashTable<Slot>,
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
        self.index
            .find(Self::hash(&self.hasher, id), |&slot| {
                Self::cell(chunks, slot)
                    .as_ref()
                    .is_some_and(|t| t.id == id)
            })
            .copied()
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
        let (chunks, hasher) = (&self.chunks, &self.hasher);
        self.index.insert_unique(hash, slot, |&s| {
            Self::hash(hasher, &Self::cell(chunks, s).as_ref().expect("indexed").id)
        });
        self.len += 1;
        slot
    }

    fn at_mut_cell(&mut self, slot: Slot) -> &mut Option<Task> {
        &mut self.chunks[slot as usize / CHUNK][slot as usize % CHUNK]
    }

    pub fn remove(&mut self, id: &[u8]) -> Option<Task> {
        let chunks = &self.chunks;
        let entry = self
            .index
            .find_entry(Self::hash(&self.hasher, id), |&slot| {
                Self::cell(chunks, slot)
                    .as_ref()
                    .is_some_and(|t| t.id == id)
            })
            .ok()?;
        let (slot, _) = entry.remove();
        self.len -= 1;
        self.free.push(slot);
        self.at_mut_cell(slot).take()
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
    }
}
