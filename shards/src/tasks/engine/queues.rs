//! A queue's settings and reports: its stats, the queue names, its dead set and requeueing
//! from it, pausing, and its limits (concurrency, rate, per group).

use super::*;

impl Engine {
    pub fn queue_stats(&self, queue: &[u8], now_ms: u64) -> Option<QueueStats> {
        let q = self.queues.get(queue)?;
        let oldest_age_ms = q
            .ready_by_age
            .oldest()
            .map_or(0, |at| now_ms.saturating_sub(at));
        Some(QueueStats {
            queued: q.ready.len(),
            scheduled: q.scheduled,
            leased: q.leased,
            dead: q.dead.len(),
            oldest_age_ms,
            submitted: q.submitted,
            acked: q.acked,
            failed: q.failed,
            retried: q.retried,
            waiting_ms: q.waiting_ms.clone(),
            running_ms: q.running_ms.clone(),
            paused: q.paused,
            concurrency: q.concurrency,
            rate: q.rate,
            groups: q.groups.count(),
            workers: q.workers(now_ms),
            group_concurrency: q.groups.concurrency,
            group_rate: q.groups.rate,
        })
    }

    /// Every queue this shard has seen, sorted.
    pub fn queue_names(&self) -> Vec<Bytes> {
        let mut names: Vec<Bytes> = self.queues.keys().cloned().collect();
        names.sort();
        names
    }

    /// The dead tasks of `queue`, oldest first.
    pub fn dead(&self, queue: &[u8]) -> Vec<Bytes> {
        self.queues.get(queue).map_or_else(Vec::new, |q| {
            q.dead.iter().map(|(_, id)| id.clone()).collect()
        })
    }

    /// Puts a dead task back in its queue with fresh attempts.
    pub fn requeue(&mut self, id: &[u8], now_ms: u64) -> Result<(), TaskError> {
        self.advance(now_ms);
        let task = self.tasks.get(id).ok_or(TaskError::NoSuchTask)?;
        if !task.state.is_dead() {
            return Err(TaskError::NotDead);
        }
        let id = task.id.clone();
        self.revive(&id);
        Ok(())
    }

    /// Requeues every dead task of `queue`; returns how many.
    pub fn requeue_queue(&mut self, queue: &[u8], now_ms: u64) -> usize {
        self.advance(now_ms);
        let Some(q) = self.queues.get_mut(queue) else {
            return 0;
        };
        let dead: Vec<Bytes> = q.dead.iter().map(|(_, id)| id.clone()).collect();
        for id in &dead {
            self.revive(id);
        }
        dead.len()
    }

    /// A dead task back at the end of its queue with fresh attempts and lost leases.
    pub(super) fn revive(&mut self, id: &Bytes) {
        self.unretain(id);
        let task = self.tasks.get_mut(id).expect("a dead task is known");
        let died = task.finished_ms().expect("a dead task has finished");
        task.attempts = 0;
        task.lost_leases = 0;
        if let Some(q) = self.queues.get_mut(&task.queue) {
            q.dead.remove(&(died, id.clone()));
        }
        self.make_ready(id, Place::Tail);
    }

    pub fn set_paused(&mut self, queue: &[u8], paused: bool) {
        self.epoch += 1;
        self.queues
            .entry(Bytes::copy_from_slice(queue))
            .or_default()
            .paused = paused;
    }

    /// Sets (or with `None`, clears) a queue's concurrency and rate limits.
    pub fn set_limits(&mut self, queue: &[u8], concurrency: Option<u32>, rate: Option<(u32, u64)>) {
        self.epoch += 1;
        let q = self
            .queues
            .entry(Bytes::copy_from_slice(queue))
            .or_default();
        q.concurrency = concurrency;
        if q.rate != rate {
            q.rate = rate;
            q.rate_log.clear();
        }
    }

    /// Sets (or with `None`, clears) the limits each group of a queue has.
    pub fn set_group_limits(
        &mut self,
        queue: &[u8],
        concurrency: Option<u32>,
        rate: Option<(u32, u64)>,
    ) {
        self.epoch += 1;
        let q = self
            .queues
            .entry(Bytes::copy_from_slice(queue))
            .or_default();
        q.groups.concurrency = concurrency;
        if q.groups.rate != rate {
            q.groups.rate = rate;
            for state in q.groups.by_key.values_mut() {
                state.rate_log.clear();
            }
        }
    }
}
