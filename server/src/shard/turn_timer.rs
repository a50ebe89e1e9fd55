//! A period for a task of the shard's: the shard's turn (`ShardCtx::tick`) wakes it once
//! the period has passed. A timer of glommio's would not do: the io_uring loop sleeps in its
//! own ring, where glommio's timers cannot wake it (`net::uring`), and a task of another
//! task queue than the loop's may wait long for its turn.

use std::cell::{Cell, RefCell};
use std::task::{Poll, Waker};

/// A task that looks every period ([`TurnTimer::next`]'s), woken by the shard's turn.
#[derive(Default)]
pub struct TurnTimer {
    period_ms: Cell<u64>,
    next_ms: Cell<u64>,
    waker: RefCell<Option<Waker>>,
}

impl TurnTimer {
    /// Called every loop turn with the shard's clock.
    pub fn wake_if_due(&self, now_ms: u64) {
        if now_ms < self.next_ms.get() {
            return;
        }
        if let Some(waker) = self.waker.borrow_mut().take() {
            self.next_ms.set(now_ms + self.period_ms.get());
            waker.wake();
        }
    }

    /// Resolves at the next turn that finds the look due; the one after is `period` later.
    pub async fn next(&self, period: std::time::Duration) {
        self.period_ms.set(period.as_millis() as u64);
        let mut armed = false;
        std::future::poll_fn(|cx| {
            if armed && self.waker.borrow().is_none() {
                return Poll::Ready(());
            }
            armed = true;
            *self.waker.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}
