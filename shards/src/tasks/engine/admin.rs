//! The engine's operations for people rather than workers: paging through a queue's tasks by
//! state (TASK.LIST), dropping them (TASK.PURGE), deleting a queue (TASK.DELQUEUE), and
//! quieting an owner (TASK.QUIET). Kept apart from the task life cycle in `engine.rs`.
//!
//! A page's cursor is its last entry's place in the order the state is kept in (the ready
//! order for queued tasks; due time, lease expiry, death or forgetting time for the others),
//! so a task that stays in its state through a whole walk is listed exactly once, whatever
//! else comes and goes. States kept in a shard-wide index (scheduled, leased, done,
//! cancelled) are filtered by queue, and one page looks at no more than
//! [`LIST_SCAN_MAX`] entries: a page may then come back short (even empty) with a cursor to
//! go on from, as SCAN's do.

use std::cmp::Reverse;
use std::collections::BTreeSet;
use std::ops::Bound;

use bytes::Bytes;

use super::{Engine, TaskError};
use crate::tasks::model::State;

/// Most index entries one TASK.LIST page looks at.
pub const LIST_SCAN_MAX: usize = 100_000;

/// A state TASK.LIST and TASK.PURGE name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listed {
    Queued,
    Scheduled,
    Leased,
    Dead,
    Done,
    Cancelled,
}

impl Listed {
    pub fn parse(word: &[u8]) -> Option<Listed> {
        let all = [
            ("queued", Listed::Queued),
            ("scheduled", Listed::Scheduled),
            ("leased", Listed::Leased),
            ("dead", Listed::Dead),
            ("done", Listed::Done),
            ("cancelled", Listed::Cancelled),
        ];
        crate::args::keyword(word, &all)
    }

    fn holds(self, state: &State) -> bool {
        matches!(
            (self, state),
            (Listed::Queued, State::Queued)
                | (Listed::Scheduled, State::Scheduled { .. })
                | (Listed::Leased, State::Leased { .. })
                | (Listed::Dead, State::Dead { .. })
                | (Listed::Done, State::Done { .. })
                | (Listed::Cancelled, State::Cancelled { .. })
        )
    }
}

/// Where a TASK.LIST page starts: after this entry of its state's order (`None`: the
/// beginning). On the wire, `a:b` with `b` the order number (queued) or the task id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cursor {
    Ready(i64, i64),
    Timed(u64, Bytes),
}

impl Cursor {
    pub fn encode(&self) -> Bytes {
        match self {
            Cursor::Ready(priority, order) => Bytes::from(format!("{priority}:{order}")),
            Cursor::Timed(at, id) => Bytes::from([format!("{at}:").as_bytes(), id].concat()),
        }
    }

    /// Reads a cursor given back by a page of `state` ("0" is the beginning).
    pub fn decode(word: &[u8], state: Listed) -> Option<Option<Cursor>> {
        if word == b"0" {
            return Some(None);
        }
        let colon = word.iter().position(|&c| c == b':')?;
        let (head, rest) = (
            std::str::from_utf8(&word[..colon]).ok()?,
            &word[colon + 1..],
        );
        let cursor = if state == Listed::Queued {
            Cursor::Ready(
                head.parse().ok()?,
                std::str::from_utf8(rest).ok()?.parse().ok()?,
            )
        } else {
            Cursor::Timed(head.parse().ok()?, Bytes::copy_from_slice(rest))
        };
        Some(Some(cursor))
    }
}

/// One page of a walk over an ordered index: up to `count` ids that `keep` accepts, looking at
/// no more than `LIST_SCAN_MAX` entries after `from`; the cursor to go on from (the last entry
/// looked at; `None` at the end).
fn page(
    index: &BTreeSet<(u64, Bytes)>,
    from: Option<&Cursor>,
    count: usize,
    keep: &dyn Fn(&Bytes) -> bool,
) -> (Option<Cursor>, Vec<Bytes>) {
    let start = match from {
        Some(Cursor::Timed(at, id)) => Bound::Excluded((*at, id.clone())),
        _ => Bound::Unbounded,
    };
    let mut ids = Vec::new();
    let mut last = None;
    for (seen, (at, id)) in index.range((start, Bound::Unbounded)).enumerate() {
        if seen >= LIST_SCAN_MAX || ids.len() >= count {
            return (last, ids);
        }
        last = Some(Cursor::Timed(*at, id.clone()));
        if keep(id) {
            ids.push(id.clone());
        }
    }
    (None, ids)
}

impl Engine {
    /// One page of `queue`'s tasks in `state`, and the cursor of the next (`None`: done).
    pub fn list(
        &mut self,
        queue: &[u8],
        state: Listed,
        from: Option<&Cursor>,
        count: usize,
        now_ms: u64,
    ) -> (Option<Cursor>, Vec<Bytes>) {
        self.advance(now_ms);
        let Some(q) = self.queues.get(queue) else {
            return (None, Vec::new());
        };
        let in_queue = |id: &Bytes| {
            self.tasks
                .get(id)
                .is_some_and(|t| t.queue == queue && state.holds(&t.state))
        };
        match state {
            Listed::Queued => {
                let after = match from {
                    Some(Cursor::Ready(priority, order)) => Some((Reverse(*priority), *order)),
                    _ => None,
                };
                let mut ids = Vec::new();
                let mut last = None;
                for ((Reverse(priority), order), slot) in q.ready.after(after) {
                    if ids.len() >= count {
                        return (last, ids);
                    }
                    last = Some(Cursor::Ready(priority, order));
                    ids.push(self.tasks.at(slot).id.clone());
                }
                (None, ids)
            }
            Listed::Dead => page(&q.dead, from, count, &|_| true),
            Listed::Scheduled => page(&self.scheduled, from, count, &in_queue),
            Listed::Leased => page(&self.leases, from, count, &in_queue),
            Listed::Done | Listed::Cancelled => page(&self.retained, from, count, &in_queue),
        }
    }

    /// Drops every task of `queue` in `state` for good (no terminal state, no fallback, no
    /// counts); returns how many. Leased tasks are refused: CANCEL them, or DELQUEUE … FORCE.
    pub fn purge(&mut self, queue: &[u8], state: Listed, now_ms: u64) -> usize {
        self.advance(now_ms);
        let ids: Vec<Bytes> = self
            .tasks
            .values()
            .filter(|t| t.queue == queue && state.holds(&t.state))
            .map(|t| t.id.clone())
            .collect();
        for id in &ids {
            self.note_event(id, super::events::EventKind::Purged);
            self.drop_task(id);
        }
        self.epoch += 1;
        ids.len()
    }

    /// Drops one task for good, in any state but leased (no terminal state, no fallback, no
    /// counts), as PURGE drops a state's: the dashboard's "delete" of one dead task. Returns
    /// whether there was such a task.
    pub fn delete_task(&mut self, id: &[u8], now_ms: u64) -> Result<bool, TaskError> {
        self.advance(now_ms);
        let Some(task) = self.tasks.get(id) else {
            return Ok(false);
        };
        if matches!(task.state, State::Leased { .. }) {
            return Err(TaskError::Leased);
        }
        let id = task.id.clone();
        self.note_event(&id, super::events::EventKind::Purged);
        self.drop_task(&id);
        self.epoch += 1;
        Ok(true)
    }

    /// Deletes `queue`: every task of it in any state, its limits, pause, counters and
    /// UNIQUE windows. With tasks leased, refused unless `force` (their workers' ACKs then
    /// find no task). Returns how many tasks went; `None` for a queue never seen.
    pub fn delete_queue(
        &mut self,
        queue: &[u8],
        force: bool,
        now_ms: u64,
    ) -> Result<Option<usize>, TaskError> {
        self.advance(now_ms);
        let Some(q) = self.queues.get(queue) else {
            return Ok(None);
        };
        if q.leased > 0 && !force {
            return Err(TaskError::QueueHasLeases(q.leased));
        }
        let ids: Vec<Bytes> = self
            .tasks
            .values()
            .filter(|t| t.queue == queue)
            .map(|t| t.id.clone())
            .collect();
        for id in &ids {
            self.drop_task(id);
        }
        self.unique.retain(|(name, _), _| name != queue);
        self.queues.remove(queue);
        self.epoch += 1;
        Ok(Some(ids.len()))
    }

    /// Stops (or lets again) `owner`'s fetches lease anything.
    /// Whether `owner`'s fetches lease nothing (TASK.QUIET).
    pub fn is_quiet(&self, owner: u64) -> bool {
        self.quiet.contains(&owner)
    }

    pub fn set_quiet(&mut self, owner: u64, quiet: bool) {
        if quiet {
            self.quiet.insert(owner);
        } else {
            self.quiet.remove(&owner);
        }
        self.epoch += 1;
    }

    /// Removes a task from every index that holds it, and forgets it.
    fn drop_task(&mut self, id: &Bytes) {
        let Some(task) = self.tasks.get(id) else {
            return;
        };
        if task.state.is_terminal() {
            self.unretain(id);
        } else {
            // A batch child that goes without an end counts as failed for its batch.
            if let Some(batch) = task.options.batch.clone() {
                self.batch_notes.push(super::BatchNote {
                    batch,
                    child: id.clone(),
                    succeeded: false,
                    outcome: Some(Bytes::from_static(b"purged")),
                });
            }
            if let Some(deadline) = task.options.deadline_ms {
                self.deadlines.remove(&(deadline, id.clone()));
            }
            self.unplace(id);
        }
        self.forget(id);
    }
}
