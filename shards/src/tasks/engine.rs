//! `Engine`: one shard's tasks. Queues of ready tasks ordered by (priority, order), the
//! scheduled set (delays and retry backoffs), leases by expiry and by owner, the dead set, and
//! finished tasks kept for a bounded time. Pure and synchronous: the caller passes the time
//! and the client id; `advance` applies everything that time implies (due tasks, expired
//! leases, deadlines, retention) and every command calls it first.
//!
//! Invariants (checked by `check_invariants` in tests after every step of a model proptest):
//! a task is in exactly one of a queue's ready set, the scheduled set, the lease set, or a
//! terminal state; a leased task is in its owner's lease index; every task reaches one
//! terminal state once and is counted there once.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use bytes::Bytes;

use super::model::*;
use super::table::{Slot, TaskTable};

/// Task ids and queue names come from clients; foldhash is seeded per process.
type Hasher = foldhash::fast::RandomState;

mod admin;
mod batches;
mod crons;
mod events;
mod extras;
mod groups;
mod owners;
mod ready;
mod snapshot;
use crate::slot::{key_slot, slot_tag};
pub use admin::{Cursor, Listed, LIST_SCAN_MAX};
pub use batches::{Batch, BatchNote, OnFail, Order, BATCH_CHILDREN_MAX};
pub use crons::{CronEntry, CRONS_MAX, CRON_CATCHUP_MAX};
pub use events::{Event, EventKind, EventsGone, EVENTS_PER_QUEUE_MAX};
pub use extras::{Extras, LOG_BYTES_MAX, LOG_LINES_MAX};

/// Why a task command was refused; `text` is the error reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskError {
    NoSuchTask,
    /// ACK, FAIL or EXTEND from a client that does not hold the lease (it expired, was
    /// requeued, or went to another worker).
    NotLeased,
    Finished,
    IdExists,
    /// REQUEUE of a task that is not dead.
    NotDead,
    QueueFull,
    TooLarge(&'static str),
    /// DELQUEUE of a queue with tasks leased, without FORCE.
    QueueHasLeases(usize),
}

impl TaskError {
    pub fn text(&self) -> String {
        match self {
            TaskError::NoSuchTask => "ERR no such task".into(),
            TaskError::NotLeased => {
                "ERR task is not leased to this client (the lease expired or moved)".into()
            }
            TaskError::Finished => "ERR task already finished".into(),
            TaskError::IdExists => "ERR task id already exists".into(),
            TaskError::NotDead => "ERR only a dead task can be requeued".into(),
            TaskError::QueueFull => {
                format!("ERR queue is full ({QUEUE_TASKS_MAX} tasks waiting)")
            }
            TaskError::TooLarge(what) => format!("ERR {what} too large"),
            TaskError::QueueHasLeases(n) => {
                format!("ERR queue has {n} leased tasks; wait for them or use FORCE")
            }
        }
    }
}

/// A task handed to a worker by `fetch`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leased {
    pub id: Bytes,
    pub queue: Bytes,
    pub payload: Bytes,
    pub attempt: u32,
    pub origin: Option<Origin>,
}

/// A fallback task to submit (possibly on another shard) after a task died.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fallback {
    pub queue: Bytes,
    pub payload: Bytes,
    pub origin: Origin,
}

/// Where a task that becomes ready goes in its queue (within its priority).
#[derive(Clone, Copy)]
enum Place {
    /// Where its order already puts it (a new or delayed task, a retry).
    Keep,
    /// Before every other: a lease that was lost or handed back.
    Head,
    /// After every other: a dead task requeued.
    Tail,
}

/// FAIL's retry choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Retry with the task's backoff while attempts remain.
    Backoff,
    /// Retry after this many ms while attempts remain.
    In(u64),
    /// Dead now.
    Never,
    /// Back in this many ms without spending an attempt or counting a failure (SNOOZE:
    /// the worker could not take it now).
    Snooze(u64),
}

/// What became of a failed task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailOutcome {
    RetryAt(u64),
    Dead,
    SnoozedUntil(u64),
}

/// Engine-wide counters (INFO tasks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub submitted: u64,
    pub acked: u64,
    pub failed: u64,
    pub retried: u64,
    pub dead: u64,
    pub cancelled: u64,
    pub fallbacks: u64,
    pub leases_lost: u64,
}

impl Totals {
    /// Adds another shard's counters.
    pub fn add(&mut self, other: &Totals) {
        self.submitted += other.submitted;
        self.acked += other.acked;
        self.failed += other.failed;
        self.retried += other.retried;
        self.dead += other.dead;
        self.cancelled += other.cancelled;
        self.fallbacks += other.fallbacks;
        self.leases_lost += other.leases_lost;
    }
}

/// A queue's numbers (TASK.STATS, INFO tasks).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    pub queued: usize,
    pub scheduled: usize,
    pub leased: usize,
    pub dead: usize,
    pub oldest_age_ms: u64,
    pub submitted: u64,
    pub acked: u64,
    pub failed: u64,
    pub paused: bool,
    pub concurrency: Option<u32>,
    pub rate: Option<(u32, u64)>,
    /// Groups with ready or leased tasks.
    pub groups: usize,
    pub group_concurrency: Option<u32>,
    pub group_rate: Option<(u32, u64)>,
}

/// A ready task's place in its queue: higher priority first, then its order.
type ReadyKey = (Reverse<i64>, i64);

#[derive(Default, Debug)]
struct Queue {
    ready: ready::ReadySet,
    /// Submission times of ready tasks, for the age of the oldest.
    ready_by_age: ready::ReadyAges,
    scheduled: usize,
    leased: usize,
    /// Dead tasks by (time of death, id): oldest first.
    dead: BTreeSet<(u64, Bytes)>,
    paused: bool,
    concurrency: Option<u32>,
    /// (at most n, per window ms), in any window of that length (a sliding window).
    rate: Option<(u32, u64)>,
    /// The times of the leases taken in the last window, oldest first (at most n).
    rate_log: VecDeque<u64>,
    /// Every state change of its tasks (TASK.EVENTS).
    events: events::EventLog,
    /// Groups, their limits and turns (`groups`).
    groups: groups::Groups,
    submitted: u64,
    acked: u64,
    failed: u64,
}

impl Queue {
    fn waiting(&self) -> usize {
        self.ready.len() + self.scheduled
    }

    /// Whether one more lease is allowed now (concurrency and rate limits).
    /// Whether one more task may be leased now. A pure check (a blocked fetch asks it
    /// without leasing): the rate window rolls over only when a lease is taken
    /// ([`Queue::count_lease`]), so the engine's state follows from its leases alone.
    fn may_lease(&self, now_ms: u64, in_flight_max: usize) -> bool {
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
    fn take_next(&mut self, now_ms: u64) -> Option<(ReadyKey, Slot)> {
        let key = if self.groups.on {
            self.groups.pick(now_ms)?
        } else {
            self.ready.first()?.0
        };
        let slot = self.ready.remove(&key)?;
        Some((key, slot))
    }

    /// Counts a lease taken at `now_ms` against the rate limit's window.
    fn count_lease(&mut self, now_ms: u64) {
        self.leased += 1;
        if let Some((_, per_ms)) = self.rate {
            groups::log_lease(&mut self.rate_log, now_ms, per_ms);
        }
    }

    /// A lease of a task of `group` ended (any way).
    fn lease_ended(&mut self, group: &Option<Bytes>) {
        self.leased -= 1;
        self.groups.lease_ended(group);
    }
}

#[derive(Default, Debug)]
pub struct Engine {
    tasks: TaskTable,
    queues: HashMap<Bytes, Queue, Hasher>,
    scheduled: BTreeSet<(u64, Bytes)>,
    leases: BTreeSet<(u64, Bytes)>,
    by_owner: HashMap<u64, owners::OwnerLeases, Hasher>,
    deadlines: BTreeSet<(u64, Bytes)>,
    /// Done and cancelled tasks by the time they are forgotten.
    retained: BTreeSet<(u64, Bytes)>,
    /// Dead tasks by the time they are forgotten (kept apart: `dead_retention_ms`, and
    /// not subject to `RETAINED_TASKS_MAX`).
    dead_retained: BTreeSet<(u64, Bytes)>,
    dead_retention_ms: u64,
    /// Owners whose fetches lease nothing (TASK.QUIET: a worker being drained). Not
    /// persisted: it belongs to live connections, and none outlives a restart.
    quiet: HashSet<u64, Hasher>,
    /// TASK.CRON schedules whose queue lives here, by name.
    crons: BTreeMap<Bytes, CronEntry>,
    /// (next tick, name) of every cron that has one.
    cron_due: BTreeSet<(u64, Bytes)>,
    /// Tasks cron ticks created (the journal's recorder sees a tick fire by it).
    cron_fired: u64,
    /// The clock, cap and count of the events noted (TASK.EVENTS).
    events: events::EventClock,
    /// Batches whose home is this shard, by id.
    batches: BTreeMap<Bytes, Batch>,
    /// (fired at, id) of the batches that fired, to forget them after the retention time.
    batches_fired: BTreeSet<(u64, Bytes)>,
    /// Ends of batch children here, for their batches' shards (drained by the server).
    batch_notes: Vec<BatchNote>,
    /// Progress and log lines of the tasks that have any (most have none).
    extras: HashMap<Bytes, Extras, Hasher>,
    /// (queue, unique key) -> (id, window end).
    unique: HashMap<(Bytes, Bytes), (Bytes, u64), Hasher>,
    fallbacks: Vec<Fallback>,
    next_order: i64,
    next_head: i64,
    /// The number in the last id we made ("{tag}" and its hex).
    next_id: u64,
    /// The highest number among the ids of our form that we did not make (callers' own, as
    /// `note_id` sees them): an id we make numbered past it cannot be taken, so it needs no
    /// lookup. (Skipping taken ones, rather than jumping past them, keeps the ids a replayed
    /// journal makes the ones the first run made.)
    others_max: u64,
    retention_ms: u64,
    totals: Totals,
    /// Bumped by every change that can let a fetch lease something it could not before.
    epoch: u64,
    /// `IN_FLIGHT_PER_QUEUE_MAX`, lowered in tests.
    in_flight_max: usize,
    /// While a journal records this engine: the times of the `advance` calls that changed
    /// something, for the journal to log (drained with [`Engine::take_advances`]).
    advances: Option<Vec<u64>>,
}

/// Puts the task in `slot` (of queue `q`) in the queue's ready set and marks it queued.
fn ready_in(q: &mut Queue, task: &mut Task, slot: Slot, events: &mut events::EventClock) {
    task.state = State::Queued;
    let key = (Reverse(task.options.priority), task.order);
    q.ready.insert(key, slot);
    q.ready_by_age.insert(task.submitted_ms);
    q.groups.insert(&task.options.group, key, &q.ready);
    q.note(events, &task.id, events::EventKind::Queued, task.attempts);
}

/// A retry's jitter in [0, 1), derived from the task and its attempt rather than drawn at
/// random, so that a journal replay schedules the retry at the same instant. Tasks that
/// failed together still spread out: their ids differ.
fn jitter(id: &[u8], attempts: u32) -> f64 {
    let h = crc32c::crc32c_append(crc32c::crc32c(id), &attempts.to_le_bytes());
    f64::from(h) / (f64::from(u32::MAX) + 1.0)
}

fn too_long(name: &[u8]) -> bool {
    name.len() > NAME_BYTES_MAX
}

/// The number of an id in the form of ours, "{tag}" (the tag alphanumeric) and 1 to 16
/// lowercase hex digits with no leading zero; `None` for any other id, which no id we make
/// can equal.
fn number_of_our_form(id: &[u8]) -> Option<u64> {
    let rest = id.strip_prefix(b"{")?;
    let close = rest.iter().position(|&c| c == b'}')?;
    let (tag, hex) = (&rest[..close], &rest[close + 1..]);
    if tag.is_empty() || !tag.iter().all(u8::is_ascii_alphanumeric) {
        return None;
    }
    if hex.is_empty() || hex.len() > 16 || hex[0] == b'0' {
        return None;
    }
    hex.iter().try_fold(0u64, |n, &c| {
        let digit = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => return None,
        };
        Some(n << 4 | u64::from(digit))
    })
}

impl Engine {
    pub fn new(retention_ms: u64) -> Self {
        Engine {
            retention_ms,
            dead_retention_ms: DEAD_RETENTION_MS_DEFAULT,
            next_head: -1,
            in_flight_max: IN_FLIGHT_PER_QUEUE_MAX,
            ..Engine::default()
        }
    }

    /// How long dead tasks are kept (default `DEAD_RETENTION_MS_DEFAULT`).
    pub fn with_dead_retention(mut self, ms: u64) -> Self {
        self.dead_retention_ms = ms;
        self
    }

    pub fn totals(&self) -> Totals {
        self.totals
    }

    /// Changes whenever a blocked fetch might now succeed (a task became ready, a lease or a
    /// limit freed up); blocked fetches are retried only when it moved.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn get(&self, id: &[u8]) -> Option<&Task> {
        self.tasks.get(id)
    }

    /// The ids of every task known, live or retained, in order.
    pub fn task_ids(&self) -> Vec<Bytes> {
        let mut ids: Vec<Bytes> = self.tasks.keys().cloned().collect();
        ids.sort_unstable();
        ids
    }

    /// Tasks known, live or retained.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Fallback tasks created since the last call, for the caller to submit where their
    /// queues live.
    pub fn take_fallbacks(&mut self) -> Vec<Fallback> {
        std::mem::take(&mut self.fallbacks)
    }

    /// The id a new task in `queue` gets: the queue's slot tag, so the id routes to the
    /// queue's shard, then a sequence number.
    fn new_id(&mut self, queue: &[u8]) -> Bytes {
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

    fn submit_with_origin(
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
    fn submit_now(
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
    fn hold(&mut self, id: &[u8]) {
        let task = self.tasks.get_mut(id).expect("present");
        task.state = State::Held;
        if let Some(q) = self.queues.get_mut(&task.queue) {
            q.note(&mut self.events, &task.id, events::EventKind::Held, 0);
        }
    }

    /// The task that holds a submission's UNIQUE key on `queue`, if it is still live or its
    /// window has not passed: the submission is then that task.
    fn live_unique(
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
    fn id_for(&mut self, queue: &Bytes, options: &SubmitOptions) -> Result<Bytes, TaskError> {
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

    /// Notes `id`, a caller's (or a restored task's): if it has our form, the ids we make up
    /// to its number are looked up before use.
    pub(crate) fn note_id(&mut self, id: &[u8]) {
        if let Some(n) = number_of_our_form(id) {
            self.others_max = self.others_max.max(n);
        }
    }

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
        if self.quiet.contains(&owner) {
            return leased;
        }
        for name in queues {
            while leased < count {
                let Some(q) = self.queues.get_mut(name) else {
                    break;
                };
                if !q.may_lease(now_ms, self.in_flight_max) {
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
                    id,
                    queue: task.queue.clone(),
                    payload: task.payload.to_bytes(),
                    attempt: task.attempts,
                    origin: task.origin().cloned(),
                });
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
    fn take_lease(&mut self, id: &[u8], owner: u64, now_ms: u64) -> Result<Slot, TaskError> {
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

    fn release_owner_index(&mut self, owner: u64, id: &Bytes) {
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
        self.take_lease(id, owner, now_ms)?;
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
    fn release_leases_of(&mut self, owner: u64, now_ms: u64, counts: bool) -> usize {
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
    fn lose_lease(&mut self, id: &Bytes, now_ms: u64, counts: bool) {
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

    /// Puts a task in its queue's ready set and marks it queued.
    fn make_ready(&mut self, id: &[u8], place: Place) {
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
    fn unplace(&mut self, id: &[u8]) {
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

    fn schedule(&mut self, id: &[u8], due_ms: u64) {
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
    fn die(&mut self, id: &[u8], now_ms: u64) {
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
    fn forget_dead(&mut self, id: &Bytes) {
        if self.tasks.contains_key(id) {
            self.unretain(id);
            self.forget(id);
        }
    }

    /// A finished task's entry in its retention index: whether that is the dead tasks' index,
    /// and the key (when it is forgotten, its id).
    fn retention_key(&self, task: &Task) -> (bool, (u64, Bytes)) {
        let dead = task.state.is_dead();
        let ms = if dead {
            self.dead_retention_ms
        } else {
            self.retention_ms
        };
        (dead, (Engine::forget_at(task, ms), task.id.clone()))
    }

    /// The retention index of dead tasks, or of done and cancelled ones.
    fn retention_index(&mut self, dead: bool) -> &mut BTreeSet<(u64, Bytes)> {
        if dead {
            &mut self.dead_retained
        } else {
            &mut self.retained
        }
    }

    /// Takes finished task `id` out of its retention index.
    fn unretain(&mut self, id: &[u8]) {
        let (dead, key) = self.retention_key(&self.tasks[id]);
        self.retention_index(dead).remove(&key);
    }

    /// Enters a terminal state and schedules the task to be forgotten.
    fn finish(&mut self, id: &[u8], state: State, now_ms: u64) {
        let slot = self.tasks.slot_of(id).expect("present");
        self.finish_at(slot, state, now_ms);
    }

    /// [`Engine::finish`] of the task in `slot`. An ACK's end (`Done`) is counted in its
    /// queue's `acked` here, with its event: one lookup of the queue.
    fn finish_at(&mut self, slot: Slot, state: State, now_ms: u64) {
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
    fn forget_at(task: &Task, retention_ms: u64) -> u64 {
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

    fn advance_unrecorded(&mut self, now_ms: u64) {
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
    fn prefetch_retained(&self) {
        let mut ahead = self.retained.iter();
        if let Some((_, next)) = ahead.next() {
            self.tasks.prefetch(next);
        }
        if let Some((_, after)) = ahead.next() {
            crate::keyspace::prefetch::prefetch_read(after.as_ptr());
        }
    }

    /// Drops a finished task for good (its retention ended, or the cap was reached).
    fn forget(&mut self, id: &Bytes) {
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
            paused: q.paused,
            concurrency: q.concurrency,
            rate: q.rate,
            groups: q.groups.count(),
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
    fn revive(&mut self, id: &Bytes) {
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

    #[cfg(test)]
    pub(crate) fn set_in_flight_max(&mut self, max: usize) {
        self.in_flight_max = max;
    }

    #[cfg(test)]
    // Long: the invariants listed in the module docs, checked one after the other.
    pub(crate) fn check_invariants(&self) {
        let mut ready = 0;
        for (name, q) in &self.queues {
            assert_eq!(q.ready.len(), q.ready_by_age.len(), "queue {name:?}");
            ready += q.ready.len();
            for slot in q.ready.slots() {
                let task = self.tasks.at(slot);
                assert_eq!(task.state, State::Queued);
                assert_eq!(task.queue, *name);
                let key = (Reverse(task.options.priority), task.order);
                assert_eq!(q.ready.get(&key), Some(slot), "a ready task at its own key");
            }
            let leased = self
                .tasks
                .values()
                .filter(|t| t.queue == *name && matches!(t.state, State::Leased { .. }))
                .count();
            assert_eq!(q.leased, leased, "queue {name:?} leased count");
        }
        let queued = self
            .tasks
            .values()
            .filter(|t| t.state == State::Queued)
            .count();
        assert_eq!(ready, queued);
        let scheduled = self
            .tasks
            .values()
            .filter(|t| matches!(t.state, State::Scheduled { .. }))
            .count();
        assert_eq!(self.scheduled.len(), scheduled);
        let leased: Vec<_> = self
            .tasks
            .values()
            .filter_map(|t| match t.state {
                State::Leased { owner, until_ms } => Some((owner, until_ms, t.id.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(self.leases.len(), leased.len());
        for (owner, until, id) in leased {
            assert!(self.leases.contains(&(until, id.clone())));
            assert!(self.by_owner[&owner].contains(&id));
        }
        let finished: Vec<&Task> = self
            .tasks
            .values()
            .filter(|t| t.state.is_terminal())
            .collect();
        assert_eq!(
            self.retained.len() + self.dead_retained.len(),
            finished.len(),
            "one retention entry per finished task"
        );
        for task in finished {
            let id = task.id.clone();
            if task.state.is_dead() {
                let key = (Engine::forget_at(task, self.dead_retention_ms), id.clone());
                assert!(self.dead_retained.contains(&key));
                let died = task.finished_ms().expect("finished");
                assert!(self.queues[&task.queue].dead.contains(&(died, id)));
            } else {
                let key = (Engine::forget_at(task, self.retention_ms), id);
                assert!(self.retained.contains(&key));
            }
        }
        for (name, q) in &self.queues {
            q.groups.check(name, &q.ready, &self.tasks);
        }
        let due: BTreeSet<(u64, Bytes)> = self
            .crons
            .values()
            .filter_map(|c| c.next_ms.map(|next| (next, c.name.clone())))
            .collect();
        assert_eq!(
            due, self.cron_due,
            "one due entry per cron with a next tick"
        );
        let dead: usize = self.queues.values().map(|q| q.dead.len()).sum();
        assert_eq!(
            dead,
            self.dead_retained.len(),
            "one dead-set entry per dead task"
        );
        let indexed: usize = self.by_owner.values().map(|ids| ids.len()).sum();
        assert_eq!(indexed, self.leases.len());
    }
}
