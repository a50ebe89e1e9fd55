//! The task engine (`TASK.*`): a task is submitted, leased to one worker, acknowledged or
//! failed and retried with backoff, and in the end done, dead (with an optional fallback
//! task) or cancelled. `model` says what a task is, with the documented defaults and limits;
//! `engine` is one shard's state machine; `table` holds its tasks. Pure and synchronous, like the rest of this crate:
//! the server routes commands here and supplies the time and the client id.

#[cfg(test)]
mod admin_tests;
pub mod cron;
#[cfg(test)]
mod cron_tests;
pub mod engine;
pub mod model;
pub mod table;
#[cfg(test)]
mod tests;
pub mod workers;

pub use engine::{
    Batch, BatchNote, Cursor, Engine, EventKind, FailOutcome, Fallback, Histogram, Leased, Listed,
    OnFail, Order, QueueStats, Retry, TaskError, Totals, BATCH_CHILDREN_MAX, EVENTS_PER_QUEUE_MAX,
    LATENCY_BOUNDS_MS,
};
pub use model::{Origin, State, SubmitOptions, Task};
