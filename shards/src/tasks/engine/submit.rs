//! Submitting: ids (generated with the queue's slot tag, or the client's own), unique keys,
//! holds for batches and flows, and a new task's first place (ready, scheduled or held).

use super::*;

impl Engine {
    /// The id a new task in `queue` gets: the queue's slot tag, so the id routes to the
    /// queue's shard, then a sequence number.
    pub(super) fn new_id(&mut self, queue: &[u8]) -> Bytes {
        self.next_id += 1;
        let tag = slot_tag(key_slot(queue));
        let mut hex = [0u8; 16];
        let mut n = self.next_id;
        let mut at = hex.len();
        loop {
            at -= 1;
            hex[at] = b"0123456789abcdef"[(n & 0xf) as usize];
            n >>= 4;
            if n == 0 {
                break;
            }
        }
        // One allocation of exactly its length: a `Bytes` of a fuller vector would allocate
        // a second header.
        Bytes::from([b"{".as_slice(), tag, b"}", &hex[at..]].concat())
    }

    /// A caller's ID, given the queue's tag unless it already routes to the queue's slot.
    pub fn custom_id(queue: &[u8], id: &Bytes) -> Bytes {
        let slot = key_slot(queue);
        if key_slot(id) == slot {
            return id.clone();
        }
        let tag = slot_tag(slot);
        Bytes::from([b"{".as_slice(), tag, b"}", id].concat())
    }

    pub fn submit(
        &mut self,
        queue: &[u8],
        payload: Bytes,
        options: SubmitOptions,
        now_ms: u64,
    ) -> Result<(Bytes, bool), TaskError> {
        self.submit_with_origin(queue, payload, options, None, now_ms)
    }

    /// Submits a fallback task taken from `take_fallbacks`.
    pub fn submit_fallback(&mut self, fallback: Fallback, now_ms: u64) -> Result<Bytes, TaskError> {
        let (id, _) = self.submit_with_origin(
            &fallback.queue,
            fallback.payload,
            SubmitOptions::default(),
            Some(fallback.origin),
            now_ms,
        )?;
        self.totals.fallbacks += 1;
        Ok(id)
    }

    pub(super) fn submit_with_origin(
        &mut self,
        queue: &[u8],
        payload: Bytes,
        options: SubmitOptions,
        origin: Option<Origin>,
        now_ms: u64,
    ) -> Result<(Bytes, bool), TaskError> {
        self.advance(now_ms);
        self.submit_now(queue, payload, options, origin, now_ms)
    }

    /// A submit with the engine's time already advanced (a cron tick fires inside `advance`).
    pub(super) fn submit_now(
        &mut self,
        queue: &[u8],
        payload: Bytes,
        options: SubmitOptions,
        origin: Option<Origin>,
        now_ms: u64,
    ) -> Result<(Bytes, bool), TaskError> {
        if too_long(queue) {
            return Err(TaskError::TooLarge("queue name"));
        }
        if payload.len() > PAYLOAD_BYTES_MAX {
            return Err(TaskError::TooLarge("payload"));
        }
        // The queue's stored name is shared by its tasks: no copy per submit.
        let (queue, waiting) = match self.queues.get_key_value(queue) {
            Some((name, q)) => (name.clone(), q.waiting()),
            None => (Bytes::copy_from_slice(queue), 0),
        };
        if let Some(existing) = self.live_unique(&queue, &options, now_ms)? {
            return Ok((existing, false));
        }
        if waiting >= QUEUE_TASKS_MAX {
            return Err(TaskError::QueueFull);
        }
        let id = self.id_for(&queue, &options)?;
        if let Some((key, window)) = &options.unique {
            let until = now_ms.saturating_add(*window);
            self.unique
                .insert((queue.clone(), key.clone()), (id.clone(), until));
        }
        self.next_order += 1;
        let (hold, due) = (options.hold, options.due_ms);
        // The reply gets a copy: a clone would give the task's id a shared header (32 more
        // bytes for as long as the task lives), and nothing else clones it while it waits.
        let reply = Bytes::copy_from_slice(&id);
        let mut task = Task::new(
            id,
            queue.clone(),
            payload,
            options,
            State::Queued,
            now_ms,
            self.next_order,
        );
        if let Some(origin) = origin {
            task.set_origin(Some(origin));
        }
        if let Some(deadline) = task.options.deadline_ms {
            self.deadlines.insert((deadline, task.id.clone()));
        }
        self.totals.submitted += 1;
        let slot = self.tasks.insert_new(task);
        let q = self.queues.entry(queue).or_default();
        q.submitted += 1;
        match due {
            _ if hold => self.hold(&reply),
            Some(due) if due > now_ms => self.schedule(&reply, due),
            _ => {
                ready_in(q, self.tasks.at_mut(slot), slot, &mut self.events);
                self.epoch += 1;
            }
        }
        Ok((reply, true))
    }

    /// A new task submitted HOLD: it waits for TASK.RELEASE.
    pub(super) fn hold(&mut self, id: &[u8]) {
        let task = self.tasks.get_mut(id).expect("present");
        task.state = State::Held;
        if let Some(q) = self.queues.get_mut(&task.queue) {
            q.note(&mut self.events, &task.id, events::EventKind::Held, 0);
        }
    }

    /// The task that holds a submission's UNIQUE key on `queue`, if it is still live or its
    /// window has not passed: the submission is then that task.
    pub(super) fn live_unique(
        &self,
        queue: &Bytes,
        options: &SubmitOptions,
        now_ms: u64,
    ) -> Result<Option<Bytes>, TaskError> {
        let Some((key, _)) = &options.unique else {
            return Ok(None);
        };
        if too_long(key) {
            return Err(TaskError::TooLarge("unique key"));
        }
        if let Some((id, until)) = self.unique.get(&(queue.clone(), key.clone())) {
            let live = self.tasks.get(id).is_some_and(|t| !t.state.is_terminal());
            if live || now_ms < *until {
                return Ok(Some(id.clone()));
            }
        }
        Ok(None)
    }

    /// A new task's id: the submitter's own (tagged with the queue), or a fresh one.
    pub(super) fn id_for(
        &mut self,
        queue: &Bytes,
        options: &SubmitOptions,
    ) -> Result<Bytes, TaskError> {
        match &options.id {
            Some(id) if too_long(id) => Err(TaskError::TooLarge("task id")),
            Some(id) => {
                let id = Engine::custom_id(queue, id);
                if self.tasks.contains_key(&id) {
                    return Err(TaskError::IdExists);
                }
                self.note_id(&id);
                Ok(id)
            }
            // A caller's id may take the form of one of ours ("{tag}1f"): skip those taken.
            // Past the highest such number no id can be, and the lookup (a cold probe of
            // the index) is skipped.
            None => loop {
                let id = self.new_id(queue);
                if self.next_id > self.others_max {
                    debug_assert!(!self.tasks.contains_key(&id), "a fresh id is free");
                    return Ok(id);
                }
                if !self.tasks.contains_key(&id) {
                    return Ok(id);
                }
            },
        }
    }
}
