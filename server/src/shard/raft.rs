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
use crate::consensus::{Consensus, ELECTION_TICKS, HEARTBEAT_TICKS, TICK};

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
    log: LogFile,
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
        let voters: Vec<u64> = consensus.peers.iter().map(|p| p.id).collect();
        let storage = MemStorage::new_with_conf_state(ConfState::from((voters, vec![])));
        {
            let mut store = storage.wl();
            store
                .append(&loaded.entries)
                .map_err(|e| format!("the Raft log of shard {shard} does not load: {e}"))?;
            store.set_hardstate(loaded.hard_state);
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
        Ok(ShardRaft {
            node,
            log,
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
            last_tick: Instant::now(),
        })
    }

    /// One drive (see the module's comment).
    pub fn drive(&mut self, shard: &mut Shard) {
        self.produced = (self.epoch, self.serving);
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
        if self.serving {
            if let Some(ops) = shard.take_journal_ops() {
                match self.node.propose(Vec::new(), ops) {
                    Ok(()) => self.executed = self.node.raft.raft_log.last_index(),
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
        self.update_role(shard);
        self.publish();
    }

    /// At a commit point, after `drive`: what the replies since the last one wait for.
    pub fn hold(&mut self, shard: &mut Shard) -> Hold {
        let (epoch, serving) = self.produced;
        if !serving {
            return Hold::Now;
        }
        if epoch != self.epoch {
            return Hold::Lost;
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

    // Long: raft-rs's Ready protocol is one ordered sequence (messages, apply, persist,
    // persisted messages, advance, the light ready), clearer whole than split.
    fn handle_ready(&mut self, shard: &mut Shard) {
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
            if !ready.entries().is_empty() || ready.hs().is_some() {
                if let Err(e) = self.log.append(ready.entries(), ready.hs()) {
                    // A reply may wait on this append: it must not go out unlogged.
                    tracing::error!("{e}: exiting");
                    std::process::exit(1);
                }
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
            self.send(ready.take_persisted_messages());
            let mut light = self.node.advance(ready);
            if let Some(commit) = light.commit_index() {
                self.node
                    .mut_store()
                    .wl()
                    .mut_hard_state()
                    .set_commit(commit);
            }
            self.send(light.take_messages());
            self.apply(shard, light.take_committed_entries());
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
