//! Where a task is: moving it between the ready sets, the scheduled set, the dead set and
//! the terminal states, the retention indexes that forget finished tasks, and time passing
//! (`advance`: due tasks, expired leases, deadlines, retention).

use super::*;

impl Engine {
    /// Puts a task in its queue's ready set and marks it queued.
    pub(super) fn make_ready(&mut self, id: &[u8], place: Place) {
        let slot = self.tasks.slot_of(id).expect("present");
        let task = self.tasks.at_mut(slot);
        match place {
            Place::Keep => {}
            Place::Head => {
                task.order = self.next_head;
                self.next_head -= 1;
            }
            Place::Tail => {
                self.next_order += 1;
                task.order = self.next_order;
            }
        }
        let q = match self.queues.get_mut(&task.queue) {
            Some(q) => q,
            None => self.queues.entry(task.queue.clone()).or_default(),
        };
        ready_in(q, task, slot, &mut self.events);
        self.epoch += 1;
    }

    /// Takes a non-terminal task out of whichever set holds it (not the lease index's owner
    /// side, which `release_owner_index` handles).
    pub(super) fn unplace(&mut self, id: &[u8]) {
        let task = self.tasks.get(id).expect("present");
        let id = task.id.clone();
        let q = self.queues.entry(task.queue.clone()).or_default();
        match task.state {
            State::Queued => {
                let key = (Reverse(task.options.priority), task.order);
                q.ready.remove(&key);
                q.groups.remove(&task.options.group, &key);
                q.ready_by_age.remove(task.submitted_ms);
            }
            State::Scheduled { due_ms } => {
                q.scheduled -= 1;
                self.scheduled.remove(&(due_ms, id));
            }
            State::Leased { owner, until_ms } => {
                q.lease_ended(&task.options.group);
                self.leases.remove(&(until_ms, id.clone()));
                self.release_owner_index(owner, &id);
            }
            _ => {}
        }
    }

    pub(super) fn schedule(&mut self, id: &[u8], due_ms: u64) {
        let task = self.tasks.get_mut(id).expect("present");
        task.state = State::Scheduled { due_ms };
        let q = self.queues.entry(task.queue.clone()).or_default();
        q.scheduled += 1;
        q.note(
            &mut self.events,
            &task.id,
            events::EventKind::Scheduled,
            task.attempts,
        );
        self.scheduled.insert((due_ms, task.id.clone()));
    }

    /// Moves a task to the dead set and queues its fallback, if it has one.
    pub(super) fn die(&mut self, id: &[u8], now_ms: u64) {
        self.totals.dead += 1;
        let task = self.tasks.get(id).expect("present");
        if let Some(queue) = task.options.fallback.clone() {
            self.fallbacks.push(Fallback {
                queue,
                payload: task.payload.to_bytes(),
                origin: Origin {
                    id: task.id.clone(),
                    queue: task.queue.clone(),
                    error: task.last_error().cloned(),
                    attempts: task.attempts,
                },
            });
        }
        let queue = task.queue.clone();
        self.finish(
            id,
            State::Dead {
                finished_ms: now_ms,
            },
            now_ms,
        );
        let q = self.queues.get_mut(&queue).expect("a task's queue exists");
        if q.dead.len() > DEAD_PER_QUEUE_MAX {
            let (_, oldest) = q.dead.pop_first().expect("over the cap");
            self.forget_dead(&oldest);
        }
    }

    /// Forgets a dead task that has already left its queue's dead set.
    pub(super) fn forget_dead(&mut self, id: &Bytes) {
        if self.tasks.contains_key(id) {
            self.unretain(id);
            self.forget(id);
        }
    }

    /// A finished task's entry in its retention index: whether that is the dead tasks' index,
    /// and the key (when it is forgotten, its id).
    pub(super) fn retention_key(&self, task: &Task) -> (bool, (u64, Bytes)) {
        let dead = task.state.is_dead();
        let ms = if dead {
            self.dead_retention_ms
        } else {
            self.retention_ms
        };
        (dead, (Engine::forget_at(task, ms), task.id.clone()))
    }

    /// The retention index of dead tasks, or of done and cancelled ones.
    pub(super) fn retention_index(&mut self, dead: bool) -> &mut BTreeSet<(u64, Bytes)> {
        if dead {
            &mut self.dead_retained
        } else {
            &mut self.retained
        }
    }

    /// Takes finished task `id` out of its retention index.
    pub(super) fn unretain(&mut self, id: &[u8]) {
        let (dead, key) = self.retention_key(&self.tasks[id]);
        self.retention_index(dead).remove(&key);
    }

    /// Enters a terminal state and schedules the task to be forgotten.
    pub(super) fn finish(&mut self, id: &[u8], state: State, now_ms: u64) {
        let slot = self.tasks.slot_of(id).expect("present");
        self.finish_at(slot, state, now_ms);
    }

    /// [`Engine::finish`] of the task in `slot`. An ACK's end (`Done`) is counted in its
    /// queue's `acked` here, with its event: one lookup of the queue.
    pub(super) fn finish_at(&mut self, slot: Slot, state: State, now_ms: u64) {
        self.epoch += 1;
        let kind = match state {
            State::Done { .. } => events::EventKind::Done,
            State::Dead { .. } => events::EventKind::Dead,
            _ => events::EventKind::Cancelled,
        };
        let task = self.tasks.at_mut(slot);
        task.state = state;
        if let Some(q) = self.queues.get_mut(&task.queue) {
            if kind == events::EventKind::Done {
                q.acked += 1;
            }
            let at = self.events.clock_ms.max(now_ms);
            q.note_at(&mut self.events, at, &task.id, kind, task.attempts);
        }
        if let Some(deadline) = task.options.deadline_ms {
            self.deadlines.remove(&(deadline, task.id.clone()));
        }
        let id = task.id.clone();
        if let Some(batch) = task.options.batch.clone() {
            let outcome = if task.state.is_done() {
                task.result().cloned()
            } else {
                task.last_error().cloned()
            };
            self.batch_notes.push(BatchNote {
                batch,
                child: id.clone(),
                succeeded: task.state.is_done(),
                outcome,
            });
        }
        if task.state.is_dead() {
            let forget_at = Engine::forget_at(task, self.dead_retention_ms);
            self.queues
                .entry(task.queue.clone())
                .or_default()
                .dead
                .insert((now_ms, id.clone()));
            self.dead_retained.insert((forget_at, id));
        } else {
            let forget_at = Engine::forget_at(task, self.retention_ms);
            self.retained.insert((forget_at, id));
        }
    }

    /// When a finished task is forgotten: after the retention time, or at the end of its
    /// UNIQUE window if that is later. Derived, so a requeue finds its `retained` entry.
    pub(super) fn forget_at(task: &Task, retention_ms: u64) -> u64 {
        let finished = task.finished_ms().expect("a finished task");
        let window_end = task
            .options
            .unique
            .as_ref()
            .map_or(0, |(_, window)| task.submitted_ms.saturating_add(*window));
        finished.saturating_add(retention_ms).max(window_end)
    }

    /// Starts (or stops) noting the `advance` calls that change something, for a journal.
    pub fn set_recording(&mut self, on: bool) {
        self.advances = on.then(Vec::new);
    }

    /// The times of the `advance` calls that changed something since the last call.
    pub fn take_advances(&mut self) -> Vec<u64> {
        self.advances
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Every lease ends as a lost lease, owners in order (a restart: no connection from
    /// before it exists any more). Returns how many were leased. The attempts are spent, but
    /// the losses do not count toward a task's `lost_max`: a restart is not its doing.
    pub fn release_all(&mut self, now_ms: u64) -> usize {
        let mut owners: Vec<u64> = self.by_owner.keys().copied().collect();
        owners.sort_unstable();
        owners
            .into_iter()
            .map(|owner| self.release_leases_of(owner, now_ms, false))
            .sum()
    }

    /// Applies the passage of time up to `now_ms`.
    pub fn advance(&mut self, now_ms: u64) {
        if self.advances.is_none() {
            self.advance_unrecorded(now_ms);
            return;
        }
        let before = (
            self.scheduled.len(),
            self.leases.len(),
            self.deadlines.len(),
            self.retained.len(),
            self.dead_retained.len(),
            self.cron_fired,
            self.batches_fired.len(),
        );
        self.advance_unrecorded(now_ms);
        let after = (
            self.scheduled.len(),
            self.leases.len(),
            self.deadlines.len(),
            self.retained.len(),
            self.dead_retained.len(),
            self.cron_fired,
            self.batches_fired.len(),
        );
        // Every step of `advance` removes from one of these and never adds to the first
        // three; a task that finished is retained only after leaving another. (A lost lease
        // that backs off moves from `leases` to `scheduled`: the lease count still fell.)
        if before != after {
            if let Some(advances) = self.advances.as_mut() {
                advances.push(now_ms);
            }
        }
    }

    pub(super) fn advance_unrecorded(&mut self, now_ms: u64) {
        self.events.clock_ms = self.events.clock_ms.max(now_ms);
        self.fire_crons(now_ms);
        self.forget_batches(now_ms);
        while let Some((due, _)) = self.scheduled.first() {
            if *due > now_ms {
                break;
            }
            let (_, id) = self.scheduled.pop_first().expect("non-empty");
            let queue = &self.tasks.get(&id).expect("a scheduled task exists").queue;
            self.queues.get_mut(queue).expect("its queue").scheduled -= 1;
            self.make_ready(&id, Place::Keep);
        }
        while let Some((until, _)) = self.leases.first() {
            if *until > now_ms {
                break;
            }
            let (_, id) = self.leases.pop_first().expect("non-empty");
            let task = self.tasks.get(&id).expect("a leased task exists");
            if let State::Leased { owner, .. } = task.state {
                if let Some(q) = self.queues.get_mut(&task.queue) {
                    q.lease_ended(&task.options.group);
                }
                self.release_owner_index(owner, &id);
                self.lose_lease(&id, now_ms, true);
            }
        }
        while let Some((deadline, _)) = self.deadlines.first() {
            if *deadline > now_ms {
                break;
            }
            let (_, id) = self.deadlines.pop_first().expect("non-empty");
            self.unplace(&id);
            if let Some(task) = self.tasks.get_mut(&id) {
                task.set_last_error(Some(Bytes::from_static(b"TTL expired")));
            }
            self.die(&id, now_ms);
        }
        while let Some((at, _)) = self.retained.first() {
            if *at > now_ms && self.retained.len() <= RETAINED_TASKS_MAX {
                break;
            }
            let (_, id) = self.retained.pop_first().expect("non-empty");
            self.prefetch_retained();
            self.forget(&id);
        }
        while let Some((at, _)) = self.dead_retained.first() {
            if *at > now_ms {
                break;
            }
            let (_, id) = self.dead_retained.pop_first().expect("non-empty");
            self.forget(&id);
        }
    }

    /// Brings the next evictions' memory into the cache. A finished task is cold by the time
    /// it is forgotten (at a high job rate the retention's cap evicts one per ACK, the oldest
    /// of 100k), and forgetting it is a chain of misses: the id's bytes, to hash them; the
    /// index's bucket; the task's cell. So each eviction fetches the id bytes of the one two
    /// ahead, and looks up (bucket) and fetches (cell) the next one, whose bytes came in
    /// last time.
    pub(super) fn prefetch_retained(&self) {
        let mut ahead = self.retained.iter();
        if let Some((_, next)) = ahead.next() {
            self.tasks.prefetch(next);
        }
        if let Some((_, after)) = ahead.next() {
            crate::keyspace::prefetch::prefetch_read(after.as_ptr());
        }
    }

    /// Drops a finished task for good (its retention ended, or the cap was reached).
    pub(super) fn forget(&mut self, id: &Bytes) {
        if !self.extras.is_empty() {
            self.extras.remove(id);
        }
        if let Some(task) = self.tasks.remove(id) {
            if let Some((key, _)) = &task.options.unique {
                let slot = (task.queue.clone(), key.clone());
                if self.unique.get(&slot).is_some_and(|(owner, _)| owner == id) {
                    self.unique.remove(&slot);
                }
            }
            if let (Some(q), Some(died)) = (self.queues.get_mut(&task.queue), task.finished_ms()) {
                if task.state.is_dead() {
                    q.dead.remove(&(died, id.clone()));
                }
            }
        }
    }
}
