//! What the engine's operations answer: why one was refused (`TaskError`), a lease
//! (`Leased`), a task handed to its fallback (`Fallback`), a failure's outcome (`Retry`,
//! `FailOutcome`), and the counts it reports (`Totals`, `QueueStats`).

use super::*;

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
    /// TASK.DELETE of a leased task.
    Leased,
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
            TaskError::Leased => {
                "ERR a leased task cannot be deleted (CANCEL it, or wait for its end)".into()
            }
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
    pub retried: u64,
    /// Submit to first start, and a lease's start to its ACK, since the shard started.
    pub waiting_ms: super::Histogram,
    pub running_ms: super::Histogram,
    pub paused: bool,
    pub concurrency: Option<u32>,
    pub rate: Option<(u32, u64)>,
    /// Groups with ready or leased tasks.
    pub groups: usize,
    /// Clients or worker identities that fetched from it in the last minute.
    pub workers: usize,
    pub group_concurrency: Option<u32>,
    pub group_rate: Option<(u32, u64)>,
}
