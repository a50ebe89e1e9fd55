//! A queue's two latency histograms for metrics: from submit to a task's first start
//! (waiting), and from a lease's start to its ACK (running). Fixed bucket bounds, as
//! Prometheus histograms have them. They count since the shard started: they are not in the
//! journal or the snapshots, and a lease that was in flight across a restart is not counted.

use super::*;

/// Upper bounds of the buckets, in milliseconds (a last bucket holds the rest).
pub const LATENCY_BOUNDS_MS: [u64; 12] = [
    1, 5, 10, 25, 50, 100, 250, 500, 1_000, 5_000, 30_000, 300_000,
];

/// Counts per bucket (not cumulative), with the sum and count of what was observed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    pub buckets: [u64; LATENCY_BOUNDS_MS.len() + 1],
    pub sum_ms: u64,
    pub count: u64,
}

impl Histogram {
    pub fn observe(&mut self, ms: u64) {
        let at = LATENCY_BOUNDS_MS
            .iter()
            .position(|&bound| ms <= bound)
            .unwrap_or(LATENCY_BOUNDS_MS.len());
        self.buckets[at] += 1;
        self.sum_ms = self.sum_ms.saturating_add(ms);
        self.count += 1;
    }

    pub fn add(&mut self, other: &Histogram) {
        for (mine, theirs) in self.buckets.iter_mut().zip(other.buckets) {
            *mine += theirs;
        }
        self.sum_ms = self.sum_ms.saturating_add(other.sum_ms);
        self.count += other.count;
    }
}

/// Leases started and not yet ended, for the running time: removed when the lease ends by
/// ACK or FAIL; those ended otherwise (expiry, a closed connection, cancel) are dropped when
/// the map outgrows the leases in flight.
#[derive(Default, Debug)]
pub(super) struct LeaseStarts {
    started: HashMap<Bytes, u64, Hasher>,
}

impl LeaseStarts {
    /// A lease of `id` started now (its first start's waiting time is counted where it is
    /// leased). Those ended otherwise than by ACK or FAIL are dropped once the map outgrows
    /// the `leased` leases in flight.
    pub(super) fn started(&mut self, id: Bytes, now_ms: u64, tasks: &TaskTable, leased: usize) {
        self.started.insert(id, now_ms);
        if self.started.len() > 2 * leased + 1024 {
            self.started.retain(|id, _| {
                tasks
                    .get(id)
                    .is_some_and(|t| matches!(t.state, State::Leased { .. }))
            });
        }
    }
}

impl Engine {
    /// A lease of `id` (in `queue`) ended by ACK (`acked`) or FAIL.
    pub(super) fn note_lease_ended(&mut self, id: &[u8], queue: &[u8], acked: bool, now_ms: u64) {
        let Some(started) = self.lease_starts.started.remove(id) else {
            return;
        };
        if let (true, Some(q)) = (acked, self.queues.get_mut(queue)) {
            q.running_ms.observe(now_ms.saturating_sub(started));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_observation_lands_in_the_first_bucket_that_holds_it() {
        let mut h = Histogram::default();
        for ms in [0, 1, 2, 300_000, 300_001] {
            h.observe(ms);
        }
        assert_eq!(h.buckets[0], 2);
        assert_eq!(h.buckets[1], 1);
        assert_eq!(h.buckets[LATENCY_BOUNDS_MS.len() - 1], 1);
        assert_eq!(h.buckets[LATENCY_BOUNDS_MS.len()], 1);
        assert_eq!((h.count, h.sum_ms), (5, 600_004));
    }
}
