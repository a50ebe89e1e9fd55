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
mod latency;
mod leases;
mod outcomes;
mod owners;
mod queue;
mod queues;
mod ready;
mod snapshot;
mod states;
mod submit;
mod transfer;
use crate::slot::{key_slot, slot_tag};
pub use admin::{Cursor, Listed, LIST_SCAN_MAX};
pub use batches::{Batch, BatchNote, OnFail, Order, BATCH_CHILDREN_MAX};
pub use crons::{CronEntry, CRONS_MAX, CRON_CATCHUP_MAX};
pub use events::{Event, EventKind, EventsGone, EVENTS_PER_QUEUE_MAX};
pub use extras::{Extras, LOG_BYTES_MAX, LOG_LINES_MAX};
pub use latency::{Histogram, LATENCY_BOUNDS_MS};
pub use outcomes::{FailOutcome, Fallback, Leased, QueueStats, Retry, TaskError, Totals};
use queue::Queue;

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

/// A ready task's place in its queue: higher priority first, then its order.
type ReadyKey = (Reverse<i64>, i64);

#[derive(Default, Debug)]
pub struct Engine {
    tasks: TaskTable,
    queues: HashMap<Bytes, Queue, Hasher>,
    scheduled: BTreeSet<(u64, Bytes)>,
    leases: BTreeSet<(u64, Bytes)>,
    /// When each lease in flight started, for the queues' running-time histograms.
    lease_starts: latency::LeaseStarts,
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
    /// An engine with no tasks and this one's settings (retention times, the events cap,
    /// the in-flight cap, recording): a replica's full sync starts from it.
    pub fn emptied(&self) -> Self {
        Engine {
            retention_ms: self.retention_ms,
            dead_retention_ms: self.dead_retention_ms,
            next_head: -1,
            in_flight_max: self.in_flight_max,
            advances: self.advances.as_ref().map(|_| Vec::new()),
            ..Engine::default()
        }
        .with_events_max(self.events_max())
    }

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

    /// Notes `id`, a caller's (or a restored task's): if it has our form, the ids we make up
    /// to its number are looked up before use.
    pub(crate) fn note_id(&mut self, id: &[u8]) {
        if let Some(n) = number_of_our_form(id) {
            self.others_max = self.others_max.max(n);
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
