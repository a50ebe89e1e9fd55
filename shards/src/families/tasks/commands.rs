//! The `TASK.*` command handlers: argument parsing and replies around the [`Engine`]. Each
//! runs on the shard that owns its queue or task id (an id carries its queue's slot tag); the
//! server routes them, splits a FETCH over queues on several shards, and supplies the client
//! id that owns leases (`Ctx::client`).

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::args::{int_arg, is};
use crate::ctx::Ctx;
use crate::errors::SYNTAX;
use crate::tasks::engine::{Engine, FailOutcome, Leased, Retry, TaskError};
use crate::tasks::model::*;

/// A copy of an argument that the engine keeps: arguments share the connection's read buffer,
/// and a stored slice would pin all of it.
fn owned(arg: &Bytes) -> Bytes {
    Bytes::copy_from_slice(arg)
}

fn error(err: TaskError) -> Frame {
    Frame::error(err.text())
}

/// A non-negative integer option value.
fn count_arg(arg: Option<&Bytes>, what: &str) -> Result<u64, Frame> {
    let Some(arg) = arg else {
        return Err(Frame::static_error(SYNTAX));
    };
    match int_arg(arg)? {
        n if n >= 0 => Ok(n as u64),
        _ => Err(Frame::error(format!("ERR {what} must be zero or positive"))),
    }
}

fn text(s: &str) -> Frame {
    Frame::Bulk(Bytes::copy_from_slice(s.as_bytes()))
}

fn opt_bulk(bytes: &Option<Bytes>) -> Frame {
    bytes
        .as_ref()
        .map_or(Frame::Null, |b| Frame::Bulk(b.clone()))
}

/// TASK.SUBMIT queue payload [ID id] [PRIORITY p] [DELAY ms | AT unix-ms] [RETRIES n]
/// [BACKOFF base-ms [cap-ms]] [LEASE ms] [TTL ms] [FALLBACK queue] [UNIQUE key [FOR ms]]
pub fn submit(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now_ms;
    let options = match submit_options(&args[3..], now) {
        Ok(options) => options,
        Err(err) => return err,
    };
    // A short payload is copied into the task record (`Payload`): no copy of it here.
    let payload = match args[2].len() {
        n if n <= PAYLOAD_INLINE_MAX => args[2].clone(),
        _ => owned(&args[2]),
    };
    match ctx.tasks.submit(&args[1], payload, options, now) {
        Ok((id, _)) => Frame::Bulk(id),
        Err(err) => error(err),
    }
}

// Long: one short branch per SUBMIT option, as docs/TASKS.md lists them.
pub(crate) fn submit_options(args: &[Bytes], now_ms: u64) -> Result<SubmitOptions, Frame> {
    let mut options = SubmitOptions::default();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        let next = args.get(i + 1);
        if is(arg, "id") {
            options.id = Some(owned(next.ok_or(Frame::static_error(SYNTAX))?));
        } else if is(arg, "priority") {
            options.priority = int_arg(next.ok_or(Frame::static_error(SYNTAX))?)?;
        } else if is(arg, "delay") {
            options.due_ms = Some(now_ms.saturating_add(count_arg(next, "DELAY")?));
        } else if is(arg, "at") {
            options.due_ms = Some(count_arg(next, "AT")?);
        } else if is(arg, "retries") {
            let retries = count_arg(next, "RETRIES")?;
            if retries > u64::from(RETRIES_MAX) {
                return Err(Frame::error(format!(
                    "ERR RETRIES is at most {RETRIES_MAX}"
                )));
            }
            options.retries = retries as u32;
        } else if is(arg, "hold") {
            options.hold = true;
            // A flag: no value follows.
            i += 1;
            continue;
        } else if is(arg, "batch") {
            options.batch = Some(owned(next.ok_or(Frame::static_error(SYNTAX))?));
        } else if is(arg, "group") {
            let group = owned(next.ok_or(Frame::static_error(SYNTAX))?);
            if group.len() > NAME_BYTES_MAX {
                return Err(Frame::static_error("ERR group key too long"));
            }
            options.group = Some(group);
        } else if is(arg, "lostmax") {
            let most = count_arg(next, "LOSTMAX")?;
            if most == 0 || most > u64::from(RETRIES_MAX) {
                return Err(Frame::error(format!(
                    "ERR LOSTMAX must be 1..{RETRIES_MAX}"
                )));
            }
            options.lost_max = most as u32;
        } else if is(arg, "backoff") {
            options.backoff_base_ms = count_arg(next, "BACKOFF")?;
            options.backoff_cap_ms = BACKOFF_CAP_MS_DEFAULT.max(options.backoff_base_ms);
            if let Some(cap) = args.get(i + 2).filter(|a| int_arg(a).is_ok()) {
                options.backoff_cap_ms = count_arg(Some(cap), "BACKOFF cap")?;
                i += 1;
            }
        } else if is(arg, "lease") {
            let lease = count_arg(next, "LEASE")?;
            if lease == 0 || lease > LEASE_MS_MAX {
                return Err(Frame::error(format!(
                    "ERR LEASE must be 1..{LEASE_MS_MAX} ms"
                )));
            }
            options.lease_ms = Some(lease);
        } else if is(arg, "ttl") {
            options.deadline_ms = Some(now_ms.saturating_add(count_arg(next, "TTL")?));
        } else if is(arg, "fallback") {
            options.fallback = Some(owned(next.ok_or(Frame::static_error(SYNTAX))?));
        } else if is(arg, "unique") {
            let key = owned(next.ok_or(Frame::static_error(SYNTAX))?);
            let mut window = 0;
            if args.get(i + 2).is_some_and(|a| is(a, "for")) {
                window = count_arg(args.get(i + 3), "FOR")?;
                i += 2;
            }
            options.unique = Some((key, window));
        } else {
            return Err(Frame::static_error(SYNTAX));
        }
        i += 2;
    }
    Ok(options)
}

/// FETCH's parsed arguments, borrowed from the command's (a worker's every step parses
/// one: no copies).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchArgs<'a> {
    pub queues: &'a [Bytes],
    pub count: usize,
    pub lease_ms: Option<u64>,
    /// BLOCK ms: wait this long for a task when there is none (0: for ever).
    pub block_ms: Option<u64>,
    pub acks: &'a [Bytes],
}

/// A FETCH parsed once, kept as positions among its arguments (what a request carries: no
/// copy, no allocation); [`FetchAt::view`] lends it as [`FetchArgs`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchAt {
    /// The queues are `args[1..queues_end]`.
    pub queues_end: usize,
    pub count: usize,
    pub lease_ms: Option<u64>,
    pub block_ms: Option<u64>,
    /// The ACK ids are `args[acks_from..]` (none when it is `args.len()`).
    pub acks_from: usize,
}

impl FetchAt {
    /// The parsed FETCH over the arguments it was parsed from.
    pub fn view<'a>(&self, args: &'a [Bytes]) -> FetchArgs<'a> {
        FetchArgs {
            queues: &args[1..self.queues_end],
            count: self.count,
            lease_ms: self.lease_ms,
            block_ms: self.block_ms,
            acks: &args[self.acks_from.min(args.len())..],
        }
    }
}

/// Parses TASK.FETCH queue [queue ...] [COUNT n] [LEASE ms] [BLOCK ms] [ACK id ...]. The
/// queues run up to the first option word; ACK takes every argument after it.
pub fn parse_fetch(args: &[Bytes]) -> Result<FetchArgs<'_>, Frame> {
    parse_fetch_at(args).map(|at| at.view(args))
}

/// [`parse_fetch`], as positions (see [`FetchAt`]).
pub fn parse_fetch_at(args: &[Bytes]) -> Result<FetchAt, Frame> {
    crate::parse_count::count_parse(crate::spec::FormKind::Fetch);
    let option = |a: &Bytes| is(a, "count") || is(a, "lease") || is(a, "block") || is(a, "ack");
    let queues_end = args[1..]
        .iter()
        .position(option)
        .map_or(args.len(), |p| p + 1);
    if queues_end == 1 {
        return Err(Frame::error(
            "ERR wrong number of arguments for 'task.fetch' command",
        ));
    }
    let mut parsed = FetchAt {
        queues_end,
        count: 1,
        lease_ms: None,
        block_ms: None,
        acks_from: args.len(),
    };
    let mut i = queues_end;
    while i < args.len() {
        let next = args.get(i + 1);
        if is(&args[i], "count") {
            let count = count_arg(next, "COUNT")?;
            if count == 0 || count > FETCH_COUNT_MAX as u64 {
                return Err(Frame::error(format!(
                    "ERR COUNT must be 1..{FETCH_COUNT_MAX}"
                )));
            }
            parsed.count = count as usize;
        } else if is(&args[i], "lease") {
            let lease = count_arg(next, "LEASE")?;
            if lease == 0 || lease > LEASE_MS_MAX {
                return Err(Frame::error(format!(
                    "ERR LEASE must be 1..{LEASE_MS_MAX} ms"
                )));
            }
            parsed.lease_ms = Some(lease);
        } else if is(&args[i], "block") {
            parsed.block_ms = Some(count_arg(next, "BLOCK")?);
        } else if is(&args[i], "ack") {
            parsed.acks_from = i + 1;
            if parsed.acks_from == args.len() {
                return Err(Frame::static_error(SYNTAX));
            }
            break;
        } else {
            return Err(Frame::static_error(SYNTAX));
        }
        i += 2;
    }
    Ok(parsed)
}

/// TASK.WAIT id [TIMEOUT ms], parsed.
#[derive(Clone, Debug)]
pub struct WaitArgs {
    pub id: Bytes,
    /// How long to wait (0: for ever).
    pub timeout_ms: u64,
}

/// Parses TASK.WAIT id [TIMEOUT ms].
pub fn parse_wait(args: &[Bytes]) -> Result<WaitArgs, Frame> {
    crate::parse_count::count_parse(crate::spec::FormKind::Wait);
    let timeout_ms = match &args[2..] {
        [] => 0,
        [word, ms] if is(word, "timeout") => match int_arg(ms)? {
            ms if ms >= 0 => ms as u64,
            _ => return Err(Frame::static_error("ERR TIMEOUT must be zero or positive")),
        },
        _ => return Err(Frame::static_error(SYNTAX)),
    };
    Ok(WaitArgs {
        id: args[1].clone(),
        timeout_ms,
    })
}

/// TASK.WORKER id [GRACE ms] [HEARTBEAT ms], parsed.
#[derive(Clone, Debug)]
pub struct WorkerArgs {
    pub name: Bytes,
    pub options: crate::tasks::workers::WorkerOptions,
}

/// Parses TASK.WORKER id [GRACE ms] [HEARTBEAT ms].
pub fn parse_worker(args: &[Bytes]) -> Result<WorkerArgs, Frame> {
    use crate::tasks::workers::WorkerOptions;
    crate::parse_count::count_parse(crate::spec::FormKind::Worker);
    let name = &args[1];
    if name.is_empty() || name.len() > NAME_BYTES_MAX {
        return Err(Frame::error(format!(
            "ERR worker id must be 1..{NAME_BYTES_MAX} bytes"
        )));
    }
    let mut options = WorkerOptions::default();
    let mut i = 2;
    while i < args.len() {
        if is(&args[i], "grace") {
            options.grace_ms = worker_ms(args.get(i + 1), "GRACE")?;
        } else if is(&args[i], "heartbeat") {
            match worker_ms(args.get(i + 1), "HEARTBEAT")? {
                0 => return Err(Frame::static_error("ERR HEARTBEAT must be positive")),
                ms => options.heartbeat_ms = Some(ms),
            }
        } else {
            return Err(Frame::static_error(SYNTAX));
        }
        i += 2;
    }
    Ok(WorkerArgs {
        name: Bytes::copy_from_slice(name),
        options,
    })
}

/// A TASK.WORKER option in milliseconds, in range.
fn worker_ms(arg: Option<&Bytes>, what: &str) -> Result<u64, Frame> {
    use crate::tasks::workers::WORKER_MS_MAX;
    let arg = arg.ok_or(Frame::static_error(SYNTAX))?;
    match int_arg(arg)? {
        ms if (0..=WORKER_MS_MAX as i64).contains(&ms) => Ok(ms as u64),
        _ => Err(Frame::error(format!(
            "ERR {what} must be 0..{WORKER_MS_MAX} ms"
        ))),
    }
}

/// One leased task as FETCH replies it: `[id, queue, payload, attempt]`, and for a fallback
/// task also `[origin id, origin queue, origin error, origin attempts]`.
pub fn leased_frame(leased: Leased) -> Frame {
    let mut items = vec![
        Frame::Bulk(leased.id),
        Frame::Bulk(leased.queue),
        Frame::Bulk(leased.payload),
        Frame::Integer(i64::from(leased.attempt)),
    ];
    if let Some(origin) = leased.origin {
        items.push(Frame::Bulk(origin.id));
        items.push(Frame::Bulk(origin.queue));
        items.push(opt_bulk(&origin.error));
        items.push(Frame::Integer(i64::from(origin.attempts)));
    }
    Frame::Array(items)
}

/// TASK.ACK id [RESULT bytes]
pub fn ack(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let result = match &args[2..] {
        [] => None,
        [word, result] if is(word, "result") => Some(owned(result)),
        _ => return Frame::static_error(SYNTAX),
    };
    match ctx.tasks.ack(&args[1], ctx.client, result, ctx.now_ms) {
        Ok(()) => Frame::ok(),
        Err(err) => error(err),
    }
}

/// TASK.FAIL id [ERROR msg] [RETRYIN ms | NORETRY | SNOOZE ms]: replies `retry` with the
/// unix ms of the next attempt, `dead`, or `snoozed` with the unix ms it comes back (a snooze
/// spends no attempt and is no failure).
pub fn fail(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let mut message = None;
    let mut retry = Retry::Backoff;
    let mut i = 2;
    while i < args.len() {
        if is(&args[i], "error") && i + 1 < args.len() {
            message = Some(owned(&args[i + 1]));
            i += 2;
        } else if is(&args[i], "retryin") && retry == Retry::Backoff {
            match count_arg(args.get(i + 1), "RETRYIN") {
                Ok(ms) => retry = Retry::In(ms),
                Err(err) => return err,
            }
            i += 2;
        } else if is(&args[i], "noretry") && retry == Retry::Backoff {
            retry = Retry::Never;
            i += 1;
        } else if is(&args[i], "snooze") && retry == Retry::Backoff {
            match count_arg(args.get(i + 1), "SNOOZE") {
                Ok(ms) => retry = Retry::Snooze(ms),
                Err(err) => return err,
            }
            i += 2;
        } else {
            return Frame::static_error(SYNTAX);
        }
    }
    match ctx
        .tasks
        .fail(&args[1], ctx.client, message, retry, ctx.now_ms)
    {
        Ok(FailOutcome::RetryAt(at)) => {
            Frame::Array(vec![text("retry"), Frame::Integer(at as i64)])
        }
        Ok(FailOutcome::Dead) => Frame::Array(vec![text("dead")]),
        Ok(FailOutcome::SnoozedUntil(at)) => {
            Frame::Array(vec![text("snoozed"), Frame::Integer(at as i64)])
        }
        Err(err) => error(err),
    }
}

/// TASK.EXTEND id ms: replies the lease's new expiry (unix ms).
pub fn extend(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let ms = match count_arg(args.get(2), "lease") {
        Ok(0) => return Frame::error(format!("ERR lease must be 1..{LEASE_MS_MAX} ms")),
        Ok(ms) => ms,
        Err(err) => return err,
    };
    match ctx.tasks.extend(&args[1], ctx.client, ms, ctx.now_ms) {
        Ok(until) => Frame::Integer(until as i64),
        Err(err) => error(err),
    }
}

/// TASK.GET id: the task's fields as a map (nil for an unknown or forgotten id).
pub fn get(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    ctx.tasks.advance(ctx.now_ms);
    ctx.tasks
        .get(&args[1])
        .map_or(Frame::Null, |task| task_frame(ctx.tasks, task))
}

/// A task's fields as TASK.GET and TASK.WAIT reply them (`tasks` holds it: its progress).
pub fn task_frame(tasks: &Engine, task: &Task) -> Frame {
    let progress = tasks.extras(&task.id).and_then(|e| e.progress.clone());
    let opt_ms = |ms: Option<u64>| ms.map_or(Frame::Null, |ms| Frame::Integer(ms as i64));
    let due = match task.state {
        State::Scheduled { due_ms } => Some(due_ms),
        _ => None,
    };
    let lease = match task.state {
        State::Leased { until_ms, .. } => Some(until_ms),
        _ => None,
    };
    Frame::Map(vec![
        (text("id"), Frame::Bulk(task.id.clone())),
        (text("queue"), Frame::Bulk(task.queue.clone())),
        (text("state"), text(task.state.name())),
        (text("attempts"), Frame::Integer(i64::from(task.attempts))),
        (
            text("lost_leases"),
            Frame::Integer(i64::from(task.lost_leases)),
        ),
        (
            text("retries"),
            Frame::Integer(i64::from(task.options.retries)),
        ),
        (text("priority"), Frame::Integer(task.options.priority)),
        (text("payload"), Frame::Bulk(task.payload.to_bytes())),
        (text("result"), opt_bulk(&task.result().cloned())),
        (text("error"), opt_bulk(&task.last_error().cloned())),
        (text("progress"), opt_bulk(&progress)),
        (text("submitted"), Frame::Integer(task.submitted_ms as i64)),
        (text("due"), opt_ms(due)),
        (text("lease_until"), opt_ms(lease)),
        (text("finished"), opt_ms(task.finished_ms())),
        (
            text("leased_by"),
            match task.state {
                State::Leased { owner, .. } => text(&crate::tasks::workers::owner_label(owner)),
                _ => Frame::Null,
            },
        ),
    ])
}

/// TASK.CANCEL id
pub fn cancel(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    match ctx.tasks.cancel(&args[1], ctx.now_ms) {
        Ok(()) => Frame::ok(),
        Err(err) => error(err),
    }
}

/// TASK.DEAD queue: the ids of its dead tasks, oldest first.
pub fn dead(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    ctx.tasks.advance(ctx.now_ms);
    Frame::Array(
        ctx.tasks
            .dead(&args[1])
            .into_iter()
            .map(Frame::Bulk)
            .collect(),
    )
}

/// TASK.REQUEUE id|queue: puts one dead task, or every dead task of a queue, back; replies
/// how many.
pub fn requeue(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now_ms;
    if ctx.tasks.get(&args[1]).is_some() {
        return match ctx.tasks.requeue(&args[1], now) {
            Ok(()) => Frame::Integer(1),
            Err(err) => error(err),
        };
    }
    Frame::Integer(ctx.tasks.requeue_queue(&args[1], now) as i64)
}

pub fn pause(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    ctx.tasks.set_paused(&args[1], true);
    Frame::ok()
}

pub fn resume(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    ctx.tasks.set_paused(&args[1], false);
    Frame::ok()
}

/// TASK.LIMIT queue [GROUP] [CONCURRENCY n | CONCURRENCY NONE] [RATE n PER ms | RATE NONE].
/// With no option it replies the current limits. An option not named keeps its current
/// value. With GROUP the limits are each group's (every group key of the queue has them).
pub fn limit(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now_ms;
    let current = ctx.tasks.queue_stats(&args[1], now).unwrap_or_default();
    let per_group = args.get(2).is_some_and(|a| is(a, "group"));
    let (mut concurrency, mut rate) = if per_group {
        (current.group_concurrency, current.group_rate)
    } else {
        (current.concurrency, current.rate)
    };
    let mut i = if per_group { 3 } else { 2 };
    while i < args.len() {
        let next = args.get(i + 1);
        if is(&args[i], "concurrency") && next.is_some_and(|n| is(n, "none")) {
            concurrency = None;
            i += 2;
        } else if is(&args[i], "concurrency") {
            match count_arg(next, "CONCURRENCY") {
                Ok(n) if n > 0 && n <= u64::from(u32::MAX) => concurrency = Some(n as u32),
                Ok(_) => return Frame::error("ERR CONCURRENCY must be positive"),
                Err(err) => return err,
            }
            i += 2;
        } else if is(&args[i], "rate") && next.is_some_and(|n| is(n, "none")) {
            rate = None;
            i += 2;
        } else if is(&args[i], "rate") && args.get(i + 2).is_some_and(|p| is(p, "per")) {
            let n = match count_arg(next, "RATE") {
                Ok(n) if n > 0 && n <= u64::from(u32::MAX) => n as u32,
                Ok(_) => return Frame::error("ERR RATE must be positive"),
                Err(err) => return err,
            };
            match count_arg(args.get(i + 3), "PER") {
                Ok(per) if per > 0 => rate = Some((n, per)),
                Ok(_) => return Frame::error("ERR PER must be positive"),
                Err(err) => return err,
            }
            i += 4;
        } else {
            return Frame::static_error(SYNTAX);
        }
    }
    if per_group {
        ctx.tasks.set_group_limits(&args[1], concurrency, rate);
    } else {
        ctx.tasks.set_limits(&args[1], concurrency, rate);
    }
    Frame::Map(vec![
        (
            text("concurrency"),
            concurrency.map_or(Frame::Null, |n| Frame::Integer(i64::from(n))),
        ),
        (
            text("rate"),
            rate.map_or(Frame::Null, |(n, _)| Frame::Integer(i64::from(n))),
        ),
        (
            text("per"),
            rate.map_or(Frame::Null, |(_, per)| Frame::Integer(per as i64)),
        ),
    ])
}

/// TASK.STATS queue [LATENCY]: its counts as a map; LATENCY adds the histograms of the
/// time from submit to first start and from a lease's start to its ACK (since the shard
/// started): counts per bucket of `bucket_bounds_ms` (and one past the last), sum, count.
pub fn stats(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let latency = match args.get(2) {
        None => false,
        Some(word) if is(word, "latency") && args.len() == 3 => true,
        Some(_) => return Frame::static_error(SYNTAX),
    };
    ctx.tasks.advance(ctx.now_ms);
    let s = ctx
        .tasks
        .queue_stats(&args[1], ctx.now_ms)
        .unwrap_or_default();
    let int = |n: u64| Frame::Integer(n as i64);
    let mut fields = vec![
        (text("queued"), int(s.queued as u64)),
        (text("scheduled"), int(s.scheduled as u64)),
        (text("leased"), int(s.leased as u64)),
        (text("dead"), int(s.dead as u64)),
        (text("oldest_age_ms"), int(s.oldest_age_ms)),
        (text("submitted"), int(s.submitted)),
        (text("acked"), int(s.acked)),
        (text("failed"), int(s.failed)),
        (text("retried"), int(s.retried)),
        (text("paused"), int(u64::from(s.paused))),
        (text("groups"), int(s.groups as u64)),
        (text("workers"), int(s.workers as u64)),
    ];
    if latency {
        let ints = |values: &[u64]| Frame::Array(values.iter().map(|&v| int(v)).collect());
        fields.push((
            text("bucket_bounds_ms"),
            ints(&crate::tasks::LATENCY_BOUNDS_MS),
        ));
        for (name, h) in [("waiting", &s.waiting_ms), ("running", &s.running_ms)] {
            fields.push((text(&format!("{name}_buckets")), ints(&h.buckets)));
            fields.push((text(&format!("{name}_sum_ms")), int(h.sum_ms)));
            fields.push((text(&format!("{name}_count")), int(h.count)));
        }
    }
    Frame::Map(fields)
}

/// TASK.QUEUES (one shard's part): the names of the queues it holds.
pub fn queues(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> Frame {
    Frame::Array(
        ctx.tasks
            .queue_names()
            .into_iter()
            .map(Frame::Bulk)
            .collect(),
    )
}

/// Leases from `queues` (all on this shard) as FETCH replies them: the task frames, or the
/// in-flight error when nothing was leased because one of them is at its limit.
pub fn fetch_frames(
    tasks: &mut Engine,
    queues: &[Bytes],
    count: usize,
    lease_ms: Option<u64>,
    client: u64,
    now_ms: u64,
) -> Result<Vec<Frame>, Frame> {
    let mut frames = Vec::new();
    let leased = tasks.fetch_each(queues, count, lease_ms, client, now_ms, |task| {
        frames.push(leased_frame(task))
    });
    if leased == 0 {
        if let Some(full) = tasks.in_flight_full(queues) {
            return Err(in_flight_error(full));
        }
    }
    Ok(frames)
}

/// The error for a fetch that leased nothing because `queue` is at its in-flight limit.
fn in_flight_error(queue: &[u8]) -> Frame {
    Frame::error(format!(
        "ERR queue '{}' has {IN_FLIGHT_PER_QUEUE_MAX} tasks in flight; ACK or FAIL some first",
        String::from_utf8_lossy(queue)
    ))
}

/// The engine a shard's task commands see.
pub fn new_engine() -> Engine {
    Engine::new(RETENTION_MS_DEFAULT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<Bytes> {
        line.split(' ')
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect()
    }

    #[test]
    fn fetch_arguments() {
        let command = args("task.fetch a b COUNT 3 LEASE 500 BLOCK 0 ACK x y");
        let parsed = parse_fetch(&command).unwrap();
        assert_eq!(parsed.queues, &args("a b")[..]);
        assert_eq!(
            (parsed.count, parsed.lease_ms, parsed.block_ms),
            (3, Some(500), Some(0))
        );
        assert!(parse_fetch(&args("task.fetch a BLOCK -1")).is_err());
        assert_eq!(parsed.acks, &args("x y")[..]);
        assert!(parse_fetch(&args("task.fetch COUNT 3")).is_err());
        assert!(parse_fetch(&args("task.fetch a COUNT 0")).is_err());
        assert!(parse_fetch(&args("task.fetch a COUNT x")).is_err());
        assert!(parse_fetch(&args("task.fetch a ACK")).is_err());
        assert!(parse_fetch(&args("task.fetch a LEASE 0")).is_err());
    }

    #[test]
    fn submit_options_parse_and_refuse_bad_input() {
        let options = submit_options(
            &args("ID x PRIORITY -2 DELAY 100 RETRIES 5 BACKOFF 10 20 LEASE 9 TTL 50 FALLBACK f UNIQUE u FOR 30")[..],
            1000,
        )
        .unwrap();
        assert_eq!(options.id, Some(Bytes::from_static(b"x")));
        assert_eq!(options.priority, -2);
        assert_eq!(options.due_ms, Some(1100));
        assert_eq!(
            (
                options.retries,
                options.backoff_base_ms,
                options.backoff_cap_ms
            ),
            (5, 10, 20)
        );
        assert_eq!(
            (options.lease_ms, options.deadline_ms),
            (Some(9), Some(1050))
        );
        assert_eq!(options.fallback, Some(Bytes::from_static(b"f")));
        assert_eq!(options.unique, Some((Bytes::from_static(b"u"), 30)));
        for bad in [
            "DELAY -1",
            "RETRIES 1001",
            "LEASE 0",
            "BOGUS 1",
            "PRIORITY",
            "UNIQUE u FOR",
        ] {
            assert!(submit_options(&args(bad), 0).is_err(), "{bad}");
        }
    }
}
