//! The `TASK.*` commands for operating queues rather than working them: TASK.LIST pages
//! through a queue's tasks by state, TASK.PURGE drops a state's tasks, TASK.DELETE one task, TASK.DELQUEUE deletes a
//! queue with everything in it. The engine side is `tasks/engine/admin.rs`.

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::args::{int_arg, is};
use crate::ctx::Ctx;
use crate::errors::SYNTAX;
use crate::tasks::{Cursor, Listed};

/// TASK.LIST's page size when COUNT names none.
pub const LIST_COUNT_DEFAULT: usize = 10;
/// Most ids one TASK.LIST page returns.
pub const LIST_COUNT_MAX: usize = 1_000;

const STATES: &str = "queued, scheduled, leased, dead, done or cancelled";

fn state_arg(word: &[u8]) -> Result<Listed, Frame> {
    Listed::parse(word)
        .ok_or_else(|| Frame::error(format!("ERR unknown task state (use {STATES})")))
}

/// TASK.LIST queue state [cursor] [COUNT n]: `[next cursor, [id ...]]`, the next cursor `0`
/// at the end. Queued tasks come in lease order, the others oldest first (due time, lease
/// expiry, death, retention's end).
pub fn list(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let state = match state_arg(&args[2]) {
        Ok(state) => state,
        Err(err) => return err,
    };
    let mut cursor = None;
    let mut count = LIST_COUNT_DEFAULT;
    let mut i = 3;
    while i < args.len() {
        if is(&args[i], "count") && i + 1 < args.len() {
            match int_arg(&args[i + 1]) {
                Ok(n) if (1..=LIST_COUNT_MAX as i64).contains(&n) => count = n as usize,
                Ok(_) => return Frame::error(format!("ERR COUNT must be 1..{LIST_COUNT_MAX}")),
                Err(err) => return err,
            }
            i += 2;
        } else if i == 3 {
            match Cursor::decode(&args[i], state) {
                Some(from) => cursor = from,
                None => return Frame::static_error("ERR invalid cursor"),
            }
            i += 1;
        } else {
            return Frame::static_error(SYNTAX);
        }
    }
    let (next, ids) = ctx
        .tasks
        .list(&args[1], state, cursor.as_ref(), count, ctx.now_ms);
    let next = next.map_or_else(|| Bytes::from_static(b"0"), |c| c.encode());
    Frame::Array(vec![
        Frame::Bulk(next),
        Frame::Array(ids.into_iter().map(Frame::Bulk).collect()),
    ])
}

/// TASK.PURGE queue state: drops every task of the queue in that state (not leased ones);
/// replies how many.
pub fn purge(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    match state_arg(&args[2]) {
        Ok(Listed::Leased) => Frame::static_error(
            "ERR leased tasks cannot be purged (CANCEL them, or TASK.DELQUEUE queue FORCE)",
        ),
        Ok(state) => Frame::Integer(ctx.tasks.purge(&args[1], state, ctx.now_ms) as i64),
        Err(err) => err,
    }
}

/// TASK.DELETE id: drops one task for good, in any state but leased; replies 1, or 0 for an
/// unknown id.
pub fn delete(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    match ctx.tasks.delete_task(&args[1], ctx.now_ms) {
        Ok(found) => Frame::Integer(i64::from(found)),
        Err(err) => Frame::error(err.text()),
    }
}

/// TASK.DELQUEUE queue [FORCE]: deletes the queue and every task in it; replies how many
/// tasks went (0 for a queue that does not exist). Refused while tasks are leased, unless
/// FORCE.
pub fn delqueue(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let force = match &args[2..] {
        [] => false,
        [word] if is(word, "force") => true,
        _ => return Frame::static_error(SYNTAX),
    };
    match ctx.tasks.delete_queue(&args[1], force, ctx.now_ms) {
        Ok(removed) => Frame::Integer(removed.unwrap_or(0) as i64),
        Err(err) => Frame::error(err.text()),
    }
}

/// TASK.EXPORT queue: takes the queue out with everything that is its, and returns it as a
/// payload for TASK.IMPORT (nil when there is no such queue). What MIGRATE sends when the
/// queue's slot moves to another node (docs/CLUSTER.md).
pub fn export(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    match ctx.tasks.export_queue(&args[1]) {
        Some(payload) => Frame::Bulk(Bytes::from(payload)),
        None => Frame::Null,
    }
}

/// TASK.IMPORT queue payload: takes in a queue TASK.EXPORT gave out. Refused when the queue
/// is here already (BUSYKEY, as RESTORE), or when the payload is damaged or is another
/// queue's.
pub fn import(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    if ctx.tasks.has_queue(&args[1]) {
        return Frame::static_error("BUSYKEY Target key name already exists.");
    }
    let mut probe = crate::tasks::Engine::new(0);
    match probe.import_queue(&args[2], ctx.now_ms) {
        Ok(name) if name == args[1] => {}
        Ok(_) => return Frame::static_error("ERR the payload is another queue's"),
        Err(err) => return Frame::error(err),
    }
    match ctx.tasks.import_queue(&args[2], ctx.now_ms) {
        Ok(_) => Frame::ok(),
        Err(err) => Frame::error(err),
    }
}
