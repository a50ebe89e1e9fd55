//! Slots moving between consensus groups (docs/REPLICATION.md, "Moving slots between
//! groups"): the state each group's log carries for it, so that every member of a group
//! holds the same, a snapshot keeps it and a new leader takes over where its predecessor's
//! committed entries left off.
//!
//! * **Group 0's slot map** ([`GroupMap`]): which group serves each slot, and the one move
//!   under way. Its leader journals the whole map after each change (`Op::Slots`, a
//!   [`MAP`] record), as it does the function libraries; the server takes each new map from
//!   here and routes by it ([`Shard::take_changed_slot_map`]).
//! * **The source group** freezes the moving slots in its own log ([`Shard::freeze_slots`]):
//!   from that entry on none of its members serves them ([`Shard::serves_slot`]), so their
//!   keys and queues stop changing; once the map names the target it drops them
//!   ([`Shard::drop_slot_keys`], [`Shard::drop_slot_queues`], [`Shard::dropped_slots`]).
//! * **The target group** copies the frozen keys (as `Put` operations) and queues (a
//!   [`QUEUES`] record) into its own log, then marks them its own ([`Shard::arrive_slots`]),
//!   from which entry on it serves them.
//!
//! Who takes each step, and when, is the server's (`server::consensus::slot_mover`); here
//! is only what each step changes.

use bytes::Bytes;

use super::call::Call;
use super::Shard;
use crate::keyspace::{Entry, DATABASES};
use crate::persist::journal::ops;
use crate::slot::{key_slot, SLOT_COUNT};
use crate::wire::{put_bytes, put_u64, DecodeError, Decoded, Reader};

/// The body of an `Op::Slots` record starts with one of these.
const MAP: u8 = 1;
const FREEZE: u8 = 2;
const QUEUES: u8 = 3;
const ARRIVE: u8 = 4;
const DROP_QUEUES: u8 = 5;
const DROPPED: u8 = 6;

/// The answer for a key of a slot this group does not serve (cluster clients retry it;
/// once the map moves, routing answers `-MOVED` to the slot's new group).
pub const FROZEN: &str = "TRYAGAIN the slot is moving to another group (or has moved); retry";

const WORDS: usize = SLOT_COUNT as usize / 64;

/// Slots `first..=last` moving from group `from` to group `to`: group 0 numbers each move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    pub id: u64,
    pub first: u16,
    pub last: u16,
    pub from: u16,
    pub to: u16,
}

impl std::fmt::Display for Move {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "move {} of slots {}-{} from group {} to group {}",
            self.id, self.first, self.last, self.from, self.to
        )
    }
}

impl Move {
    pub fn holds(&self, slot: u16) -> bool {
        (self.first..=self.last).contains(&slot)
    }

    fn put(&self, out: &mut Vec<u8>) {
        for v in [
            self.id,
            self.first.into(),
            self.last.into(),
            self.from.into(),
            self.to.into(),
        ] {
            put_u64(out, v);
        }
    }

    fn read(r: &mut Reader) -> Decoded<Move> {
        let id = r.u64()?;
        let mut small = || -> Decoded<u16> {
            u16::try_from(r.u64()?).map_err(|_| DecodeError("a slot move out of range"))
        };
        let (first, last, from, to) = (small()?, small()?, small()?, small()?);
        if first > last || last >= SLOT_COUNT {
            return Err(DecodeError("a slot move out of range"));
        }
        Ok(Move {
            id,
            first,
            last,
            from,
            to,
        })
    }
}

/// Group 0's slot map: the group serving each slot, and the move under way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMap {
    owners: Vec<u16>,
    pub moving: Option<Move>,
    /// The number of the last move begun.
    pub last_move: u64,
}

impl GroupMap {
    /// Before any move: group *i* serves shard *i*'s range (`slot::slot_range`).
    pub fn arithmetic(groups: usize) -> GroupMap {
        let owners = (0..SLOT_COUNT)
            .map(|slot| crate::slot::range_shard(slot, groups) as u16)
            .collect();
        GroupMap {
            owners,
            moving: None,
            last_move: 0,
        }
    }

    pub fn owner(&self, slot: u16) -> u16 {
        self.owners[usize::from(slot)]
    }

    pub fn owners(&self) -> &[u16] {
        &self.owners
    }

    /// Each group's ranges, in slot order: (first, last, group).
    pub fn ranges(&self) -> Vec<(u16, u16, u16)> {
        let mut out: Vec<(u16, u16, u16)> = Vec::new();
        for (slot, &group) in self.owners.iter().enumerate() {
            match out.last_mut() {
                Some(range) if range.2 == group => range.1 = slot as u16,
                _ => out.push((slot as u16, slot as u16, group)),
            }
        }
        out
    }

    /// The map with a move of `first..=last` to `to` begun, or why it cannot begin: one
    /// move at a time, of slots one other group serves, to one of `groups`.
    pub fn begin(&self, first: u16, last: u16, to: u16, groups: usize) -> Result<GroupMap, String> {
        if let Some(m) = self.moving {
            return Err(format!(
                "ERR slots {}-{} are still moving from group {} to group {}: one move at a time",
                m.first, m.last, m.from, m.to
            ));
        }
        if first > last || last >= SLOT_COUNT {
            return Err("ERR Invalid or out of range slot".into());
        }
        if usize::from(to) >= groups {
            return Err(format!(
                "ERR there is no group {to} (groups 0-{})",
                groups - 1
            ));
        }
        let from = self.owner(first);
        if (first..=last).any(|slot| self.owner(slot) != from) {
            return Err("ERR the slots to move must all be served by one group".into());
        }
        if from == to {
            return Err(format!("ERR group {to} serves these slots already"));
        }
        let mut next = self.clone();
        next.last_move += 1;
        next.moving = Some(Move {
            id: next.last_move,
            first,
            last,
            from,
            to,
        });
        Ok(next)
    }

    /// The map once the move under way has ended: its slots are its target's.
    pub fn finish(&self) -> GroupMap {
        let mut next = self.clone();
        if let Some(m) = next.moving.take() {
            for slot in m.first..=m.last {
                next.owners[usize::from(slot)] = m.to;
            }
        }
        next
    }

    fn put(&self, out: &mut Vec<u8>) {
        let ranges = self.ranges();
        put_u64(out, ranges.len() as u64);
        for (first, last, group) in ranges {
            put_u64(out, first.into());
            put_u64(out, last.into());
            put_u64(out, group.into());
        }
        put_u64(out, self.last_move);
        match &self.moving {
            Some(m) => {
                out.push(1);
                m.put(out);
            }
            None => out.push(0),
        }
    }

    fn read(r: &mut Reader) -> Decoded<GroupMap> {
        let bad = || DecodeError("a bad slot map");
        let count = r.count()?;
        let mut owners = Vec::with_capacity(usize::from(SLOT_COUNT));
        for _ in 0..count {
            let (first, last, group) = (r.u64()?, r.u64()?, r.u64()?);
            if first != owners.len() as u64 || last < first || last >= u64::from(SLOT_COUNT) {
                return Err(bad());
            }
            let group = u16::try_from(group).map_err(|_| bad())?;
            owners.extend(std::iter::repeat_n(group, (last - first + 1) as usize));
        }
        if owners.len() != usize::from(SLOT_COUNT) {
            return Err(bad());
        }
        let last_move = r.u64()?;
        let moving = match r.flag()? {
            true => Some(Move::read(r)?),
            false => None,
        };
        Ok(GroupMap {
            owners,
            moving,
            last_move,
        })
    }
}

/// One group's part in moves, as its log has it.
#[derive(Debug, Clone)]
pub struct SlotMoves {
    /// Group 0's map (`None` until the first move: the arithmetic one), and whether it
    /// changed since the server last took it.
    map: Option<GroupMap>,
    map_changed: bool,
    /// The slots this group has frozen for a move and not taken back since: it serves
    /// none of them.
    frozen: Box<[u64; WORDS]>,
    frozen_count: usize,
    /// The move this group froze and has not dropped yet.
    pub leaving: Option<Move>,
    /// The last move this group took in whole.
    pub arrived: u64,
}

impl Default for SlotMoves {
    fn default() -> Self {
        SlotMoves {
            map: None,
            map_changed: false,
            frozen: Box::new([0; WORDS]),
            frozen_count: 0,
            leaving: None,
            arrived: 0,
        }
    }
}

impl SlotMoves {
    fn set_frozen(&mut self, first: u16, last: u16, on: bool) {
        for slot in first..=last {
            let (word, bit) = (usize::from(slot) / 64, slot % 64);
            let was = self.frozen[word] >> bit & 1 == 1;
            if was != on {
                self.frozen[word] ^= 1 << bit;
                match on {
                    true => self.frozen_count += 1,
                    false => self.frozen_count -= 1,
                }
            }
        }
    }

    fn frozen_ranges(&self) -> Vec<(u16, u16)> {
        let mut out: Vec<(u16, u16)> = Vec::new();
        for slot in 0..SLOT_COUNT {
            if self.frozen[usize::from(slot) / 64] >> (slot % 64) & 1 == 0 {
                continue;
            }
            match out.last_mut() {
                Some(range) if range.1 + 1 == slot => range.1 = slot,
                _ => out.push((slot, slot)),
            }
        }
        out
    }
}

/// The keys and queues of some moving slots, as the source holds them.
pub struct SlotCopy {
    pub keys: Vec<(usize, Bytes, Entry)>,
}

impl Shard {
    /// Whether this group serves `slot`: false from the entry that froze it for a move
    /// until a move brings it back. (Which group a slot belongs to is the map's to say;
    /// this is the group's own word, in its own log.)
    #[inline]
    pub fn serves_slot(&self, slot: u16) -> bool {
        let moves = &self.slot_moves;
        moves.frozen_count == 0 || moves.frozen[usize::from(slot) / 64] >> (slot % 64) & 1 == 0
    }

    /// Whether a command's keys include one of a slot this group does not serve.
    pub(super) fn touches_frozen(&self, call: &Call<'_>) -> bool {
        match call.keys {
            // The parse found each key's slot already.
            Some(keys) => keys.iter().any(|key| !self.serves_slot(key.slot)),
            None => call.keys().any(|key| !self.serves_slot(key_slot(key))),
        }
    }

    /// Whether any of `names` (queues) lives in a slot this group does not serve.
    pub fn names_frozen(&self, names: &[Bytes]) -> bool {
        self.freezes_slots() && names.iter().any(|name| !self.serves_slot(key_slot(name)))
    }

    /// Whether any slot is frozen here ([`Shard::serves_slot`] is then worth asking).
    pub fn freezes_slots(&self) -> bool {
        self.slot_moves.frozen_count > 0
    }

    /// The move this group froze and has not dropped yet, and the last it took in whole.
    pub fn slot_move_progress(&self) -> (Option<Move>, u64) {
        (self.slot_moves.leaving, self.slot_moves.arrived)
    }

    /// Group 0's map, as its log has it (`None`: no move ever began).
    pub fn slot_map(&self) -> Option<&GroupMap> {
        self.slot_moves.map.as_ref()
    }

    /// On group 0's leader: `map` is the slot map from here on, journaled.
    pub fn log_slot_map(&mut self, map: GroupMap) {
        self.log_slots(MAP, |out| map.put(out));
        self.slot_moves.map = Some(map);
        self.slot_moves.map_changed = true;
    }

    /// Once after each map applied, logged, loaded or dropped by a rebuild: the map the
    /// server routes by from now (`Some(None)`: the arithmetic one).
    pub fn take_changed_slot_map(&mut self) -> Option<Option<GroupMap>> {
        let moves = &mut self.slot_moves;
        std::mem::take(&mut moves.map_changed).then(|| moves.map.clone())
    }

    /// On the source group's leader: the move's slots are frozen from this entry on.
    pub fn freeze_slots(&mut self, m: Move) {
        self.log_slots(FREEZE, |out| m.put(out));
        self.apply_freeze(m);
    }

    fn apply_freeze(&mut self, m: Move) {
        self.slot_moves.set_frozen(m.first, m.last, true);
        self.slot_moves.leaving = Some(m);
    }

    /// The names of `slot`'s live keys in every database: (database, name). Read only.
    pub fn slot_key_names(&mut self, slot: u16) -> Vec<(usize, Bytes)> {
        let mut out = Vec::new();
        for db in 0..DATABASES {
            if self.db(db).is_empty() {
                continue;
            }
            let (_, names) = self.keys_in_slot(db, slot, usize::MAX);
            out.extend(names.into_iter().map(|name| (db, name)));
        }
        out
    }

    /// Copies of these keys' entries, with their expiry (a key gone since is left out).
    /// Read only: the source's members must stay identical.
    pub fn copy_keys(&mut self, names: &[(usize, Bytes)]) -> SlotCopy {
        let keys = names
            .iter()
            .filter_map(|(db, name)| {
                let entry = self.clone_entry(*db, name)?;
                Some((*db, name.clone(), entry))
            })
            .collect();
        SlotCopy { keys }
    }

    /// The queues of `first..=last`, copied ([`crate::tasks::Engine::copy_queues`]).
    pub fn copy_slot_queues(&self, first: u16, last: u16) -> Option<Vec<u8>> {
        self.tasks
            .copy_queues(&|name| (first..=last).contains(&key_slot(name)))
    }

    /// On the target group's leader: keys copied from the source, journaled as puts
    /// (replacing any a copy begun before left).
    pub fn take_in_slot_keys(&mut self, copy: SlotCopy) {
        for (db, key, entry) in copy.keys {
            self.put_entry(db, &key, entry, true);
        }
    }

    /// On the target group's leader: the queues copied from the source, journaled.
    pub fn take_in_slot_queues(&mut self, payload: &[u8]) -> Result<usize, String> {
        let taken = self.tasks.take_in_queues(payload)?;
        self.log_slots(QUEUES, |out| put_bytes(out, payload));
        Ok(taken)
    }

    /// On the target group's leader, after the copies: the move's slots are this group's
    /// from this entry on.
    pub fn arrive_slots(&mut self, m: Move) {
        self.log_slots(ARRIVE, |out| m.put(out));
        self.apply_arrive(m);
    }

    fn apply_arrive(&mut self, m: Move) {
        self.slot_moves.set_frozen(m.first, m.last, false);
        self.slot_moves.arrived = self.slot_moves.arrived.max(m.id);
    }

    /// On the source group's leader, once the target serves the slots: up to `max` keys of
    /// `slot` deleted (journaled); how many went.
    pub fn drop_slot_keys(&mut self, slot: u16, max: usize) -> usize {
        let mut dropped = 0;
        for db in 0..DATABASES {
            if dropped >= max {
                break;
            }
            if self.db(db).is_empty() {
                continue;
            }
            let (_, names) = self.keys_in_slot(db, slot, max - dropped);
            for name in names {
                self.take_entry(db, &name);
                dropped += 1;
            }
        }
        dropped
    }

    /// On the source group's leader: the queues of `first..=last` that it does not serve
    /// removed (a slot a later move brought back keeps its own), journaled.
    pub fn drop_slot_queues(&mut self, first: u16, last: u16) -> usize {
        self.log_slots(DROP_QUEUES, |out| {
            put_u64(out, first.into());
            put_u64(out, last.into());
        });
        self.remove_slot_queues(first, last)
    }

    fn remove_slot_queues(&mut self, first: u16, last: u16) -> usize {
        let moves = &self.slot_moves;
        let frozen = |slot: u16| moves.frozen[usize::from(slot) / 64] >> (slot % 64) & 1 == 1;
        self.tasks.remove_queues(&|name| {
            let slot = key_slot(name);
            (first..=last).contains(&slot) && frozen(slot)
        })
    }

    /// On the source group's leader, after the drops: the move is over here (its slots
    /// stay frozen until a move brings them back).
    pub fn dropped_slots(&mut self, id: u64) {
        self.log_slots(DROPPED, |out| put_u64(out, id));
        self.apply_dropped(id);
    }

    fn apply_dropped(&mut self, id: u64) {
        if self.slot_moves.leaving.is_some_and(|m| m.id == id) {
            self.slot_moves.leaving = None;
        }
    }

    /// Journals (when journaling) an `Op::Slots` record of `kind` whose rest `write` writes.
    fn log_slots(&mut self, kind: u8, write: impl FnOnce(&mut Vec<u8>)) {
        if let Some(journal) = self.journal_turn() {
            let mut body = vec![kind];
            write(&mut body);
            ops::put_slots(journal, &body);
        }
    }

    /// Applies an `Op::Slots` record a leader journaled.
    pub(crate) fn apply_slots(&mut self, body: Bytes) -> Result<(), String> {
        let mut r = Reader::new(body);
        let decoded = (|| -> Decoded<()> {
            match r.u8()? {
                MAP => {
                    self.slot_moves.map = Some(GroupMap::read(&mut r)?);
                    self.slot_moves.map_changed = true;
                }
                FREEZE => self.apply_freeze(Move::read(&mut r)?),
                QUEUES => {
                    let payload = r.bytes()?;
                    self.tasks
                        .take_in_queues(&payload)
                        .map_err(|_| DecodeError("a bad queues payload"))?;
                }
                ARRIVE => self.apply_arrive(Move::read(&mut r)?),
                DROP_QUEUES => {
                    let (first, last) = (r.u64()?, r.u64()?);
                    if first > last || last >= u64::from(SLOT_COUNT) {
                        return Err(DecodeError("a slot range out of range"));
                    }
                    self.remove_slot_queues(first as u16, last as u16);
                }
                DROPPED => self.apply_dropped(r.u64()?),
                _ => return Err(DecodeError("an unknown slot move record")),
            }
            Ok(())
        })();
        decoded.map_err(|e| e.0.to_string())
    }

    /// The snapshot part of this state (`None` when there is nothing to keep).
    pub(crate) fn slot_moves_part(&self) -> Option<Vec<u8>> {
        let moves = &self.slot_moves;
        if moves.map.is_none()
            && moves.frozen_count == 0
            && moves.leaving.is_none()
            && moves.arrived == 0
        {
            return None;
        }
        let mut out = Vec::new();
        match &moves.map {
            Some(map) => {
                out.push(1);
                map.put(&mut out);
            }
            None => out.push(0),
        }
        let frozen = moves.frozen_ranges();
        put_u64(&mut out, frozen.len() as u64);
        for (first, last) in frozen {
            put_u64(&mut out, first.into());
            put_u64(&mut out, last.into());
        }
        match &moves.leaving {
            Some(m) => {
                out.push(1);
                m.put(&mut out);
            }
            None => out.push(0),
        }
        put_u64(&mut out, moves.arrived);
        Some(out)
    }

    /// Loads a part [`Shard::slot_moves_part`] wrote.
    pub(crate) fn import_slot_moves(&mut self, body: Bytes) -> Result<(), String> {
        let mut r = Reader::new(body);
        let mut moves = SlotMoves::default();
        let decoded = (|| -> Decoded<()> {
            if r.flag()? {
                moves.map = Some(GroupMap::read(&mut r)?);
                moves.map_changed = true;
            }
            for _ in 0..r.count()? {
                let (first, last) = (r.u64()?, r.u64()?);
                if first > last || last >= u64::from(SLOT_COUNT) {
                    return Err(DecodeError("a frozen range out of range"));
                }
                moves.set_frozen(first as u16, last as u16, true);
            }
            if r.flag()? {
                moves.leaving = Some(Move::read(&mut r)?);
            }
            moves.arrived = r.u64()?;
            Ok(())
        })();
        decoded.map_err(|e| e.0.to_string())?;
        self.slot_moves = moves;
        Ok(())
    }

    /// A rebuild or full sync starts: the state is what the snapshot and log say again
    /// (and the server is told to route by the arithmetic map until they do).
    pub(crate) fn forget_slot_moves(&mut self) {
        let had_map = self.slot_moves.map.is_some();
        self.slot_moves = SlotMoves::default();
        self.slot_moves.map_changed = had_map;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::cross_commit::Replay;
    use crate::shard::replica::tests::{loaded, records, snapshot_parts};
    use crate::slot::slot_tag;
    use wetask_protocol::Frame;

    fn name(slot: u16, rest: &str) -> Bytes {
        let mut out = b"{".to_vec();
        out.extend_from_slice(slot_tag(slot));
        out.extend_from_slice(b"}");
        out.extend_from_slice(rest.as_bytes());
        Bytes::from(out)
    }

    fn run(shard: &mut Shard, args: &[&[u8]]) -> Frame {
        let args: Vec<Bytes> = args.iter().map(|a| Bytes::copy_from_slice(a)).collect();
        shard.execute_args(0, &args)
    }

    /// What `leader` journaled since the last call, applied on `follower`.
    fn follow(leader: &mut Shard, follower: &mut Shard, replay: &mut Replay) {
        for payload in records(leader) {
            follower.apply_replicated(payload, replay).expect("applies");
        }
    }

    /// `shard` through its snapshot, as a restart loads it.
    fn reloaded(shard: &mut Shard) -> Shard {
        loaded(snapshot_parts(shard))
    }

    #[test]
    fn a_map_begins_one_move_at_a_time_of_one_groups_slots_and_reads_back() {
        let map = GroupMap::arithmetic(2);
        assert_eq!(map.ranges(), vec![(0, 8191, 0), (8192, 16383, 1)]);
        assert!(map
            .begin(8000, 8300, 0, 2)
            .unwrap_err()
            .contains("one group"));
        assert!(map.begin(0, 10, 0, 2).unwrap_err().contains("already"));
        assert!(map.begin(0, 10, 2, 2).unwrap_err().contains("no group 2"));
        assert!(map.begin(10, 0, 1, 2).is_err() && map.begin(0, 16384, 1, 2).is_err());
        let moving = map.begin(8192, 9000, 0, 2).unwrap();
        assert!(moving
            .begin(0, 5, 1, 2)
            .unwrap_err()
            .contains("one move at a time"));
        assert_eq!(
            moving.ranges(),
            map.ranges(),
            "the map changes when the move ends"
        );
        let done = moving.finish();
        assert_eq!(done.ranges(), vec![(0, 9000, 0), (9001, 16383, 1)]);
        assert_eq!((done.moving, done.last_move), (None, 1));
        for map in [moving, done] {
            let mut out = Vec::new();
            map.put(&mut out);
            assert_eq!(
                GroupMap::read(&mut Reader::new(Bytes::from(out))).unwrap(),
                map
            );
        }
        let mut garbage = Vec::new();
        put_u64(&mut garbage, 1);
        for v in [0, 9, 7] {
            put_u64(&mut garbage, v);
        }
        assert!(GroupMap::read(&mut Reader::new(Bytes::from(garbage))).is_err());
    }

    #[test]
    // Long: one move walked through in order (freeze, copy, arrival, drop, snapshot), each step checked on the leader and a follower beside it.
    fn a_move_freezes_copies_arrives_and_drops_identically_on_every_member() {
        let m = Move {
            id: 1,
            first: 100,
            last: 101,
            from: 1,
            to: 0,
        };
        let (moving, staying) = (name(100, "a"), name(102, "b"));
        let queue = name(101, "q");
        let mut source = Shard::new(1);
        source.set_journaling(true);
        let mut source_follower = Shard::new(1);
        let mut source_replay = Replay::default();
        assert_eq!(run(&mut source, &[b"SET", &moving, b"1"]), Frame::ok());
        run(&mut source, &[b"SET", &staying, b"2"]);
        run(&mut source, &[b"TASK.SUBMIT", &queue, b"job"]);
        source.freeze_slots(m);
        follow(&mut source, &mut source_follower, &mut source_replay);
        for shard in [&mut source, &mut source_follower] {
            assert!(!shard.serves_slot(100) && !shard.serves_slot(101) && shard.serves_slot(102));
            // Reads and writes of the slot are refused where every command runs; others go on.
            for args in [&[&b"SET"[..], &moving, b"x"][..], &[b"GET", &moving]] {
                assert!(matches!(run(shard, args), Frame::Error(e) if e.starts_with(b"TRYAGAIN")));
            }
            assert_eq!(
                run(shard, &[b"GET", &staying]),
                Frame::Bulk(Bytes::from_static(b"2"))
            );
            let fetched = shard.task_fetch(std::slice::from_ref(&queue), 1, None, 7);
            assert!(matches!(fetched, Err(Frame::Error(e)) if e.starts_with(b"TRYAGAIN")));
        }

        // The target copies from the source's frozen state and marks the slots its own.
        let mut target = Shard::new(0);
        target.set_journaling(true);
        let mut target_follower = Shard::new(0);
        let mut target_replay = Replay::default();
        for slot in m.first..=m.last {
            let names = source_follower.slot_key_names(slot);
            let copy = source_follower.copy_keys(&names);
            target.take_in_slot_keys(copy);
        }
        let queues = source_follower
            .copy_slot_queues(m.first, m.last)
            .expect("a queue");
        assert_eq!(target.take_in_slot_queues(&queues), Ok(1));
        target.arrive_slots(m);
        follow(&mut target, &mut target_follower, &mut target_replay);
        for shard in [&mut target, &mut target_follower] {
            assert_eq!(shard.slot_move_progress(), (None, 1));
            assert_eq!(
                run(shard, &[b"GET", &moving]),
                Frame::Bulk(Bytes::from_static(b"1"))
            );
            assert_eq!(run(shard, &[b"EXISTS", &staying]), Frame::Integer(0));
            assert_eq!(
                shard
                    .task_fetch(std::slice::from_ref(&queue), 1, None, 7)
                    .map(|f| f.len()),
                Ok(1)
            );
        }

        // The source drops what moved, and stays frozen there.
        assert_eq!(
            source.drop_slot_keys(100, 1000) + source.drop_slot_keys(101, 1000),
            1
        );
        assert_eq!(source.drop_slot_queues(m.first, m.last), 1);
        source.dropped_slots(m.id);
        follow(&mut source, &mut source_follower, &mut source_replay);
        for shard in [&mut source, &mut source_follower] {
            assert_eq!(shard.slot_move_progress(), (None, 0));
            assert!(!shard.serves_slot(100));
            assert_eq!(shard.db(0).len(), 1);
            assert!(!shard.tasks.has_queue(&queue));
        }

        // A snapshot keeps the frozen slots and the progress.
        let mut loaded = reloaded(&mut source_follower);
        assert!(!loaded.serves_slot(100) && !loaded.serves_slot(101) && loaded.serves_slot(102));
        let loaded_target = reloaded(&mut target_follower);
        assert_eq!(loaded_target.slot_move_progress(), (None, 1));
        assert!(matches!(
            run(&mut loaded, &[b"GET", &moving]),
            Frame::Error(_)
        ));
    }

    #[test]
    fn group_0s_map_reaches_its_followers_a_snapshot_and_the_server_once() {
        let mut leader = Shard::new(0);
        leader.set_journaling(true);
        let map = GroupMap::arithmetic(2).begin(8192, 8200, 0, 2).unwrap();
        leader.log_slot_map(map.clone());
        assert_eq!(leader.take_changed_slot_map(), Some(Some(map.clone())));
        assert_eq!(leader.take_changed_slot_map(), None);
        let mut follower = Shard::new(0);
        follow(&mut leader, &mut follower, &mut Replay::default());
        assert_eq!(follower.take_changed_slot_map(), Some(Some(map.clone())));
        let mut loaded = reloaded(&mut follower);
        assert_eq!(loaded.slot_map(), Some(&map));
        assert_eq!(loaded.take_changed_slot_map(), Some(Some(map)));
        // A rebuild forgets it until the snapshot and log say it again.
        loaded.begin_full_sync();
        assert_eq!(loaded.take_changed_slot_map(), Some(None));
    }
}
