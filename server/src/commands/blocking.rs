//! Blocking commands over keys on any shard: the list pops (BLPOP, BRPOP, BLMPOP, BLMOVE,
//! BRPOPLPUSH), the sorted-set pops (BZPOPMIN, BZPOPMAX, BZMPOP) and the stream reads
//! (XREAD and XREADGROUP with BLOCK).
//!
//! A blocking pop first runs as its non-blocking self through the ordinary routing (across
//! shards under the coordinator's locks when its keys span several). If that found nothing,
//! the connection's shard (the *home*) parks one waiter on every shard that owns some of its
//! keys: locally, or as a held mesh request. Each owner queues the waiter on its keys
//! (`wetask_shards::keyspace::blocked_keys`), and when a key gets data it serves that key's waiters oldest
//! first, each with the same pop it would have run, right where the data is. The first
//! answer wins; the home then asks the other owners to let go, and pushes back to where it
//! came from anything another owner popped meanwhile, so no element is lost.
//!
//! An XREAD waiter consumes nothing, so every reader of a stream is served; an XREADGROUP
//! waiter consumes (each new entry goes to one consumer), as a pop does. Deadlines are kept
//! by the owners (checked every loop turn), as for blocked task fetches.
//! A BLMOVE whose destination is on another shard than its source pops on the source's shard
//! and pushes from the home: between the two the element is in neither list (a window of one
//! mesh round trip; Redis has none). Meanwhile the source's owner holds the key: its other
//! waiters wait until the home releases it, after the push, or after handing the element
//! back when the destination is not a list (that waiter is answered WRONGTYPE), so the
//! next waiter gets the element Redis would give it. Inside MULTI or a script a blocking
//! pop never blocks.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use wetask_protocol::{Frame, Output};
use wetask_shards::families::blocking::{found_nothing, Blocking};
use wetask_shards::families::lists::End;
use wetask_shards::request::Request as Command;
use wetask_shards::table::CommandSpec;
use wetask_shards::{lookup, BlockOp};

use crate::clients::ConnState;
use crate::mesh::{ListRequest, Request};
use crate::routing::park::{self, Parking};
use crate::routing::Target;
use crate::shard::{ListWaiter, ShardCtx};

/// True when a blocking command run on this shard may have to wait (so it cannot run
/// inline): none of its source keys exists here.
pub fn may_wait(ctx: &ShardCtx, db: usize, blocking: &Blocking) -> bool {
    match blocking.timeout_ms {
        // XREAD without BLOCK answers at once, found or not.
        None => false,
        // A read of `$` finds nothing now even on an existing stream.
        Some(_) if matches!(blocking.op, BlockOp::XRead { .. } | BlockOp::XReadGroup(_)) => true,
        Some(_) => {
            let mut shard = ctx.shard.borrow_mut();
            !blocking.keys.iter().any(|key| shard.exists(db, key))
        }
    }
}

/// A blocking command, admitted: its attempt runs as the non-blocking command would, from
/// its parsed form, wherever its keys live; only nothing found blocks (not inside MULTI or
/// a script, which never reach here, nor an XREAD without BLOCK).
pub async fn attempt_then_block(
    ctx: &Rc<ShardCtx>,
    conn: &Rc<RefCell<ConnState>>,
    at: Target,
    spec: &'static CommandSpec,
    command: &Command,
    blocking: &Blocking,
    direct: Option<&mut Output>,
) -> Frame {
    let frame = crate::routing::keyed(ctx, at, spec, command, direct).await;
    if found_nothing(&frame) && blocking.timeout_ms.is_some() {
        run_blocked(ctx, conn, blocking).await
    } else {
        frame
    }
}

/// A blocking pop whose attempt found nothing: parks it (see the module docs) and notes on
/// the connection where, so that closing the connection lets go of it.
async fn run_blocked(
    ctx: &Rc<ShardCtx>,
    conn: &Rc<RefCell<ConnState>>,
    parsed: &Blocking,
) -> Frame {
    // A copy: a parked waiter must not pin the connection's read buffer.
    let blocking = parsed.detached();
    let (client, db) = {
        let mut state = conn.borrow_mut();
        state.blocked_on = blocking.keys.iter().map(|k| ctx.owner_of(k)).collect();
        state.blocked_on.sort_unstable();
        state.blocked_on.dedup();
        (state.id, state.db)
    };
    let frame = block(ctx, client, db, blocking).await;
    let mut state = conn.borrow_mut();
    state.blocked_on.clear();
    match state.unblock_error.take() {
        Some(error) => Frame::static_error(error),
        None => frame,
    }
}

/// Parks the blocking pop on its keys' owners and waits for the first answer; `nothing` is
/// the reply on time-out (nil of the command's kind).
async fn block(ctx: &Rc<ShardCtx>, client: u64, db: usize, blocking: Blocking) -> Frame {
    let now = crate::globals::unix_ms();
    let timeout_ms = blocking.timeout_ms.unwrap_or(0);
    let deadline_ms = (timeout_ms > 0).then(|| now.saturating_add(timeout_ms));
    let waiter = ctx.new_token();
    // Each key once (BLPOP k k waits on k once), grouped by owner.
    let mut keys: Vec<Bytes> = Vec::with_capacity(blocking.keys.len());
    for key in blocking.keys {
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let groups = park::by_owner(ctx, keys);
    // Not while a cross-shard operation holds this shard: its keys may be borrowed away
    // (an XREAD would take `$` of a stream that is briefly elsewhere).
    if groups.iter().any(|(shard, _)| *shard == ctx.id) {
        ctx.wait_unlocked().await;
    }
    let answers = park::first_answer(
        ctx,
        Parking {
            parts: &groups,
            here: &|keys, reply| {
                ctx.lists.park(
                    ctx,
                    waiter,
                    ListWaiter {
                        client,
                        db,
                        keys: keys.clone(),
                        op: blocking.op.clone(),
                        deadline_ms,
                        reply,
                    },
                )
            },
            there: &|keys| {
                Request::Lists(ListRequest::Block {
                    waiter,
                    client,
                    db,
                    keys: keys.clone(),
                    op: blocking.op.clone(),
                    deadline_ms,
                })
            },
            let_go_here: &|| ctx.lists.unpark(ctx, waiter),
            let_go_there: &|| Request::Lists(ListRequest::Unblock { waiter }),
        },
    )
    .await;
    settle(ctx, db, &blocking.op, answers.into_frames()).await
}

/// The reply from the owners' answers: the first element answered; any other is handed
/// back. An error (a refused park) is the reply only when no element came; nothing at
/// all is the command's nil.
async fn settle(
    ctx: &Rc<ShardCtx>,
    db: usize,
    op: &BlockOp,
    answers: impl Iterator<Item = Frame>,
) -> Frame {
    let mut reply: Option<Frame> = None;
    let mut error: Option<Frame> = None;
    for frame in answers {
        let frame = finish(ctx, db, op, frame).await;
        if frame.is_error() {
            error = error.or(Some(frame));
        } else if reply.is_none() {
            reply = Some(frame);
        } else {
            hand_back(ctx, db, op, frame).await;
        }
    }
    if let Some(reply) = reply.or(error) {
        return reply;
    }
    match op {
        BlockOp::Move { .. } => Frame::Null,
        BlockOp::Pop { .. }
        | BlockOp::ZPop { .. }
        | BlockOp::XRead { .. }
        | BlockOp::XReadGroup(_) => Frame::NullArray,
    }
}

/// Completes an owner's answer: for a BLMOVE across shards, pushes the popped element to
/// its destination (from here, through the ordinary routing).
async fn finish(ctx: &Rc<ShardCtx>, db: usize, op: &BlockOp, frame: Frame) -> Frame {
    let BlockOp::Move { dst, from, to } = op else {
        return frame;
    };
    let Frame::Array(mut parts) = frame else {
        return frame;
    };
    // An owner that only popped answers [src, element]; one that moved answers the element.
    let (Some(Frame::Bulk(element)), Some(Frame::Bulk(src))) = (parts.pop(), parts.pop()) else {
        return Frame::static_error("ERR internal error: unexpected blocked move answer");
    };
    let pushed = run_routed(ctx, db, &push_args(*to, dst.clone(), vec![element.clone()])).await;
    if pushed.is_error() {
        // The destination is not a list: the element goes back where it came from.
        let back = run_routed(
            ctx,
            db,
            &push_args(*from, src.clone(), vec![element.clone()]),
        )
        .await;
        if back.is_error() {
            tracing::warn!("could not hand back a popped element: {back:?}");
        }
    }
    // The source's owner held the key for this move; its next waiter may go now.
    let owner = ctx.owner_of(&src);
    if owner == ctx.id {
        ctx.lists.release(ctx, db, src);
    } else {
        drop(ctx.request(owner, Request::Lists(ListRequest::Release { db, key: src })));
    }
    if pushed.is_error() {
        return pushed;
    }
    Frame::Bulk(element)
}

/// Puts back an element (or elements) that was popped for a client that will not get it, at
/// the end it came from, in its original order.
async fn hand_back(ctx: &Rc<ShardCtx>, db: usize, op: &BlockOp, frame: Frame) {
    let (key, elements, end) = match (op, frame) {
        (BlockOp::Pop { end, count: None }, Frame::Array(parts)) => match &parts[..] {
            [Frame::Bulk(key), Frame::Bulk(element)] => (key.clone(), vec![element.clone()], *end),
            _ => return,
        },
        (BlockOp::Pop { end, .. }, Frame::Array(parts)) => match &parts[..] {
            [Frame::Bulk(key), Frame::Array(items)] => (
                key.clone(),
                items.iter().filter_map(|f| f.as_bytes().cloned()).collect(),
                *end,
            ),
            _ => return,
        },
        (BlockOp::ZPop { .. }, Frame::Array(parts)) => {
            let pairs: Vec<(Frame, Frame)> = match &parts[..] {
                [_, member, score] => vec![(member.clone(), score.clone())],
                [_, Frame::Array(items)] => items
                    .iter()
                    .filter_map(|item| match item {
                        Frame::Array(pair) if pair.len() == 2 => {
                            Some((pair[0].clone(), pair[1].clone()))
                        }
                        _ => None,
                    })
                    .collect(),
                _ => return,
            };
            let Some(Frame::Bulk(key)) = parts.first() else {
                return;
            };
            let mut args = vec![Bytes::from_static(b"zadd"), key.clone()];
            for (member, score) in pairs {
                let (Frame::Bulk(member), Frame::Double(score)) = (member, score) else {
                    continue;
                };
                args.push(Bytes::from(wetask_protocol::format_double(score)));
                args.push(member);
            }
            if args.len() > 2 {
                let result = run_routed(ctx, db, &args).await;
                if result.is_error() {
                    tracing::warn!("could not hand back popped members: {result:?}");
                }
            }
            return;
        }
        // A move already landed in its destination: nothing to hand back.
        _ => return,
    };
    // The first popped goes back last, so it ends up where it was.
    let args = push_args(end, key, elements.into_iter().rev().collect());
    let result = run_routed(ctx, db, &args).await;
    if result.is_error() {
        tracing::warn!("could not hand back a popped element: {result:?}");
    }
}

/// LPUSH or RPUSH (by `end`) of `elements` to `key`.
fn push_args(end: End, key: Bytes, elements: Vec<Bytes>) -> Vec<Bytes> {
    let push: &'static [u8] = if end == End::Left { b"lpush" } else { b"rpush" };
    let mut args = vec![Bytes::from_static(push), key];
    args.extend(elements);
    args
}

/// Runs a keyed command on its owner (this shard or a peer).
async fn run_routed(ctx: &Rc<ShardCtx>, db: usize, args: &[Bytes]) -> Frame {
    let spec = lookup(&args[0]).expect("an internal command is in the table");
    let shard = ctx.owner_of(&args[1]);
    let at = crate::routing::Target { db, client: 0 };
    if shard == ctx.id {
        ctx.wait_unlocked().await;
        ctx.shard.borrow_mut().execute(db, 0, spec, args)
    } else {
        crate::routing::single_reply(
            crate::routing::send_one(ctx, shard, at, spec, args.to_vec()).await,
        )
    }
}
