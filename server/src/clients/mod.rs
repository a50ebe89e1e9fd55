//! Connection state that commands see (db, protocol, name, auth), and the per-shard registry
//! behind CLIENT LIST and CLIENT KILL. Killing shuts the socket down; the transport then sees
//! end-of-file and closes the connection through its normal path.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::os::fd::RawFd;
use std::rc::Rc;

use bytes::Bytes;
use wetask_protocol::Protocol;

mod subscriptions;
pub use subscriptions::{Kind, Subscriptions};

/// The worker identity a connection took with TASK.WORKER.
#[derive(Clone, Debug)]
pub struct WorkerBinding {
    pub name: Bytes,
    /// The owner id its leases carry (`wetask_shards::tasks::workers::worker_owner`).
    pub owner: u64,
    /// The shard that keeps the worker's book (the shard of its name).
    pub home: usize,
    pub heartbeat_ms: Option<u64>,
    /// When this connection last told the home shard it is alive.
    pub last_beat_ms: u64,
}

/// A watched key: its owner shard, database, name and the version seen at WATCH.
#[derive(Clone, Debug)]
pub struct Watched {
    pub shard: usize,
    pub db: usize,
    pub key: Bytes,
    pub version: u64,
}

/// CLIENT TRACKING's state on the connection (the shards hold the read keys).
#[derive(Clone, Debug, Default)]
pub struct TrackingState {
    pub bcast: bool,
    pub optin: bool,
    pub optout: bool,
    pub noloop: bool,
    /// REDIRECT: the client that receives the invalidations, and its shard.
    pub redirect: Option<(u64, usize)>,
    /// The redirect target was found gone when an invalidation was due.
    pub broken_redirect: bool,
    pub prefixes: Vec<Bytes>,
    /// CLIENT CACHING yes|no: the next command is its mode's exception.
    pub caching: bool,
}

/// CLIENT REPLY's modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyMode {
    On,
    /// No replies until CLIENT REPLY ON.
    Off,
    /// Drop this many more replies, then On (SKIP: its own and the next command's).
    Skip(u8),
}

/// CLIENT UNBLOCK … ERROR's answer to the command it ends (Redis's text).
pub const UNBLOCKED_BY_CLIENT: &str = "UNBLOCKED client unblocked via CLIENT UNBLOCK";
/// The answer to a blocking command whose node stopped leading its consensus group
/// (Redis's text for a primary turned replica).
pub const UNBLOCKED_BY_ROLE: &str =
    "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)";

pub struct ConnState {
    pub id: u64,
    pub fd: RawFd,
    pub addr: String,
    pub laddr: String,
    /// Connected to its shard's own port (cluster mode): a key another shard owns is
    /// answered `-MOVED` (`session::dispatch`).
    pub shard_port: bool,
    /// This node's own connection applying a Redis primary's stream: its writes pass a
    /// read-only replica (`replication::from_redis`).
    pub replication_applier: bool,
    /// Raised when the connection closes, for a wait polled on another thread (WAIT,
    /// WAITAOF: `ShardCtx::wait_on`) to give up; made by the first such wait.
    pub closed: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// ASKING was sent: the next command may use a slot this node imports (cluster mode).
    pub asking: bool,
    /// READONLY was sent (until READWRITE): in consensus mode, a follower serves this
    /// connection's reads from its own state, as a Redis Cluster replica does.
    pub replica_reads: bool,
    pub name: Option<Bytes>,
    pub lib_name: Option<Bytes>,
    pub lib_ver: Option<Bytes>,
    pub db: usize,
    pub protocol: Protocol,
    pub authenticated: bool,
    /// The ACL user the connection runs as (the default user until AUTH).
    pub user: std::sync::Arc<crate::acl::User>,
    /// The users' epoch (`Acl::epoch`) when `user` was read: the user is read again when
    /// the users change.
    pub acl_epoch: u64,
    /// `user.unrestricted`, kept beside the epoch: the per-command test reads no further.
    pub acl_free: bool,
    pub created_ms: u64,
    pub last_active_ms: u64,
    /// The peer is on a loopback address (protected mode serves it without a password).
    pub loopback: bool,
    /// A command of this connection is running in a task (it may be blocked): the idle
    /// `timeout` leaves it alone.
    pub in_batch: bool,
    /// Reply bytes the transport holds for this client but has not sent yet (counted with
    /// new replies against `client-output-buffer-limit`).
    pub unsent: usize,
    /// When the output first passed its class's soft limit (cleared once under it).
    pub soft_limit_since_ms: Option<u64>,
    pub last_command: &'static str,
    /// Set by QUIT, CLIENT KILL, a protocol error: close once the replies so far are sent.
    pub close_requested: bool,
    /// Set by a successful SHUTDOWN: the connection closes without a reply, as in Redis.
    pub skip_reply: bool,
    /// CLIENT REPLY: whether replies go out (`reply_allowed` takes each reply's turn).
    pub reply: ReplyMode,
    /// Shards this client fetched or waited on tasks from: its leases and parked commands
    /// there are released when the connection closes.
    pub task_shards: Vec<usize>,
    /// Shards where this client's blocking list pop is parked (empty when not blocked).
    pub blocked_on: Vec<usize>,
    /// Commands queued since MULTI; `None` outside a transaction.
    pub multi: Option<Vec<wetask_shards::request::Request>>,
    /// A command was rejected while queueing: EXEC will abort.
    pub multi_failed: bool,
    /// Keys this connection WATCHes.
    pub watched: Vec<Watched>,
    /// Channels and patterns this connection subscribes to.
    pub subscriptions: Subscriptions,
    /// Encoded pub/sub messages not yet handed to the transport.
    pub pushes: wetask_protocol::Output,
    /// Woken when a push arrives (the glommio fallback waits on it).
    pub push_waker: Option<std::task::Waker>,
    /// The io_uring transport's slot for this connection: (index, generation).
    pub slot: (u32, u32),
    /// TASK.WORKER's identity: leases go to the worker, not to this connection.
    pub worker: Option<WorkerBinding>,
    /// Its blocking command was ended with this error ([`UNBLOCKED_BY_CLIENT`],
    /// [`UNBLOCKED_BY_ROLE`]): CLIENT UNBLOCK … ERROR, or the
    /// node stopped leading its group or turned replica (`ShardCtx::unblock_on_role_change`).
    pub unblock_error: Option<&'static str>,
    /// CLIENT NO-EVICT (shown as `e`; WeTask evicts keys, never clients).
    pub no_evict: bool,
    /// CLIENT NO-TOUCH (shown as `T`): its commands leave keys' LRU/LFU stamps alone.
    pub no_touch: bool,
    /// CLIENT TRACKING ON: client-side caching (`commands::tracking`). Boxed: most
    /// connections never track, and the hot fields stay close together.
    pub tracking: Option<Box<TrackingState>>,
}

impl ConnState {
    /// The flag raised when this connection closes (made on first use).
    pub fn closed_flag(&mut self) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
        self.closed.get_or_insert_with(Default::default).clone()
    }

    /// Whether the reply now due goes out (CLIENT REPLY, SHUTDOWN): takes its turn.
    pub fn reply_allowed(&mut self) -> bool {
        if self.skip_reply {
            return false;
        }
        match self.reply {
            ReplyMode::On => true,
            ReplyMode::Off => false,
            ReplyMode::Skip(n) => {
                self.reply = if n <= 1 {
                    ReplyMode::On
                } else {
                    ReplyMode::Skip(n - 1)
                };
                false
            }
        }
    }

    /// Encodes a command's reply into `out` as CLIENT REPLY allows (taking its turn), except
    /// that pushes (subscribe and unsubscribe confirmations, in RESP2 too) go out whatever
    /// CLIENT REPLY says, as Redis 7 sends them (its CLIENT_PUSHING): a subscriber under
    /// REPLY OFF still gets its confirmations and messages.
    pub fn encode_reply(
        &mut self,
        out: &mut wetask_protocol::Output,
        frame: &wetask_protocol::Frame,
    ) {
        if self.reply_allowed() {
            wetask_protocol::encode_output(out, frame, self.protocol);
            return;
        }
        if self.skip_reply {
            return;
        }
        match frame {
            wetask_protocol::Frame::Push(_) => {
                wetask_protocol::encode_output(out, frame, self.protocol)
            }
            wetask_protocol::Frame::Several(frames) => {
                for push in frames
                    .iter()
                    .filter(|f| matches!(f, wetask_protocol::Frame::Push(_)))
                {
                    wetask_protocol::encode_output(out, push, self.protocol);
                }
            }
            _ => {}
        }
    }

    /// Remembers that this client holds, or may come to hold, task state on `shard`.
    pub fn note_task_shard(&mut self, shard: usize) {
        if !self.task_shards.contains(&shard) {
            self.task_shards.push(shard);
        }
    }

    pub fn new(
        id: u64,
        fd: RawFd,
        addr: String,
        laddr: String,
        now_ms: u64,
        authenticated: bool,
        user: (std::sync::Arc<crate::acl::User>, u64),
    ) -> Self {
        let loopback = is_loopback(&addr);
        ConnState {
            id,
            fd,
            addr,
            laddr,
            shard_port: false,
            replication_applier: false,
            closed: None,
            asking: false,
            replica_reads: false,
            name: None,
            lib_name: None,
            lib_ver: None,
            db: 0,
            protocol: Protocol::Resp2,
            authenticated,
            acl_free: user.0.unrestricted,
            user: user.0,
            acl_epoch: user.1,
            created_ms: now_ms,
            last_active_ms: now_ms,
            loopback,
            in_batch: false,
            unsent: 0,
            soft_limit_since_ms: None,
            last_command: "NULL",
            close_requested: false,
            skip_reply: false,
            reply: ReplyMode::On,
            task_shards: Vec::new(),
            blocked_on: Vec::new(),
            multi: None,
            multi_failed: false,
            watched: Vec::new(),
            subscriptions: Default::default(),
            pushes: Default::default(),
            push_waker: None,
            slot: (0, 0),
            worker: None,
            tracking: None,
            unblock_error: None,
            no_evict: false,
            no_touch: false,
        }
    }

    /// Who the tasks this connection leases belong to: its worker, or the connection.
    pub fn task_owner(&self) -> u64 {
        self.worker.as_ref().map_or(self.id, |w| w.owner)
    }

    /// CLIENT LIST's flags, in Redis's order: `P` subscribed, `x` in MULTI, `b` blocked, `t`
    /// tracking, `R` a broken redirect, `B` broadcast tracking, `e` no-evict, `T` no-touch;
    /// `N` for none.
    fn flags(&self) -> String {
        let mut flags = String::new();
        if self.replication_applier {
            flags.push('M');
        }
        if !self.subscriptions.is_empty() {
            flags.push('P');
        }
        if self.multi.is_some() {
            flags.push('x');
        }
        if !self.blocked_on.is_empty() {
            flags.push('b');
        }
        if let Some(t) = &self.tracking {
            flags.push('t');
            if t.broken_redirect {
                flags.push('R');
            }
            if t.bcast {
                flags.push('B');
            }
        }
        if self.no_evict {
            flags.push('e');
        }
        if self.no_touch {
            flags.push('T');
        }
        if flags.is_empty() {
            flags.push('N');
        }
        flags
    }

    /// One `CLIENT LIST` line (without the newline).
    pub fn describe(&self, now_ms: u64) -> String {
        let text = |b: &Option<Bytes>| {
            b.as_ref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default()
        };
        format!(
            "id={} addr={} laddr={} fd={} name={} age={} idle={} flags={} db={} sub={} psub={} ssub={} multi={} cmd={} user={} resp={} lib-name={} lib-ver={}",
            self.id,
            self.addr,
            self.laddr,
            self.fd,
            text(&self.name),
            now_ms.saturating_sub(self.created_ms) / 1000,
            now_ms.saturating_sub(self.last_active_ms) / 1000,
            self.flags(),
            self.db,
            self.subscriptions.channels.len(),
            self.subscriptions.patterns.len(),
            self.subscriptions.shard_channels.len(),
            self.multi.as_ref().map_or(-1, |queued| queued.len() as i64),
            self.last_command,
            String::from_utf8_lossy(&self.user.name),
            if self.protocol == Protocol::Resp3 { 3 } else { 2 },
            text(&self.lib_name),
            text(&self.lib_ver),
        )
    }
}

/// True when `addr` (`ip:port`, as `socket_addr` prints it) is a loopback address.
pub fn is_loopback(addr: &str) -> bool {
    addr.parse::<std::net::SocketAddr>().is_ok_and(|a| {
        let ip = a.ip();
        ip.is_loopback()
            || matches!(ip, std::net::IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()))
    })
}

/// Redis's client types (CLIENT KILL and CLIENT LIST `TYPE`): a connection subscribed to a
/// channel or pattern is `pubsub`, the replication applier of a Redis primary's stream is
/// `master` (`replication::from_redis`), every other connection `normal`. A WeTask
/// primary's replicas are stream threads, not clients (`replica` matches no connection).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientKind {
    Normal,
    Pubsub,
    Master,
    Replica,
}

impl ClientKind {
    /// `normal`, `pubsub`, `master`, `replica` or `slave`; `None` for anything else.
    pub fn parse(text: &[u8]) -> Option<ClientKind> {
        let kinds = [
            ("normal", ClientKind::Normal),
            ("pubsub", ClientKind::Pubsub),
            ("master", ClientKind::Master),
            ("replica", ClientKind::Replica),
            ("slave", ClientKind::Replica),
        ];
        wetask_shards::args::keyword(text, &kinds)
    }

    pub fn of(conn: &ConnState) -> ClientKind {
        if conn.replication_applier {
            ClientKind::Master
        } else if !conn.subscriptions.is_empty() {
            ClientKind::Pubsub
        } else {
            ClientKind::Normal
        }
    }
}

/// Which clients CLIENT KILL targets.
#[derive(Clone, Debug, Default)]
pub struct KillFilter {
    pub id: Option<u64>,
    pub addr: Option<String>,
    pub laddr: Option<String>,
    /// The id of the client issuing the kill, and whether it may kill itself (SKIPME).
    pub caller: u64,
    pub skip_me: bool,
    /// USER: connections logged in as this ACL user.
    pub user: Option<Bytes>,
    /// ACL SETUSER took channels away from this user: its connections subscribed to a
    /// channel or pattern its rules now refuse (as Redis closes them).
    pub lost_channels: Option<std::sync::Arc<crate::acl::User>>,
    /// TYPE: connections of this kind only.
    pub kind: Option<ClientKind>,
}

impl KillFilter {
    fn matches(&self, conn: &ConnState) -> bool {
        if self.skip_me && conn.id == self.caller {
            return false;
        }
        self.id.is_none_or(|id| id == conn.id)
            && self.kind.is_none_or(|kind| kind == ClientKind::of(conn))
            && self.addr.as_ref().is_none_or(|a| *a == conn.addr)
            && self.laddr.as_ref().is_none_or(|a| *a == conn.laddr)
            && self.user.as_ref().is_none_or(|u| *u == conn.user.name)
            && self.lost_channels.as_ref().is_none_or(|user| {
                let subs = &conn.subscriptions;
                user.name == conn.user.name
                    && !(subs.channels.iter().all(|c| user.allows_channel(c, false))
                        && subs
                            .shard_channels
                            .iter()
                            .all(|c| user.allows_channel(c, false))
                        && subs.patterns.iter().all(|p| user.allows_channel(p, true)))
            })
    }
}

/// Marks a connection for closing and shuts its socket down, so its transport sees
/// end-of-file (CLIENT KILL, a subscriber past its output limit).
pub fn shut_down(conn: &mut ConnState) {
    conn.close_requested = true;
    // SAFETY: shutdown on a socket this shard owns; the fd stays open until the transport
    // closes it after seeing end-of-file.
    unsafe { libc::shutdown(conn.fd, libc::SHUT_RDWR) };
}

#[derive(Default)]
pub struct Clients {
    by_id: BTreeMap<u64, Rc<RefCell<ConnState>>>,
}

impl Clients {
    pub fn add(&mut self, conn: Rc<RefCell<ConnState>>) {
        let id = conn.borrow().id;
        self.by_id.insert(id, conn);
    }

    pub fn iter(&self) -> impl Iterator<Item = &Rc<RefCell<ConnState>>> {
        self.by_id.values()
    }

    pub fn get(&self, id: u64) -> Option<Rc<RefCell<ConnState>>> {
        self.by_id.get(&id).cloned()
    }

    pub fn remove(&mut self, id: u64) {
        self.by_id.remove(&id);
    }

    /// Closes every connection idle for `timeout_ms` or longer (the `timeout` option), but
    /// not one that is running a command (blocked) or subscribed. Returns how many.
    pub fn close_idle(&self, now_ms: u64, timeout_ms: u64) -> usize {
        let mut closed = 0;
        for conn in self.by_id.values() {
            let Ok(mut conn) = conn.try_borrow_mut() else {
                continue;
            };
            let idle = now_ms.saturating_sub(conn.last_active_ms) >= timeout_ms;
            if idle && !conn.in_batch && conn.subscriptions.is_empty() && !conn.close_requested {
                tracing::debug!(client = conn.id, "closing an idle client (timeout)");
                shut_down(&mut conn);
                closed += 1;
            }
        }
        closed
    }

    /// CLIENT LIST lines. `me` is the asking connection when it lives on this shard: it is
    /// borrowed while its command runs, so it is described from the reference passed in.
    pub fn list(&self, now_ms: u64, me: Option<&ConnState>, kind: Option<ClientKind>) -> String {
        let mut out = String::new();
        let shown = |conn: &ConnState| kind.is_none_or(|kind| kind == ClientKind::of(conn));
        for (id, conn) in &self.by_id {
            let line = match me {
                Some(me) if me.id == *id => match shown(me) {
                    true => me.describe(now_ms),
                    false => continue,
                },
                _ => match conn.try_borrow() {
                    Ok(conn) if shown(&conn) => conn.describe(now_ms),
                    _ => continue,
                },
            };
            out.push_str(&line);
            out.push('\n');
        }
        out
    }

    /// Marks every matching connection for closing and shuts its socket down, so its
    /// transport sees end-of-file. Returns how many matched.
    pub fn kill(&self, filter: &KillFilter, mut me: Option<&mut ConnState>) -> usize {
        let mut killed = 0;
        for (id, conn) in &self.by_id {
            let mut borrowed;
            let target: &mut ConnState = match me.as_deref_mut() {
                Some(me) if me.id == *id => me,
                _ => match conn.try_borrow_mut() {
                    Ok(conn) => {
                        borrowed = conn;
                        &mut borrowed
                    }
                    Err(_) => continue,
                },
            };
            if filter.matches(target) {
                shut_down(target);
                killed += 1;
            }
        }
        killed
    }
}
