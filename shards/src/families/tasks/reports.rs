//! What workers report and consumers follow: TASK.PROGRESS and TASK.LOG from the worker that
//! holds a task, TASK.LOGS to read the lines back, and TASK.EVENTS' reply (the server parks a
//! blocked TASK.EVENTS and answers it with [`events_frame`] once the queue has news).

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::args::{int_arg, is};
use crate::ctx::Ctx;
use crate::errors::SYNTAX;
use crate::tasks::Engine;

/// TASK.EVENTS' page size when COUNT names none.
pub const EVENTS_COUNT_DEFAULT: usize = 100;
/// Most events one TASK.EVENTS reply carries.
pub const EVENTS_COUNT_MAX: usize = 10_000;

fn text(s: &str) -> Frame {
    Frame::Bulk(Bytes::copy_from_slice(s.as_bytes()))
}

/// TASK.PROGRESS id value: the worker holding the task reports how far it got.
pub fn progress(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let value = Bytes::copy_from_slice(&args[2]);
    match ctx
        .tasks
        .set_progress(&args[1], ctx.client, value, ctx.now_ms)
    {
        Ok(()) => Frame::ok(),
        Err(err) => Frame::error(err.text()),
    }
}

/// TASK.LOG id line: one log line from the worker holding the task.
pub fn log(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let line = Bytes::copy_from_slice(&args[2]);
    match ctx.tasks.add_log(&args[1], ctx.client, line, ctx.now_ms) {
        Ok(()) => Frame::ok(),
        Err(err) => Frame::error(err.text()),
    }
}

/// TASK.LOGS id: the task's log lines, oldest first (an error for an unknown task).
pub fn logs(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    ctx.tasks.advance(ctx.now_ms);
    if ctx.tasks.get(&args[1]).is_none() {
        return Frame::static_error("ERR no such task");
    }
    let lines = ctx
        .tasks
        .extras(&args[1])
        .map(|e| e.logs.iter().cloned().map(Frame::Bulk).collect())
        .unwrap_or_default();
    Frame::Array(lines)
}

/// TASK.EVENTS's arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventsArgs {
    pub queue: Bytes,
    pub from: u64,
    pub count: usize,
    /// BLOCK ms (0: for ever).
    pub block_ms: Option<u64>,
}

/// Parses TASK.EVENTS queue [FROM cursor] [COUNT n] [BLOCK ms].
pub fn parse_events(args: &[Bytes]) -> Result<EventsArgs, Frame> {
    crate::parse_count::count_parse(crate::spec::FormKind::Events);
    let mut parsed = EventsArgs {
        queue: Bytes::copy_from_slice(&args[1]),
        from: 0,
        count: EVENTS_COUNT_DEFAULT,
        block_ms: None,
    };
    let mut i = 2;
    while i < args.len() {
        let value = args.get(i + 1).ok_or(Frame::static_error(SYNTAX))?;
        let n = int_arg(value)?;
        if is(&args[i], "from") && n >= 0 {
            parsed.from = n as u64;
        } else if is(&args[i], "count") && (1..=EVENTS_COUNT_MAX as i64).contains(&n) {
            parsed.count = n as usize;
        } else if is(&args[i], "block") && n >= 0 {
            parsed.block_ms = Some(n as u64);
        } else if ["from", "count", "block"].iter().any(|w| is(&args[i], w)) {
            return Err(Frame::error(format!(
                "ERR FROM and BLOCK must be zero or positive, COUNT 1..{EVENTS_COUNT_MAX}"
            )));
        } else {
            return Err(Frame::static_error(SYNTAX));
        }
        i += 2;
    }
    Ok(parsed)
}

/// TASK.EVENTS' reply: `[next cursor, [[seq, unix ms, id, state, attempt (, value)], ...]]`,
/// the value for `progress` events; an error when `from` names events no longer kept.
pub fn events_frame(
    tasks: &mut Engine,
    queue: &[u8],
    from: u64,
    count: usize,
    now_ms: u64,
) -> Frame {
    match tasks.events(queue, from, count, now_ms) {
        Ok((events, next)) => {
            let rows = events
                .into_iter()
                .map(|(seq, e)| {
                    let mut row = vec![
                        Frame::Integer(seq as i64),
                        Frame::Integer(e.at_ms as i64),
                        Frame::Bulk(e.id),
                        text(e.kind.name()),
                        Frame::Integer(i64::from(e.attempt)),
                    ];
                    if let crate::tasks::EventKind::Progress(value) = e.kind {
                        row.push(Frame::Bulk(value));
                    }
                    Frame::Array(row)
                })
                .collect();
            Frame::Array(vec![Frame::Integer(next as i64), Frame::Array(rows)])
        }
        Err(gone) => Frame::error(format!(
            "ERR events before {} are no longer kept (the oldest is {}; a queue keeps its last {})",
            gone.oldest,
            gone.oldest,
            tasks.events_max()
        )),
    }
}

/// Whether a TASK.EVENTS reply has events (else a blocked one keeps waiting).
pub fn has_events(frame: &Frame) -> bool {
    matches!(frame, Frame::Array(parts) if matches!(parts.get(1), Some(Frame::Array(rows)) if !rows.is_empty()))
}
