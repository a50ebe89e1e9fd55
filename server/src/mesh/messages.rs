//! What shards ask of each other, grouped by the part of the shard that serves it: the
//! keyspace, WATCH, the cross-shard lock, the task engine, blocked pops, pub/sub and the
//! admin questions (INFO, CLIENT LIST). A request is owned data; the receiving shard routes
//! each group to its owner (`shard::ShardCtx::handle_request`). Payload types are the
//! owners' own where they are plain data (`wetask_shards::BlockOp`, `clients::KillFilter`).

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::{Entry, ScanFilter};

/// Commands for one shard, run in order: each command's row (an index into the command
/// table) and argument count, and every command's arguments end to end in one vector. A
/// pipeline's commands for a peer cost two vectors in all, not one per command (the
/// per-command vectors, allocated here and freed on the peer, were most of a pipelined hop's
/// allocations: docs/perf-notes.md, "The pipelined hop").
#[derive(Default)]
pub struct ShardCommands {
    rows: Vec<(u32, u32)>,
    args: Vec<Bytes>,
}

impl ShardCommands {
    /// One command (its vector of arguments is kept, not copied).
    pub fn one(spec: usize, args: Vec<Bytes>) -> ShardCommands {
        ShardCommands {
            rows: vec![(spec as u32, args.len() as u32)],
            args,
        }
    }

    /// Room for `commands` commands of `args` arguments in all (grown by doubling, a
    /// pipeline's group reallocated several times: docs/perf-notes.md).
    pub fn with_capacity(commands: usize, args: usize) -> ShardCommands {
        ShardCommands {
            rows: Vec::with_capacity(commands),
            args: Vec::with_capacity(args),
        }
    }

    /// Adds a command after the others, moving its arguments out of `args` (which keeps its
    /// room).
    pub fn take(&mut self, spec: usize, args: &mut Vec<Bytes>) {
        self.rows.push((spec as u32, args.len() as u32));
        self.args.append(args);
    }

    /// Adds a command after the others.
    pub fn push(&mut self, spec: usize, args: &[Bytes]) {
        self.rows.push((spec as u32, args.len() as u32));
        self.args.extend_from_slice(args);
    }

    /// How many commands.
    pub fn count(&self) -> usize {
        self.rows.len()
    }

    /// Each command's row index and arguments, in order.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &[Bytes])> {
        let mut start = 0;
        self.rows.iter().map(move |&(spec, argc)| {
            let args = &self.args[start..start + argc as usize];
            start += argc as usize;
            (spec as usize, args)
        })
    }
}

impl FromIterator<(usize, Vec<Bytes>)> for ShardCommands {
    fn from_iter<I: IntoIterator<Item = (usize, Vec<Bytes>)>>(commands: I) -> Self {
        let mut all = ShardCommands::default();
        for (spec, args) in commands {
            all.push(spec, &args);
        }
        all
    }
}

/// Work one shard asks of another.
pub enum Request {
    Keys(KeyRequest),
    Watch(WatchRequest),
    Lock(LockRequest),
    Tasks(TaskRequest),
    Lists(ListRequest),
    PubSub(PubSubRequest),
    Tracking(TrackingRequest),
    Admin(AdminRequest),
}

/// Work on the receiving shard's keyspace.
pub enum KeyRequest {
    /// Run these commands, in order, on the given database. `spec` indexes the command table.
    Exec {
        db: usize,
        client: u64,
        commands: ShardCommands,
    },
    /// Run a command (its keys all here) as the client's shard parsed it
    /// (`wetask_shards::request::Request`: its form, such as a blocking command's attempt
    /// or a SORT, and its keys' positions): no second parse, no key finder run again.
    ExecParsed {
        db: usize,
        client: u64,
        spec: usize,
        request: Box<wetask_shards::request::Request>,
    },
    /// Remove a key and hand its entry over; `signals` are what a cross-shard operation's
    /// commands signalled for the key's blocked clients (replayed here, see `cross`).
    Take {
        db: usize,
        key: Bytes,
        signals: Vec<wetask_shards::keyspace::blocked_keys::Signal>,
    },
    /// Lend a key's entry to the coordinator of a cross-shard operation (see `cross`).
    Lend {
        db: usize,
        key: Bytes,
    },
    /// Take back a lent key as it now is; `written` counts it as changed for WATCH;
    /// `signals` as for `Take`.
    Restore {
        db: usize,
        key: Bytes,
        entry: Entry,
        written: bool,
        signals: Vec<wetask_shards::keyspace::blocked_keys::Signal>,
    },
    Clone {
        db: usize,
        key: Bytes,
    },
    Put {
        db: usize,
        key: Bytes,
        entry: Entry,
        replace: bool,
    },
    Exists {
        db: usize,
        keys: Vec<Bytes>,
    },
    Scan {
        db: usize,
        cursor: u64,
        count: usize,
        filter: ScanFilter,
    },
    RandomKey {
        db: usize,
    },
    /// How many keys a slot holds, and up to `count` of them (`Shard::keys_in_slot`).
    InSlot {
        db: usize,
        slot: u16,
        count: usize,
    },
    /// Consensus mode, a slot move (`shard::slot_mover`): the names of `slot`'s keys on
    /// the source group's member on this node, then copies of some of them, left as they
    /// are.
    SlotKeyNames {
        slot: u16,
    },
    CopyKeys {
        keys: Vec<(usize, bytes::Bytes)>,
    },
    /// A copy of the queues of `first..=last` (one payload, or none).
    CopySlotQueues {
        first: u16,
        last: u16,
    },
}

/// WATCH bookkeeping on the owner of a watched key.
pub enum WatchRequest {
    /// One more watcher of the key: answered with its version.
    Watch { db: usize, key: Bytes },
    /// The key's current version (EXEC, under the transaction's locks).
    Version { db: usize, key: Bytes },
    /// One watcher of the key is gone.
    Unwatch { db: usize, key: Bytes },
}

/// The cross-shard lock (DESIGN §2.4), for the message's token.
pub enum LockRequest {
    /// Take the shard's lock; answered once granted.
    Lock,
    /// Take the lock (as `Lock`) and run these commands under it, answering their replies.
    Exec {
        db: usize,
        client: u64,
        commands: ShardCommands,
    },
    /// Release the lock.
    Unlock,
}

/// The task engine on the shard that owns the queues (or the task).
pub enum TaskRequest {
    /// Lease up to `count` tasks from these queues (all on the receiving shard) to `client`.
    Fetch {
        client: u64,
        /// Task ids to acknowledge first, in order (a FETCH's ACKs, when they all live on
        /// this shard: then the whole worker step is one round trip). The first refusal is
        /// answered as `Response::Refused` and nothing is leased.
        acks: Vec<Bytes>,
        queues: Vec<Bytes>,
        count: usize,
        lease_ms: Option<u64>,
    },
    /// Like `Fetch`, but when nothing can be leased the request is held (parked) until
    /// something can, or until `deadline_ms`.
    FetchBlocking {
        /// The connection (its parked fetch is let go by this id).
        client: u64,
        /// Who the leases go to: the connection, or its worker.
        owner: u64,
        queues: Vec<Bytes>,
        count: usize,
        lease_ms: Option<u64>,
        deadline_ms: Option<u64>,
    },
    /// TASK.WAIT: held until the task finishes or `deadline_ms`; an unknown id is answered
    /// at once with an error.
    Wait {
        client: u64,
        id: Bytes,
        deadline_ms: Option<u64>,
    },
    /// TASK.EVENTS: answered at once with the events from `from` on, or, when there are none
    /// and `block` is set, held until there are (or until its deadline: `Some(None)` waits
    /// for ever).
    Events {
        client: u64,
        queue: Bytes,
        from: u64,
        count: usize,
        block: Option<Option<u64>>,
    },
    /// Let go of `client`'s parked fetches and waits (each is answered with nothing).
    Unpark { client: u64 },
    /// Hand back tasks leased to `client` (an owner id) that it never received.
    Unlease { client: u64, ids: Vec<Bytes> },
    /// `client`'s connection closed: requeue every task leased to it.
    ReleaseLeases { client: u64 },
    /// Worker identities (TASK.WORKER and friends), on the worker's home shard unless said.
    Worker(WorkerRequest),
    /// On a batch's home: a child's end (`shard::tasks` applies it and sends the callback
    /// orders when it completed the batch).
    BatchNote {
        note: wetask_shards::tasks::BatchNote,
    },
    /// How each of these tasks ended: `Frames` of `[1 (done) | 0 (dead or cancelled) | -1
    /// (not ended, or unknown here), result or error]`.
    ChildEnds { ids: Vec<Bytes> },
    /// Submit a fallback task to a queue on the receiving shard.
    SubmitFallback {
        fallback: wetask_shards::tasks::Fallback,
    },
}

/// The worker registry's requests (`shard::tasks`, `wetask_shards::tasks::workers`).
pub enum WorkerRequest {
    /// Bind connection `conn` to worker `name`: answered `Version(owner id)`, or `Refused`.
    Bind {
        name: Bytes,
        conn: u64,
        options: wetask_shards::tasks::workers::WorkerOptions,
    },
    /// A sign of life from one of `name`'s connections.
    Beat { name: Bytes },
    /// Connection `conn` of `name` closed or left.
    Unbind { name: Bytes, conn: u64 },
    /// TASK.QUIET: answered `Version(owner id)`, or `Refused` for an unknown worker.
    Quiet { name: Bytes },
    /// On every shard: `owner`'s fetches lease nothing from now on.
    SetQuiet { owner: u64 },
    /// On every shard: a worker's GRACE ran out; its leases go back, and when it is
    /// `forgotten` (no connection left) its quiet flag goes too.
    Released { owner: u64, forgotten: bool },
    /// This shard's workers, as TASK.WORKERS rows without their lease counts.
    List,
    /// On every shard: how many tasks each of `owners` holds here.
    LeaseCounts { owners: Vec<u64> },
}

/// Blocked pops parked on the owner of their keys.
pub enum ListRequest {
    /// Park a blocked pop on the receiving shard's `keys`: held until one of them gives it
    /// data (answered with the command's reply) or `deadline_ms` (answered empty).
    Block {
        waiter: u64,
        client: u64,
        db: usize,
        keys: Vec<Bytes>,
        op: wetask_shards::BlockOp,
        deadline_ms: Option<u64>,
    },
    /// Let go of a parked pop (its held request is answered empty if still parked).
    Unblock { waiter: u64 },
    /// `client`'s connection is closing: let go of its parked pop.
    UnblockClient { client: u64 },
    /// A BLMOVE served here popped `key` for a destination on another shard, and its home
    /// has pushed the element there (or back): the key's other waiters may be served again.
    Release { db: usize, key: Bytes },
}

/// Pub/sub. Never held up by a lock: it touches no keyspace.
pub enum PubSubRequest {
    /// Deliver a published message to the receiving shard's subscribers.
    Publish {
        channel: Bytes,
        message: Bytes,
        /// SPUBLISH: to shard-channel subscribers only.
        sharded: bool,
    },
    /// Keyspace notifications: (channel, message) pairs for the receiving shard's
    /// subscribers, in order. Nobody waits for the answer.
    PublishMany(Vec<(Bytes, Bytes)>),
    /// What the receiving shard knows for PUBSUB.
    Query(PubsubQuery),
    /// A MONITOR line for the receiving shard's monitors.
    Monitor { line: Bytes },
}

/// CLIENT TRACKING between shards (`shard::tracking`). Never held up by a lock: none of it
/// touches the keyspace, and an invalidation must not wait behind a script.
pub enum TrackingRequest {
    /// On every shard: `client` tracks as `reader` says, or (`None`) no longer.
    Register {
        client: u64,
        reader: Option<wetask_shards::keyspace::tracking::Reader>,
    },
    /// `client`'s next command here is its CLIENT CACHING exception.
    Arm { client: u64 },
    /// Remember these reads of the receiving shard's keys (done on another shard).
    Remember(Vec<wetask_shards::keyspace::tracking::Remember>),
    /// On the readers' home: invalidations for its tracking clients.
    Invalidate(Vec<wetask_shards::keyspace::tracking::Invalidation>),
    /// On a redirect target's home: the invalidation message for `target` (`None`: every
    /// key, after a flush). Answered `Bool(false)` when no such client is here.
    Deliver {
        target: u64,
        keys: Option<Vec<bytes::Bytes>>,
    },
    /// Whether a client with this id is connected here (REDIRECT's check).
    HasClient { id: u64 },
}

/// INFO, CONFIG RESETSTAT, CLIENT LIST and CLIENT KILL, gathered from every shard.
pub enum AdminRequest {
    Stats,
    ResetStats,
    /// The connections of a kind (TYPE), or all.
    ClientList {
        kind: Option<crate::clients::ClientKind>,
    },
    ClientKill {
        filter: crate::clients::KillFilter,
    },
    /// CLIENT UNBLOCK: let client `client`'s blocking command end here, if it is blocked
    /// (with UNBLOCKED when `error`); answered with how many were (0 or 1).
    ClientUnblock {
        client: u64,
        error: bool,
    },
    /// Take up the settings a shard keeps a copy of (`notify-keyspace-events`) now, not at
    /// the next loop turn: CONFIG SET answers once every shard has.
    SyncSettings,
    /// CLIENT NO-TOUCH: `client`'s commands leave keys' access stamps alone here (`on`), or
    /// no longer.
    NoTouch {
        client: u64,
        on: bool,
    },
    /// `appendonly no`: copy this shard's state for snapshot `epoch` (sent under a lock on
    /// every shard: `commands::persistence`).
    Snapshot {
        epoch: u64,
    },
}

/// What PUBSUB asks each shard.
#[derive(Clone, Debug)]
pub enum PubsubQuery {
    Channels(Option<Bytes>),
    NumSub(Vec<Bytes>),
    Patterns,
    ShardChannels(Option<Bytes>),
    ShardNumSub(Vec<Bytes>),
}

/// A shard's answer to a [`PubsubQuery`].
#[derive(Debug)]
pub enum PubsubReport {
    Names(Vec<Bytes>),
    Counts(Vec<usize>),
}

pub enum Response {
    Frames(Vec<Frame>),
    /// A request's precondition failed with this error (a FETCH's ACK was refused).
    Refused(Frame),
    Entry(Option<Entry>),
    /// Done; nothing to report.
    Done,
    /// A yes/no answer (PUT replaced a key; a fallback task was accepted).
    Bool(bool),
    Count(usize),
    /// A watched key's version.
    Version(u64),
    /// SCAN's next position, the keys, and how many positions were looked at.
    Scan(u64, Vec<Bytes>, usize),
    /// A slot's key count and some of its keys.
    InSlot(usize, Vec<Bytes>),
    Key(Option<Bytes>),
    Stats(Box<crate::stats::ShardReport>),
    Text(String),
    Pubsub(PubsubReport),
    /// Keys' names, with their databases.
    KeyNames(Vec<(usize, bytes::Bytes)>),
    /// Keys copied: (database, name, entry).
    SlotKeys(Vec<(usize, bytes::Bytes, wetask_shards::Entry)>),
}
