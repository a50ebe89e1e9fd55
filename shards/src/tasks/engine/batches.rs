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
}

impl Batch {
    pub fn succeeded(&self) -> usize {
        self.ends.values().filter(|ok| **ok).count()
    }

    /// What the callbacks' shards are told once it fired: (callback id, release it: true;
    /// cancel it: false).
    pub fn callback_orders(&self) -> Vec<(Bytes, bool)> {
        if self.fired_ms.is_none() {
            return Vec::new();
        }
        let all_ok = self.succeeded() == self.children.len();
        let mut orders = Vec::new();
        if let Some(id) = &self.on_complete {
            orders.push((id.clone(), true));
        }
        if let Some(id) = &self.on_success {
            orders.push((id.clone(), all_ok));
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
        now_ms: u64,
    ) -> Result<bool, TaskError> {
        self.advance(now_ms);
        if let Some(existing) = self.batches.get(id) {
            let same = existing.children == children
                && existing.on_success == on_success
                && existing.on_complete == on_complete;
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
            },
        );
        Ok(true)
    }

    /// A child's end heard of. Returns the callback orders if this end completed the batch
    /// (once: later notes, and notes of unknown batches or children, change nothing).
    pub fn batch_note(&mut self, note: &BatchNote, now_ms: u64) -> Vec<(Bytes, bool)> {
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

    /// How each of `ids` ended, if it has: `Some(true)` done, `Some(false)` dead or
    /// cancelled, `None` not ended (or not known here).
    pub fn child_ends(&self, ids: &[Bytes]) -> Vec<Option<bool>> {
        ids.iter()
            .map(|id| match self.tasks.get(id).map(|t| &t.state) {
                Some(State::Done) => Some(true),
                Some(State::Dead | State::Cancelled) => Some(false),
                _ => None,
            })
            .collect()
    }

    /// TASK.RELEASE: a held task goes to its queue (anything else is left as it is: a
    /// release sent twice does nothing). Returns whether it was held.
    pub fn release_held(&mut self, id: &[u8], now_ms: u64) -> Result<bool, TaskError> {
        self.advance(now_ms);
        let task = self.tasks.get(id).ok_or(TaskError::NoSuchTask)?;
        if task.state != State::Held {
            return Ok(false);
        }
        self.make_ready(id, super::Place::Keep);
        Ok(true)
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
