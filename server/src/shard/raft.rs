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
//! commit. It drops everything, loads the group's snapshot and replays the committed
//! entries after it, and the connections whose replies waited are closed: their commands'
//! fate is unknown to them, as after a crash.
//!
//! **Snapshots bound the log.** Once the entries since the last snapshot pass
//! `raft-snapshot-log-bytes`, a thread of its own makes the next one from the last one and
//! those entries (`consensus::snapshotter`), and the log is compacted to it, in memory and
//! on disk. A follower that has fallen behind the compacted log is sent the snapshot file
//! and loads it, as a replica's full sync does.
//!
//! **Members change one at a time** (`consensus::membership`): the leader proposes the
//! change as an entry of its own (`RAFT ADD`, `RAFT REMOVE`), and each member applies it
//! when it commits. A founding member's log starts at [`START`], after an empty snapshot
//! that names the founding members, so a node that joins later (`--raft-join`) always
//! starts from a snapshot and learns the members from it.
//!
//! **A new leader serves once it has applied every earlier entry**: its term's first entry
//! committed and applied. Until then keyed commands are answered `-TRYAGAIN`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use raft::eraftpb::{ConfChange, Entry, EntryType, Message, MessageType, Snapshot};
use raft::{Config, RawNode, ReadOnlyOption, SnapshotStatus, StateRole, Storage};
use wetask_shards::shard::cross_commit::Replay;
use wetask_shards::Shard;

use crate::consensus::log_file::LogFile;
use crate::consensus::persister::Persister;
use crate::consensus::snapshot_file::{self, Meta, Snapshots};
use crate::consensus::snapshotter::{Made, Making, ScratchShard};
use crate::consensus::storage::LogStore;
use crate::consensus::{Consensus, ELECTION_TICKS, HEARTBEAT_TICKS, TICK};

/// The longest a leader's operations wait for the entry in flight before going anyway
/// (`ShardRaft::may_propose`).
const GATHER_MAX: std::time::Duration = std::time::Duration::from_millis(2);
/// How long gathered operations wait, once nothing is in flight, for the rest of the
/// clients the last commit answered (`ShardRaft::may_propose`).
const GATHER_IDLE: std::time::Duration = std::time::Duration::from_micros(200);
/// The index and term of a founding member's first snapshot, empty: its log starts after.
pub const START: (u64, u64) = (5, 5);

/// How often the leader of a group other than 0 compares its members with group 0's
/// (`ShardRaft::follow_membership`).
const MEMBERSHIP_CHECK: std::time::Duration = std::time::Duration::from_millis(100);

/// How long a leader of a group other than 0 goes on without word from group 0's leader
/// before it hands its leadership over (`ShardRaft::follow_membership`): four election
/// timeouts, past any election of group 0's.
const METADATA_SILENCE: std::time::Duration =
    std::time::Duration::from_millis(TICK.as_millis() as u64 * ELECTION_TICKS as u64 * 4);

/// After a snapshot fails, the next try waits this long.
const SNAPSHOT_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

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
    node: RawNode<LogStore>,
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
    snapshots: Arc<Snapshots>,
    scratch: ScratchShard,
    /// The snapshot being made, and when a failed one may be tried again.
    making: Option<Making>,
    snapshot_retry_at: Option<Instant>,
    /// The node stopped leading since `take_deposed` last looked.
    deposed: bool,
    /// RAFT TRANSFER: the voter asked for, then the barrier of the turn that asked (its
    /// reply goes first: the transfer deposes this node, which would close the
    /// connections whose replies still wait).
    transfer: Option<(u64, Option<Barrier>)>,
    /// A member was added: the next snapshot is made now, whatever the log's size (the
    /// new member can only start from one that names it).
    snapshot_wanted: bool,
    /// A snapshot installed counts as applied only once its Ready is persisted (raft-rs
    /// refuses an applied index past the persisted one): the Ready's number.
    apply_after: Option<u64>,
    /// When `follow_membership` last looked.
    membership_checked: Instant,
    /// Slot moves: the last entry proposed, with the state's part in moves when it was
    /// (published as committed once it commits: `publish_moves`).
    moves_pending: Option<(u64, MoveProgress)>,
    /// Group 0: a slot map the last proposal carried, published once it commits (a move
    /// begun in a map that never commits must not reach the other groups: the simulation
    /// found a source that froze slots for such a move, and nobody served them again).
    map_pending: Option<(u64, Option<GroupMap>)>,
}

/// A group's part in slot moves: the move it froze and has not dropped, the last it took in.
type MoveProgress = (Option<wetask_shards::shard::slot_moves::Move>, u64);
use wetask_shards::shard::slot_moves::GroupMap;

impl ShardRaft {
    /// Opens the group's snapshot and log in `dir`, loads the snapshot into `state`, and
    /// starts its node as a follower. `scratch` makes the snapshot thread's shard.
    pub fn open(
        consensus: Arc<Consensus>,
        shard: usize,
        dir: &std::path::Path,
        logger: &slog::Logger,
        state: &mut Shard,
        scratch: ScratchShard,
    ) -> Result<ShardRaft, String> {
        let snapshots = Arc::new(Snapshots::new(dir, shard));
        snapshots.remove_incoming();
        let base = open_snapshot(&consensus, shard, &snapshots, state)?;
        let (log, storage) = load_log(&consensus, shard, dir, &snapshots, &base)?;
        let base = (base.index, base.term);
        let hard_state = storage.hard_state().clone();
        let config = raft_config(&consensus, base.0)?;
        let node = RawNode::new(&config, storage, logger).map_err(|e| e.to_string())?;
        let persister = Persister::spawn(log, consensus.clone(), shard)?;
        let started = consensus.clock.now();
        *consensus.groups[shard].heard.lock().expect("heard") = Some(started);
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
            applied: base.0,
            read_issued: 0,
            read_done: 0,
            proposed_now: false,
            gathering_since: None,
            round_started: None,
            gathered: 0,
            last_group: 1,
            idle_since: None,
            last_tick: started,
            snapshots,
            scratch,
            making: None,
            snapshot_retry_at: None,
            snapshot_wanted: false,
            transfer: None,
            deposed: false,
            apply_after: None,
            membership_checked: Instant::now(),
            moves_pending: None,
            map_pending: None,
        })
    }

    /// One drive (see the module's comment).
    pub fn drive(&mut self, shard: &mut Shard) {
        if let Some((to, Some(barrier))) = self.transfer {
            match self.passed(&barrier) {
                Passed::Yes => {
                    self.transfer = None;
                    self.node.transfer_leader(to);
                }
                Passed::Lost => self.transfer = None,
                Passed::No => {}
            }
        }
        self.produced = (self.epoch, self.serving);
        self.proposed_now = false;
        self.step_inbox();
        let now = self.now();
        if now - self.last_tick > TICK * 20 {
            // The process was stopped or starved: one tick, not a burst of them.
            self.last_tick = now - TICK;
        }
        while now - self.last_tick >= TICK {
            // Not while a snapshot waits to be persisted: raft-rs has moved its commit to the
            // snapshot but not `applied` (it may not, until then), and an election would
            // read the entries between, which the snapshot replaced (a panic the
            // simulation found). The ticks resume once it is on disk.
            if self.apply_after.is_none() {
                self.node.tick();
            }
            self.last_tick += TICK;
        }
        let raft = &self.node.raft;
        if self.serving && (raft.state != StateRole::Leader || raft.lead_transferee.is_some()) {
            // A message deposed it, or it is handing the leadership over: what ran since
            // the last drive must not be proposed (a follower forwards proposals to its
            // leader; a leader in a transfer drops them).
            self.step_down(shard);
        }
        if self.serving && self.may_propose() {
            self.propose_gathered(shard);
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
        self.publish_moves(shard);
        self.follow_membership(shard);
        self.promote_caught_up(shard);
        self.snapshot_chores();
        self.publish();
    }

    /// With several shards, group 0 is the metadata group: its members are the cluster's
    /// (`RAFT ADD` and `REMOVE` go to it), and the leader of every other group follows
    /// them, one change at a time, an addition (as a learner, promoted by this group's
    /// leader once caught up in this group) before a removal (so a group never has fewer
    /// members than group 0). A leader that group 0 no longer names hands its
    /// leadership to a member that stays, whose turn it then is to remove it. A view of
    /// group 0 that lags only delays a change, or undoes one the next look redoes; but a
    /// node removed from group 0 while it was down never hears of it (group 0's leader
    /// sends it nothing more), so a leader that has heard nothing from group 0's leader for
    /// [`METADATA_SILENCE`] hands its leadership over too (the simulation found a removed
    /// node that led group 1 keeping it, and its place in it, for good).
    fn follow_membership(&mut self, shard: &mut Shard) {
        let raft = &self.node.raft;
        if self.shard == 0
            || !self.serving
            || raft.has_pending_conf()
            || raft.lead_transferee.is_some()
        {
            return;
        }
        let now = self.now();
        if now - self.membership_checked < MEMBERSHIP_CHECK {
            return;
        }
        self.membership_checked = now;
        if self.metadata_silent(now) {
            self.hand_over_unsure_of_members();
            return;
        }
        let target = self.consensus.members(0);
        let mine = self.consensus.members(self.shard);
        if target.is_empty() || target == mine {
            return;
        }
        let change = if let Some(&id) = target.iter().find(|id| !mine.contains(id)) {
            match self.consensus.peer(id) {
                Some(peer) => crate::consensus::membership::add_learner(&peer),
                None => return,
            }
        } else if let Some(&id) = mine.iter().find(|id| !target.contains(id)) {
            if id == self.consensus.me {
                // To a voter that stays (raft-rs ignores a transfer to a learner).
                let voters = self.consensus.voters(self.shard);
                if let Some(&to) = voters
                    .iter()
                    .find(|&&other| other != id && target.contains(&other))
                {
                    tracing::info!(
                        shard = self.shard,
                        to,
                        "group 0 removed this node: handing the leadership over"
                    );
                    self.node.transfer_leader(to);
                }
                return;
            }
            crate::consensus::membership::remove(id)
        } else {
            return;
        };
        let (kind, member) = (change.get_change_type(), change.node_id);
        match self.propose_change(shard, change) {
            Ok(()) => tracing::info!(
                shard = self.shard,
                ?kind,
                member,
                "following group 0's members"
            ),
            Err(e) => tracing::warn!(
                shard = self.shard,
                member,
                "following group 0's members: {e}"
            ),
        }
    }

    /// Publishes the group's committed part in slot moves (`Group::froze`, `arrived`):
    /// a follower's state is what it applied, all committed; a leader's may run ahead of
    /// its commit, so it publishes what its last proposal carried once that commits, or
    /// its state when nothing it ran waits (a new leader whose last applied entries made it
    /// serve: the simulation found one that never published a freeze so).
    fn publish_moves(&mut self, shard: &mut Shard) {
        let committed = self.node.raft.raft_log.committed;
        let settled = committed >= self.executed && !shard.journal_pending();
        if !self.serving || settled {
            if let Some(map) = shard.take_changed_slot_map() {
                self.map_pending = Some((0, map));
            }
        }
        match self.map_pending.take() {
            Some((index, map)) if committed >= index => self.consensus.set_slot_map(map),
            pending => self.map_pending = pending,
        }
        let progress = match (self.serving, self.moves_pending) {
            (false, _) => shard.slot_move_progress(),
            (true, Some((index, progress))) if committed >= index => {
                self.moves_pending = None;
                progress
            }
            (true, None) if settled => shard.slot_move_progress(),
            (true, _) => return,
        };
        let group = self.group();
        if let Some(leaving) = progress.0 {
            group.froze.fetch_max(leaving.id, Ordering::Relaxed);
        }
        group.arrived.fetch_max(progress.1, Ordering::Relaxed);
    }

    /// Whether this node, not leading group 0, has heard nothing from its leader for
    /// [`METADATA_SILENCE`].
    fn metadata_silent(&self, now: Instant) -> bool {
        if self.consensus.serving(0) {
            return false;
        }
        let heard = *self.consensus.groups[0].heard.lock().expect("heard");
        heard.is_none_or(|at| now - at >= METADATA_SILENCE)
    }

    /// Hands the leadership to the voter with the most of the log: this node's view of
    /// the members may be stale ([`ShardRaft::metadata_silent`]).
    fn hand_over_unsure_of_members(&mut self) {
        if let Some(to) = self.most_caught_up_voter() {
            tracing::info!(
                shard = self.shard,
                to,
                "no word from group 0's leader: handing the leadership over (this node's view of the members may be stale)"
            );
            self.node.transfer_leader(to);
        }
    }

    /// Another voter of this group, the one with the most of the log.
    fn most_caught_up_voter(&self) -> Option<u64> {
        let raft = &self.node.raft;
        raft.prs()
            .iter()
            .filter(|(id, _)| {
                **id != self.consensus.me && raft.prs().conf().voters().contains(**id)
            })
            .max_by_key(|(id, p)| (p.matched, std::cmp::Reverse(**id)))
            .map(|(id, _)| *id)
    }

    /// On the leader: a learner that has every committed entry becomes a voter (one change
    /// at a time). Until then the quorum is the voters', so a member that joins and takes
    /// minutes to catch up costs the group no availability (as a voter at once, a group
    /// of 3 growing to 4 would need 3 of 4 at once, the new one not yet among them).
    fn promote_caught_up(&mut self, shard: &mut Shard) {
        let raft = &self.node.raft;
        if !self.serving || raft.has_pending_conf() || raft.lead_transferee.is_some() {
            return;
        }
        let committed = raft.raft_log.committed;
        let caught_up = raft.prs().conf().learners().iter().copied().find(|id| {
            raft.prs()
                .get(*id)
                .is_some_and(|p| p.matched >= committed && p.recent_active)
        });
        let Some(peer) = caught_up.and_then(|id| self.consensus.peer(id)) else {
            return;
        };
        let id = peer.id;
        match self.propose_change(shard, crate::consensus::membership::add(&peer)) {
            Ok(()) => tracing::info!(
                shard = self.shard,
                member = id,
                committed,
                "a learner caught up: promoting it to a voter"
            ),
            Err(e) => tracing::warn!(shard = self.shard, member = id, "promoting a learner: {e}"),
        }
    }

    /// Proposes the operations gathered since the last entry as the next one: the index
    /// the replies held for them wait for (`barrier`), so nothing may take it first.
    fn propose_gathered(&mut self, shard: &mut Shard) {
        let Some(ops) = shard.take_journal_ops() else {
            return;
        };
        match self.node.propose(Vec::new(), ops) {
            Ok(()) => {
                self.gathering_since = None;
                self.idle_since = None;
                self.last_group = std::mem::take(&mut self.gathered).max(1);
                self.executed = self.node.raft.raft_log.last_index();
                self.moves_pending = Some((self.executed, shard.slot_move_progress()));
                if let Some(map) = shard.take_changed_slot_map() {
                    self.map_pending = Some((self.executed, map));
                }
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

    /// Steps the messages other nodes sent (and the transport's snapshot notes).
    fn step_inbox(&mut self) {
        let inbox = std::mem::take(&mut *self.group().inbox.lock().expect("raft inbox"));
        let from_leader = inbox.iter().any(|m| {
            m.from == self.node.raft.leader_id
                && matches!(
                    m.get_msg_type(),
                    MessageType::MsgAppend | MessageType::MsgHeartbeat | MessageType::MsgSnapshot
                )
        });
        if from_leader {
            *self.group().heard.lock().expect("heard") = Some(self.now());
        }
        for message in inbox {
            match message.get_msg_type() {
                // A proposal comes only from this node's own shard while it leads: raft-rs
                // would append a forwarded one as the leader's own, which the leader never
                // ran.
                MessageType::MsgPropose | MessageType::MsgReadIndex => continue,
                // A leader's transfer starts an election at once: not while a snapshot
                // waits to be persisted (see `drive`'s ticks); the leader gives it up.
                MessageType::MsgTimeoutNow if self.apply_after.is_some() => continue,
                // The transport's note that a snapshot went out (or did not).
                MessageType::MsgSnapStatus => {
                    let status = match message.reject {
                        true => SnapshotStatus::Failure,
                        false => SnapshotStatus::Finish,
                    };
                    self.node.report_snapshot(message.from, status);
                    continue;
                }
                MessageType::MsgSnapshot => {
                    let checked = match message.get_snapshot().data.is_empty() {
                        true => self.streamed(&message).map(|_| ()),
                        false => usable(message.get_snapshot()),
                    };
                    if let Err(e) = checked {
                        tracing::warn!(shard = self.shard, "a snapshot was refused: {e}");
                        continue;
                    }
                }
                _ => {}
            }
            let _ = self.node.step(message);
        }
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
                .is_some_and(|at| self.now() - at >= GATHER_MAX);
        }
        if self.gathered >= self.last_group {
            return true;
        }
        let now = self.now();
        let idle = *self.idle_since.get_or_insert(now);
        now - idle >= GATHER_IDLE
    }

    /// How soon the loop must drive again for gathered operations to go (it may sleep
    /// longer otherwise).
    pub fn wake_within(&self) -> Option<std::time::Duration> {
        let since = self.gathering_since?;
        let left = match self.idle_since {
            Some(idle) => GATHER_IDLE.saturating_sub(self.now() - idle),
            None => GATHER_MAX.saturating_sub(self.now() - since),
        };
        Some(left.max(std::time::Duration::from_micros(20)))
    }

    /// At a commit point, after `drive`: what the replies since the last one wait for.
    pub fn hold(&mut self, shard: &mut Shard, sends: usize) -> Hold {
        let hold = self.barrier(shard, sends);
        if let Some((to, None)) = self.transfer {
            self.transfer = match hold {
                Hold::Until(barrier) => Some((to, Some(barrier))),
                Hold::Now | Hold::Lost => None,
            };
        }
        hold
    }

    fn barrier(&mut self, shard: &mut Shard, sends: usize) -> Hold {
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

    /// The node's clock (a simulation's moves only when it says).
    fn now(&self) -> Instant {
        self.consensus.clock.now()
    }

    /// Raft's view of its log, for a simulation's failure report.
    #[cfg(test)]
    pub fn describe(&self) -> String {
        let log = &self.node.raft.raft_log;
        format!(
            "raft: committed {} persisted {} applied {} last {} first {} unstable {} {:?} store base {:?} kept {} aligned {} terms {:?}; shard: applied {} executed {} confirmed {} read {}/{} apply_after {:?} persister {}; progress {:?} transferee {:?} pending conf {}",
            log.committed,
            log.persisted,
            log.applied,
            log.last_index(),
            log.first_index(),
            log.unstable.offset,
            log.unstable.snapshot.as_ref().map(|s| s.get_metadata().index),
            self.node.store().base(),
            self.node.store().kept().len(),
            self.node
                .store()
                .kept()
                .iter()
                .enumerate()
                .all(|(i, e)| e.index == self.node.store().base().0 + 1 + i as u64),
            self.node
                .store()
                .kept()
                .iter()
                .rev()
                .take(3)
                .map(|e| (e.index, e.term))
                .collect::<Vec<_>>(),
            self.applied,
            self.executed,
            self.confirmed,
            self.read_done,
            self.read_issued,
            self.apply_after,
            self.persister.persisted(),
            self.node
                .raft
                .prs()
                .iter()
                .map(|(id, p)| (*id, p.matched, p.next_idx, p.state, p.paused))
                .collect::<Vec<_>>(),
            self.node.raft.lead_transferee,
            self.node.raft.pending_conf_index,
        )
    }

    /// A simulation's (`consensus::sim`): the log writer writes what has gathered, as its
    /// thread does; false when nothing waited.
    /// The last entry of the node's log.
    #[cfg(test)]
    pub fn last_index(&self) -> u64 {
        self.node.raft.raft_log.last_index()
    }

    /// A simulation's crash: a piece of the next waiting write (`cut` picks its length)
    /// reaches the log, torn.
    #[cfg(test)]
    pub fn crash_mid_write(&mut self, cut: u64) {
        self.persister.write_torn(cut);
    }

    #[cfg(test)]
    pub fn write_log(&mut self) -> bool {
        self.persister.write_waiting()
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
        if self
            .apply_after
            .is_some_and(|number| self.persisted >= number)
        {
            self.apply_after = None;
            self.node.advance_apply();
        }
        while self.node.has_ready() {
            let mut ready = self.node.ready();
            self.send(ready.take_messages());
            let installing = !ready.snapshot().is_empty();
            if installing {
                self.install(shard, ready.snapshot());
            }
            self.apply(shard, ready.take_committed_entries(), true);
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
                let store = self.node.mut_store();
                if let Err(e) = store.append(ready.entries()) {
                    tracing::error!(shard = self.shard, "Raft storage refused entries: {e}");
                }
                if let Some(hs) = ready.hs() {
                    store.set_hard_state(hs.clone());
                }
            }
            for state in ready.take_read_states() {
                if let Ok(bytes) = <[u8; 8]>::try_from(&state.request_ctx[..]) {
                    self.read_done = self.read_done.max(u64::from_le_bytes(bytes));
                }
            }
            let after_sync = ready.take_persisted_messages();
            if installing {
                // The log is what follows the snapshot, and the hard state.
                self.persister.rewrite(
                    ready.number(),
                    self.node.store().encode_whole(),
                    after_sync,
                );
            } else {
                self.persister.submit(ready.number(), bytes, after_sync);
            }
            if installing {
                self.apply_after = Some(ready.number());
            }
            self.node.advance_append_async(ready);
            if self.apply_after.is_none() {
                self.node.advance_apply();
            }
        }
    }

    fn send(&self, messages: Vec<Message>) {
        for message in messages {
            match message.get_msg_type() {
                MessageType::MsgSnapshot => self.send_snapshot(message),
                _ => self.consensus.transport.send(self.shard, &message),
            }
        }
    }

    /// Sends raft-rs's snapshot message (its data left out by `LogStore::snapshot`) with
    /// the snapshot file, opened here and streamed by the transport; a simulation's gets
    /// the file as its data. A snapshot that cannot go is reported failed at once, so that
    /// raft-rs asks for it again.
    fn send_snapshot(&self, mut message: Message) {
        let to = message.to;
        let said = message.get_snapshot().get_metadata();
        let (index, term) = (said.index, said.term);
        let sent = match snapshot_file::open_to_send(&self.snapshots.path(), index, term) {
            Ok((file, len)) => {
                tracing::info!(
                    shard = self.shard,
                    to,
                    index,
                    bytes = len,
                    "sending the snapshot to a follower behind the compacted log"
                );
                self.group().snapshots_sent.fetch_add(1, Ordering::Relaxed);
                let transport = &self.consensus.transport;
                if transport.is_capturing() {
                    let mut data = Vec::new();
                    let read = std::io::Read::read_to_end(&mut &file, &mut data);
                    message.mut_snapshot().data = data.into();
                    transport.send(self.shard, &message);
                    read.is_ok()
                } else {
                    transport.send_snapshot(self.shard, &message, file, len)
                }
            }
            Err(e) => {
                tracing::warn!(shard = self.shard, to, "a snapshot was not sent: {e}");
                false
            }
        };
        if !sent {
            crate::consensus::transport::report_snapshot_to(
                &self.consensus,
                self.shard as u16,
                to,
                false,
            );
        }
    }

    /// Applies committed entries, skipping those this node ran as their leader, and the
    /// membership changes among them unless `changes` is false (a rebuild: the group's
    /// members are Raft's state, not the shard's).
    fn apply(&mut self, shard: &mut Shard, entries: Vec<Entry>, changes: bool) {
        for entry in entries {
            self.applied = entry.index;
            let ran_here = self.lead_term != 0 && entry.term == self.lead_term;
            if ran_here {
                self.confirmed = entry.index;
            }
            if entry.get_entry_type() == EntryType::EntryConfChange {
                if changes {
                    self.change_members(&entry);
                }
                continue;
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
        // A leader handing its leadership over (RAFT TRANSFER, `follow_membership`) serves
        // no more: raft-rs drops its proposals until the transfer ends.
        let leads = raft.state == StateRole::Leader && raft.lead_transferee.is_none();
        if self.serving && !leads {
            self.step_down(shard);
        } else if !self.serving
            && leads
            && raft.commit_to_current_term()
            && self.applied >= raft.raft_log.last_index()
        {
            // Every entry in the log applied, not only the committed ones: after a rebuild
            // in the same term (a proposal refused), the entries it had proposed are in
            // the log but not in its state, and serving again in that term would skip them
            // as its own when they commit (the simulation found a write lost so).
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

    /// Whether the node stopped leading since the last call (`ShardCtx` then ends the
    /// commands blocked on it).
    pub fn take_deposed(&mut self) -> bool {
        std::mem::take(&mut self.deposed)
    }

    /// Stops serving; if this node ran commands that have not committed, its state is
    /// rebuilt from the snapshot and the committed log.
    fn step_down(&mut self, shard: &mut Shard) {
        let speculative = self.confirmed < self.executed || shard.take_journal_ops().is_some();
        self.serving = false;
        self.deposed = true;
        self.moves_pending = None;
        self.map_pending = None;
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
        // The snapshot in place may be newer than the log's compaction: its own index
        // says where the entries take over.
        let first = match self.snapshots.load(shard) {
            Ok(loaded) => loaded.map_or(0, |meta| meta.index) + 1,
            Err(e) => fatal(self.shard, &format!("cannot load the Raft snapshot: {e}")),
        };
        let entries = match self.node.store().entries(
            first,
            self.applied + 1,
            None,
            raft::GetEntriesContext::empty(false),
        ) {
            Ok(entries) => entries,
            Err(e) => fatal(self.shard, &format!("cannot read the Raft log back: {e}")),
        };
        let applied = self.applied;
        self.apply(shard, entries, false);
        self.applied = applied;
        self.group().rebuilds.fetch_add(1, Ordering::Relaxed);
    }

    /// Loads a snapshot the leader sent (this node had fallen behind its compacted log):
    /// in place on disk first, then into the shard, replacing everything.
    fn install(&mut self, shard: &mut Shard, snapshot: &Snapshot) {
        let streamed;
        let (installed, data) = match snapshot.data.is_empty() {
            true => {
                let said = snapshot.get_metadata();
                let path = self.take_streamed(said.index, said.term);
                streamed = std::fs::read(&path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()));
                match &streamed {
                    Ok(data) => (self.snapshots.install_file(&path, data), &data[..]),
                    Err(e) => (Err(e.clone()), &[][..]),
                }
            }
            false => (self.snapshots.install(&snapshot.data), &snapshot.data[..]),
        };
        let meta = match installed {
            Ok(found) => found,
            Err(e) => fatal(
                self.shard,
                &format!("cannot install the leader's snapshot: {e}"),
            ),
        };
        let (index, term) = (meta.index, meta.term);
        self.note_members(&meta);
        shard.begin_full_sync();
        if let Err(e) = snapshot_file::import(data, shard) {
            fatal(
                self.shard,
                &format!("cannot load the leader's snapshot: {e}"),
            );
        }
        self.replay = Replay::default();
        let store = self.node.mut_store();
        store.install(index, term);
        store.set_conf_state(meta.conf_state());
        self.applied = index;
        let group = self.group();
        group.snapshots_installed.fetch_add(1, Ordering::Relaxed);
        group.snapshot_index.store(index, Ordering::Relaxed);
        tracing::info!(
            shard = self.shard,
            index,
            term,
            bytes = data.len(),
            "loaded the leader's snapshot"
        );
    }

    /// The file of streamed snapshot `message` (`consensus::transport`): it must have
    /// arrived whole from its sender, and its header must say what the message says (every
    /// record's checksum is checked when it is installed).
    fn streamed(&self, message: &Message) -> Result<std::path::PathBuf, String> {
        let said = message.get_snapshot().get_metadata();
        let incoming = self.group().incoming.lock().expect("incoming snapshots");
        let Some(arrived) = incoming
            .iter()
            .find(|i| (i.from, i.index, i.term) == (message.from, said.index, said.term))
        else {
            return Err("a snapshot message without its file".into());
        };
        agrees(&snapshot_file::read_meta(&arrived.path)?, said)?;
        Ok(arrived.path.clone())
    }

    /// The file of the streamed snapshot (`index`, `term`) raft-rs took; the others
    /// that arrived up to it are deleted.
    fn take_streamed(&self, index: u64, term: u64) -> std::path::PathBuf {
        let mut incoming = self.group().incoming.lock().expect("incoming snapshots");
        let Some(at) = incoming
            .iter()
            .position(|i| (i.index, i.term) == (index, term))
        else {
            fatal(self.shard, "raft-rs took a snapshot whose file is gone");
        };
        let taken = incoming.remove(at).path;
        incoming.retain(|i| {
            let stale = i.index <= index;
            if stale {
                let _ = std::fs::remove_file(&i.path);
            }
            !stale
        });
        taken
    }

    /// Applies a committed membership change: the new member's address noted, Raft's
    /// voters changed.
    fn change_members(&mut self, entry: &Entry) {
        let change = match crate::consensus::membership::read(&entry.data) {
            Ok(change) => change,
            Err(e) => {
                tracing::error!(shard = self.shard, index = entry.index, "{e}");
                return;
            }
        };
        match crate::consensus::membership::added(&change) {
            Ok(Some(peer)) => {
                // A new member can start only from a snapshot that names it (a learner
                // promoted has one already).
                if !self.consensus.members(self.shard).contains(&peer.id) {
                    self.snapshot_wanted = true;
                }
                self.consensus.learn(peer);
            }
            Ok(None) => {}
            Err(e) => tracing::error!(shard = self.shard, index = entry.index, "{e}"),
        }
        match self.node.apply_conf_change(&change) {
            Ok(conf) => {
                self.consensus
                    .set_members(self.shard, &conf.voters, &conf.learners);
                tracing::info!(
                    shard = self.shard,
                    index = entry.index,
                    change = ?change.get_change_type(),
                    member = change.node_id,
                    voters = ?self.consensus.voters(self.shard),
                    learners = ?conf.learners,
                    "the group's members changed"
                );
                self.node.mut_store().set_conf_state(conf);
            }
            Err(e) => tracing::error!(shard = self.shard, "a membership change failed: {e}"),
        }
    }

    /// The members a snapshot names: their addresses noted, its voters and learners
    /// published.
    fn note_members(&self, meta: &Meta) {
        for peer in &meta.members {
            self.consensus.learn(peer.clone());
        }
        self.consensus
            .set_members(self.shard, &meta.voters(), &meta.learners);
    }

    /// Proposes a membership change (this node must lead and serve); the reply of the
    /// turn that proposed it waits for its commit, as a write's does. The operations
    /// gathered so far go first, as their own entry: replies held for them wait for the
    /// next index, which the change must not take (the simulation caught a write
    /// acknowledged when the change at its index committed, its own entry after it lost).
    pub fn propose_change(&mut self, shard: &mut Shard, change: ConfChange) -> Result<(), String> {
        if !self.serving {
            return Err("this node does not lead the group".into());
        }
        if self.node.raft.has_pending_conf() {
            return Err("a membership change is still in progress; try again".into());
        }
        self.propose_gathered(shard);
        if !self.serving {
            return Err("this node does not lead the group".into());
        }
        self.node
            .propose_conf_change(Vec::new(), change)
            .map_err(|e| format!("the change was refused ({e})"))?;
        self.executed = self.node.raft.raft_log.last_index();
        Ok(())
    }

    /// Asks voter `to` to take over the leadership (raft-rs's leader transfer: it is
    /// caught up first, then told to campaign at once), once this turn's replies are out.
    pub fn transfer_leadership(&mut self, to: u64) {
        self.transfer = Some((to, None));
    }

    /// Collects a finished snapshot (the log is compacted to it), and starts the next
    /// one once the log since the last has grown past `raft-snapshot-log-bytes`.
    fn snapshot_chores(&mut self) {
        if self.making.as_ref().is_some_and(Making::finished) {
            match self.making.take().expect("checked").outcome() {
                Made::Done { index, term, bytes } => {
                    if bytes > 0 {
                        self.group().snapshots_made.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(shard = self.shard, index, bytes, "Raft snapshot made");
                    }
                    self.compact(index, term);
                }
                Made::Failed(e) => {
                    tracing::error!(shard = self.shard, "a Raft snapshot failed: {e}");
                    self.snapshot_retry_at = Some(self.now() + SNAPSHOT_RETRY);
                }
            }
        }
        let store = self.node.store();
        self.group()
            .log_bytes
            .store(store.kept_bytes() as u64, Ordering::Relaxed);
        let due = (self.snapshot_wanted
            || store.kept_bytes() as u64 >= self.consensus.snapshot_log_bytes)
            && self.applied > store.base().0
            && self.making.is_none()
            && self.snapshot_retry_at.is_none_or(|at| self.now() >= at);
        if !due {
            return;
        }
        let (base, _) = store.base();
        let folded = store
            .term(self.applied)
            .and_then(|term| {
                let entries = store.entries(
                    base + 1,
                    self.applied + 1,
                    None,
                    raft::GetEntriesContext::empty(false),
                )?;
                Ok((term, entries))
            })
            .map_err(|e| e.to_string())
            .and_then(|(term, entries)| {
                Making::start(
                    self.snapshots.clone(),
                    &self.scratch,
                    entries,
                    (self.applied, term),
                    self.consensus.clock.is_simulated(),
                )
            });
        match folded {
            Ok(making) => {
                self.making = Some(making);
                self.snapshot_wanted = false;
            }
            Err(e) => {
                tracing::error!(shard = self.shard, "cannot start a Raft snapshot: {e}");
                self.snapshot_retry_at = Some(self.now() + SNAPSHOT_RETRY);
            }
        }
    }

    /// Drops the entries the snapshot of `(index, term)` holds, from memory and from
    /// the log file (rewritten by the log writer, after what it has queued).
    fn compact(&mut self, index: u64, term: u64) {
        let store = self.node.mut_store();
        if index <= store.base().0 {
            return;
        }
        store.compact(index, term);
        self.persister
            .rewrite(0, self.node.store().encode_whole(), Vec::new());
        self.group().snapshot_index.store(index, Ordering::Relaxed);
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
        group
            .persisted
            .store(raft.raft_log.persisted, Ordering::Release);
        if self.serving {
            let mut matched = group.matched.lock().expect("matched");
            matched.clear();
            let me = self.consensus.me;
            matched.extend(
                raft.prs()
                    .iter()
                    .filter(|(id, _)| **id != me)
                    .map(|(_, p)| p.matched),
            );
        }
        group.leadership.store(self.epoch, Ordering::Relaxed);
        group.serving.store(self.serving, Ordering::Release);
    }
}

/// raft-rs's settings for a node that has applied up to `applied`.
fn raft_config(consensus: &Consensus, applied: u64) -> Result<Config, String> {
    let mut config = Config {
        id: consensus.me,
        applied,
        election_tick: ELECTION_TICKS,
        heartbeat_tick: HEARTBEAT_TICKS,
        max_size_per_msg: 4 << 20,
        max_inflight_msgs: 256,
        check_quorum: true,
        pre_vote: true,
        read_only_option: ReadOnlyOption::Safe,
        ..Config::default()
    };
    if consensus.clock.is_simulated() {
        // raft-rs draws the election timeout from the thread's generator: a seed could
        // not replay. The simulation's clocks drift apart instead.
        config.min_election_tick = ELECTION_TICKS;
        config.max_election_tick = ELECTION_TICKS + 1;
    }
    config.validate().map_err(|e| e.to_string())?;
    Ok(config)
}

/// Loads the group's snapshot into `state`: what its header says. A founding member
/// writes its first one, empty, at [`START`]; a node that joins starts with none, and no
/// members, until a leader sends it one.
fn open_snapshot(
    consensus: &Arc<Consensus>,
    shard: usize,
    snapshots: &Snapshots,
    state: &mut Shard,
) -> Result<Meta, String> {
    if let Some(meta) = snapshots.load(state)? {
        for peer in &meta.members {
            consensus.learn(peer.clone());
        }
        return Ok(meta);
    }
    if consensus.joining {
        return Ok(Meta {
            index: 0,
            term: 0,
            members: Vec::new(),
            learners: Vec::new(),
        });
    }
    let start = Meta {
        index: START.0,
        term: START.1,
        members: consensus.peers(),
        learners: Vec::new(),
    };
    snapshots.install(&snapshot_file::empty(shard, &start))?;
    Ok(start)
}

/// Opens the group's log file and loads it over the snapshot `base` describes.
fn load_log(
    consensus: &Consensus,
    shard: usize,
    dir: &std::path::Path,
    snapshots: &Snapshots,
    base: &Meta,
) -> Result<(LogFile, LogStore), String> {
    let chunk = match consensus.clock.is_simulated() {
        true => 64 << 10,
        false => crate::consensus::log_file::PREALLOCATE_BYTES,
    };
    let (mut log, loaded) = LogFile::open_extending(&LogFile::path(dir, shard), chunk)?;
    consensus.set_members(shard, &base.voters(), &base.learners);
    let mut storage = LogStore::new(base.conf_state(), snapshots.path());
    storage.set_hard_state(loaded.hard_state);
    if base.index > 0 {
        storage.install(base.index, base.term);
    }
    // Entries the snapshot holds are skipped (a crash before the log's rewrite).
    storage
        .append(&loaded.entries)
        .map_err(|e| format!("the Raft log of shard {shard} does not load: {e}"))?;
    if loaded
        .entries
        .first()
        .is_some_and(|e| e.index <= base.index)
    {
        // The file must start after the snapshot before anything is appended to it: after
        // an installed snapshot, new entries would follow a gap, and the next load would
        // end the log there (the simulation found acknowledged entries lost that way).
        log.rewrite(&storage.encode_whole())?;
    }
    let group = &consensus.groups[shard];
    group.snapshot_index.store(base.index, Ordering::Relaxed);
    group
        .log_bytes
        .store(storage.kept_bytes() as u64, Ordering::Relaxed);
    Ok((log, storage))
}

/// A snapshot a leader sent: whole, and naming the entry its metadata names.
fn usable(snapshot: &Snapshot) -> Result<(), String> {
    agrees(
        &snapshot_file::check(&snapshot.data)?,
        snapshot.get_metadata(),
    )
}

/// Whether a snapshot file's header (`found`) says what its message says.
fn agrees(found: &Meta, said: &raft::eraftpb::SnapshotMetadata) -> Result<(), String> {
    let sorted = |ids: &[u64]| {
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids
    };
    let conf = said.get_conf_state();
    let file = (
        found.index,
        found.term,
        found.voters(),
        sorted(&found.learners),
    );
    let message = (
        said.index,
        said.term,
        sorted(&conf.voters),
        sorted(&conf.learners),
    );
    match file == message {
        true => Ok(()),
        false => Err(format!(
            "its file holds entry ({}, {}) of voters {:?} and learners {:?}, its message says ({}, {}) of {:?} and {:?}",
            file.0, file.1, file.2, file.3, message.0, message.1, message.2, message.3
        )),
    }
}

/// The group's state on this node can no longer be trusted: the process ends, and a
/// restart loads the snapshot and log from disk.
fn fatal(shard: usize, what: &str) -> ! {
    tracing::error!(shard, "{what}; exiting");
    std::process::exit(1);
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
