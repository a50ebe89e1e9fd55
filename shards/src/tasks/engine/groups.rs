//! Groups within a queue (SUBMIT … GROUP key): per-group CONCURRENCY and RATE limits
//! (TASK.LIMIT queue GROUP …, the same for every key), and fetches that take from the groups
//! in turn, so one tenant's flood cannot starve another: a group with a ready task waits at
//! most one turn of the groups ahead of it. Tasks without a group are one more group.
//!
//! A queue that has never had a grouped task ready keeps none of this and leases in plain
//! priority order. The first grouped task switches the queue to turns for good (the switch
//! and the turn order are part of the queue's state: snapshots keep them, so a replay leases
//! in the same order). Each group indexes its ready tasks by their place in the queue's
//! ready set.

use std::collections::{BTreeSet, HashMap, VecDeque};

use bytes::Bytes;

use super::ReadyKey;

/// Leases logged in the window of `per_ms` that ends at `now_ms` (after `now_ms - per_ms`).
pub(super) fn leases_in_window(log: &VecDeque<u64>, now_ms: u64, per_ms: u64) -> usize {
    let old = if now_ms >= per_ms {
        let start = now_ms - per_ms;
        log.partition_point(|&t| t <= start)
    } else {
        0
    };
    log.len() - old
}

/// Logs a lease at `now_ms`, dropping the times that left the window.
pub(super) fn log_lease(log: &mut VecDeque<u64>, now_ms: u64, per_ms: u64) {
    if now_ms >= per_ms {
        let start = now_ms - per_ms;
        while log.front().is_some_and(|&t| t <= start) {
            log.pop_front();
        }
    }
    log.push_back(now_ms);
}

#[derive(Debug, Default)]
pub(super) struct GroupState {
    pub(super) ready: BTreeSet<ReadyKey>,
    /// Leased tasks of the group (kept for named groups only: their limits need it).
    pub(super) leased: usize,
    pub(super) rate_log: VecDeque<u64>,
    in_turn: bool,
}

#[derive(Debug, Default)]
pub(super) struct Groups {
    /// The queue takes turns between groups.
    pub(super) on: bool,
    pub(super) by_key: HashMap<Option<Bytes>, GroupState>,
    /// The groups with ready tasks, next first; each once.
    pub(super) turns: VecDeque<Option<Bytes>>,
    pub(super) concurrency: Option<u32>,
    pub(super) rate: Option<(u32, u64)>,
}

impl Groups {
    /// A ready task of `group` at `key`; `ready` is the queue's ready set (already holding
    /// it), read when the first grouped task switches the queue to turns.
    pub(super) fn insert(
        &mut self,
        group: &Option<Bytes>,
        key: ReadyKey,
        ready: &super::ready::ReadySet,
    ) {
        if !self.on {
            if group.is_none() {
                return;
            }
            self.on = true;
            // Until now every ready task was ungrouped.
            let ungrouped: BTreeSet<ReadyKey> = ready.keys().filter(|k| *k != key).collect();
            if !ungrouped.is_empty() {
                self.by_key.insert(
                    None,
                    GroupState {
                        ready: ungrouped,
                        ..GroupState::default()
                    },
                );
                self.push_turn(&None);
            }
        }
        self.by_key
            .entry(group.clone())
            .or_default()
            .ready
            .insert(key);
        self.push_turn(group);
    }

    fn push_turn(&mut self, group: &Option<Bytes>) {
        let state = self.by_key.get_mut(group).expect("the group exists");
        if !state.in_turn {
            state.in_turn = true;
            self.turns.push_back(group.clone());
        }
    }

    /// A ready task left without a lease (cancelled, purged, its deadline passed).
    pub(super) fn remove(&mut self, group: &Option<Bytes>, key: &ReadyKey) {
        if self.on {
            if let Some(state) = self.by_key.get_mut(group) {
                state.ready.remove(key);
            }
        }
    }

    /// A lease of `group` ended.
    pub(super) fn lease_ended(&mut self, group: &Option<Bytes>) {
        if group.is_some() {
            if let Some(state) = self.by_key.get_mut(group) {
                state.leased = state.leased.saturating_sub(1);
                self.forget_if_idle(group);
            }
        }
    }

    /// A lease of `group` that had ended goes on (EXTEND re-takes the lease it checked).
    pub(super) fn lease_resumed(&mut self, group: &Option<Bytes>) {
        if self.on && group.is_some() {
            self.by_key.entry(group.clone()).or_default().leased += 1;
        }
    }

    fn forget_if_idle(&mut self, group: &Option<Bytes>) {
        let idle = self.by_key.get(group).is_some_and(|s| {
            s.ready.is_empty() && s.leased == 0 && s.rate_log.is_empty() && !s.in_turn
        });
        if idle {
            self.by_key.remove(group);
        }
    }

    fn may_lease(&self, group: &Option<Bytes>, state: &GroupState, now_ms: u64) -> bool {
        if state.ready.is_empty() {
            return false;
        }
        if group.is_none() {
            return true;
        }
        if matches!(self.concurrency, Some(max) if state.leased >= max as usize) {
            return false;
        }
        !matches!(self.rate, Some((max, per)) if leases_in_window(&state.rate_log, now_ms, per) >= max as usize)
    }

    /// Whether some group may lease now (a pure check).
    pub(super) fn any_may_lease(&self, now_ms: u64) -> bool {
        self.turns.iter().any(|g| {
            self.by_key
                .get(g)
                .is_some_and(|state| self.may_lease(g, state, now_ms))
        })
    }

    /// The next task to lease: the head of the first group in turn that may lease, whose
    /// turn then goes to the back. Counts the lease against its group.
    pub(super) fn pick(&mut self, now_ms: u64) -> Option<ReadyKey> {
        for _ in 0..self.turns.len() {
            let group = self.turns.pop_front()?;
            let state = self.by_key.get_mut(&group).expect("a group in turn exists");
            state.in_turn = false;
            if state.ready.is_empty() {
                self.forget_if_idle(&group);
                continue;
            }
            let state = &self.by_key[&group];
            if !self.may_lease(&group, state, now_ms) {
                self.push_turn(&group);
                continue;
            }
            let rate = self.rate;
            let state = self.by_key.get_mut(&group).expect("present");
            let key = state.ready.pop_first().expect("checked");
            if group.is_some() {
                state.leased += 1;
                if let Some((_, per)) = rate {
                    log_lease(&mut state.rate_log, now_ms, per);
                }
            }
            if !state.ready.is_empty() {
                self.push_turn(&group);
            } else {
                self.forget_if_idle(&group);
            }
            return Some(key);
        }
        None
    }

    /// After a snapshot's queue part: the turn order as it was (the groups' ready sets and
    /// leases follow from the tasks).
    pub(super) fn restore_turns(&mut self, turns: Vec<Option<Bytes>>) {
        for group in turns {
            self.by_key.entry(group.clone()).or_default();
            self.push_turn(&group);
        }
    }

    /// Groups with ready or leased tasks (TASK.STATS).
    pub(super) fn count(&self) -> usize {
        self.by_key.keys().filter(|k| k.is_some()).count()
    }
}

#[cfg(test)]
impl Groups {
    /// The groups' indexes agree with the queue's ready set and its tasks.
    pub(super) fn check(
        &self,
        name: &Bytes,
        ready: &super::ready::ReadySet,
        tasks: &crate::tasks::table::TaskTable,
    ) {
        use crate::tasks::model::State;
        if !self.on {
            assert!(
                ready
                    .slots()
                    .all(|slot| tasks.at(slot).options.group.is_none()),
                "queue {name:?}"
            );
            return;
        }
        let mut indexed = 0;
        for (group, state) in &self.by_key {
            for key in &state.ready {
                let task = tasks.at(ready.get(key).expect("a group's ready task is ready"));
                assert_eq!(
                    &task.options.group, group,
                    "task {:?} in its group",
                    task.id
                );
            }
            indexed += state.ready.len();
            assert_eq!(
                state.in_turn,
                self.turns.contains(group),
                "group {group:?} turn flag"
            );
            if !state.ready.is_empty() {
                assert!(state.in_turn, "group {group:?} with ready tasks has a turn");
            }
            if group.is_some() {
                let leased = tasks
                    .values()
                    .filter(|t| t.queue == *name && &t.options.group == group)
                    .filter(|t| matches!(t.state, State::Leased { .. }))
                    .count();
                assert_eq!(state.leased, leased, "group {group:?} leases");
            }
        }
        assert_eq!(indexed, ready.len(), "every ready task in one group");
        let mut turns: Vec<&Option<Bytes>> = self.turns.iter().collect();
        turns.sort();
        turns.dedup();
        assert_eq!(turns.len(), self.turns.len(), "each group in turn once");
    }
}
