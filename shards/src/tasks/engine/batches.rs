//! Batches (TASK.BATCH): a set of child tasks, on any shards, and callback tasks that run
//! once after the last child ended: ON-COMPLETE whatever the children's ends, ON-SUCCESS
//! only if every child was done (otherwise it is cancelled).
//!
//! The batch lives on its home shard (the shard of its id), which knows its children's ids
//! and what it has heard of their ends. A child's shard reports the end when the child gets
//! there ([`BatchNote`], sent by the server); the home counts each child once, so a note
//! sent twice changes nothing. After a restart, when a note may have been lost with the
//! process, the home asks the children's shards again (`batch_pending`, `child_ends`).
//! The callbacks were submitted held, with ids of their own, when the batch was made; the
//! batch firing releases (or cancels) them, and a release sent twice does nothing: so a
//! callback runs once, never before the last child's end, whatever restarts in between.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;

use super::{Engine, TaskError};
use crate::tasks::model::State;

/// Most children one batch may have.
pub const BATCH_CHILDREN_MAX: usize = 100_000;

/// A child's end, for its batch's home.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchNote {
    pub batch: Bytes,
    pub child: Bytes,
    pub succeeded: bool,
    /// Its result (a done child's ACK RESULT) or last error, kept by a flow for its parent.
    pub outcome: Option<Bytes>,
}

/// What a completed batch tells a callback's shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Order {
    Release,
    Cancel,
    /// A flow's parent whose rule is to fail when a child failed: it goes dead with this
    /// error.
    Kill(Bytes),
}

/// A flow's rule for a failed child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnFail {
    /// The parent goes dead (with the first failed child named in its error).
    FailParent,
    /// The parent runs anyway; it reads which children failed from TASK.RESULTS.
    Ignore,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    pub id: Bytes,
    pub children: Vec<Bytes>,
    /// The children as a set (a note's child is looked up in it).
    pub members: HashSet<Bytes>,
    /// The ends heard of: child id -> it was done.
    pub ends: HashMap<Bytes, bool>,
    /// The held callback tasks' ids.
    pub on_success: Option<Bytes>,
    pub on_complete: Option<Bytes>,
    pub created_ms: u64,
    /// When the last child's end was heard (the callbacks were released then).
    pub fired_ms: Option<u64>,
    /// A flow (TASK.FLOW): its parent is `on_complete`; it keeps the children's outcomes.
    pub flow: Option<OnFail>,
    /// A flow's children's results or errors, by child.
    pub outcomes: HashMap<Bytes, Bytes>,
}

impl Batch {
    pub fn succeeded(&self) -> usize {
        self.ends.values().filter(|ok| **ok).count()
    }

    /// What the callbacks' shards are told once it fired: (callback id, release it: true;
    /// cancel it: false).
    pub fn callback_orders(&self) -> Vec<(Bytes, Order)> {
        if self.fired_ms.is_none() {
            return Vec::new();
        }
        let all_ok = self.succeeded() == self.children.len();
        let mut orders = Vec::new();
        if let Some(id) = &self.on_complete {
            let order = match self.flow {
                Some(OnFail::FailParent) if !all_ok => {
                    let failed = self
                        .children
                        .iter()
                        .find(|c| self.ends.get(*c) == Some(&false))
                        .expect("a failed child");
                    Order::Kill(Bytes::from([b"a child failed: ", &failed[..]].concat()))
                }
                _ => Order::Release,
            };
            orders.push((id.clone(), order));
        }
        if let Some(id) = &self.on_success {
            let order = if all_ok {
                Order::Release
            } else {
                Order::Cancel
            };
            orders.push((id.clone(), order));
        }
        orders
    }
}

impl Engine {
    /// Makes batch `id` with these children and callbacks (their ids, computed by the
    /// caller). The same batch again is no error (TASK.BATCH may be sent again after a lost
    /// reply); another with the same id is. Returns whether it is new.
    pub fn batch_open(
        &mut self,
        id: &[u8],
        children: Vec<Bytes>,
        on_success: Option<Bytes>,
        on_complete: Option<Bytes>,
        flow: Option<OnFail>,
        now_ms: u64,
    ) -> Result<bool, TaskError> {
        self.advance(now_ms);
        if let Some(existing) = self.batches.get(id) {
            let same = existing.children == children
                && existing.on_success == on_success
                && existing.on_complete == on_complete
                && existing.flow == flow;
            return if same {
                Ok(false)
            } else {
                Err(TaskError::IdExists)
            };
        }
        if children.is_empty() || children.len() > BATCH_CHILDREN_MAX {
            return Err(TaskError::TooLarge("batch"));
        }
        let members: HashSet<Bytes> = children.iter().cloned().collect();
        if members.len() != children.len() {
            return Err(TaskError::IdExists);
        }
        let id = Bytes::copy_from_slice(id);
        self.batches.insert(
            id.clone(),
            Batch {
                id,
                children,
                members,
                ends: HashMap::new(),
                on_success,
                on_complete,
                created_ms: now_ms,
                fired_ms: None,
                flow,
                outcomes: HashMap::new(),
            },
        );
        Ok(true)
    }

    /// A child's end heard of. Returns the callback orders if this end completed the batch
    /// (once: later notes, and notes of unknown batches or children, change nothing).
    pub fn batch_note(&mut self, note: &BatchNote, now_ms: u64) -> Vec<(Bytes, Order)> {
        self.advance(now_ms);
        let Some(batch) = self.batches.get_mut(&note.batch) else {
            return Vec::new();
        };
        if batch.fired_ms.is_some()
            || batch.ends.contains_key(&note.child)
            || !batch.members.contains(&note.child)
        {
            return Vec::new();
        }
        batch.ends.insert(note.child.clone(), note.succeeded);
        if let (Some(_), Some(outcome)) = (batch.flow, &note.outcome) {
            batch.outcomes.insert(note.child.clone(), outcome.clone());
        }
        if batch.ends.len() < batch.children.len() {
            return Vec::new();
        }
        batch.fired_ms = Some(now_ms);
        let orders = batch.callback_orders();
        self.batches_fired.insert((now_ms, note.batch.clone()));
        orders
    }

    /// Ends of batch children made here since the last call, for their homes.
    pub fn take_batch_notes(&mut self) -> Vec<BatchNote> {
        std::mem::take(&mut self.batch_notes)
    }

    pub fn batch(&self, id: &[u8]) -> Option<&Batch> {
        self.batches.get(id)
    }

    /// Every batch here, by id.
    pub fn batches(&self) -> impl Iterator<Item = &Batch> {
        self.batches.values()
    }

    /// The children of open batches whose ends were not heard of (to ask again after a
    /// restart): (batch, child).
    pub fn batch_pending(&self) -> Vec<(Bytes, Bytes)> {
        self.batches
            .values()
            .filter(|b| b.fired_ms.is_none())
            .flat_map(|b| {
                b.children
                    .iter()
                    .filter(|c| !b.ends.contains_key(*c))
                    .map(|c| (b.id.clone(), c.clone()))
            })
            .collect()
    }

    /// How each of `ids` ended, if it has: (done: true, dead or cancelled: false, and its
    /// result or last error); `None` not ended (or not known here).
    pub fn child_ends(&self, ids: &[Bytes]) -> Vec<Option<(bool, Option<Bytes>)>> {
        ids.iter()
            .map(|id| {
                let task = self.tasks.get(id)?;
                match task.state {
                    State::Done { .. } => Some((true, task.result().cloned())),
                    State::Dead { .. } | State::Cancelled { .. } => {
                        Some((false, task.last_error().cloned()))
                    }
                    _ => None,
                }
            })
            .collect()
    }

    /// TASK.RELEASE: a held task goes to its queue, or with `dead`, dead with that error
    /// (anything not held is left as it is: a release sent twice does nothing). Returns
    /// whether it was held.
    pub fn release_held_to(
        &mut self,
        id: &[u8],
        dead: Option<Bytes>,
        now_ms: u64,
    ) -> Result<bool, TaskError> {
        self.advance(now_ms);
        let task = self.tasks.get_mut(id).ok_or(TaskError::NoSuchTask)?;
        if task.state != State::Held {
            return Ok(false);
        }
        match dead {
            Some(error) => {
                task.set_last_error(Some(error));
                self.die(id, now_ms);
            }
            None => self.make_ready(id, super::Place::Keep),
        }
        Ok(true)
    }

    pub fn release_held(&mut self, id: &[u8], now_ms: u64) -> Result<bool, TaskError> {
        self.release_held_to(id, None, now_ms)
    }

    /// Forgets batches that fired longer than the retention time ago.
    pub(super) fn forget_batches(&mut self, now_ms: u64) {
        while let Some((fired, _)) = self.batches_fired.first() {
            if fired.saturating_add(self.retention_ms) > now_ms {
                break;
            }
            let (_, id) = self.batches_fired.pop_first().expect("non-empty");
            self.batches.remove(&id);
        }
    }

    /// Loads a batch from a snapshot.
    pub(super) fn restore_batch(&mut self, batch: Batch) {
        if let Some(fired) = batch.fired_ms {
            self.batches_fired.insert((fired, batch.id.clone()));
        }
        self.batches.insert(batch.id.clone(), batch);
    }
}
