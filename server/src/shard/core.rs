//! The small core every part of a shard shares: its id, its keyspace shard, its end of the
//! mesh, the process's globals, its clients and counters, the cross-shard lock, and the
//! outbox through which pushes reach a client's transport. The services (`lists`, `tasks`,
//! `pubsub`, `scripts`, `watch`) each own their state and take the core as an argument; the
//! core knows none of them.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Poll, Waker};

use wetask_protocol::{encode_output, Frame};
use wetask_shards::Shard;

use crate::clients::{Clients, ConnState};
use crate::globals::{unix_ms, Globals};
use crate::mesh::{KeyRequest, Mesh, Request, Response, ResponseFuture};
use crate::stats::ShardStats;

use super::lock::LockQueue;

/// A peer's request held while another operation owns the lock: (from, id, token, request).
pub(super) type DeferredRequest = (usize, u64, Option<u64>, Request);

/// Keys sampled by active expiry per loop turn, across this shard's databases.
pub const ACTIVE_EXPIRE_SAMPLES_PER_TURN: usize = 64;

/// Keys a shard evicts per loop turn in the background while over `maxmemory`.
pub const EVICTIONS_PER_TURN_MAX: usize = 256;

pub struct ShardCore {
    pub id: usize,
    pub shard_count: usize,
    /// The loop's and the cron's beats, for the watchdog thread.
    pub beats: Arc<crate::watchdog::Beats>,
    pub shard: RefCell<Shard>,
    pub mesh: Option<Rc<Mesh>>,
    pub globals: Arc<Globals>,
    pub clients: RefCell<Clients>,
    pub stats: ShardStats,
    last_expire_ms: Cell<u64>,
    last_idle_sweep_ms: Cell<u64>,
    /// The `notify-keyspace-events` flags the shard was last given (`sync_settings`).
    notify_flags: Cell<u32>,
    /// The mesh receiver tasks' wakers, by peer (see `ShardCtx::serve_peer`), and when they
    /// were last nudged.
    pub(super) receiver_wakers: RefCell<Vec<Option<Waker>>>,
    last_receiver_nudge_ms: Cell<u64>,
    /// The cross-shard operation holding this shard, if any, and who waits for it
    /// (DESIGN §2.4, `lock`).
    pub(super) lock: LockQueue<DeferredRequest>,
    tokens_issued: Cell<u64>,
    /// Clients with pushes waiting to be sent, for the transport.
    pub push_ready: RefCell<Vec<u64>>,
    /// Wakes the transport when a push arrives (set by the io_uring driver).
    pub push_hook: RefCell<Option<Box<dyn Fn()>>>,
    /// A parked command of a connection here was answered since the transport last looked:
    /// its task is runnable, and the transport lets it run before the next turn.
    pub local_wakes: Cell<bool>,
    /// Answers to requests parked with `Reply::Direct`, by client, for the transport to
    /// write (`swap_direct_answers`).
    pub(super) direct_answers: RefCell<Vec<(u64, Frame)>>,
    /// Pushes that met their connection busy, settled by the transport.
    deferred_pushes: RefCell<Vec<(u64, Frame)>>,
    /// This shard's journal file, when `appendonly yes` (`persist`).
    pub journal: RefCell<Option<crate::persist::Journal>>,
    last_compact_check_ms: Cell<u64>,
    /// The last requested compaction looked at without waiting for the 10 ms pace.
    last_compact_asked: Cell<u64>,
    /// With `appendonly no`: the shard's write count when it last took a snapshot, and a
    /// save point's save to start (by the cron, which can wait).
    pub dump_writes: Cell<u64>,
    pub save_point_due: Cell<bool>,
    /// On a replica: the replay state of the primary's stream (`replication::apply`).
    pub replica: super::replica::ShardReplica,
    /// In consensus mode: this shard's member of its Raft group (`shard::raft`).
    pub raft: RefCell<Option<super::raft::ShardRaft>>,
}

impl ShardCore {
    pub fn new(id: usize, globals: Arc<Globals>, mesh: Option<Rc<Mesh>>) -> Self {
        let shard_count = globals.shard_count;
        ShardCore {
            id,
            shard_count,
            beats: Arc::new(crate::watchdog::Beats::new(unix_ms())),
            shard: RefCell::new({
                let mut shard = Shard::new(id);
                shard.set_shard_count(shard_count);
                if globals.config.cluster_enabled {
                    shard.index_slots();
                }
                // Redis's `tracking-table-max-keys` default, shared out among the shards.
                shard.tracking.set_keys_max(
                    (wetask_shards::keyspace::tracking::TABLE_KEYS_MAX_DEFAULT / shard_count)
                        .max(1),
                );
                shard.tasks = wetask_shards::tasks::Engine::new(globals.config.task_retention_ms)
                    .with_dead_retention(globals.config.task_dead_retention_ms)
                    .with_events_max(globals.config.task_events_max);
                shard
            }),
            mesh,
            globals,
            clients: RefCell::new(Clients::default()),
            stats: ShardStats::default(),
            last_expire_ms: Cell::new(0),
            last_idle_sweep_ms: Cell::new(0),
            notify_flags: Cell::new(0),
            receiver_wakers: RefCell::new(vec![None; shard_count]),
            last_receiver_nudge_ms: Cell::new(0),
            lock: LockQueue::default(),
            // Past any token a journal from an earlier run may remember (see
            // `seed_tokens`), 64 per millisecond of the clock.
            tokens_issued: Cell::new(unix_ms() << 6),
            push_ready: RefCell::new(Vec::new()),
            push_hook: RefCell::new(None),
            local_wakes: Cell::new(false),
            direct_answers: RefCell::new(Vec::new()),
            deferred_pushes: RefCell::new(Vec::new()),
            journal: RefCell::new(None),
            last_compact_check_ms: Cell::new(0),
            last_compact_asked: Cell::new(0),
            dump_writes: Cell::new(0),
            save_point_due: Cell::new(false),
            replica: Default::default(),
            raft: RefCell::new(None),
        }
    }

    /// Every 10 ms, and at once when one was asked for (SAVE rings the doorbells): starts a
    /// compaction of the journal if one is due or was asked for. Never while a cross-shard
    /// operation holds the shard: a closed segment must not end inside a part whose commit
    /// may not come (`wetask_shards::shard::cross_commit`).
    fn compact_if_due(&self, now_ms: u64) {
        // A new request is looked at right away; after that (a failing disk, say) at the
        // 10 ms pace.
        let asked = self
            .globals
            .store
            .get()
            .map(|store| {
                store
                    .compact_epoch
                    .load(std::sync::atomic::Ordering::Acquire)
            })
            .filter(|&epoch| epoch != self.last_compact_asked.get());
        if self.is_locked() || (asked.is_none() && now_ms < self.last_compact_check_ms.get() + 10) {
            return;
        }
        if let Some(epoch) = asked {
            self.last_compact_asked.set(epoch);
        }
        self.last_compact_check_ms.set(now_ms);
        let mut journal = self.journal.borrow_mut();
        if let Some(journal) = journal.as_mut() {
            journal.maybe_compact(&mut self.shard.borrow_mut(), now_ms);
        }
        // `appendonly no`: a save point reached starts a save (from shard 0).
        if let Some(dumps) = self.globals.dumps.get() {
            let writes = self.shard.borrow().writes();
            if dumps.note_changes(self.id, writes, self.dump_writes.get(), now_ms) {
                self.save_point_due.set(true);
            }
        }
    }

    /// In consensus mode, whether this shard only follows its group's leader: it applies
    /// entries and runs nothing of its own (no expiry, no task engine, no parked waiter).
    pub fn raft_follows(&self) -> bool {
        self.globals
            .consensus
            .as_ref()
            .is_some_and(|c| !c.serving(self.id))
    }

    /// Writes what the shard journaled since the last call (one record), and under
    /// `appendfsync always` syncs it: called before anything the shard did can leave it (the
    /// ring's submissions of replies, an envelope to a peer). Cheap when nothing was written.
    /// `when` (see `persist::Commit`): `Durable` before an envelope to a peer, which no ring
    /// holds back; `Now` everywhere else.
    /// On a replica, a commit after the primary's records were applied is `Durable` (no
    /// reply waits on them, so no ring fsync would follow), and it tells the stream's ack
    /// thread what is now written (WAITAOF counts replicas' fsyncs).
    pub fn commit_journal(&self, when: crate::persist::Commit) {
        if let Some(raft) = self.raft.borrow_mut().as_mut() {
            let functions = match self.shard.try_borrow_mut() {
                Ok(mut shard) => {
                    // Publishes group 0's slot map too, once committed (`publish_moves`).
                    raft.drive(&mut shard);
                    shard.take_changed_functions()
                }
                Err(_) => {
                    debug_assert!(false, "a Raft drive while the shard is borrowed");
                    None
                }
            };
            if let Some(set) = functions {
                // The metadata group applied FUNCTION changes (or rebuilt without them).
                crate::function_store::replace_from_log(&self.globals, set);
            }
            return;
        }
        let mut journal = self.journal.borrow_mut();
        let Some(journal) = journal.as_mut() else {
            return;
        };
        let replicated = self.replica.unjournaled.replace(false);
        let when = match replicated {
            true => crate::persist::Commit::Durable,
            false => when,
        };
        match self.shard.try_borrow_mut() {
            Ok(mut shard) => journal.commit(&mut shard, when),
            // Never expected: every caller runs between commands. Should it happen, the
            // record goes with the next commit, and only `always` loses its ordering.
            Err(_) => debug_assert!(false, "journal commit while the shard is borrowed"),
        }
        if replicated {
            self.replica_journaled();
            if crate::failpoint::is_armed("replica-mid-full-sync")
                && self.shard.borrow().holds_partial_sync()
            {
                // The journal now ends inside a full sync (the tests' restart case).
                crate::failpoint::crash_if_armed("replica-mid-full-sync");
            }
        }
    }

    /// Not a replica, holding part of a full sync (its journal ended inside one): once
    /// REPLICAOF NO ONE says to keep it, the shard drops the mark, journaled.
    fn keep_partial_sync(&self, shard: &mut wetask_shards::shard::Shard) {
        let replication = &self.globals.replication;
        if !replication
            .keep_partial
            .load(std::sync::atomic::Ordering::Acquire)
        {
            return;
        }
        if shard.holds_partial_sync() {
            shard.end_partial_sync();
        }
        replication.inboxes[self.id]
            .loading
            .store(false, std::sync::atomic::Ordering::Release);
    }

    /// Updates the coarse clock and, at most once per millisecond however fast the loop
    /// turns, runs one bounded round of active expiry and advances the task engine (due
    /// tasks, expired leases, deadlines, retention). Returns the fallbacks of tasks that died
    /// and the ends of batch children, for the shards they go to.
    pub fn advance_clock(
        &self,
    ) -> (
        Vec<wetask_shards::tasks::Fallback>,
        Vec<wetask_shards::tasks::BatchNote>,
    ) {
        let now = unix_ms();
        let follows_raft = self.raft_follows();
        if follows_raft || self.globals.replication.is_replica() {
            // Another node runs expiry and the task engine: a Raft leader's entries
            // (`shard::raft`) or a primary's records (`replication::apply`) carry their effects.
            if !follows_raft {
                self.apply_replication();
            }
            let mut shard = self.shard.borrow_mut();
            if !follows_raft && !shard.is_replica() {
                shard.set_replica(true);
            }
            shard.set_clock(now);
            drop((shard.tasks.take_fallbacks(), shard.tasks.take_batch_notes()));
            return (Vec::new(), Vec::new());
        }
        let mut shard = self.shard.borrow_mut();
        if shard.is_replica() {
            shard.set_replica(false);
        }
        if self.globals.replication.inboxes[self.id]
            .loading
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            self.keep_partial_sync(&mut shard);
        }
        shard.set_clock(now);
        if now != self.last_expire_ms.get() {
            self.last_expire_ms.set(now);
            shard.active_expire(ACTIVE_EXPIRE_SAMPLES_PER_TURN);
            shard.task_advance();
        }
        (shard.tasks.take_fallbacks(), shard.tasks.take_batch_notes())
    }

    /// The chores of a loop turn that need only the core: eviction, idle clients, the mesh
    /// receivers' safety nudge.
    pub fn housekeeping(&self) {
        self.sync_settings();
        let now = self.shard.borrow().now_ms();
        self.compact_if_due(now);
        self.background_eviction();
        self.close_idle_clients(now);
        self.nudge_receivers(now);
    }

    /// Keeps the shard's copy of `notify-keyspace-events` in step with the configuration.
    pub fn sync_settings(&self) {
        let flags = self.globals.notify_keyspace_events.load(Ordering::Relaxed);
        if flags != self.notify_flags.get() {
            self.notify_flags.set(flags);
            self.shard.borrow_mut().set_notify_flags(flags);
        }
    }

    /// True when `maxmemory` is set and the server's allocations are past it.
    pub fn over_maxmemory(&self) -> bool {
        crate::memory::over_maxmemory()
    }

    /// Refuses a `denyoom` command early, on the connection's shard, when the server is past
    /// `maxmemory` under `noeviction` (Redis's OOM). Under an eviction policy the shard that
    /// runs a write makes room itself (`Shard::make_room`), so each shard gives back memory
    /// in proportion to what it takes in.
    /// Also refuses every write while the journal cannot be written (Redis's MISCONF).
    pub fn make_room(&self, spec: &wetask_shards::CommandSpec) -> Result<(), Frame> {
        use wetask_shards::table::flag;
        if spec.has(flag::WRITE) {
            if let Some(misconf) = self.globals.store.get().and_then(|s| s.misconf()) {
                return Err(Frame::error(misconf));
            }
        }
        if spec.has(flag::DENYOOM)
            && self.globals.eviction_policy() == wetask_shards::keyspace::evict::Policy::NoEviction
            && self.over_maxmemory()
        {
            return Err(Frame::static_error(wetask_shards::errors::OOM));
        }
        Ok(())
    }

    /// Every 100 ms, wakes the mesh receivers to look at their channels again (a lost
    /// wake-up costs at most that; see `ShardCtx::serve_peer`).
    fn nudge_receivers(&self, now_ms: u64) {
        if now_ms < self.last_receiver_nudge_ms.get() + 100 {
            return;
        }
        self.last_receiver_nudge_ms.set(now_ms);
        let wakers: Vec<Waker> = self
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
        let timeout_s = self.globals.idle_timeout_s.load(Ordering::Relaxed);
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
        let policy = self.globals.eviction_policy();
        let on = self.globals.maxmemory() > 0;
        let mut shard = self.shard.borrow_mut();
        if shard.eviction_policy() != policy {
            shard.set_eviction_policy(policy);
        }
        let samples = self.globals.maxmemory_samples.load(Ordering::Relaxed) as usize;
        shard.set_memory_check(
            on.then_some(crate::memory::over_maxmemory as fn() -> bool),
            samples,
        );
        // A replica holds what its primary holds: the primary evicts (and its records say so).
        let replica = self.globals.replication.is_replica();
        if on && !replica && policy != wetask_shards::keyspace::evict::Policy::NoEviction {
            for _ in 0..EVICTIONS_PER_TURN_MAX {
                if !crate::memory::over_maxmemory() || !shard.evict_one(samples) {
                    break;
                }
            }
        }
    }

    pub fn request(&self, to: usize, request: Request) -> ResponseFuture {
        self.request_as(to, None, request)
    }

    /// Sends `request()` to every other shard at once: (shard, its answer's future), in
    /// shard order.
    pub fn request_peers(&self, request: impl Fn() -> Request) -> Vec<(usize, ResponseFuture)> {
        (0..self.shard_count)
            .filter(|&s| s != self.id)
            .map(|s| (s, self.request(s, request())))
            .collect()
    }

    /// Asks every other shard to take up the settings again, and waits for every answer:
    /// whatever a shard did before it answers is in place (a setting copied; its journal
    /// written, which WAIT and WAITAOF read the positions of).
    pub async fn sync_every_shard(&self) {
        for (_, answered) in
            self.request_peers(|| Request::Admin(crate::mesh::AdminRequest::SyncSettings))
        {
            answered.await;
        }
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

    /// Answers a peer's request `id`.
    pub fn respond(&self, to: usize, id: u64, response: Response) {
        self.note_part();
        self.mesh
            .as_ref()
            .expect("a peer's request came over the mesh")
            .respond(to, id, response);
    }

    /// The shard that owns `key` (or a queue or task id, by its slot tag).
    pub fn owner_of(&self, key: &[u8]) -> usize {
        if self.shard_count == 1 {
            self.id
        } else {
            wetask_shards::shard_of(key, self.shard_count)
        }
    }

    // ---- the cross-shard lock ----

    /// True while a cross-shard operation holds this shard's lock.
    pub fn is_locked(&self) -> bool {
        self.lock.holder().is_some()
    }

    /// The token of the operation holding this shard's lock, if any.
    pub fn lock_holder(&self) -> Option<u64> {
        self.lock.holder()
    }

    /// A fresh token for one cross-shard operation (it names this shard as coordinator).
    pub fn new_token(&self) -> u64 {
        let count = self.tokens_issued.get() + 1;
        self.tokens_issued.set(count);
        wetask_shards::shard::cross_commit::token(self.id, count)
    }

    /// After a load: the next tokens pass every one this shard's commits remember, so a
    /// commit from before the restart can never be taken for a new operation's.
    pub fn seed_tokens(&self) {
        let newest = self.shard.borrow().newest_commit_count();
        if newest >= self.tokens_issued.get() {
            self.tokens_issued.set(newest);
        }
    }

    /// The shards of `shards` that journaled a part of the operation `token` (what its
    /// commit names): this one by its own journal, a peer by what it published before
    /// answering (`note_part`).
    pub fn parts_written(&self, token: u64, shards: &[usize]) -> Vec<u64> {
        shards
            .iter()
            .copied()
            .filter(|&s| match s == self.id {
                true => self
                    .shard
                    .try_borrow()
                    .is_ok_and(|shard| shard.wrote_part(token)),
                false => self.globals.cross_parts[s].load(Ordering::Acquire) == token,
            })
            .map(|s| s as u64)
            .collect()
    }

    /// Before answering a peer: publishes that this shard journaled a part of the
    /// operation holding its lock, for the coordinator's commit (`parts_written`).
    fn note_part(&self) {
        let Some(token) = self.lock.holder() else {
            return;
        };
        if self
            .shard
            .try_borrow()
            .is_ok_and(|shard| shard.wrote_part(token))
        {
            self.globals.cross_parts[self.id].store(token, Ordering::Release);
        }
    }

    /// Logs the commit of the cross-shard operation `token` if any of `shards` journaled a
    /// part of it; the caller releases the locks after, and the release's envelopes make
    /// the commit durable first (`commit_journal`).
    pub fn log_cross_commit(&self, token: u64, shards: &[usize]) {
        let parts = self.parts_written(token, shards);
        match self.shard.try_borrow_mut() {
            Ok(mut shard) => shard.log_cross_commit(token, &parts),
            // Never expected: locks are released between commands.
            Err(_) => debug_assert!(false, "a commit while the shard is borrowed"),
        }
        // No peer's unlock (so no envelope) follows when this shard alone holds a part:
        // the turn's commit, which its replies wait for, carries it like any write.
    }

    /// Waits until no cross-shard operation holds this shard's lock (a plain waiter: every
    /// release lets it through before anybody queued takes the lock again).
    pub async fn wait_unlocked(&self) {
        self.wait_for_release(false).await;
    }

    /// True when this shard's lock is held by a script past its busy threshold.
    pub fn held_by_busy_script(&self) -> bool {
        self.lock.holder().is_some_and(|token| {
            crate::lua::busy::holder_is_busy(&self.globals.script_slots, token)
        })
    }

    /// Waits until no cross-shard operation holds this shard's lock, as
    /// [`ShardCore::wait_unlocked`], but gives up (returns true) as soon as the holder is a
    /// busy script: the caller then answers BUSY.
    pub async fn wait_unlocked_or_busy(&self) -> bool {
        self.wait_for_release(true).await
    }

    async fn wait_for_release(&self, or_busy: bool) -> bool {
        /// Leaves the line however the wait ends (its task dropped included).
        struct Ticket<'a>(&'a LockQueue<DeferredRequest>, Option<u64>);
        impl Drop for Ticket<'_> {
            fn drop(&mut self) {
                if let Some(id) = self.1.take() {
                    self.0.leave(id);
                }
            }
        }
        let mut ticket = Ticket(&self.lock, None);
        std::future::poll_fn(|cx| {
            if self.lock.pass(&mut ticket.1, cx.waker()) {
                Poll::Ready(false)
            } else if or_busy && self.held_by_busy_script() {
                Poll::Ready(true)
            } else {
                Poll::Pending
            }
        })
        .await
    }

    /// Takes this shard's lock for `token` in its turn: at once when nobody holds or waits
    /// for it, else when a release hands it over.
    pub async fn lock_local(&self, token: u64) {
        /// Leaves the queue if the task goes before its turn came; one handed the lock
        /// meanwhile lets it go again (the context's resumer serves the queue after it).
        struct Place<'a>(&'a ShardCore, u64, bool);
        impl Drop for Place<'_> {
            fn drop(&mut self) {
                if !self.2 && self.0.lock.withdraw(self.1) {
                    tracing::warn!(token = self.1, "a lock handed over was abandoned");
                    self.0.release_lock(self.1);
                }
            }
        }
        let mut place = Place(self, token, false);
        std::future::poll_fn(|cx| match self.lock.take(token, cx.waker()) {
            true => Poll::Ready(()),
            false => Poll::Pending,
        })
        .await;
        place.2 = true;
        self.shard.borrow_mut().set_cross_tag(Some(token));
    }

    /// Takes the lock for a peer's operation (its Lock request reached the front).
    pub(super) fn grant_lock(&self, token: Option<u64>) {
        self.lock.grant(token);
        self.shard.borrow_mut().set_cross_tag(token);
    }

    /// Lets go of the lock held by `token` and lets the local plain waiters through. The
    /// queue is the shard context's to serve (`ShardCtx::unlock`).
    pub(super) fn release_lock(&self, token: u64) {
        self.lock.release(token);
        self.shard.borrow_mut().set_cross_tag(None);
    }

    /// Wakes the plain waiters (they look again: a busy script holding the lock makes them
    /// answer BUSY).
    pub(super) fn wake_lock_waiters(&self) {
        self.lock.wake_plain();
    }

    // ---- pushes to local clients ----

    /// Queues a push frame (a pub/sub message) for a local client and wakes its transport.
    /// A client past its pubsub output limit is disconnected.
    pub fn push_to(&self, client: u64, frame: &Frame) {
        let Some(conn) = self.clients.borrow().get(client) else {
            return;
        };
        // The client may be running a command right now (a PUBLISH to itself): then its
        // state is borrowed, and the push goes through the shard's queue instead.
        let Ok(mut state) = conn.try_borrow_mut() else {
            self.deferred_pushes
                .borrow_mut()
                .push((client, frame.clone()));
            self.wake_pushes(client);
            return;
        };
        let protocol = state.protocol;
        encode_output(&mut state.pushes, frame, protocol);
        let pending = state.pushes.len() + state.unsent;
        let now = unix_ms();
        if !state.close_requested
            && self
                .globals
                .output_limits
                .exceeded(&mut state, pending, now)
        {
            tracing::warn!(client, "pubsub output buffer limit reached; closing");
            state.pushes.clear();
            crate::clients::shut_down(&mut state);
        }
        self.wake_for_pushes(&mut state, client);
    }

    /// Wakes the transport of a local client whose pushes gained output (its state is
    /// borrowed by the caller: the transport's hook only marks the loop notified).
    pub fn wake_for_pushes(&self, state: &mut ConnState, client: u64) {
        if let Some(waker) = state.push_waker.take() {
            waker.wake();
        }
        self.wake_pushes(client);
    }

    /// Tells the io_uring driver (the only transport with a hook) which client to send to;
    /// the glommio fallback's connections wait on their own waker instead.
    fn wake_pushes(&self, client: u64) {
        if let Some(hook) = self.push_hook.borrow().as_ref() {
            self.push_ready.borrow_mut().push(client);
            hook();
        }
    }

    /// Wakes the io_uring driver's loop (it has work that no completion announces).
    pub fn wake_transport(&self) {
        if let Some(hook) = self.push_hook.borrow().as_ref() {
            hook();
        }
    }

    /// The answers to directly parked requests since the last call (`Reply::Direct`),
    /// swapped into `into` (an empty vector, whose allocation the shard keeps for the next).
    pub fn swap_direct_answers(&self, into: &mut Vec<(u64, Frame)>) {
        std::mem::swap(&mut *self.direct_answers.borrow_mut(), into);
    }

    /// Puts back an answer the transport could not deliver this turn.
    pub fn requeue_direct_answer(&self, client: u64, frame: Frame) {
        self.direct_answers.borrow_mut().push((client, frame));
        self.wake_transport();
    }

    /// Moves pushes that met a busy connection into its pending output (called by the
    /// transports before they send).
    pub fn settle_deferred_pushes(&self) {
        if self.deferred_pushes.borrow().is_empty() {
            return;
        }
        let deferred = std::mem::take(&mut *self.deferred_pushes.borrow_mut());
        for (client, frame) in deferred {
            self.push_to(client, &frame);
        }
    }

    // ---- keyspace requests ----

    /// Serves a keyspace request from another shard (or from a cross-shard operation on
    /// this one), synchronously.
    // Long: one arm per keyspace request, each a call into the shard; split, the match would only be spread out.
    pub fn serve_keys(&self, request: KeyRequest) -> Response {
        let mut shard = self.shard.borrow_mut();
        match request {
            KeyRequest::Exec {
                db,
                client,
                commands,
            } => Response::Frames(
                commands
                    .iter()
                    .map(|(spec, args)| {
                        let spec = &wetask_shards::COMMANDS[spec];
                        // Counted (INFO commandstats) where the command came from.
                        shard.execute(db, client, spec, args)
                    })
                    .collect(),
            ),
            KeyRequest::ExecParsed {
                db,
                client,
                spec,
                request,
            } => {
                let spec = &wetask_shards::COMMANDS[spec];
                let frame = shard.execute_request(db, client, spec, &request, None);
                Response::Frames(vec![frame])
            }
            KeyRequest::Take { db, key, signals } => {
                let entry = shard.take_entry(db, &key);
                shard.blocked.replay(db, &key, &signals);
                Response::Entry(entry)
            }
            KeyRequest::Lend { db, key } => Response::Entry(shard.lend_entry(db, &key)),
            KeyRequest::Restore {
                db,
                key,
                entry,
                written,
                signals,
            } => {
                shard.restore_entry(db, &key, entry, written);
                shard.blocked.replay(db, &key, &signals);
                Response::Done
            }
            KeyRequest::Clone { db, key } => Response::Entry(shard.clone_entry(db, &key)),
            KeyRequest::Put {
                db,
                key,
                entry,
                replace,
            } => Response::Bool(shard.put_entry(db, &key, entry, replace)),
            KeyRequest::Exists { db, keys } => {
                Response::Count(keys.iter().filter(|k| shard.exists(db, k)).count())
            }
            KeyRequest::Scan {
                db,
                cursor,
                count,
                filter,
            } => {
                let (next, keys, visited) = shard.scan_counted(db, cursor, count, &filter);
                Response::Scan(next, keys, visited)
            }
            KeyRequest::RandomKey { db } => Response::Key(shard.random_key(db)),
            KeyRequest::InSlot { db, slot, count } => {
                let (held, keys) = shard.keys_in_slot(db, slot, count);
                Response::InSlot(held, keys)
            }
            KeyRequest::SlotKeyNames { slot } => Response::KeyNames(shard.slot_key_names(slot)),
            KeyRequest::CopyKeys { keys } => Response::SlotKeys(shard.copy_keys(&keys).keys),
            KeyRequest::CopySlotQueues { first, last } => {
                Response::Key(shard.copy_slot_queues(first, last).map(bytes::Bytes::from))
            }
        }
    }
}
