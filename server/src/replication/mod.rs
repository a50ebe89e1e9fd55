//! Asynchronous replicas, as Redis has them (`REPLICAOF`), between WeTask nodes.
//!
//! A replica runs the primary's shard count, and each of its shards follows the primary's
//! shard of the same number: first the newest snapshot of it and the journal segments
//! after it (a full sync), then every record the shard journals, as it is written. The
//! journal already holds each loop turn's changes as deterministic operations (docs/
//! DURABILITY.md), so the replica replays them as a restart does, and logs them to its own
//! journal. The primary's journal on disk is the backlog: a replica that comes back after
//! a disconnect continues from its position while the primary still has that segment
//! (every segment since its newest snapshot), and syncs in full otherwise. A replica
//! serves replicas of its own the same way (a chain): its journal holds what it applied,
//! its full syncs included.
//!
//! - `sender`: the primary's threads: a listener on `repl-port`, and per replica and shard
//!   one thread that reads the journal files and streams them (no shard thread is
//!   involved: a replica costs the primary's shards nothing).
//! - `receiver`: the replica's threads: the handshake on the primary's client port, and per
//!   shard a stream whose frames go into the shard's [`Inbox`].
//! - `crate::shard::replica`: the replica's shard threads, which drain their inboxes each
//!   loop turn.
//! - `wire`: the stream's format.
//! - `publishes`: PUBLISH messages for the replicas' subscribers, beside the records.
//!
//! WAIT counts the replicas whose acknowledged positions have reached every shard's
//! journal position when WAIT was called. `docs/REPLICATION.md` says what this promises.

pub mod from_redis;
pub mod fsync_watch;
pub mod gate;
pub mod link;
pub mod publishes;
pub mod receiver;
pub mod resume;
pub mod sender;
pub mod wire;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

/// Redis's refusal of a write on a read-only replica.
pub const READONLY: &str = "READONLY You can't write against a read only replica.";

/// What a replica's shard is given to apply, in order.
#[derive(Debug)]
pub enum Item {
    /// A full sync begins: drop everything.
    FullStart,
    /// A part of the primary's snapshot.
    Part(Bytes),
    /// The snapshot is whole; it stands at the primary's `position`.
    FullEnd { position: u64 },
    /// A journal record, and the primary's position after it.
    Record { payload: Bytes, position: u64 },
    /// The primary's function libraries, in FUNCTION DUMP's format (shard 0's stream).
    Functions(Bytes),
    /// The primary had nothing new past `position`.
    Idle { position: u64 },
    /// A Redis primary's RDB is in (it went through this node's client port, after a
    /// `FullStart`): the full sync ends, and the shard's journal says so.
    SyncWhole,
}

impl Item {
    /// The bytes it holds (the inbox's bound counts them).
    fn size(&self) -> usize {
        match self {
            Item::Part(b) | Item::Record { payload: b, .. } | Item::Functions(b) => b.len(),
            _ => 0,
        }
    }
}

/// The inbox holds at most this many bytes; the receiver waits while it is fuller.
pub const INBOX_BYTES_MAX: usize = 64 << 20;

/// One replica shard's inbox, filled by its receiver thread and drained by the shard.
#[derive(Default)]
pub struct Inbox {
    /// Each item with the link epoch that received it: a new REPLICAOF's items never mix
    /// with an old link's stragglers.
    items: Mutex<VecDeque<(u64, Item)>>,
    pub bytes: AtomicUsize,
    /// Set by the receiver when it pushes; taken by the shard.
    ready: AtomicBool,
    /// The primary position applied (for acks) and received (for a partial resync).
    pub applied: AtomicU64,
    /// The primary position whose records are written to this node's own journal (set by
    /// the shard after its commit; the ack thread tells the primary once the journal's
    /// fsync covers it: WAITAOF's replica count).
    pub journaled: AtomicU64,
    pub received: AtomicU64,
    /// A full sync was applied whole since this link began (the link is up, and a resync
    /// may continue).
    pub synced: AtomicBool,
    /// Set by the shard when applying failed: the next link syncs in full.
    pub broken: AtomicBool,
    /// The shard holds a cross-shard operation's part, its outcome not yet arrived (a
    /// restart could not continue from its position: `resume`).
    pub holds_part: AtomicBool,
    /// The shard holds part of a full sync (begun, not ended: applied now, or left so in
    /// its journal by a link that broke): the node answers LOADING ([`Replication::loading`]).
    pub loading: AtomicBool,
    /// The primary run the inbox's data comes from.
    pub run: Mutex<String>,
    /// The stream's ack thread, woken after the shard applies.
    pub acker: Mutex<Option<std::thread::Thread>>,
}

impl Inbox {
    /// Queues `item`; true when the inbox had nothing waiting (the shard needs waking).
    pub fn push(&self, epoch: u64, item: Item) -> bool {
        self.bytes.fetch_add(item.size(), Ordering::AcqRel);
        self.items.lock().expect("inbox").push_back((epoch, item));
        !self.ready.swap(true, Ordering::AcqRel)
    }

    /// Takes up to `bytes_max` bytes of the items link `epoch` received (at least one, if
    /// any); an older link's are dropped.
    pub fn take(&self, bytes_max: usize, epoch: u64) -> Vec<Item> {
        if !self.ready.swap(false, Ordering::AcqRel) {
            return Vec::new();
        }
        let mut items = self.items.lock().expect("inbox");
        let mut taken = Vec::new();
        let mut size = 0;
        while let Some((received, item)) = items.pop_front() {
            size += item.size();
            if received == epoch {
                taken.push(item);
            }
            if size >= bytes_max {
                break;
            }
        }
        if !items.is_empty() {
            self.ready.store(true, Ordering::Release);
        }
        self.bytes.fetch_sub(size, Ordering::AcqRel);
        taken
    }

    /// Nothing is queued: what was pushed has been taken by the shard (which applies what
    /// it takes in the same step, before anything else it runs).
    pub fn is_empty(&self) -> bool {
        self.items.lock().expect("inbox").is_empty()
    }

    /// Drops what is queued (a promotion, or a new primary).
    pub fn clear(&self) {
        self.items.lock().expect("inbox").clear();
        self.bytes.store(0, Ordering::Release);
    }
}

/// A replica as its primary sees it: one per replica process, however many shard streams.
pub struct Peer {
    pub id: String,
    pub ip: String,
    pub listening_port: u16,
    /// Per shard: the position it acknowledged applying (0: nothing yet), and the one it
    /// acknowledged having fsynced in its own journal (WAITAOF).
    pub acked: Vec<AtomicU64>,
    pub fsynced: Vec<AtomicU64>,
    /// Shard streams connected, and streams done with their full sync.
    pub streams: AtomicUsize,
    pub online: AtomicUsize,
    pub last_ack_ms: AtomicU64,
}

/// The replica's link to its primary, for ROLE and INFO.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkState {
    /// Connecting or handshaking.
    Connecting,
    /// A full sync is running.
    Syncing,
    /// Every shard follows the primary's journal.
    Connected,
    /// The last try failed (why); another follows.
    Down(String),
}

/// Who this node follows, if anyone.
#[derive(Clone, Debug)]
pub struct Primary {
    pub host: String,
    pub port: u16,
    pub state: LinkState,
    pub since_ms: u64,
}

/// The node's replication state (in `Globals`).
pub struct Replication {
    /// Changed when this node becomes a primary again (Redis's replid).
    pub run_id: Mutex<String>,
    /// The secret a replica names on the stream port (given by REPLCONF WETASK).
    pub token: String,
    /// Read per command (writes are refused on a read-only replica).
    pub is_replica: AtomicBool,
    pub read_only: AtomicBool,
    /// The stream listener's port (0: none: `appendonly no`).
    pub listen_port: AtomicU16,
    pub primary: Mutex<Option<Primary>>,
    /// Bumped by every REPLICAOF: the receiver threads of an older one stop.
    pub link_epoch: AtomicU64,
    /// The replicas connected to this node.
    pub peers: Mutex<Vec<Arc<Peer>>>,
    /// Per shard, on a replica.
    pub inboxes: Vec<Inbox>,
    /// The replica's open streams, and the primary's.
    pub links: Links,
    pub sender_links: Links,
    /// Shard streams that synced in full, continued, and could not continue.
    pub sync_full: AtomicU64,
    pub sync_partial_ok: AtomicU64,
    pub sync_partial_err: AtomicU64,
    /// Unix ms of the last frame from the primary.
    pub last_io_ms: AtomicU64,
    /// A replica has streamed from this node since it started (until then, as Redis with no
    /// replication backlog, ROLE and INFO show offset 0).
    pub served: AtomicBool,
    /// The primary is a redis-server (`from_redis`), and the offset applied of its stream.
    pub follows_redis: AtomicBool,
    /// A Redis primary's RDB is being loaded (between the shards' reset and its last key).
    pub redis_loading: AtomicBool,
    /// A shard's journal ended inside a full sync when this node started
    /// (`runtime::recover_shard`): a node that is not a replica answers LOADING too, until
    /// it syncs again or REPLICAOF NO ONE keeps the part (`keep_partial`).
    pub started_partial: AtomicBool,
    /// REPLICAOF NO ONE on such a node: each shard drops its mark, journaled
    /// (`ShardCore::keep_partial_sync`), and serves what it holds.
    pub keep_partial: AtomicBool,
    /// Following a redis-server: its replication id and the offset this node's data stands
    /// at exactly (every command sent here before it answered, none after), with the link
    /// epoch it was found under; `None` while commands are in flight or a full sync runs.
    /// A clean exit saves it (`resume`).
    pub redis_at: Mutex<Option<(u64, String, u64)>>,
    /// What the last clean exit saved of it, for the first link to a redis-server after
    /// start to continue from (REPLICAOF and promotion drop it).
    pub redis_saved: Mutex<Option<(String, u64)>>,
    pub primary_offset: AtomicU64,
    /// Times this node turned from primary into replica: each shard then ends its blocked
    /// commands with UNBLOCKED, as Redis does (`ShardCtx::unblock_on_role_change`).
    pub demotions: AtomicU64,
    /// The function libraries' dump (`function_store`), and a count bumped with each
    /// change: shard 0's streams send it when it moves.
    functions: Mutex<Bytes>,
    functions_epoch: AtomicU64,
    /// False while the file a clean exit left (`resume`) is being deleted: until that is
    /// on disk, no stream is served or followed (a crash meanwhile must find the file
    /// still true).
    pub resume_cleared: AtomicBool,
    /// PUBLISH messages for the replicas (`publishes`).
    pub publishes: publishes::Publishes,
    /// What replication refuses clients (`gate`).
    pub gate: gate::Gate,
}

impl Replication {
    pub fn new(shards: usize) -> Replication {
        Replication {
            run_id: Mutex::new(random_hex(40)),
            token: random_hex(32),
            is_replica: AtomicBool::new(false),
            read_only: AtomicBool::new(true),
            listen_port: AtomicU16::new(0),
            primary: Mutex::new(None),
            link_epoch: AtomicU64::new(0),
            peers: Mutex::new(Vec::new()),
            inboxes: (0..shards).map(|_| Inbox::default()).collect(),
            links: Links::default(),
            sender_links: Links::default(),
            sync_full: AtomicU64::new(0),
            sync_partial_ok: AtomicU64::new(0),
            sync_partial_err: AtomicU64::new(0),
            last_io_ms: AtomicU64::new(0),
            served: AtomicBool::new(false),
            follows_redis: AtomicBool::new(false),
            redis_loading: AtomicBool::new(false),
            started_partial: AtomicBool::new(false),
            keep_partial: AtomicBool::new(false),
            redis_at: Mutex::new(None),
            redis_saved: Mutex::new(None),
            primary_offset: AtomicU64::new(0),
            demotions: AtomicU64::new(0),
            functions: Mutex::new(Bytes::new()),
            functions_epoch: AtomicU64::new(0),
            resume_cleared: AtomicBool::new(true),
            publishes: publishes::Publishes::default(),
            gate: gate::Gate::default(),
        }
    }

    /// The function libraries changed: `dump` is all of them (FUNCTION DUMP's format).
    pub fn set_functions(&self, dump: Bytes) {
        *self.functions.lock().expect("functions") = dump;
        self.functions_epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// The libraries' change count (0: not published yet).
    pub fn functions_epoch(&self) -> u64 {
        self.functions_epoch.load(Ordering::Acquire)
    }

    /// The libraries' dump and its change count.
    pub fn functions(&self) -> (u64, Bytes) {
        let dump = self.functions.lock().expect("functions");
        (self.functions_epoch(), dump.clone())
    }

    pub fn run_id(&self) -> String {
        self.run_id.lock().expect("run id").clone()
    }

    pub fn is_replica(&self) -> bool {
        self.is_replica.load(Ordering::Relaxed)
    }

    /// The data is part of a full sync: some shard's (`Inbox::loading`), or a Redis
    /// primary's RDB being loaded (`from_redis`). On a replica, commands without Redis's
    /// `loading` flag are answered LOADING meanwhile (`Globals::answers_loading`), as Redis
    /// answers them while it loads its primary's RDB, so no client reads a partial dataset
    /// or promotes it.
    pub fn loading(&self) -> bool {
        self.redis_loading.load(Ordering::Relaxed)
            || self
                .inboxes
                .iter()
                .any(|inbox| inbox.loading.load(Ordering::Relaxed))
    }

    /// True when a client's write must be refused: a read-only replica.
    pub fn refuses_writes(&self) -> bool {
        self.is_replica.load(Ordering::Relaxed) && self.read_only.load(Ordering::Relaxed)
    }

    /// Sets the link's state (and its last I/O time).
    pub fn set_link(&self, epoch: u64, state: LinkState) {
        if self.link_epoch.load(Ordering::Acquire) != epoch {
            return;
        }
        if let Some(primary) = self.primary.lock().expect("primary").as_mut() {
            if state != primary.state {
                primary.since_ms = crate::clock::unix_ms();
            }
            self.gate
                .link_up
                .store(state == LinkState::Connected, Ordering::Release);
            primary.state = state;
        }
    }

    pub fn note_io(&self) {
        self.last_io_ms
            .store(crate::clock::unix_ms(), Ordering::Relaxed);
    }

    /// Replicas whose acknowledged positions reached `targets` (one per shard).
    pub fn replicas_at(&self, targets: &[u64]) -> usize {
        self.count_peers(|peer| &peer.acked, targets)
    }

    /// Replicas whose own journals have fsynced every record up to `targets` (WAITAOF).
    pub fn replicas_fsynced_at(&self, targets: &[u64]) -> usize {
        self.count_peers(|peer| &peer.fsynced, targets)
    }

    /// Peers whose positions (`which` of them) reached `targets` on every shard.
    fn count_peers(&self, which: impl Fn(&Peer) -> &[AtomicU64], targets: &[u64]) -> usize {
        self.peers
            .lock()
            .expect("peers")
            .iter()
            .filter(|peer| {
                which(peer)
                    .iter()
                    .zip(targets)
                    .all(|(at, &target)| at.load(Ordering::Acquire) >= target)
            })
            .count()
    }

    /// The peer named `id`, registered if new.
    pub fn peer(&self, id: &str, ip: &str, listening_port: u16, shards: usize) -> Arc<Peer> {
        let mut peers = self.peers.lock().expect("peers");
        if let Some(peer) = peers.iter().find(|p| p.id == id) {
            return peer.clone();
        }
        let peer = Arc::new(Peer {
            id: id.to_string(),
            ip: ip.to_string(),
            listening_port,
            acked: (0..shards).map(|_| AtomicU64::new(0)).collect(),
            fsynced: (0..shards).map(|_| AtomicU64::new(0)).collect(),
            streams: AtomicUsize::new(0),
            online: AtomicUsize::new(0),
            last_ack_ms: AtomicU64::new(crate::clock::unix_ms()),
        });
        peers.push(peer.clone());
        peer
    }

    /// Forgets a peer whose last stream closed.
    pub fn stream_closed(&self, peer: &Arc<Peer>) {
        if peer.streams.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.peers
                .lock()
                .expect("peers")
                .retain(|p| !Arc::ptr_eq(p, peer));
        }
    }
}

/// Open stream sockets (a replica's to its primary, or a primary's to its replicas), so
/// that REPLICAOF, a failed stream or CLIENT KILL TYPE replica can end them: shutting a
/// socket down fails its thread's reads and writes. Each is tagged with its link's epoch,
/// so an old link's threads winding down never end a newer link's streams.
#[derive(Default)]
pub struct Links {
    sockets: Mutex<Vec<(u64, u64, std::net::TcpStream)>>,
    next: AtomicU64,
}

/// A socket's place in [`Links`], taken out when dropped.
pub struct Link<'a> {
    links: &'a Links,
    id: u64,
}

impl Drop for Link<'_> {
    fn drop(&mut self) {
        self.links
            .sockets
            .lock()
            .expect("links")
            .retain(|(id, _, _)| *id != self.id);
    }
}

impl Links {
    pub fn add(&self, socket: &std::net::TcpStream, epoch: u64) -> Link<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        if let Ok(clone) = socket.try_clone() {
            self.sockets.lock().expect("links").push((id, epoch, clone));
        }
        Link { links: self, id }
    }

    /// Ends every stream of link `epoch` (`None`: of every link); returns how many.
    pub fn close(&self, epoch: Option<u64>) -> usize {
        let sockets = self.sockets.lock().expect("links");
        let mut closed = 0;
        for (_, of, socket) in sockets.iter() {
            if epoch.is_none_or(|e| e == *of) {
                let _ = socket.shutdown(std::net::Shutdown::Both);
                closed += 1;
            }
        }
        closed
    }
}

/// Whether `a` and `b` are equal, in a time that does not depend on where they differ (a
/// replication token is compared so).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `len` random lowercase hex digits.
pub fn random_hex(len: usize) -> String {
    let mut rng = fastrand::Rng::with_seed(
        crate::clock::unix_ms() ^ (u64::from(std::process::id()) << 32) ^ fastrand::u64(..),
    );
    (0..len)
        .map(|_| char::from_digit(rng.u32(0..16), 16).expect("a hex digit"))
        .collect()
}

/// The sum of the positions in `positions`: the single offset ROLE and INFO show (it grows
/// with every record; it is a position, not a byte count).
pub fn offset_of(positions: impl Iterator<Item = u64>) -> u64 {
    positions.fold(0u64, |sum, p| sum.wrapping_add(p))
}
