//! What a task is: its state, the options it was submitted with, and the documented defaults
//! and limits (docs/TASKS.md repeats them; a test keeps the two in step later).

use bytes::Bytes;

/// Lease given by a fetch that names none.
pub const LEASE_MS_DEFAULT: u64 = 30_000;
/// Longest lease a fetch or an extension may ask for.
pub const LEASE_MS_MAX: u64 = 24 * 3_600_000;
/// Retries after the first attempt when SUBMIT names none (so 4 attempts in all).
pub const RETRIES_DEFAULT: u32 = 3;
/// Most retries a task may ask for.
pub const RETRIES_MAX: u32 = 1_000;
/// Backoff before the first retry, doubled each time (with jitter), when SUBMIT names none.
pub const BACKOFF_BASE_MS_DEFAULT: u64 = 1_000;
/// Longest backoff, when SUBMIT names none.
pub const BACKOFF_CAP_MS_DEFAULT: u64 = 3_600_000;
/// How long a finished task (done, dead, cancelled) and its result stay readable.
pub const RETENTION_MS_DEFAULT: u64 = 600_000;
/// How long a dead task stays in its queue's dead set (and readable), unless REQUEUEd or
/// pushed out by the per-queue cap: kept apart from finished tasks, so a busy shard's
/// acknowledged tasks never push dead ones out.
pub const DEAD_RETENTION_MS_DEFAULT: u64 = 7 * 24 * 3_600_000;
/// Leases a task may lose (its worker died, stalled past the lease, or disconnected) before
/// it goes dead instead of back to its queue: a task that kills its worker stops at the
/// third, whatever its retries.
pub const LOST_LEASES_MAX_DEFAULT: u32 = 3;
/// Most done and cancelled tasks one shard keeps; past it the oldest finished are forgotten first, so
/// memory stays bounded however fast tasks finish.
pub const RETAINED_TASKS_MAX: usize = 100_000;
/// Largest payload, result or error text.
pub const PAYLOAD_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Most tasks waiting in one queue (queued and scheduled); a submit beyond it is refused.
pub const QUEUE_TASKS_MAX: usize = 10_000_000;
/// Most tasks of one queue leased at once; a fetch that finds nothing else to lease because
/// of it gets an error.
pub const IN_FLIGHT_PER_QUEUE_MAX: usize = 1_000_000;
/// Most tasks one fetch may lease.
pub const FETCH_COUNT_MAX: usize = 1_000;
/// Most dead tasks kept per queue; the oldest are dropped first.
pub const DEAD_PER_QUEUE_MAX: usize = 100_000;
/// Longest queue name, id or unique key.
pub const NAME_BYTES_MAX: usize = 1024;

/// Where a task is in its life. Terminal states are `Done`, `Dead` and `Cancelled`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// Waiting for `due_ms` (a DELAY/AT, or a retry's backoff).
    Scheduled { due_ms: u64 },
    /// In its queue, ready to lease.
    Queued,
    /// Held until released (TASK.RELEASE: a batch's callback waits so until its batch is
    /// complete).
    Held,
    /// Leased to `owner` (a client id, or a worker identity's owner id) until `until_ms`.
    Leased { owner: u64, until_ms: u64 },
    /// Acknowledged at `finished_ms`.
    Done { finished_ms: u64 },
    /// Dead (out of attempts, NORETRY, past its TTL, ...) since `finished_ms`.
    Dead { finished_ms: u64 },
    /// Cancelled at `finished_ms`.
    Cancelled { finished_ms: u64 },
}

impl State {
    pub fn name(&self) -> &'static str {
        match self {
            State::Scheduled { .. } => "scheduled",
            State::Queued => "queued",
            State::Held => "held",
            State::Leased { .. } => "leased",
            State::Done { .. } => "done",
            State::Dead { .. } => "dead",
            State::Cancelled { .. } => "cancelled",
        }
    }

    pub fn is_terminal(&self) -> bool {
        self.finished_ms().is_some()
    }

    pub fn is_done(&self) -> bool {
        matches!(self, State::Done { .. })
    }

    pub fn is_dead(&self) -> bool {
        matches!(self, State::Dead { .. })
    }

    /// When a terminal state was entered; `None` for a live task.
    pub fn finished_ms(&self) -> Option<u64> {
        match *self {
            State::Done { finished_ms }
            | State::Dead { finished_ms }
            | State::Cancelled { finished_ms } => Some(finished_ms),
            _ => None,
        }
    }
}

/// SUBMIT's options, defaults applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubmitOptions {
    pub id: Option<Bytes>,
    /// Higher runs first; equal priorities run in submission order.
    pub priority: i64,
    /// Absolute time the task becomes ready (DELAY or AT); `None` for now.
    pub due_ms: Option<u64>,
    pub retries: u32,
    pub backoff_base_ms: u64,
    pub backoff_cap_ms: u64,
    /// Lease for this task when the fetch names none.
    pub lease_ms: Option<u64>,
    /// The task dies if it has not finished by this absolute time.
    pub deadline_ms: Option<u64>,
    pub fallback: Option<Bytes>,
    /// Leases it may lose before it goes dead (LOSTMAX).
    pub lost_max: u32,
    /// GROUP key: the queue's group limits apply per key, and fetches take turns.
    pub group: Option<Bytes>,
    /// The batch it is a child of: its end is reported there.
    pub batch: Option<Bytes>,
    /// HOLD: submitted held, until TASK.RELEASE.
    pub hold: bool,
    /// (key, window): a second submit with the key while the first task is live, or within
    /// `window` ms of its submission, returns the first id.
    pub unique: Option<(Bytes, u64)>,
}

/// SUBMIT's defaults, shared by every task submitted without options.
pub static DEFAULT_OPTIONS: SubmitOptions = SubmitOptions {
    id: None,
    priority: 0,
    due_ms: None,
    retries: RETRIES_DEFAULT,
    backoff_base_ms: BACKOFF_BASE_MS_DEFAULT,
    backoff_cap_ms: BACKOFF_CAP_MS_DEFAULT,
    lease_ms: None,
    deadline_ms: None,
    fallback: None,
    unique: None,
    lost_max: LOST_LEASES_MAX_DEFAULT,
    group: None,
    batch: None,
    hold: false,
};

impl Default for SubmitOptions {
    fn default() -> Self {
        DEFAULT_OPTIONS.clone()
    }
}

/// A task's options as it keeps them: nothing for a task submitted with the defaults (most
/// are), a box otherwise. Reads see a [`SubmitOptions`] either way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskOptions(Option<Box<SubmitOptions>>);

impl TaskOptions {
    /// What a task keeps of SUBMIT's options: not its ID and due time, which the task
    /// itself and its state hold from then on.
    pub fn new(mut options: SubmitOptions) -> Self {
        options.id = None;
        options.due_ms = None;
        if options == DEFAULT_OPTIONS {
            TaskOptions(None)
        } else {
            TaskOptions(Some(Box::new(options)))
        }
    }
}

impl std::ops::Deref for TaskOptions {
    type Target = SubmitOptions;

    fn deref(&self) -> &SubmitOptions {
        self.0.as_deref().unwrap_or(&DEFAULT_OPTIONS)
    }
}

/// What a task has only once something happened to it (an error, a result) or when a
/// death created it: boxed, so a waiting task pays 8 bytes for it, and so does a task
/// acknowledged with no result (the common finished task, kept for its retention time).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub last_error: Option<Bytes>,
    pub result: Option<Bytes>,
    /// Set on a fallback task: the task whose death created it (rare: boxed again).
    pub origin: Option<Box<Origin>>,
}

/// What a fallback task carries about the task that died.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    pub id: Bytes,
    pub queue: Bytes,
    pub error: Option<Bytes>,
    pub attempts: u32,
}

/// Payloads up to this long are kept inside the task; longer ones in a shared buffer.
pub const PAYLOAD_INLINE_MAX: usize = 38;

/// A task's payload. Most job payloads are an id or a little JSON, so a short one lives in
/// the task record itself (as Redis keeps short list elements in the list's own memory)
/// instead of in an allocation of its own; a long one is shared, never copied.
#[derive(Clone)]
pub struct Payload(PayloadRepr);

#[derive(Clone)]
enum PayloadRepr {
    Inline {
        len: u8,
        bytes: [u8; PAYLOAD_INLINE_MAX],
    },
    Shared(Bytes),
}

impl Payload {
    pub fn new(payload: Bytes) -> Payload {
        if payload.len() > PAYLOAD_INLINE_MAX {
            return Payload(PayloadRepr::Shared(payload));
        }
        let mut bytes = [0; PAYLOAD_INLINE_MAX];
        bytes[..payload.len()].copy_from_slice(&payload);
        Payload(PayloadRepr::Inline {
            len: payload.len() as u8,
            bytes,
        })
    }

    /// The payload for a reply: a short one copied, a long one shared.
    pub fn to_bytes(&self) -> Bytes {
        match &self.0 {
            PayloadRepr::Inline { .. } => Bytes::copy_from_slice(self),
            PayloadRepr::Shared(bytes) => bytes.clone(),
        }
    }
}

impl std::ops::Deref for Payload {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.0 {
            PayloadRepr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            PayloadRepr::Shared(bytes) => bytes,
        }
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Payload) -> bool {
        **self == **other
    }
}

impl Eq for Payload {}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Bytes::copy_from_slice(self).fmt(f)
    }
}

/// One task. Kept small (docs/TASKS.md, "Memory per waiting task"): options that are the
/// defaults and an outcome not yet known cost a pointer each.
#[derive(Clone, Debug)]
pub struct Task {
    pub id: Bytes,
    pub queue: Bytes,
    pub payload: Payload,
    pub state: State,
    /// Attempts started (leases handed out).
    pub attempts: u32,
    /// Leases that ended with no ACK or FAIL (expiry, or the worker went away); a server
    /// restart's loss is not counted: it is not the task's doing.
    pub lost_leases: u32,
    pub submitted_ms: u64,
    /// Its place in its queue: (priority, order). Smaller order runs first; a requeue after
    /// a lost lease takes an order below every other, so it goes back to the head.
    pub order: i64,
    pub options: TaskOptions,
    outcome: Option<Box<Outcome>>,
}

impl Task {
    /// A task as submitted: not yet attempted, no outcome.
    pub fn new(
        id: Bytes,
        queue: Bytes,
        payload: Bytes,
        options: SubmitOptions,
        state: State,
        submitted_ms: u64,
        order: i64,
    ) -> Task {
        Task {
            id,
            queue,
            payload: Payload::new(payload),
            state,
            attempts: 0,
            lost_leases: 0,
            submitted_ms,
            order,
            options: TaskOptions::new(options),
            outcome: None,
        }
    }

    pub fn last_error(&self) -> Option<&Bytes> {
        self.outcome.as_ref()?.last_error.as_ref()
    }

    pub fn result(&self) -> Option<&Bytes> {
        self.outcome.as_ref()?.result.as_ref()
    }

    /// When it entered a terminal state.
    pub fn finished_ms(&self) -> Option<u64> {
        self.state.finished_ms()
    }

    /// Set on a fallback task: the task whose death created it.
    pub fn origin(&self) -> Option<&Origin> {
        self.outcome.as_ref()?.origin.as_deref()
    }

    pub fn set_last_error(&mut self, error: Option<Bytes>) {
        if error.is_some() || self.outcome.is_some() {
            self.change_outcome(|o| o.last_error = error);
        }
    }

    /// An ACK's result; nothing to allocate for an ACK without one (the usual case).
    pub fn set_result(&mut self, result: Option<Bytes>) {
        if result.is_some() || self.outcome.is_some() {
            self.change_outcome(|o| o.result = result);
        }
    }

    pub fn set_origin(&mut self, origin: Option<Origin>) {
        if origin.is_some() || self.outcome.is_some() {
            self.change_outcome(|o| o.origin = origin.map(Box::new));
        }
    }

    /// Changes the outcome, allocated on first use and dropped again once it is empty, so
    /// that equal tasks have equal representations (a replay and a snapshot compare so).
    fn change_outcome(&mut self, change: impl FnOnce(&mut Outcome)) {
        let mut outcome = self.outcome.take().unwrap_or_default();
        change(&mut outcome);
        if *outcome != Outcome::default() {
            self.outcome = Some(outcome);
        }
    }

    /// The whole outcome, replaced (a snapshot's task): an empty one costs nothing.
    pub fn set_outcome(&mut self, outcome: Outcome) {
        self.outcome = (outcome != Outcome::default()).then(|| Box::new(outcome));
    }
}

/// The backoff before retry number `retry` (1 for the first retry): `base * 2^(retry-1)`,
/// capped, with up to 25% jitter taken off so that a burst of failures does not retry in
/// lockstep. `jitter` is a uniform draw in [0, 1).
pub fn backoff_ms(base_ms: u64, cap_ms: u64, retry: u32, jitter: f64) -> u64 {
    let exponent = retry.saturating_sub(1).min(62);
    let full = base_ms.saturating_mul(1u64 << exponent).min(cap_ms);
    let off = (full as f64 * 0.25 * jitter.clamp(0.0, 1.0)) as u64;
    full - off
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_short_inline_long_shared_read_the_same() {
        for len in [0, 1, PAYLOAD_INLINE_MAX, PAYLOAD_INLINE_MAX + 1, 1000] {
            let bytes = Bytes::from(vec![7u8; len]);
            let payload = Payload::new(bytes.clone());
            assert_eq!(&payload[..], &bytes[..]);
            assert_eq!(payload.to_bytes(), bytes);
            let shared = matches!(payload.0, PayloadRepr::Shared(_));
            assert_eq!(shared, len > PAYLOAD_INLINE_MAX, "{len}");
        }
        assert!(std::mem::size_of::<Payload>() <= 40);
    }

    #[test]
    fn backoff_doubles_is_capped_and_jittered_down_only() {
        assert_eq!(backoff_ms(1000, 60_000, 1, 0.0), 1000);
        assert_eq!(backoff_ms(1000, 60_000, 2, 0.0), 2000);
        assert_eq!(backoff_ms(1000, 60_000, 5, 0.0), 16_000);
        assert_eq!(backoff_ms(1000, 60_000, 10, 0.0), 60_000);
        assert_eq!(backoff_ms(1000, 60_000, 200, 0.0), 60_000);
        assert_eq!(backoff_ms(1000, 60_000, 1, 0.999), 751);
        assert_eq!(backoff_ms(u64::MAX, u64::MAX, 63, 0.0), u64::MAX);
    }
}
