//! Everything one shard's tasks share on their core: the shard state, the mesh end, the
//! client registry and the counters. One `Rc<ShardCtx>` per executor; never sent anywhere.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use wetask_shards::Shard;

use crate::clients::{Clients, ConnState};
use crate::globals::{unix_ms, Globals};
use crate::mesh::{Mesh, Request, Response, ResponseFuture};
use crate::stats::{ShardReport, ShardStats};

/// Keys sampled by active expiry per loop turn, across this shard's databases.
pub const ACTIVE_EXPIRE_SAMPLES_PER_TURN: usize = 64;

/// Keys a shard evicts per loop turn in the background while over `maxmemory`.
pub const EVICTIONS_PER_TURN_MAX: usize = 256;
/// Most peer requests a locked shard queues for after the unlock.
pub const DEFERRED_REQUESTS_MAX: usize = 65_536;

/// A peer's request held while another operation owns the lock: (from, id, token, request).
type DeferredRequest = (usize, u64, Option<u64>, Request);

pub struct ShardCtx {
    pub id: usize,
    /// When the cron last ticked (unix ms), for the watchdog thread (`runtime`).
    pub cron_beat: Arc<std::sync::atomic::AtomicU64>,
    pub shard_count: usize,
    pub shard: RefCell<Shard>,
    pub mesh: Option<Rc<Mesh>>,
    pub globals: Arc<Globals>,
    pub clients: RefCell<Clients>,
    pub stats: ShardStats,
    last_expire_ms: std::cell::Cell<u64>,
    last_idle_sweep_ms: std::cell::Cell<u64>,
    /// The mesh receiver tasks' wakers, by peer (see `serve_peer`), and when they were last
    /// nudged.
    receiver_wakers: RefCell<Vec<Option<std::task::Waker>>>,
    last_receiver_nudge_ms: std::cell::Cell<u64>,
    /// The token of the cross-shard operation holding this shard, if any (DESIGN §2.4).
    lock: std::cell::Cell<Option<u64>>,
    unlock_wakers: RefCell<Vec<std::task::Waker>>,
    deferred: RefCell<std::collections::VecDeque<DeferredRequest>>,
    tokens_issued: std::cell::Cell<u64>,
    /// Blocked fetches waiting on this shard's queues (`task_wait`).
    pub parked: RefCell<Vec<crate::task_wait::Parked>>,
    /// The engine epoch the parked fetches were last tried at.
    pub parked_epoch: std::cell::Cell<u64>,
    /// Blocked list pops parked on this shard's keys, by waiter id (`list_block`).
    pub list_waiters: RefCell<std::collections::HashMap<u64, crate::list_block::ListWaiter>>,
    pub list_index: RefCell<crate::list_block::ListIndex>,
    /// This shard's pub/sub subscriptions.
    pub pubsub: RefCell<crate::pubsub::Registry>,
    /// Clients with pushes waiting to be sent, for the transport.
    pub push_ready: RefCell<Vec<u64>>,
    /// Wakes the transport when a push arrives (set by the io_uring driver).
    pub push_hook: RefCell<Option<Box<dyn Fn()>>>,
    /// Rouses the transport and makes it enter its ring with GETEVENTS whatever its flags
    /// say (set by the io_uring driver; called by the cron).
    pub rouse_hook: RefCell<Option<Box<dyn Fn()>>>,
    /// Pushes that met their connection busy, settled by the transport.
    pub deferred_pushes: RefCell<Vec<(u64, wetask_protocol::Frame)>>,
    /// This shard's Lua state, made by the first script.
    pub lua: RefCell<Option<mlua::Lua>>,
    /// The SCRIPT FLUSH epoch `lua` was made in (`Globals::script_flush_epoch`).
    pub lua_epoch: std::cell::Cell<u64>,
    /// The script running on this shard, if any.
    pub script_run: RefCell<Option<crate::scripting::ScriptRun>>,
}

impl ShardCtx {
    pub fn new(id: usize, globals: Arc<Globals>, mesh: Option<Rc<Mesh>>) -> Self {
        let shard_count = globals.shard_count;
        ShardCtx {
            id,
            shard_count: globals.shard_count,
            shard: RefCell::new({
                let mut shard = Shard::new(id);
                shard.tasks = wetask_shards::tasks::Engine::new(globals.config.task_retention_ms);
                shard
            }),
            mesh,
            globals,
            clients: RefCell::new(Clients::default()),
            stats: ShardStats::default(),
            last_expire_ms: std::cell::Cell::new(0),
            last_idle_sweep_ms: std::cell::Cell::new(0),
            receiver_wakers: RefCell::new(vec![None; shard_count]),
            last_receiver_nudge_ms: std::cell::Cell::new(0),
            lock: std::cell::Cell::new(None),
            unlock_wakers: RefCell::new(Vec::new()),
            deferred: RefCell::new(std::collections::VecDeque::new()),
            tokens_issued: std::cell::Cell::new(0),
            parked: RefCell::new(Vec::new()),
            parked_epoch: std::cell::Cell::new(0),
            list_waiters: RefCell::new(std::collections::HashMap::new()),
            list_index: RefCell::new(crate::list_block::ListIndex::default()),
            pubsub: RefCell::new(crate::pubsub::Registry::default()),
            push_ready: RefCell::new(Vec::new()),
            push_hook: RefCell::new(None),
            rouse_hook: RefCell::new(None),
            // Starts beating at birth: a shard that stalls before its first cron tick (seen
            // in CI, a request sent within 100 ms of start) is roused like any other.
            cron_beat: Arc::new(std::sync::atomic::AtomicU64::new(crate::globals::unix_ms())),
            deferred_pushes: RefCell::new(Vec::new()),
            lua: RefCell::new(None),
            lua_epoch: std::cell::Cell::new(0),
            script_run: RefCell::new(None),
        }
    }

    /// Updates the coarse clock and runs one bounded round of active expiry. Called once per
    /// loop turn by the transport.
    pub fn tick(&self) {
        let now = unix_ms();
        let mut shard = self.shard.borrow_mut();
        shard.set_clock(now);
        // Active expiry runs at most once per millisecond, however fast the loop turns.
        if now != self.last_expire_ms.get() {
            self.last_expire_ms.set(now);
            shard.active_expire(ACTIVE_EXPIRE_SAMPLES_PER_TURN);
            // Due tasks, expired leases, deadlines, retention: at most once per ms too.
            shard.tasks.advance(now);
        }
        let fallbacks = shard.tasks.take_fallbacks();
        drop(shard);
        crate::scripting::drop_flushed_state(self);
        self.background_eviction();
        self.close_idle_clients(now);
        self.nudge_receivers(now);
        if self.lock.get().is_some() {
            self.announce_busy_holder();
        }
        for fallback in fallbacks {
            self.route_fallback(fallback, now);
        }
        self.serve_parked();
        self.serve_blocked_lists();
    }

    /// True when `maxmemory` is set and the server's allocations are past it.
    pub fn over_maxmemory(&self) -> bool {
        crate::memory::over_maxmemory()
    }

    /// Refuses a `denyoom` command early, on the connection's shard, when the server is past
    /// `maxmemory` under `noeviction` (Redis's OOM). Under an eviction policy the shard that
    /// runs a write makes room itself (`Shard::make_room`), so each shard gives back memory
    /// in proportion to what it takes in.
    pub fn make_room(
        &self,
        spec: &wetask_shards::CommandSpec,
    ) -> Result<(), wetask_protocol::Frame> {
        use wetask_shards::table::flag;
        if spec.has(flag::DENYOOM)
            && self.globals.eviction_policy() == wetask_shards::evict::Policy::NoEviction
            && self.over_maxmemory()
        {
            return Err(wetask_protocol::Frame::static_error(
                wetask_shards::errors::OOM,
            ));
        }
        Ok(())
    }

    /// Every 100 ms, wakes the mesh receivers to look at their channels again (a lost
    /// wake-up costs at most that; see `serve_peer`).
    fn nudge_receivers(&self, now_ms: u64) {
        if now_ms < self.last_receiver_nudge_ms.get() + 100 {
            return;
        }
        self.last_receiver_nudge_ms.set(now_ms);
        let wakers: Vec<std::task::Waker> = self
            .receiver_wakers
            .borrow_mut()
            .iter_mut()
            .filter_map(Option::take)
            .collect();
        for waker in wakers {
            waker.wake();
        }
        if let Some(mesh) = self.mesh.as_ref() {
            mesh.nudge();
        }
    }

    /// The `timeout` option: once a second, closes this shard's clients idle that long.
    fn close_idle_clients(&self, now_ms: u64) {
        let timeout_s = self
            .globals
            .idle_timeout_s
            .load(std::sync::atomic::Ordering::Relaxed);
        if timeout_s == 0 || now_ms < self.last_idle_sweep_ms.get() + 1000 {
            return;
        }
        self.last_idle_sweep_ms.set(now_ms);
        if let Ok(clients) = self.clients.try_borrow() {
            clients.close_idle(now_ms, timeout_s.saturating_mul(1000));
        }
    }

    /// Keeps the shard's eviction settings in step with the configuration, and while the
    /// server is past `maxmemory` evicts some of this shard's keys each turn, so a shard that
    /// only serves reads still gives back its share.
    fn background_eviction(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let policy = self.globals.eviction_policy();
        let on = self.globals.maxmemory() > 0;
        let mut shard = self.shard.borrow_mut();
        if shard.eviction_policy() != policy {
            shard.set_eviction_policy(policy);
        }
        let samples = self.globals.maxmemory_samples.load(Relaxed) as usize;
        shard.set_memory_check(
            on.then_some(crate::memory::over_maxmemory as fn() -> bool),
            samples,
        );
        if on && policy != wetask_shards::evict::Policy::NoEviction {
            for _ in 0..EVICTIONS_PER_TURN_MAX {
                if !crate::memory::over_maxmemory() || !shard.evict_one(samples) {
                    break;
                }
            }
        }
    }

    /// Submits a dead task's fallback on the shard that owns the fallback queue.
    fn route_fallback(&self, fallback: wetask_shards::tasks::Fallback, now_ms: u64) {
        let owner = if self.shard_count == 1 {
            self.id
        } else {
            wetask_shards::shard_of(&fallback.queue, self.shard_count)
        };
        if owner == self.id {
            let mut shard = self.shard.borrow_mut();
            if let Err(err) = shard.tasks.submit_fallback(fallback, now_ms) {
                tracing::warn!("fallback task refused: {}", err.text());
            }
        } else {
            // Fire and forget: the peer submits it when the envelope arrives.
            drop(self.request(owner, Request::SubmitFallback { fallback }));
        }
    }

    /// A connection is closing: let go of its blocked fetch everywhere, so the fetch returns
    /// and the connection can be freed (its leases are released when it is).
    pub fn connection_closing(&self, state: &ConnState) {
        self.unpark_client(state.id);
        for &shard in state.task_shards.iter().filter(|&&s| s != self.id) {
            drop(self.request(shard, Request::TaskUnpark { client: state.id }));
        }
        for &shard in &state.blocked_on {
            if shard == self.id {
                self.unpark_list_client(state.id);
            } else {
                drop(self.request(shard, Request::ListUnblockClient { client: state.id }));
            }
        }
    }

    /// A connection is gone: forget it and requeue every task leased to it, on every shard
    /// it fetched from.
    pub fn connection_closed(&self, state: &ConnState) {
        self.clients.borrow_mut().remove(state.id);
        crate::transaction::release(self, state.watched.clone());
        self.drop_subscriptions(state);
        self.unpark_client(state.id);
        for &shard in &state.task_shards {
            if shard == self.id {
                let mut local = self.shard.borrow_mut();
                let now = local.now_ms();
                local.tasks.release_owner(state.id, now);
            } else {
                drop(self.request(shard, Request::ReleaseLeases { client: state.id }));
            }
        }
    }

    pub fn request(&self, to: usize, request: Request) -> ResponseFuture {
        self.request_as(to, None, request)
    }

    /// A request on behalf of the cross-shard operation holding lock `token`.
    pub fn request_as(&self, to: usize, token: Option<u64>, request: Request) -> ResponseFuture {
        debug_assert_ne!(to, self.id, "local work never goes through the mesh");
        let mesh = self
            .mesh
            .as_ref()
            .expect("mesh exists when there are several shards");
        mesh.request(self.id, to, token, request)
    }

    /// Creates and registers the state of a newly accepted connection.
    pub fn new_connection(&self, fd: std::os::fd::RawFd) -> Rc<RefCell<ConnState>> {
        crate::net::set_keepalive(
            fd,
            self.globals
                .tcp_keepalive_s
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        let authenticated = self
            .globals
            .requirepass
            .lock()
            .expect("requirepass")
            .is_none();
        let state = Rc::new(RefCell::new(ConnState::new(
            self.globals.next_client_id(),
            fd,
            crate::net::socket_addr(fd, true),
            crate::net::socket_addr(fd, false),
            unix_ms(),
            authenticated,
        )));
        self.clients.borrow_mut().add(state.clone());
        state
    }

    /// The shard that owns `key` (or a queue or task id, by its slot tag).
    pub fn owner_of(&self, key: &[u8]) -> usize {
        if self.shard_count == 1 {
            self.id
        } else {
            wetask_shards::shard_of(key, self.shard_count)
        }
    }

    /// True while a cross-shard operation holds this shard's lock.
    pub fn is_locked(&self) -> bool {
        self.lock.get().is_some()
    }

    /// A fresh token for one cross-shard operation.
    pub fn new_token(&self) -> u64 {
        let count = self.tokens_issued.get() + 1;
        self.tokens_issued.set(count);
        ((self.id as u64) << 48) | count
    }

    /// Waits until no cross-shard operation holds this shard's lock.
    pub async fn wait_unlocked(&self) {
        std::future::poll_fn(|cx| {
            if self.lock.get().is_none() {
                std::task::Poll::Ready(())
            } else {
                self.unlock_wakers.borrow_mut().push(cx.waker().clone());
                std::task::Poll::Pending
            }
        })
        .await
    }

    /// The token of the operation holding this shard's lock, if any.
    pub fn lock_holder(&self) -> Option<u64> {
        self.lock.get()
    }

    /// True when this shard's lock is held by a script past its busy threshold.
    pub fn held_by_busy_script(&self) -> bool {
        self.lock.get().is_some_and(|token| {
            crate::script_busy::holder_is_busy(&self.globals.script_slots, token)
        })
    }

    /// Waits until no cross-shard operation holds this shard's lock, as
    /// [`ShardCtx::wait_unlocked`], but gives up (returns true) as soon as the holder is a
    /// busy script: the caller then answers BUSY.
    pub async fn wait_unlocked_or_busy(&self) -> bool {
        std::future::poll_fn(|cx| {
            if self.lock.get().is_none() {
                std::task::Poll::Ready(false)
            } else if self.held_by_busy_script() {
                std::task::Poll::Ready(true)
            } else {
                self.unlock_wakers.borrow_mut().push(cx.waker().clone());
                std::task::Poll::Pending
            }
        })
        .await
    }

    /// Once per turn while locked: when the holder has become a busy script, wakes the
    /// waiting clients (they answer BUSY) and answers the peers' waiting plain requests BUSY.
    fn announce_busy_holder(&self) {
        if !self.held_by_busy_script() {
            return;
        }
        for waker in self.unlock_wakers.borrow_mut().drain(..) {
            waker.wake();
        }
        let plain: std::collections::VecDeque<DeferredRequest> = {
            let mut deferred = self.deferred.borrow_mut();
            let (plain, rest) =
                std::mem::take(&mut *deferred)
                    .into_iter()
                    .partition(|(_, _, token, request)| {
                        token.is_none() && matches!(request, Request::Exec { .. })
                    });
            *deferred = rest;
            plain
        };
        let Some(mesh) = self.mesh.as_ref() else {
            return;
        };
        for (from, id, _, request) in plain {
            if let Request::Exec { commands, .. } = request {
                mesh.respond(from, id, busy_frames(commands.len()));
            }
        }
    }

    /// Takes this shard's lock for `token`, waiting for any holder to release it.
    pub async fn lock_local(&self, token: u64) {
        loop {
            self.wait_unlocked().await;
            if self.lock.get().is_none() {
                self.lock.set(Some(token));
                return;
            }
        }
    }

    /// Releases the lock held by `token`, wakes local waiters, then serves the requests that
    /// arrived meanwhile, in order, until one of them takes the lock again.
    pub fn unlock(&self, token: u64) {
        debug_assert_eq!(self.lock.get(), Some(token), "unlock by a non-holder");
        self.lock.set(None);
        for waker in self.unlock_wakers.borrow_mut().drain(..) {
            waker.wake();
        }
        while self.lock.get().is_none() {
            let next = self.deferred.borrow_mut().pop_front();
            let Some((from, id, token, request)) = next else {
                break;
            };
            self.handle_request(from, id, token, request);
        }
    }

    /// A request from a peer: lock traffic, or work served now unless another operation
    /// holds the lock, in which case it waits in `deferred`.
    fn handle_request(&self, from: usize, id: u64, token: Option<u64>, request: Request) {
        let mesh = self.mesh.as_ref().expect("mesh");
        let held_by_other = matches!(self.lock.get(), Some(holder) if Some(holder) != token);
        match request {
            Request::Unlock => {
                let token = token.expect("unlock carries its token");
                if self.lock.get() == Some(token) {
                    self.unlock(token);
                } else {
                    // The holder gave up before its lock request was served (it ended while
                    // waiting): drop that request, so the lock is never taken for nobody.
                    let mut deferred = self.deferred.borrow_mut();
                    let before = deferred.len();
                    deferred.retain(|(_, _, t, request)| {
                        *t != Some(token)
                            || !matches!(request, Request::Lock | Request::LockExec { .. })
                    });
                    if deferred.len() != before {
                        tracing::warn!(token, "a lock request was withdrawn before it was served");
                    }
                }
                mesh.respond(from, id, Response::Bool(true));
            }
            // Publishing and pub/sub questions never touch the keyspace: a lock does not
            // hold them up (a transaction or script that publishes holds locks itself).
            Request::Exec { commands, .. } if held_by_other && self.held_by_busy_script() => {
                mesh.respond(from, id, busy_frames(commands.len()));
            }
            // What waits behind a lock is bounded: past the bound a client's work gets an
            // error instead of a place in the queue (lock traffic and internal requests
            // still queue; they are bounded by the operations in flight).
            Request::Exec { commands, .. }
                if held_by_other && self.deferred.borrow().len() >= DEFERRED_REQUESTS_MAX =>
            {
                let error = wetask_protocol::Frame::static_error(
                    "ERR too many requests are waiting for a cross-shard operation on this shard; try again",
                );
                mesh.respond(from, id, Response::Frames(vec![error; commands.len()]));
            }
            request
                if held_by_other
                    && !matches!(request, Request::Publish { .. } | Request::Pubsub(_)) =>
            {
                self.deferred
                    .borrow_mut()
                    .push_back((from, id, token, request));
            }
            Request::Lock => {
                self.lock.set(token);
                mesh.respond(from, id, Response::Bool(true));
            }
            Request::LockExec {
                db,
                client,
                commands,
            } => {
                self.lock.set(token);
                let response = self.serve(Request::Exec {
                    db,
                    client,
                    commands,
                });
                mesh.respond(from, id, response);
            }
            Request::TaskFetchBlocking {
                client,
                queues,
                count,
                lease_ms,
                deadline_ms,
            } => {
                self.tick();
                self.park_fetch(crate::task_wait::Parked {
                    client,
                    want: crate::task_wait::Want::Fetch {
                        queues,
                        count,
                        lease_ms,
                    },
                    deadline_ms,
                    reply: crate::task_wait::Reply::Peer { from, id },
                });
            }
            Request::TaskWait {
                client,
                id: task,
                deadline_ms,
            } => {
                self.tick();
                if self.shard.borrow().tasks.get(&task).is_none() {
                    let error = wetask_protocol::Frame::static_error("ERR no such task");
                    mesh.respond(from, id, Response::Frames(vec![error]));
                } else {
                    self.park_fetch(crate::task_wait::Parked {
                        client,
                        want: crate::task_wait::Want::Finish { id: task },
                        deadline_ms,
                        reply: crate::task_wait::Reply::Peer { from, id },
                    });
                }
            }
            Request::TaskUnpark { client } => {
                self.unpark_client(client);
                mesh.respond(from, id, Response::Bool(true));
            }
            Request::ListBlock {
                waiter,
                client,
                db,
                keys,
                op,
                deadline_ms,
            } => {
                self.tick();
                self.park_list(
                    waiter,
                    crate::list_block::ListWaiter {
                        client,
                        db,
                        keys,
                        op,
                        deadline_ms,
                        reply: crate::task_wait::Reply::Peer { from, id },
                    },
                );
            }
            Request::ListUnblock { waiter } => {
                self.unpark_list(waiter);
                mesh.respond(from, id, Response::Bool(true));
            }
            Request::ListUnblockClient { client } => {
                self.unpark_list_client(client);
                mesh.respond(from, id, Response::Bool(true));
            }
            Request::ReleaseLeases { client } => {
                self.unpark_client(client);
                let mut shard = self.shard.borrow_mut();
                let now = shard.now_ms();
                let count = shard.tasks.release_owner(client, now);
                drop(shard);
                mesh.respond(from, id, Response::Count(count));
            }
            request => {
                let response = self.serve(request);
                mesh.respond(from, id, response);
            }
        }
    }

    pub fn report(&self) -> ShardReport {
        let shard = self.shard.borrow();
        ShardReport {
            commands: self.stats.commands.get(),
            per_command: self.stats.per_command(),
            keyspace: shard.keyspace_summary(),
            expired_keys: shard.expired_keys(),
            net_input_bytes: self.stats.net_input_bytes.get(),
            net_output_bytes: self.stats.net_output_bytes.get(),
            ring_enters: self.stats.ring_enters.get(),
            ring_parks: self.stats.ring_parks.get(),
            mesh_envelopes: self.mesh.as_ref().map_or(0, |m| m.envelopes_sent.get()),
            mesh_messages: self.mesh.as_ref().map_or(0, |m| m.messages_sent.get()),
            tasks: shard.tasks.totals(),
            blocked_clients: self.list_index.borrow().by_client.keys().copied().collect(),
            pubsub_channels: self.pubsub.borrow().channel_names(),
            pubsub_patterns: self.pubsub.borrow().pattern_names(),
            evicted_keys: shard.evicted_keys(),
            shard_lines: vec![self.waiting_line()],
            lua_memory: self
                .lua
                .borrow()
                .as_ref()
                .map_or(0, |l| l.used_memory() as u64),
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
        let clients = self.clients.borrow();
        let in_task: Vec<String> = clients
            .iter()
            .filter_map(|c| {
                let c = c.borrow();
                c.in_batch.then(|| format!("{}:{}", c.id, c.last_command))
            })
            .collect();
        format!(
            "shard{}:locked={},deferred={},mesh_pending={},clients_in_task={}",
            self.id,
            self.lock.get().map_or("no".to_string(), |t| t.to_string()),
            self.deferred.borrow().len(),
            self.mesh.as_ref().map_or(0, |m| m.pending_count()),
            if in_task.is_empty() {
                "none".to_string()
            } else {
                in_task.join("/")
            },
        )
    }

    /// Serves a request from another shard, synchronously, on this shard's state.
    pub fn serve(&self, request: Request) -> Response {
        // A parked shard's coarse clock may be up to a cron period old: refresh it first.
        self.tick();
        let mut shard = self.shard.borrow_mut();
        match request {
            Request::Exec {
                db,
                client,
                commands,
            } => Response::Frames(
                commands
                    .iter()
                    .map(|(spec, args)| {
                        let spec = &wetask_shards::COMMANDS[*spec];
                        let frame = shard.execute(db, client, spec, args);
                        self.stats.record(spec, frame.is_error());
                        frame
                    })
                    .collect(),
            ),
            Request::TaskFetch {
                client,
                acks,
                queues,
                count,
                lease_ms,
            } => {
                if !acks.is_empty() {
                    let ack = wetask_shards::lookup(b"task.ack").expect("task.ack is in the table");
                    let mut refusal = None;
                    for id in acks {
                        let args = [bytes::Bytes::from_static(b"task.ack"), id];
                        let frame = shard.execute(0, client, ack, &args);
                        self.stats.record(ack, frame.is_error());
                        if frame.is_error() && refusal.is_none() {
                            refusal = Some(frame);
                        }
                    }
                    if let Some(refusal) = refusal {
                        return Response::Refused(refusal);
                    }
                }
                let now = shard.now_ms();
                let fetched = wetask_shards::task_commands::fetch_frames(
                    &mut shard.tasks,
                    &queues,
                    count,
                    lease_ms,
                    client,
                    now,
                );
                Response::Frames(fetched.unwrap_or_else(|error| vec![error]))
            }
            Request::TaskUnlease { client, ids } => {
                let now = shard.now_ms();
                Response::Count(shard.tasks.unlease(&ids, client, now))
            }
            Request::ReleaseLeases { .. }
            | Request::LockExec { .. }
            | Request::ListBlock { .. }
            | Request::ListUnblock { .. }
            | Request::ListUnblockClient { .. }
            | Request::TaskWait { .. }
            | Request::TaskFetchBlocking { .. }
            | Request::TaskUnpark { .. } => {
                unreachable!("handled in handle_request")
            }
            Request::SubmitFallback { fallback } => {
                let now = shard.now_ms();
                Response::Bool(shard.tasks.submit_fallback(fallback, now).is_ok())
            }
            Request::Take { db, key } => Response::Entry(shard.take_entry(db, &key)),
            Request::Lend { db, key } => Response::Entry(shard.lend_entry(db, &key)),
            Request::Restore {
                db,
                key,
                entry,
                written,
            } => {
                shard.restore_entry(db, &key, entry, written);
                Response::Bool(true)
            }
            Request::Publish {
                channel,
                message,
                sharded,
            } => {
                drop(shard);
                Response::Count(self.deliver(&channel, &message, sharded))
            }
            Request::Pubsub(query) => {
                drop(shard);
                Response::Pubsub(crate::pubsub::report(self, &query))
            }
            Request::Watch { db, key } => Response::Count(shard.watch(db, &key) as usize),
            Request::WatchVersion { db, key } => {
                Response::Count(shard.watch_version(db, &key) as usize)
            }
            Request::Unwatch { db, key } => {
                shard.unwatch(db, &key);
                Response::Bool(true)
            }
            Request::Clone { db, key } => Response::Entry(shard.clone_entry(db, &key)),
            Request::Put {
                db,
                key,
                entry,
                replace,
            } => Response::Bool(shard.put_entry(db, &key, entry, replace)),
            Request::Exists { db, keys } => {
                Response::Count(keys.iter().filter(|k| shard.exists(db, k)).count())
            }
            Request::Scan {
                db,
                cursor,
                count,
                filter,
            } => {
                let (next, keys) = shard.scan(db, cursor, count, &filter);
                Response::Scan(next, keys)
            }
            Request::RandomKey { db } => Response::Key(shard.random_key(db)),
            Request::Stats => {
                drop(shard);
                Response::Stats(Box::new(self.report()))
            }
            Request::ResetStats => {
                self.stats.reset();
                Response::Bool(true)
            }
            Request::ClientList => Response::Text(self.clients.borrow().list(unix_ms(), None)),
            Request::ClientKill { filter } => {
                Response::Count(self.clients.borrow().kill(&filter, None))
            }
            Request::Lock | Request::Unlock => unreachable!("lock traffic never reaches serve"),
        }
    }

    /// The receiver loop for messages from one peer shard.
    pub async fn serve_peer(
        self: Rc<Self>,
        peer: usize,
        receiver: glommio::channels::shared_channel::ConnectedReceiver<crate::mesh::Envelope>,
    ) {
        use crate::mesh::Message;
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
            // envelope leave together, now.
            self.tick();
            mesh.flush_to(peer);
        }
        tracing::debug!(shard = self.id, peer, "peer channel closed");
    }
}

/// BUSY for each of a request's commands.
fn busy_frames(count: usize) -> Response {
    Response::Frames(vec![
        wetask_protocol::Frame::static_error(
            crate::script_busy::BUSY
        );
        count
    ])
}
