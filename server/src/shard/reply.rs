//! Where the answer to a parked request goes: a peer's held mesh request, or a local
//! connection's one-shot slot, or a connection's output with no task between. Blocked pops and blocked task fetches and waits park the
//! same way, so they answer the same way.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use wetask_protocol::Frame;

use super::core::ShardCore;
use crate::mesh::Response;

/// Where a parked request's answer goes.
pub enum Reply {
    /// A held mesh request: answered with `Response::Frames`.
    Peer { from: usize, id: u64 },
    /// A connection on this shard, whose command waits in a task.
    Local(Rc<LocalSlot>),
    /// A connection on this shard that waits with no task (a blocked TASK.FETCH parked
    /// straight from the inline path): the transport writes the answer into its output,
    /// `finish` turning the answer's frames into the reply.
    Direct {
        client: u64,
        finish: fn(Vec<Frame>) -> Frame,
    },
}

impl Reply {
    pub fn send(self, core: &ShardCore, frames: Vec<Frame>) {
        match self {
            Reply::Peer { from, id } => core.respond(from, id, Response::Frames(frames)),
            Reply::Local(slot) => {
                core.local_wakes.set(true);
                slot.complete(frames);
            }
            Reply::Direct { client, finish } => {
                core.direct_answers
                    .borrow_mut()
                    .push((client, finish(frames)));
                core.wake_transport();
            }
        }
    }
}

/// A one-shot answer to a local parked request.
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

/// Resolves to a local parked request's answer.
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
