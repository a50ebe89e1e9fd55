//! Cross-shard messages. Each pair of shards is joined by a bounded SPSC channel (glommio's
//! channel mesh). A request carries owned values and a request id; the owning shard runs it
//! synchronously on its own state and sends a response back with the same id.
//!
//! Messages are not sent one by one: each goes into the outbox for its peer, and the outbox
//! leaves as one [`Envelope`] when it is flushed, at the latest once every task that was
//! runnable when the first message was queued has run (the flusher task, woken by that first
//! message, queues up behind them). So all the cross-shard commands of one loop turn, over
//! every connection, cost one channel message and at most one wake-up per peer, and so do
//! their replies (docs/perf-notes.md, "Cross-shard batching").
//!
//! Deadlock rule (DESIGN §2): nobody ever awaits a full outbound channel while holding up its
//! own inbound one. An envelope that finds the channel full goes to a local overflow queue
//! that a per-peer sender task drains, so receiver tasks never block and always keep draining.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use glommio::channels::channel_mesh::Senders;

use crate::doorbell::Doorbell;

mod messages;
pub use messages::*;

/// Per-pair channel capacity.
pub const CHANNEL_CAPACITY: usize = 1024;

/// What one channel message carries: every message queued for that peer since the last flush.
pub type Envelope = Vec<Message>;

pub enum Message {
    /// `token` names the cross-shard operation holding locks that this request belongs to;
    /// a locked shard serves only requests carrying its lock's token and defers the rest.
    Request {
        from: usize,
        id: u64,
        token: Option<u64>,
        request: Request,
    },
    Response {
        id: u64,
        response: Response,
    },
}

#[derive(Default)]
struct Slot {
    response: RefCell<Option<Response>>,
    waker: Cell<Option<Waker>>,
}

/// This shard's end of the mesh.
pub struct Mesh {
    senders: Senders<Envelope>,
    /// Every shard's doorbell: an envelope put into a peer's channel is posted on the peer's.
    doorbells: Arc<[Doorbell]>,
    /// Messages queued per peer, not yet flushed.
    outbox: Vec<RefCell<Envelope>>,
    /// Set when an outbox gained its first message; cleared by `flush`.
    dirty: Cell<bool>,
    flusher_waker: Cell<Option<Waker>>,
    overflow: Vec<RefCell<VecDeque<Envelope>>>,
    overflow_waker: Vec<Cell<Option<Waker>>>,
    /// The overflow sender towards a peer holds an envelope it is waiting to send: later
    /// envelopes must queue behind it, not overtake it (a Lock overtaken by its Unlock
    /// left a shard locked for ever).
    overflow_sending: Vec<Cell<bool>>,
    pending: RefCell<HashMap<u64, Rc<Slot>>>,
    next_id: Cell<u64>,
    /// Envelopes sent, and messages in them (INFO: mesh_envelopes, mesh_messages).
    pub envelopes_sent: Cell<u64>,
    pub messages_sent: Cell<u64>,
    /// Runs before an envelope leaves: the shard's journal commits what the envelope's
    /// responses report (a peer must not pass on a reply to a write not yet journaled).
    before_send: std::cell::RefCell<Option<Box<dyn Fn()>>>,
}

impl Mesh {
    pub fn new(senders: Senders<Envelope>, doorbells: Arc<[Doorbell]>) -> Self {
        let peers = senders.nr_consumers();
        Mesh {
            senders,
            doorbells,
            outbox: (0..peers).map(|_| RefCell::new(Vec::new())).collect(),
            dirty: Cell::new(false),
            flusher_waker: Cell::new(None),
            overflow: (0..peers).map(|_| RefCell::new(VecDeque::new())).collect(),
            overflow_waker: (0..peers).map(|_| Cell::new(None)).collect(),
            overflow_sending: (0..peers).map(|_| Cell::new(false)).collect(),
            pending: RefCell::new(HashMap::new()),
            next_id: Cell::new(1),
            envelopes_sent: Cell::new(0),
            messages_sent: Cell::new(0),
            before_send: std::cell::RefCell::new(None),
        }
    }

    /// Sets what runs before every envelope leaves (see `before_send`).
    pub fn set_before_send(&self, hook: Box<dyn Fn()>) {
        *self.before_send.borrow_mut() = Some(hook);
    }

    /// Sends `request` to shard `to` now and returns a future for its response.
    pub fn request(
        &self,
        from: usize,
        to: usize,
        token: Option<u64>,
        request: Request,
    ) -> ResponseFuture {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let slot = Rc::new(Slot::default());
        self.pending.borrow_mut().insert(id, slot.clone());
        self.send(
            to,
            Message::Request {
                from,
                id,
                token,
                request,
            },
        );
        ResponseFuture { slot }
    }

    pub fn respond(&self, to: usize, id: u64, response: Response) {
        self.send(to, Message::Response { id, response });
    }

    /// Requests sent and not yet answered.
    pub fn pending_count(&self) -> usize {
        self.pending.borrow().len()
    }

    /// Completes the pending request `id` (called by the receiver task).
    pub fn complete(&self, id: u64, response: Response) {
        let slot = self.pending.borrow_mut().remove(&id);
        // Every request is answered once, and its slot lives until then (a dropped future
        // leaves it in place): an unknown id is a response sent twice or to the wrong shard.
        debug_assert!(slot.is_some(), "a response to unknown request {id}");
        if let Some(slot) = slot {
            *slot.response.borrow_mut() = Some(response);
            if let Some(waker) = slot.waker.take() {
                waker.wake();
            }
        }
    }

    fn send(&self, to: usize, message: Message) {
        self.outbox[to].borrow_mut().push(message);
        if !self.dirty.replace(true) {
            if let Some(waker) = self.flusher_waker.take() {
                waker.wake();
            }
        }
    }

    /// Sends every queued message, one envelope per peer.
    pub fn flush(&self) {
        if !self.dirty.replace(false) {
            return;
        }
        for to in 0..self.outbox.len() {
            self.flush_to(to);
        }
    }

    /// Sends the messages queued for `to` as one envelope.
    pub fn flush_to(&self, to: usize) {
        let envelope = std::mem::take(&mut *self.outbox[to].borrow_mut());
        if envelope.is_empty() {
            return;
        }
        self.envelopes_sent.set(self.envelopes_sent.get() + 1);
        self.messages_sent
            .set(self.messages_sent.get() + envelope.len() as u64);
        let mut queue = self.overflow[to].borrow_mut();
        if queue.is_empty() && !self.overflow_sending[to].get() {
            match self.try_deliver(to, envelope) {
                None => return,
                Some(envelope) => queue.push_back(envelope),
            }
        } else {
            queue.push_back(envelope);
        }
        if let Some(waker) = self.overflow_waker[to].take() {
            waker.wake();
        }
    }

    /// Puts `envelope` into `to`'s channel and posts it; gives it back if the channel is full
    /// (a closed channel is logged and the envelope dropped: the peer is gone).
    fn try_deliver(&self, to: usize, envelope: Envelope) -> Option<Envelope> {
        if let Some(hook) = self.before_send.borrow().as_ref() {
            hook();
        }
        match self.senders.try_send_to(to, envelope) {
            Ok(()) => {
                self.posted(to);
                None
            }
            Err(glommio::GlommioError::WouldBlock(glommio::ResourceType::Channel(envelope))) => {
                Some(envelope)
            }
            Err(err) => {
                tracing::error!("mesh send to shard {to} failed: {err}");
                None
            }
        }
    }

    /// An envelope is in `to`'s channel: tell its doorbell (which rings if `to` sleeps in its
    /// ring, where glommio's own channel wake-up cannot reach it).
    fn posted(&self, to: usize) {
        self.doorbells[to].post(self.senders.peer_id());
    }

    /// Moves what it can of the overflow queues into their channels, in order; true while
    /// some envelope still waits for room. The io_uring loop calls it every turn instead of
    /// running the overflow sender tasks (a task waiting for room is woken through glommio,
    /// which does not run while the loop sleeps in its ring).
    pub fn retry_overflow(&self) -> bool {
        let mut waiting = false;
        for to in 0..self.overflow.len() {
            let mut queue = self.overflow[to].borrow_mut();
            while let Some(envelope) = queue.pop_front() {
                if let Some(envelope) = self.try_deliver(to, envelope) {
                    queue.push_front(envelope);
                    waiting = true;
                    break;
                }
            }
        }
        waiting
    }

    /// Flushes the outboxes whenever they gain messages, forever (one task per shard, in the
    /// network loop's task queue so that it runs behind the connection tasks that queue).
    pub async fn run_flusher(self: Rc<Self>) {
        loop {
            std::future::poll_fn(|cx| {
                if self.dirty.get() {
                    Poll::Ready(())
                } else {
                    self.flusher_waker.set(Some(cx.waker().clone()));
                    Poll::Pending
                }
            })
            .await;
            self.flush();
        }
    }

    /// Wakes every overflow sender to try again (the cron calls it every 100 ms).
    pub fn nudge(&self) {
        for waker in &self.overflow_waker {
            if let Some(waker) = waker.take() {
                waker.wake();
            }
        }
    }

    /// Drains the overflow queue towards `to` forever (one task per peer).
    pub async fn run_overflow_sender(self: Rc<Self>, to: usize) {
        loop {
            let next = self.overflow[to].borrow_mut().pop_front();
            match next {
                Some(envelope) => {
                    // Until it is in the channel, `flush_to` queues behind it: envelopes
                    // to one peer always arrive in the order they were flushed.
                    self.overflow_sending[to].set(true);
                    let sent = {
                        // The waker is kept where `nudge` finds it: a capacity wake-up that
                        // went astray costs at most a cron period, not the whole link.
                        let mut send = std::pin::pin!(self.senders.send_to(to, envelope));
                        std::future::poll_fn(|cx| {
                            self.overflow_waker[to].set(Some(cx.waker().clone()));
                            send.as_mut().poll(cx)
                        })
                        .await
                    };
                    self.overflow_sending[to].set(false);
                    if sent.is_err() {
                        return;
                    }
                    self.posted(to);
                }
                None => {
                    std::future::poll_fn(|cx| {
                        if self.overflow[to].borrow().is_empty() {
                            self.overflow_waker[to].set(Some(cx.waker().clone()));
                            Poll::Pending
                        } else {
                            Poll::Ready(())
                        }
                    })
                    .await
                }
            }
        }
    }
}

pub struct ResponseFuture {
    slot: Rc<Slot>,
}

impl Future for ResponseFuture {
    type Output = Response;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Response> {
        match self.slot.response.borrow_mut().take() {
            Some(response) => Poll::Ready(response),
            None => {
                self.slot.waker.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        }
    }
}
