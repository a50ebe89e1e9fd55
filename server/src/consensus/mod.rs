//! Consensus mode (`--consensus raft`): every shard of every node is a member of its shard's
//! Raft group, run on TiKV's `raft` crate (raft-rs), so a write is acknowledged only once a
//! quorum of nodes has it in their logs, and a node's death costs an election, not data.
//!
//! - `peers`: the group's members as the command line names them.
//! - `log_file`: a group's Raft log and hard state on disk (the node's persistence in this
//!   mode; the journal is off); `storage`: the same log in memory, as raft-rs reads it.
//! - `snapshot_file`, `snapshotter`: the group's snapshot (the shard's state at a committed
//!   index), made off the shard thread once the log since the last one passes
//!   `raft-snapshot-log-bytes`; the log is then compacted to it, and a follower that fell
//!   behind the compacted log is sent it.
//! - `transport`: threads that carry Raft messages between nodes over TCP, and put the ones
//!   that arrive into the shard's [`Group::inbox`], ringing its doorbell.
//! - `crate::shard::raft`: the shard thread's side: the Raft node itself, stepped, ticked and
//!   drained each loop turn; a leader proposes each turn's journal records as one entry, and
//!   its replies wait until the entry commits (`net::held_sends`).
//!
//! docs/REPLICATION.md ("Consensus mode") says what this promises and what is not built yet.

pub mod log_file;
pub mod membership;
pub mod peers;
pub mod persister;
#[cfg(test)]
mod sim;
pub mod snapshot_file;
pub mod snapshotter;
pub mod storage;
pub mod transport;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use raft::eraftpb::Message;
use wetask_shards::shard::slot_moves::GroupMap;

pub use peers::Peer;

/// The time a group's node runs on: the machine's, or a simulation's (`consensus::sim`),
/// which moves only when the simulation moves it. A simulated clock also puts the node's
/// other threads in the simulation's hands: messages are captured instead of sent
/// (`transport::Outbound::capturing`), the log writer waits to be told to write
/// (`persister`), and snapshots are made in place of a thread (`snapshotter`).
#[derive(Default)]
pub struct Clock {
    simulated: Option<(std::time::Instant, AtomicU64)>,
}

impl Clock {
    #[cfg(test)]
    pub fn simulated() -> Clock {
        Clock {
            simulated: Some((std::time::Instant::now(), AtomicU64::new(0))),
        }
    }

    pub fn is_simulated(&self) -> bool {
        self.simulated.is_some()
    }

    pub fn now(&self) -> std::time::Instant {
        match &self.simulated {
            Some((base, micros)) => {
                *base + std::time::Duration::from_micros(micros.load(Ordering::Relaxed))
            }
            None => std::time::Instant::now(),
        }
    }

    /// Moves a simulated clock on (a real one is not moved).
    #[cfg(test)]
    pub fn advance(&self, by: std::time::Duration) {
        if let Some((_, micros)) = &self.simulated {
            micros.fetch_add(by.as_micros() as u64, Ordering::Relaxed);
        }
    }
}

/// The Raft timer's period. An election starts after 10 to 20 periods without a leader
/// (raft-rs's randomised `election_tick` of 10), the leader beats every 2.
pub const TICK: std::time::Duration = std::time::Duration::from_millis(50);
pub const ELECTION_TICKS: usize = 10;
pub const HEARTBEAT_TICKS: usize = 2;

/// A follower's answer to a keyless write (keyed commands get `-MOVED` to the leader).
pub const NOT_LEADER: &str =
    "READONLY This node does not lead its shard's consensus group; write to the leader";

/// The process's view of consensus mode, shared by its shard threads and the transport.
pub struct Consensus {
    /// This node's Raft id.
    pub me: u64,
    /// Every node this one knows the address of, itself included: the members named at
    /// start and those the groups added since (`learn`).
    peers: RwLock<Vec<Peer>>,
    /// The ids `--raft-peers` named: how this node reaches them is its own to say (a
    /// proxy, another network), so what the groups say of their addresses is not taken.
    pinned: Vec<u64>,
    /// `--raft-join`: this node started outside the groups, to be added to them.
    pub joining: bool,
    /// Per shard: its group's state as other threads see it.
    pub groups: Vec<Group>,
    pub transport: transport::Outbound,
    /// Rings a shard's loop when a message for it arrives.
    pub doorbells: Arc<[crate::doorbell::Doorbell]>,
    /// Where the PUBLISH messages other members send go (the node's, `Globals::relay`).
    pub relay: Arc<crate::pubsub_relay::Relay>,
    /// `raft-snapshot-log-bytes`: the log's size that calls for a snapshot.
    pub snapshot_log_bytes: u64,
    /// `raft-auth`: the secret every link opens with (`transport`).
    pub auth: Option<String>,
    /// The machine's clock, or a simulation's (see [`Clock`]).
    pub clock: Clock,
    /// The Raft directory (`data_dir`): where the transport writes the snapshots that
    /// arrive.
    pub dir: std::path::PathBuf,
    /// Group 0's slot map as this node's member of it last had it (`None`: no move ever
    /// began, the arithmetic map): routing reads the process-wide copy
    /// (`wetask_shards::slot::map_slots`), CLUSTER SLOTS and the slot mover read this.
    slot_map: RwLock<Option<Arc<GroupMap>>>,
}

/// A snapshot a leader streamed here (`transport`), on disk and synced, waiting for its
/// shard to step its message (`shard::raft`).
pub struct Incoming {
    pub from: u64,
    pub index: u64,
    pub term: u64,
    pub path: std::path::PathBuf,
}

/// One shard's group, as the transport and the other shards see it.
#[derive(Default)]
pub struct Group {
    /// Messages from other nodes, waiting for the shard's next turn.
    pub inbox: Mutex<Vec<Message>>,
    /// Snapshots streamed here, their files named by their messages' sender, index and
    /// term: a snapshot message without data counts only if it matches one.
    pub incoming: Mutex<Vec<Incoming>>,
    /// The group's voting members, and its learners (members that get the log and do not
    /// vote yet), as this node last applied them.
    pub voters: Mutex<Vec<u64>>,
    pub learners: Mutex<Vec<u64>>,
    /// When this node last heard from the group's leader (an append, a heartbeat or a
    /// snapshot; the node's start until then): a leader of another group that hears
    /// nothing from group 0's cannot trust its view of the members (`shard::raft`).
    pub heard: Mutex<Option<std::time::Instant>>,
    /// The leader this node knows of (0: none), its term, and whether this node leads and
    /// serves: it has applied every entry of earlier terms.
    pub leader: AtomicU64,
    pub term: AtomicU64,
    pub serving: AtomicBool,
    pub commit: AtomicU64,
    pub applied: AtomicU64,
    /// The last log index this node has synced, and, while it leads, how far each other
    /// member's log matches its own (raft-rs's followers acknowledge an append once it is
    /// on their disk): WAIT and WAITAOF count them.
    pub persisted: AtomicU64,
    pub matched: Mutex<Vec<u64>>,
    /// Times this node became leader, and lost a leadership with writes not yet committed
    /// (its state rebuilt from the log).
    pub elected: AtomicU64,
    pub rebuilds: AtomicU64,
    /// Entries this node proposed, log syncs and the microseconds they took.
    pub proposed: AtomicU64,
    pub syncs: AtomicU64,
    pub sync_us: AtomicU64,
    /// A leader's rounds (an entry proposed, then seen committed) and their microseconds.
    pub rounds: AtomicU64,
    pub round_us: AtomicU64,
    /// The snapshot's index, snapshots made here and installed from a leader, the entry
    /// bytes in the log since the snapshot, and snapshots sent to followers.
    pub snapshot_index: AtomicU64,
    pub snapshots_made: AtomicU64,
    pub snapshots_installed: AtomicU64,
    pub snapshots_sent: AtomicU64,
    pub log_bytes: AtomicU64,
    /// Slot moves (`shard::slot_mover`): the last move whose freeze, and whose arrival,
    /// this group has committed, as this node applied them; and a number bumped whenever
    /// this node starts or stops leading the group (a copy under way stops when it moves).
    pub froze: AtomicU64,
    pub arrived: AtomicU64,
    pub leadership: AtomicU64,
}

/// Where the Raft logs live: `raft/` in the data directory.
pub fn data_dir(config: &crate::config::Config) -> std::path::PathBuf {
    std::path::Path::new(&config.dir).join("raft")
}

impl Consensus {
    pub fn new(
        me: u64,
        peers: Vec<Peer>,
        shard_count: usize,
        doorbells: Arc<[crate::doorbell::Doorbell]>,
        snapshot_log_bytes: u64,
        joining: bool,
        auth: Option<String>,
    ) -> Consensus {
        let transport = transport::Outbound::default();
        Consensus {
            me,
            pinned: peers.iter().map(|p| p.id).collect(),
            peers: RwLock::new(peers),
            joining,
            groups: (0..shard_count).map(|_| Group::default()).collect(),
            transport,
            relay: Arc::new(crate::pubsub_relay::Relay::new(doorbells.clone())),
            doorbells,
            snapshot_log_bytes,
            auth,
            clock: Clock::default(),
            dir: std::path::PathBuf::new(),
            slot_map: RwLock::new(None),
        }
    }

    /// Group 0's slot map as this node's member of it has it (`None`: the arithmetic one).
    pub fn slot_map(&self) -> Option<Arc<GroupMap>> {
        self.slot_map.read().expect("slot map").clone()
    }

    /// Each group's slot ranges, in slot order: (first, last, group).
    pub fn slot_ranges(&self) -> Vec<(u16, u16, usize)> {
        let ranges = match self.slot_map() {
            Some(map) => map.ranges(),
            None => GroupMap::arithmetic(self.groups.len()).ranges(),
        };
        ranges
            .into_iter()
            .map(|(first, last, group)| (first, last, usize::from(group)))
            .collect()
    }

    /// Group 0's member here applied (or, leading, logged) a new map: routing follows it
    /// (not in a simulation, whose nodes share one process and route nothing).
    pub fn set_slot_map(&self, map: Option<GroupMap>) {
        let groups = self.groups.len();
        if !self.transport.is_capturing() {
            let arithmetic;
            let owners = match &map {
                Some(map) => map.owners(),
                None => {
                    arithmetic = GroupMap::arithmetic(groups);
                    arithmetic.owners()
                }
            };
            wetask_shards::slot::map_groups(owners, groups);
        }
        *self.slot_map.write().expect("slot map") = map.map(Arc::new);
    }

    pub fn peer(&self, id: u64) -> Option<Peer> {
        self.peers
            .read()
            .expect("peers")
            .iter()
            .find(|p| p.id == id)
            .cloned()
    }

    /// Every node this one knows the address of.
    pub fn peers(&self) -> Vec<Peer> {
        self.peers.read().expect("peers").clone()
    }

    /// Notes a member's address (one a group added, or a snapshot named), opening a link
    /// to it; a known id's address is replaced, unless `--raft-peers` named it.
    pub fn learn(self: &Arc<Self>, peer: Peer) {
        if self.pinned.contains(&peer.id) {
            return;
        }
        {
            let mut peers = self.peers.write().expect("peers");
            match peers.iter_mut().find(|p| p.id == peer.id) {
                Some(known) if *known == peer => return,
                Some(known) => *known = peer.clone(),
                None => peers.push(peer.clone()),
            }
        }
        if peer.id != self.me {
            tracing::info!(member = %peer, "a member's address noted");
            transport::open_link(self, peer);
        }
    }

    /// Group `shard`'s voters as this node last applied them, by id.
    pub fn voters(&self, shard: usize) -> Vec<u64> {
        self.groups[shard].voters.lock().expect("voters").clone()
    }

    /// Group `shard`'s learners as this node last applied them, by id.
    pub fn learners(&self, shard: usize) -> Vec<u64> {
        self.groups[shard]
            .learners
            .lock()
            .expect("learners")
            .clone()
    }

    /// Group `shard`'s members, voters and learners, by id, in order.
    pub fn members(&self, shard: usize) -> Vec<u64> {
        let mut ids = self.voters(shard);
        ids.extend(self.learners(shard));
        ids.sort_unstable();
        ids
    }

    /// Publishes group `shard`'s configuration as this node applied it.
    pub fn set_members(&self, shard: usize, voters: &[u64], learners: &[u64]) {
        let (mut voters, mut learners) = (voters.to_vec(), learners.to_vec());
        voters.sort_unstable();
        learners.sort_unstable();
        *self.groups[shard].voters.lock().expect("voters") = voters;
        *self.groups[shard].learners.lock().expect("learners") = learners;
    }

    /// Members of `shard`'s group other than this node (its leader) whose logs hold entry
    /// `index`, on disk.
    pub fn members_at(&self, shard: usize, index: u64) -> usize {
        let matched = self.groups[shard].matched.lock().expect("matched");
        matched.iter().filter(|&&m| m >= index).count()
    }

    /// Whether this node's own log holds entry `index` of `shard`'s group on disk.
    pub fn persisted_at(&self, shard: usize, index: u64) -> bool {
        self.groups[shard].persisted.load(Ordering::Acquire) >= index
    }

    /// Whether this node leads shard `shard`'s group and serves its clients.
    pub fn serving(&self, shard: usize) -> bool {
        self.groups[shard].serving.load(Ordering::Acquire)
    }

    /// INFO's `consensus` section: per shard's group, this node's role and progress.
    pub fn info_section(&self, out: &mut String) {
        use std::fmt::Write;
        let _ = write!(
            out,
            "# Consensus\r\nconsensus_enabled:1\r\nraft_id:{}\r\nraft_members:{}\r\nraft_learners:{}\r\n",
            self.me,
            self.groups
                .first()
                .map_or(0, |g| g.voters.lock().expect("voters").len()),
            self.groups
                .first()
                .map_or(0, |g| g.learners.lock().expect("learners").len())
        );
        for (shard, group) in self.groups.iter().enumerate() {
            let leader = group.leader.load(Ordering::Relaxed);
            let role = match (leader == self.me, group.serving.load(Ordering::Acquire)) {
                (true, true) => "leader",
                (true, false) => "leader-catching-up",
                _ if leader == 0 => "no-leader",
                _ => "follower",
            };
            let _ = write!(
                out,
                "group{shard}:role={role},leader={leader},term={},commit={},applied={},elected={},rebuilds={},proposed={},syncs={},sync_us={},rounds={},round_us={},snapshot_index={},snapshots_made={},snapshots_installed={},snapshots_sent={},log_bytes={},slots_froze={},slots_arrived={}\r\n",
                group.term.load(Ordering::Relaxed),
                group.commit.load(Ordering::Relaxed),
                group.applied.load(Ordering::Relaxed),
                group.elected.load(Ordering::Relaxed),
                group.rebuilds.load(Ordering::Relaxed),
                group.proposed.load(Ordering::Relaxed),
                group.syncs.load(Ordering::Relaxed),
                group.sync_us.load(Ordering::Relaxed),
                group.rounds.load(Ordering::Relaxed),
                group.round_us.load(Ordering::Relaxed),
                group.snapshot_index.load(Ordering::Relaxed),
                group.snapshots_made.load(Ordering::Relaxed),
                group.snapshots_installed.load(Ordering::Relaxed),
                group.snapshots_sent.load(Ordering::Relaxed),
                group.log_bytes.load(Ordering::Relaxed),
                group.froze.load(Ordering::Relaxed),
                group.arrived.load(Ordering::Relaxed),
            );
        }
    }

    /// A message from another node for `shard`'s group.
    /// Notes the snapshot streamed to `path` for `message` (its data left out), replacing
    /// (and deleting) an older one from the same leader, then delivers the message.
    pub fn deliver_snapshot(&self, shard: usize, message: Message, path: std::path::PathBuf) {
        let Some(group) = self.groups.get(shard) else {
            let _ = std::fs::remove_file(&path);
            return;
        };
        let meta = message.get_snapshot().get_metadata();
        let arrived = Incoming {
            from: message.from,
            index: meta.index,
            term: meta.term,
            path,
        };
        {
            let mut incoming = group.incoming.lock().expect("incoming snapshots");
            incoming.retain(|old| {
                let keep = old.from != arrived.from;
                if !keep {
                    let _ = std::fs::remove_file(&old.path);
                }
                keep
            });
            incoming.push(arrived);
        }
        self.deliver(shard, message);
    }

    pub fn deliver(&self, shard: usize, message: Message) {
        let Some(group) = self.groups.get(shard) else {
            return;
        };
        group.inbox.lock().expect("raft inbox").push(message);
        self.doorbells[shard].ring();
    }

    /// `host:port` of `shard`'s port on the node `id` (cluster mode's shard port,
    /// `port` + 1 + shard).
    pub fn shard_address(&self, id: u64, shard: usize) -> Option<(String, u16)> {
        let peer = self.peer(id)?;
        Some((peer.host.clone(), peer.port + 1 + shard as u16))
    }

    /// A node id for cluster clients: 40 hex digits, the same on every node for the same
    /// member and shard.
    pub fn node_name(id: u64, shard: usize) -> String {
        sha1_smol::Sha1::from(format!("wetask-raft-{id}-{shard}"))
            .digest()
            .to_string()
    }
}
