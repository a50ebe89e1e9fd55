//! A worker's side of the life cycle: fetching (leasing in queue order, within limits),
//! acknowledging, failing (retry with backoff, fallback, dead), extending, cancelling, and
//! leases handed back or lost with their owner.

use super::*;

impl Engine {
    /// Leases up to `count` tasks from `queues`, taking from the first queue before the next.
    pub fn fetch(
        &mut self,
        queues: &[Bytes],
        count: usize,
        lease_ms: Option<u64>,
        owner: u64,
        now_ms: u64,
    ) -> Vec<Leased> {
        let mut leased = Vec::new();
        self.fetch_each(queues, count, lease_ms, owner, now_ms, |task| {
            leased.push(task)
        });
        leased
    }

    /// [`Engine::fetch`], handing each leased task to `take` as it is leased (no vector of
    /// them: a worker's reply is built straight from them). Returns how many.
    pub fn fetch_each(
        &mut self,
        queues: &[Bytes],
        count: usize,
        lease_ms: Option<u64>,
        owner: u64,
        now_ms: u64,
        mut take: impl FnMut(Leased),
    ) -> usize {
        self.advance(now_ms);
        let mut leased = 0;
        let quiet = self.quiet.contains(&owner);
        let in_flight_max = self.in_flight_max;
        for name in queues {
            // One lookup per queue: the loop below borrows only the queue and the engine's
            // other fields.
            let Some(q) = self.queues.get_mut(name) else {
                continue;
            };
            q.note_fetcher(owner, now_ms);
            if quiet {
                continue;
            }
            while leased < count {
                if !q.may_lease(now_ms, in_flight_max) {
                    break;
                }
                let Some((_, slot)) = q.take_next(now_ms) else {
                    break;
                };
                q.count_lease(now_ms);
                let task = self.tasks.at_mut(slot);
                let id = task.id.clone();
                q.ready_by_age.remove(task.submitted_ms);
                let lease = lease_ms
                    .or(task.options.lease_ms)
                    .unwrap_or(LEASE_MS_DEFAULT)
                    .min(LEASE_MS_MAX);
                let until_ms = now_ms.saturating_add(lease);
                task.state = State::Leased { owner, until_ms };
                task.attempts += 1;
                if task.attempts == 1 {
                    q.waiting_ms
                        .observe(now_ms.saturating_sub(task.submitted_ms));
                }
                q.note(
                    &mut self.events,
                    &id,
                    events::EventKind::Leased,
                    task.attempts,
                );
                self.leases.insert((until_ms, id.clone()));
                owners::index(&mut self.by_owner, owner, id.clone());
                leased += 1;
                take(Leased {
                    id: id.clone(),
                    queue: task.queue.clone(),
                    payload: task.payload.to_bytes(),
                    attempt: task.attempts,
                    origin: task.origin().cloned(),
                });
                self.lease_starts
                    .started(id, now_ms, &self.tasks, self.leases.len());
            }
        }
        leased
    }

    /// The first of `queues` that has ready tasks but already `IN_FLIGHT_PER_QUEUE_MAX`
    /// leased (a fetch that got nothing reports it as an error).
    pub fn in_flight_full<'a>(&self, queues: &'a [Bytes]) -> Option<&'a Bytes> {
        queues.iter().find(|name| {
            self.queues
                .get(*name)
                .is_some_and(|q| !q.ready.is_empty() && q.leased >= self.in_flight_max)
        })
    }

    /// Whether a fetch of `queues` would lease something now (for blocked fetches), to any
    /// owner that is not quiet (with quiet owners about: never, so that a quiet worker's
    /// blocking fetch is never taken for one that cannot wait).
    pub fn has_ready(&mut self, queues: &[Bytes], now_ms: u64) -> bool {
        self.advance(now_ms);
        if !self.quiet.is_empty() {
            return false;
        }
        let max = self.in_flight_max;
        queues.iter().any(|name| {
            self.queues
                .get(name)
                .is_some_and(|q| q.may_lease(now_ms, max))
        })
    }

    /// Checks that `owner` holds the lease on `id`, and takes the lease away; returns the
    /// task's slot.
    pub(super) fn take_lease(
        &mut self,
        id: &[u8],
        owner: u64,
        now_ms: u64,
    ) -> Result<Slot, TaskError> {
        self.advance(now_ms);
        let slot = self.tasks.slot_of(id).ok_or(TaskError::NoSuchTask)?;
        let task = self.tasks.at(slot);
        match task.state {
            State::Leased {
                owner: holder,
                until_ms,
            } if holder == owner => {
                self.epoch += 1;
                let (id, queue) = (task.id.clone(), task.queue.clone());
                let group = task.options.group.clone();
                self.leases.remove(&(until_ms, id.clone()));
                self.release_owner_index(owner, &id);
                if let Some(q) = self.queues.get_mut(&queue) {
                    q.lease_ended(&group);
                }
                Ok(slot)
            }
            ref state if state.is_terminal() => Err(TaskError::Finished),
            _ => Err(TaskError::NotLeased),
        }
    }

    /// How many tasks `owner` holds leased here.
    pub fn leases_of(&self, owner: u64) -> usize {
        self.by_owner.get(&owner).map_or(0, |ids| ids.len())
    }

    pub(super) fn release_owner_index(&mut self, owner: u64, id: &Bytes) {
        if let Some(ids) = self.by_owner.get_mut(&owner) {
            if ids.remove(id) {
                self.by_owner.remove(&owner);
            }
        }
    }

    pub fn ack(
        &mut self,
        id: &[u8],
        owner: u64,
        result: Option<Bytes>,
        now_ms: u64,
    ) -> Result<(), TaskError> {
        if result.as_ref().is_some_and(|r| r.len() > PAYLOAD_BYTES_MAX) {
            return Err(TaskError::TooLarge("result"));
        }
        let slot = self.take_lease(id, owner, now_ms)?;
        let queue = self.tasks.at(slot).queue.clone();
        self.note_lease_ended(id, &queue, true, now_ms);
        self.tasks.at_mut(slot).set_result(result);
        self.totals.acked += 1;
        // (Its queue's `acked` is counted by `finish_at`, with the event.)
        self.finish_at(
            slot,
            State::Done {
                finished_ms: now_ms,
            },
            now_ms,
        );
        Ok(())
    }

    pub fn fail(
        &mut self,
        id: &[u8],
        owner: u64,
        error: Option<Bytes>,
        retry: Retry,
        now_ms: u64,
    ) -> Result<FailOutcome, TaskError> {
        if error.as_ref().is_some_and(|e| e.len() > PAYLOAD_BYTES_MAX) {
            return Err(TaskError::TooLarge("error"));
        }
        let slot = self.take_lease(id, owner, now_ms)?;
        let queue = self.tasks.at(slot).queue.clone();
        self.note_lease_ended(id, &queue, false, now_ms);
        let task = self.tasks.get_mut(id).expect("checked");
        if let Retry::Snooze(ms) = retry {
            // Not a failure: the attempt is given back and the error left as it was.
            task.attempts -= 1;
            let due = now_ms.saturating_add(ms);
            self.schedule(id, due);
            return Ok(FailOutcome::SnoozedUntil(due));
        }
        task.set_last_error(error);
        if let Some(q) = self.queues.get_mut(&task.queue) {
            q.failed += 1;
        }
        self.totals.failed += 1;
        let attempts_left = task.attempts <= task.options.retries;
        let delay = match retry {
            Retry::Never | Retry::Snooze(_) => None,
            _ if !attempts_left => None,
            Retry::In(ms) => Some(ms),
            Retry::Backoff => Some(backoff_ms(
                task.options.backoff_base_ms,
                task.options.backoff_cap_ms,
                task.attempts,
                jitter(id, task.attempts),
            )),
        };
        match delay {
            Some(ms) => {
                let due = now_ms.saturating_add(ms);
                self.totals.retried += 1;
                if let Some(q) = self.queues.get_mut(&queue) {
                    q.retried += 1;
                }
                self.schedule(id, due);
                Ok(FailOutcome::RetryAt(due))
            }
            None => {
                self.die(id, now_ms);
                Ok(FailOutcome::Dead)
            }
        }
    }

    /// Extends `owner`'s lease on `id` to `ms` from now; returns the new expiry.
    pub fn extend(
        &mut self,
        id: &[u8],
        owner: u64,
        ms: u64,
        now_ms: u64,
    ) -> Result<u64, TaskError> {
        self.take_lease(id, owner, now_ms)?;
        let until_ms = now_ms.saturating_add(ms.min(LEASE_MS_MAX));
        let task = self.tasks.get_mut(id).expect("checked");
        task.state = State::Leased { owner, until_ms };
        let id = task.id.clone();
        if let Some(q) = self.queues.get_mut(&task.queue) {
            q.leased += 1;
            q.groups.lease_resumed(&task.options.group);
        }
        self.leases.insert((until_ms, id.clone()));
        owners::index(&mut self.by_owner, owner, id);
        Ok(until_ms)
    }

    /// Cancels a task that has not finished, wherever it is (a leased task's worker then
    /// gets an error on ACK).
    pub fn cancel(&mut self, id: &[u8], now_ms: u64) -> Result<(), TaskError> {
        self.advance(now_ms);
        let task = self.tasks.get(id).ok_or(TaskError::NoSuchTask)?;
        if task.state.is_terminal() {
            return Err(TaskError::Finished);
        }
        self.unplace(id);
        self.totals.cancelled += 1;
        self.finish(
            id,
            State::Cancelled {
                finished_ms: now_ms,
            },
            now_ms,
        );
        Ok(())
    }

    /// Requeues, at the head of their queues, every task leased by `owner` (its connection
    /// closed). A task whose attempts are spent dies instead. Returns how many were leased.
    pub fn release_owner(&mut self, owner: u64, now_ms: u64) -> usize {
        self.release_leases_of(owner, now_ms, true)
    }

    /// [`Engine::release_owner`]; `counts`: whether the losses count toward `lost_max`.
    pub(super) fn release_leases_of(&mut self, owner: u64, now_ms: u64, counts: bool) -> usize {
        let Some(ids) = self.by_owner.remove(&owner) else {
            return 0;
        };
        // In id order, not the set's (seeded) hash order: which task ends up first at the
        // head of its queue must not depend on a hash seed, or a journal replay would differ.
        let ids = ids.into_sorted();
        let count = ids.len();
        for id in ids {
            if let Some(task) = self.tasks.get(&id) {
                if let State::Leased { until_ms, .. } = task.state {
                    self.leases.remove(&(until_ms, id.clone()));
                    if let Some(q) = self.queues.get_mut(&task.queue) {
                        q.lease_ended(&task.options.group);
                    }
                    self.lose_lease(&id, now_ms, counts);
                }
            }
        }
        count
    }

    /// Hands back tasks leased to `owner` that never reached it (a blocked fetch that won
    /// on several shards at once keeps only what it can deliver): they go back to the head of
    /// their queues and the attempt is not counted. Returns how many were handed back.
    pub fn unlease(&mut self, ids: &[Bytes], owner: u64, now_ms: u64) -> usize {
        let mut count = 0;
        for id in ids {
            if self.take_lease(id, owner, now_ms).is_err() {
                continue;
            }
            self.tasks.get_mut(id).expect("checked").attempts -= 1;
            self.make_ready(id, Place::Head);
            count += 1;
        }
        count
    }

    /// A lease ended without ACK or FAIL (expiry, disconnect, a worker gone): that counts
    /// as an attempt. The first loss sends the task back to the head of its queue; later
    /// ones back off as a retry would (a task that crashes its worker must not crash the
    /// next one at once), and the `lost_max`-th (default 3) kills it whatever its retries:
    /// a poison pill stops there. A restart's loss (`counts` false) is not the task's doing
    /// and only costs the attempt.
    pub(super) fn lose_lease(&mut self, id: &Bytes, now_ms: u64, counts: bool) {
        self.epoch += 1;
        self.totals.leases_lost += 1;
        let task = self.tasks.get_mut(id).expect("a leased task exists");
        if counts {
            task.lost_leases += 1;
        }
        if task.lost_leases >= task.options.lost_max.max(1) && counts {
            let error = format!(
                "lease lost {} times (its worker crashed, stalled or went away each time)",
                task.lost_leases
            );
            task.set_last_error(Some(Bytes::from(error)));
            self.die(id, now_ms);
            return;
        }
        if task.last_error().is_none() {
            task.set_last_error(Some(Bytes::from_static(b"lease lost")));
        }
        if task.attempts > task.options.retries {
            self.die(id, now_ms);
            return;
        }
        if task.lost_leases >= 2 {
            let delay = backoff_ms(
                task.options.backoff_base_ms,
                task.options.backoff_cap_ms,
                task.lost_leases - 1,
                jitter(id, task.attempts),
            );
            self.schedule(id, now_ms.saturating_add(delay));
            return;
        }
        self.make_ready(id, Place::Head);
    }
}
