//! The shard's cross-shard lock and the line in front of it (DESIGN §2.4).
//!
//! One cross-shard operation at a time holds a shard: its token is the holder. Whoever
//! meets it held waits, and waits in turn, so nobody starves:
//! * peers' requests (a Lock, or a plain batch) and this shard's own lock takers
//!   ([`LockQueue::take`]) stand in one first-come queue. A release serves it from the
//!   front: plain requests run, and the first lock taker gets the lock handed over;
//! * this shard's own commands that need only an unlocked moment (a GET, a pipeline
//!   segment, a blocked pop looking again) wait as *plain* waiters. A release admits every
//!   one of them, and the queue stands still until each admitted waiter has run (or gone),
//!   so a lock taker behind them cannot take the shard away first.
//!
//! Before this queue a release woke the local waiters but granted the lock to the next
//! peer at once, so the woken task found it taken again: under a steady stream of peers'
//! operations (scripts reaching every shard) a local script could wait for ever.
//!
//! The queue is pure state and wakers, tested here; `ShardCore` and `ShardCtx` drive it.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::task::Waker;

/// One place in the queue: a peer's request, or a local lock taker (its token and task).
enum Waiting<P> {
    Peer(P),
    Local { token: u64, waker: Waker },
}

/// What the queue's front gives a release (`LockQueue::next`).
pub enum Next<P> {
    /// A peer's request, to serve now (it may take the lock: a Lock request).
    Peer(P),
    /// The lock was handed to a local taker, whose task now runs with it.
    Handed,
}

pub struct LockQueue<P> {
    holder: Cell<Option<u64>>,
    queue: RefCell<VecDeque<Waiting<P>>>,
    /// Local commands waiting for an unlocked moment: (ticket, task).
    plain: RefCell<Vec<(u64, Waker)>>,
    /// Plain waiters the last release let through that have not run yet.
    admitted: RefCell<Vec<u64>>,
    tickets: Cell<u64>,
    /// The task that serves the queue once the admitted waiters have run.
    resumer: RefCell<Option<Waker>>,
}

impl<P> Default for LockQueue<P> {
    fn default() -> Self {
        LockQueue {
            holder: Cell::new(None),
            queue: RefCell::new(VecDeque::new()),
            plain: RefCell::new(Vec::new()),
            admitted: RefCell::new(Vec::new()),
            tickets: Cell::new(0),
            resumer: RefCell::new(None),
        }
    }
}

impl<P> LockQueue<P> {
    pub fn holder(&self) -> Option<u64> {
        self.holder.get()
    }

    /// True when a peer's request carrying `token` may run now: the lock is its operation's,
    /// or free with nobody waiting ahead of it.
    pub fn open_to(&self, token: Option<u64>) -> bool {
        match self.holder.get() {
            Some(holder) => Some(holder) == token,
            None => self.queue.borrow().is_empty() && self.admitted.borrow().is_empty(),
        }
    }

    /// A peer's request that may not run now takes its place at the back.
    pub fn defer(&self, request: P) {
        self.queue.borrow_mut().push_back(Waiting::Peer(request));
    }

    /// Requests and takers waiting in the queue.
    pub fn queued(&self) -> usize {
        self.queue.borrow().len()
    }

    /// Grants the lock to a peer's operation whose request reached the front (or found the
    /// shard open).
    pub fn grant(&self, token: Option<u64>) {
        debug_assert!(self.holder.get().is_none(), "a lock granted over another");
        self.holder.set(token);
    }

    /// A local lock taker's turn: true once `token` holds the lock (taken now when the shard
    /// is open, or handed over by a release); otherwise it waits in the queue, woken by the
    /// hand-over.
    pub fn take(&self, token: u64, waker: &Waker) -> bool {
        if self.holder.get() == Some(token) {
            return true;
        }
        if self.open_to(None) {
            self.holder.set(Some(token));
            return true;
        }
        let mut queue = self.queue.borrow_mut();
        let mine = queue.iter_mut().find_map(|w| match w {
            Waiting::Local { token: t, waker } if *t == token => Some(waker),
            _ => None,
        });
        match mine {
            Some(slot) => slot.clone_from(waker),
            None => queue.push_back(Waiting::Local {
                token,
                waker: waker.clone(),
            }),
        }
        false
    }

    /// A local taker gave up before its turn came: it leaves the queue. True when it had
    /// been handed the lock meanwhile (the caller must then release it).
    pub fn withdraw(&self, token: u64) -> bool {
        self.queue
            .borrow_mut()
            .retain(|w| !matches!(w, Waiting::Local { token: t, .. } if *t == token));
        self.holder.get() == Some(token)
    }

    /// Withdraws the first queued peer request `matches` picks; true when there was one.
    pub fn withdraw_peer(&self, matches: impl Fn(&P) -> bool) -> bool {
        let mut queue = self.queue.borrow_mut();
        let found = queue
            .iter()
            .position(|w| matches!(w, Waiting::Peer(p) if matches(p)));
        found.map(|at| queue.remove(at)).is_some()
    }

    /// Takes every queued peer request `matches` picks, in order (a busy script's holder
    /// answers them BUSY instead of keeping them).
    pub fn take_peers(&self, matches: impl Fn(&P) -> bool) -> Vec<P> {
        let mut taken = Vec::new();
        let mut kept = VecDeque::new();
        for waiting in std::mem::take(&mut *self.queue.borrow_mut()) {
            match waiting {
                Waiting::Peer(p) if matches(&p) => taken.push(p),
                other => kept.push_back(other),
            }
        }
        *self.queue.borrow_mut() = kept;
        taken
    }

    /// Releases the lock held by `token` and lets every plain waiter through: the queue
    /// waits until they have run.
    pub fn release(&self, token: u64) {
        assert_eq!(self.holder.get(), Some(token), "unlock by a non-holder");
        self.holder.set(None);
        let woken = std::mem::take(&mut *self.plain.borrow_mut());
        let mut admitted = self.admitted.borrow_mut();
        for (ticket, waker) in woken {
            admitted.push(ticket);
            waker.wake();
        }
        // Nobody to wait for: the queue may go on (the caller usually serves it at once;
        // the resumer covers a release nobody serves after, an abandoned hand-over's).
        if admitted.is_empty() && !self.queue.borrow().is_empty() {
            self.wake_resumer();
        }
    }

    fn wake_resumer(&self) {
        if let Some(resumer) = self.resumer.borrow_mut().take() {
            resumer.wake();
        }
    }

    /// The queue's front, when its turn has come (the shard free, every admitted waiter
    /// gone): a peer's request to serve, or the lock handed to a local taker.
    pub fn next(&self) -> Option<Next<P>> {
        if self.holder.get().is_some() || !self.admitted.borrow().is_empty() {
            return None;
        }
        match self.queue.borrow_mut().pop_front()? {
            Waiting::Peer(request) => Some(Next::Peer(request)),
            Waiting::Local { token, waker } => {
                self.holder.set(Some(token));
                waker.wake();
                Some(Next::Handed)
            }
        }
    }

    /// A plain waiter's look: true when it may run now (the shard is free); otherwise it
    /// waits, under `ticket`, for the next release.
    pub fn pass(&self, ticket: &mut Option<u64>, waker: &Waker) -> bool {
        if self.holder.get().is_none() {
            if let Some(id) = ticket.take() {
                self.leave(id);
            }
            return true;
        }
        let mut plain = self.plain.borrow_mut();
        match ticket.and_then(|id| plain.iter_mut().find(|(t, _)| *t == id)) {
            Some((_, slot)) => slot.clone_from(waker),
            None => {
                let id = self.tickets.get() + 1;
                self.tickets.set(id);
                *ticket = Some(id);
                plain.push((id, waker.clone()));
            }
        }
        false
    }

    /// A plain waiter is done waiting (it runs, answers BUSY, or its task went away).
    pub fn leave(&self, ticket: u64) {
        self.plain.borrow_mut().retain(|(t, _)| *t != ticket);
        let emptied = {
            let mut admitted = self.admitted.borrow_mut();
            let before = admitted.len();
            admitted.retain(|t| *t != ticket);
            before != admitted.len() && admitted.is_empty()
        };
        if emptied && !self.queue.borrow().is_empty() {
            self.wake_resumer();
        }
    }

    /// Wakes the plain waiters without letting them through (they look again: a busy
    /// script's holder makes them answer BUSY).
    pub fn wake_plain(&self) {
        for (_, waker) in self.plain.borrow().iter() {
            waker.wake_by_ref();
        }
    }

    /// True when the queue's front may be served now; else the resumer is woken when it may.
    pub fn resumable(&self, resumer: &Waker) -> bool {
        if self.holder.get().is_none()
            && self.admitted.borrow().is_empty()
            && !self.queue.borrow().is_empty()
        {
            return true;
        }
        *self.resumer.borrow_mut() = Some(resumer.clone());
        false
    }

    /// Everything waiting, for `INFO shards`: (queued, plain, admitted).
    pub fn counts(&self) -> (usize, usize, usize) {
        (
            self.queue.borrow().len(),
            self.plain.borrow().len(),
            self.admitted.borrow().len(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    /// A waker that counts its wakes.
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn waker() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }

    /// Serves the queue's front as a shard would: peers' lock requests (even numbers) take
    /// the lock with their own token, odd ones are plain.
    fn serve(queue: &LockQueue<u64>) -> Vec<String> {
        let mut served = Vec::new();
        while let Some(next) = queue.next() {
            match next {
                Next::Peer(p) if p % 2 == 0 => {
                    queue.grant(Some(p));
                    served.push(format!("lock {p}"));
                }
                Next::Peer(p) => served.push(format!("plain {p}")),
                Next::Handed => served.push(format!("handed {:?}", queue.holder())),
            }
        }
        served
    }

    #[test]
    fn a_local_taker_gets_its_turn_between_peers() {
        let queue = LockQueue::<u64>::default();
        let (_, w) = waker();
        queue.grant(Some(2));
        queue.defer(4);
        let (local, local_waker) = waker();
        assert!(!queue.take(100, &local_waker));
        queue.defer(6);
        queue.release(2);
        assert_eq!(serve(&queue), ["lock 4"]);
        queue.release(4);
        assert_eq!(serve(&queue), ["handed Some(100)"]);
        assert_eq!(local.0.load(Ordering::SeqCst), 1);
        assert!(queue.take(100, &w), "the taker finds the lock its own");
        queue.release(100);
        assert_eq!(serve(&queue), ["lock 6"]);
    }

    #[test]
    fn plain_waiters_run_before_anybody_queued_takes_the_lock() {
        let queue = LockQueue::<u64>::default();
        queue.grant(Some(2));
        let (count, plain_waker) = waker();
        let mut ticket = None;
        assert!(!queue.pass(&mut ticket, &plain_waker));
        queue.defer(4);
        assert!(!queue.open_to(Some(8)), "held: a newcomer waits");
        queue.release(2);
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "the plain waiter is woken"
        );
        assert!(serve(&queue).is_empty(), "the queue waits for it");
        assert!(!queue.open_to(None), "and so does a newcomer");
        let (resumed, resumer) = waker();
        assert!(!queue.resumable(&resumer));
        assert!(queue.pass(&mut ticket, &plain_waker), "it runs");
        assert_eq!(
            resumed.0.load(Ordering::SeqCst),
            1,
            "its going resumes the queue"
        );
        assert!(queue.resumable(&resumer));
        assert_eq!(serve(&queue), ["lock 4"]);
    }

    #[test]
    fn a_plain_waiter_that_goes_away_does_not_hold_the_queue() {
        let queue = LockQueue::<u64>::default();
        queue.grant(Some(2));
        let (_, w) = waker();
        let mut ticket = None;
        assert!(!queue.pass(&mut ticket, &w));
        queue.defer(3);
        queue.defer(4);
        queue.release(2);
        assert!(serve(&queue).is_empty());
        queue.leave(ticket.unwrap());
        assert_eq!(serve(&queue), ["plain 3", "lock 4"]);
    }

    #[test]
    fn a_withdrawn_taker_is_never_handed_the_lock() {
        let queue = LockQueue::<u64>::default();
        let (_, w) = waker();
        queue.grant(Some(2));
        assert!(!queue.take(100, &w));
        assert!(!queue.take(100, &w), "a second look keeps one place");
        assert_eq!(queue.queued(), 1);
        assert!(!queue.withdraw(100));
        queue.release(2);
        assert!(serve(&queue).is_empty());
        assert_eq!(queue.holder(), None);
        // Handed over, then abandoned: the caller learns it must release.
        queue.grant(Some(2));
        assert!(!queue.take(100, &w));
        queue.release(2);
        assert_eq!(serve(&queue), ["handed Some(100)"]);
        assert!(queue.withdraw(100));
    }

    #[test]
    fn busy_answers_take_only_the_plain_peers() {
        let queue = LockQueue::<u64>::default();
        queue.grant(Some(2));
        for p in [3, 4, 5, 6] {
            queue.defer(p);
        }
        assert_eq!(queue.take_peers(|p| p % 2 == 1), [3, 5]);
        assert!(queue.withdraw_peer(|p| *p == 6));
        assert!(!queue.withdraw_peer(|p| *p == 6));
        queue.release(2);
        assert_eq!(serve(&queue), ["lock 4"]);
    }
}
