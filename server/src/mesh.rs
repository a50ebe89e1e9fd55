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
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use glommio::channels::channel_mesh::Senders;
use wetask_protocol::Frame;
use wetask_shards::{Entry, ScanFilter};

/// Per-pair channel capacity.
pub const CHANNEL_CAPACITY: usize = 1024;

/// Commands for one shard: (index into the command table, arguments), run in order.
pub type ShardCommands = Vec<(usize, Vec<Bytes>)>;

/// Work one shard asks of another.
pub enum Request {
    /// Run these commands, in order, on the given database. `spec` indexes the command table.
    Exec {
        db: usize,
        client: u64,
        commands: ShardCommands,
    },
    /// Lease up to `count` tasks from these queues (all on the receiving shard) to `client`.
    TaskFetch {
        client: u64,
        /// Task ids to acknowledge first, in order (a FETCH's ACKs, when they all live on
        /// this shard: then the whole worker step is one round trip). The first refusal is
        /// answered as `Response::Refused` and nothing is leased.
        acks: Vec<Bytes>,
        queues: Vec<Bytes>,
        count: usize,
        lease_ms: Option<u64>,
    },
    /// Like `TaskFetch`, but when nothing can be leased the request is held (parked) until
    /// something can, or until `deadline_ms`.
    TaskFetchBlocking {
        client: u64,
        queues: Vec<Bytes>,
        count: usize,
        lease_ms: Option<u64>,
        deadline_ms: Option<u64>,
    },
    /// TASK.WAIT on the receiving shard: held until the task finishes or `deadline_ms`; an
    /// unknown id is answered at once with an error.
    TaskWait {
        client: u64,
        id: Bytes,
        deadline_ms: Option<u64>,
    },
    /// Let go of `client`'s parked fetches (each is answered with nothing).
    TaskUnpark {
        client: u64,
    },
    /// Park a blocked list pop on the receiving shard's `keys`: held until one of them
    /// gives it data (answered with the command's reply) or `deadline_ms` (answered empty).
    ListBlock {
        waiter: u64,
        client: u64,
        db: usize,
        keys: Vec<Bytes>,
        op: wetask_shards::BlockOp,
        deadline_ms: Option<u64>,
    },
    /// Let go of a parked list pop (its held request is answered empty if still parked).
    ListUnblock {
        waiter: u64,
    },
    /// `client`'s connection is closing: let go of its parked list pop.
    ListUnblockClient {
        client: u64,
    },
    /// Hand back tasks leased to `client` that it never received.
    TaskUnlease {
        client: u64,
        ids: Vec<Bytes>,
    },
    /// `client`'s connection closed: requeue every task leased to it.
    ReleaseLeases {
        client: u64,
    },
    /// Submit a fallback task to a queue on the receiving shard.
    SubmitFallback {
        fallback: wetask_shards::tasks::Fallback,
    },
    Take {
        db: usize,
        key: Bytes,
    },
    /// Deliver a published message to the receiving shard's subscribers.
    Publish {
        channel: Bytes,
        message: Bytes,
        /// SPUBLISH: to shard-channel subscribers only.
        sharded: bool,
    },
    /// What the receiving shard knows for PUBSUB.
    Pubsub(PubsubQuery),
    /// Lend a key's entry to the coordinator of a cross-shard operation (see `cross`).
    Lend {
        db: usize,
        key: Bytes,
    },
    /// Take back a lent key as it now is; `written` counts it as changed for WATCH.
    Restore {
        db: usize,
        key: Bytes,
        entry: Entry,
        written: bool,
    },
    /// WATCH a key owned by the receiving shard: answered with its version.
    Watch {
        db: usize,
        key: Bytes,
    },
    /// The current version of a watched key (EXEC, under the transaction's locks).
    WatchVersion {
        db: usize,
        key: Bytes,
    },
    /// One watcher of the key is gone.
    Unwatch {
        db: usize,
        key: Bytes,
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
    Stats,
    ResetStats,
    ClientList,
    ClientKill {
        filter: crate::clients::KillFilter,
    },
    /// Take the shard's lock for the message's token; answered once granted.
    Lock,
    /// Take the lock (as `Lock`) and run these commands under it, answering their replies.
    LockExec {
        db: usize,
        client: u64,
        commands: ShardCommands,
    },
    /// Release the lock held by the message's token.
    Unlock,
}

pub enum Response {
    Frames(Vec<Frame>),
    /// A request's precondition failed with this error (a FETCH's ACK was refused).
    Refused(Frame),
    Entry(Option<Entry>),
    Bool(bool),
    Count(usize),
    Scan(u64, Vec<Bytes>),
    Key(Option<Bytes>),
    Stats(Box<crate::stats::ShardReport>),
    Text(String),
    Pubsub(PubsubReport),
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
}

impl Mesh {
    pub fn new(senders: Senders<Envelope>) -> Self {
        let peers = senders.nr_consumers();
        Mesh {
            senders,
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
        }
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
        if let Some(slot) = self.pending.borrow_mut().remove(&id) {
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
            match self.senders.try_send_to(to, envelope) {
                Ok(()) => return,
                Err(glommio::GlommioError::WouldBlock(glommio::ResourceType::Channel(
                    envelope,
                ))) => queue.push_back(envelope),
                Err(err) => {
                    tracing::error!("mesh send to shard {to} failed: {err}");
                    return;
                }
            }
        } else {
            queue.push_back(envelope);
        }
        if let Some(waker) = self.overflow_waker[to].take() {
            waker.wake();
        }
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
