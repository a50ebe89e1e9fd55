//! Which keys of a shard have clients blocked on them (BLPOP, BLMOVE, BZPOPMIN, XREAD …), in
//! the order they blocked, and which of those keys may now serve some of them.
//!
//! The shard only keeps waiter ids and what kind of value each waits for; the server owns
//! what each waiter wants and where its answer goes (`server/src/commands/blocking.rs`).
//! After a command the server takes the ready keys and serves their waiters, oldest first,
//! each whose kind the key now holds, as Redis 7.2 does in `handleClientsBlockedOnKeys`.
//!
//! When a key is ready follows Redis 7.2's `signalKeyAsReady`/`signalDeletedKeyAsReady`:
//! - a key that comes into being (Redis's `dbAdd`: a push, ZADD, RENAME, RESTORE, a STORE
//!   into a missing key …) or a stream that gets entries is ready for the waiters of its
//!   value's kind ([`Blocked::signal_value`]);
//! - a key deleted, or overwritten with a new value, is ready only for blocked XREADGROUPs,
//!   which then answer NOGROUP or WRONGTYPE ([`Blocked::signal_gone`]); a list or sorted-set
//!   waiter is not served by an overwrite (a SORT … STORE over a sorted set its BLPOP waits
//!   on leaves the client blocked, in Redis too).

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;

use crate::keyspace::DATABASES;

/// What a blocked client waits for on a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitKind {
    /// A list pop or move.
    List,
    /// A sorted-set pop.
    ZSet,
    /// XREAD: new entries of a stream.
    Stream,
    /// XREADGROUP: new entries for a group; also answered when the stream goes away.
    Group,
}

impl WaitKind {
    /// True when a key holding a value of `type_name` (TYPE's word) may serve this waiter.
    pub fn takes(self, type_name: &str) -> bool {
        match self {
            WaitKind::List => type_name == "list",
            WaitKind::ZSet => type_name == "zset",
            WaitKind::Stream | WaitKind::Group => type_name == "stream",
        }
    }
}

/// A key's readiness, as a cross-shard operation's coordinator records it for the key's
/// owner: the coordinator runs the commands on borrowed keys, and the owner, where the
/// waiters are, replays what they signalled when the keys come back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// May serve any waiter.
    Any,
    /// Came into being, or got stream entries, holding a value of this type.
    Value(&'static str),
    /// Deleted or overwritten.
    Gone,
}

/// Most signals a coordinator records during one operation; past it, each borrowed key is
/// sent back as ready for any waiter (a bound, not a loss: the waiters look again).
pub const RECORDED_SIGNALS_MAX: usize = 4096;

/// What a coordinator recorded, for [`Recorded::of`] each borrowed key.
#[derive(Default, Debug)]
pub struct Recorded {
    signals: Vec<(usize, Bytes, Signal)>,
    overflowed: bool,
}

impl Recorded {
    /// Where `key`'s first signal stands among all recorded (`usize::MAX` for none): the
    /// keys go home in this order, so their owners see them ready in the order the
    /// operation made them so.
    pub fn first_of(&self, db: usize, key: &[u8]) -> usize {
        self.signals
            .iter()
            .position(|(d, k, _)| *d == db && k[..] == *key)
            .unwrap_or(usize::MAX)
    }

    /// The signals of `key` in database `db`, in order.
    pub fn of(&self, db: usize, key: &[u8]) -> Vec<Signal> {
        if self.overflowed {
            return vec![Signal::Any];
        }
        self.signals
            .iter()
            .filter(|(d, k, _)| *d == db && k[..] == *key)
            .map(|&(_, _, signal)| signal)
            .collect()
    }
}

#[derive(Default)]
pub struct Blocked {
    /// Per database: key -> (waiter id, kind), oldest first. A key with no waiter is removed.
    keys: Vec<HashMap<Bytes, VecDeque<(u64, WaitKind)>>>,
    /// Keys that may serve some of their waiters, each listed once, in signal order.
    ready: Vec<(usize, Bytes)>,
    waiting_keys: usize,
    /// Waiters answered when their key goes away (XREADGROUP), over every key: while there
    /// are any, the shard notes keys that expire (`Shard::expiry_logs_wanted`).
    group_waiters: usize,
    /// While this shard coordinates a cross-shard operation: every signal, for the owners of
    /// the keys it borrowed.
    recording: Option<Recorded>,
}

impl Blocked {
    fn db(&mut self, db: usize) -> &mut HashMap<Bytes, VecDeque<(u64, WaitKind)>> {
        if self.keys.is_empty() {
            self.keys = (0..DATABASES).map(|_| HashMap::new()).collect();
        }
        &mut self.keys[db]
    }

    /// Queues `waiter`, waiting for `kind`, on `key` (last in line).
    pub fn watch(&mut self, db: usize, key: &Bytes, waiter: u64, kind: WaitKind) {
        let queue = self.db(db).entry(key.clone()).or_default();
        let fresh = queue.is_empty();
        let mut added = false;
        if !queue.iter().any(|&(w, _)| w == waiter) {
            queue.push_back((waiter, kind));
            added = true;
        }
        if fresh {
            self.waiting_keys += 1;
        }
        if added && kind == WaitKind::Group {
            self.group_waiters += 1;
        }
    }

    /// How many keys have blocked clients, and how many of those have one that is also
    /// answered when the key goes away (XREADGROUP): INFO's `total_blocking_keys` and
    /// `total_blocking_keys_on_nokey`.
    pub fn key_counts(&self) -> (usize, usize) {
        let mut on_nokey = 0;
        for queue in self.keys.iter().flat_map(|db| db.values()) {
            if queue.iter().any(|&(_, kind)| kind == WaitKind::Group) {
                on_nokey += 1;
            }
        }
        (self.waiting_keys, on_nokey)
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
        let groups_before = queue.iter().filter(|&&(_, k)| k == WaitKind::Group).count();
        queue.retain(|&(w, _)| w != waiter);
        let groups_gone =
            groups_before - queue.iter().filter(|&&(_, k)| k == WaitKind::Group).count();
        if queue.is_empty() {
            map.remove(key);
            self.waiting_keys -= 1;
        }
        self.group_waiters -= groups_gone;
    }

    /// Whether some waiter is answered when its key goes away (XREADGROUP).
    pub fn has_group_waiters(&self) -> bool {
        self.group_waiters > 0
    }

    /// True while a signal may matter: a client waits here, or a coordinator records.
    pub fn active(&self) -> bool {
        self.waiting_keys > 0 || self.recording.is_some()
    }

    /// Starts recording every signal (a cross-shard operation borrowed keys); a recording
    /// already under way goes on.
    pub fn start_recording(&mut self) {
        self.recording.get_or_insert_with(Recorded::default);
    }

    /// Stops recording and hands over what was recorded.
    pub fn take_recorded(&mut self) -> Recorded {
        self.recording.take().unwrap_or_default()
    }

    /// Replays signals a coordinator recorded for `key`, now back home.
    pub fn replay(&mut self, db: usize, key: &[u8], signals: &[Signal]) {
        for &signal in signals {
            match signal {
                Signal::Any => self.signal(db, key),
                Signal::Value(type_name) => self.signal_value(db, key, type_name),
                Signal::Gone => self.signal_gone(db, key),
            }
        }
    }

    /// Notes that `key` may serve any of its waiters (a waiter just parked looks at once).
    pub fn signal(&mut self, db: usize, key: &[u8]) {
        self.signal_if(db, key, Signal::Any, |_| true);
    }

    /// `key` came into being, or got stream entries, holding a value of `type_name`: ready
    /// when some waiter on it takes that kind (cheap when nobody waits on anything).
    pub fn signal_value(&mut self, db: usize, key: &[u8], type_name: &'static str) {
        self.signal_if(db, key, Signal::Value(type_name), |kind| {
            kind.takes(type_name)
        });
    }

    /// `key` was deleted or overwritten: ready when a blocked XREADGROUP waits on it.
    pub fn signal_gone(&mut self, db: usize, key: &[u8]) {
        self.signal_if(db, key, Signal::Gone, |kind| kind == WaitKind::Group);
    }

    fn signal_if(
        &mut self,
        db: usize,
        key: &[u8],
        signal: Signal,
        wanted: impl Fn(WaitKind) -> bool,
    ) {
        if let Some(recorded) = self.recording.as_mut() {
            if recorded.signals.len() < RECORDED_SIGNALS_MAX {
                recorded
                    .signals
                    .push((db, Bytes::copy_from_slice(key), signal));
            } else {
                recorded.overflowed = true;
            }
        }
        if self.waiting_keys == 0 {
            return;
        }
        let Some((key, queue)) = self.keys[db].get_key_value(key) else {
            return;
        };
        if !queue.iter().any(|&(_, kind)| wanted(kind)) {
            return;
        }
        if !self.ready.iter().any(|(d, k)| *d == db && k == key) {
            self.ready.push((db, key.clone()));
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

    /// Every key of `db` is gone (FLUSHDB, FLUSHALL): its blocked XREADGROUPs are answered.
    pub fn signal_db_gone(&mut self, db: usize) {
        if self.waiting_keys == 0 {
            return;
        }
        let keys: Vec<Bytes> = self.keys[db].keys().cloned().collect();
        for key in keys {
            self.signal_gone(db, &key);
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
            .map(|q| q.iter().map(|&(w, _)| w).collect())
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
        b.watch(0, &key, 7, WaitKind::List);
        b.watch(0, &key, 3, WaitKind::List);
        b.watch(0, &key, 7, WaitKind::List);
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

    #[test]
    fn a_key_is_ready_for_the_kinds_its_value_serves() {
        let mut b = Blocked::default();
        let (list, stream) = (Bytes::from_static(b"l"), Bytes::from_static(b"s"));
        b.watch(0, &list, 1, WaitKind::List);
        b.watch(0, &stream, 2, WaitKind::Stream);
        // A sorted set made at a list waiter's key, or anything deleted, serves nobody.
        b.signal_value(0, b"l", "zset");
        b.signal_gone(0, b"l");
        b.signal_gone(0, b"s");
        assert!(!b.has_ready());
        b.signal_value(0, b"l", "list");
        b.signal_value(0, b"s", "stream");
        assert_eq!(b.take_ready(), vec![(0, list), (0, stream.clone())]);
        // A blocked XREADGROUP is answered when its stream goes away.
        b.watch(0, &stream, 3, WaitKind::Group);
        b.signal_gone(0, b"s");
        assert_eq!(b.take_ready(), vec![(0, stream)]);
        b.signal_db_gone(0);
        assert_eq!(b.take_ready().len(), 1);
    }

    #[test]
    fn a_coordinator_records_signals_for_the_owners() {
        let mut b = Blocked::default();
        assert!(!b.active());
        b.start_recording();
        assert!(b.active());
        b.signal_gone(0, b"k");
        b.signal_value(0, b"k", "list");
        b.signal_value(1, b"k", "zset");
        let recorded = b.take_recorded();
        assert!(!b.active());
        assert_eq!(
            recorded.of(0, b"k"),
            vec![Signal::Gone, Signal::Value("list")]
        );
        assert_eq!(recorded.of(1, b"k"), vec![Signal::Value("zset")]);
        assert!(recorded.of(0, b"other").is_empty());
        // The owner replays them on its waiters.
        let mut owner = Blocked::default();
        owner.watch(0, &Bytes::from_static(b"k"), 1, WaitKind::List);
        owner.replay(0, b"k", &recorded.of(0, b"k"));
        assert_eq!(owner.take_ready().len(), 1);
    }
}
