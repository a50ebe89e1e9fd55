//! TASK.EVENTS on the engine: every state change of every task of a queue, in order, with a
//! sequence number per queue, so a consumer resumes from the number after the last one it
//! saw and misses nothing. The log keeps the last [`EVENTS_PER_QUEUE_MAX`] events of each
//! queue (`--task-events-max`); a consumer asking for older ones gets an error that says so, never a silent gap.
//! Replay makes the same events (they follow from the commands), and snapshots carry them.

use std::collections::VecDeque;

use bytes::Bytes;

use super::{Engine, Queue};

/// Events one queue keeps; past it the oldest go.
pub const EVENTS_PER_QUEUE_MAX: usize = 100_000;

/// What happened to a task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventKind {
    Queued,
    Scheduled,
    Held,
    Leased,
    Done,
    Dead,
    Cancelled,
    /// Dropped by TASK.PURGE.
    Purged,
    /// TASK.PROGRESS, with its value.
    Progress(Bytes),
}

impl EventKind {
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::Queued => "queued",
            EventKind::Scheduled => "scheduled",
            EventKind::Held => "held",
            EventKind::Leased => "leased",
            EventKind::Done => "done",
            EventKind::Dead => "dead",
            EventKind::Cancelled => "cancelled",
            EventKind::Purged => "purged",
            EventKind::Progress(_) => "progress",
        }
    }

    pub(super) fn code(&self) -> u8 {
        match self {
            EventKind::Queued => 0,
            EventKind::Scheduled => 1,
            EventKind::Leased => 2,
            EventKind::Done => 3,
            EventKind::Dead => 4,
            EventKind::Cancelled => 5,
            EventKind::Purged => 6,
            EventKind::Progress(_) => PROGRESS,
            EventKind::Held => 8,
        }
    }

    pub(super) fn from_code(code: u8, value: Option<Bytes>) -> Option<EventKind> {
        Some(match (code, value) {
            (0, None) => EventKind::Queued,
            (1, None) => EventKind::Scheduled,
            (2, None) => EventKind::Leased,
            (3, None) => EventKind::Done,
            (4, None) => EventKind::Dead,
            (5, None) => EventKind::Cancelled,
            (6, None) => EventKind::Purged,
            (PROGRESS, Some(value)) => EventKind::Progress(value),
            (8, None) => EventKind::Held,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub at_ms: u64,
    pub id: Bytes,
    pub kind: EventKind,
    /// The task's attempts at the time.
    pub attempt: u32,
}

/// A queue's event log: the oldest event kept has sequence number `first`. Stored compactly,
/// as every submit adds one (docs/TASKS.md, "Memory per waiting task"): a fixed 24-byte
/// record per event, the ids' bytes one after another in one ring, and the rare progress
/// values apart; an [`Event`] is built when one is read.
#[derive(Debug, Default)]
pub struct EventLog {
    pub(super) first: u64,
    records: VecDeque<Record>,
    /// The ids of the events kept, in order; `ids[0]` is byte `ids_start` of all ever noted.
    ids: VecDeque<u8>,
    ids_start: u64,
    /// (sequence number, value) of the progress events kept, in order.
    values: VecDeque<(u64, Bytes)>,
}

#[derive(Debug, Clone, Copy)]
struct Record {
    at_ms: u64,
    /// Where its id starts among all the id bytes ever noted.
    id_at: u64,
    attempt: u32,
    id_len: u16,
    code: u8,
}

impl EventLog {
    pub(super) fn push(
        &mut self,
        at_ms: u64,
        id: &[u8],
        kind: EventKind,
        attempt: u32,
        max: usize,
    ) {
        if self.first == 0 {
            self.first = 1;
        }
        let seq = self.next_seq();
        let code = kind.code();
        if let EventKind::Progress(value) = kind {
            self.values.push_back((seq, value));
        }
        let id_at = self.ids_start + self.ids.len() as u64;
        self.ids.extend(id);
        self.records.push_back(Record {
            at_ms,
            id_at,
            attempt,
            // Ids are at most NAME_BYTES_MAX plus a slot tag.
            id_len: u16::try_from(id.len()).unwrap_or(u16::MAX),
            code,
        });
        while self.records.len() > max.max(1) {
            self.pop_oldest();
        }
    }

    fn pop_oldest(&mut self) {
        let Some(record) = self.records.pop_front() else {
            return;
        };
        if self
            .values
            .front()
            .is_some_and(|(seq, _)| *seq == self.first)
        {
            self.values.pop_front();
        }
        self.ids.drain(..usize::from(record.id_len));
        self.ids_start += u64::from(record.id_len);
        self.first += 1;
    }

    /// The sequence number the next event gets.
    pub fn next_seq(&self) -> u64 {
        self.first.max(1) + self.records.len() as u64
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The events kept from the `skip`-th on, oldest first.
    pub fn iter_from(&self, skip: usize) -> impl Iterator<Item = Event> + '_ {
        let first = self.first.max(1);
        let from = first + skip as u64;
        let mut values = self
            .values
            .range(self.values.partition_point(|(seq, _)| *seq < from)..)
            .peekable();
        self.records
            .iter()
            .enumerate()
            .skip(skip)
            .map(move |(i, record)| {
                let seq = first + i as u64;
                let value = if record.code == PROGRESS {
                    while values.next_if(|(s, _)| *s < seq).is_some() {}
                    values.next_if(|(s, _)| *s == seq).map(|(_, v)| v.clone())
                } else {
                    None
                };
                let start = (record.id_at - self.ids_start) as usize;
                let id: Vec<u8> = self
                    .ids
                    .range(start..start + usize::from(record.id_len))
                    .copied()
                    .collect();
                Event {
                    at_ms: record.at_ms,
                    id: Bytes::from(id),
                    kind: EventKind::from_code(record.code, value).expect("a code this log wrote"),
                    attempt: record.attempt,
                }
            })
    }
}

/// `EventKind::Progress`'s code.
const PROGRESS: u8 = 7;

/// Why TASK.EVENTS could not answer from a cursor.
#[derive(Debug, PartialEq, Eq)]
pub struct EventsGone {
    /// The oldest sequence number still kept.
    pub oldest: u64,
}

/// What every event noted needs from the engine: its clock, how many events a queue keeps,
/// and the count of events noted so far (a parked TASK.EVENTS looks again when it moved).
#[derive(Debug)]
pub(super) struct EventClock {
    /// The latest time `advance` was given: the time of the events noted.
    pub(super) clock_ms: u64,
    pub(super) max: usize,
    pub(super) noted: u64,
}

impl Default for EventClock {
    fn default() -> Self {
        EventClock {
            clock_ms: 0,
            max: EVENTS_PER_QUEUE_MAX,
            noted: 0,
        }
    }
}

impl Queue {
    /// Logs an event at the engine's clock.
    pub(super) fn note(
        &mut self,
        clock: &mut EventClock,
        id: &[u8],
        kind: EventKind,
        attempt: u32,
    ) {
        let at_ms = clock.clock_ms;
        self.note_at(clock, at_ms, id, kind, attempt);
    }

    /// Logs an event at `at_ms`.
    pub(super) fn note_at(
        &mut self,
        clock: &mut EventClock,
        at_ms: u64,
        id: &[u8],
        kind: EventKind,
        attempt: u32,
    ) {
        self.events.push(at_ms, id, kind, attempt, clock.max);
        clock.noted += 1;
    }
}

impl Engine {
    /// Up to `count` events of `queue` from sequence number `from` on (0: the oldest kept),
    /// each with its number, and the cursor to go on from. An error when `from` names events
    /// no longer kept.
    pub fn events(
        &mut self,
        queue: &[u8],
        from: u64,
        count: usize,
        now_ms: u64,
    ) -> Result<(Vec<(u64, Event)>, u64), EventsGone> {
        self.advance(now_ms);
        let Some(q) = self.queues.get(queue) else {
            return Ok((Vec::new(), from.max(1)));
        };
        let log = &q.events;
        let oldest = log.first.max(1);
        if from != 0 && from < oldest {
            return Err(EventsGone { oldest });
        }
        let start = from.max(oldest);
        let skip = (start - oldest) as usize;
        let events: Vec<(u64, Event)> = log
            .iter_from(skip)
            .take(count)
            .enumerate()
            .map(|(i, e)| (start + i as u64, e))
            .collect();
        let next = start + events.len() as u64;
        Ok((events, next))
    }

    /// How many events this engine has noted (moves whenever any queue's log grows).
    pub fn events_noted(&self) -> u64 {
        self.events.noted
    }

    /// How many events each queue keeps (default `EVENTS_PER_QUEUE_MAX`).
    pub fn with_events_max(mut self, max: usize) -> Self {
        self.events.max = max.max(1);
        self
    }

    pub fn events_max(&self) -> usize {
        self.events.max
    }

    /// Whether `queue` has an event numbered `from` or later (for a blocked TASK.EVENTS).
    pub fn has_events(&self, queue: &[u8], from: u64) -> bool {
        self.queues
            .get(queue)
            .is_some_and(|q| !q.events.is_empty() && q.events.next_seq() > from)
    }

    /// Notes an event for task `id` (in `queue`) at the engine's clock.
    pub(super) fn note_event(&mut self, id: &[u8], kind: EventKind) {
        if let Some(task) = self.tasks.get(id) {
            if let Some(q) = self.queues.get_mut(&task.queue) {
                q.note(&mut self.events, &task.id, kind, task.attempts);
            }
        }
    }
}

/// Events as stored in snapshots: (first, events), for one queue.
pub(super) fn put_log(out: &mut Vec<u8>, log: &EventLog) {
    use crate::wire::{put_bytes, put_opt_bytes, put_u64};
    put_u64(out, log.first);
    put_u64(out, log.len() as u64);
    for e in log.iter_from(0) {
        put_u64(out, e.at_ms);
        put_bytes(out, &e.id);
        out.push(e.kind.code());
        let value = match &e.kind {
            EventKind::Progress(v) => Some(&v[..]),
            _ => None,
        };
        put_opt_bytes(out, value);
        put_u64(out, u64::from(e.attempt));
    }
}

pub(super) fn read_log(r: &mut crate::wire::Reader) -> crate::wire::Decoded<EventLog> {
    let mut log = EventLog {
        first: r.u64()?,
        ..EventLog::default()
    };
    for _ in 0..r.count()? {
        let at_ms = r.u64()?;
        let id = r.bytes()?;
        let code = r.u8()?;
        let value = r.opt_bytes()?;
        let kind = EventKind::from_code(code, value)
            .ok_or(crate::wire::DecodeError("unknown task event"))?;
        let attempt = r.u32()?;
        // `push` numbers from `first`, already read: keep all of them.
        let first = log.first;
        log.push(at_ms, &id, kind, attempt, usize::MAX);
        log.first = first;
    }
    Ok(log)
}
