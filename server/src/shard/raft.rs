//! A shard's member of its consensus group (`--consensus raft`): the raft-rs node, driven
//! by the shard's loop at each commit point (`ShardCore::commit_journal`).
//!
//! Each drive steps the messages other nodes sent, ticks the timer, proposes the turn's
//! journal operations as one entry (on the leader), and handles the Ready: messages out,
//! entries and hard state appended and synced (`consensus::log_file`), committed entries
//! applied, read states noted.
//!
//! **The leader executes first and answers after the commit.** A leader runs commands as
//! a single node does; what they change is the turn's journal operations, proposed as one
//! entry. Every reply of the turn, reads included, waits (`net::held_sends`) for a
//! [`Barrier`]: the entry committed (a quorum has it on disk) and a ReadIndex round
//! confirming that this node still led when the turn ended, so a read never shows a write
//! that may be lost, nor misses one another leader committed (linearizable reads through
//! ReadIndex, not a lease: no clock is trusted).
//!
//! **Followers apply, and serve no keys.** A follower replays committed entries as a
//! replica replays its primary's records (`Shard::apply_replicated`), never runs its own
//! expiry or task engine, and sends keyed commands to the leader with `-MOVED`.
//!
//! **A leader that loses its leadership rebuilds.** Its state may hold writes that never
//! commit. It drops everything and replays the committed log (no compaction yet, so the
//! whole log), and the connections whose replies waited are closed: their commands' fate
//! is unknown to them, as after a crash.
//!
//! **A new leader serves once it has applied every earlier entry**: its term's first entry
//! committed and applied. Until then keyed commands are answered `-TRYAGAIN`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use raft::eraftpb::{ConfState, Entry, EntryType, Message, MessageType};
use raft::storage::MemStorage;
use raft::{Config, RawNode, ReadOnlyOption, StateRole, Storage};
use wetask_shards::shard::cross_commit::Replay;
use wetask_shards::Shard;

use crate::consensus::log_file::LogFile;
use crate::consensus::persister::Persister;
use crate::consensus::{Consensus, ELECTION_TICKS, HEARTBEAT_TICKS, TICK};

/// The longest a leader's operations wait for the entry in flight before going anyway
/// (`ShardRaft::may_propose`).
const GATHER_MAX: std::time::Duration = std::time::Duration::from_millis(2);
/// How long gathered operations wait, once nothing is in flight, for the rest of the
/// clients the last commit answered (`ShardRaft::may_propose`).
const GATHER_IDLE: std::time::Duration = std::time::Duration::from_micros(200);

/// What a turn's replies wait for.
#[derive(Clone, Copy, Debug)]
pub struct Barrier {
    /// The leadership they were produced under.
    epoch: u64,
    /// The last entry the node had proposed, and the ReadIndex request issued for them.
    index: u64,
    read: u64,
}

/// What to do with the replies produced since the last commit point.
pub enum Hold {
    /// Send them (this node did not lead: redirects, keyless replies).
    Now,
    /// Their leadership ended before they committed: close their connections.
    Lost,
    Until(Barrier),
}

/// Whether a barrier has passed.
pub enum Passed {
    Yes,
    No,
    Lost,
}

pub struct ShardRaft {
    node: RawNode<MemStorage>,
    persister: Persister,
    /// The last Ready number the log writer has synced, as raft-rs was told.
    persisted: u64,
    /// The term and vote last handed to the log writer.
    synced_vote: (u64, u64),
    consensus: Arc<Consensus>,
    shard: usize,
    replay: Replay,
    /// The term this node leads and runs commands in (0: it does not).
    lead_term: u64,
    serving: bool,
    /// Bumped whenever `serving` changes.
    epoch: u64,
    /// `epoch` and `serving` as the commands since the last drive ran under.
    produced: (u64, bool),
    /// The last entry proposed while serving (executed here, not applied again), and the
    /// last of them seen committed. Below `executed`, `confirmed` means this node's state
    /// holds writes that may never commit: an entry of another leader may have taken
    /// their index (comparing indices with `applied` alone misses that).
    executed: u64,
    confirmed: u64,
    applied: u64,
    read_issued: u64,
    read_done: u64,
    /// The last drive proposed an entry (see `hold`).
    proposed_now: bool,
    /// Operations have waited since then for the entry in flight to commit; their
    /// replies, and the replies the last entry carried; since when nothing has been in
    /// flight while they wait (`may_propose`).
    gathering_since: Option<Instant>,
    /// When the entry in flight was proposed (INFO's `round_us`).
    round_started: Option<Instant>,
    gathered: usize,
    last_group: usize,
    idle_since: Option<Instant>,
    last_tick: Instant,
}

impl ShardRaft {
    /// Opens the group's log in `dir` and starts its node as a follower.
    pub fn open(
        consensus: Arc<Consensus>,
        shard: usize,
        dir: &std::path::Path,
        logger: &slog::Logger,
    ) -> Result<ShardRaft, String> {
        let (log, loaded) = LogFile::open(&LogFile::path(dir, shard))?;
        let hard_state = loaded.hard_state.clone();
        let voters: Vec<u64> = consensus.peers.iter().map(|p| p.id).collect();
        let storage = MemStorage::new_with_conf_state(ConfState::from((voters, vec![])));
        {
            let mut store = storage.wl();
            store
                .append(&loaded.entries)
                .map_err(|e| format!("the Raft log of shard {shard} does not load: {e}"))?;
            store.set_hardstate(loaded.hard_state.clone());
        }
        let config = Config {
            id: consensus.me,
            election_tick: ELECTION_TICKS,
            heartbeat_tick: HEARTBEAT_TICKS,
            max_size_per_msg: 4 << 20,
            max_inflight_msgs: 256,
            check_quorum: true,
            pre_vote: true,
            read_only_option: ReadOnlyOption::Safe,
            ..Config::default()
        };
        config.validate().map_err(|e| e.to_string())?;
        let node = RawNode::new(&config, storage, logger).map_err(|e| e.to_string())?;
        let persister = Persister::spawn(log, consensus.clone(), shard)?;
        Ok(ShardRaft {
            node,
            persister,
            persisted: 0,
            synced_vote: (hard_state.term, hard_state.vote),
            consensus,
            shard,
            replay: Replay::default(),
            lead_term: 0,
            serving: false,
            epoch: 0,
            produced: (0, false),
            executed: 0,
            confirmed: 0,
            applied: 0,
            read_issued: 0,
            read_done: 0,
            proposed_now: false,
            gathering_since: None,
            round_started: None,
            gathered: 0,
            last_group: 1,
            idle_since: None,
            last_tick: Instant::now(),
        })
    }

    /// One drive (see the module's comment).
    pub fn drive(&mut self, shard: &mut Shard) {
        self.produced = (self.epoch, self.serving);
        self.proposed_now = false;
        let inbox = std::mem::take(&mut *self.group().inbox.lock().expect("raft inbox"));
        for message in inbox {
            // A proposal comes only from this node's own shard while it leads: raft-rs
            // would append a forwarded one as the leader's own, which the leader never ran.
            if matches!(
                message.get_msg_type(),
                MessageType::MsgPropose | MessageType::MsgReadIndex
            ) {
                continue;
            }
            let _ = self.node.step(message);
        }
        if self.last_tick.elapsed() > TICK * 20 {
            // The process was stopped or starved: one tick, not a burst of them.
            self.last_tick = Instant::now() - TICK;
        }
        while self.last_tick.elapsed() >= TICK {
            self.node.tick();
            self.last_tick += TICK;
        }
        if self.serving && self.node.raft.state != StateRole::Leader {
            // A message deposed it: what ran since the last drive must not be proposed (a
            // follower forwards proposals to its leader).
            self.step_down(shard);
        }
        if self.serving && self.may_propose() {
            if let Some(ops) = shard.take_journal_ops() {
                match self.node.propose(Vec::new(), ops) {
                    Ok(()) => {
                        self.gathering_since = None;
                        self.idle_since = None;
                        self.last_group = std::mem::take(&mut self.gathered).max(1);
                        self.executed = self.node.raft.raft_log.last_index();
                        self.proposed_now = true;
                        self.round_started.get_or_insert_with(Instant::now);
                        self.group().proposed.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        tracing::warn!(shard = self.shard, "a proposal was refused ({e})");
                        // Its commands ran here: the state must be rebuilt.
                        self.executed = self.node.raft.raft_log.last_index() + 1;
                        self.step_down(shard);
                    }
                }
            }
        }
        self.handle_ready(shard);
        if self.node.raft.raft_log.committed >= self.executed {
            if let Some(started) = self.round_started.take() {
                let group = self.group();
                group.rounds.fetch_add(1, Ordering::Relaxed);
                group
                    .round_us
                    .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
            }
        }
        self.update_role(shard);
        self.publish();
    }

    /// Group commit: while an entry is on its way to a quorum, the next turns' operations
    /// gather and go as one entry when it commits (or after [`GATHER_MAX`]), so that each
    /// round costs every node one log sync however the clients' requests spread over the
    /// leader's turns. Measured on this project's 2-CPU machine (3 nodes sharing one disk,
    /// SET 64 B, 16 connections): an entry per turn carried 5.5 writes and each node
    /// synced 1,100 times a second.
    ///
    /// Once nothing is in flight, the gathered operations go when their replies are as
    /// many as the last entry's were, or [`GATHER_IDLE`] after the commit: the clients the
    /// last commit answered send again within microseconds of each other, and proposing
    /// at the first of them split every round in two (8 writes an entry of 16 clients).
    fn may_propose(&mut self) -> bool {
        if self.node.raft.raft_log.committed < self.executed {
            return self
                .gathering_since
                .is_some_and(|at| at.elapsed() >= GATHER_MAX);
        }
        if self.gathered >= self.last_group {
            return true;
        }
        let idle = *self.idle_since.get_or_insert_with(Instant::now);
        idle.elapsed() >= GATHER_IDLE
    }

    /// How soon the loop must drive again for gathered operations to go (it may sleep
    /// longer otherwise).
    pub fn wake_within(&self) -> Option<std::time::Duration> {
        let since = self.gathering_since?;
        let left = match self.idle_since {
            Some(idle) => GATHER_IDLE.saturating_sub(idle.elapsed()),
            None => GATHER_MAX.saturating_sub(since.elapsed()),
        };
        Some(left.max(std::time::Duration::from_micros(20)))
    }

    /// At a commit point, after `drive`: what the replies since the last one wait for.
    pub fn hold(&mut self, shard: &mut Shard, sends: usize) -> Hold {
        let (epoch, serving) = self.produced;
        if !serving {
            return Hold::Now;
        }
        if epoch != self.epoch {
            return Hold::Lost;
        }
        if shard.journal_pending() {
            // Their operations go with the next entry, proposed after them.
            self.gathering_since.get_or_insert_with(Instant::now);
            self.gathered += sends;
            return Hold::Until(Barrier {
                epoch: self.epoch,
                index: self.node.raft.raft_log.last_index() + 1,
                read: 0,
            });
        }
        if self.proposed_now {
            // An entry proposed after these replies were made: a quorum accepting it
            // proves that no other leader had been elected when they were (any newer
            // leader's voters would refuse it), which is what ReadIndex's round proves.
            return Hold::Until(Barrier {
                epoch: self.epoch,
                index: self.executed,
                read: 0,
            });
        }
        self.read_issued += 1;
        self.node
            .read_index(self.read_issued.to_le_bytes().to_vec());
        self.handle_ready(shard);
        Hold::Until(Barrier {
            epoch: self.epoch,
            index: self.executed,
            read: self.read_issued,
        })
    }

    pub fn passed(&self, barrier: &Barrier) -> Passed {
        if barrier.epoch != self.epoch {
            return Passed::Lost;
        }
        let committed = self.node.raft.raft_log.committed;
        match committed >= barrier.index && self.read_done >= barrier.read {
            true => Passed::Yes,
            false => Passed::No,
        }
    }

    fn group(&self) -> &crate::consensus::Group {
        &self.consensus.groups[self.shard]
    }

    /// raft-rs's asynchronous Ready protocol: messages out (a leader's appends go before
    /// its own log is synced), committed entries applied, the entries put in memory for
    /// raft-rs to read and handed to the log writer (`consensus::persister`) with the
    /// messages that must wait for the sync; the writer's progress is reported back here.
    fn handle_ready(&mut self, shard: &mut Shard) {
        let persisted = self.persister.persisted();
        if persisted > self.persisted {
            self.persisted = persisted;
            self.node.on_persist_ready(persisted);
        }
        while self.node.has_ready() {
            let mut ready = self.node.ready();
            self.send(ready.take_messages());
            if !ready.snapshot().is_empty() {
                // Never produced: no node compacts its log yet.
                tracing::error!(
                    shard = self.shard,
                    "a Raft snapshot arrived; not supported yet"
                );
            }
            self.apply(shard, ready.take_committed_entries());
            let mut bytes = Vec::new();
            // The term and vote must be on disk before any message that depends on them;
            // the commit index need not (a restart learns it again), so a Ready that only
            // moves it costs no write and no fsync.
            let vote_moved = ready
                .hs()
                .is_some_and(|hs| (hs.term, hs.vote) != self.synced_vote);
            if !ready.entries().is_empty() || vote_moved {
                crate::consensus::log_file::encode(ready.entries(), ready.hs(), &mut bytes);
                if let Some(hs) = ready.hs() {
                    self.synced_vote = (hs.term, hs.vote);
                }
            }
            if !ready.entries().is_empty() || ready.hs().is_some() {
                let mut store = self.node.mut_store().wl();
                if let Err(e) = store.append(ready.entries()) {
                    tracing::error!(shard = self.shard, "Raft storage refused entries: {e}");
                }
                if let Some(hs) = ready.hs() {
                    store.set_hardstate(hs.clone());
                }
            }
            for state in ready.take_read_states() {
                if let Ok(bytes) = <[u8; 8]>::try_from(&state.request_ctx[..]) {
                    self.read_done = self.read_done.max(u64::from_le_bytes(bytes));
                }
            }
            let after_sync = ready.take_persisted_messages();
            self.persister.submit(ready.number(), bytes, after_sync);
            self.node.advance_append_async(ready);
            self.node.advance_apply();
        }
    }

    fn send(&self, messages: Vec<Message>) {
        for message in messages {
            self.consensus.transport.send(self.shard, &message);
        }
    }

    /// Applies committed entries, skipping those this node ran as their leader.
    fn apply(&mut self, shard: &mut Shard, entries: Vec<Entry>) {
        for entry in entries {
            self.applied = entry.index;
            let ran_here = self.lead_term != 0 && entry.term == self.lead_term;
            if ran_here {
                self.confirmed = entry.index;
            }
            if entry.get_entry_type() != EntryType::EntryNormal || entry.data.is_empty() || ran_here
            {
                continue;
            }
            if let Err(e) = shard.apply_replicated(entry.data, &mut self.replay) {
                tracing::error!(
                    shard = self.shard,
                    index = entry.index,
                    "an entry does not apply: {e}"
                );
            }
        }
    }

    /// Starts or stops serving as the node's role and progress allow.
    fn update_role(&mut self, shard: &mut Shard) {
        let raft = &self.node.raft;
        let leads = raft.state == StateRole::Leader;
        if self.serving && !leads {
            self.step_down(shard);
        } else if !self.serving
            && leads
            && raft.commit_to_current_term()
            && self.applied >= raft.raft_log.committed
        {
            self.serving = true;
            self.epoch += 1;
            self.lead_term = raft.term;
            self.executed = raft.raft_log.last_index();
            self.confirmed = self.executed;
            shard.set_replica(false);
            shard.set_journaling(true);
            self.group().elected.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                shard = self.shard,
                term = self.lead_term,
                "leading the shard's group"
            );
        }
    }

    /// Stops serving; if this node ran commands that have not committed, its state is
    /// rebuilt from the committed log.
    fn step_down(&mut self, shard: &mut Shard) {
        let speculative = self.confirmed < self.executed || shard.take_journal_ops().is_some();
        self.serving = false;
        self.epoch += 1;
        self.lead_term = 0;
        shard.set_journaling(false);
        shard.set_replica(true);
        tracing::info!(
            shard = self.shard,
            rebuild = speculative,
            executed = self.executed,
            confirmed = self.confirmed,
            applied = self.applied,
            "no longer leading the shard's group"
        );
        if !speculative {
            return;
        }
        shard.begin_full_sync();
        self.replay = Replay::default();
        let first = self.node.store().first_index().unwrap_or(1);
        let entries = match self.node.store().entries(
            first,
            self.applied + 1,
            None,
            raft::GetEntriesContext::empty(false),
        ) {
            Ok(entries) => entries,
            Err(e) => {
                tracing::error!(
                    shard = self.shard,
                    "cannot read the Raft log back: {e}; exiting"
                );
                std::process::exit(1);
            }
        };
        let applied = self.applied;
        self.apply(shard, entries);
        self.applied = applied;
        self.group().rebuilds.fetch_add(1, Ordering::Relaxed);
    }

    fn publish(&self) {
        let raft = &self.node.raft;
        let group = self.group();
        group.leader.store(raft.leader_id, Ordering::Relaxed);
        group.term.store(raft.term, Ordering::Relaxed);
        group
            .commit
            .store(raft.raft_log.committed, Ordering::Relaxed);
        group.applied.store(self.applied, Ordering::Relaxed);
        group.serving.store(self.serving, Ordering::Release);
    }
}

/// raft-rs's log lines, into `tracing` (warnings and errors; the rest is noise at a
/// heartbeat's rate).
pub fn logger() -> slog::Logger {
    slog::Logger::root(TracingDrain, slog::o!())
}

struct TracingDrain;

impl slog::Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &slog::Record, _: &slog::OwnedKVList) -> Result<(), slog::Never> {
        match record.level() {
            slog::Level::Critical | slog::Level::Error => tracing::error!("raft: {}", record.msg()),
            slog::Level::Warning => tracing::warn!("raft: {}", record.msg()),
            slog::Level::Info => tracing::debug!("raft: {}", record.msg()),
            _ => {}
        }
        Ok(())
    }
}
