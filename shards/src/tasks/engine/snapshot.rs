//! An engine's whole state as bytes, and back: what a snapshot stores of the task engine.
//!
//! Written: the counters and id sequences, the UNIQUE windows and the deadline index (both
//! kept apart from the tasks: a window outlives its task, and a requeued dead task keeps no
//! deadline), each queue's own state (pause, limits, the rate limit's log of recent leases,
//! counters), every task with all its fields, and the cron schedules. Rebuilt on load from the tasks: the ready
//! sets, the scheduled and lease indexes, the owners' lease index, the dead sets and the
//! retention indexes, exactly as the engine maintains them (its invariant check passes on the
//! result). The first format's queue and task parts (no lost-lease counts, a fixed rate
//! window) still load.
//!
//! The output comes in parts of about [`PART_BYTES`] so that a caller can frame each as a
//! record; parts must be loaded in order.

use std::cmp::Reverse;

use bytes::Bytes;

use super::{owners, Batch, CronEntry, Engine, OnFail, Queue, Task};
use crate::tasks::cron::Schedule;
use crate::tasks::model::{
    Origin, Outcome, State, SubmitOptions, TaskOptions, LOST_LEASES_MAX_DEFAULT,
};
use crate::wire::{put_bytes, put_opt_bytes, put_opt_u64, put_u64, DecodeError, Decoded, Reader};

/// About how large one part grows before the next starts.
pub const PART_BYTES: usize = 1 << 20;

const META: u8 = 1;
/// A queue as the first format wrote it (read only): with its dead list and a fixed rate
/// window.
const QUEUE_V1: u8 = 2;
/// Tasks as the first format wrote them (read only): without lost leases and LOSTMAX.
const TASKS_V1: u8 = 3;
const QUEUE: u8 = 4;
const TASKS: u8 = 5;
const CRONS: u8 = 6;
/// One queue's event log (after its queue part).
const EVENTS: u8 = 7;
/// Tasks' progress and log lines (after the tasks).
const EXTRAS: u8 = 8;
const BATCHES: u8 = 9;

fn put_i64(out: &mut Vec<u8>, v: i64) {
    put_u64(out, v as u64);
}

fn read_i64(r: &mut Reader) -> Decoded<i64> {
    Ok(r.u64()? as i64)
}

fn put_opt_u32(out: &mut Vec<u8>, v: Option<u32>) {
    put_opt_u64(out, v.map(u64::from));
}

fn read_opt_u32(r: &mut Reader) -> Decoded<Option<u32>> {
    r.opt_u64()?
        .map(|v| u32::try_from(v).map_err(|_| DecodeError("number out of range")))
        .transpose()
}

/// Writes `items` as parts tagged `tag` of about [`PART_BYTES`] each.
fn put_chunked<T>(
    part: &mut dyn FnMut(&[u8]),
    tag: u8,
    items: impl Iterator<Item = T>,
    mut put: impl FnMut(&mut Vec<u8>, T),
) {
    let mut out = Vec::new();
    for item in items {
        if out.is_empty() {
            out.push(tag);
        }
        put(&mut out, item);
        if out.len() >= PART_BYTES {
            part(&out);
            out.clear();
        }
    }
    if !out.is_empty() {
        part(&out);
    }
}

/// One queue's own state as a part: pause, limits, the rate limit's log and counters (its
/// dead set follows from its tasks).
fn put_queue(out: &mut Vec<u8>, name: &[u8], q: &Queue) {
    out.push(QUEUE);
    put_bytes(out, name);
    out.push(u8::from(q.paused));
    put_opt_u32(out, q.concurrency);
    put_rate(out, q.rate);
    put_u64(out, q.rate_log.len() as u64);
    for at in &q.rate_log {
        put_u64(out, *at);
    }
    put_u64(out, q.submitted);
    put_u64(out, q.acked);
    put_u64(out, q.failed);
    let g = &q.groups;
    out.push(u8::from(g.on));
    put_opt_u32(out, g.concurrency);
    put_rate(out, g.rate);
    put_u64(out, g.turns.len() as u64);
    for group in &g.turns {
        put_opt_bytes(out, group.as_deref());
    }
    let mut logs: Vec<(&Option<Bytes>, &std::collections::VecDeque<u64>)> = g
        .by_key
        .iter()
        .filter(|(_, state)| !state.rate_log.is_empty())
        .map(|(key, state)| (key, &state.rate_log))
        .collect();
    logs.sort();
    put_u64(out, logs.len() as u64);
    for (group, log) in logs {
        put_opt_bytes(out, group.as_deref());
        put_u64(out, log.len() as u64);
        for at in log {
            put_u64(out, *at);
        }
    }
    // Appended last: a part written before it ends here, and reads as no retries.
    put_u64(out, q.retried);
}

impl Engine {
    /// Writes the engine's state as a sequence of parts, each handed to `part`.
    pub fn export(&self, part: &mut dyn FnMut(&[u8])) {
        part(&self.meta_part());
        let mut out = Vec::new();
        let mut names: Vec<&Bytes> = self.queues.keys().collect();
        names.sort();
        for name in names {
            out.clear();
            put_queue(&mut out, name, &self.queues[name]);
            part(&out);
            if !self.queues[name].events.is_empty() {
                out.clear();
                out.push(EVENTS);
                put_bytes(&mut out, name);
                super::events::put_log(&mut out, &self.queues[name].events);
                part(&out);
            }
        }
        self.export_records(part);
    }

    /// The counters, id sequences, UNIQUE windows and deadlines.
    fn meta_part(&self) -> Vec<u8> {
        let mut out = vec![META];
        put_i64(&mut out, self.next_order);
        put_i64(&mut out, self.next_head);
        put_u64(&mut out, self.next_id);
        let t = &self.totals;
        for v in [
            t.submitted,
            t.acked,
            t.failed,
            t.retried,
            t.dead,
            t.cancelled,
            t.fallbacks,
            t.leases_lost,
        ] {
            put_u64(&mut out, v);
        }
        let mut unique: Vec<_> = self.unique.iter().collect();
        unique.sort();
        put_u64(&mut out, unique.len() as u64);
        for ((queue, key), (id, until)) in unique {
            put_bytes(&mut out, queue);
            put_bytes(&mut out, key);
            put_bytes(&mut out, id);
            put_u64(&mut out, *until);
        }
        put_u64(&mut out, self.deadlines.len() as u64);
        for (deadline, id) in &self.deadlines {
            put_u64(&mut out, *deadline);
            put_bytes(&mut out, id);
        }
        out
    }

    /// The tasks, their progress and logs, the batches and the crons, in chunked parts.
    fn export_records(&self, part: &mut dyn FnMut(&[u8])) {
        let mut ids: Vec<&Bytes> = self.tasks.keys().collect();
        ids.sort();
        put_chunked(part, TASKS, ids.into_iter(), |out, id| {
            let task = &self.tasks[id];
            put_task(out, task);
            put_u64(out, u64::from(task.lost_leases));
            put_u64(out, u64::from(task.options.lost_max));
            put_opt_bytes(out, task.options.group.as_deref());
            put_opt_bytes(out, task.options.batch.as_deref());
            out.push(u8::from(task.options.hold));
        });
        let mut with_extras: Vec<&Bytes> = self.extras.keys().collect();
        with_extras.sort();
        put_chunked(part, EXTRAS, with_extras.into_iter(), |out, id| {
            let extras = &self.extras[id];
            put_bytes(out, id);
            put_opt_bytes(out, extras.progress.as_deref());
            let lines: Vec<&Bytes> = extras.logs.iter().collect();
            crate::wire::put_bytes_list(out, &lines);
            put_u64(out, extras.logs_dropped);
        });
        put_chunked(part, BATCHES, self.batches.values(), put_batch);
        put_chunked(part, CRONS, self.crons.values(), put_cron);
    }

    /// Loads one part written by [`Engine::export`] (parts in order, into an engine made
    /// with `Engine::new`); call [`Engine::finish_import`] after the last.
    pub fn import_part(&mut self, part: Bytes) -> Decoded<()> {
        let mut r = Reader::new(part);
        match r.u8()? {
            META => self.import_meta(&mut r)?,
            kind @ (QUEUE | QUEUE_V1) => {
                let (name, q) = read_queue(kind, &mut r)?;
                self.queues.insert(name, q);
            }
            kind @ (TASKS | TASKS_V1) => {
                while !r.is_done() {
                    let mut task = read_task(&mut r)?;
                    if kind == TASKS {
                        task.lost_leases = r.u32()?;
                        let mut options = (*task.options).clone();
                        options.lost_max = r.u32()?;
                        options.group = r.opt_bytes()?;
                        options.batch = r.opt_bytes()?;
                        options.hold = r.flag()?;
                        task.options = TaskOptions::new(options);
                    }
                    // Ids we make up to a caller's id of our form are looked up first.
                    self.note_id(&task.id);
                    self.tasks.insert(task);
                }
            }
            EVENTS => {
                let name = r.bytes()?;
                let log = super::events::read_log(&mut r)?;
                self.queues
                    .get_mut(&name)
                    .ok_or(DecodeError("events of a queue not loaded"))?
                    .events = log;
            }
            EXTRAS => {
                while !r.is_done() {
                    let id = r.bytes()?;
                    let progress = r.opt_bytes()?;
                    let logs = r.bytes_list()?;
                    let dropped = r.u64()?;
                    self.extras
                        .insert(id, super::Extras::restore(progress, logs, dropped));
                }
            }
            BATCHES => {
                while !r.is_done() {
                    let batch = read_batch(&mut r)?;
                    self.restore_batch(batch);
                }
            }
            CRONS => {
                while !r.is_done() {
                    let cron = read_cron(&mut r)?;
                    if let Some(next) = cron.next_ms {
                        self.cron_due.insert((next, cron.name.clone()));
                    }
                    self.crons.insert(cron.name.clone(), cron);
                }
            }
            _ => return Err(DecodeError("unknown engine part")),
        }
        if !r.is_done() {
            return Err(DecodeError("trailing bytes in an engine part"));
        }
        Ok(())
    }

    /// The META part: counters, id sequences, UNIQUE windows and deadlines.
    fn import_meta(&mut self, r: &mut Reader) -> Decoded<()> {
        self.next_order = read_i64(r)?;
        self.next_head = read_i64(r)?;
        self.next_id = r.u64()?;
        let t = &mut self.totals;
        for v in [
            &mut t.submitted,
            &mut t.acked,
            &mut t.failed,
            &mut t.retried,
            &mut t.dead,
            &mut t.cancelled,
            &mut t.fallbacks,
            &mut t.leases_lost,
        ] {
            *v = r.u64()?;
        }
        for _ in 0..r.count()? {
            let queue = r.bytes()?;
            let key = r.bytes()?;
            let id = r.bytes()?;
            let until = r.u64()?;
            self.unique.insert((queue, key), (id, until));
        }
        for _ in 0..r.count()? {
            let deadline = r.u64()?;
            self.deadlines.insert((deadline, r.bytes()?));
        }
        Ok(())
    }

    /// Rebuilds the indexes that follow from the tasks, after the last part.
    pub fn finish_import(&mut self) -> Decoded<()> {
        let ids: Vec<Bytes> = self.tasks.keys().cloned().collect();
        for id in ids {
            let slot = self.tasks.slot_of(&id).expect("listed");
            let task = self.tasks.at(slot);
            let q = self.queues.entry(task.queue.clone()).or_default();
            match task.state {
                State::Held => {}
                State::Queued => {
                    let key = (Reverse(task.options.priority), task.order);
                    q.ready.insert(key, slot);
                    q.ready_by_age.insert(task.submitted_ms);
                    if q.groups.on {
                        let group = task.options.group.clone();
                        q.groups.by_key.entry(group).or_default().ready.insert(key);
                    }
                }
                State::Scheduled { due_ms } => {
                    q.scheduled += 1;
                    self.scheduled.insert((due_ms, id.clone()));
                }
                State::Leased { owner, until_ms } => {
                    q.leased += 1;
                    if q.groups.on && task.options.group.is_some() {
                        let group = task.options.group.clone();
                        q.groups.by_key.entry(group).or_default().leased += 1;
                    }
                    self.leases.insert((until_ms, id.clone()));
                    owners::index(&mut self.by_owner, owner, id.clone());
                }
                State::Dead { finished_ms: died } => {
                    q.dead.insert((died, id.clone()));
                    let forget_at = Engine::forget_at(task, self.dead_retention_ms);
                    self.dead_retained.insert((forget_at, id.clone()));
                }
                State::Done { .. } | State::Cancelled { .. } => {
                    let forget_at = Engine::forget_at(task, self.retention_ms);
                    self.retained.insert((forget_at, id.clone()));
                }
            }
        }
        Ok(())
    }
}

/// A queue part, of either format: its name and own state (its groups' turns and rate logs
/// in the current one).
fn read_queue(kind: u8, r: &mut Reader) -> Decoded<(Bytes, Queue)> {
    let name = r.bytes()?;
    if kind == QUEUE_V1 {
        // The dead list: rebuilt from the tasks.
        r.bytes_list()?;
    }
    let mut q = Queue {
        paused: r.flag()?,
        concurrency: read_opt_u32(r)?,
        rate: read_rate(r)?,
        ..Queue::default()
    };
    if kind == QUEUE_V1 {
        // A fixed window's start and count: the sliding log starts empty.
        r.u64()?;
        r.u32()?;
    } else {
        for _ in 0..r.count()? {
            q.rate_log.push_back(r.u64()?);
        }
    }
    q.submitted = r.u64()?;
    q.acked = r.u64()?;
    q.failed = r.u64()?;
    if kind == QUEUE {
        read_groups(&mut q.groups, r)?;
        if !r.is_done() {
            q.retried = r.u64()?;
        }
    }
    Ok((name, q))
}

fn put_rate(out: &mut Vec<u8>, rate: Option<(u32, u64)>) {
    match rate {
        None => out.push(0),
        Some((n, per)) => {
            out.push(1);
            put_u64(out, u64::from(n));
            put_u64(out, per);
        }
    }
}

fn read_rate(r: &mut Reader) -> Decoded<Option<(u32, u64)>> {
    Ok(if r.flag()? {
        Some((r.u32()?, r.u64()?))
    } else {
        None
    })
}

fn read_groups(g: &mut super::groups::Groups, r: &mut Reader) -> Decoded<()> {
    g.on = r.flag()?;
    g.concurrency = read_opt_u32(r)?;
    g.rate = read_rate(r)?;
    let mut turns = Vec::new();
    for _ in 0..r.count()? {
        turns.push(r.opt_bytes()?);
    }
    g.restore_turns(turns);
    for _ in 0..r.count()? {
        let group = r.opt_bytes()?;
        let state = g.by_key.entry(group).or_default();
        for _ in 0..r.count()? {
            state.rate_log.push_back(r.u64()?);
        }
    }
    Ok(())
}

fn put_task(out: &mut Vec<u8>, t: &Task) {
    put_bytes(out, &t.id);
    put_bytes(out, &t.queue);
    put_bytes(out, &t.payload);
    put_options(out, &t.options);
    put_state_and_rest(out, t);
}

/// A task's options (not LOSTMAX, which the current task parts write after the task).
fn put_options(out: &mut Vec<u8>, o: &SubmitOptions) {
    put_opt_bytes(out, o.id.as_deref());
    put_i64(out, o.priority);
    put_opt_u64(out, o.due_ms);
    put_u64(out, u64::from(o.retries));
    put_u64(out, o.backoff_base_ms);
    put_u64(out, o.backoff_cap_ms);
    put_opt_u64(out, o.lease_ms);
    put_opt_u64(out, o.deadline_ms);
    put_opt_bytes(out, o.fallback.as_deref());
    match &o.unique {
        None => out.push(0),
        Some((key, window)) => {
            out.push(1);
            put_bytes(out, key);
            put_u64(out, *window);
        }
    }
}

fn put_state_and_rest(out: &mut Vec<u8>, t: &Task) {
    match t.state {
        State::Scheduled { due_ms } => {
            out.push(0);
            put_u64(out, due_ms);
        }
        State::Queued => out.push(1),
        State::Leased { owner, until_ms } => {
            out.push(2);
            put_u64(out, owner);
            put_u64(out, until_ms);
        }
        State::Done { .. } => out.push(3),
        State::Dead { .. } => out.push(4),
        State::Cancelled { .. } => out.push(5),
        State::Held => out.push(6),
    }
    put_u64(out, u64::from(t.attempts));
    put_opt_bytes(out, t.last_error().map(|b| &b[..]));
    put_opt_bytes(out, t.result().map(|b| &b[..]));
    put_u64(out, t.submitted_ms);
    put_opt_u64(out, t.finished_ms());
    put_i64(out, t.order);
    match t.origin() {
        None => out.push(0),
        Some(origin) => {
            out.push(1);
            put_bytes(out, &origin.id);
            put_bytes(out, &origin.queue);
            put_opt_bytes(out, origin.error.as_deref());
            put_u64(out, u64::from(origin.attempts));
        }
    }
}

fn read_task(r: &mut Reader) -> Decoded<Task> {
    let id = r.bytes()?;
    let queue = r.bytes()?;
    let payload = r.bytes()?;
    let options = read_options(r)?;
    read_state_and_rest(r, id, queue, payload, options)
}

fn read_options(r: &mut Reader) -> Decoded<SubmitOptions> {
    Ok(SubmitOptions {
        id: r.opt_bytes()?,
        priority: read_i64(r)?,
        due_ms: r.opt_u64()?,
        retries: r.u32()?,
        backoff_base_ms: r.u64()?,
        backoff_cap_ms: r.u64()?,
        lease_ms: r.opt_u64()?,
        deadline_ms: r.opt_u64()?,
        fallback: r.opt_bytes()?,
        unique: if r.flag()? {
            Some((r.bytes()?, r.u64()?))
        } else {
            None
        },
        lost_max: LOST_LEASES_MAX_DEFAULT,
        group: None,
        batch: None,
        hold: false,
    })
}

fn read_state_and_rest(
    r: &mut Reader,
    id: Bytes,
    queue: Bytes,
    payload: Bytes,
    options: SubmitOptions,
) -> Decoded<Task> {
    let state = match r.u8()? {
        0 => State::Scheduled { due_ms: r.u64()? },
        1 => State::Queued,
        2 => State::Leased {
            owner: r.u64()?,
            until_ms: r.u64()?,
        },
        // Terminal states get their finish time below, where the record carries it.
        3 => State::Done { finished_ms: 0 },
        4 => State::Dead { finished_ms: 0 },
        5 => State::Cancelled { finished_ms: 0 },
        6 => State::Held,
        _ => return Err(DecodeError("unknown task state")),
    };
    let attempts = r.u32()?;
    let last_error = r.opt_bytes()?;
    let result = r.opt_bytes()?;
    let submitted_ms = r.u64()?;
    let finished_ms = r.opt_u64()?;
    let state = match (state, finished_ms) {
        (State::Done { .. }, Some(finished_ms)) => State::Done { finished_ms },
        (State::Dead { .. }, Some(finished_ms)) => State::Dead { finished_ms },
        (State::Cancelled { .. }, Some(finished_ms)) => State::Cancelled { finished_ms },
        (state, None) if state.is_terminal() => {
            return Err(DecodeError("a finished task without its finish time"));
        }
        (state, _) => state,
    };
    let order = read_i64(r)?;
    let origin = if r.flag()? {
        Some(Origin {
            id: r.bytes()?,
            queue: r.bytes()?,
            error: r.opt_bytes()?,
            attempts: r.u32()?,
        })
    } else {
        None
    };
    let mut task = Task::new(id, queue, payload, options, state, submitted_ms, order);
    task.attempts = attempts;
    task.set_outcome(Outcome {
        last_error,
        result,
        origin: origin.map(Box::new),
    });
    Ok(task)
}

fn put_batch(out: &mut Vec<u8>, b: &Batch) {
    put_bytes(out, &b.id);
    let children: Vec<&Bytes> = b.children.iter().collect();
    crate::wire::put_bytes_list(out, &children);
    let mut ends: Vec<(&Bytes, &bool)> = b.ends.iter().collect();
    ends.sort();
    put_u64(out, ends.len() as u64);
    for (child, ok) in ends {
        put_bytes(out, child);
        out.push(u8::from(*ok));
    }
    put_opt_bytes(out, b.on_success.as_deref());
    put_opt_bytes(out, b.on_complete.as_deref());
    put_u64(out, b.created_ms);
    put_opt_u64(out, b.fired_ms);
    out.push(match b.flow {
        None => 0,
        Some(OnFail::FailParent) => 1,
        Some(OnFail::Ignore) => 2,
    });
    let mut outcomes: Vec<(&Bytes, &Bytes)> = b.outcomes.iter().collect();
    outcomes.sort();
    put_u64(out, outcomes.len() as u64);
    for (child, outcome) in outcomes {
        put_bytes(out, child);
        put_bytes(out, outcome);
    }
}

fn read_batch(r: &mut Reader) -> Decoded<Batch> {
    let id = r.bytes()?;
    let children = r.bytes_list()?;
    let mut ends = std::collections::HashMap::new();
    for _ in 0..r.count()? {
        let child = r.bytes()?;
        ends.insert(child, r.flag()?);
    }
    Ok(Batch {
        id,
        members: children.iter().cloned().collect(),
        children,
        ends,
        on_success: r.opt_bytes()?,
        on_complete: r.opt_bytes()?,
        created_ms: r.u64()?,
        fired_ms: r.opt_u64()?,
        flow: match r.u8()? {
            0 => None,
            1 => Some(OnFail::FailParent),
            2 => Some(OnFail::Ignore),
            _ => return Err(DecodeError("unknown flow rule")),
        },
        outcomes: {
            let mut outcomes = std::collections::HashMap::new();
            for _ in 0..r.count()? {
                let child = r.bytes()?;
                outcomes.insert(child, r.bytes()?);
            }
            outcomes
        },
    })
}

fn put_cron(out: &mut Vec<u8>, c: &CronEntry) {
    put_bytes(out, &c.name);
    put_bytes(out, &c.spec);
    put_bytes(out, &c.queue);
    put_bytes(out, &c.payload);
    put_options(out, &c.options);
    put_u64(out, u64::from(c.options.lost_max));
    put_opt_bytes(out, c.options.group.as_deref());
    put_opt_bytes(out, c.options.batch.as_deref());
    out.push(u8::from(c.options.hold));
    put_opt_u64(out, c.next_ms);
    put_u64(out, c.created_ms);
    put_u64(out, c.fired);
    put_opt_u64(out, c.last_fired_ms);
    put_u64(out, c.skipped);
}

fn read_cron(r: &mut Reader) -> Decoded<CronEntry> {
    let name = r.bytes()?;
    let spec = r.bytes()?;
    let schedule = std::str::from_utf8(&spec)
        .ok()
        .and_then(|text| Schedule::parse(text).ok())
        .ok_or(DecodeError("a cron schedule that does not parse"))?;
    let queue = r.bytes()?;
    let payload = r.bytes()?;
    let mut options = read_options(r)?;
    options.lost_max = r.u32()?;
    options.group = r.opt_bytes()?;
    options.batch = r.opt_bytes()?;
    options.hold = r.flag()?;
    Ok(CronEntry {
        name,
        spec,
        schedule,
        queue,
        payload,
        options,
        next_ms: r.opt_u64()?,
        created_ms: r.u64()?,
        fired: r.u64()?,
        last_fired_ms: r.opt_u64()?,
        skipped: r.u64()?,
    })
}

impl Engine {
    /// Moves the queues `owns` accepts, with their tasks, UNIQUE windows and index entries,
    /// from `other` into this engine (a restart with another shard count hands each queue to
    /// its new shard). Id and order sequences continue past both engines'; `with_totals`
    /// adds `other`'s counters too (pass it for exactly one receiver per source).
    pub fn absorb(&mut self, other: &mut Engine, owns: &dyn Fn(&[u8]) -> bool, with_totals: bool) {
        self.next_id = self.next_id.max(other.next_id);
        self.next_order = self.next_order.max(other.next_order);
        self.next_head = self.next_head.min(other.next_head);
        if with_totals {
            self.totals.add(&other.totals);
        }
        let names: Vec<Bytes> = other.queues.keys().filter(|n| owns(n)).cloned().collect();
        for name in names {
            let q = other.queues.remove(&name).expect("listed");
            self.queues.insert(name, q);
        }
        let ids: Vec<Bytes> = other
            .tasks
            .values()
            .filter(|t| owns(&t.queue))
            .map(|t| t.id.clone())
            .collect();
        for id in ids {
            self.take_task(other, id);
        }
        let keys: Vec<(Bytes, Bytes)> = other
            .unique
            .keys()
            .filter(|(queue, _)| owns(queue))
            .cloned()
            .collect();
        for key in keys {
            let value = other.unique.remove(&key).expect("listed");
            self.unique.insert(key, value);
        }
        self.absorb_crons(other, owns);
        let batches: Vec<Bytes> = other
            .batches
            .keys()
            .filter(|id| owns(id))
            .cloned()
            .collect();
        for id in batches {
            let batch = other.batches.remove(&id).expect("listed");
            if let Some(fired) = batch.fired_ms {
                other.batches_fired.remove(&(fired, id.clone()));
            }
            self.restore_batch(batch);
        }
        self.cron_fired += other.cron_fired;
    }

    /// Moves task `id` of `other` here, with its index entries and extras.
    fn take_task(&mut self, other: &mut Engine, id: Bytes) {
        let task = other.tasks.remove(&id).expect("listed");
        match task.state {
            State::Held => {}
            State::Scheduled { due_ms } => {
                other.scheduled.remove(&(due_ms, id.clone()));
                self.scheduled.insert((due_ms, id.clone()));
            }
            State::Leased { owner, until_ms } => {
                other.leases.remove(&(until_ms, id.clone()));
                other.release_owner_index(owner, &id);
                self.leases.insert((until_ms, id.clone()));
                owners::index(&mut self.by_owner, owner, id.clone());
            }
            State::Queued => {}
            State::Done { .. } | State::Dead { .. } | State::Cancelled { .. } => {
                let (dead, key) = other.retention_key(&task);
                other.retention_index(dead).remove(&key);
                let (dead, key) = self.retention_key(&task);
                self.retention_index(dead).insert(key);
            }
        }
        if let Some(deadline) = task.options.deadline_ms {
            if other.deadlines.remove(&(deadline, id.clone())) {
                self.deadlines.insert((deadline, id.clone()));
            }
        }
        if let Some(extras) = other.extras.remove(&id) {
            self.extras.insert(id.clone(), extras);
        }
        let key = (Reverse(task.options.priority), task.order);
        let (queued, queue) = (task.state == State::Queued, task.queue.clone());
        self.note_id(&task.id);
        let (slot, _) = self.tasks.insert(task);
        if queued {
            // Its queue came over first, its ready set naming the task's slot over there.
            let q = self.queues.get_mut(&queue).expect("moved with its queue");
            q.ready.insert(key, slot);
        }
    }
}
