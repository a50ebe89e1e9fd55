//! Routing and running commands: inline on this shard when every key is ours, or across
//! shards through the mesh, with one message per destination shard per pipeline segment.
//!
//! There is one execution path, [`execute`], an async fn. The transports first ask
//! [`needs_remote`]; when a command needs no other shard, `execute` cannot wait on anything,
//! so it is polled once, inline, with no task. Otherwise it runs in a spawned task.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use wetask_protocol::{encode_output, Frame, Output};
use wetask_shards::errors::{unknown_command, wrong_arity};
use wetask_shards::table::{flag, CommandSpec, Merge, Route};
use wetask_shards::{lookup, shard_of};

use crate::clients::ConnState;
use crate::commands;
use crate::cross;
use crate::list_block;
use crate::mesh::{KeyRequest, LockRequest, Request, Response, ResponseFuture, ShardCommands};
use crate::shard::ShardCtx;
use crate::transaction;

pub const NOAUTH: &str = "NOAUTH Authentication required.";

/// Polls a future once; `None` if it would wait.
pub fn poll_once<F: Future>(future: F) -> Option<F::Output> {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(value) => Some(value),
        Poll::Pending => None,
    }
}

/// The reply to a client that protected mode turns away (then the connection closes).
pub const DENIED: &str = "DENIED WeTask is running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. To serve other hosts, either set a password (--requirepass, or CONFIG SET requirepass from the loopback interface), or turn protected mode off (--protected-mode no, or CONFIG SET protected-mode no from the loopback interface) once the server is not reachable from the internet.";

/// True when protected mode turns this connection away: a non-loopback peer while no
/// password is set.
fn protected_mode_denies(ctx: &ShardCtx, conn: &ConnState) -> bool {
    use std::sync::atomic::Ordering::Relaxed;
    !conn.loopback
        && ctx.globals.protected_mode.load(Relaxed)
        && !ctx.globals.password_set.load(Relaxed)
}

/// Looks the command up and checks arity and authentication.
fn precheck(
    ctx: &ShardCtx,
    conn: &mut ConnState,
    spec: Option<&'static CommandSpec>,
    args: &[Bytes],
) -> Result<&'static CommandSpec, Frame> {
    if !conn.loopback && protected_mode_denies(ctx, conn) {
        conn.close_requested = true;
        return Err(Frame::static_error(DENIED));
    }
    let Some(spec) = spec else {
        return Err(unknown_command(args));
    };
    if !conn.authenticated && !spec.has(flag::NO_AUTH) {
        ctx.stats.record_rejected(spec);
        return Err(Frame::static_error(NOAUTH));
    }
    if !spec.arity_ok(args.len()) {
        ctx.stats.record_rejected(spec);
        return Err(wrong_arity(spec.name));
    }
    if let Err(oom) = ctx.make_room(spec) {
        ctx.stats.record_rejected(spec);
        return Err(oom);
    }
    if crate::pubsub::resp2_subscribed(conn) && !crate::pubsub::allowed_while_subscribed(spec) {
        ctx.stats.record_rejected(spec);
        return Err(Frame::error(format!(
            "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
            spec.name
        )));
    }
    Ok(spec)
}

/// True when running `args` (command `spec`, on database `db`) needs another shard, or may
/// wait (and so a task, not an inline call). This runs for every command.
pub fn needs_remote(
    ctx: &ShardCtx,
    db: usize,
    spec: Option<&'static CommandSpec>,
    args: &[Bytes],
) -> bool {
    let Some(spec) = spec.filter(|s| s.arity_ok(args.len())) else {
        return false;
    };
    if spec.has(flag::BLOCKING) && list_block::may_wait(ctx, db, spec, args) {
        return true;
    }
    match spec.route {
        Route::Server => commands::needs_task(ctx, spec, args),
        _ if ctx.shard_count == 1 => false,
        Route::AllShards(_) => true,
        Route::Keyed | Route::Split(_) => spec
            .key_positions(args)
            .any(|i| shard_of(&args[i], ctx.shard_count) != ctx.id),
    }
}

/// Prefetches the keyspace entries of a window of pipelined commands (the first key of each
/// keyed command that lives on this shard) before they run; see `Db::prefetch`. `specs`
/// are the window's commands, looked up.
pub fn prefetch_keys(
    ctx: &ShardCtx,
    db: usize,
    window: &[Vec<Bytes>],
    specs: &[Option<&'static CommandSpec>],
) {
    const KEYS_MAX: usize = crate::session::WINDOW_COMMANDS_MAX;
    let mut keys: [&[u8]; KEYS_MAX] = [&[]; KEYS_MAX];
    let mut count = 0;
    for (args, spec) in window.iter().zip(specs).take(KEYS_MAX) {
        let Some(spec) = *spec else {
            continue;
        };
        let first = spec.first_key;
        if !matches!(spec.route, Route::Keyed | Route::Split(_)) || first < 1 {
            continue;
        }
        let Some(key) = args.get(first as usize) else {
            continue;
        };
        if ctx.shard_count > 1 && shard_of(key, ctx.shard_count) != ctx.id {
            continue;
        }
        keys[count] = key;
        count += 1;
    }
    if count > 1 && db < wetask_shards::DATABASES {
        ctx.shard.borrow().prefetch(db, &keys[..count]);
    }
}

/// Runs a command inline when it needs no other shard: the fast path. `None` means the
/// caller must run [`execute`] in a task. `spec` is `lookup(&args[0])`, done once by the
/// caller for the whole path (a table lookup costs about as much as a GET's keyspace probe).
pub fn try_inline(
    ctx: &Rc<ShardCtx>,
    conn: &Rc<RefCell<ConnState>>,
    spec: Option<&'static CommandSpec>,
    args: &[Bytes],
    out: &mut Output,
) -> Option<Frame> {
    // While a cross-shard operation holds this shard, everything waits in a task.
    if ctx.is_locked() {
        return None;
    }
    let (in_multi, db) = {
        let state = conn.borrow();
        (state.multi.is_some(), state.db)
    };
    // Inside MULTI a command is only queued (EXEC itself runs in a task).
    let queueing = in_multi && spec.is_some_and(|s| !transaction::controls_transaction(s));
    if !queueing && needs_remote(ctx, db, spec, args) {
        return None;
    }
    let frame = poll_once(execute_spec(ctx, conn, spec, args, Some(out)));
    debug_assert!(frame.is_some(), "a local command waited");
    frame
}

/// Runs one command, wherever its keys live. With `direct`, a command that runs wholly on
/// this shard may encode its reply straight into that buffer and return `Frame::Written`.
pub async fn execute(
    ctx: &Rc<ShardCtx>,
    conn: &Rc<RefCell<ConnState>>,
    args: &[Bytes],
    direct: Option<&mut Output>,
) -> Frame {
    execute_spec(ctx, conn, lookup(&args[0]), args, direct).await
}

/// [`execute`] for a command already looked up (`spec` is `lookup(&args[0])`).
async fn execute_spec(
    ctx: &Rc<ShardCtx>,
    conn: &Rc<RefCell<ConnState>>,
    spec: Option<&'static CommandSpec>,
    args: &[Bytes],
    direct: Option<&mut Output>,
) -> Frame {
    // Local work below runs before the first await, so it never interleaves with a
    // cross-shard operation that locks this shard. Commands flagged PASSES_LOCKS (SCRIPT
    // KILL, SHUTDOWN, ...) touch no keyspace and must get through a busy script's locks.
    if ctx.is_locked()
        && !spec.is_some_and(|s| s.has(flag::PASSES_LOCKS))
        && ctx.wait_unlocked_or_busy().await
    {
        return Frame::static_error(crate::script_busy::BUSY);
    }
    let (spec, db, client) = {
        let mut state = conn.borrow_mut();
        match precheck(ctx, &mut state, spec, args) {
            Ok(spec) => {
                state.last_command = spec.name;
                if state.multi.is_some() && !transaction::controls_transaction(spec) {
                    return transaction::queue(&mut state, spec, args);
                }
                (spec, state.db, state.id)
            }
            Err(err) => {
                // A command refused inside MULTI makes its EXEC abort, as in Redis.
                if state.multi.is_some() {
                    state.multi_failed = true;
                }
                return err;
            }
        }
    };
    let at = Target { db, client };
    let frame = match spec.route {
        Route::Server => commands::run(ctx, conn, spec, args).await,
        Route::Keyed if spec.has(flag::BLOCKING) => {
            // The attempt runs as the non-blocking command would; only nothing found blocks.
            let frame = keyed(ctx, at, spec, args, direct).await;
            if list_block::found_nothing(&frame) {
                list_block::run_blocked(ctx, conn, spec, args).await
            } else {
                frame
            }
        }
        Route::Keyed => keyed(ctx, at, spec, args, direct).await,
        Route::Split(merge) => split(ctx, at, spec, args, merge).await,
        Route::AllShards(merge) => all_shards(ctx, at, spec, args, merge).await,
    };
    if spec.route != Route::Server || !frame.is_error() {
        ctx.stats.record(spec, frame.is_error());
    }
    frame
}

/// Where a command runs: the connection's database, and the client it runs for.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    pub db: usize,
    pub client: u64,
}

fn local(ctx: &ShardCtx, at: Target, spec: &CommandSpec, args: &[Bytes]) -> Frame {
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
    let commands = vec![(spec.index(), args)];
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

async fn keyed(
    ctx: &ShardCtx,
    at: Target,
    spec: &'static CommandSpec,
    args: &[Bytes],
    direct: Option<&mut Output>,
) -> Frame {
    let mut owners = spec
        .key_positions(args)
        .map(|i| shard_of(&args[i], ctx.shard_count));
    let first = owners.next().unwrap_or(ctx.id);
    if owners.any(|s| s != first) {
        return cross::run(ctx, at.db, spec, args).await;
    }
    if first == ctx.id || ctx.shard_count == 1 {
        let mut shard = ctx.shard.borrow_mut();
        match direct {
            Some(out) => shard.execute_into(at.db, at.client, spec, args, out),
            None => shard.execute(at.db, at.client, spec, args),
        }
    } else {
        single_reply(send_one(ctx, first, at, spec, args.to_vec()).await)
    }
}

/// Splits a multi-key command into one sub-command per shard and merges the replies.
async fn split(
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
/// extra round trip), and all are unlocked once every part has run.
async fn split_atomically(
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
                commands: vec![(spec.index(), sub)],
            });
            single_reply(ctx.request_as(owner, Some(token), request).await)
        };
        locked.push(owner);
        replies.push((frame, positions));
    }
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

async fn all_shards(
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

/// The single shard a command runs on wholly, if there is one (used to batch a pipeline's
/// remote commands into one message per shard).
fn simple_target(
    ctx: &ShardCtx,
    conn: &ConnState,
    args: &[Bytes],
) -> Option<(usize, &'static CommandSpec)> {
    if conn.multi.is_some() {
        // Inside MULTI every command is queued by `execute`, one by one.
        return None;
    }
    let spec = lookup(&args[0])?;
    // A split command (DEL, MGET, MSET ...) whose keys all live on one shard is a plain
    // keyed command there: its handler sees every key and replies for the whole command.
    let keyed = matches!(spec.route, Route::Keyed | Route::Split(_));
    if !keyed || spec.has(flag::BLOCKING) || !spec.arity_ok(args.len()) {
        return None;
    }
    if !conn.authenticated && !spec.has(flag::NO_AUTH) || protected_mode_denies(ctx, conn) {
        return None;
    }
    let mut owners = spec
        .key_positions(args)
        .map(|i| shard_of(&args[i], ctx.shard_count));
    let first = owners.next()?;
    owners.all(|s| s == first).then_some((first, spec))
}

/// Runs a pipeline's commands in order, encoding replies into `out`. Runs of simple keyed
/// commands are grouped into one message per destination shard; anything else runs alone.
/// Returns when done or when the connection asked to close.
pub async fn run_batch(
    ctx: &Rc<ShardCtx>,
    conn: &Rc<RefCell<ConnState>>,
    commands: Vec<Vec<Bytes>>,
    out: &mut Output,
) {
    let mut i = 0;
    while i < commands.len() {
        let (at, protocol) = {
            let state = conn.borrow();
            if state.close_requested {
                return;
            }
            let at = Target {
                db: state.db,
                client: state.id,
            };
            (at, state.protocol)
        };
        let mut segment = Vec::new();
        while i + segment.len() < commands.len() {
            match simple_target(ctx, &conn.borrow(), &commands[i + segment.len()]) {
                Some(target) => segment.push(target),
                None => break,
            }
        }
        if segment.len() < 2 {
            let frame = execute(ctx, conn, &commands[i], None).await;
            let protocol = conn.borrow().protocol;
            encode_output(out, &frame, protocol);
            if crate::session::output_limit_reached(ctx, conn, out) {
                return;
            }
            i += 1;
            continue;
        }
        let frames = run_segment(ctx, at, &segment, &commands[i..i + segment.len()]).await;
        for frame in &frames {
            encode_output(out, frame, protocol);
        }
        if crate::session::output_limit_reached(ctx, conn, out) {
            return;
        }
        conn.borrow_mut().last_command = segment.last().expect("non-empty").1.name;
        i += segment.len();
    }
}

async fn run_segment(
    ctx: &ShardCtx,
    at: Target,
    targets: &[(usize, &'static CommandSpec)],
    commands: &[Vec<Bytes>],
) -> Vec<Frame> {
    if ctx.wait_unlocked_or_busy().await {
        return vec![Frame::static_error(crate::script_busy::BUSY); commands.len()];
    }
    let mut frames: Vec<Option<Frame>> = vec![None; commands.len()];
    let mut groups: BTreeMap<usize, (ShardCommands, Vec<usize>)> = BTreeMap::new();
    for (n, ((owner, spec), args)) in targets.iter().zip(commands).enumerate() {
        if *owner == ctx.id {
            let frame = local(ctx, at, spec, args);
            ctx.stats.record(spec, frame.is_error());
            frames[n] = Some(frame);
        } else {
            let group = groups.entry(*owner).or_default();
            group.0.push((spec.index(), args.clone()));
            group.1.push(n);
        }
    }
    let pending: Vec<_> = groups
        .into_iter()
        .map(|(owner, (cmds, slots))| {
            (
                ctx.request(
                    owner,
                    Request::Keys(KeyRequest::Exec {
                        db: at.db,
                        client: at.client,
                        commands: cmds,
                    }),
                ),
                slots,
            )
        })
        .collect();
    for (future, slots) in pending {
        if let Response::Frames(replies) = future.await {
            for (frame, slot) in replies.into_iter().zip(slots) {
                frames[slot] = Some(frame);
            }
        }
    }
    frames
        .into_iter()
        .map(|f| f.unwrap_or_else(|| Frame::static_error("ERR internal error: lost shard reply")))
        .collect()
}
