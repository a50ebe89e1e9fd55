//! What a worker reports about a task while it holds it: its progress (TASK.PROGRESS, shown by
//! TASK.GET and as an event) and log lines (TASK.LOG, read back with TASK.LOGS). Kept beside
//! the tasks, only for those that have any, and forgotten with the task.

use std::collections::VecDeque;

use bytes::Bytes;

use super::events::EventKind;
use super::{Engine, TaskError};
use crate::tasks::model::State;

/// Most log lines one task keeps (the oldest go first).
pub const LOG_LINES_MAX: usize = 1_000;
/// Most log bytes one task keeps (the oldest lines go first).
pub const LOG_BYTES_MAX: usize = 1024 * 1024;
/// Largest progress value or log line.
pub const REPORT_BYTES_MAX: usize = 64 * 1024;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Extras {
    pub progress: Option<Bytes>,
    pub logs: VecDeque<Bytes>,
    log_bytes: usize,
    /// Lines dropped to keep within the caps.
    pub logs_dropped: u64,
}

impl Extras {
    pub(super) fn push_line(&mut self, line: Bytes) {
        self.log_bytes += line.len();
        self.logs.push_back(line);
        while self.logs.len() > LOG_LINES_MAX || self.log_bytes > LOG_BYTES_MAX {
            let old = self.logs.pop_front().expect("over a cap");
            self.log_bytes -= old.len();
            self.logs_dropped += 1;
        }
    }

    pub(super) fn restore(progress: Option<Bytes>, logs: Vec<Bytes>, dropped: u64) -> Extras {
        let log_bytes = logs.iter().map(Bytes::len).sum();
        Extras {
            progress,
            logs: logs.into(),
            log_bytes,
            logs_dropped: dropped,
        }
    }
}

impl Engine {
    /// Checks that `owner` holds `id`'s lease (the worker reports only what it works on).
    fn holds(&self, id: &[u8], owner: u64) -> Result<(), TaskError> {
        match self.tasks.get(id).map(|t| &t.state) {
            None => Err(TaskError::NoSuchTask),
            Some(State::Leased { owner: holder, .. }) if *holder == owner => Ok(()),
            Some(state) if state.is_terminal() => Err(TaskError::Finished),
            Some(_) => Err(TaskError::NotLeased),
        }
    }

    /// TASK.PROGRESS: the task's progress is now `value` (and an event says so).
    pub fn set_progress(
        &mut self,
        id: &[u8],
        owner: u64,
        value: Bytes,
        now_ms: u64,
    ) -> Result<(), TaskError> {
        self.advance(now_ms);
        if value.len() > REPORT_BYTES_MAX {
            return Err(TaskError::TooLarge("progress"));
        }
        self.holds(id, owner)?;
        let key = self.tasks[id].id.clone();
        self.extras.entry(key).or_default().progress = Some(value.clone());
        self.note_event(id, EventKind::Progress(value));
        Ok(())
    }

    /// TASK.LOG: one more log line for the task.
    pub fn add_log(
        &mut self,
        id: &[u8],
        owner: u64,
        line: Bytes,
        now_ms: u64,
    ) -> Result<(), TaskError> {
        self.advance(now_ms);
        if line.len() > REPORT_BYTES_MAX {
            return Err(TaskError::TooLarge("log line"));
        }
        self.holds(id, owner)?;
        let key = self.tasks[id].id.clone();
        self.extras.entry(key).or_default().push_line(line);
        Ok(())
    }

    /// A task's progress and log lines, if it has any.
    pub fn extras(&self, id: &[u8]) -> Option<&Extras> {
        self.extras.get(id)
    }
}
