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

/// Checks that this kernel has what the ring needs; the error says what is missing.
pub fn check_kernel() -> Result<(), String> {
    let ring = build_ring(8).map_err(|e| {
        format!(
            "io_uring with SINGLE_ISSUER|DEFER_TASKRUN is unavailable ({e}); Linux 6.1+ is needed"
        )
    })?;
    let mut probe = io_uring::Probe::new();
    ring.submitter()
        .register_probe(&mut probe)
        .map_err(|e| format!("io_uring probe failed: {e}"))?;
    let mut missing = Vec::new();
    for (code, name) in [
        (opcode::AcceptMulti::CODE, "multishot ACCEPT"),
        (opcode::RecvMulti::CODE, "multishot RECV"),
        (opcode::Send::CODE, "SEND"),
        (opcode::AsyncCancel::CODE, "ASYNC_CANCEL"),
    ] {
        if !probe.is_supported(code) {
            missing.push(name);
        }
    }
    if !missing.is_empty() {
        return Err(format!("io_uring lacks: {}", missing.join(", ")));
    }
    BufRing::register(&ring, BUFFER_GROUP, 2, 64)
        .map(drop)
        .map_err(|e| format!("provided buffer rings are unavailable ({e}); Linux 5.19+ is needed"))
}

fn build_ring(entries: u32) -> io::Result<IoUring> {
    IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_taskrun_flag()
        .setup_cqsize(CQ_ENTRIES.max(entries * 2))
        .build(entries)
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
    /// Under `appendfsync always`: sends waiting for the journal's fsync (`held_sends`).
    held: RefCell<HeldSends>,
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
    listener: OwnedFd,
    accepting: bool,
    conns: Vec<Option<Conn>>,
    free: Vec<u32>,
    next_generation: u32,
}

impl Net {
    /// The driver of shard `ctx`, accepting on `listener` and reading `peers`' channels.
    pub fn new(
        ctx: Rc<ShardCtx>,
        listener: OwnedFd,
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
                listener,
                accepting: false,
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
            held: RefCell::new(HeldSends::default()),
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

    fn arm_accept(&self, inner: &mut Inner) {
        let entry = opcode::AcceptMulti::new(types::Fd(inner.listener.as_raw_fd()))
            .build()
            .user_data(user_data(OP_ACCEPT, 0, 0));
        self.push(entry);
        inner.accepting = true;
    }

    fn arm_recv(&self, index: u32, conn: &mut Conn, group: u16) {
        let entry = on_socket!(conn, index, |socket| opcode::RecvMulti::new(socket, group)
            .build())
        .user_data(user_data(OP_RECV, index, conn.generation));
        self.push(entry);
        conn.recv_armed = true;
    }

    /// Hands queued replies to the kernel if no send is in flight.
    fn flush(&self, index: u32, conn: &mut Conn) {
        if conn.send_in_flight || conn.out.is_empty() {
            return;
        }
        std::mem::swap(&mut conn.out, &mut conn.sending);
        conn.sent = 0;
        conn.session.state.borrow_mut().unsent = conn.sending.len();
        self.submit_send(index, conn, true);
    }

    /// Submits the rest of `conn.sending`. `fresh`: it may reveal writes of this turn, so
    /// under `always` it waits for the journal's fsync; a send's continuation went out in
    /// part already and needs no wait.
    fn submit_send(&self, index: u32, conn: &mut Conn, fresh: bool) {
        let entry = if conn.sending.has_spliced() {
            // Large payloads are referenced, not copied: send everything as one iovec list.
            let vectored = &mut *conn.vectored;
            vectored.iovecs.clear();
            conn.sending.for_each_slice(conn.sent, |piece| {
                vectored.iovecs.push(libc::iovec {
                    iov_base: piece.as_ptr() as *mut libc::c_void,
                    iov_len: piece.len(),
                });
                vectored.iovecs.len() < SEND_IOVECS_MAX
            });
            vectored.header.msg_iov = vectored.iovecs.as_mut_ptr();
            vectored.header.msg_iovlen = vectored.iovecs.len();
            on_socket!(conn, index, |socket| opcode::SendMsg::new(
                socket,
                &vectored.header
            )
            .flags(libc::MSG_NOSIGNAL as u32)
            .build())
        } else {
            let rest = &conn.sending[conn.sent..];
            on_socket!(conn, index, |socket| opcode::Send::new(
                socket,
                rest.as_ptr(),
                rest.len() as u32
            )
            .flags(libc::MSG_NOSIGNAL)
            .build())
        };
        let entry = entry.user_data(user_data(OP_SEND, index, conn.generation));
        if fresh && self.ring_syncs() {
            self.held.borrow_mut().held.push(entry);
        } else {
            self.push(entry);
        }
        conn.send_in_flight = true;
    }

    /// Under `appendfsync always`, whether sends wait for the ring's fsync.
    fn ring_syncs(&self) -> bool {
        self.ctx
            .journal
            .borrow()
            .as_ref()
            .is_some_and(|j| j.ring_syncs())
    }

    /// Moves held sends on (see `held_sends`): `committed` at a commit point, when what was
    /// held has its records written. With no fsync in flight, the waiting sends get one, or
    /// go at once if everything written is already on disk.
    fn release_held(&self, committed: bool) {
        let mut held = self.held.borrow_mut();
        if held.is_idle() {
            return;
        }
        if committed {
            held.committed();
        }
        if held.in_flight.is_some() || held.next.is_empty() || held.gather_for().is_some() {
            return;
        }
        held.released_at = None;
        let sends = std::mem::take(&mut held.next);
        let target = self
            .ctx
            .journal
            .borrow()
            .as_ref()
            .and_then(|j| j.sync_target());
        match target {
            None => {
                drop(held);
                for entry in sends {
                    self.push(entry);
                }
            }
            Some((file, covers)) => {
                let entry = opcode::Fsync::new(types::Fd(file.file.as_raw_fd()))
                    .flags(types::FsyncFlags::DATASYNC)
                    .build()
                    .user_data(user_data(OP_FSYNC, 0, 0));
                let stats = &self.ctx.stats;
                stats
                    .held_sends
                    .set(stats.held_sends.get() + sends.len() as u64);
                held.in_flight = Some(InFlight {
                    _file: file,
                    covers,
                    sends,
                    submitted: Instant::now(),
                });
                drop(held);
                self.push(entry);
            }
        }
    }

    /// The journal's fsync completed: its sends go, and the next group gets its fsync.
    fn on_fsync(&self, result: i32) {
        let Some(done) = self.held.borrow_mut().in_flight.take() else {
            return;
        };
        if let Some(journal) = self.ctx.journal.borrow_mut().as_mut() {
            if result < 0 {
                journal.sync_failed(io::Error::from_raw_os_error(-result));
            }
            journal.made_durable(done.covers);
        }
        let stats = &self.ctx.stats;
        stats.ring_fsyncs.set(stats.ring_fsyncs.get() + 1);
        stats
            .ring_fsync_us
            .set(stats.ring_fsync_us.get() + done.submitted.elapsed().as_micros() as u64);
        {
            let mut held = self.held.borrow_mut();
            held.last_group = done.sends.len();
            held.released_at = Some(Instant::now());
        }
        for entry in done.sends {
            self.push(entry);
        }
        self.release_held(false);
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
            OP_ACCEPT => self.on_accept(result, flags),
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

    fn on_accept(self: &Rc<Self>, result: i32, flags: u32) {
        let mut inner = self.inner.borrow_mut();
        if !cqueue::more(flags) {
            inner.accepting = false;
            if !self.ctx.globals.shutting_down() {
                self.arm_accept(&mut inner);
            }
        }
        if result < 0 {
            if result != -libc::ECANCELED {
                tracing::warn!("accept failed: {}", io::Error::from_raw_os_error(-result));
            }
            return;
        }
        let fd = result;
        if self.ctx.globals.shutting_down() || !self.ctx.globals.admit_client() {
            let reply = b"-ERR max number of clients reached\r\n";
            // SAFETY: a best-effort send and close of the fd we were just handed.
            unsafe {
                libc::send(
                    fd,
                    reply.as_ptr().cast(),
                    reply.len(),
                    libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                );
                libc::close(fd);
            }
            return;
        }
        set_nodelay(fd);
        let ctx = &self.ctx;
        let state = super::new_connection(ctx, fd);
        let generation = inner.next_generation;
        inner.next_generation = inner.next_generation.wrapping_add(1) & 0x00FF_FFFF;
        let mut conn = Conn {
            fd,
            registered: false,
            generation,
            session: Session::new(state, ctx.globals.config.proto_max_bulk_len),
            out: Output::default(),
            sending: Output::default(),
            vectored: Box::default(),
            sent: 0,
            send_in_flight: false,
            recv_armed: false,
            busy: false,
            flush_queued: false,
            closing: false,
        };
        let index = match inner.free.pop() {
            Some(index) => index,
            None => {
                inner.conns.push(None);
                (inner.conns.len() - 1) as u32
            }
        };
        conn.session.state.borrow_mut().slot = (index, generation);
        conn.session.park_directly();
        conn.registered = self.register_socket(index, fd);
        let group = inner.bufs.group();
        self.arm_recv(index, &mut conn, group);
        inner.conns[index as usize] = Some(conn);
    }

    fn on_recv(self: &Rc<Self>, index: u32, generation: u32, result: i32, flags: u32) {
        let mut inner = self.inner.borrow_mut();
        let inner = &mut *inner;
        let Some(conn) = live_conn(&mut inner.conns, index, generation) else {
            if let Some(id) = cqueue::buffer_select(flags) {
                inner.bufs.recycle(id);
            }
            return;
        };
        if !cqueue::more(flags) {
            conn.recv_armed = false;
            // Rare (a multishot receive ends on no buffer, an overflow, or the peer's end):
            // logged for the stall under load that docs/ARCHITECTURE.md describes.
            tracing::debug!(
                client = conn.session.state.borrow().id,
                result,
                flags,
                closing = conn.closing,
                "multishot receive ended"
            );
        }
        if result > 0 {
            let id = cqueue::buffer_select(flags).expect("recv with a provided buffer");
            conn.session
                .input
                .extend_from_slice(inner.bufs.bytes(id, result as usize));
            inner.bufs.recycle(id);
            self.ctx.stats.received(result as u64);
            if !conn.recv_armed && !conn.closing {
                self.arm_recv(index, conn, inner.bufs.group());
            }
            if conn.session.input_overflowed() {
                tracing::warn!(
                    client = conn.session.state.borrow().id,
                    "query buffer limit reached; closing"
                );
                self.begin_close(conn);
            } else {
                self.pump(index, conn);
            }
        } else if result == -libc::ENOBUFS {
            if !conn.recv_armed && !conn.closing {
                self.arm_recv(index, conn, inner.bufs.group());
            }
        } else {
            // End of file, or an error: the client is gone.
            tracing::debug!(result, more = cqueue::more(flags), "recv ended");
            self.begin_close(conn);
        }
        self.maybe_free(inner, index, generation);
    }

    fn on_send(self: &Rc<Self>, index: u32, generation: u32, result: i32) {
        let mut inner = self.inner.borrow_mut();
        let inner = &mut *inner;
        let Some(conn) = live_conn(&mut inner.conns, index, generation) else {
            return;
        };
        conn.send_in_flight = false;
        if result < 0 {
            conn.sending.clear();
            conn.out.clear();
            self.begin_close(conn);
        } else {
            self.ctx.stats.sent(result as u64);
            conn.sent += result as usize;
            conn.session.state.borrow_mut().unsent =
                conn.sending.len() - conn.sent.min(conn.sending.len());
            if conn.sent < conn.sending.len() {
                self.submit_send(index, conn, false);
            } else {
                conn.sending.clear();
                if conn.sending.capacity() > KEEP_BUFFER_BYTES_MAX {
                    conn.sending = Output::default();
                }
                self.flush(index, conn);
                self.close_if_done(conn);
            }
        }
        self.maybe_free(inner, index, generation);
    }

    /// Runs the connection's buffered commands; spawns a task for cross-shard batches.
    fn pump(self: &Rc<Self>, index: u32, conn: &mut Conn) {
        if conn.busy || conn.closing {
            return;
        }
        conn.session.state.borrow_mut().last_active_ms = self.ctx.shard.borrow().now_ms();
        match conn.session.pump(&self.ctx, &mut conn.out) {
            Pump::Idle | Pump::Close => {}
            // Its answer comes through `collect_direct`.
            Pump::Parked => conn.busy = true,
            Pump::Batch(batch) => {
                conn.busy = true;
                let net = self.clone();
                let (state, generation) = (conn.session.state.clone(), conn.generation);
                let polls = self.polls.clone();
                glommio::spawn_local(counted(polls, async move {
                    let out = session::run_batch(net.ctx.clone(), state, batch).await;
                    net.finish_batch(index, generation, out);
                }))
                .detach();
            }
        }
        if conn.out.len() > OUTPUT_BUFFER_BYTES_MAX {
            tracing::warn!(
                client = conn.session.state.borrow().id,
                "output buffer limit reached; closing"
            );
            conn.out.clear();
            self.begin_close(conn);
            return;
        }
        if !conn.out.is_empty() && !conn.send_in_flight {
            if !conn.flush_queued {
                conn.flush_queued = true;
                self.unflushed.borrow_mut().push((index, conn.generation));
            }
            return;
        }
        self.close_if_done(conn);
    }

    /// Sends the replies the turn made, the connection that got its last reply first (as
    /// Redis writes its pending clients): a SUBMIT's hand-off to a parked worker is made
    /// after the SUBMIT's own reply, and the worker, whose wait is what a job's latency
    /// measures, should not queue behind the producer.
    fn flush_unflushed(&self) {
        if self.unflushed.borrow().is_empty() {
            return;
        }
        let unflushed = std::mem::take(&mut *self.unflushed.borrow_mut());
        let mut inner = self.inner.borrow_mut();
        for &(index, generation) in unflushed.iter().rev() {
            let Some(conn) = live_conn(&mut inner.conns, index, generation) else {
                continue;
            };
            conn.flush_queued = false;
            self.flush(index, conn);
            self.close_if_done(conn);
        }
        // Recycle the vector's allocation.
        let mut slot = self.unflushed.borrow_mut();
        if slot.is_empty() {
            let mut unflushed = unflushed;
            unflushed.clear();
            *slot = unflushed;
        }
    }

    /// Queues a finished batch's replies for the driver. Never touches `inner` itself: the
    /// task may run while the driver holds it (glommio can run a woken task right away).
    fn finish_batch(&self, index: u32, generation: u32, out: Output) {
        self.finished.borrow_mut().push((index, generation, out));
        self.notified.set(true);
    }

    /// Serves the envelopes peers have sent (those their posts on our doorbell count), and
    /// moves on what waits for room in peers' channels. Returns envelopes served.
    fn serve_mesh(&self) -> usize {
        let Some(mesh) = self.ctx.mesh.as_ref() else {
            return 0;
        };
        let mut served = 0;
        let count = self.peers.borrow().len();
        for slot in 0..count {
            loop {
                let (peer, envelope) = {
                    let mut peers = self.peers.borrow_mut();
                    let peer = &mut peers[slot];
                    let posted = self.doorbell().posted(peer.id);
                    if peer.taken >= posted {
                        break;
                    }
                    let mut cx = Context::from_waker(Waker::noop());
                    match peer.receiver.poll_next(&mut cx) {
                        Poll::Ready(Some(envelope)) => {
                            peer.taken += 1;
                            (peer.id, envelope)
                        }
                        // Posted means in the channel; a channel that has none has closed
                        // (shutdown): nothing more will come.
                        _ => {
                            peer.taken = posted;
                            break;
                        }
                    }
                };
                self.ctx.serve_envelope(peer, envelope);
                served += 1;
            }
        }
        self.overflow_waiting.set(mesh.retry_overflow());
        served
    }

    /// A peer has sent an envelope this driver has not read.
    fn mesh_waiting(&self) -> bool {
        let bell = self.doorbell();
        self.peers
            .borrow()
            .iter()
            .any(|peer| peer.taken < bell.posted(peer.id))
    }

    /// Hands finished batches' replies to their connections and pumps what arrived since.
    fn collect_finished(self: &Rc<Self>) -> usize {
        let finished = std::mem::take(&mut *self.finished.borrow_mut());
        let count = finished.len();
        let mut inner = self.inner.borrow_mut();
        let inner = &mut *inner;
        for (index, generation, out) in finished {
            let Some(conn) = live_conn(&mut inner.conns, index, generation) else {
                continue;
            };
            conn.busy = false;
            conn.out.append(out);
            self.pump(index, conn);
            self.maybe_free(inner, index, generation);
        }
        count
    }

    /// Writes the answers of commands that waited parked with no task (`Reply::Direct`)
    /// into their connections' output, and runs what those connections sent meanwhile.
    fn collect_direct(self: &Rc<Self>) -> usize {
        let mut answers = self.answered.take();
        self.ctx.swap_direct_answers(&mut answers);
        let count = answers.len();
        if count == 0 {
            self.answered.set(answers);
            return 0;
        }
        let now = self.ctx.shard.borrow().now_ms();
        let mut inner = self.inner.borrow_mut();
        let inner = &mut *inner;
        for (client, frame) in answers.drain(..) {
            let Some(state) = self.ctx.clients.borrow().get(client) else {
                continue;
            };
            let Ok(mut state) = state.try_borrow_mut() else {
                // Borrowed right now (never seen): deliver it next turn.
                self.ctx.requeue_direct_answer(client, frame);
                continue;
            };
            let (index, generation) = state.slot;
            let Some(conn) = live_conn(&mut inner.conns, index, generation) else {
                continue;
            };
            conn.busy = false;
            state.in_batch = false;
            state.last_active_ms = now;
            state.encode_reply(&mut conn.out, &frame);
            drop(state);
            self.pump(index, conn);
            self.maybe_free(inner, index, generation);
        }
        self.answered.set(answers);
        count
    }

    /// Moves published messages into their subscribers' output and sends them; a subscriber
    /// whose output passes the pub/sub limit is disconnected (see `pubsub`).
    fn collect_pushes(self: &Rc<Self>) -> usize {
        self.ctx.settle_deferred_pushes();
        if self.ctx.push_ready.borrow().is_empty() {
            return 0;
        }
        let ready = std::mem::take(&mut *self.ctx.push_ready.borrow_mut());
        if ready.is_empty() {
            return 0;
        }
        let mut inner = self.inner.borrow_mut();
        for &client in &ready {
            let Some(state) = self.ctx.clients.borrow().get(client) else {
                continue;
            };
            let Ok(mut state) = state.try_borrow_mut() else {
                // Busy right now: look again next turn.
                self.ctx.push_ready.borrow_mut().push(client);
                continue;
            };
            let (index, generation) = state.slot;
            let Some(conn) = live_conn(&mut inner.conns, index, generation) else {
                continue;
            };
            let pushes = std::mem::take(&mut state.pushes);
            if pushes.is_empty() {
                continue;
            }
            conn.out.append(pushes);
            let pending = conn.out.len() + state.unsent;
            let now = self.ctx.shard.borrow().now_ms();
            if self
                .ctx
                .globals
                .output_limits
                .exceeded(&mut state, pending, now)
            {
                tracing::warn!(client, "pubsub output buffer limit reached; closing");
                conn.out.clear();
                crate::clients::shut_down(&mut state);
                drop(state);
                self.begin_close(conn);
                continue;
            }
            drop(state);
            self.flush(index, conn);
        }
        ready.len()
    }

    /// Starts closing once a close was asked for and every reply has left.
    fn close_if_done(&self, conn: &mut Conn) {
        let requested = conn.session.state.borrow().close_requested;
        if requested && !conn.busy && !conn.send_in_flight && conn.out.is_empty() {
            self.begin_close(conn);
        }
    }

    fn begin_close(&self, conn: &mut Conn) {
        if conn.closing {
            return;
        }
        tracing::debug!(
            client = conn.session.state.borrow().id,
            requested = conn.session.state.borrow().close_requested,
            "closing connection"
        );
        conn.closing = true;
        conn.session.state.borrow_mut().close_requested = true;
        if conn.busy {
            // A blocked TASK.FETCH holds the connection; let it go so the slot can free.
            self.ctx.connection_closing(&conn.session.state.borrow());
        }
        // Shutting the socket down ends the multishot recv (and any send) with a completion.
        // SAFETY: shutdown on our own live socket.
        unsafe { libc::shutdown(conn.fd, libc::SHUT_RDWR) };
    }

    /// Frees a closing connection's slot once the kernel holds none of its buffers.
    fn maybe_free(&self, inner: &mut Inner, index: u32, generation: u32) {
        let Some(conn) = live_conn(&mut inner.conns, index, generation) else {
            return;
        };
        if !(conn.closing && !conn.recv_armed && !conn.send_in_flight && !conn.busy) {
            return;
        }
        let conn = inner.conns[index as usize].take().expect("live");
        self.ctx.connection_closed(&conn.session.state.borrow());
        self.ctx.globals.release_client();
        if conn.registered {
            // The table holds a reference to the socket: drop it, or close would not close.
            self.register_socket(index, -1);
        }
        // SAFETY: closing our own fd; no operation on it is in flight any more.
        unsafe { libc::close(conn.fd) };
        inner.free.push(index);
    }

    /// Puts `fd` (or -1: nothing) into the registered-file table at `index`; false if it
    /// has no such slot.
    fn register_socket(&self, index: u32, fd: RawFd) -> bool {
        if index >= self.registered_files {
            return false;
        }
        match self
            .ring
            .borrow()
            .submitter()
            .register_files_update(index, &[fd])
        {
            Ok(_) => true,
            Err(err) => {
                tracing::warn!("cannot register a socket with the ring: {err}");
                false
            }
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
        if self.mesh_waiting() || self.ctx.globals.shutting_down() {
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
        if let Some(journal) = self.ctx.journal.borrow_mut().as_mut() {
            journal.set_ring_sync(true);
        }
        self.arm_accept(&mut self.inner.borrow_mut());
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
            if inner.accepting {
                self.push(
                    opcode::AsyncCancel::new(user_data(OP_ACCEPT, 0, 0))
                        .build()
                        .user_data(user_data(OP_CANCEL, 0, 0)),
                );
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

/// The soft limit on open files, capped to a u32.
fn open_file_limit() -> u32 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 0;
    }
    limit.rlim_cur.min(u64::from(u32::MAX)) as u32
}

fn live_conn(conns: &mut [Option<Conn>], index: u32, generation: u32) -> Option<&mut Conn> {
    conns
        .get_mut(index as usize)?
        .as_mut()
        .filter(|c| c.generation == generation)
}
