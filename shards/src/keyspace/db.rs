//! One database of one shard: the key table, values, and expiry.
//!
//! Every key is one [`Node`] (key and short value in one allocation), held in `nodes` by
//! position; `table` is a hash table of those positions (4 bytes each), searched by the key's
//! hash. Memory per key is the node, 8 bytes in `nodes` and about 10 in `table`
//! (docs/perf-notes.md, "Keyspace layout", says where every byte goes).
//!
//! Positions make a random key, an expiry sample and a SCAN step O(1). Removal swaps the last
//! node into the hole; SCAN walks positions from high to low so that a swap only ever moves an
//! unvisited key into a visited position's place as a *duplicate*, never skipping a key present
//! throughout (Redis's SCAN guarantee). Keys with a TTL carry a flag in their node and their
//! expiry in `expires`, the side table that active expiry samples (as Redis samples its
//! `expires` dict); a key without a TTL never touches it.
//!
//! In cluster mode a slot → keys index (`slot_index`) follows every insert, removal and swap,
//! so that CLUSTER COUNTKEYSINSLOT and GETKEYSINSLOT need not walk the keys.
//!
//! `table` and `expires` grow incrementally, as Redis rehashes its dicts ([`GrowingIndex`]):
//! every write moves a few positions' entries to the larger table.
//!
//! Kept whole: it is one concern (the table of one database and the operations on it that
//! must keep its positions, hashes and expiry index consistent); with its tests it passes
//! 800 lines, without them it is about 660.

use bytes::Bytes;

use crate::glob::glob_match;
pub use crate::hashing::Hasher;
use crate::keyspace::expiries::Expiries;
use crate::keyspace::growing::GrowingIndex;
use crate::keyspace::node::{Node, ValueRef};
use crate::keyspace::prefetch::prefetch_read;
use crate::keyspace::slot_index::SlotIndex;
use crate::slot::key_slot;
pub use crate::values::value::{Hash, List, Set, Value};

/// A value and its absolute expiry in unix milliseconds (`NO_EXPIRY` for none), detached
/// from the keyspace: what a cross-shard RENAME or COPY carries.
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
}

/// Databases per shard (`SELECT 0..=15`).
pub const DATABASES: usize = 16;

/// Most keys one database holds (positions are 32-bit).
pub const KEYS_PER_DB_MAX: usize = u32::MAX as usize;

/// A live key in the table, borrowed to read or change its value.
pub struct EntryMut<'a> {
    node: &'a mut Node,
    pub expire_at_ms: u64,
}

impl<'a> EntryMut<'a> {
    pub fn value(&self) -> ValueRef<'_> {
        self.node.value()
    }

    /// The bytes of a string value; `None` when the key holds another type.
    pub fn str_bytes(&self) -> Option<&[u8]> {
        self.node.str_bytes()
    }

    /// A string value as `Bytes` for a reply that outlives this borrow: a long string is
    /// shared, a short one copied. `None` when the key holds another type.
    pub fn str_shared(&self) -> Option<Bytes> {
        match self.node.value() {
            ValueRef::Inline(bytes) => Some(Bytes::copy_from_slice(bytes)),
            ValueRef::Typed(Value::Str(bytes)) => Some(bytes.clone()),
            ValueRef::Typed(_) => None,
        }
    }

    pub fn type_name(&self) -> &'static str {
        self.node.type_name()
    }

    /// The value, for types stored as a `Value`; `None` for an inline string.
    pub fn typed_mut(&mut self) -> Option<&mut Value> {
        self.node.typed_mut()
    }

    /// Like [`EntryMut::typed_mut`], for as long as the entry's borrow of the database.
    pub fn into_typed_mut(self) -> Option<&'a mut Value> {
        self.node.typed_mut()
    }

    /// Replaces the value with a string, keeping the TTL.
    pub fn set_str(&mut self, value: &[u8]) {
        self.node.set_str(value);
    }

    /// Replaces the value, keeping the TTL.
    pub fn set_value(&mut self, value: Value) {
        self.node.set_value(value);
    }

    /// A detached copy of the value and its expiry.
    pub fn to_entry(&self) -> Entry {
        Entry {
            value: self.node.to_value(),
            expire_at_ms: self.expire_at_ms,
        }
    }
}

#[derive(Default)]
pub struct Db {
    table: GrowingIndex,
    nodes: Vec<Node>,
    expires: Expiries,
    hasher: Hasher,
    expired_count: u64,
    /// Access stamps to keep for `maxmemory` eviction (none unless a policy needs them).
    tracking: crate::keyspace::evict::Tracking,
    /// The shard's clock, for stamps (kept only while tracking).
    now_ms: u64,
    /// Lookups of a key that was there (live) and of one that was not (`Db::lookups`).
    hits: u64,
    misses: u64,
    /// Names of keys expired since the last `take_expired`, kept only while some client
    /// tracks keys (CLIENT TRACKING: an expiry invalidates, as in Redis) or expiries are
    /// notified (`notify-keyspace-events` with `x`).
    expired_log: Option<Vec<Bytes>>,
    /// Lookups leave access stamps alone (see `set_touching`).
    untouched: bool,
    /// Cluster mode's slot → keys index (`index_slots`); none outside cluster mode.
    slots: Option<Box<SlotIndex>>,
    /// A replica's: an expired key reads as missing but stays until its primary's records
    /// remove it (`set_keep_expired`).
    keep_expired: bool,
}

impl Db {
    /// On a replica, lookups hide expired keys without removing them: the primary decides
    /// when a key goes (a command it ran before the key expired may still be on its way).
    pub fn set_keep_expired(&mut self, on: bool) {
        self.keep_expired = on;
    }

    /// Keeps a slot → keys index from now on (cluster mode), built from the keys there are.
    pub fn index_slots(&mut self) {
        if self.slots.is_none() {
            let mut index = SlotIndex::default();
            for (pos, node) in self.nodes.iter().enumerate() {
                index.push(pos, key_slot(node.key()));
            }
            self.slots = Some(Box::new(index));
        }
    }

    /// Whether a slot → keys index is kept (`index_slots`).
    pub fn slots_indexed(&self) -> bool {
        self.slots.is_some()
    }

    /// How many keys `slot` holds (expired ones not yet reclaimed included, as Redis counts),
    /// and up to `count` of its live keys: from the index in cluster mode, by a walk of every
    /// key otherwise.
    pub fn keys_in_slot(&self, slot: u16, count: usize, now_ms: u64) -> (usize, Vec<Bytes>) {
        let live = |&pos: &usize| !self.is_expired_at(pos, now_ms);
        let key = |pos: usize| Bytes::copy_from_slice(self.nodes[pos].key());
        match &self.slots {
            Some(index) => {
                let positions = index.positions(slot).iter().map(|&p| p as usize);
                let keys = positions.filter(live).take(count).map(key).collect();
                (index.count(slot), keys)
            }
            None => {
                let positions: Vec<usize> = (0..self.nodes.len())
                    .filter(|&pos| key_slot(self.nodes[pos].key()) == slot)
                    .collect();
                let keys = positions.iter().filter(|p| live(p)).take(count);
                (positions.len(), keys.map(|&p| key(p)).collect())
            }
        }
    }

    /// Starts or stops keeping the names of expired keys (see `take_expired`).
    pub fn log_expiries(&mut self, on: bool) {
        if on != self.expired_log.is_some() {
            self.expired_log = on.then(Vec::new);
        }
    }

    /// The keys expired since the last call (empty unless `log_expiries` is on).
    pub fn take_expired(&mut self) -> Vec<Bytes> {
        match self.expired_log.as_mut() {
            Some(log) if !log.is_empty() => std::mem::take(log),
            _ => Vec::new(),
        }
    }

    #[inline]
    fn note_expired(&mut self, pos: usize) {
        self.expired_count += 1;
        if let Some(log) = self.expired_log.as_mut() {
            log.push(Bytes::copy_from_slice(self.nodes[pos].key()));
        }
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn volatile_len(&self) -> usize {
        self.expires.len()
    }

    /// Keys removed because their TTL passed (lazily or by sampling).
    pub fn expired_count(&self) -> u64 {
        self.expired_count
    }

    fn hash(&self, key: &[u8]) -> u64 {
        use std::hash::BuildHasher;
        self.hasher.hash_one(key)
    }

    /// The hash of the key at each position, for the table's growth.
    fn hash_at<'a>(nodes: &'a [Node], hasher: &'a Hasher) -> impl Fn(u32) -> Option<u64> + 'a {
        use std::hash::BuildHasher;
        move |pos| {
            nodes
                .get(pos as usize)
                .map(|node| hasher.hash_one(node.key()))
        }
    }

    /// Moves a few entries to the growing table (after every insert or removal).
    fn migrate(&mut self) {
        let end = self.nodes.len() as u32;
        self.table
            .migrate(end, Self::hash_at(&self.nodes, &self.hasher));
    }

    /// Brings the table entries and nodes of `keys` into the cache ahead of their commands
    /// (Valkey 8's batch prefetch). A pipelined batch otherwise pays three dependent cache
    /// misses per key in turn (table, `nodes[pos]`, node); here the first misses of every
    /// key overlap, then the second, then the third. Only a hint: a wrong guess (a tag
    /// collision, a missing key) costs a wasted prefetch, nothing else.
    pub fn prefetch(&self, keys: &[&[u8]]) {
        const BATCH_MAX: usize = 32;
        let mut found = [u32::MAX; BATCH_MAX];
        let keys = &keys[..keys.len().min(BATCH_MAX)];
        for (slot, key) in found.iter_mut().zip(keys) {
            if let Some(pos) = self.table.guess(self.hash(key)) {
                *slot = pos;
                prefetch_read(self.nodes.as_ptr().wrapping_add(pos as usize).cast());
            }
        }
        for &pos in &found[..keys.len()] {
            if let Some(node) = self.nodes.get(pos as usize) {
                prefetch_read(node.as_ptr());
            }
        }
    }

    /// The position of `key`, live or not.
    fn find(&self, key: &[u8]) -> Option<usize> {
        let hash = self.hash(key);
        let nodes = &self.nodes;
        self.table
            .find(hash, |pos| nodes[pos as usize].key() == key)
            .map(|pos| pos as usize)
    }

    fn expiry_at(&self, pos: usize) -> u64 {
        let node = &self.nodes[pos];
        if !node.has_ttl() {
            return NO_EXPIRY;
        }
        self.expires
            .get(node.key())
            .expect("a flagged key has an expiry")
    }

    /// The position of `key` if it is live, removing it first if it has expired (lazy expiry).
    /// An access: it refreshes the key's eviction stamp when a policy tracks them.
    /// Lookups so far that found a live key, and that did not (INFO's `keyspace_hits` and
    /// `keyspace_misses` count those of read commands: `Shard::run`).
    pub fn lookups(&self) -> (u64, u64) {
        (self.hits, self.misses)
    }

    fn find_live(&mut self, key: &[u8], now_ms: u64) -> Option<(usize, u64)> {
        let Some(pos) = self.find(key) else {
            self.misses += 1;
            return None;
        };
        let at = self.expiry_at(pos);
        if at != NO_EXPIRY && at <= now_ms {
            if !self.keep_expired {
                self.note_expired(pos);
                self.remove_at(pos);
            }
            self.misses += 1;
            return None;
        }
        self.hits += 1;
        if self.tracking != crate::keyspace::evict::Tracking::None && !self.untouched {
            let node = &mut self.nodes[pos];
            node.set_stamp(crate::keyspace::evict::touched(
                self.tracking,
                node.stamp(),
                now_ms,
            ));
        }
        Some((pos, at))
    }

    /// Whether lookups refresh access stamps (off while a CLIENT NO-TOUCH client's command
    /// runs).
    pub fn set_touching(&mut self, on: bool) {
        self.untouched = !on;
    }

    /// The access tracking this database keeps (that of the `maxmemory` policy).
    pub fn tracking(&self) -> crate::keyspace::evict::Tracking {
        self.tracking
    }

    /// A live key's eviction score under the tracking kept (idle seconds for LRU, 255 less
    /// its decayed counter for LFU), read without counting as an access: OBJECT IDLETIME's
    /// and FREQ's.
    pub fn access_score(&self, key: &[u8], now_ms: u64) -> Option<u64> {
        let pos = self.find(key)?;
        let at = self.expiry_at(pos);
        if at != NO_EXPIRY && at <= now_ms {
            return None;
        }
        let stamp = self.nodes[pos].stamp();
        Some(crate::keyspace::evict::eviction_score(
            self.tracking,
            stamp,
            now_ms,
        ))
    }

    /// Starts (or stops) keeping access stamps for an eviction policy; `now_ms` is the clock.
    pub fn set_tracking(&mut self, tracking: crate::keyspace::evict::Tracking, now_ms: u64) {
        self.tracking = tracking;
        self.now_ms = now_ms;
    }

    /// The shard's clock, for the stamps of keys created from now on.
    pub fn set_clock(&mut self, now_ms: u64) {
        self.now_ms = now_ms;
    }

    /// One random eviction candidate under `policy`: its position and how much it deserves
    /// eviction (higher first). `None` when the database has no key the policy may take.
    pub fn eviction_candidate(
        &self,
        policy: crate::keyspace::evict::Policy,
        now_ms: u64,
    ) -> Option<(usize, u64)> {
        use crate::keyspace::evict::{eviction_score, Policy};
        let pos = if policy.volatile_only() {
            if self.expires.is_empty() {
                return None;
            }
            let (key, _) = self
                .expires
                .get_index(fastrand::usize(..self.expires.len()))
                .expect("in range");
            self.find(key)?
        } else {
            if self.nodes.is_empty() {
                return None;
            }
            fastrand::usize(..self.nodes.len())
        };
        let score = match policy {
            Policy::VolatileTtl => u64::MAX - self.expiry_at(pos),
            Policy::AllkeysRandom | Policy::VolatileRandom | Policy::NoEviction => 0,
            _ => eviction_score(policy.tracking(), self.nodes[pos].stamp(), now_ms),
        };
        Some((pos, score))
    }

    /// Evicts the key at `pos` (from [`Db::eviction_candidate`]); returns its name.
    pub fn evict_at(&mut self, pos: usize) -> Bytes {
        let key = Bytes::copy_from_slice(self.nodes[pos].key());
        self.remove_at(pos);
        key
    }

    /// The live entry for `key`, removing it first if it has expired (lazy expiry).
    pub fn get(&mut self, key: &[u8], now_ms: u64) -> Option<EntryMut<'_>> {
        let (pos, expire_at_ms) = self.find_live(key, now_ms)?;
        Some(EntryMut {
            node: &mut self.nodes[pos],
            expire_at_ms,
        })
    }

    /// Whether `key` is live, and its expiry (`NO_EXPIRY` for none), without counting as an
    /// access (no hit or miss, no eviction stamp): what keyspace notifications look at around
    /// a command. An expired key is removed, as any lookup does.
    pub fn probe(&mut self, key: &[u8], now_ms: u64) -> Option<u64> {
        let pos = self.find(key)?;
        let at = self.expiry_at(pos);
        if at != NO_EXPIRY && at <= now_ms {
            if !self.keep_expired {
                self.note_expired(pos);
                self.remove_at(pos);
            }
            return None;
        }
        Some(at)
    }

    /// The type of the value at `key` (TYPE's word), looked at as [`Db::probe`] looks: no
    /// access counted. What blocked clients' readiness compares around a write.
    pub fn probe_type(&mut self, key: &[u8], now_ms: u64) -> Option<&'static str> {
        self.probe(key, now_ms)?;
        let pos = self.find(key)?;
        Some(self.nodes[pos].type_name())
    }

    pub fn contains(&mut self, key: &[u8], now_ms: u64) -> bool {
        self.find_live(key, now_ms).is_some()
    }

    fn push(&mut self, mut node: Node) -> usize {
        assert!(self.nodes.len() < KEYS_PER_DB_MAX, "database full");
        if self.tracking != crate::keyspace::evict::Tracking::None {
            node.set_stamp(crate::keyspace::evict::fresh_stamp(
                self.tracking,
                self.now_ms,
            ));
        }
        let pos = self.nodes.len();
        let hash = self.hash(node.key());
        if let Some(index) = self.slots.as_mut() {
            index.push(pos, key_slot(node.key()));
        }
        self.nodes.push(node);
        self.table
            .insert(hash, pos as u32, Self::hash_at(&self.nodes, &self.hasher));
        self.migrate();
        pos
    }

    fn set_expiry_at(&mut self, pos: usize, expire_at_ms: u64) {
        let node = &mut self.nodes[pos];
        if expire_at_ms == NO_EXPIRY {
            if node.has_ttl() {
                node.set_ttl_flag(false);
                self.expires.remove(node.key());
            }
        } else {
            node.set_ttl_flag(true);
            self.expires.set(node.key(), expire_at_ms);
        }
    }

    /// Stores the string `value` under `key` with the given expiry, replacing any old value
    /// and TTL. Both are copied, so the keyspace never pins a network read buffer.
    pub fn set_str(&mut self, key: &[u8], value: &[u8], expire_at_ms: u64) {
        let pos = match self.find(key) {
            Some(pos) => {
                self.nodes[pos].set_str(value);
                pos
            }
            None => self.push(Node::new_str(key, value)),
        };
        self.set_expiry_at(pos, expire_at_ms);
    }

    /// Makes room for `additional` more keys (a snapshot's load, which knows its count).
    pub fn reserve(&mut self, additional: usize) {
        let hash_at = Self::hash_at(&self.nodes, &self.hasher);
        self.table.finish_growth(self.nodes.len() as u32, &hash_at);
        self.table.reserve(additional, hash_at);
        self.nodes.reserve(additional);
    }

    /// Inserts a key known to be absent (a snapshot's, each written once from the table),
    /// skipping the lookup `insert` does; debug builds check.
    pub fn insert_new(&mut self, key: &[u8], entry: Entry) {
        self.push_new(Node::new(key, entry.value), entry.expire_at_ms);
    }

    /// As [`Db::insert_new`], for a string value copied from `value`.
    pub fn insert_new_str(&mut self, key: &[u8], value: &[u8], expire_at_ms: u64) {
        self.push_new(Node::new_str(key, value), expire_at_ms);
    }

    fn push_new(&mut self, node: Node, expire_at_ms: u64) {
        debug_assert!(
            self.find(node.key()).is_none(),
            "a snapshot holds a key twice"
        );
        let pos = self.push(node);
        self.set_expiry_at(pos, expire_at_ms);
    }

    /// Stores `entry` under `key`, replacing any old value and its TTL.
    pub fn insert(&mut self, key: &[u8], entry: Entry) {
        let pos = match self.find(key) {
            Some(pos) => {
                self.nodes[pos].set_value(entry.value);
                pos
            }
            None => self.push(Node::new(key, entry.value)),
        };
        self.set_expiry_at(pos, entry.expire_at_ms);
    }

    /// Takes the node at `pos` out of both tables; the last node moves into its place.
    fn remove_at(&mut self, pos: usize) -> Node {
        let hash = self.hash(self.nodes[pos].key());
        self.table
            .remove(hash, |p| p as usize == pos)
            .expect("every node is in the table");
        let last = self.nodes.len() - 1;
        if let Some(index) = self.slots.as_mut() {
            let slot = key_slot(self.nodes[pos].key());
            let last_slot = match pos == last {
                true => slot,
                false => key_slot(self.nodes[last].key()),
            };
            index.remove(pos, slot, last, last_slot);
        }
        let node = self.nodes.swap_remove(pos);
        if pos != last {
            let moved = self.hash(self.nodes[pos].key());
            let hash_at = Self::hash_at(&self.nodes, &self.hasher);
            self.table.relocate(moved, last as u32, pos as u32, hash_at);
        }
        if node.has_ttl() {
            self.expires.remove(node.key());
        }
        self.migrate();
        node
    }

    /// Removes `key` (live or expired) and hands its entry over.
    pub fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        let pos = self.find(key)?;
        let expire_at_ms = self.expiry_at(pos);
        let node = self.remove_at(pos);
        Some(Entry {
            value: node.into_value(),
            expire_at_ms,
        })
    }

    /// Removes a live key and hands its entry over; an expired one counts as absent.
    pub fn remove_live(&mut self, key: &[u8], now_ms: u64) -> Option<Entry> {
        let (pos, expire_at_ms) = self.find_live(key, now_ms)?;
        let node = self.remove_at(pos);
        Some(Entry {
            value: node.into_value(),
            expire_at_ms,
        })
    }

    /// Deletes a live key, returning whether there was one (DEL: nothing is copied out).
    pub fn delete_live(&mut self, key: &[u8], now_ms: u64) -> bool {
        match self.find_live(key, now_ms) {
            Some((pos, _)) => {
                self.remove_at(pos);
                true
            }
            None => false,
        }
    }

    /// Sets or clears (`NO_EXPIRY`) the TTL of an existing key.
    pub fn set_expiry(&mut self, key: &[u8], expire_at_ms: u64) {
        if let Some(pos) = self.find(key) {
            self.set_expiry_at(pos, expire_at_ms);
        }
    }

    pub fn clear(&mut self) {
        self.table.clear();
        self.nodes = Vec::new();
        self.expires.clear();
        if let Some(index) = self.slots.as_mut() {
            index.clear();
        }
    }

    /// Samples up to `samples` keys with a TTL and removes the expired ones. Returns
    /// (sampled, expired) so the caller can decide whether to go round again, as Redis's
    /// active expire cycle does.
    pub fn expire_sample(&mut self, now_ms: u64, samples: usize) -> (usize, usize) {
        let mut sampled = 0;
        let mut expired = 0;
        while sampled < samples && !self.expires.is_empty() {
            let index = fastrand::usize(..self.expires.len());
            let (key, at) = self.expires.get_index(index).expect("in range");
            sampled += 1;
            if at <= now_ms {
                let pos = self.find(key).expect("an expiry has its key");
                self.note_expired(pos);
                self.remove_at(pos);
                expired += 1;
            }
        }
        (sampled, expired)
    }

    fn is_expired_at(&self, pos: usize, now_ms: u64) -> bool {
        let at = self.expiry_at(pos);
        at != NO_EXPIRY && at <= now_ms
    }

    /// A random live key, trying a bounded number of times to skip expired ones.
    pub fn random_key(&mut self, now_ms: u64) -> Option<Bytes> {
        for _ in 0..100 {
            if self.nodes.is_empty() {
                return None;
            }
            let pos = fastrand::usize(..self.nodes.len());
            if !self.is_expired_at(pos, now_ms) {
                return Some(Bytes::copy_from_slice(self.nodes[pos].key()));
            }
            if !self.keep_expired {
                self.note_expired(pos);
                self.remove_at(pos);
            }
        }
        None
    }

    /// Every live key matching `pattern`.
    pub fn keys(&self, pattern: &[u8], now_ms: u64) -> Vec<Bytes> {
        let all = pattern == b"*";
        (0..self.nodes.len())
            .filter(|&pos| {
                !self.is_expired_at(pos, now_ms)
                    && (all || glob_match(pattern, self.nodes[pos].key()))
            })
            .map(|pos| Bytes::copy_from_slice(self.nodes[pos].key()))
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
        let (next, keys, _) = self.scan_counted(cursor, count, filter, now_ms);
        (next, keys)
    }

    /// [`Db::scan`], also saying how many positions it looked at (SCAN's COUNT is work, as
    /// in Redis: a scan over several shards goes on to the next while some is left).
    pub fn scan_counted(
        &self,
        cursor: u64,
        count: usize,
        filter: &ScanFilter,
        now_ms: u64,
    ) -> (u64, Vec<Bytes>, usize) {
        let len = self.nodes.len() as u64;
        let mut upper = if cursor == 0 { len } else { cursor.min(len) };
        let mut keys = Vec::new();
        let mut visited = 0;
        while upper > 0 && visited < count.max(1) {
            upper -= 1;
            visited += 1;
            let pos = upper as usize;
            let node = &self.nodes[pos];
            if self.is_expired_at(pos, now_ms) || !filter.accepts(node.key(), node.type_name()) {
                continue;
            }
            keys.push(Bytes::copy_from_slice(node.key()));
        }
        (upper, keys, visited)
    }

    /// Checks that the two tables agree (tests and debug assertions).
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        assert_eq!(self.table.len(), self.nodes.len());
        self.table.check_invariants();
        for (pos, node) in self.nodes.iter().enumerate() {
            assert_eq!(self.find(node.key()), Some(pos));
            assert_eq!(node.has_ttl(), self.expires.contains_key(node.key()));
        }
        self.expires.check_invariants();
        assert_eq!(
            self.expires.len(),
            self.nodes.iter().filter(|n| n.has_ttl()).count()
        );
        if let Some(index) = &self.slots {
            let slots: Vec<u16> = self.nodes.iter().map(|n| key_slot(n.key())).collect();
            index.check(&slots);
        }
    }
}

/// SCAN's MATCH and TYPE options.
#[derive(Default, Clone, Debug)]
pub struct ScanFilter {
    pub pattern: Option<Bytes>,
    pub type_name: Option<String>,
}

impl ScanFilter {
    fn accepts(&self, key: &[u8], type_name: &str) -> bool {
        if let Some(pattern) = &self.pattern {
            if !glob_match(pattern, key) {
                return false;
            }
        }
        match &self.type_name {
            Some(name) => name.eq_ignore_ascii_case(type_name),
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

    #[derive(Debug, Clone)]
    enum Op {
        Set(u8, usize),
        Remove(u8),
        Delete(u8),
        Expire(u8, u64),
        Persist(u8),
        Sample,
        Random,
        Tick,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        // Value lengths straddle the inline limit so both node kinds and the in-place
        // overwrite are exercised; key numbers collide often.
        let len = prop_oneof![0usize..4, Just(64usize), 1020usize..1030];
        prop_oneof![
            4 => (any::<u8>(), len).prop_map(|(k, l)| Op::Set(k % 40, l)),
            1 => any::<u8>().prop_map(|k| Op::Remove(k % 40)),
            1 => any::<u8>().prop_map(|k| Op::Delete(k % 40)),
            2 => (any::<u8>(), 1u64..20).prop_map(|(k, t)| Op::Expire(k % 40, t)),
            1 => any::<u8>().prop_map(|k| Op::Persist(k % 40)),
            1 => Just(Op::Sample),
            1 => Just(Op::Random),
            1 => Just(Op::Tick),
        ]
    }

    fn name(k: u8) -> Vec<u8> {
        // Some names are longer than an inline `Key`, for the expiry table.
        if k.is_multiple_of(3) {
            format!("a-rather-long-key-name-number-{k}").into_bytes()
        } else {
            format!("k{k}").into_bytes()
        }
    }

    /// The table grows a step at a time, and removals in the middle of a growth (whose swap
    /// moves the last node's entry, in either table) keep every key findable.
    #[test]
    fn the_table_grows_a_step_at_a_time_through_removals() {
        let mut db = Db::default();
        db.index_slots();
        let mut growths = 0;
        let mut live = std::collections::BTreeSet::new();
        for n in 0..600u32 {
            let was_growing = db.table.moving().is_some();
            let len_before = db.table.len();
            db.set_str(format!("key{n}").as_bytes(), b"v", NO_EXPIRY);
            live.insert(n);
            if let (false, Some(_)) = (was_growing, db.table.moving()) {
                growths += 1;
                // What the full table held, not what is left in it after the insert's first
                // migration step: removals leave tombstones, so a table can be full below
                // its nominal capacity (hashbrown's `capacity` is entries + growth left),
                // and the step can take it under the threshold.
                assert!(
                    len_before >= crate::keyspace::growing::INCREMENTAL_FROM,
                    "{len_before}"
                );
            }
            // Remove an early key and a recent one every third insert: swaps from the end
            // into positions on both sides of the growth's cursor.
            if n % 3 == 2 {
                for k in [n / 2, n - 1] {
                    if live.remove(&k) {
                        assert!(db.remove(format!("key{k}").as_bytes()).is_some());
                    }
                }
            }
            db.check_invariants();
        }
        assert!(growths >= 3, "{growths} growths");
        for n in 0..600u32 {
            let found = db.get(format!("key{n}").as_bytes(), 0).is_some();
            assert_eq!(found, live.contains(&n), "key{n}");
        }
    }

    /// Each slot of the model's keys lists exactly its live keys, from the index or by the walk.
    fn slots_hold_the_models_keys(
        db: &Db,
        model: &std::collections::HashMap<Vec<u8>, (Vec<u8>, u64)>,
        now: u64,
    ) {
        let mut slots: Vec<u16> = model.keys().map(|k| key_slot(k)).collect();
        slots.sort_unstable();
        slots.dedup();
        for slot in slots {
            let (held, mut keys) = db.keys_in_slot(slot, usize::MAX, now);
            keys.sort();
            let mut want: Vec<&Vec<u8>> = model.keys().filter(|k| key_slot(k) == slot).collect();
            want.sort();
            assert!(held >= want.len());
            assert_eq!(
                keys.iter().map(|k| k.to_vec()).collect::<Vec<_>>(),
                want.into_iter().cloned().collect::<Vec<_>>()
            );
        }
    }

    proptest::proptest! {
        /// The two tables, the TTL flags and the expiry side table always agree, and the
        /// database holds what a plain map model says it holds.
        #[test]
        fn db_matches_a_map_model(ops in proptest::collection::vec(op(), 1..300), index_from in 0usize..400) {
            let mut db = Db::default();
            let mut model: std::collections::HashMap<Vec<u8>, (Vec<u8>, u64)> = Default::default();
            let mut now = 100u64;
            for (step, op) in ops.into_iter().enumerate() {
                if step == index_from {
                    // Cluster mode's index, built from the keys there are and kept after.
                    db.index_slots();
                }
                model.retain(|_, (_, at)| *at == NO_EXPIRY || *at > now);
                match op {
                    Op::Set(k, len) => {
                        let value: Vec<u8> = (0..len).map(|i| (i as u8) ^ k).collect();
                        db.set_str(&name(k), &value, NO_EXPIRY);
                        model.insert(name(k), (value, NO_EXPIRY));
                    }
                    Op::Remove(k) => {
                        let got = db.remove_live(&name(k), now);
                        let want = model.remove(&name(k));
                        proptest::prop_assert_eq!(
                            got.map(|e| (e.value, e.expire_at_ms)),
                            want.map(|(v, at)| (Value::Str(Bytes::from(v)), at))
                        );
                    }
                    Op::Delete(k) => {
                        proptest::prop_assert_eq!(db.delete_live(&name(k), now), model.remove(&name(k)).is_some());
                    }
                    Op::Expire(k, ttl) => {
                        if db.contains(&name(k), now) {
                            db.set_expiry(&name(k), now + ttl);
                        }
                        if let Some((_, at)) = model.get_mut(&name(k)) {
                            *at = now + ttl;
                        }
                    }
                    Op::Persist(k) => {
                        if db.contains(&name(k), now) {
                            db.set_expiry(&name(k), NO_EXPIRY);
                        }
                        if let Some((_, at)) = model.get_mut(&name(k)) {
                            *at = NO_EXPIRY;
                        }
                    }
                    Op::Sample => {
                        db.expire_sample(now, 5);
                    }
                    Op::Random => {
                        let key = db.random_key(now);
                        proptest::prop_assert_eq!(key.is_none(), model.is_empty());
                        if let Some(key) = key {
                            proptest::prop_assert!(model.contains_key(&key[..]));
                        }
                    }
                    Op::Tick => now += 7,
                }
                db.check_invariants();
            }
            model.retain(|_, (_, at)| *at == NO_EXPIRY || *at > now);
            let mut live = db.keys(b"*", now);
            live.sort();
            let mut want: Vec<Vec<u8>> = model.keys().cloned().collect();
            want.sort();
            proptest::prop_assert_eq!(live.iter().map(|k| k.to_vec()).collect::<Vec<_>>(), want);
            for (key, (value, at)) in &model {
                let entry = db.get(key, now).expect("live in the model");
                proptest::prop_assert_eq!(entry.str_bytes(), Some(&value[..]));
                proptest::prop_assert_eq!(entry.expire_at_ms, *at);
            }
            slots_hold_the_models_keys(&db, &model, now);
        }
    }
}
