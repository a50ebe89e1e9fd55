//! The shard's side of the journal: what each change logs, and replay.
//!
//! While journaling is on, every write the shard applies appends an operation
//! ([`crate::persist::journal::ops`]) to the turn's buffer, which the server takes once per loop turn
//! ([`Shard::take_journal`]) and writes as one record. Every path that changes the shard goes
//! through here or through [`Shard::execute`]: commands, blocked clients' pops, keys moving
//! between shards, evictions, and the task engine's calls that no command makes (the fetch
//! path, closed connections, fallbacks, the passage of time).
//!
//! Replay runs the same operations with journaling off, the clock set to each one's time.

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::families::blocking::{BlockOp, MoveTarget};
use crate::families::lists::End;
use crate::keyspace::{Entry, DATABASES};
use crate::persist::journal::ops::{self, Op};
use crate::shard::Shard;
use crate::table::lookup;
use crate::tasks::{BatchNote, Fallback, TaskError};

impl Shard {
    /// Turns journaling on (the turn's operations are kept for [`Shard::take_journal`]) or
    /// off.
    pub fn set_journaling(&mut self, on: bool) {
        self.journal = on.then(Vec::new);
        self.emitted_tag = None;
        self.tasks.set_recording(on);
    }

    pub fn journaling(&self) -> bool {
        self.journal.is_some()
    }

    /// Operations are logged and not yet taken.
    pub fn journal_pending(&self) -> bool {
        self.journal.as_ref().is_some_and(|j| !j.is_empty())
    }

    /// The turn's buffer, after logging the engine's clock advances that came first.
    /// Called before each operation is logged, so a cross-shard part's marker comes first
    /// (`crate::shard::cross_commit`).
    pub(crate) fn journal_turn(&mut self) -> Option<&mut Vec<u8>> {
        self.journal.as_ref()?;
        self.mark_part();
        let journal = self.journal.as_mut()?;
        for now_ms in self.tasks.take_advances() {
            ops::put_tick(journal, now_ms);
        }
        Some(journal)
    }

    /// Appends the operations logged since the last call to `out`, as one framed record;
    /// false when there were none.
    pub fn take_journal(&mut self, out: &mut Vec<u8>) -> bool {
        let Some(journal) = self.turn_ops() else {
            return false;
        };
        crate::persist::journal::record::append(out, journal);
        journal.clear();
        true
    }

    /// The operations logged since the last call, unframed (a record's payload: consensus
    /// mode proposes them as one Raft entry, which [`Shard::apply_replicated`] replays);
    /// `None` when there were none.
    pub fn take_journal_ops(&mut self) -> Option<Vec<u8>> {
        self.turn_ops().map(std::mem::take)
    }

    /// The turn's operations with the engine's clock advances logged, or `None` when
    /// journaling is off or nothing was logged.
    fn turn_ops(&mut self) -> Option<&mut Vec<u8>> {
        self.journal.as_ref()?;
        let advances = self.tasks.take_advances();
        if !advances.is_empty() {
            self.mark_part();
        }
        let journal = self.journal.as_mut()?;
        for now_ms in advances {
            ops::put_tick(journal, now_ms);
        }
        (!journal.is_empty()).then_some(journal)
    }

    /// Logs a write command after it ran (see `Shard::run`).
    pub(super) fn log_command(
        &mut self,
        db: usize,
        client: u64,
        call: &super::call::Call<'_>,
        rewrite: Option<Vec<Bytes>>,
    ) {
        let now_ms = self.now_ms();
        let args = call.args;
        if !self.borrowed.is_empty()
            && call
                .keys()
                .any(|key| self.borrowed.contains(&(db, key.clone())))
        {
            // It ran on keys lent by other shards: replay here could not see them. Log what
            // this shard's own keys hold now; their owners log theirs on give-back.
            let own: Vec<Bytes> = call
                .keys()
                .filter(|k| !self.borrowed.contains(&(db, (*k).clone())))
                .cloned()
                .collect();
            for key in own {
                self.log_key_state(db, &key);
            }
            return;
        }
        let Some(journal) = self.journal_turn() else {
            return;
        };
        match rewrite {
            Some(rewritten) if rewritten.is_empty() => {}
            Some(rewritten) => ops::put_cmd(journal, db, client, now_ms, &rewritten),
            None => ops::put_cmd(journal, db, client, now_ms, args),
        }
    }

    /// Logs `key`'s current entry (or its absence).
    fn log_key_state(&mut self, db: usize, key: &[u8]) {
        let entry = self.clone_entry(db, key);
        let Some(journal) = self.journal_turn() else {
            return;
        };
        match entry {
            Some(entry) => ops::put_put(journal, db, key, &entry),
            None => ops::put_del(journal, db, key),
        }
    }

    /// Logs a blocked client's pop as the command that does the same on one key.
    pub(crate) fn log_blocked(
        &mut self,
        db: usize,
        client: u64,
        key: &Bytes,
        op: &BlockOp,
        target: MoveTarget,
    ) {
        let b = |s: &'static str| Bytes::from_static(s.as_bytes());
        let end = |e: End| b(if e == End::Left { "left" } else { "right" });
        let pop = |e: End| b(if e == End::Left { "lpop" } else { "rpop" });
        let count = |n: usize| Bytes::from(n.to_string());
        let args: Vec<Bytes> = match op {
            BlockOp::Pop { end, count: None } => vec![pop(*end), key.clone()],
            BlockOp::Pop {
                end,
                count: Some(n),
            } => vec![pop(*end), key.clone(), count(*n)],
            BlockOp::Move { from, .. } if target == MoveTarget::Elsewhere => {
                vec![pop(*from), key.clone()]
            }
            BlockOp::Move { dst, from, to } => {
                vec![b("lmove"), key.clone(), dst.clone(), end(*from), end(*to)]
            }
            BlockOp::ZPop { max, count: n } => {
                let mut args = vec![b(if *max { "zpopmax" } else { "zpopmin" }), key.clone()];
                args.extend(n.map(count));
                args
            }
            BlockOp::XRead { .. } => return,
            BlockOp::XReadGroup(read) => {
                let mut args = vec![
                    b("xreadgroup"),
                    b("group"),
                    read.group.clone(),
                    read.consumer.clone(),
                ];
                if read.count != usize::MAX {
                    args.extend([b("count"), count(read.count)]);
                }
                if read.noack {
                    args.push(b("noack"));
                }
                args.extend([b("streams"), key.clone(), b(">")]);
                args
            }
        };
        let now_ms = self.now_ms();
        if let Some(journal) = self.journal_turn() {
            ops::put_cmd(journal, db, client, now_ms, &args);
        }
    }

    /// Takes another shard's key in for a cross-shard operation (not logged: its owner
    /// still has it in its journal).
    pub fn borrow_in(&mut self, db: usize, key: &Bytes, entry: Entry) {
        if self.journal.is_some() {
            self.borrowed.insert((db, key.clone()));
        }
        self.restore_entry(db, key, entry, false);
    }

    /// Hands a borrowed key back (what it holds now, if anything).
    pub fn borrow_out(&mut self, db: usize, key: &Bytes) -> Option<Entry> {
        self.borrowed.remove(&(db, key.clone()));
        self.lend_entry(db, key)
    }

    // The task engine's calls that no command makes, each logged.

    /// TASK.FETCH's lease step (the fetch runs outside the command table).
    pub fn task_fetch(
        &mut self,
        queues: &[Bytes],
        count: usize,
        lease_ms: Option<u64>,
        client: u64,
    ) -> Result<Vec<Frame>, Frame> {
        if self.names_frozen(queues) {
            return Err(Frame::static_error(super::slot_moves::FROZEN));
        }
        let now = self.now_ms();
        let fetched = crate::families::tasks::commands::fetch_frames(
            &mut self.tasks,
            queues,
            count,
            lease_ms,
            client,
            now,
        );
        if matches!(&fetched, Ok(frames) if !frames.is_empty()) {
            if let Some(journal) = self.journal_turn() {
                ops::put_fetch(journal, client, now, queues, count, lease_ms);
            }
        }
        fetched
    }

    /// Hands back leases that never reached `client`.
    pub fn task_unlease(&mut self, ids: &[Bytes], client: u64) -> usize {
        let now = self.now_ms();
        let count = self.tasks.unlease(ids, client, now);
        if count > 0 {
            if let Some(journal) = self.journal_turn() {
                ops::put_unlease(journal, client, now, ids);
            }
        }
        count
    }

    /// `client`'s connection closed: its leases go back.
    pub fn task_release_owner(&mut self, client: u64) -> usize {
        if self.is_replica() {
            // A replica's tasks change only by its primary's records (a Raft follower's by
            // its leader's entries): a connection closing here, leases and all, is the
            // primary's to settle (the leases run out there). Releasing them here would
            // make this copy differ from the primary's for good.
            return 0;
        }
        let now = self.now_ms();
        let count = self.tasks.release_owner(client, now);
        if count > 0 {
            if let Some(journal) = self.journal_turn() {
                ops::put_release(journal, client, now);
            }
        }
        count
    }

    /// Submits a dead task's fallback here.
    pub fn task_submit_fallback(&mut self, fallback: Fallback) -> Result<Bytes, TaskError> {
        let now = self.now_ms();
        let logged = self.journal.is_some().then(|| fallback.clone());
        let submitted = self.tasks.submit_fallback(fallback, now);
        if let (Ok(_), Some(fallback)) = (&submitted, logged) {
            if let Some(journal) = self.journal_turn() {
                ops::put_fallback(journal, now, &fallback);
            }
        }
        submitted
    }

    /// On a batch's home: a child's end heard of (logged when it counted). Returns the
    /// callback orders when it completed the batch.
    pub fn task_batch_note(&mut self, note: &BatchNote) -> Vec<(Bytes, crate::tasks::Order)> {
        let now = self.now_ms();
        let counted = self.tasks.batch(&note.batch).is_some_and(|b| {
            b.fired_ms.is_none()
                && b.members.contains(&note.child)
                && !b.ends.contains_key(&note.child)
        });
        let orders = self.tasks.batch_note(note, now);
        if counted {
            if let Some(journal) = self.journal_turn() {
                ops::put_batch_note(journal, now, note);
            }
        }
        orders
    }

    /// Applies the passage of time to the task engine (logged if it changed something).
    pub fn task_advance(&mut self) {
        let now = self.now_ms();
        self.tasks.advance(now);
    }

    /// Whether a fetch of `queues` would lease something now.
    pub fn task_has_ready(&mut self, queues: &[Bytes]) -> bool {
        let now = self.now_ms();
        self.tasks.has_ready(queues, now)
    }

    /// Applies one journaled operation (journaling must be off).
    // Long: one arm per operation of the journal's table, each a line or two.
    pub fn replay(&mut self, op: Op) -> Result<(), String> {
        debug_assert!(self.journal.is_none());
        match op {
            Op::Cmd {
                db,
                client,
                now_ms,
                args,
            } => {
                self.set_clock(now_ms);
                let spec = lookup(&args[0])
                    .filter(|s| s.handler.is_some() && s.arity_ok(args.len()))
                    .ok_or_else(|| {
                        format!(
                            "not a command this version replays: {}",
                            String::from_utf8_lossy(&args[0])
                        )
                    })?;
                self.execute(db, client, spec, &args);
            }
            Op::Put { db, key, entry } => {
                self.dbs_mut(db).insert(&key, entry);
            }
            Op::Del { db, key } => {
                self.dbs_mut(db).remove(&key);
            }
            Op::Tick { now_ms } => {
                self.set_clock(now_ms);
                self.tasks.advance(now_ms);
            }
            Op::Fetch {
                client,
                now_ms,
                queues,
                count,
                lease_ms,
            } => {
                self.set_clock(now_ms);
                let _ = self.task_fetch(&queues, count, lease_ms, client);
            }
            Op::Unlease {
                client,
                now_ms,
                ids,
            } => {
                self.set_clock(now_ms);
                self.task_unlease(&ids, client);
            }
            Op::Release { client, now_ms } => {
                self.set_clock(now_ms);
                self.task_release_owner(client);
            }
            Op::Fallback { now_ms, fallback } => {
                self.set_clock(now_ms);
                let _ = self.task_submit_fallback(fallback);
            }
            Op::ReleaseAll { now_ms } => {
                self.set_clock(now_ms);
                self.tasks.release_all(now_ms);
            }
            Op::BatchNote { now_ms, note } => {
                self.set_clock(now_ms);
                self.tasks.batch_note(&note, now_ms);
            }
            Op::Commit { token, parts } => self.note_commit(token, &parts),
            Op::Reset => {
                self.reset_state();
                self.partial_sync = true;
            }
            Op::SnapshotPart { body } => self.import_snapshot_part(body)?,
            Op::SnapshotEnd => self.finish_snapshot()?,
            Op::SyncWhole => self.partial_sync = false,
            Op::Functions { dump } => self.set_functions(dump),
            Op::Slots { body } => self.apply_slots(body)?,
            // Read by `cross_commit::Replay`, which decides what a part's operations do.
            Op::Part { .. } | Op::PartEnd | Op::Abort { .. } => {}
        }
        Ok(())
    }

    /// Ends a replay at `now_ms`: every lease from before the restart is lost (it counts an
    /// attempt, as any lost lease), fallbacks and wake-ups the replay produced are dropped
    /// (the fallbacks were journaled where they went), and journaling starts if `journal`.
    /// The fallbacks of tasks that die now are left for the server to route.
    /// Returns how many leases were released.
    pub fn finish_replay(&mut self, now_ms: u64, journal: bool) -> usize {
        // The replay's fallbacks were submitted (and journaled) where they went the first
        // time; those of tasks that die now, of the restart, go out with the next turn.
        drop(self.tasks.take_fallbacks());
        // Notes lost with the process are asked for again after a restart (`batch_pending`).
        drop(self.tasks.take_batch_notes());
        self.blocked = Default::default();
        self.set_clock(now_ms);
        // Journaling first, so that what the restart changes is logged like anything else;
        // first of all how an open cross-shard part was resolved.
        self.set_journaling(journal);
        if let (Some(outcome), Some(journal)) = (self.part_outcome.take(), self.journal.as_mut()) {
            crate::shard::cross_commit::log_outcome(journal, outcome);
        }
        self.tasks.advance(now_ms);
        let released = self.tasks.release_all(now_ms);
        if released > 0 {
            if let Some(journal) = self.journal_turn() {
                ops::put_release_all(journal, now_ms);
            }
        }
        released
    }

    fn dbs_mut(&mut self, db: usize) -> &mut crate::keyspace::Db {
        debug_assert!(db < DATABASES);
        self.db(db)
    }
}
