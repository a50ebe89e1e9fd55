//! The completion-based network path: one io_uring ring per shard, created with
//! SINGLE_ISSUER | DEFER_TASKRUN | TASKRUN_FLAG, hosted in the shard's glommio executor.
//!
//! * A multishot accept on the shard's SO_REUSEPORT listener.
//! * A multishot recv per connection into a provided-buffer ring.
//! * Sends queued per connection and submitted together, with one `io_uring_enter`
//!   (GETEVENTS, non-blocking) per loop turn, skipped when there is nothing to submit and
//!   no deferred task work.
//! * When the ring is dry the driver re-enables the ring's eventfd, checks once more, and
//!   parks on a glommio read of that eventfd, so an idle shard burns no CPU. Other tasks
//!   (cross-shard batches) wake it through a waker slot. DESIGN §7 explains each choice.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use glommio::io::BufferedFile;
use io_uring::{cqueue, opcode, squeue, types, IoUring};

use wetask_protocol::Output;

use crate::net::bufring::BufRing;
use crate::net::set_nodelay;
use crate::session::{self, Pump, Session, OUTPUT_BUFFER_BYTES_MAX};
use crate::shard::ShardCtx;

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
/// How long a dry driver watches for work before parking: a park and its wake-up cost
/// glommio about seven syscalls. Measured at 10, 20 and 50 µs; 20 was cheapest in CPU per
/// request (docs/perf-notes.md).
const IDLE_SPIN: Duration = Duration::from_micros(20);
/// Write buffers above this size are released when they empty.
const KEEP_BUFFER_BYTES_MAX: usize = 1024 * 1024;

/// IORING_ENTER_GETEVENTS: run deferred task work (DEFER_TASKRUN) and post completions.
const IORING_ENTER_GETEVENTS: u32 = 1;

const OP_ACCEPT: u64 = 1;
const OP_RECV: u64 = 2;
const OP_SEND: u64 = 3;
const OP_CANCEL: u64 = 4;

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

struct Conn {
    fd: RawFd,
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

/// A waker slot other tasks use to rouse the parked driver.
#[derive(Default)]
pub struct Notify {
    flag: Cell<bool>,
    waker: Cell<Option<Waker>>,
}

impl Notify {
    pub fn notify(&self) {
        self.flag.set(true);
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

type EventRead = Pin<Box<dyn Future<Output = glommio::Result<glommio::io::ReadResult, ()>>>>;

pub struct Net {
    ctx: Rc<ShardCtx>,
    ring: RefCell<IoUring>,
    inner: RefCell<Inner>,
    notify: Notify,
    /// Set by the cron's rouse and by a completed eventfd read: the next turn enters the
    /// ring with GETEVENTS even if no flag asks for it.
    force_enter: Cell<bool>,
    /// Kept open for the process's life: shutdown and the watchdog write to it to wake the
    /// shard.
    _eventfd: OwnedFd,
    eventfd_file: Rc<BufferedFile>,
    event_read: RefCell<Option<EventRead>>,
    /// Replies of cross-shard batches that finished, for the driver to hand out.
    finished: RefCell<Vec<(u32, u32, Output)>>,
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
    pub fn new(ctx: Rc<ShardCtx>, listener: OwnedFd) -> io::Result<Rc<Net>> {
        let mut ring = build_ring(RING_ENTRIES)?;
        let bufs = BufRing::register(&ring, BUFFER_GROUP, RECV_BUFFERS, RECV_BUFFER_BYTES)?;
        // A blocking eventfd: glommio's read of it must wait in the kernel, not fail.
        // SAFETY: eventfd has no memory preconditions; the result is checked.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: raw is a fresh fd we own.
        let eventfd = unsafe { OwnedFd::from_raw_fd(raw) };
        ring.submitter().register_eventfd(eventfd.as_raw_fd())?;
        ring.completion().disable_eventfd();
        // SAFETY: dup of a live fd; the BufferedFile owns and closes the duplicate.
        let dup = unsafe { libc::dup(eventfd.as_raw_fd()) };
        if dup < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: dup is a fresh fd owned by nobody else.
        let eventfd_file = Rc::new(unsafe { BufferedFile::from_raw_fd(dup) });
        ctx.globals
            .watchdog
            .register(eventfd.as_raw_fd(), ctx.beats.clone());
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
            notify: Notify::default(),
            force_enter: Cell::new(false),
            _eventfd: eventfd,
            eventfd_file,
            event_read: RefCell::new(None),
            finished: RefCell::new(Vec::new()),
        }))
    }

    fn push(&self, entry: squeue::Entry) {
        let mut ring = self.ring.borrow_mut();
        // SAFETY: every entry's buffers live in `Inner` until its completion arrives.
        while unsafe { ring.submission().push(&entry) }.is_err() {
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
        let entry = opcode::RecvMulti::new(types::Fd(conn.fd), group)
            .build()
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
        self.submit_send(index, conn);
    }

    fn submit_send(&self, index: u32, conn: &mut Conn) {
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
            opcode::SendMsg::new(types::Fd(conn.fd), &vectored.header)
                .flags(libc::MSG_NOSIGNAL as u32)
                .build()
        } else {
            let rest = &conn.sending[conn.sent..];
            opcode::Send::new(types::Fd(conn.fd), rest.as_ptr(), rest.len() as u32)
                .flags(libc::MSG_NOSIGNAL)
                .build()
        };
        self.push(entry.user_data(user_data(OP_SEND, index, conn.generation)));
        conn.send_in_flight = true;
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
        if pending > 0 || flagged || self.force_enter.replace(false) {
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

    fn set_eventfd(&self, enabled: bool) {
        let mut ring = self.ring.borrow_mut();
        if enabled {
            ring.completion().enable_eventfd();
        } else {
            ring.completion().disable_eventfd();
        }
    }

    /// One turn: submit, reap every completion, run what it enabled. Returns work done.
    fn turn(self: &Rc<Self>) -> usize {
        let finished = self.collect_finished() + self.collect_pushes();
        self.enter();
        let completions: Vec<cqueue::Entry> = {
            let mut ring = self.ring.borrow_mut();
            ring.completion().take(COMPLETIONS_PER_TURN_MAX).collect()
        };
        for completion in &completions {
            self.complete(completion);
        }
        completions.len() + finished
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
            generation,
            session: Session::new(state, ctx.globals.config.proto_max_bulk_len),
            out: Output::default(),
            sending: Output::default(),
            vectored: Box::default(),
            sent: 0,
            send_in_flight: false,
            recv_armed: false,
            busy: false,
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
            self.ctx
                .stats
                .net_input_bytes
                .set(self.ctx.stats.net_input_bytes.get() + result as u64);
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
            self.ctx
                .stats
                .net_output_bytes
                .set(self.ctx.stats.net_output_bytes.get() + result as u64);
            conn.sent += result as usize;
            conn.session.state.borrow_mut().unsent =
                conn.sending.len() - conn.sent.min(conn.sending.len());
            if conn.sent < conn.sending.len() {
                self.submit_send(index, conn);
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
            Pump::Batch(batch) => {
                conn.busy = true;
                let net = self.clone();
                let (state, generation) = (conn.session.state.clone(), conn.generation);
                glommio::spawn_local(async move {
                    let out = session::run_batch(net.ctx.clone(), state, batch).await;
                    net.finish_batch(index, generation, out);
                })
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
        self.flush(index, conn);
        self.close_if_done(conn);
    }

    /// Queues a finished batch's replies for the driver. Never touches `inner` itself: the
    /// task may run while the driver holds it (glommio can run a woken task right away).
    fn finish_batch(&self, index: u32, generation: u32, out: Output) {
        self.finished.borrow_mut().push((index, generation, out));
        self.notify.notify();
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
        // SAFETY: closing our own fd; no operation on it is in flight any more.
        unsafe { libc::close(conn.fd) };
        inner.free.push(index);
    }

    /// Gives the shard's other tasks their turn. Cross-shard batch tasks share this loop's
    /// task queue (glommio spawns into the running queue), and `yield_if_needed` only
    /// yields to *other* queues, so with several shards the loop yields within its queue
    /// after every busy turn; otherwise a ring that never goes dry starves those tasks
    /// (docs/perf-notes.md). With one shard there are no such tasks.
    async fn let_others_run(&self) {
        if self.ctx.shard_count > 1 {
            futures_lite::future::yield_now().await;
        } else {
            glommio::yield_if_needed().await;
        }
    }

    /// Spins up to `limit` for deferred completions or a notification; true if work came.
    fn spin_for_work(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if self.ring.borrow_mut().submission().taskrun() || self.notify.flag.get() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::hint::spin_loop();
        }
    }

    /// Waits until the ring has completions or another task notifies.
    async fn park(&self) {
        std::future::poll_fn(|cx| {
            let signalled = self.poll_event_read(cx);
            if self.notify.flag.replace(false) || signalled {
                return Poll::Ready(());
            }
            self.notify.waker.set(Some(cx.waker().clone()));
            Poll::Pending
        })
        .await
    }

    /// Polls the read of the ring's eventfd; true if it completed (the ring has work, or the
    /// watchdog says this shard stalled). A completed read is replaced at once, so one is
    /// always in flight on glommio's ring: a write to the eventfd then always completes an
    /// I/O there and wakes the executor, even one that went to sleep while this loop was
    /// runnable and not parked (seen under CPU contention: the executor asleep, its timers
    /// silent, the loop suspended in a yield; docs/ARCHITECTURE.md).
    fn poll_event_read(&self, cx: &mut std::task::Context<'_>) -> bool {
        let mut slot = self.event_read.borrow_mut();
        let mut signalled = false;
        // Two rounds at most: the second read only arms (it completes at once only if the
        // eventfd was written again in between, and then the next park sees it).
        for _ in 0..2 {
            let read = slot.get_or_insert_with(|| {
                let file = self.eventfd_file.clone();
                Box::pin(async move { file.read_at(0, 8).await })
            });
            if read.as_mut().poll(cx).is_pending() {
                break;
            }
            *slot = None;
            signalled = true;
            // Enter with GETEVENTS whatever the TASKRUN flag shows.
            self.force_enter.set(true);
        }
        signalled
    }

    /// The shard's network loop; returns once shutdown has drained the clients.
    pub async fn run(self: Rc<Self>) {
        // Spawned from here, the mesh flusher shares this loop's task queue and so runs
        // behind the connection tasks whose cross-shard commands it sends.
        if let Some(mesh) = &self.ctx.mesh {
            glommio::spawn_local(mesh.clone().run_flusher()).detach();
        }
        self.arm_accept(&mut self.inner.borrow_mut());
        let net = self.clone();
        *self.ctx.push_hook.borrow_mut() = Some(Box::new(move || net.notify.notify()));
        // For the watchdog: this task's waker, which it may wake from its own thread.
        let waker = std::future::poll_fn(|cx| Poll::Ready(cx.waker().clone())).await;
        *self.ctx.beats.loop_waker.lock().expect("waker") = Some(waker);
        let roused = self.clone();
        *self.ctx.rouse_hook.borrow_mut() = Some(Box::new(move || {
            roused.force_enter.set(true);
            roused.notify.notify();
        }));
        loop {
            if self.ctx.globals.shutting_down() {
                self.drain().await;
                return;
            }
            self.ctx.tick();
            // For the watchdog: this loop turned now (a loop that has work and does not
            // turn is roused; see `watchdog`).
            let now = self.ctx.shard.borrow().now_ms();
            self.ctx
                .beats
                .turn
                .store(now, std::sync::atomic::Ordering::Relaxed);
            if self.turn() > 0 || self.notify.flag.replace(false) {
                self.let_others_run().await;
                continue;
            }
            // Dry. Work often arrives within microseconds under load: watch the ring's
            // TASKRUN flag (shared memory, no syscall) for a moment before paying for a park.
            if !self.ctx.globals.cpus_shared && self.spin_for_work(IDLE_SPIN) {
                self.let_others_run().await;
                continue;
            }
            // Still dry: re-enable the eventfd, look once more, then park. The kernel sets
            // TASKRUN and then reads EVENTFD_DISABLED; we clear EVENTFD_DISABLED and then
            // read TASKRUN. The fence keeps our read after our write, so at least one side
            // sees the other (else work could land unflagged-to-us and unsignalled).
            self.set_eventfd(true);
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            if self.turn() > 0 {
                self.set_eventfd(false);
                continue;
            }
            self.ctx
                .stats
                .ring_parks
                .set(self.ctx.stats.ring_parks.get() + 1);
            // Parked, a completion (or the watchdog's eventfd write) wakes it.
            self.ctx
                .beats
                .turn
                .store(0, std::sync::atomic::Ordering::Relaxed);
            self.park().await;
            self.set_eventfd(false);
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

fn live_conn(conns: &mut [Option<Conn>], index: u32, generation: u32) -> Option<&mut Conn> {
    conns
        .get_mut(index as usize)?
        .as_mut()
        .filter(|c| c.generation == generation)
}
