//! TASK.BATCH across shards: the batch is made on its home shard (the shard of its id) with
//! its children's and callbacks' ids; then the callbacks are submitted held on their queues'
//! shards; then the children, one message per shard. Every id is the batch's own, so the
//! command sent again after an error or a lost reply makes nothing twice and fills in what
//! is missing. After a restart, each home asks the children's shards how the children it has
//! not heard of ended (a note may have been lost with the process) and sends its fired
//! batches' callback orders again; both are harmless when repeated.

use std::rc::Rc;

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::families::tasks::batch::{plan, Planned};
use wetask_shards::lookup;
use wetask_shards::table::CommandSpec;
use wetask_shards::tasks::BatchNote;

use crate::mesh::{KeyRequest, Request, Response, TaskRequest};
use crate::routing::{self, Target};
use crate::shard::ShardCtx;

/// SUBMIT's arguments for a planned task.
fn submit_args(task: &Planned, extra: &[&'static [u8]], batch: Option<&Bytes>) -> Vec<Bytes> {
    let mut args = vec![
        Bytes::from_static(b"task.submit"),
        task.queue.clone(),
        task.payload.clone(),
        Bytes::from_static(b"ID"),
        task.id.clone(),
    ];
    args.extend(extra.iter().map(|w| Bytes::from_static(w)));
    if let Some(batch) = batch {
        args.extend([Bytes::from_static(b"BATCH"), batch.clone()]);
    }
    args
}

/// Submits `tasks` where their queues live, one message per shard, and waits. An id that
/// exists already is no error (a batch sent again); the first other error is returned.
async fn submit_all(ctx: &ShardCtx, at: Target, tasks: Vec<Vec<Bytes>>) -> Option<Frame> {
    let submit = lookup(b"task.submit").expect("in the table");
    let mut by_shard: std::collections::BTreeMap<usize, Vec<Vec<Bytes>>> = Default::default();
    for args in tasks {
        by_shard
            .entry(ctx.owner_of(&args[1]))
            .or_default()
            .push(args);
    }
    let mut frames = Vec::new();
    let mut pending = Vec::new();
    for (shard, commands) in by_shard {
        if shard == ctx.id {
            for args in commands {
                frames.push(routing::local(ctx, at, submit, &args));
            }
        } else {
            let commands = commands.into_iter().map(|a| (submit.index(), a)).collect();
            let request = Request::Keys(KeyRequest::Exec {
                db: at.db,
                client: at.client,
                commands,
            });
            pending.push(ctx.request(shard, request));
        }
    }
    for response in pending {
        if let Response::Frames(replies) = response.await {
            frames.extend(replies);
        }
    }
    frames
        .into_iter()
        .find(|f| f.is_error() && !matches!(f, Frame::Error(e) if e.ends_with(b"already exists")))
}

pub async fn batch(
    ctx: &Rc<ShardCtx>,
    at: Target,
    spec: &'static CommandSpec,
    args: &[Bytes],
) -> Frame {
    let plan = match plan(args) {
        Ok(plan) => plan,
        Err(err) => return err,
    };
    let home = ctx.owner_of(&plan.id);
    let opened = if home == ctx.id {
        routing::local(ctx, at, spec, args)
    } else {
        routing::single_reply(routing::send_one(ctx, home, at, spec, args.to_vec()).await)
    };
    if opened.is_error() {
        return opened;
    }
    let callbacks: Vec<Vec<Bytes>> = [&plan.on_success, &plan.on_complete]
        .into_iter()
        .flatten()
        .map(|task| submit_args(task, &[b"HOLD"], None))
        .collect();
    if let Some(error) = submit_all(ctx, at, callbacks).await {
        return error;
    }
    let children = plan
        .children
        .iter()
        .map(|child| submit_args(child, &[], Some(&plan.id)))
        .collect();
    if let Some(error) = submit_all(ctx, at, children).await {
        return error;
    }
    opened
}

/// After a restart, on each shard: learns the ends of its open batches' children it had not
/// heard of, and sends its fired batches' callback orders again.
pub async fn reconcile(ctx: Rc<ShardCtx>) {
    let (pending, fired) = {
        let shard = ctx.shard.borrow();
        let fired: Vec<(Bytes, wetask_shards::tasks::Order)> = shard
            .tasks
            .batches()
            .flat_map(|b| b.callback_orders())
            .collect();
        (shard.tasks.batch_pending(), fired)
    };
    crate::shard::tasks::send_callback_orders(&ctx, fired);
    if pending.is_empty() {
        return;
    }
    let mut by_shard: std::collections::BTreeMap<usize, Vec<(Bytes, Bytes)>> = Default::default();
    for (batch, child) in pending {
        by_shard
            .entry(ctx.owner_of(&child))
            .or_default()
            .push((batch, child));
    }
    let mut heard = 0;
    for (shard, children) in by_shard {
        let ids: Vec<Bytes> = children.iter().map(|(_, c)| c.clone()).collect();
        let ends: Vec<Frame> = if shard == ctx.id {
            let ends = ctx.shard.borrow().tasks.child_ends(&ids);
            ends.into_iter()
                .map(crate::shard::tasks::end_frame)
                .collect()
        } else {
            let request = Request::Tasks(TaskRequest::ChildEnds { ids });
            match ctx.request(shard, request).await {
                Response::Frames(frames) => frames,
                _ => Vec::new(),
            }
        };
        for ((batch, child), end) in children.into_iter().zip(ends) {
            let Frame::Array(parts) = end else { continue };
            let (Some(Frame::Integer(code)), Some(outcome)) = (parts.first(), parts.get(1)) else {
                continue;
            };
            if *code >= 0 {
                heard += 1;
                let note = BatchNote {
                    batch,
                    child,
                    succeeded: *code == 1,
                    outcome: match outcome {
                        Frame::Bulk(bytes) => Some(bytes.clone()),
                        _ => None,
                    },
                };
                ctx.task_waits.apply_batch_note(&ctx, &note);
            }
        }
    }
    tracing::info!(
        shard = ctx.id,
        heard,
        "batches reconciled after the restart"
    );
}
