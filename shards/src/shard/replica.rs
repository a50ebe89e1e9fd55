//! A replica's side of a shard: what its primary's stream does to it.
//!
//! A replica's shard holds what the primary's shard of the same number holds. A full sync
//! arrives as the primary's snapshot ([`Shard::begin_full_sync`], then each part with
//! [`Shard::sync_part`], then [`Shard::end_full_sync`]); after it, the primary's journal
//! records, each replayed as a restart replays a journal ([`Shard::apply_replicated`]).
//! Everything applied is also logged to this shard's own journal (the snapshot as
//! `Reset`, `SnapshotPart` and `SnapshotEnd` operations, records unchanged), so a replica
//! that restarts loads what it had, and a promoted one has its data on disk.
//!
//! The records carry the primary's clock, so expiry, leases, retries and ids come out as
//! they did there. The replica's own clock never advances its task engine or removes a key
//! (the server skips those chores on a replica, as a Redis replica leaves expiry to its
//! primary); its reads hide keys expired by its clock ([`Shard::set_replica`]), as Redis's
//! replicas do, so a command the primary ran before the key expired still finds it here.

use bytes::Bytes;

use crate::keyspace::Db;
use crate::keyspace::DATABASES;
use crate::persist::journal::ops;
use crate::shard::cross_commit::Replay;
use crate::shard::Shard;

impl Shard {
    /// Marks this shard a replica's (or not): its reads hide expired keys without removing
    /// them (`Db::set_keep_expired`); only the primary's records remove keys.
    pub fn set_replica(&mut self, on: bool) {
        self.replica = on;
        self.dbs.iter_mut().for_each(|db| db.set_keep_expired(on));
    }

    pub fn is_replica(&self) -> bool {
        self.replica
    }

    /// A full sync began here (applied, or replayed from the journal) and has not ended:
    /// the shard holds part of its primary's snapshot.
    pub fn holds_partial_sync(&self) -> bool {
        self.partial_sync
    }

    /// A full sync begins: everything this shard holds goes (WATCHers see every key
    /// change), and the journal logs the reset.
    pub fn begin_full_sync(&mut self) {
        self.reset_state();
        self.forget_functions();
        self.forget_slot_moves();
        self.partial_sync = true;
        if let Some(journal) = self.journal_turn() {
            ops::put_reset(journal);
        }
    }

    /// The full sync that [`Shard::begin_full_sync`] began ends without a snapshot end (a
    /// Redis primary's RDB went in as commands), or the node keeps the part it holds: the
    /// mark goes, and the journal logs it.
    pub fn end_partial_sync(&mut self) {
        self.partial_sync = false;
        if let Some(journal) = self.journal_turn() {
            ops::put_sync_whole(journal);
        }
    }

    /// Drops every key and task, keeping the settings (the slot index, the engine's
    /// retention times).
    pub(super) fn reset_state(&mut self) {
        let indexed = self.dbs.iter().any(Db::slots_indexed);
        self.dbs = (0..DATABASES).map(|_| Db::default()).collect();
        if indexed {
            self.index_slots();
        }
        let replica = self.replica;
        self.set_replica(replica);
        self.tasks = self.tasks.emptied();
        self.blocked = Default::default();
        self.watch_epoch += 1;
        let epoch = self.watch_epoch;
        self.watched.values_mut().for_each(|v| v.0 = epoch);
        self.cross_commits.clear();
        self.snapshot_partial = false;
    }

    /// One part of the primary's snapshot (a snapshot file's record), loaded and logged.
    pub fn sync_part(&mut self, body: Bytes) -> Result<(), String> {
        self.import_snapshot_part(body.clone())?;
        if let Some(journal) = self.journal_turn() {
            ops::put_snapshot_part(journal, &body);
        }
        Ok(())
    }

    /// The primary's snapshot is whole: the task engine rebuilds its indexes.
    pub fn end_full_sync(&mut self) -> Result<(), String> {
        self.finish_snapshot()?;
        if let Some(journal) = self.journal_turn() {
            ops::put_snapshot_end(journal);
        }
        Ok(())
    }

    /// Applies one record of the primary's journal (its payload), through `replay`, which
    /// holds a cross-shard operation's part until its outcome is known, as a restart does.
    /// The record is logged here unchanged. What the replay leaves for the server (the
    /// fallbacks of tasks that died, batch notes) is dropped: the primary routed them, and
    /// its other shards' records carry them.
    pub fn apply_replicated(&mut self, payload: Bytes, replay: &mut Replay) -> Result<(), String> {
        let list = ops::read_ops(payload.clone()).map_err(|e| e.0.to_string())?;
        let journal = self.journal.take();
        self.tasks.set_recording(false);
        // At the primary's clock, a key expired is expired there too: replay removes it.
        let replica = self.replica;
        self.set_replica(false);
        let result = list.into_iter().try_for_each(|op| replay.op(self, op));
        self.set_replica(replica);
        self.tasks.set_recording(journal.is_some());
        if let Some(mut journal) = journal {
            journal.extend_from_slice(&payload);
            self.journal = Some(journal);
        }
        drop(self.tasks.take_fallbacks());
        drop(self.tasks.take_batch_notes());
        result
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::persist::journal::record;
    use crate::table::lookup;
    use wetask_protocol::Frame;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    fn run(shard: &mut Shard, args: &[&str]) -> Frame {
        let args: Vec<Bytes> = args.iter().map(|a| b(a)).collect();
        let spec = lookup(&args[0]).expect("a command");
        shard.execute(0, 1, spec, &args)
    }

    /// The payloads of the records `shard` journaled since the last call.
    pub(in crate::shard) fn records(shard: &mut Shard) -> Vec<Bytes> {
        let mut out = Vec::new();
        shard.take_journal(&mut out);
        let mut payloads = Vec::new();
        let mut at = 0;
        while let record::Next::Record { payload, end } = record::read(&out, at) {
            payloads.push(Bytes::copy_from_slice(payload));
            at = end;
        }
        payloads
    }

    pub(in crate::shard) fn snapshot_parts(shard: &mut Shard) -> Vec<Bytes> {
        let mut parts = Vec::new();
        shard.export_snapshot(&mut |part| parts.push(Bytes::copy_from_slice(part)));
        parts
    }

    #[test]
    fn a_replica_holds_what_its_primary_holds_and_logs_it() {
        let mut primary = Shard::new(0);
        primary.set_journaling(true);
        run(&mut primary, &["set", "before", "1"]);
        run(&mut primary, &["task.submit", "q", "p1"]);
        drop(records(&mut primary));

        let mut replica = Shard::new(0);
        replica.set_journaling(true);
        run(&mut replica, &["set", "stale", "x"]);
        drop(records(&mut replica));
        replica.begin_full_sync();
        for part in snapshot_parts(&mut primary) {
            replica.sync_part(part).expect("a part loads");
        }
        replica.end_full_sync().expect("the snapshot ends");
        assert_eq!(run(&mut replica, &["exists", "stale"]), Frame::Integer(0));
        assert_eq!(run(&mut replica, &["get", "before"]), Frame::Bulk(b("1")));

        run(&mut primary, &["incr", "before"]);
        run(&mut primary, &["task.submit", "q", "p2"]);
        let mut replay = Replay::default();
        for payload in records(&mut primary) {
            replica
                .apply_replicated(payload, &mut replay)
                .expect("applies");
        }
        assert_eq!(run(&mut replica, &["get", "before"]), Frame::Bulk(b("2")));
        assert_eq!(replica.tasks.totals(), primary.tasks.totals());

        // What the replica logged rebuilds it: a restart of the replica loses nothing.
        let mut restarted = Shard::new(0);
        let mut replay = Replay::default();
        for payload in records(&mut replica) {
            for op in ops::read_ops(payload).expect("decodes") {
                replay.op(&mut restarted, op).expect("replays");
            }
        }
        assert_eq!(run(&mut restarted, &["get", "before"]), Frame::Bulk(b("2")));
        assert_eq!(run(&mut restarted, &["exists", "stale"]), Frame::Integer(0));
        assert_eq!(restarted.tasks.totals(), primary.tasks.totals());
    }

    /// Replays `payloads` into a fresh shard, as a restart does.
    fn replayed(payloads: &[Bytes]) -> Shard {
        let mut shard = Shard::new(0);
        let mut replay = Replay::default();
        for payload in payloads {
            for op in ops::read_ops(payload.clone()).expect("decodes") {
                replay.op(&mut shard, op).expect("replays");
            }
        }
        shard
    }

    /// Loads `parts` into a fresh shard, as a restart loads its snapshot file.
    pub(in crate::shard) fn loaded(parts: Vec<Bytes>) -> Shard {
        let mut shard = Shard::new(0);
        for part in parts {
            shard.import_snapshot_part(part).expect("a part loads");
        }
        shard.finish_snapshot().expect("ends");
        shard
    }

    #[test]
    fn a_compaction_in_the_middle_of_a_full_sync_keeps_its_mark() {
        let mut primary = Shard::new(0);
        for n in 0..5 {
            run(&mut primary, &["set", &format!("k{n}"), "v"]);
        }
        let parts = snapshot_parts(&mut primary);
        let mut replica = Shard::new(0);
        replica.set_journaling(true);
        replica.begin_full_sync();
        replica.sync_part(parts[0].clone()).expect("a part loads");
        replica.sync_part(parts[1].clone()).expect("a part loads");
        let journal = records(&mut replica);
        // The compactor replays the journal into a scratch shard and writes its snapshot:
        // a restart from that snapshot still knows it holds part of a full sync.
        let mut scratch = replayed(&journal);
        assert!(scratch.holds_partial_sync());
        let mut restarted = loaded(snapshot_parts(&mut scratch));
        assert!(
            restarted.holds_partial_sync(),
            "the mark survives the snapshot"
        );
        // The sizes and the keys' part arrived; the engine's and the clock's did not.
        assert_eq!(run(&mut restarted, &["dbsize"]), Frame::Integer(5));
        // A whole one has no mark.
        for part in &parts[2..] {
            replica.sync_part(part.clone()).expect("a part loads");
        }
        replica.end_full_sync().expect("the snapshot ends");
        assert!(!loaded(snapshot_parts(&mut replica)).holds_partial_sync());
        // A replica whose marked snapshot is followed by the sync's end in its journal.
        let mut resumed = loaded(snapshot_parts(&mut scratch));
        let mut replay = Replay::default();
        for payload in records(&mut replica) {
            for op in ops::read_ops(payload).expect("decodes") {
                replay.op(&mut resumed, op).expect("replays");
            }
        }
        assert!(!resumed.holds_partial_sync());
    }

    #[test]
    fn a_sync_that_went_in_as_commands_ends_whole_in_the_journal() {
        let mut replica = Shard::new(0);
        replica.set_journaling(true);
        run(&mut replica, &["set", "stale", "x"]);
        replica.begin_full_sync();
        run(&mut replica, &["set", "from-rdb", "1"]);
        let begun = records(&mut replica);
        let restarted = replayed(&begun);
        assert!(restarted.holds_partial_sync(), "a restart mid-load knows");
        replica.end_partial_sync();
        assert!(!replica.holds_partial_sync());
        let mut whole = begun.clone();
        whole.extend(records(&mut replica));
        let mut restarted = replayed(&whole);
        assert!(!restarted.holds_partial_sync());
        assert_eq!(run(&mut restarted, &["exists", "stale"]), Frame::Integer(0));
        assert_eq!(
            run(&mut restarted, &["get", "from-rdb"]),
            Frame::Bulk(b("1"))
        );
    }
}
