//! One shard, in rooms: a small core (`core`: id, keyspace shard, mesh end, globals,
//! clients, counters, the lock) and one service per concern, each owning its state:
//! blocked pops (`lists`), task fetches and waits (`tasks`), pub/sub (`pubsub`), scripts
//! (`scripts`) and WATCH (`watch`). [`ShardCtx`] holds them, routes each group of mesh
//! requests to its owner, runs the per-turn chores, and calls each service's connection
//! hooks. One `Rc<ShardCtx>` per executor; never sent anywhere.
//!
//! Imports run one way: the services know the core, the context knows the services, and
//! nothing here knows the commands or the transport (docs/ARCHITECTURE.md).

mod core;
pub mod lists;
mod lock;
pub mod monitor;
pub mod offload;
pub mod pubsub;
pub mod raft;
pub mod replica;
mod reply;
pub mod scripts;
pub mod slot_mover;
pub mod tasks;
pub mod tracking;
pub mod turn_timer;
pub mod watch;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use wetask_protocol::Frame;

pub use self::core::ShardCore;
pub use lists::{ListWaiter, ListWaiters};
pub use pubsub::PubSub;
pub use reply::{LocalSlot, LocalWait, Reply};
pub use scripts::{ScriptAcl, ScriptRun, Scripts, UndoLog};
pub use tasks::{Parked, TaskWaits, Want};

use crate::clients::ConnState;
use crate::globals::{unix_ms, Globals};
use crate::mesh::{
    AdminRequest, KeyRequest, LockRequest, Mesh, PubSubRequest, Request, Response, TaskRequest,
};
use crate::stats::ShardReport;

/// Most peer requests a locked shard queues for after the unlock.
pub const DEFERRED_REQUESTS_MAX: usize = 65_536;

/// A peer shard's write refused in consensus mode with several groups
/// (`ShardCore::consensus_refuses`).
const CROSS_GROUP_WRITE: &str =
    "CROSSSLOT in consensus mode a write runs on its own shard's port (its group's leader)";

/// What a service does when one of this shard's connections goes away.
pub trait ConnectionHooks {
    /// The connection is closing: let go of whatever it waits on, so its command returns.
    fn connection_closing(&self, _core: &ShardCore, _state: &ConnState) {}
    /// The connection is gone: forget it and give back what it held.
    fn connection_closed(&self, _core: &ShardCore, _state: &ConnState) {}
}

/// How often an idle shard wakes to expire keys, refresh its clock and time out waits.
pub const CRON_PERIOD: std::time::Duration = std::time::Duration::from_millis(100);

pub struct ShardCtx {
    pub core: ShardCore,
    pub lists: ListWaiters,
    pub task_waits: TaskWaits,
    pub pubsub: PubSub,
    pub scripts: Scripts,
    pub tracking: tracking::TrackingService,
    pub monitors: monitor::Monitors,
    /// Commands held by CLIENT PAUSE: (client, its task's waker), and the pause's generation
    /// they were last woken for.
    pub paused: RefCell<Vec<(u64, std::task::Waker)>>,
    paused_generation: std::cell::Cell<u64>,
    /// True while the lock's queue is being served (a served request's tick must not
    /// serve it again from inside).
    serving_queue: std::cell::Cell<bool>,
    /// Requests and batch vectors kept for the connections' next batches.
    pub spares: crate::spares::Spares,
    /// Keys (database, name) a MIGRATE of this shard is sending: while their slot migrates,
    /// a command on them is answered TRYAGAIN until the target has them
    /// (`session::redirect`).
    pub keys_in_flight: RefCell<std::collections::HashSet<(usize, bytes::Bytes)>>,
    /// Slots with a queue a MIGRATE of this shard is sending (and how many): a missing name
    /// there (a task id of that queue) is answered TRYAGAIN, not ASK, until it lands.
    pub slots_in_flight: RefCell<std::collections::HashMap<u16, usize>>,
    /// Blocking work on threads of its own (MIGRATE's socket), answered through the doorbell.
    pub offload: offload::Offload,
    /// The node's demotions to replica this shard has ended its blocked commands for.
    demotions_seen: std::cell::Cell<u64>,
    /// The slot mover's next look (`slot_mover`), woken by the turn's chores.
    pub mover: turn_timer::TurnTimer,
}

/// The core's fields and methods read as the context's own (`ctx.shard`, `ctx.request`).
impl std::ops::Deref for ShardCtx {
    type Target = ShardCore;

    fn deref(&self) -> &ShardCore {
        &self.core
    }
}

impl ShardCtx {
    pub fn new(id: usize, globals: Arc<Globals>, mesh: Option<Rc<Mesh>>) -> Self {
        ShardCtx {
            core: ShardCore::new(id, globals, mesh),
            lists: ListWaiters::default(),
            task_waits: TaskWaits::default(),
            pubsub: PubSub::default(),
            scripts: Scripts::default(),
            tracking: Default::default(),
            monitors: Default::default(),
            paused: RefCell::new(Vec::new()),
            paused_generation: std::cell::Cell::new(0),
            serving_queue: std::cell::Cell::new(false),
            spares: Default::default(),
            keys_in_flight: Default::default(),
            offload: Default::default(),
            slots_in_flight: Default::default(),
            demotions_seen: Default::default(),
            mover: Default::default(),
        }
    }

    /// The services' connection hooks, in the order they run.
    fn hooks(&self) -> [&dyn ConnectionHooks; 6] {
        [
            &self.task_waits,
            &self.lists,
            &watch::Watches,
            &self.pubsub,
            &self.tracking,
            &self.monitors,
        ]
    }

    /// One turn's chores: the clock, expiry and the task engine, the services' deadlines
    /// and wake-ups, eviction, idle clients. Called every loop turn by the transport, and
    /// before a peer's request is served (a parked shard's clock may be a cron period old).
    pub fn tick(&self) {
        let (fallbacks, batch_notes) = self.core.advance_clock();
        if self.stats.sample(self.shard.borrow().now_ms()) {
            crate::memory::note_peak();
            self.globals.slowlog.calibrate();
        }
        self.scripts.drop_flushed_state(&self.core);
        self.core.housekeeping();
        if self.is_locked() {
            self.announce_busy_holder();
        } else if self.lock.queued() > 0 {
            // Its server normally has (`serve_lock_queue`); this turn makes sure.
            self.serve_queue();
        }
        for fallback in fallbacks {
            self.task_waits.route_fallback(&self.core, fallback);
        }
        for note in batch_notes {
            self.task_waits.route_batch_note(&self.core, note);
        }
        self.unblock_on_role_change();
        if !self.core.raft_follows() {
            self.task_waits.expire_workers(&self.core);
            self.task_waits.serve_parked(&self.core);
            self.lists.serve(&self.core);
        }
        self.tracking.drain(&self.core);
        self.publish_keyspace_events();
        if self.id == 0 {
            if let Some(messages) = self.globals.relay.take() {
                // What other nodes published (`pubsub_relay`).
                self.pubsub.deliver_everywhere(&self.core, messages);
            }
        }
        self.wake_paused();
        self.offload.wake_ready();
        self.mover.wake_if_due(self.shard.borrow().now_ms());
    }

    /// Wakes the commands CLIENT PAUSE holds when the pause ended or changed (they look
    /// again, and park again if it still holds them).
    fn wake_paused(&self) {
        if self.paused.borrow().is_empty() {
            return;
        }
        let pause = &self.globals.pause;
        let generation = pause.generation();
        if generation == self.paused_generation.get() && !pause.over(unix_ms()) {
            return;
        }
        self.paused_generation.set(generation);
        let waiting = std::mem::take(&mut *self.paused.borrow_mut());
        for (_, waker) in waiting {
            waker.wake();
        }
    }

    /// CLIENT UNBLOCK of a connection of this shard: a blocking pop or stream read it waits in
    /// ends now, answered as its time-out would be, or with UNBLOCKED when `error`. False
    /// when the client is not here or not blocked.
    pub fn unblock(&self, client: u64, error: bool) -> bool {
        let Some(conn) = self.clients.borrow().get(client) else {
            return false;
        };
        let Ok(mut state) = conn.try_borrow_mut() else {
            return false;
        };
        if state.blocked_on.is_empty() {
            return false;
        }
        state.unblock_error = error.then_some(crate::clients::UNBLOCKED_BY_CLIENT);
        self.lists.connection_closing(&self.core, &state);
        true
    }

    /// Once this node stops leading its consensus group, or turns from primary into
    /// replica (REPLICAOF), the commands blocked here (BLPOP and the rest, TASK.FETCH …
    /// BLOCK, TASK.WAIT) end with UNBLOCKED, as Redis ends them when a primary turns
    /// replica: nothing would serve them here any more (a follower or replica runs no
    /// waiter), and the client goes on at the new leader or primary.
    fn unblock_on_role_change(&self) {
        let deposed = self
            .core
            .raft
            .borrow_mut()
            .as_mut()
            .is_some_and(crate::shard::raft::ShardRaft::take_deposed);
        let demotions = self
            .globals
            .replication
            .demotions
            .load(std::sync::atomic::Ordering::Acquire);
        let demoted = self.demotions_seen.replace(demotions) != demotions;
        if !deposed && !demoted {
            return;
        }
        let ended = self.end_blocked(crate::clients::UNBLOCKED_BY_ROLE);
        if ended > 0 {
            tracing::info!(
                shard = self.id,
                ended,
                "blocked commands ended: no longer leading, or now a replica"
            );
        }
    }

    /// Ends every command blocked here (BLPOP and the rest, TASK.FETCH … BLOCK, TASK.WAIT)
    /// with `error`; how many there were.
    pub fn end_blocked(&self, error: &'static str) -> usize {
        let mut ended = self
            .task_waits
            .end_all(&self.core, &Frame::static_error(error));
        let clients: Vec<_> = self.clients.borrow().iter().cloned().collect();
        for conn in clients {
            let Ok(mut state) = conn.try_borrow_mut() else {
                continue;
            };
            if state.blocked_on.is_empty() {
                continue;
            }
            ended += 1;
            state.unblock_error = Some(error);
            self.lists.connection_closing(&self.core, &state);
        }
        ended
    }

    /// A connection is closing: every service lets go of what it waits on.
    pub fn connection_closing(&self, state: &ConnState) {
        if let Some(closed) = &state.closed {
            closed.store(true, std::sync::atomic::Ordering::Release);
        }
        for service in self.hooks() {
            service.connection_closing(&self.core, state);
        }
    }

    /// A connection is gone: forget it, and every service gives back what it held.
    pub fn connection_closed(&self, state: &ConnState) {
        self.clients.borrow_mut().remove(state.id);
        if state.no_touch {
            drop(self.no_touch_everywhere(state.id, false));
        }
        for service in self.hooks() {
            service.connection_closed(&self.core, state);
        }
    }

    // ---- the lock, as peers see it ----

    /// Releases the lock held by `token`, lets the local plain waiters through, then serves
    /// the lock's queue (`lock`).
    pub fn unlock(&self, token: u64) {
        self.core.release_lock(token);
        self.serve_queue();
    }

    /// Serves the lock's queue from the front while its turn lasts: peers' plain requests
    /// run, until one takes the lock or it is handed to a local taker (`LockQueue::next`).
    fn serve_queue(&self) {
        if self.serving_queue.replace(true) {
            return;
        }
        while let Some(next) = self.lock.next() {
            if let lock::Next::Peer((from, id, token, request)) = next {
                self.admit(from, id, token, request);
            }
        }
        self.serving_queue.set(false);
    }

    /// The shard's queue server: whenever the plain waiters a release let through have run
    /// (or the lock was let go with nobody serving after), serves the queue. One per shard,
    /// for its life.
    pub async fn serve_lock_queue(self: Rc<Self>) {
        while !self.globals.shutting_down() {
            std::future::poll_fn(|cx| match self.lock.resumable(cx.waker()) {
                true => std::task::Poll::Ready(()),
                false => std::task::Poll::Pending,
            })
            .await;
            self.serve_queue();
        }
    }

    /// A peer's Unlock. If the lock was never granted (the holder gave up while its Lock
    /// request waited here), the waiting request is withdrawn instead, so the lock is never
    /// taken for nobody.
    fn peer_unlock(&self, token: u64) {
        if self.lock_holder() == Some(token) {
            self.unlock(token);
            return;
        }
        let withdrawn = self.lock.withdraw_peer(|(_, _, t, request)| {
            *t == Some(token) && matches!(request, Request::Lock(_))
        });
        if withdrawn {
            tracing::warn!(token, "a lock request was withdrawn before it was served");
        }
    }

    /// Once per turn while locked: when the holder has become a busy script, wakes the
    /// waiting clients (they answer BUSY) and answers the peers' waiting plain requests BUSY.
    fn announce_busy_holder(&self) {
        if !self.held_by_busy_script() {
            return;
        }
        self.core.wake_lock_waiters();
        let plain = self
            .lock
            .take_peers(|(_, _, token, request)| token.is_none() && is_exec(request));
        for (from, id, _, request) in plain {
            if let Some(count) = plain_commands(&request) {
                self.respond(from, id, busy_frames(count));
            }
        }
    }

    // ---- peers' requests ----

    /// A request from a peer: lock traffic, or work served now unless another operation
    /// holds the lock (or others wait for it first), in which case it waits in the lock's
    /// queue.
    fn handle_request(&self, from: usize, id: u64, token: Option<u64>, request: Request) {
        match request {
            Request::Lock(LockRequest::Unlock) => {
                self.peer_unlock(token.expect("unlock carries its token"));
                self.respond(from, id, Response::Done);
                return;
            }
            // Publishing and pub/sub questions never touch the keyspace: a lock does not
            // hold them up (a transaction or script that publishes holds locks itself).
            Request::PubSub(PubSubRequest::Monitor { line }) => {
                self.monitors.deliver(&self.core, &line);
                self.respond(from, id, Response::Done);
                return;
            }
            Request::PubSub(request) => {
                let response = self.pubsub.serve(&self.core, request);
                self.respond(from, id, response);
                return;
            }
            // Tracking bookkeeping touches no keys either, and must keep its place in the
            // pair's order (an invalidation ahead of the replies that follow the write).
            Request::Tracking(request) => {
                let response = self.tracking.serve(&self.core, request);
                self.respond(from, id, response);
                return;
            }
            _ => {}
        }
        if let Some(count) = self.consensus_refuses(from, &request) {
            tracing::warn!(
                shard = self.id,
                from,
                "consensus mode: a peer shard's write was refused (a command for this group runs on its shard's port)"
            );
            let error = Frame::static_error(CROSS_GROUP_WRITE);
            self.respond(from, id, Response::Frames(vec![error; count]));
            return;
        }
        if !self.lock.open_to(token) {
            self.defer(from, id, token, request);
            return;
        }
        self.admit(from, id, token, request);
    }

    /// Consensus mode with several groups: a peer's commands that write are refused (the
    /// count of error replies to answer), whether this node leads this shard's group or
    /// not: a write here must go through this group's log, and its reply wait for its
    /// commit, which only this shard's own connections do (`session::consensus_route`
    /// sends clients there, so only a path it does not know gets here).
    fn consensus_refuses(&self, from: usize, request: &Request) -> Option<usize> {
        if from == self.id || self.shard_count == 1 || self.globals.consensus.is_none() {
            return None;
        }
        let writes =
            |spec: usize| wetask_shards::COMMANDS[spec].has(wetask_shards::spec::flag::WRITE);
        match request {
            Request::Keys(KeyRequest::Exec { commands, .. })
            | Request::Lock(LockRequest::Exec { commands, .. }) => commands
                .iter()
                .any(|(spec, _)| writes(spec))
                .then(|| commands.count()),
            Request::Keys(KeyRequest::ExecParsed { spec, .. }) => writes(*spec).then_some(1),
            _ => None,
        }
    }

    /// Serves a peer's request whose turn has come (the lock is its operation's, or free).
    fn admit(&self, from: usize, id: u64, token: Option<u64>, request: Request) {
        match request {
            Request::Lock(LockRequest::Lock) => {
                self.core.grant_lock(token);
                self.respond(from, id, Response::Done);
            }
            Request::Lock(LockRequest::Exec {
                db,
                client,
                commands,
            }) => {
                self.core.grant_lock(token);
                let response = self.serve(Request::Keys(KeyRequest::Exec {
                    db,
                    client,
                    commands,
                }));
                self.respond(from, id, response);
            }
            Request::Tasks(
                request @ (TaskRequest::FetchBlocking { .. }
                | TaskRequest::Wait { .. }
                | TaskRequest::Events { .. }),
            ) => {
                self.tick();
                self.task_waits.handle(&self.core, from, id, request);
            }
            Request::Lists(request) => {
                self.tick();
                self.lists.handle(&self.core, from, id, request);
            }
            request => {
                let response = self.serve(request);
                self.respond(from, id, response);
            }
        }
    }

    /// A request that meets the lock held by another operation waits for the unlock; a
    /// plain command batch instead gets BUSY when the holder is a busy script, and an error
    /// when too many already wait (lock traffic and internal requests still queue; they
    /// are bounded by the operations in flight).
    fn defer(&self, from: usize, id: u64, token: Option<u64>, request: Request) {
        if let Some(count) = plain_commands(&request) {
            if self.held_by_busy_script() {
                self.respond(from, id, busy_frames(count));
                return;
            }
            if self.lock.queued() >= DEFERRED_REQUESTS_MAX {
                let error = Frame::static_error(
                    "ERR too many requests are waiting for a cross-shard operation on this shard; try again",
                );
                self.respond(from, id, Response::Frames(vec![error; count]));
                return;
            }
        }
        self.lock.defer((from, id, token, request));
    }

    /// Serves a request synchronously on this shard's state: a peer's, or one a cross-shard
    /// operation runs here itself. Never lock traffic or a parking request.
    pub fn serve(&self, request: Request) -> Response {
        // A parked shard's coarse clock may be up to a cron period old: refresh it first.
        self.tick();
        match request {
            Request::Keys(request) => self.core.serve_keys(request),
            Request::Watch(request) => watch::serve(&self.core, request),
            Request::Tasks(request) => self.task_waits.serve(&self.core, request),
            Request::PubSub(PubSubRequest::Monitor { line }) => {
                self.monitors.deliver(&self.core, &line);
                Response::Done
            }
            Request::PubSub(request) => self.pubsub.serve(&self.core, request),
            Request::Tracking(request) => self.tracking.serve(&self.core, request),
            Request::Admin(request) => self.serve_admin(request),
            Request::Lock(_) | Request::Lists(_) => {
                unreachable!("lock traffic and blocked pops never reach serve")
            }
        }
    }

    /// Publishes the keyspace notifications this shard's writes owe (see `PubSub`).
    #[inline]
    pub fn publish_keyspace_events(&self) {
        let owed = self.shard.try_borrow().is_ok_and(|s| !s.notes.is_empty());
        if owed && self.scripts.run.try_borrow().is_ok_and(|r| r.is_none()) {
            self.pubsub.publish_events(&self.core);
        }
    }

    fn serve_admin(&self, request: AdminRequest) -> Response {
        match request {
            AdminRequest::Stats => Response::Stats(Box::new(self.report())),
            AdminRequest::ResetStats => {
                self.stats.reset();
                self.shard.borrow_mut().reset_keyspace_lookups();
                Response::Done
            }
            AdminRequest::ClientList { kind } => {
                Response::Text(self.clients.borrow().list(unix_ms(), None, kind))
            }
            AdminRequest::ClientKill { filter } => {
                Response::Count(self.clients.borrow().kill(&filter, None))
            }
            AdminRequest::ClientUnblock { client, error } => {
                Response::Count(usize::from(self.unblock(client, error)))
            }
            AdminRequest::SyncSettings => {
                self.core.sync_settings();
                Response::Done
            }
            AdminRequest::NoTouch { client, on } => {
                self.shard.borrow_mut().set_no_touch(client, on);
                Response::Done
            }
            AdminRequest::Snapshot { epoch } => {
                self.take_snapshot(epoch);
                Response::Done
            }
        }
    }

    /// `appendonly no`: copies this shard's state for snapshot `epoch`.
    pub fn take_snapshot(&self, epoch: u64) {
        if let Some(dumps) = self.globals.dumps.get() {
            let writes = dumps.take(self.id, &mut self.shard.borrow_mut(), epoch);
            self.dump_writes.set(writes);
        }
    }

    /// CLIENT NO-TOUCH of a connection of this shard, on every shard its commands may run
    /// on; the returned futures say when each peer has it.
    pub fn no_touch_everywhere(&self, client: u64, on: bool) -> Vec<crate::mesh::ResponseFuture> {
        self.shard.borrow_mut().set_no_touch(client, on);
        self.core
            .request_peers(|| Request::Admin(AdminRequest::NoTouch { client, on }))
            .into_iter()
            .map(|(_, future)| future)
            .collect()
    }

    /// The receiver loop for messages from one peer shard, on the glommio fallback (the
    /// io_uring loop reads its channels itself: `net::uring`).
    pub async fn serve_peer(
        self: Rc<Self>,
        peer: usize,
        receiver: glommio::channels::shared_channel::ConnectedReceiver<crate::mesh::Envelope>,
    ) {
        loop {
            // The task's waker is kept where the cron finds it: every 100 ms it wakes the
            // receivers, so an envelope whose wake-up went astray (two executors sharing a
            // CPU, a notification racing the consumer going to sleep) waits at most that
            // long instead of for ever.
            let envelope = {
                let mut recv = std::pin::pin!(receiver.recv());
                std::future::poll_fn(|cx| {
                    self.receiver_wakers.borrow_mut()[peer] = Some(cx.waker().clone());
                    std::future::Future::poll(recv.as_mut(), cx)
                })
                .await
            };
            let Some(envelope) = envelope else {
                break;
            };
            self.serve_envelope(peer, envelope);
        }
        tracing::debug!(shard = self.id, peer, "peer channel closed");
    }

    /// Serves one envelope from `peer`: its requests run here, its responses complete
    /// this shard's pending requests.
    pub fn serve_envelope(&self, peer: usize, envelope: crate::mesh::Envelope) {
        use crate::mesh::Message;
        let mesh = self.mesh.as_ref().expect("mesh");
        for message in envelope {
            match message {
                Message::Request {
                    from,
                    id,
                    token,
                    request,
                } => self.handle_request(from, id, token, request),
                Message::Response { id, response } => mesh.complete(id, response),
            }
        }
        // Work that arrived may unblock parked fetches; then the replies to a whole
        // envelope leave together, now, behind the invalidations its writes owe (`tick`).
        self.tick();
        mesh.flush_to(peer);
    }

    // ---- reports ----

    // Long: one field per line of the shard's report (INFO and the watchdog read it); the struct literal reads best whole.
    pub fn report(&self) -> ShardReport {
        let shard = self.shard.borrow();
        ShardReport {
            commands: self.stats.commands.get(),
            per_command: self.stats.per_command(self.globals.slowlog.ticks_per_us()),
            keyspace: shard.keyspace_summary(),
            expired_keys: shard.expired_keys(),
            net_input_bytes: self.stats.net_input_bytes.get(),
            net_output_bytes: self.stats.net_output_bytes.get(),
            ring_enters: self.stats.ring_enters.get(),
            ring_sleeps: self.stats.ring_sleeps.get(),
            ring_fsyncs: self.stats.ring_fsyncs.get(),
            ring_fsync_us: self.stats.ring_fsync_us.get(),
            held_sends: self.stats.held_sends.get(),
            mesh_envelopes: self.mesh.as_ref().map_or(0, |m| m.envelopes_sent.get()),
            mesh_messages: self.mesh.as_ref().map_or(0, |m| m.messages_sent.get()),
            tasks: shard.tasks.totals(),
            blocked_clients: {
                let mut blocked = self.lists.blocked_clients();
                blocked.extend(self.task_waits.blocked_clients());
                blocked.extend(self.paused.borrow().iter().map(|(id, _)| *id));
                blocked
            },
            blocking_keys: shard.blocked.key_counts(),
            pubsub_channels: self.pubsub.channel_names(),
            pubsub_patterns: self.pubsub.pattern_names(),
            evicted_keys: shard.evicted_keys(),
            shard_lines: vec![self.waiting_line()],
            journal_bytes: self.journal.borrow().as_ref().map_or(0, |j| j.size()),
            journal_pending: self
                .journal
                .borrow()
                .as_ref()
                .map_or(0, |j| j.pending_bytes() as u64),
            journal_records: self
                .journal
                .borrow()
                .as_ref()
                .map_or(0, |j| j.records_written()),
            instantaneous: self.stats.instantaneous(crate::globals::unix_ms()),
            reads: self.stats.net_reads.get(),
            writes: self.stats.net_writes.get(),
            keyspace_hits: shard.keyspace_lookups().0,
            keyspace_misses: shard.keyspace_lookups().1,
            lua_memory: self
                .scripts
                .lua
                .borrow()
                .as_ref()
                .map_or(0, |l| l.used_memory() as u64),
            histograms: self.stats.histograms(),
            tracking_clients: self
                .clients
                .borrow()
                .iter()
                .filter(|c| c.try_borrow().is_ok_and(|c| c.tracking.is_some()))
                .count() as u64,
            tracking_keys: shard.tracking.totals().0 as u64,
            tracking_items: shard.tracking.totals().1 as u64,
            tracking_prefixes: shard.tracking.totals().2 as u64,
            queues: shard
                .tasks
                .queue_names()
                .into_iter()
                .filter_map(|name| {
                    let stats = shard.tasks.queue_stats(&name, shard.now_ms())?;
                    Some((name, stats))
                })
                .collect(),
        }
    }

    /// `INFO shards`: what this shard waits on, for diagnosing a reply that never comes:
    /// the lock (held by token), peers' requests deferred behind it, this shard's own
    /// requests still unanswered by peers, and clients whose commands run in a task.
    fn waiting_line(&self) -> String {
        let (queued, plain, admitted) = self.lock.counts();
        let clients = self.clients.borrow();
        let in_task: Vec<String> = clients
            .iter()
            .filter_map(|c| {
                let c = c.borrow();
                c.in_batch.then(|| format!("{}:{}", c.id, c.last_command))
            })
            .collect();
        format!(
            "shard{}:locked={},deferred={},plain_waiting={},admitted={},mesh_pending={},clients_in_task={}",
            self.id,
            self.lock_holder()
                .map_or("no".to_string(), |t| t.to_string()),
            queued,
            plain,
            admitted,
            self.mesh.as_ref().map_or(0, |m| m.pending_count()),
            if in_task.is_empty() {
                "none".to_string()
            } else {
                in_task.join("/")
            },
        )
    }
}

fn is_exec(request: &Request) -> bool {
    plain_commands(request).is_some()
}

/// How many commands a plain command request carries (a batch, or a blocking command's
/// attempt); `None` for any other request.
fn plain_commands(request: &Request) -> Option<usize> {
    match request {
        Request::Keys(KeyRequest::Exec { commands, .. }) => Some(commands.count()),
        Request::Keys(KeyRequest::ExecParsed { .. }) => Some(1),
        _ => None,
    }
}

/// BUSY for each of a request's commands.
fn busy_frames(count: usize) -> Response {
    Response::Frames(vec![Frame::static_error(crate::lua::busy::BUSY); count])
}
