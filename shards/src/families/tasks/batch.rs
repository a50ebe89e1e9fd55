//! TASK.BATCH, TASK.BATCHINFO and TASK.RELEASE. `plan` reads a TASK.BATCH into the ids of its
//! children and held callbacks (ids of their own: `batch:<batch id>:<n>`,
//! `batch:<batch id>:on-success`, `…:on-complete`, each tagged with its queue's slot, so a
//! batch sent again makes nothing twice). The server (`server/src/commands/batch.rs`) makes
//! the batch on its home shard with [`open`], submits the callbacks held, then the children.

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::args::is;
use crate::ctx::Ctx;
use crate::errors::SYNTAX;
use crate::tasks::{Engine, OnFail, BATCH_CHILDREN_MAX};

/// A task to submit: its queue, payload and id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    pub queue: Bytes,
    pub payload: Bytes,
    pub id: Bytes,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchPlan {
    pub id: Bytes,
    /// TASK.FLOW: `on_complete` is the parent, run (or failed) by this rule.
    pub flow: Option<OnFail>,
    pub on_success: Option<Planned>,
    pub on_complete: Option<Planned>,
    pub children: Vec<Planned>,
}

fn planned(batch: &[u8], queue: &Bytes, payload: &Bytes, suffix: &str) -> Planned {
    let local = Bytes::from([b"batch:", batch, b":", suffix.as_bytes()].concat());
    Planned {
        queue: queue.clone(),
        payload: payload.clone(),
        id: Engine::custom_id(queue, &local),
    }
}

/// Reads TASK.BATCH id [ON-SUCCESS queue payload] [ON-COMPLETE queue payload] CHILDREN queue
/// payload [queue payload ...], or TASK.FLOW id PARENT queue payload [ON-FAIL FAIL|IGNORE]
/// CHILDREN queue payload [queue payload ...].
// Long: one loop over the options of both commands, each branch a few lines.
pub fn plan(args: &[Bytes]) -> Result<BatchPlan, Frame> {
    let flow = is(&args[0], "task.flow");
    let id = args.get(1).ok_or(Frame::static_error(SYNTAX))?;
    if id.is_empty() || id.len() > crate::tasks::model::NAME_BYTES_MAX {
        return Err(Frame::static_error("ERR batch id must be 1..1024 bytes"));
    }
    let mut plan = BatchPlan {
        id: Bytes::copy_from_slice(id),
        flow: flow.then_some(OnFail::FailParent),
        on_success: None,
        on_complete: None,
        children: Vec::new(),
    };
    let mut i = 2;
    while i < args.len() {
        let word = &args[i];
        if flow && is(word, "parent") && i + 2 < args.len() {
            plan.on_complete = Some(planned(id, &args[i + 1], &args[i + 2], "parent"));
            i += 3;
        } else if flow && is(word, "on-fail") && i + 1 < args.len() {
            plan.flow = Some(if is(&args[i + 1], "fail") {
                OnFail::FailParent
            } else if is(&args[i + 1], "ignore") {
                OnFail::Ignore
            } else {
                return Err(Frame::static_error("ERR ON-FAIL is FAIL or IGNORE"));
            });
            i += 2;
        } else if !flow && (is(word, "on-success") || is(word, "on-complete")) && i + 2 < args.len()
        {
            let which = if is(word, "on-success") {
                "on-success"
            } else {
                "on-complete"
            };
            let task = Some(planned(id, &args[i + 1], &args[i + 2], which));
            if which == "on-success" {
                plan.on_success = task;
            } else {
                plan.on_complete = task;
            }
            i += 3;
        } else if is(word, "children") {
            let rest = &args[i + 1..];
            if rest.is_empty() || !rest.len().is_multiple_of(2) {
                return Err(Frame::static_error(
                    "ERR CHILDREN takes queue payload pairs, at least one",
                ));
            }
            if rest.len() / 2 > BATCH_CHILDREN_MAX {
                return Err(Frame::error(format!(
                    "ERR a batch has at most {BATCH_CHILDREN_MAX} children"
                )));
            }
            plan.children = rest
                .chunks(2)
                .enumerate()
                .map(|(n, pair)| planned(id, &pair[0], &pair[1], &n.to_string()))
                .collect();
            break;
        } else {
            return Err(Frame::static_error(SYNTAX));
        }
    }
    if plan.children.is_empty() {
        return Err(Frame::static_error("ERR a batch needs CHILDREN"));
    }
    if flow && plan.on_complete.is_none() {
        return Err(Frame::static_error("ERR a flow needs a PARENT"));
    }
    Ok(plan)
}

/// TASK.BATCH on the batch's home shard: makes the batch (the same batch again is no
/// error); replies the children's ids.
pub fn open(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let plan = match plan(args) {
        Ok(plan) => plan,
        Err(err) => return err,
    };
    let children: Vec<Bytes> = plan.children.iter().map(|c| c.id.clone()).collect();
    let on_success = plan.on_success.map(|c| c.id);
    let on_complete = plan.on_complete.map(|c| c.id);
    match ctx.tasks.batch_open(
        &plan.id,
        children.clone(),
        on_success,
        on_complete,
        plan.flow,
        ctx.now_ms,
    ) {
        Ok(_) => Frame::Array(children.into_iter().map(Frame::Bulk).collect()),
        Err(crate::tasks::TaskError::IdExists) => Frame::static_error(
            "ERR a different batch with this id exists (or two children share an id)",
        ),
        Err(err) => Frame::error(err.text()),
    }
}

fn text(s: &str) -> Frame {
    Frame::Bulk(Bytes::copy_from_slice(s.as_bytes()))
}

/// TASK.BATCHINFO id: map of total, ended, succeeded, failed, fired (unix ms or nil),
/// on_success and on_complete (callback ids or nil); nil for an unknown batch.
pub fn info(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    ctx.tasks.advance(ctx.now_ms);
    let Some(b) = ctx.tasks.batch(&args[1]) else {
        return Frame::Null;
    };
    let int = |n: usize| Frame::Integer(n as i64);
    let opt = |id: &Option<Bytes>| id.clone().map_or(Frame::Null, Frame::Bulk);
    let ok = b.succeeded();
    Frame::Map(vec![
        (text("total"), int(b.children.len())),
        (text("ended"), int(b.ends.len())),
        (text("succeeded"), int(ok)),
        (text("failed"), int(b.ends.len() - ok)),
        (
            text("fired"),
            b.fired_ms
                .map_or(Frame::Null, |ms| Frame::Integer(ms as i64)),
        ),
        (text("on_success"), opt(&b.on_success)),
        (text("on_complete"), opt(&b.on_complete)),
    ])
}

/// TASK.BATCHES' page size when COUNT names none, and its most.
pub const BATCHES_COUNT_DEFAULT: usize = 100;
pub const BATCHES_COUNT_MAX: usize = 1_000;

/// TASK.BATCHES [COUNT n]: this shard's newest batches and flows (every shard's, gathered),
/// one map each: id, kind (batch or flow), total, ended, succeeded, failed, created, fired.
pub fn list(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let count = match &args[1..] {
        [] => BATCHES_COUNT_DEFAULT,
        [word, n] if is(word, "count") => match crate::args::int_arg(n) {
            Ok(n) if (1..=BATCHES_COUNT_MAX as i64).contains(&n) => n as usize,
            Ok(_) => return Frame::error(format!("ERR COUNT must be 1..{BATCHES_COUNT_MAX}")),
            Err(err) => return err,
        },
        _ => return Frame::static_error(SYNTAX),
    };
    ctx.tasks.advance(ctx.now_ms);
    let mut batches: Vec<_> = ctx.tasks.batches().collect();
    batches.sort_by(|a, b| (b.created_ms, &b.id).cmp(&(a.created_ms, &a.id)));
    let int = |n: usize| Frame::Integer(n as i64);
    Frame::Array(
        batches
            .into_iter()
            .take(count)
            .map(|b| {
                let ok = b.succeeded();
                let kind = if b.flow.is_some() { "flow" } else { "batch" };
                Frame::Map(vec![
                    (text("id"), Frame::Bulk(b.id.clone())),
                    (text("kind"), text(kind)),
                    (text("total"), int(b.children.len())),
                    (text("ended"), int(b.ends.len())),
                    (text("succeeded"), int(ok)),
                    (text("failed"), int(b.ends.len() - ok)),
                    (text("created"), Frame::Integer(b.created_ms as i64)),
                    (
                        text("fired"),
                        b.fired_ms
                            .map_or(Frame::Null, |ms| Frame::Integer(ms as i64)),
                    ),
                ])
            })
            .collect(),
    )
}

/// TASK.RESULTS id: a flow's children as `[id, state (done or failed, nil while running),
/// result or error]`, in the order given; nil for an unknown flow.
pub fn results(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    ctx.tasks.advance(ctx.now_ms);
    let Some(b) = ctx.tasks.batch(&args[1]) else {
        return Frame::Null;
    };
    let rows = b
        .children
        .iter()
        .map(|child| {
            let state = match b.ends.get(child) {
                Some(true) => text("done"),
                Some(false) => text("failed"),
                None => Frame::Null,
            };
            let outcome = b
                .outcomes
                .get(child)
                .cloned()
                .map_or(Frame::Null, Frame::Bulk);
            Frame::Array(vec![Frame::Bulk(child.clone()), state, outcome])
        })
        .collect();
    Frame::Array(rows)
}

/// TASK.RELEASE id [DEAD error]: a held task goes to its queue (or dead, with the error);
/// replies 1, or 0 when it was not held.
pub fn release(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let dead = match &args[2..] {
        [] => None,
        [word, error] if is(word, "dead") => Some(Bytes::copy_from_slice(error)),
        _ => return Frame::static_error(SYNTAX),
    };
    match ctx.tasks.release_held_to(&args[1], dead, ctx.now_ms) {
        Ok(held) => Frame::Integer(i64::from(held)),
        Err(err) => Frame::error(err.text()),
    }
}
