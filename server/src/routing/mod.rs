//! Routing: where a command's keys live decides where it runs. One owner: there (this
//! shard inline, or one mesh message); keys on several shards: `cross`; a split command
//! (MGET, DEL …) in parts, merged; an all-shards command everywhere, merged. Pipelined
//! runs of simple keyed commands go as one message per owner shard.

pub mod cross;
pub mod park;

use std::collections::BTreeMap;

use bytes::Bytes;
use wetask_protocol::{Frame, Output};
use wetask_shards::errors::wrong_arity;
use wetask_shards::request::{Form, Owners, Request as Command};
use wetask_shards::shard_of;
use wetask_shards::table::{CommandSpec, Merge};

use crate::mesh::{KeyRequest, LockRequest, Request, Response, ResponseFuture, ShardCommands};
use crate::shard::ShardCtx;

/// Where a command runs: the connection's database, and who it runs for: the client id, or
/// its worker's owner id (task leases go to it; nothing else in a shard reads it).
#[derive(Clone, Copy, Debug)]
pub struct Target {
    pub db: usize,
    pub client: u64,
}

pub fn local(ctx: &ShardCtx, at: Target, spec: &CommandSpec, args: &[Bytes]) -> Frame {
    ctx.shard.borrow_mut().execute(at.db, at.client, spec, args)
}

/// Sends one command to shard `to`; read its reply with [`single_reply`].
pub fn send_one(
    ctx: &ShardCtx,
    to: usize,
    at: Target,
    spec: &'static CommandSpec,
    args: Vec<Bytes>,
) -> ResponseFuture {
    let commands = ShardCommands::one(spec.index(), args);
    ctx.request(
        to,
        Request::Keys(KeyRequest::Exec {
            db: at.db,
            client: at.client,
            commands,
        }),
    )
}

/// The reply to a [`send_one`]: its single frame, or an error for any other response.
pub fn single_reply(response: Response) -> Frame {
    match response {
        Response::Frames(mut frames) if frames.len() == 1 => frames.pop().expect("one frame"),
        _ => Frame::static_error("ERR internal error: unexpected shard response"),
    }
}

/// Runs a keyed command (or a blocking command's attempt, from its parsed form) where its
/// keys live: here, on their one owner, or across shards under locks (`cross`).
pub async fn keyed(
    ctx: &ShardCtx,
    at: Target,
    spec: &'static CommandSpec,
    request: &Command,
    direct: Option<&mut Output>,
) -> Frame {
    let args = &request.args[..];
    // A cross-shard operation is boxed: its future is large, and inline it would make every
    // caller's as large (an unpipelined hop's batch task among them: `run_one`).
    let owner = match request.owners() {
        Owners::None => ctx.id,
        Owners::One(owner) => owner,
        Owners::Several => return Box::pin(cross::run(ctx, at, spec, request)).await,
    };
    if cross::sort_reaches_elsewhere(ctx, request) {
        return Box::pin(cross::run(ctx, at, spec, request)).await;
    }
    if owner == ctx.id || ctx.shard_count == 1 {
        // (A plain form runs the row's handler.)
        return ctx
            .shard
            .borrow_mut()
            .execute_request(at.db, at.client, spec, request, direct);
    }
    // A fixed-key plain command travels as its arguments (the owner's row gives its keys
    // by arithmetic); anything parsed travels with its parse.
    let response = if matches!(request.form(), Form::Plain) && spec.movable_keys.is_none() {
        send_one(ctx, owner, at, spec, args.to_vec()).await
    } else {
        let parsed = KeyRequest::ExecParsed {
            db: at.db,
            client: at.client,
            spec: spec.index(),
            request: Box::new(request.clone()),
        };
        ctx.request(owner, Request::Keys(parsed)).await
    };
    single_reply(response)
}

/// [`keyed`] when every key of the command lives on this shard: synchronous, no future.
pub fn keyed_here(
    ctx: &ShardCtx,
    at: Target,
    spec: &CommandSpec,
    request: &Command,
    direct: Option<&mut Output>,
) -> Frame {
    ctx.shard
        .borrow_mut()
        .execute_request(at.db, at.client, spec, request, direct)
}

/// Splits a multi-key command into one sub-command per shard and merges the replies.
pub async fn split(
    ctx: &ShardCtx,
    at: Target,
    spec: &'static CommandSpec,
    args: &[Bytes],
    merge: Merge,
) -> Frame {
    let step = spec.step.max(1) as usize;
    // MSET's key-value pairs must come whole, or no shard could take its part.
    if step > 1 && !(args.len() - spec.first_key.max(1) as usize).is_multiple_of(step) {
        return wrong_arity(spec.name);
    }
    // shard -> (sub-command arguments, positions of its keys among all keys)
    let mut parts: BTreeMap<usize, (Vec<Bytes>, Vec<usize>)> = BTreeMap::new();
    for (key_number, i) in spec.key_positions(args).enumerate() {
        let owner = if ctx.shard_count == 1 {
            ctx.id
        } else {
            shard_of(&args[i], ctx.shard_count)
        };
        let part = parts
            .entry(owner)
            .or_insert_with(|| (vec![args[0].clone()], Vec::new()));
        part.0
            .extend(args[i..(i + step).min(args.len())].iter().cloned());
        part.1.push(key_number);
    }
    if parts.len() <= 1 && parts.keys().all(|&s| s == ctx.id) {
        return local(ctx, at, spec, args);
    }
    if parts.len() > 1 {
        return split_atomically(ctx, at, spec, parts, merge).await;
    }
    let mut pending = Vec::new();
    let mut replies = Vec::new();
    for (owner, (sub, positions)) in parts {
        if owner == ctx.id {
            replies.push((local(ctx, at, spec, &sub), positions));
        } else {
            pending.push((send_one(ctx, owner, at, spec, sub), positions));
        }
    }
    for (future, positions) in pending {
        replies.push((single_reply(future.await), positions));
    }
    merge_replies(merge, replies)
}

/// A split command over several shards runs as one atomic step, as in Redis (an MGET never
/// sees half of a concurrent MSET or EXEC): each shard is locked in ascending order, a peer's
/// lock travelling with its part of the command (`Request::Lock(LockRequest::Exec)`, so the lock costs no
/// extra round trip), and all are unlocked once every part has run and the commit is logged
/// (`wetask_shards::shard::cross_commit`: after a crash the parts come back all or none).
pub async fn split_atomically(
    ctx: &ShardCtx,
    at: Target,
    spec: &'static CommandSpec,
    parts: BTreeMap<usize, (Vec<Bytes>, Vec<usize>)>,
    merge: Merge,
) -> Frame {
    let token = ctx.new_token();
    let mut replies = Vec::with_capacity(parts.len());
    let mut locked = Vec::with_capacity(parts.len());
    // BTreeMap order: ascending shard ids, the global lock order.
    for (owner, (sub, positions)) in parts {
        let frame = if owner == ctx.id {
            ctx.lock_local(token).await;
            local(ctx, at, spec, &sub)
        } else {
            let request = Request::Lock(LockRequest::Exec {
                db: at.db,
                client: at.client,
                commands: ShardCommands::one(spec.index(), sub),
            });
            single_reply(ctx.request_as(owner, Some(token), request).await)
        };
        locked.push(owner);
        replies.push((frame, positions));
    }
    cross::commit(ctx, token, &locked);
    for owner in locked {
        if owner == ctx.id {
            ctx.unlock(token);
        } else {
            // Sent in order behind nothing else of ours: no need to wait for the answer.
            drop(ctx.request_as(owner, Some(token), Request::Lock(LockRequest::Unlock)));
        }
    }
    merge_replies(merge, replies)
}

pub fn merge_replies(merge: Merge, replies: Vec<(Frame, Vec<usize>)>) -> Frame {
    if let Some((err, _)) = replies.iter().find(|(f, _)| f.is_error()) {
        return err.clone();
    }
    match merge {
        Merge::Sum => Frame::Integer(
            replies
                .iter()
                .map(|(f, _)| if let Frame::Integer(n) = f { *n } else { 0 })
                .sum(),
        ),
        Merge::Ok => Frame::ok(),
        Merge::Concat => Frame::Array(
            replies
                .into_iter()
                .flat_map(|(f, _)| match f {
                    Frame::Array(items) => items,
                    _ => Vec::new(),
                })
                .collect(),
        ),
        Merge::PerKey => {
            let total = replies.iter().map(|(_, p)| p.len()).sum();
            let mut out = vec![Frame::Null; total];
            for (frame, positions) in replies {
                if let Frame::Array(items) = frame {
                    for (item, position) in items.into_iter().zip(positions) {
                        out[position] = item;
                    }
                }
            }
            Frame::Array(out)
        }
    }
}

pub async fn all_shards(
    ctx: &ShardCtx,
    at: Target,
    spec: &'static CommandSpec,
    args: &[Bytes],
    merge: Merge,
) -> Frame {
    let pending: Vec<_> = (0..ctx.shard_count)
        .filter(|&s| s != ctx.id)
        .map(|to| send_one(ctx, to, at, spec, args.to_vec()))
        .collect();
    let mut replies = vec![(local(ctx, at, spec, args), Vec::new())];
    for future in pending {
        replies.push((single_reply(future.await), Vec::new()));
    }
    merge_replies(merge, replies)
}

/// [`run_segment`] for one admitted keyed command (`keyed`, which sends it to its owner):
/// one message, no grouping and a small future, for an unpipelined client's hop.
pub async fn run_one(
    ctx: &ShardCtx,
    at: Target,
    spec: &'static CommandSpec,
    command: &Command,
) -> Frame {
    if ctx.wait_unlocked_or_busy().await {
        return Frame::static_error(crate::lua::busy::BUSY);
    }
    let frame = keyed(ctx, at, spec, command, None).await;
    ctx.stats.record(spec, frame.is_error());
    ctx.tracking.drain(&ctx.core);
    ctx.publish_keyspace_events();
    frame
}

/// Runs a pipeline segment of simple keyed commands (each with one owner, as the caller
/// checked: `dispatch::simple_target`): those for this shard here, the rest as one message
/// per owner shard; `reply` gets each command's reply, in the segment's order. A command
/// sent to another shard gives its arguments up to the message (moved, not cloned: no
/// reference count touched twice per argument).
pub async fn run_segment(
    ctx: &ShardCtx,
    at: Target,
    commands: &mut [Command],
    mut reply: impl FnMut(&Frame),
) {
    if ctx.wait_unlocked_or_busy().await {
        let busy = Frame::static_error(crate::lua::busy::BUSY);
        commands.iter().for_each(|_| reply(&busy));
        return;
    }
    // This shard's replies, in order; the others' commands, one group per owner.
    let mut here = ctx.spares.frames();
    let mut groups: Vec<(usize, ShardCommands)> = Vec::new();
    let count = commands.len();
    for (n, command) in commands.iter_mut().enumerate() {
        let (owner, spec) = match segment_target(command) {
            Some((owner, spec)) if owner != ctx.id => (owner, spec),
            Some((_, spec)) => {
                let frame = local(ctx, at, spec, &command.args);
                ctx.stats.record(spec, frame.is_error());
                here.push(frame);
                continue;
            }
            None => {
                here.push(Frame::static_error(NOT_IN_A_SEGMENT));
                continue;
            }
        };
        let group = match groups.iter().position(|(to, _)| *to == owner) {
            Some(group) => group,
            None => {
                // Room for every command left, as long as this one: no growth for a run of
                // GETs or SETs.
                let left = count - n;
                let room = ShardCommands::with_capacity(left, left * command.args.len());
                groups.push((owner, room));
                groups.len() - 1
            }
        };
        groups[group].1.take(spec.index(), &mut command.args);
    }
    let mut answers = send_groups(ctx, at, groups).await;
    // Merged back in order: each owner's replies come in the order its commands went.
    let mut mine = here.drain(..);
    for command in commands.iter() {
        let frame = match segment_target(command) {
            Some((owner, spec)) if owner != ctx.id => {
                let theirs = answers.iter_mut().find(|(to, _)| *to == owner);
                let frame = theirs.and_then(|(_, frames)| frames.next());
                if let Some(frame) = &frame {
                    ctx.stats.record(spec, frame.is_error());
                }
                frame
            }
            _ => mine.next(),
        };
        match frame {
            Some(frame) => reply(&frame),
            None => reply(&Frame::static_error("ERR internal error: lost shard reply")),
        }
    }
    drop(mine);
    ctx.spares.keep_frames(here);
    ctx.tracking.drain(&ctx.core);
}

/// The answer to a command in a segment that is not a simple keyed one (never sent: the
/// caller checks every command first).
const NOT_IN_A_SEGMENT: &str = "ERR internal error: not a simple keyed command";

/// Where a segment's command runs, from its parse: its one owner and its row; none for a
/// command that is not a simple keyed one (answered here with an error).
fn segment_target(command: &Command) -> Option<(usize, &'static CommandSpec)> {
    match (command.owners(), command.spec()) {
        (Owners::One(owner), Some(spec)) => Some((owner, spec)),
        _ => None,
    }
}

/// Sends each owner its group of a segment's commands, all before awaiting any; answers each
/// owner's replies, in its commands' order.
async fn send_groups(
    ctx: &ShardCtx,
    at: Target,
    groups: Vec<(usize, ShardCommands)>,
) -> Vec<(usize, std::vec::IntoIter<Frame>)> {
    let pending: Vec<_> = groups
        .into_iter()
        .map(|(owner, commands)| {
            let request = Request::Keys(KeyRequest::Exec {
                db: at.db,
                client: at.client,
                commands,
            });
            (owner, ctx.request(owner, request))
        })
        .collect();
    let mut answers = Vec::with_capacity(pending.len());
    for (owner, future) in pending {
        let frames = match future.await {
            Response::Frames(frames) => frames,
            _ => Vec::new(),
        };
        answers.push((owner, frames.into_iter()));
    }
    answers
}
