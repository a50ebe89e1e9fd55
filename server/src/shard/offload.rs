//! Blocking work a shard hands to a thread, and how its answer comes back (MIGRATE's socket).
//!
//! The shard's loop sleeps in its own ring (docs/ARCHITECTURE.md, "The idle path"). glommio's
//! sockets and timers complete in glommio's reactor, which that sleep does not watch, so a
//! task waiting on one is only seen again at the loop's next cron tick, up to 100 ms later:
//! MIGRATE's connect, write and read through glommio's socket cost about 400 ms a call, and
//! `redis-cli --cluster reshard` moved 250 keys a second. So the work runs on a thread of its
//! own, with a blocking socket and its time-outs. The thread stores the answer, raises this
//! shard's flag and rings its doorbell; the loop's next turn ([`Offload::wake_ready`]) wakes
//! the waiting tasks, which take their answers. A slow target holds its thread and the
//! connection that asked, never the shard. SAVE and WAITAOF wait the same way for the
//! snapshot and fsync threads (`ShardCtx::wait_on`): with a glommio timer, an empty SAVE took
//! 0.2 s.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

/// How often [`ShardCtx::wait_on`](super::ShardCtx::wait_on)'s thread looks.
const POLL_PERIOD: std::time::Duration = std::time::Duration::from_millis(1);

impl super::ShardCtx {
    /// Runs `work` on a thread of its own ([`Offload::run`]) that rings this shard's
    /// doorbell when it is done. `None` when no thread could be started.
    pub fn off_shard<T, W>(&self, work: W) -> Option<impl Future<Output = T> + '_>
    where
        T: Send + 'static,
        W: FnOnce() -> T + Send + 'static,
    {
        let bells = self.globals.doorbells.clone();
        let me = self.id;
        self.offload.run(move || bells[me].ring(), work)
    }

    /// Waits until `check` answers, polled every millisecond on a thread (`off_shard`): a
    /// wait for another thread's work (a snapshot, an fsync) that has no signal of its own.
    /// A glommio timer here would only fire at the loop's cron tick. Without a thread to be
    /// had, it polls from here at the turns' pace.
    /// A waiter whose future is dropped stops the thread too.
    pub async fn wait_on<T, C>(&self, mut check: C) -> T
    where
        T: Send + 'static,
        C: FnMut() -> Option<T> + Send + Clone + 'static,
    {
        let gone = Gone::default();
        let abandoned = gone.0.clone();
        let mut polled = check.clone();
        let answer = self.off_shard(move || loop {
            if let Some(value) = polled() {
                return Some(value);
            }
            if abandoned.load(Ordering::Acquire) {
                return None;
            }
            std::thread::sleep(POLL_PERIOD);
        });
        if let Some(answer) = answer {
            if let Some(value) = answer.await {
                return value;
            }
        }
        loop {
            if let Some(value) = check() {
                return value;
            }
            glommio::timer::sleep(POLL_PERIOD).await;
        }
    }
}

/// Raised when dropped: the waiter it belongs to is gone, and its polling thread stops (a
/// `WAIT 1 0` with no replica would otherwise poll for ever after its client left).
#[derive(Default)]
struct Gone(Arc<AtomicBool>);

impl Drop for Gone {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// One shard's threads at work and the tasks waiting on them.
#[derive(Default)]
pub struct Offload {
    /// Raised by a thread that has finished (before it rings the doorbell).
    ready: Arc<AtomicBool>,
    /// The tasks waiting for a thread's answer.
    waiting: RefCell<Vec<Waker>>,
}

impl Offload {
    /// Runs `work` on a thread of its own; the future is its answer. `bell` wakes the shard
    /// when it is done. `None` when no thread could be started.
    pub fn run<T, W>(
        &self,
        bell: impl Fn() + Send + 'static,
        work: W,
    ) -> Option<impl Future<Output = T> + '_>
    where
        T: Send + 'static,
        W: FnOnce() -> T + Send + 'static,
    {
        let answer = Arc::new(Mutex::new(None));
        let (slot, ready) = (answer.clone(), self.ready.clone());
        std::thread::Builder::new()
            .name("wetask-offload".into())
            .spawn(move || {
                let value = work();
                *slot.lock().expect("answer") = Some(value);
                ready.store(true, Ordering::SeqCst);
                bell();
            })
            .map_err(|e| tracing::error!("cannot start a thread: {e}"))
            .ok()?;
        Some(Answer {
            offload: self,
            answer,
        })
    }

    /// Whether some thread has finished since the last `wake_ready` (the loop must not
    /// sleep then).
    pub fn has_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// Wakes every waiting task if some thread has finished (each takes its own answer or
    /// waits again); true when it did.
    pub fn wake_ready(&self) -> bool {
        // A load first: every turn asks, and a thread has finished on almost none.
        if !self.ready.load(Ordering::Relaxed) || !self.ready.swap(false, Ordering::SeqCst) {
            return false;
        }
        let waiting = std::mem::take(&mut *self.waiting.borrow_mut());
        waiting.into_iter().for_each(Waker::wake);
        true
    }
}

struct Answer<'a, T> {
    offload: &'a Offload,
    answer: Arc<Mutex<Option<T>>>,
}

impl<T> Future for Answer<'_, T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        if let Some(value) = self.answer.lock().expect("answer").take() {
            return Poll::Ready(value);
        }
        self.offload.waiting.borrow_mut().push(cx.waker().clone());
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer arrives through the flag and the wake, whatever the order of the poll and
    /// the thread's end.
    #[test]
    fn a_thread_answers_the_task_that_waits() {
        let offload = Offload::default();
        let rung = Arc::new(AtomicBool::new(false));
        let bell = {
            let rung = rung.clone();
            move || rung.store(true, Ordering::SeqCst)
        };
        let mut answer = Box::pin(offload.run(bell, || 6 * 7).expect("a thread"));
        let waker = futures_lite::future::block_on(std::future::poll_fn(|cx| {
            Poll::Ready(cx.waker().clone())
        }));
        let mut cx = Context::from_waker(&waker);
        loop {
            match answer.as_mut().poll(&mut cx) {
                Poll::Ready(value) => {
                    assert_eq!(value, 42);
                    break;
                }
                Poll::Pending => {
                    while !offload.has_ready() {
                        std::thread::yield_now();
                    }
                    assert!(rung.load(Ordering::SeqCst), "the bell rang");
                    assert!(offload.wake_ready());
                    assert!(offload.waiting.borrow().is_empty());
                }
            }
        }
    }
}
