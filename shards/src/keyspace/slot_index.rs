//! Cluster mode's slot → keys index of one database: CLUSTER COUNTKEYSINSLOT in O(1) and
//! GETKEYSINSLOT in O(count), which `redis-cli --cluster reshard` calls for every slot it
//! moves. Without it each call walks every key of the shard. Redis keeps the same index, in
//! cluster mode only, and so does WeTask: a database outside cluster mode has none.
//!
//! The database keeps its keys by position (`Db`'s `nodes`) and moves its last key into a
//! removed key's place. The index follows suit: each slot lists its keys' positions, and each
//! position remembers its place in that list, so an insert, a removal and the move of the
//! last key are each O(1). It costs 8 bytes a key, and its 16,384 lists are allocated with
//! the database's first key (about 400 KB), so the 15 databases cluster mode never uses cost
//! nothing.

use crate::slot::SLOT_COUNT;

#[derive(Default, Debug)]
pub struct SlotIndex {
    /// The positions of each slot's keys, in no order (empty until the first key).
    lists: Vec<Vec<u32>>,
    /// For each position of the database, its place in its slot's list.
    places: Vec<u32>,
}

impl SlotIndex {
    /// Indexes the key at `pos`, the database's new last position, in `slot`.
    pub fn push(&mut self, pos: usize, slot: u16) {
        debug_assert_eq!(pos, self.places.len(), "keys are added at the end");
        if self.lists.is_empty() {
            self.lists = vec![Vec::new(); usize::from(SLOT_COUNT)];
        }
        let list = &mut self.lists[usize::from(slot)];
        self.places.push(list.len() as u32);
        list.push(pos as u32);
    }

    /// Forgets the key at `pos` (in `slot`), as the database swaps its last key, at
    /// `last` and in `last_slot`, into `pos`'s place.
    pub fn remove(&mut self, pos: usize, slot: u16, last: usize, last_slot: u16) {
        let list = &mut self.lists[usize::from(slot)];
        let place = self.places[pos] as usize;
        list.swap_remove(place);
        if let Some(&shifted) = list.get(place) {
            self.places[shifted as usize] = place as u32;
        }
        if list.is_empty() {
            // A slot migrated away gives its memory back.
            *list = Vec::new();
        }
        if pos != last {
            let place = self.places[last];
            self.lists[usize::from(last_slot)][place as usize] = pos as u32;
            self.places[pos] = place;
        }
        self.places.pop();
    }

    /// Keys in `slot`.
    pub fn count(&self, slot: u16) -> usize {
        self.lists.get(usize::from(slot)).map_or(0, Vec::len)
    }

    /// The positions of `slot`'s keys.
    pub fn positions(&self, slot: u16) -> &[u32] {
        self.lists.get(usize::from(slot)).map_or(&[], Vec::as_slice)
    }

    pub fn clear(&mut self) {
        *self = SlotIndex::default();
    }

    /// Checks the index against the slot of each position (tests).
    #[cfg(test)]
    pub fn check(&self, slots: &[u16]) {
        assert_eq!(self.places.len(), slots.len());
        for (pos, &slot) in slots.iter().enumerate() {
            assert_eq!(
                self.positions(slot)[self.places[pos] as usize] as usize,
                pos
            );
        }
        let listed: usize = self.lists.iter().map(Vec::len).sum();
        assert_eq!(listed, slots.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Adds and removes (any position, the last key moving in) against a plain vector
        /// of slots: every position is found in its slot's list and counts agree.
        #[test]
        fn the_index_follows_swap_removals(ops in proptest::collection::vec((any::<bool>(), 0u16..8, any::<usize>()), 1..400)) {
            let mut index = SlotIndex::default();
            let mut slots: Vec<u16> = Vec::new();
            for (add, slot, at) in ops {
                if add || slots.is_empty() {
                    index.push(slots.len(), slot);
                    slots.push(slot);
                } else {
                    let pos = at % slots.len();
                    let last = slots.len() - 1;
                    index.remove(pos, slots[pos], last, slots[last]);
                    slots.swap_remove(pos);
                }
                index.check(&slots);
                for s in 0..8 {
                    prop_assert_eq!(index.count(s), slots.iter().filter(|&&x| x == s).count());
                }
            }
        }
    }
}
