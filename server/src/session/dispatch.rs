//! Which path a command takes: the prechecks (AUTH, arity, OOM, subscribed mode), MULTI
//! queueing, server commands (`commands`), blocking pops (`commands::blocking`), and the
//! keyed rest through `routing`: inline on this shard when every key is ours, else across
//! shards, with one message per destination shard per pipeline segment.
//!
//! There is one execution path, [`execute`], an async fn, over a request parsed once
//! (`wetask_shards::request`). The transports first ask [`needs_remote`]; when a command
//! needs no other shard, `execute` cannot wait on anything, so it is polled once, inline,
//! with no task. Otherwise it runs in a spawned task.

use std::cell::RefCell;
use std::future::Future;
use std::pin::pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use wetask_protocol::{Frame, Output};
use wetask_shards::errors::{unknown_command, wrong_arity};
use wetask_shards::request::{Form, Owners, Request};
use wetask_shards::table::{flag, CommandSpec, Route};

use crate::clients::ConnState;
use crate::commands;
use crate::commands::blocking;
use crate::commands::transaction;
use crate::routing::{all_shards, keyed, run_segment, split, Target};
use crate::shard::ShardCtx;

/// Most commands of a pipeline decoded and run as one window (their keys prefetched together).
pub const WINDOW_COMMANDS_MAX: usize = 16;

/// The client's queued output against `client-output-buffer-limit` (see `output_limits`):
/// past it, the output is dropped and the connection closes (true).
#[inline]
pub fn reached_output_limit(ctx: &ShardCtx, state: &RefCell<ConnState>, out: &mut Output) -> bool {
    let now = || ctx.shard.borrow().now_ms();
    crate::output_limits::reached(&ctx.globals.output_limits, now, state, out)
}

pub use crate::access::NOAUTH;

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
    request: &Request,
) -> Result<&'static CommandSpec, Frame> {
    let (spec, args) = (request.spec(), &request.args[..]);
    if !conn.loopback && protected_mode_denies(ctx, conn) {
        conn.close_requested = true;
        return Err(Frame::static_error(DENIED));
    }
    let Some(spec) = spec else {
        return Err(unknown_command(args));
    };
    let acl_free = crate::access::unrestricted(ctx, conn);
    if !acl_free {
        crate::access::refresh(ctx, conn)?;
    }
    if !conn.authenticated && !spec.has(flag::NO_AUTH) {
        ctx.stats.record_rejected(spec);
        return Err(Frame::static_error(NOAUTH));
    }
    if !spec.arity_ok(args.len()) {
        ctx.stats.record_rejected(spec);
        return Err(wrong_arity(spec.name));
    }
    if !acl_free {
        // Redis's order: a bad subcommand is reported before a refusal, and the refusal's
        // log names the refused command as the client's current one.
        conn.last_command = spec.name;
        let context = crate::access::context_of(conn);
        if let Err(err) = wetask_shards::table::info::check_subcommand(spec, args)
            .and_then(|()| crate::access::check(ctx, conn, spec, request, context))
        {
            ctx.stats.record_rejected(spec);
            return Err(err);
        }
    }
    if let Err(err) = refusal(ctx, conn, spec, args) {
        ctx.stats.record_rejected(spec);
        return Err(err);
    }
    if ctx.globals.cluster.is_some() {
        // ASKING lasts until EXEC in a transaction (EXEC checks the queued commands
        // again), and one command otherwise, as in Redis.
        let asking = match conn.multi.is_some() || spec.name == "multi" {
            true => conn.asking,
            false => std::mem::take(&mut conn.asking),
        } || spec.has(flag::ASKING);
        if let Some(redirect) = super::consensus_route::consensus(ctx, conn, request) {
            return Err(redirect);
        }
        if let Some(redirect) = super::redirect::redirect(ctx, conn, request, asking) {
            return Err(redirect);
        }
        if spec.name == "exec" {
            super::redirect::check_transaction(ctx, conn)?;
        }
    }
    Ok(spec)
}

/// What admission answers, for a known command of the right arity, instead of running it:
/// a bad subcommand, the store's MISCONF or OOM, or RESP2 subscribed mode's refusal.
/// Side-effect free: `precheck` records the refusal, and `simple_target` keeps such a
/// command out of pipeline segments (which skip admission) so that it runs alone.
fn refusal(
    ctx: &ShardCtx,
    conn: &ConnState,
    spec: &'static CommandSpec,
    args: &[bytes::Bytes],
) -> Result<(), Frame> {
    wetask_shards::table::info::check_subcommand(spec, args)?;
    if ctx.globals.answers_loading() && !conn.replication_applier && !loads(ctx, spec, args) {
        return Err(Frame::static_error(LOADING));
    }
    if !conn.replication_applier {
        replication_refusal(ctx, conn, spec, args)?;
    }
    ctx.make_room(spec)?;
    if crate::commands::pubsub::resp2_subscribed(conn)
        && !crate::commands::pubsub::allowed_while_subscribed(spec)
    {
        // A subcommand is named as Redis names it: `client|reply`.
        let name = subcommand_of(spec, args).map_or(spec.name, |sub| sub.name);
        return Err(Frame::error(format!(
            "ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
        )));
    }
    Ok(())
}

/// READONLY, NOREPLICAS or MASTERDOWN (`replication::gate`) for a client's command: a
/// write by its own flags (a container's by its subcommand's, EXEC by what it queued).
#[inline]
fn replication_refusal(
    ctx: &ShardCtx,
    conn: &ConnState,
    spec: &'static CommandSpec,
    args: &[bytes::Bytes],
) -> Result<(), Frame> {
    let replication = &ctx.globals.replication;
    let flags = flags_of(spec, args);
    let writes = flags & flag::WRITE != 0
        || (spec.name == "exec"
            && conn.multi.as_ref().is_some_and(|queued| {
                queued
                    .iter()
                    .any(|r| r.spec().is_some_and(|s| s.has(flag::WRITE)))
            }));
    if writes {
        if let Some(refusal) = replication.write_refusal() {
            return Err(Frame::static_error(refusal));
        }
    }
    if flags & flag::STALE == 0 {
        if let Some(refusal) = replication.stale_refusal() {
            return Err(Frame::static_error(refusal));
        }
    }
    Ok(())
}

/// The subcommand a container command's request names (`client|reply`), if known.
fn subcommand_of(
    spec: &'static CommandSpec,
    args: &[bytes::Bytes],
) -> Option<&'static wetask_shards::table::info::Subcommand> {
    let sub = args.get(1).filter(|_| spec.has(flag::CONTAINER))?;
    wetask_shards::table::info::subcommand(spec.name, sub)
}

/// A request's flags: its subcommand's, for a container (FUNCTION LOAD writes, FUNCTION
/// LIST does not).
fn flags_of(spec: &'static CommandSpec, args: &[bytes::Bytes]) -> u32 {
    subcommand_of(spec, args).map_or(spec.flags, |sub| sub.flags)
}

/// Redis's answer to a command without its `loading` flag while a replica loads its
/// primary's data (`Replication::loading`).
const LOADING: &str = "LOADING Redis is loading the dataset in memory";

/// Whether the command runs while a replica loads its primary's data: Redis's `loading`
/// flag (of the subcommand, for a container), and REPLICAOF to another primary (WeTask's
/// load spans the transfer, so a primary that dies mid-way must not leave the node stuck;
/// on a replica REPLICAOF NO ONE waits, as in Redis, rather than promote a partial
/// dataset; on a node that started from part of one it is how the part is kept).
fn loads(ctx: &ShardCtx, spec: &'static CommandSpec, args: &[bytes::Bytes]) -> bool {
    flags_of(spec, args) & flag::LOADING != 0
        || (matches!(spec.name, "replicaof" | "slaveof")
            && (!ctx.globals.replication.is_replica()
                || !args
                    .get(1)
                    .is_some_and(|host| host.eq_ignore_ascii_case(b"no"))))
}

/// True when running `request` (on database `db`) needs another shard, or may wait (and so
/// a task, not an inline call). This runs for every command.
pub fn needs_remote(ctx: &ShardCtx, db: usize, request: &Request) -> bool {
    let args = &request.args[..];
    let Some(spec) = request.spec().filter(|s| s.arity_ok(args.len())) else {
        return false;
    };
    // CLIENT PAUSE may hold it: it waits in a task.
    if ctx.globals.pause.active() {
        return true;
    }
    if is_memory_stats(spec, args) {
        return ctx.shard_count > 1;
    }
    if let Form::Blocking(blocking) = request.form() {
        if blocking::may_wait(ctx, db, blocking) {
            return true;
        }
    }
    match spec.route {
        Route::Server => commands::needs_task(ctx, spec, request),
        _ if ctx.shard_count == 1 => false,
        Route::AllShards(_) => true,
        Route::Keyed | Route::Split(_) => {
            let elsewhere = match request.owners() {
                Owners::One(owner) => owner != ctx.id,
                Owners::Several => true,
                Owners::None => false,
            };
            elsewhere || crate::routing::cross::sort_reaches_elsewhere(ctx, request)
        }
    }
}

/// MEMORY STATS: a keyed command's family, but the server's answer (gathered from every
/// shard).
fn is_memory_stats(spec: &CommandSpec, args: &[bytes::Bytes]) -> bool {
    spec.name == "memory" && args.len() == 2 && wetask_shards::args::is(&args[1], "stats")
}

/// Prefetches the keyspace entries of a window of pipelined commands (the first key of each
/// keyed command that lives on this shard) before they run; see `Db::prefetch`.
pub fn prefetch_keys(ctx: &ShardCtx, db: usize, window: &[Request]) {
    const KEYS_MAX: usize = WINDOW_COMMANDS_MAX;
    let mut keys: [&[u8]; KEYS_MAX] = [&[]; KEYS_MAX];
    let mut count = 0;
    for request in window.iter().take(KEYS_MAX) {
        let Some(spec) = request.spec() else {
            continue;
        };
        let first = spec.first_key;
        if !matches!(spec.route, Route::Keyed | Route::Split(_)) || first < 1 {
            continue;
        }
        let Some(key) = request.args.get(first as usize) else {
            continue;
        };
        if ctx.shard_count > 1 && request.owner_of_key(first as usize, ctx.shard_count) != ctx.id {
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
/// caller must run [`execute`] in a task. The request was looked up and parsed once, when
/// it was decoded (a table lookup costs about as much as a GET's keyspace probe).
pub fn try_inline(
    ctx: &Rc<ShardCtx>,
    conn: &Rc<RefCell<ConnState>>,
    request: &Request,
    out: &mut Output,
    may_park: bool,
) -> Inline {
    let (spec, args) = (request.spec(), &request.args[..]);
    // While a cross-shard operation holds this shard, everything waits in a task.
    if ctx.is_locked() {
        return Inline::NeedsTask;
    }
    let (in_multi, db) = {
        let state = conn.borrow();
        (state.multi.is_some(), state.db)
    };
    // Inside MULTI a command is only queued (EXEC itself runs in a task).
    let queueing = in_multi && spec.is_some_and(|s| !transaction::controls_transaction(s));
    // A worker's step (a blocking TASK.FETCH over this shard's queues) leases now or parks
    // here with no task.
    if let (Form::Fetch(fetch), true) = (request.form(), may_park && !in_multi) {
        let fetch = fetch.view(args);
        if commands::tasks::parks_here(ctx, request, &fetch) {
            return fetch_or_park(ctx, conn, request, fetch);
        }
    }
    if !queueing && needs_remote(ctx, db, request) {
        return Inline::NeedsTask;
    }
    if !queueing
        && spec.is_some_and(|s| {
            s.has(flag::TASK) && crate::access::looks_up_queue(ctx, &conn.borrow(), s)
        })
    {
        // A restricted user's task command by id looks its task's queue up first.
        return Inline::NeedsTask;
    }
    // A reply that may be dropped (CLIENT REPLY) must come back as a frame, not written.
    let direct = (conn.borrow().reply == crate::clients::ReplyMode::On).then_some(out);
    let (spec, at) = match admit(ctx, conn, request) {
        Ok(admitted) => admitted,
        Err(frame) => return Inline::Ran(frame),
    };
    // A plain keyed command (every key here: `needs_remote`) runs without a future at all;
    // anything else is polled once (it cannot wait, `needs_remote` said so).
    let frame = if spec.route == Route::Keyed
        && !spec.has(flag::BLOCKING)
        && !is_memory_stats(spec, args)
    {
        crate::routing::keyed_here(ctx, at, spec, request, direct)
    } else {
        let frame = poll_once(run_admitted(ctx, conn, spec, request, at, direct));
        debug_assert!(frame.is_some(), "a local command waited");
        let Some(frame) = frame else {
            return Inline::NeedsTask;
        };
        frame
    };
    Inline::Ran(finish(ctx, spec, frame))
}

/// What [`try_inline`] did with a command.
pub enum Inline {
    /// It ran: this is its reply (or `Frame::Written`).
    Ran(Frame),
    /// It waits, parked on this shard with no task (a blocked TASK.FETCH: `Reply::Direct`);
    /// the transport writes its reply when it comes, and runs nothing of the connection's
    /// before then.
    Parked,
    /// It needs other shards, or may wait: run it (and what follows it) in a task.
    NeedsTask,
}

/// A blocking TASK.FETCH that needs no other shard (`commands::tasks::parks_here`), run
/// with no task: the worker loop's step on one shard.
fn fetch_or_park(
    ctx: &Rc<ShardCtx>,
    conn: &Rc<RefCell<ConnState>>,
    request: &Request,
    fetch: wetask_shards::families::tasks::commands::FetchArgs<'_>,
) -> Inline {
    let (spec, at) = match admit(ctx, conn, request) {
        Ok(admitted) => admitted,
        Err(frame) => return Inline::Ran(frame),
    };
    match commands::tasks::fetch_or_park(ctx, conn, at, fetch) {
        Some(frame) => Inline::Ran(finish(ctx, spec, frame)),
        None => {
            // Counted now, as a call; its reply comes later.
            finish(ctx, spec, Frame::Null);
            Inline::Parked
        }
    }
}

/// Runs one command, wherever its keys live. With `direct`, a command that runs wholly on
/// this shard may encode its reply straight into that buffer and return `Frame::Written`.
async fn execute(
    ctx: &Rc<ShardCtx>,
    conn: &Rc<RefCell<ConnState>>,
    request: &Request,
    direct: Option<&mut Output>,
) -> Frame {
    let spec = request.spec();
    // Local work below runs before the first await, so it never interleaves with a
    // cross-shard operation that locks this shard. Commands flagged PASSES_LOCKS (SCRIPT
    // KILL, SHUTDOWN, ...) touch no keyspace and must get through a busy script's locks.
    if ctx.globals.pause.active() {
        wait_unpaused(ctx, conn, request).await;
    }
    if ctx.is_locked()
        && !spec.is_some_and(|s| s.has(flag::PASSES_LOCKS) || s.has(flag::ALLOW_BUSY))
        && ctx.wait_unlocked_or_busy().await
    {
        return refused_busy(ctx, conn, spec);
    }
    let (spec, at) = match admit(ctx, conn, request) {
        Ok(admitted) => admitted,
        Err(frame) => return frame,
    };
    if spec.has(flag::TASK) && crate::access::looks_up_queue(ctx, &conn.borrow(), spec) {
        if let Some(refused) = crate::access::check_task_queue(ctx, conn, spec, request, at).await {
            ctx.stats.record_rejected(spec);
            return refused;
        }
    }
    let frame = run_admitted(ctx, conn, spec, request, at, direct).await;
    finish(ctx, spec, frame)
}

/// A command refused because a script is busy, as Redis 7 refuses it: inside MULTI the
/// transaction is then doomed (EXEC answers EXECABORT), and EXEC itself (which has no
/// allow-busy flag, unlike MULTI and DISCARD) discards the transaction, saying why.
fn refused_busy(
    ctx: &ShardCtx,
    conn: &Rc<RefCell<ConnState>>,
    spec: Option<&'static CommandSpec>,
) -> Frame {
    let mut state = conn.borrow_mut();
    if spec.is_some_and(|s| s.name == "exec") {
        state.multi = None;
        state.multi_failed = false;
        crate::shard::watch::release(ctx, std::mem::take(&mut state.watched));
        return Frame::error(format!(
            "EXECABORT Transaction discarded because of: {}",
            crate::lua::busy::BUSY
        ));
    }
    if state.multi.is_some() {
        state.multi_failed = true;
    }
    Frame::static_error(crate::lua::busy::BUSY)
}

/// A command's checks and bookkeeping before it runs (`precheck`, MULTI's queueing,
/// CLIENT CACHING, MONITOR): `Err` is the reply when it does not run.
fn admit(
    ctx: &Rc<ShardCtx>,
    conn: &Rc<RefCell<ConnState>>,
    request: &Request,
) -> Result<(&'static CommandSpec, Target), Frame> {
    let mut state = conn.borrow_mut();
    let args = &request.args[..];
    match precheck(ctx, &mut state, request) {
        Ok(spec) => {
            state.last_command = spec.name;
            if state.multi.is_some() && !transaction::controls_transaction(spec) {
                return Err(transaction::queue(&mut state, spec, request));
            }
            if state.tracking.as_ref().is_some_and(|t| t.caching) {
                commands::tracking::arm_exception(ctx, &mut state, spec, request);
            }
            if crate::shard::monitor::active(ctx) {
                crate::shard::monitor::feed_command(ctx, &ctx.monitors, &state, spec, args);
            }
            let at = Target {
                db: state.db,
                client: state.task_owner(),
            };
            Ok((spec, at))
        }
        Err(err) => {
            // A command refused inside MULTI makes its EXEC abort, as in Redis.
            if state.multi.is_some() {
                state.multi_failed = true;
            }
            Err(err)
        }
    }
}

/// Runs an admitted command by its route.
async fn run_admitted(
    ctx: &Rc<ShardCtx>,
    conn: &Rc<RefCell<ConnState>>,
    spec: &'static CommandSpec,
    request: &Request,
    at: Target,
    direct: Option<&mut Output>,
) -> Frame {
    let args = &request.args[..];
    match (spec.route, request.form()) {
        (_, Form::Malformed(error)) => error.clone(),
        (Route::Server, _) => commands::run(ctx, conn, spec, request).await,
        (Route::Keyed, Form::Blocking(parsed)) => {
            // The attempt runs as the non-blocking command would; only nothing found blocks.
            blocking::attempt_then_block(ctx, conn, at, spec, request, parsed, direct).await
        }
        (Route::Keyed, _) if is_memory_stats(spec, args) => commands::info::memory_stats(ctx).await,
        (Route::Keyed, _) => keyed(ctx, at, spec, request, direct).await,
        (Route::Split(merge), _) => split(ctx, at, spec, args, merge).await,
        // On a shard's own port (cluster mode) the node is this shard: DBSIZE, KEYS,
        // FLUSHALL … cover its keys only, as a Redis Cluster node's cover its slots.
        (Route::AllShards(_), _) if conn.borrow().shard_port => {
            crate::routing::local(ctx, at, spec, args)
        }
        (Route::AllShards(merge), _) => all_shards(ctx, at, spec, args, merge).await,
    }
}

/// After a command ran: its count, and the invalidations and notifications its writes owe,
/// which leave with its reply.
fn finish(ctx: &ShardCtx, spec: &'static CommandSpec, frame: Frame) -> Frame {
    if spec.route != Route::Server || !frame.is_error() {
        ctx.stats.record(spec, frame.is_error());
    }
    ctx.tracking.drain(&ctx.core);
    ctx.publish_keyspace_events();
    frame
}

/// Waits while CLIENT PAUSE holds the command (as Redis, after the checks that would
/// refuse it: an unknown command, a wrong arity or a missing AUTH are answered at once).
async fn wait_unpaused(ctx: &ShardCtx, conn: &Rc<RefCell<ConnState>>, request: &Request) {
    let args = &request.args[..];
    let Some(spec) = request.spec().filter(|s| s.arity_ok(args.len())) else {
        return;
    };
    std::future::poll_fn(|cx| {
        let state = conn.borrow();
        let refused = !state.authenticated && !spec.has(flag::NO_AUTH);
        let now = crate::globals::unix_ms();
        if refused
            || !ctx
                .globals
                .pause
                .holds(spec, args, state.multi.as_ref().map(|q| q as _), now)
        {
            return std::task::Poll::Ready(());
        }
        ctx.paused.borrow_mut().push((state.id, cx.waker().clone()));
        std::task::Poll::Pending
    })
    .await
}

/// A command took `ticks` (the caller times it: chained in a pipeline, one counter read per
/// command): INFO commandstats' usec, and SLOWLOG when over the threshold.
#[inline]
pub fn note_time(ctx: &ShardCtx, conn: &RefCell<ConnState>, request: &Request, ticks: u64) {
    let Some(spec) = request.spec() else {
        return;
    };
    ctx.stats.add_time(spec, ticks);
    if ctx.globals.slowlog.is_slow(ticks) {
        note_slow(ctx, conn, spec, &request.args, ticks);
    }
}

#[cold]
fn note_slow(
    ctx: &ShardCtx,
    conn: &RefCell<ConnState>,
    spec: &CommandSpec,
    args: &[bytes::Bytes],
    ticks: u64,
) {
    if crate::slowlog::never_logged(spec, args) {
        return;
    }
    let state = conn.borrow();
    let micros = ctx
        .globals
        .slowlog
        .record_ticks(ticks, args, &state.addr, state.name.as_ref());
    ctx.globals.latency.sample(spec.has(flag::FAST), micros);
}

/// The single shard a command runs on wholly, if there is one (used to batch a pipeline's
/// remote commands into one message per shard).
fn simple_target(
    ctx: &ShardCtx,
    conn: &ConnState,
    request: &Request,
) -> Option<(usize, &'static CommandSpec)> {
    if conn.multi.is_some()
        || conn.tracking.as_ref().is_some_and(|t| t.caching)
        || crate::shard::monitor::active(ctx)
    {
        // Inside MULTI every command is queued by `execute`, one by one; the command after
        // CLIENT CACHING arms its keys' shards first, and MONITOR sees each command
        // (`execute`).
        return None;
    }
    let spec = request.spec()?;
    // A split command (DEL, MGET, MSET ...) whose keys all live on one shard is a plain
    // keyed command there: its handler sees every key and replies for the whole command.
    let keyed = matches!(spec.route, Route::Keyed | Route::Split(_));
    if !keyed || spec.has(flag::BLOCKING) || !spec.arity_ok(request.args.len()) {
        return None;
    }
    if !conn.authenticated && !spec.has(flag::NO_AUTH)
        || protected_mode_denies(ctx, conn)
        || !crate::access::unrestricted(ctx, conn)
    {
        // Admission answers these (and checks the user's ACL rules).
        return None;
    }
    if ctx.globals.pause.active() || refusal(ctx, conn, spec, &request.args).is_err() {
        // Runs alone, through admission, which answers the refusal (or waits): a segment
        // skips admission, and once acknowledged a pipelined SET to another shard while
        // the journal refused writes (MISCONF) or memory was full under `noeviction`.
        return None;
    }
    match request.owners() {
        // On a shard port a key of another shard is answered MOVED, by admission; ASKING
        // lasts one command, which admission counts.
        Owners::One(shard) if conn.shard_port && shard != ctx.id || conn.asking => None,
        // Consensus mode: a command runs through admission unless this shard leads its
        // group and holds its keys (`consensus_route`).
        Owners::One(shard)
            if ctx
                .globals
                .consensus
                .as_ref()
                .is_some_and(|c| shard != ctx.id || !c.serving(ctx.id)) =>
        {
            None
        }
        Owners::One(shard) => Some((shard, spec)),
        Owners::None | Owners::Several => None,
    }
}

/// Whether a command may wait before it answers: a blocking pop, move or XREAD, a
/// blocking TASK.FETCH or TASK.EVENTS, TASK.WAIT, WAIT and WAITAOF, or anything while CLIENT
/// PAUSE holds commands. (Erring towards yes costs one early send.)
fn may_wait(ctx: &ShardCtx, request: &Request) -> bool {
    if ctx.globals.pause.active() {
        return true;
    }
    match request.form() {
        Form::Blocking(_) | Form::Wait(_) => true,
        Form::Fetch(fetch) => fetch.block_ms.is_some(),
        Form::Events(events) => events.block_ms.is_some(),
        _ => request.spec().is_some_and(|spec| {
            spec.has(flag::BLOCKING) || matches!(spec.name, "wait" | "waitaof")
        }),
    }
}

/// Hands the batch's replies so far to the connection's transport now (as pushes are: they
/// leave before the batch's later replies, see `net::uring::collect`).
fn send_early(ctx: &ShardCtx, conn: &RefCell<ConnState>, out: &mut Output) {
    let early = std::mem::take(out);
    let mut state = conn.borrow_mut();
    let client = state.id;
    state.pushes.append(early);
    ctx.core.wake_for_pushes(&mut state, client);
}

/// Whether a batch's commands all run without waiting for long: each a simple keyed command
/// (never a blocking one, and none while CLIENT PAUSE is in force: `simple_target`), see
/// `super::Batch::prompt`.
pub fn runs_promptly(ctx: &ShardCtx, conn: &ConnState, requests: &[Request]) -> bool {
    requests
        .iter()
        .all(|request| simple_target(ctx, conn, request).is_some())
}

/// Runs one command of a batch on its own; `simple`: a simple keyed command (see
/// `simple_target`). `out` holds the batch's replies so far.
async fn run_alone(
    ctx: &Rc<ShardCtx>,
    conn: &Rc<RefCell<ConnState>>,
    request: &Request,
    simple: bool,
    out: &mut Output,
) -> Frame {
    if simple && !ctx.globals.pause.active() {
        // One simple keyed command for one other shard (an unpipelined client's hop): one
        // message, and a small future.
        return match admit(ctx, conn, request) {
            Ok((spec, at)) => crate::routing::run_one(ctx, at, spec, request).await,
            Err(frame) => frame,
        };
    }
    if !out.is_empty() && may_wait(ctx, request) {
        // A command that may wait sends the replies before it first, as Redis does (a
        // pipelined GET's reply does not wait for the BLPOP after it).
        send_early(ctx, conn, out);
    }
    // Everything else takes the whole path. It is boxed: its future is some 6 KB, and inline
    // it made every spawned batch (one per window that needs another shard) that large, a
    // malloc and a 6 KB copy per hop (docs/perf-notes.md).
    Box::pin(execute(ctx, conn, request, None)).await
}

/// Runs a pipeline's commands in order, encoding replies into `out`. Runs of simple keyed
/// commands are grouped into one message per destination shard; anything else runs alone.
/// `prompt`: every command is a simple keyed one (`runs_promptly`), so the whole batch is one
/// segment. Returns when done or when the connection asked to close.
pub async fn run_batch(
    ctx: &Rc<ShardCtx>,
    conn: &Rc<RefCell<ConnState>>,
    commands: &mut [Request],
    prompt: bool,
    out: &mut Output,
) {
    let mut i = 0;
    while i < commands.len() {
        let at = {
            let state = conn.borrow();
            if state.close_requested {
                return;
            }
            Target {
                db: state.db,
                client: state.task_owner(),
            }
        };
        // A prompt batch is one segment whole (`runs_promptly` checked every command).
        let segment = if prompt && i == 0 {
            commands.len()
        } else {
            let state = conn.borrow();
            let rest = commands[i..].iter();
            rest.take_while(|command| simple_target(ctx, &state, command).is_some())
                .count()
        };
        if segment < 2 {
            let started = crate::slowlog::ticks();
            let frame = run_alone(ctx, conn, &commands[i], segment == 1, out).await;
            let took = crate::slowlog::ticks().wrapping_sub(started);
            note_time(ctx, conn, &commands[i], took);
            conn.borrow_mut().encode_reply(out, &frame);
            if reached_output_limit(ctx, conn, out) {
                return;
            }
            i += 1;
            continue;
        }
        let started = crate::slowlog::ticks();
        let segment_commands = &mut commands[i..i + segment];
        run_segment(ctx, at, segment_commands, |frame| {
            conn.borrow_mut().encode_reply(out, frame)
        })
        .await;
        // One message ran them all: each is counted an equal share (not SLOWLOG-checked).
        let share = crate::slowlog::ticks().wrapping_sub(started) / segment as u64;
        for spec in segment_commands.iter().filter_map(Request::spec) {
            ctx.stats.add_time(spec, share);
        }
        if reached_output_limit(ctx, conn, out) {
            return;
        }
        if let Some(spec) = segment_commands.last().and_then(Request::spec) {
            conn.borrow_mut().last_command = spec.name;
        }
        i += segment;
    }
}
