//! The completion-based network path: one io_uring ring per shard, created with
//! SINGLE_ISSUER | DEFER_TASKRUN | TASKRUN_FLAG, hosted in the shard's glommio executor.
//!
//! * A multishot accept on the shard's SO_REUSEPORT listener.
//! * A multishot recv per connection into a provided-buffer ring.
//! * Sends queued per connection and submitted together, with one `io_uring_enter`
//!   (GETEVENTS, non-blocking) per loop turn, skipped when there is nothing to submit and
//!   no deferred task work.
//! * When the ring is dry and no other task of the shard is runnable, the driver sleeps in
//!   one `io_uring_enter` on this ring (submitting what is queued, waiting for a completion
//!   or the next cron tick), not in glommio: a request that arrives costs the wait's return
//!   and nothing else. Other threads wake it through the shard's doorbell (an eventfd read
//!   kept armed on the ring, `doorbell.rs`); the driver reads the mesh channels and runs the
//!   shard's cron itself, so nothing it waits for depends on glommio's own wake-ups
//!   (docs/ARCHITECTURE.md, "The idle path"). DESIGN §7 explains the other choices.
//!
//! This file holds the driver (`Net`: its state, one turn, the completions dispatched, the
//! sleep, the drain at exit); its rooms: `conns` (accept, recv, pump, close), `sends` (the
//! reply path and held replies), `collect` (peers' envelopes, finished batches, parked
//! answers, pushes), `setup` (kernel check, ring flags, file table).

use std::cell::{Cell, RefCell, UnsafeCell};
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use glommio::channels::shared_channel::ConnectedReceiver;
use io_uring::{cqueue, opcode, squeue, types, IoUring};

use wetask_protocol::Output;

use crate::doorbell::Doorbell;
use crate::mesh::Envelope;
use crate::net::bufring::BufRing;
use crate::net::held_sends::{HeldSends, InFlight};
use crate::net::set_nodelay;
use crate::session::{self, Pump, Session, OUTPUT_BUFFER_BYTES_MAX};
use crate::shard::raft::{Hold, Passed};
use crate::shard::{ShardCtx, CRON_PERIOD};

/// Submission queue entries per shard ring.
pub const RING_ENTRIES: u32 = 1024;
/// Completion queue entries: room for a completion per connection several times over.
pub const CQ_ENTRIES: u32 = 16 * 1024;
/// Provided receive buffers per shard and their size.
pub const RECV_BUFFERS: u16 = 256;
pub const RECV_BUFFER_BYTES: usize = 16 * 1024;
const BUFFER_GROUP: u16 = 0;
/// Most completions handled per turn before the driver lets other tasks run.
const COMPLETIONS_PER_TURN_MAX: usize = 1024;
/// How long a draining shard waits for its clients' last replies to leave.
const DRAIN_TIMEOUT: Duration = Duration::from_millis(500);
/// While an envelope waits for room in a peer's channel, the driver sleeps at most this long
/// before trying again (the peer's reads make room without telling us).
const OVERFLOW_RETRY: Duration = Duration::from_millis(1);
/// Slots in the ring's table of registered files: a connection whose slot index fits has its
/// socket registered there, so its receives and sends skip the kernel's per-operation file
/// lookup and reference count (`fget`/`fput`, 1.7% of a shard's CPU under redis-benchmark).
const REGISTERED_FILES: u32 = 16 * 1024;
/// Write buffers above this size are released when they empty.
const KEEP_BUFFER_BYTES_MAX: usize = 1024 * 1024;

/// IORING_ENTER_GETEVENTS: run deferred task work (DEFER_TASKRUN) and post completions.
const IORING_ENTER_GETEVENTS: u32 = 1;

const OP_ACCEPT: u64 = 1;
const OP_RECV: u64 = 2;
const OP_SEND: u64 = 3;
const OP_CANCEL: u64 = 4;
const OP_DOORBELL: u64 = 5;
const OP_FSYNC: u64 = 6;

fn user_data(op: u64, index: u32, generation: u32) -> u64 {
    (op << 56) | (u64::from(generation & 0x00FF_FFFF) << 32) | u64::from(index)
}

fn split_user_data(data: u64) -> (u64, u32, u32) {
    (data >> 56, data as u32, ((data >> 32) & 0x00FF_FFFF) as u32)
}

/// Builds an operation on a connection's socket: its registered slot when it has one,
/// else its fd.
macro_rules! on_socket {
    ($conn:expr, $index:expr, |$target:ident| $build:expr) => {
        if $conn.registered {
            let $target = types::Fixed($index);
            $build
        } else {
            let $target = types::Fd($conn.fd);
            $build
        }
    };
}

// The rooms of the ring's driver (after `on_socket!`, which they use).
mod collect;
mod conns;
mod sends;
mod setup;

pub use setup::check_kernel;
use setup::{build_ring, open_file_limit};

struct Conn {
    fd: RawFd,
    /// The socket sits in the ring's registered-file table at the connection's index.
    registered: bool,
    generation: u32,
    session: Session,
    /// Replies being collected.
    out: Output,
    /// Replies handed to the kernel; never touched while `send_in_flight`.
    sending: Output,
    /// The iovecs and message header of a vectored send of `sending` (used when it references
    /// large payloads); boxed so their addresses stay put while the kernel holds them.
    vectored: Box<Vectored>,
    sent: usize,
    send_in_flight: bool,
    recv_armed: bool,
    /// A cross-shard batch task owns this connection's next replies.
    busy: bool,
    /// The replies in `out` wait for the batch in flight, to leave with its replies in one
    /// send (a prompt batch: `session::Batch::prompt`). Half the pipelines of a 2-shard server paid two
    /// sends before (docs/perf-notes.md, "The pipelined hop").
    holding: bool,
    /// Its replies wait in `Net::unflushed` for the turn's sends.
    flush_queued: bool,
    /// The socket was shut down; the slot frees once no operation is in flight.
    closing: bool,
}

/// Most iovecs handed to one send; a longer output goes out over several sends.
const SEND_IOVECS_MAX: usize = 64;

/// A vectored send's iovecs and header, owned by the connection.
struct Vectored {
    iovecs: Vec<libc::iovec>,
    header: libc::msghdr,
}

impl Default for Vectored {
    fn default() -> Self {
        Vectored {
            iovecs: Vec::with_capacity(SEND_IOVECS_MAX),
            // SAFETY: an all-zero msghdr is a valid empty header.
            header: unsafe { std::mem::zeroed() },
        }
    }
}

/// One peer's mesh channel into this shard, read by the driver.
pub struct Peer {
    id: usize,
    receiver: ConnectedReceiver<Envelope>,
    /// Envelopes read so far; the peer's posts on our doorbell count those sent.
    taken: u64,
}

pub struct Net {
    ctx: Rc<ShardCtx>,
    ring: RefCell<IoUring>,
    inner: RefCell<Inner>,
    /// Slots in the ring's registered-file table (0: none).
    registered_files: u32,
    /// Set by other tasks of the shard (a finished batch, a push to deliver): the driver
    /// turns again instead of sleeping.
    notified: Cell<bool>,
    /// Polls of the shard's other tasks (cross-shard batches, the mesh flusher), counted so
    /// the driver can tell whether one ran while it yielded (`Net::run`).
    polls: Rc<Cell<u64>>,
    /// Where the doorbell's armed read puts the eventfd's count (written by the kernel).
    doorbell_count: Box<UnsafeCell<u64>>,
    peers: RefCell<Vec<Peer>>,
    /// An envelope waits for room in a peer's channel.
    overflow_waiting: Cell<bool>,
    /// When the driver next beats for the watchdog (unix ms).
    next_cron_ms: Cell<u64>,
    /// Replies of cross-shard batches that finished, for the driver to hand out.
    finished: RefCell<Vec<(u32, u32, Output)>>,
    /// `finished`'s other vector: the two trade places each turn, so neither reallocates.
    spare_finished: Cell<Vec<(u32, u32, Output)>>,
    /// Under `appendfsync always`: sends waiting for the journal's fsync (`held_sends`).
    held: RefCell<HeldSends>,
    /// Consensus mode (fixed at start): every reply waits for its turn's Raft barrier.
    consensus: bool,
    /// Connections whose replies were made this turn, to be sent last made, first sent
    /// (`flush_unflushed`).
    unflushed: RefCell<Vec<(u32, u32)>>,
    /// The turn's completions, copied out of the ring (kept to reuse its allocation).
    reaped: Cell<Vec<cqueue::Entry>>,
    /// Direct answers being written (kept to reuse its allocation; see `collect_direct`).
    answered: Cell<Vec<(u64, wetask_protocol::Frame)>>,
}

/// `future`, counting its polls in `polls`.
async fn counted<F: Future>(polls: Rc<Cell<u64>>, future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(|cx| {
        polls.set(polls.get() + 1);
        future.as_mut().poll(cx)
    })
    .await
}

struct Inner {
    bufs: BufRing,
    /// The shared port's listener (one of a SO_REUSEPORT group), then, in cluster mode, this
    /// shard's own port's: a listener's index is its accept's `user_data` index.
    listeners: Vec<OwnedFd>,
    /// Whether each listener has a multishot accept armed.
    accepting: Vec<bool>,
    conns: Vec<Option<Conn>>,
    free: Vec<u32>,
    next_generation: u32,
}

impl Net {
    /// The driver of shard `ctx`, accepting on `listeners` (the shared port's, then the
    /// shard port's in cluster mode) and reading `peers`' channels.
    pub fn new(
        ctx: Rc<ShardCtx>,
        listeners: Vec<OwnedFd>,
        peers: Vec<(usize, ConnectedReceiver<Envelope>)>,
    ) -> io::Result<Rc<Net>> {
        let ring = build_ring(RING_ENTRIES)?;
        let bufs = BufRing::register(&ring, BUFFER_GROUP, RECV_BUFFERS, RECV_BUFFER_BYTES)?;
        // The kernel refuses a table larger than the open-file limit.
        let slots = REGISTERED_FILES.min(open_file_limit());
        let registered_files = match ring.submitter().register_files_sparse(slots) {
            Ok(()) => slots,
            Err(err) => {
                tracing::warn!("no registered-file table ({err}); sockets are used by fd");
                0
            }
        };
        ctx.globals.watchdog.register(ctx.id, ctx.beats.clone());
        let consensus = ctx.globals.consensus.is_some();
        let peers = peers
            .into_iter()
            .map(|(id, receiver)| Peer {
                id,
                receiver,
                taken: 0,
            })
            .collect();
        Ok(Rc::new(Net {
            ctx,
            ring: RefCell::new(ring),
            inner: RefCell::new(Inner {
                bufs,
                accepting: vec![false; listeners.len()],
                listeners,
                conns: Vec::new(),
                free: Vec::new(),
                next_generation: 1,
            }),
            registered_files,
            notified: Cell::new(false),
            polls: Rc::new(Cell::new(0)),
            doorbell_count: Box::new(UnsafeCell::new(0)),
            peers: RefCell::new(peers),
            overflow_waiting: Cell::new(false),
            next_cron_ms: Cell::new(0),
            finished: RefCell::new(Vec::new()),
            spare_finished: Cell::new(Vec::new()),
            held: RefCell::new(HeldSends::default()),
            consensus,
            unflushed: RefCell::new(Vec::new()),
            reaped: Cell::new(Vec::new()),
            answered: Cell::new(Vec::new()),
        }))
    }

    fn doorbell(&self) -> &Doorbell {
        &self.ctx.globals.doorbells[self.ctx.id]
    }

    /// Arms the read that a write to the shard's doorbell completes.
    fn arm_doorbell(&self) {
        let entry = opcode::Read::new(
            types::Fd(self.doorbell().fd()),
            self.doorbell_count.get().cast(),
            8,
        )
        .build()
        .user_data(user_data(OP_DOORBELL, 0, 0));
        self.push(entry);
    }

    fn push(&self, entry: squeue::Entry) {
        let mut ring = self.ring.borrow_mut();
        // SAFETY: every entry's buffers live in `Inner` until its completion arrives.
        while unsafe { ring.submission().push(&entry) }.is_err() {
            // Replies queued this turn leave with this submit: their writes go to the
            // journal first.
            self.ctx.commit_journal(crate::persist::Commit::Now);
            if let Err(err) = ring.submit() {
                tracing::error!("io_uring submit failed: {err}");
            }
        }
    }

    /// Arms a multishot accept on listener `which` (see `Inner::listeners`).
    fn arm_accept(&self, inner: &mut Inner, which: usize) {
        let entry = opcode::AcceptMulti::new(types::Fd(inner.listeners[which].as_raw_fd()))
            .build()
            .user_data(user_data(OP_ACCEPT, which as u32, 0));
        self.push(entry);
        inner.accepting[which] = true;
    }

    fn arm_recv(&self, index: u32, conn: &mut Conn, group: u16) {
        let entry = on_socket!(conn, index, |socket| opcode::RecvMulti::new(socket, group)
            .build())
        .user_data(user_data(OP_RECV, index, conn.generation));
        self.push(entry);
        conn.recv_armed = true;
    }

    /// Submits queued entries and runs deferred completions; returns completions ready.
    fn enter(&self) -> usize {
        let mut ring = self.ring.borrow_mut();
        let pending = ring.submission().len();
        // DEFER_TASKRUN posts completions only when we enter with GETEVENTS, and TASKRUN_FLAG
        // tells us when there is deferred work; with neither that nor entries to submit, an
        // enter would be a wasted syscall.
        // A full CQ parks completions on the kernel's overflow list (CQ_OVERFLOW), and only
        // an enter with GETEVENTS moves them back: without one they would wait for the next
        // unrelated event, or for ever.
        let flagged = {
            let submission = ring.submission();
            submission.taskrun() || submission.cq_overflow()
        };
        if pending > 0 || flagged {
            let enters = &self.ctx.stats.ring_enters;
            enters.set(enters.get() + 1);
            // SAFETY: a plain io_uring_enter with no argument struct.
            let result = unsafe {
                ring.submitter().enter::<libc::sigset_t>(
                    pending as u32,
                    0,
                    IORING_ENTER_GETEVENTS,
                    None,
                )
            };
            if let Err(err) = result {
                if err.raw_os_error() != Some(libc::EINTR)
                    && err.raw_os_error() != Some(libc::EBUSY)
                {
                    tracing::error!("io_uring_enter failed: {err}");
                }
            }
        }
        let ready = ring.completion().len();
        ready
    }

    /// One turn: read the mesh, submit, reap every completion, run what it enabled. Returns
    /// work done.
    fn turn(self: &Rc<Self>) -> usize {
        let finished = self.serve_mesh()
            + self.collect_finished()
            + self.collect_direct()
            + self.collect_pushes();
        self.flush_unflushed();
        // The turn's replies leave with this enter: their writes go to the journal first
        // (under `appendfsync always` the replies wait for the ring's fsync: held_sends).
        self.ctx.commit_journal(crate::persist::Commit::Now);
        self.release_held(true);
        self.enter();
        let mut completions = self.reaped.take();
        completions.extend(
            self.ring
                .borrow_mut()
                .completion()
                .take(COMPLETIONS_PER_TURN_MAX),
        );
        for completion in &completions {
            self.complete(completion);
        }
        let reaped = completions.len();
        completions.clear();
        self.reaped.set(completions);
        reaped + finished
    }

    fn complete(self: &Rc<Self>, completion: &cqueue::Entry) {
        let (op, index, generation) = split_user_data(completion.user_data());
        let result = completion.result();
        let flags = completion.flags();
        match op {
            OP_ACCEPT => self.on_accept(index as usize, result, flags),
            OP_RECV => self.on_recv(index, generation, result, flags),
            OP_SEND => self.on_send(index, generation, result),
            OP_CANCEL => {}
            OP_FSYNC => self.on_fsync(result),
            OP_DOORBELL => {
                if result < 0 && result != -libc::ECANCELED {
                    tracing::warn!(
                        "doorbell read failed: {}",
                        io::Error::from_raw_os_error(-result)
                    );
                }
                self.arm_doorbell();
            }
            _ => tracing::warn!("unknown completion {:#x}", completion.user_data()),
        }
    }

    /// Gives the shard's other tasks their turn. Cross-shard batch tasks share this loop's
    /// task queue (glommio spawns into the running queue), and `yield_if_needed` only
    /// yields to *other* queues, so with several shards the loop yields within its queue
    /// after every busy turn; otherwise a ring that never goes dry starves those tasks
    /// (docs/perf-notes.md). With one shard the only such tasks are blocked commands and
    /// scripts, which run when the ring goes dry or at glommio's preemption tick (`NET_LATENCY`),
    /// unless one was just answered: a blocked TASK.FETCH handed a task, a BLPOP its
    /// element. Then it runs now, not up to a tick later (that tick was most of a job's
    /// submit-to-worker latency on one shard under load).
    async fn let_others_run(&self) {
        if self.ctx.shard_count > 1 || self.ctx.local_wakes.replace(false) {
            futures_lite::future::yield_now().await;
        } else {
            glommio::yield_if_needed().await;
        }
    }

    /// Every `CRON_PERIOD`: beat for the watchdog (the cron's chores run every turn).
    /// `now_ms` is the turn's clock, read once by `tick`.
    fn cron_if_due(&self, now_ms: u64) {
        if now_ms < self.next_cron_ms.get() {
            return;
        }
        self.next_cron_ms
            .set(now_ms + CRON_PERIOD.as_millis() as u64);
        self.ctx.beats.cron.store(now_ms, Ordering::Relaxed);
    }

    /// Sleeps in the ring, submitting what is queued, until a completion (the doorbell's
    /// read among them) or the next cron tick; returns at once if a peer has sent
    /// something (announced first, then checked: see `doorbell.rs`).
    fn sleep(&self) {
        let bell = self.doorbell();
        bell.announce_sleep();
        if self.mesh_waiting() || self.ctx.globals.shutting_down() || self.ctx.offload.has_ready() {
            bell.awake();
            return;
        }
        // For the watchdog: asleep where a completion or the doorbell wakes it.
        self.ctx.beats.turn.store(0, Ordering::Relaxed);
        let stats = &self.ctx.stats;
        stats.ring_sleeps.set(stats.ring_sleeps.get() + 1);
        stats.ring_enters.set(stats.ring_enters.get() + 1);
        let now_ms = self.ctx.shard.borrow().now_ms();
        let until_cron = self.next_cron_ms.get().saturating_sub(now_ms);
        // Capped: a wall clock set back must not stretch the sleep.
        let mut timeout = Duration::from_millis(until_cron).min(CRON_PERIOD);
        if self.overflow_waiting.get() {
            timeout = timeout.min(OVERFLOW_RETRY);
        }
        if let Some(raft) = self.ctx.raft.borrow().as_ref().filter(|_| self.consensus) {
            // Raft's timer ticks in the loop, which also proposes what gathered
            // (`shard::raft`).
            timeout = timeout.min(crate::consensus::TICK);
            if let Some(soon) = raft.wake_within() {
                timeout = timeout.min(soon);
            }
        }
        // Nothing waits in memory while the shard sleeps (held sends wait for an fsync
        // submitted with this enter, whose completion wakes it, or gather for the next one
        // until the timeout below).
        self.flush_unflushed();
        self.ctx.commit_journal(crate::persist::Commit::Now);
        self.release_held(true);
        if let Some(left) = self.held.borrow().gather_for() {
            timeout = timeout.min(left);
        }
        let timespec = types::Timespec::from(timeout);
        let args = types::SubmitArgs::new().timespec(&timespec);
        let result = self
            .ring
            .borrow_mut()
            .submitter()
            .submit_with_args(1, &args);
        if let Err(err) = result {
            if ![libc::ETIME, libc::EINTR, libc::EBUSY].contains(&err.raw_os_error().unwrap_or(0)) {
                tracing::error!("io_uring_enter (wait) failed: {err}");
            }
        }
        bell.awake();
    }

    /// The shard's network loop; returns once shutdown has drained the clients.
    pub async fn run(self: Rc<Self>) {
        // Spawned from here, the mesh flusher shares this loop's task queue and so runs
        // behind the connection tasks whose cross-shard commands it sends.
        if let Some(mesh) = &self.ctx.mesh {
            glommio::spawn_local(counted(self.polls.clone(), mesh.clone().run_flusher())).detach();
        }
        let queue_server = self.ctx.clone().serve_lock_queue();
        glommio::spawn_local(counted(self.polls.clone(), queue_server)).detach();
        if self.consensus && self.ctx.shard_count > 1 {
            // Moves slots between the groups when group 0's map says so (`RAFT MOVESLOTS`).
            let mover = crate::shard::slot_mover::run(self.ctx.clone());
            glommio::spawn_local(counted(self.polls.clone(), mover)).detach();
        }
        if let Some(journal) = self.ctx.journal.borrow_mut().as_mut() {
            journal.set_ring_sync(true);
        }
        {
            let mut inner = self.inner.borrow_mut();
            for which in 0..inner.listeners.len() {
                self.arm_accept(&mut inner, which);
            }
        }
        self.arm_doorbell();
        let net = self.clone();
        *self.ctx.push_hook.borrow_mut() = Some(Box::new(move || net.notified.set(true)));
        // For the watchdog: this task's waker, which it may wake from its own thread.
        let waker = std::future::poll_fn(|cx| Poll::Ready(cx.waker().clone())).await;
        *self.ctx.beats.loop_waker.lock().expect("waker") = Some(waker);
        loop {
            if self.ctx.globals.shutting_down() {
                self.drain().await;
                return;
            }
            self.ctx.tick();
            // For the watchdog: this loop turned now (a loop that has work and does not
            // turn is roused; see `watchdog`).
            let now = self.ctx.shard.borrow().now_ms();
            self.ctx.beats.turn.store(now, Ordering::Relaxed);
            self.cron_if_due(now);
            if self.turn() > 0 || self.notified.replace(false) {
                // A SUBMIT (or a push) this turn may have what a command parked here waits
                // for: hand it over now rather than at the next turn's tick.
                self.ctx.task_waits.serve_parked(&self.ctx.core);
                self.ctx.lists.serve(&self.ctx.core);
                self.let_others_run().await;
                continue;
            }
            // Dry. Sleep only if no other task of the shard is runnable: every one of them
            // lives in this task queue, which glommio runs first in, first out, so after one
            // yield every task woken before it has run; if none ran, none is runnable, and
            // only this ring (or the doorbell) can make one so.
            let polls = self.polls.get();
            futures_lite::future::yield_now().await;
            if self.polls.get() != polls || self.notified.get() {
                continue;
            }
            self.sleep();
        }
    }

    /// Stops accepting, lets queued replies go, and closes every connection.
    async fn drain(self: &Rc<Self>) {
        {
            let mut inner = self.inner.borrow_mut();
            for which in 0..inner.accepting.len() {
                if inner.accepting[which] {
                    self.push(
                        opcode::AsyncCancel::new(user_data(OP_ACCEPT, which as u32, 0))
                            .build()
                            .user_data(user_data(OP_CANCEL, 0, 0)),
                    );
                }
            }
            for (index, slot) in inner.conns.iter_mut().enumerate() {
                if let Some(conn) = slot {
                    conn.session.state.borrow_mut().close_requested = true;
                    self.flush(index as u32, conn);
                    self.close_if_done(conn);
                }
            }
        }
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        while Instant::now() < deadline {
            self.turn();
            if self.inner.borrow().conns.iter().all(Option::is_none) {
                break;
            }
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
    }
}

fn live_conn(conns: &mut [Option<Conn>], index: u32, generation: u32) -> Option<&mut Conn> {
    conns
        .get_mut(index as usize)?
        .as_mut()
        .filter(|c| c.generation == generation)
}
