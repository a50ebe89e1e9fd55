//! Blocked fetches (TASK.FETCH … BLOCK ms) and TASK.WAIT. A blocked fetch parks on every shard that owns one
//! of its queues: as a held mesh request from another shard, or a local slot. A shard retries
//! its parked fetches, oldest first, whenever its engine's epoch moved (a task became ready, a
//! lease or a limit freed up) or a parked fetch's deadline passed, and answers each one that
//! leased something or timed out. The connection's coordinator (`task_fetch`) takes the first
//! shard's answer, asks the others to let go, and hands back anything they leased meanwhile
//! that it cannot deliver, so no task stays leased to a client that did not receive it.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::task_commands::{fetch_frames, task_frame};

use crate::context::ShardCtx;
use crate::mesh::Response;

/// Most fetches parked on one shard at once; beyond it a blocked fetch is refused.
pub const PARKED_FETCHES_MAX: usize = 100_000;

/// Where a parked fetch's answer goes.
pub enum Reply {
    /// A held mesh request: answer it with `Response::Frames`.
    Peer { from: usize, id: u64 },
    /// A connection on this shard.
    Local(Rc<LocalSlot>),
}

/// What a parked command waits for.
pub enum Want {
    /// TASK.FETCH … BLOCK: something to lease from these queues.
    Fetch {
        queues: Vec<Bytes>,
        count: usize,
        lease_ms: Option<u64>,
    },
    /// TASK.WAIT: the task to finish (answered with its fields, or nil on time-out).
    Finish { id: Bytes },
}

pub struct Parked {
    pub client: u64,
    pub want: Want,
    /// Unix ms when it gives up empty-handed; `None` waits for ever.
    pub deadline_ms: Option<u64>,
    pub reply: Reply,
}

/// A one-shot answer to a local parked fetch.
#[derive(Default)]
pub struct LocalSlot {
    frames: RefCell<Option<Vec<Frame>>>,
    waker: Cell<Option<Waker>>,
}

impl LocalSlot {
    fn complete(&self, frames: Vec<Frame>) {
        *self.frames.borrow_mut() = Some(frames);
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

/// Resolves to a local parked fetch's answer.
pub struct LocalWait(pub Rc<LocalSlot>);

impl Future for LocalWait {
    type Output = Vec<Frame>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Vec<Frame>> {
        match self.0.frames.borrow_mut().take() {
            Some(frames) => Poll::Ready(frames),
            None => {
                self.0.waker.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        }
    }
}

impl ShardCtx {
    /// Parks a fetch that found nothing; answers it at once if it can lease now. Refuses
    /// (answers with an error frame) past `PARKED_FETCHES_MAX`.
    pub fn park_fetch(&self, parked: Parked) {
        if self.parked.borrow().len() >= PARKED_FETCHES_MAX {
            let error = Frame::error(format!(
                "ERR too many blocked fetches on one shard ({PARKED_FETCHES_MAX})"
            ));
            self.answer(parked.reply, vec![error]);
            return;
        }
        self.parked.borrow_mut().push(parked);
        self.parked_epoch.set(u64::MAX);
        self.serve_parked();
    }

    pub fn answer(&self, reply: Reply, frames: Vec<Frame>) {
        match reply {
            Reply::Peer { from, id } => {
                let mesh = self
                    .mesh
                    .as_ref()
                    .expect("a peer's request came over the mesh");
                mesh.respond(from, id, Response::Frames(frames));
            }
            Reply::Local(slot) => slot.complete(frames),
        }
    }

    /// Retries the parked fetches if anything changed, oldest first; answers those that
    /// leased something or ran out of time.
    pub fn serve_parked(&self) {
        if self.parked.borrow().is_empty() {
            return;
        }
        let mut answers = Vec::new();
        {
            let mut shard = self.shard.borrow_mut();
            let now = shard.now_ms();
            let epoch = shard.tasks.epoch();
            let deadline_passed = self
                .parked
                .borrow()
                .iter()
                .any(|p| p.deadline_ms.is_some_and(|d| now >= d));
            if epoch == self.parked_epoch.get() && !deadline_passed {
                return;
            }
            let mut parked = self.parked.borrow_mut();
            let mut i = 0;
            while i < parked.len() {
                let p = &parked[i];
                let expired = p.deadline_ms.is_some_and(|d| now >= d);
                let answer: Option<Vec<Frame>> = match &p.want {
                    Want::Fetch {
                        queues,
                        count,
                        lease_ms,
                    } => {
                        // Nothing to lease (or held back by the in-flight limit): keep waiting.
                        match fetch_frames(
                            &mut shard.tasks,
                            queues,
                            *count,
                            *lease_ms,
                            p.client,
                            now,
                        ) {
                            Ok(frames) if !frames.is_empty() => Some(frames),
                            _ => expired.then(Vec::new),
                        }
                    }
                    Want::Finish { id } => match shard.tasks.get(id) {
                        Some(task) if task.state.is_terminal() => Some(vec![task_frame(task)]),
                        None => Some(vec![Frame::Null]),
                        _ => expired.then(|| vec![Frame::Null]),
                    },
                };
                match answer {
                    Some(frames) => answers.push((parked.remove(i).reply, frames)),
                    None => i += 1,
                }
            }
            self.parked_epoch.set(shard.tasks.epoch());
        }
        for (reply, frames) in answers {
            self.answer(reply, frames);
        }
    }

    /// Lets go of `client`'s parked fetches, answering each with nothing.
    pub fn unpark_client(&self, client: u64) {
        let gone: Vec<Parked> = {
            let mut parked = self.parked.borrow_mut();
            let (gone, kept) = std::mem::take(&mut *parked)
                .into_iter()
                .partition(|p| p.client == client);
            *parked = kept;
            gone
        };
        for p in gone {
            self.answer(p.reply, Vec::new());
        }
    }
}
