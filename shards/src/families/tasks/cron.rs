//! TASK.CRON on one shard: SET, DEL and LIST of the schedules whose queue lives here. The
//! server's TASK.CRON (`server/src/commands/cron.rs`) runs SET on the queue's shard after
//! DEL everywhere else, and DEL and LIST on every shard, so a name is defined once.

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::args::is;
use crate::ctx::Ctx;
use crate::errors::{unknown_subcommand, SYNTAX};
use crate::families::tasks::commands::submit_options;

fn text(s: &str) -> Frame {
    Frame::Bulk(Bytes::copy_from_slice(s.as_bytes()))
}

fn opt_ms(ms: Option<u64>) -> Frame {
    ms.map_or(Frame::Null, |ms| Frame::Integer(ms as i64))
}

/// TASK.CRON SET name schedule queue payload [submit options] | DEL name | LIST
pub fn cron(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let sub = &args[1];
    if is(sub, "set") && args.len() >= 6 {
        set(ctx, args)
    } else if is(sub, "del") && args.len() == 3 {
        ctx.tasks.advance(ctx.now_ms);
        Frame::Integer(i64::from(ctx.tasks.cron_del(&args[2]).is_some()))
    } else if is(sub, "list") && args.len() == 2 {
        list(ctx)
    } else if ["set", "del", "list"].iter().any(|s| is(sub, s)) {
        Frame::static_error(SYNTAX)
    } else {
        unknown_subcommand("TASK.CRON", sub)
    }
}

/// SET: replies the next tick (unix ms; nil when the schedule has none).
fn set(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let (name, spec, queue) = (&args[2], &args[3], &args[4]);
    let options = match submit_options(&args[6..], ctx.now_ms) {
        Ok(options) => options,
        Err(err) => return err,
    };
    if options.id.is_some() || options.due_ms.is_some() {
        return Frame::static_error(
            "ERR ID, DELAY and AT are not for a schedule (each tick's id and time are its own)",
        );
    }
    let payload = Bytes::copy_from_slice(&args[5]);
    let now = ctx.now_ms;
    match ctx.tasks.cron_set(name, spec, queue, payload, options, now) {
        Ok(_) => opt_ms(
            ctx.tasks
                .crons()
                .find(|c| c.name == *name)
                .and_then(|c| c.next_ms),
        ),
        Err(reason) => Frame::error(format!("ERR invalid schedule: {reason}")),
    }
}

/// LIST: one map per schedule here.
fn list(ctx: &mut Ctx<'_>) -> Frame {
    ctx.tasks.advance(ctx.now_ms);
    Frame::Array(
        ctx.tasks
            .crons()
            .map(|c| {
                Frame::Map(vec![
                    (text("name"), Frame::Bulk(c.name.clone())),
                    (text("schedule"), Frame::Bulk(c.spec.clone())),
                    (text("queue"), Frame::Bulk(c.queue.clone())),
                    (text("payload"), Frame::Bulk(c.payload.clone())),
                    (text("next"), opt_ms(c.next_ms)),
                    (text("last"), opt_ms(c.last_fired_ms)),
                    (text("fired"), Frame::Integer(c.fired as i64)),
                    (text("skipped"), Frame::Integer(c.skipped as i64)),
                    (text("created"), Frame::Integer(c.created_ms as i64)),
                ])
            })
            .collect(),
    )
}
