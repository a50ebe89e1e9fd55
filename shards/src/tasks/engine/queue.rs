//! One queue's state inside the engine: its ready set, paused flag, limits (in flight,
//! rate, per group) and what it takes to lease its next task.

use super::*;

#[derive(Default, Debug)]
pub(super) struct Queue {
    pub(super) ready: ready::ReadySet,
    /// Submission times of ready tasks, for the age of the oldest.
    pub(super) ready_by_age: ready::ReadyAges,
    pub(super) scheduled: usize,
    pub(super) leased: usize,
    /// Dead tasks by (time of death, id): oldest first.
    pub(super) dead: BTreeSet<(u64, Bytes)>,
    pub(super) paused: bool,
    pub(super) concurrency: Option<u32>,
    /// (at most n, per window ms), in any window of that length (a sliding window).
    pub(super) rate: Option<(u32, u64)>,
    /// The times of the leases taken in the last window, oldest first (at most n).
    pub(super) rate_log: VecDeque<u64>,
    /// Every state change of its tasks (TASK.EVENTS).
    pub(super) events: events::EventLog,
    /// Groups, their limits and turns (`groups`).
    pub(super) groups: groups::Groups,
    pub(super) submitted: u64,
    pub(super) acked: u64,
    pub(super) failed: u64,
    /// Failures given another attempt.
    pub(super) retried: u64,
    /// Submit to first start, and a lease's start to its ACK (metrics; since start).
    pub(super) waiting_ms: latency::Histogram,
    pub(super) running_ms: latency::Histogram,
    /// Who fetched from it lately: owner (a client, or a worker identity) -> when it last
    /// did (metrics: TASK.STATS' `workers`; not journaled).
    pub(super) fetchers: HashMap<u64, u64, Hasher>,
}

/// A fetcher counts as one of a queue's workers for this long after its last fetch.
pub const FETCHER_WINDOW_MS: u64 = 60_000;
/// Most fetchers a queue remembers (past it, those gone quiet are forgotten first, and a
/// new one is not noted while every one is recent).
pub const FETCHERS_MAX: usize = 10_000;

impl Queue {
    /// Notes that `owner` fetched from the queue at `now_ms`.
    pub(super) fn note_fetcher(&mut self, owner: u64, now_ms: u64) {
        if self.fetchers.len() >= FETCHERS_MAX && !self.fetchers.contains_key(&owner) {
            self.fetchers
                .retain(|_, at| now_ms.saturating_sub(*at) <= FETCHER_WINDOW_MS);
            if self.fetchers.len() >= FETCHERS_MAX {
                return;
            }
        }
        self.fetchers.insert(owner, now_ms);
    }

    /// How many fetched within the last [`FETCHER_WINDOW_MS`].
    pub(super) fn workers(&self, now_ms: u64) -> usize {
        self.fetchers
            .values()
            .filter(|at| now_ms.saturating_sub(**at) <= FETCHER_WINDOW_MS)
            .count()
    }

    pub(super) fn waiting(&self) -> usize {
        self.ready.len() + self.scheduled
    }

    /// Whether one more lease is allowed now (concurrency and rate limits).
    /// Whether one more task may be leased now. A pure check (a blocked fetch asks it
    /// without leasing): the rate window rolls over only when a lease is taken
    /// ([`Queue::count_lease`]), so the engine's state follows from its leases alone.
    pub(super) fn may_lease(&self, now_ms: u64, in_flight_max: usize) -> bool {
        if self.paused || self.ready.is_empty() {
            return false;
        }
        if matches!(self.concurrency, Some(max) if self.leased >= max as usize)
            || self.leased >= in_flight_max
        {
            return false;
        }
        // A lease is allowed while fewer than the limit were taken in the window that ends
        // now, so no window of that length ever holds more.
        if let Some((max, per_ms)) = self.rate {
            if groups::leases_in_window(&self.rate_log, now_ms, per_ms) >= max as usize {
                return false;
            }
        }
        !self.groups.on || self.groups.any_may_lease(now_ms)
    }

    /// Takes the next task to lease out of the ready sets: the first in priority order, or,
    /// once the queue has groups, the head of the group whose turn it is.
    pub(super) fn take_next(&mut self, now_ms: u64) -> Option<(ReadyKey, Slot)> {
        let key = if self.groups.on {
            self.groups.pick(now_ms)?
        } else {
            self.ready.first()?.0
        };
        let slot = self.ready.remove(&key)?;
        Some((key, slot))
    }

    /// Counts a lease taken at `now_ms` against the rate limit's window.
    pub(super) fn count_lease(&mut self, now_ms: u64) {
        self.leased += 1;
        if let Some((_, per_ms)) = self.rate {
            groups::log_lease(&mut self.rate_log, now_ms, per_ms);
        }
    }

    /// A lease of a task of `group` ended (any way).
    pub(super) fn lease_ended(&mut self, group: &Option<Bytes>) {
        self.leased -= 1;
        self.groups.lease_ended(group);
    }
}
