//! Connection and server commands (the table's `Route::Server` rows): PING, ECHO, HELLO,
//! AUTH, QUIT, RESET, SELECT, CLIENT, COMMAND, CONFIG, INFO, TIME, SHUTDOWN, SCAN and
//! RANDOMKEY. They touch the connection's state or gather from every shard, so they live
//! in the server, not in a shard family. The families with state or flows of their own
//! have their own files below (pub/sub, transactions, scripts, blocking pops, task
//! fetches, INFO, and the commands EXEC and scripts run too: `embedded`).

mod batch;
pub mod blocking;
pub mod command;
mod config_inert;
mod config_rewrite;
mod config_table;
mod cron;
pub mod embedded;
pub mod functions;
pub mod info;
pub mod persistence;
pub mod pubsub;
pub mod scripting;
pub mod tasks;
pub mod tracking;
pub mod transaction;
pub mod workers;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use wetask_protocol::{Frame, Protocol};
use wetask_shards::args::{is, parse_i64};
use wetask_shards::errors::{subcommand_syntax, unknown_subcommand, wrong_arity, SYNTAX};
use wetask_shards::request::{Form, Request as Command};
use wetask_shards::table::{flag, CommandSpec};
use wetask_shards::{ScanFilter, DATABASES};

use crate::clients::{ConnState, KillFilter, ReplyMode};
use crate::globals::{unix_ms, Globals};
use crate::mesh::{AdminRequest, KeyRequest, Request, Response};
use crate::shard::ShardCtx;

const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

/// True when a server command must run in a task rather than inline: it may wait (a
/// blocking TASK.FETCH, TASK.WAIT), or must hear from other shards.
pub fn needs_task(ctx: &ShardCtx, spec: &CommandSpec, request: &Command) -> bool {
    let several = ctx.shard_count > 1;
    let args = &request.args[..];
    match spec.name {
        "task.fetch" => crate::commands::tasks::needs_remote(ctx, request),
        "task.wait" | "save" | "task.worker" | "task.quiet" | "task.events" | "wait"
        | "waitaof" => true,
        "task.workers" | "task.cron" | "task.batch" | "task.flow" => several,
        // SHUTDOWN SAVE waits for the snapshots.
        "shutdown" => args[1..].iter().any(|a| is(a, "save")),
        "info" | "scan" | "randomkey" | "exec" | "watch" | "pubsub" => several,
        "publish" | "spublish" => crate::commands::pubsub::publish_needs_peers(ctx),
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro" => true,
        "client" => {
            several
                && ["list", "kill", "tracking", "unblock", "no-touch"]
                    .iter()
                    .any(|sub| is(&args[1], sub))
        }
        "config" => several && (is(&args[1], "resetstat") || is(&args[1], "set")),
        "latency" => several && is(&args[1], "histogram"),
        _ => false,
    }
}

pub use batch::reconcile as reconcile_batches;

// Long: one arm per server command: the dispatch table reads best whole.
pub async fn run(
    ctx: &Rc<ShardCtx>,
    conn: &Rc<RefCell<ConnState>>,
    spec: &'static CommandSpec,
    request: &Command,
) -> Frame {
    let args = &request.args[..];
    match (spec.name, request.form()) {
        // Its arguments did not parse (when it was decoded): that error is its reply.
        (_, Form::Malformed(error)) => return error.clone(),
        ("task.fetch", Form::Fetch(fetch)) => {
            return crate::commands::tasks::run(ctx, conn, &fetch.view(args)).await
        }
        ("task.wait", Form::Wait(wait)) => {
            return crate::commands::tasks::wait(ctx, conn, wait).await
        }
        ("task.events", Form::Events(events)) => {
            return crate::commands::tasks::events(ctx, conn, events).await
        }
        ("task.worker", Form::Worker(worker)) => return workers::worker(ctx, conn, worker).await,
        (_, Form::Script(numkeys)) => {
            return crate::commands::scripting::eval(ctx, conn, spec, args, numkeys.clone()).await
        }
        _ => {}
    }
    match spec.name {
        "task.workers" => workers::workers(ctx).await,
        "task.quiet" => workers::quiet(ctx, args).await,
        "task.cron" => cron::cron(ctx, task_target(conn), spec, args).await,
        "task.batch" | "task.flow" => batch::batch(ctx, task_target(conn), spec, args).await,
        "subscribe" | "psubscribe" | "ssubscribe" => crate::commands::pubsub::subscribe(
            ctx,
            &mut conn.borrow_mut(),
            args,
            pubsub_kind(spec.name),
        ),
        "unsubscribe" | "punsubscribe" | "sunsubscribe" => crate::commands::pubsub::unsubscribe(
            ctx,
            &mut conn.borrow_mut(),
            args,
            pubsub_kind(spec.name),
        ),
        "pubsub" => crate::commands::pubsub::pubsub(ctx, args).await,
        "function" => functions::function(ctx, args),
        "script" => crate::commands::scripting::script(ctx, args),
        "multi" => crate::commands::transaction::multi(&mut conn.borrow_mut()),
        "exec" => crate::commands::transaction::exec(ctx, conn).await,
        "discard" => crate::commands::transaction::discard(ctx, &mut conn.borrow_mut()),
        "watch" => crate::commands::transaction::watch(ctx, conn, args).await,
        "unwatch" => crate::commands::transaction::unwatch(ctx, &mut conn.borrow_mut()),
        "ping" if crate::commands::pubsub::resp2_subscribed(&conn.borrow()) => {
            crate::commands::pubsub::subscribed_ping(args)
        }
        // Blocks a client (till its time-out: there are no replicas); EXEC and scripts run
        // the embedded form, which never blocks.
        "wait" => wait_replicas(ctx, args).await,
        _ if spec.has(flag::EMBEDDED) => embedded::run_embedded_for(ctx, conn, spec, args).await,
        "hello" => hello(ctx, &mut conn.borrow_mut(), args),
        "auth" => auth(ctx, &mut conn.borrow_mut(), args),
        "quit" => {
            conn.borrow_mut().close_requested = true;
            Frame::ok()
        }
        "reset" => reset(ctx, &mut conn.borrow_mut()),
        "client" => client(ctx, conn, args).await,
        "command" => command::command(args),
        "config" => config(ctx, args).await,
        "info" => info::info(ctx, args).await,
        "shutdown" => match save_before_shutdown(ctx, args).await {
            Ok(()) => shutdown(ctx, &mut conn.borrow_mut(), args),
            Err(e) => e,
        },
        "save" => persistence::save(ctx).await,
        "bgsave" => persistence::bgsave(ctx, args),
        "bgrewriteaof" => persistence::bgrewriteaof(ctx),
        "lastsave" => persistence::lastsave(ctx),
        "waitaof" => persistence::waitaof(ctx, args).await,
        "monitor" => {
            ctx.monitors.add(ctx, conn.borrow().id);
            Frame::ok()
        }
        "slowlog" => ctx.globals.slowlog.command(args),
        "latency" if is(&args[1], "histogram") => info::latency_histogram(ctx, args).await,
        "latency" => ctx.globals.latency.command(args),
        // No replication: always a primary with no replicas (Redis's reply for one).
        "role" => Frame::Array(vec![
            Frame::Bulk(Bytes::from_static(b"master")),
            Frame::Integer(0),
            Frame::Array(Vec::new()),
        ]),
        "scan" => {
            let db = conn.borrow().db;
            scan(ctx, db, args).await
        }
        "randomkey" => {
            let db = conn.borrow().db;
            randomkey(ctx, db).await
        }
        other => Frame::error(format!("ERR '{other}' is not handled by this server")),
    }
}

/// Where a task command a server command sends on runs: the connection's database and
/// task owner (its worker, if it took one).
fn task_target(conn: &RefCell<ConnState>) -> crate::routing::Target {
    let state = conn.borrow();
    crate::routing::Target {
        db: state.db,
        client: state.task_owner(),
    }
}

/// Which subscription namespace a (un)subscribe command names.
fn pubsub_kind(name: &str) -> crate::clients::Kind {
    match name {
        "psubscribe" | "punsubscribe" => crate::clients::Kind::Pattern,
        "ssubscribe" | "sunsubscribe" => crate::clients::Kind::Shard,
        _ => crate::clients::Kind::Channel,
    }
}

/// Whether `password` opens `user` (None: AUTH's one-argument form, the default user),
/// counting refusals (INFO's `acl_access_denied_auth`). With
/// no `requirepass` the default user takes any password when named (Redis's `nopass`), and
/// the one-argument form is refused, as Redis refuses it.
fn password_ok(ctx: &ShardCtx, user: Option<&[u8]>, password: &[u8]) -> Result<bool, Frame> {
    let required = ctx.globals.requirepass.lock().expect("requirepass").clone();
    let opened = match (required, user) {
        (None, None) => Err(Frame::static_error(
            "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
        )),
        (None, Some(user)) => Ok(user == b"default"),
        (Some(expected), user) => {
            Ok(user.unwrap_or(b"default") == b"default" && password == expected.as_bytes())
        }
    };
    if let Ok(false) = opened {
        ctx.globals.auth_failures.fetch_add(1, Ordering::Relaxed);
    }
    opened
}

fn auth(ctx: &ShardCtx, conn: &mut ConnState, args: &[Bytes]) -> Frame {
    let (user, password) = match args.len() {
        2 => (None, &args[1]),
        3 => (Some(&args[1][..]), &args[2]),
        _ => return Frame::static_error(SYNTAX),
    };
    match password_ok(ctx, user, password) {
        Ok(true) => {
            conn.authenticated = true;
            Frame::ok()
        }
        Ok(false) => Frame::static_error(WRONGPASS),
        Err(err) => err,
    }
}

fn hello(ctx: &ShardCtx, conn: &mut ConnState, args: &[Bytes]) -> Frame {
    let mut protocol = conn.protocol;
    let mut i = 1;
    if args.len() > 1 {
        protocol = match parse_i64(&args[1]) {
            Some(2) => Protocol::Resp2,
            Some(3) => Protocol::Resp3,
            Some(_) => return Frame::static_error("NOPROTO unsupported protocol version"),
            None => {
                return Frame::static_error(
                    "ERR Protocol version is not an integer or out of range",
                )
            }
        };
        i = 2;
    }
    // Every option is checked before any takes effect (Redis 7.2): a HELLO that fails
    // leaves the connection as it was.
    let mut name = None;
    let mut credentials = None;
    while i < args.len() {
        if is(&args[i], "auth") && i + 2 < args.len() {
            credentials = Some((&args[i + 1], &args[i + 2]));
            i += 3;
        } else if is(&args[i], "setname") && i + 1 < args.len() {
            if let Err(err) = valid_name(&args[i + 1]) {
                return err;
            }
            name = Some(args[i + 1].clone());
            i += 2;
        } else {
            return Frame::error(format!(
                "ERR Syntax error in HELLO option '{}'",
                String::from_utf8_lossy(&args[i])
            ));
        }
    }
    let mut authenticated = conn.authenticated;
    if let Some((user, password)) = credentials {
        match password_ok(ctx, Some(user), password) {
            Ok(true) => authenticated = true,
            Ok(false) => return Frame::static_error(WRONGPASS),
            Err(err) => return err,
        }
    }
    if !authenticated {
        return Frame::static_error(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time",
        );
    }
    conn.authenticated = true;
    conn.protocol = protocol;
    if name.is_some() {
        conn.name = name;
    }
    let text = |s: &str| Frame::Bulk(Bytes::copy_from_slice(s.as_bytes()));
    Frame::Map(vec![
        (text("server"), text("redis")),
        (text("version"), text(&ctx.globals.config.announce_version)),
        (
            text("proto"),
            Frame::Integer(if protocol == Protocol::Resp3 { 3 } else { 2 }),
        ),
        (text("id"), Frame::Integer(conn.id as i64)),
        (text("mode"), text("standalone")),
        (text("role"), text("master")),
        (text("modules"), Frame::Array(Vec::new())),
    ])
}

fn reset(ctx: &ShardCtx, conn: &mut ConnState) -> Frame {
    ctx.pubsub.drop_subscriptions(ctx, conn);
    tracking::reset(ctx, conn);
    workers::leave(ctx, conn);
    conn.subscriptions = Default::default();
    conn.multi = None;
    conn.multi_failed = false;
    crate::shard::watch::release(ctx, std::mem::take(&mut conn.watched));
    conn.db = 0;
    conn.protocol = Protocol::Resp2;
    conn.name = None;
    conn.reply = crate::clients::ReplyMode::On;
    conn.no_evict = false;
    if std::mem::take(&mut conn.no_touch) {
        drop(ctx.no_touch_everywhere(conn.id, false));
    }
    conn.authenticated = ctx
        .globals
        .requirepass
        .lock()
        .expect("requirepass")
        .is_none();
    Frame::simple("RESET")
}

/// SHUTDOWN SAVE compacts first (the journal alone would do: it is complete and synced at
/// exit, but a user who asks for a save expects a fast restart).
async fn save_before_shutdown(ctx: &ShardCtx, args: &[Bytes]) -> Result<(), Frame> {
    let persisted = ctx.globals.store.get().is_some() || ctx.globals.dumps.get().is_some();
    let save = args[1..].iter().any(|a| is(a, "save"))
        && !args[1..].iter().any(|a| is(a, "nosave"))
        && persisted
        && !crate::lua::busy::any_busy(&ctx.globals.script_slots);
    if save && shutdown_args_valid(args) && persistence::save(ctx).await.is_error() {
        tracing::warn!("SHUTDOWN SAVE: the snapshot failed; not shutting down");
        return Err(Frame::static_error(
            "ERR Errors trying to SHUTDOWN. Check logs.",
        ));
    }
    Ok(())
}

/// SHUTDOWN's options are all known ones, and none is ABORT.
fn shutdown_args_valid(args: &[Bytes]) -> bool {
    args[1..].iter().all(|arg| {
        ["nosave", "save", "now", "force"]
            .iter()
            .any(|o| is(arg, o))
    })
}

fn shutdown(ctx: &ShardCtx, conn: &mut ConnState, args: &[Bytes]) -> Frame {
    for arg in &args[1..] {
        if !["nosave", "save", "now", "force", "abort"]
            .iter()
            .any(|o| is(arg, o))
        {
            return Frame::static_error(SYNTAX);
        }
        if is(arg, "abort") {
            return Frame::static_error("ERR No shutdown in progress.");
        }
    }
    if crate::lua::busy::any_busy(&ctx.globals.script_slots) {
        // As Redis: while a script is busy only SHUTDOWN NOSAVE gets through, and it ends
        // the process at once (the script cannot be stopped in the middle of its writes).
        if !args[1..].iter().any(|a| is(a, "nosave")) {
            return Frame::static_error(crate::lua::busy::BUSY);
        }
        tracing::warn!(
            client = conn.id,
            "SHUTDOWN NOSAVE while a script is busy: exiting now"
        );
        std::process::exit(0);
    }
    tracing::info!(client = conn.id, "SHUTDOWN requested by a client");
    // NOSAVE: no snapshot at exit, even with save points (`appendonly no`).
    if args[1..].iter().any(|a| is(a, "nosave")) {
        ctx.globals
            .exit_without_save
            .store(true, std::sync::atomic::Ordering::Release);
    }
    ctx.globals.begin_shutdown();
    // Like Redis, a successful SHUTDOWN answers by closing the connection.
    conn.close_requested = true;
    conn.skip_reply = true;
    Frame::Null
}

fn valid_name(name: &[u8]) -> Result<(), Frame> {
    if printable(name) {
        Ok(())
    } else {
        Err(Frame::static_error(
            "ERR Client names cannot contain spaces, newlines or special characters.",
        ))
    }
}

/// What a client name and SETINFO's values may hold: CLIENT LIST splits on spaces.
fn printable(value: &[u8]) -> bool {
    value.iter().all(|&b| (b'!'..=b'~').contains(&b))
}

/// CLIENT SETINFO LIB-NAME|LIB-VER value (an empty value clears it).
fn client_setinfo(conn: &mut ConnState, args: &[Bytes]) -> Frame {
    let attr = &args[2];
    let value = (!args[3].is_empty()).then(|| args[3].clone());
    let slot = if is(attr, "lib-name") {
        &mut conn.lib_name
    } else if is(attr, "lib-ver") {
        &mut conn.lib_ver
    } else {
        return Frame::error(format!(
            "ERR Unrecognized option '{}'",
            String::from_utf8_lossy(attr)
        ));
    };
    if !printable(&args[3]) {
        return Frame::error(format!(
            "ERR {} cannot contain spaces, newlines or special characters.",
            String::from_utf8_lossy(attr)
        ));
    }
    *slot = value;
    Frame::ok()
}

/// CLIENT NO-EVICT|NO-TOUCH ON|OFF.
async fn client_flag(ctx: &Rc<ShardCtx>, conn: &Rc<RefCell<ConnState>>, args: &[Bytes]) -> Frame {
    let on = if is(&args[2], "on") {
        true
    } else if is(&args[2], "off") {
        false
    } else {
        return Frame::static_error(SYNTAX);
    };
    if is(&args[1], "no-evict") {
        conn.borrow_mut().no_evict = on;
        return Frame::ok();
    }
    let (id, was) = {
        let mut state = conn.borrow_mut();
        (state.id, std::mem::replace(&mut state.no_touch, on))
    };
    if was != on {
        // Every shard knows before the client's next command reaches it.
        for answered in ctx.no_touch_everywhere(id, on) {
            answered.await;
        }
    }
    Frame::ok()
}

// Long: one short branch per CLIENT subcommand (ID, INFO, SETNAME, NO-EVICT …), a dispatch table.
async fn client(ctx: &Rc<ShardCtx>, conn: &Rc<RefCell<ConnState>>, args: &[Bytes]) -> Frame {
    let sub = &args[1];
    let now = unix_ms();
    if is(sub, "id") && args.len() == 2 {
        return Frame::Integer(conn.borrow().id as i64);
    }
    if is(sub, "getname") && args.len() == 2 {
        return conn.borrow().name.clone().map_or(Frame::Null, Frame::Bulk);
    }
    if is(sub, "setname") && args.len() == 3 {
        if let Err(err) = valid_name(&args[2]) {
            return err;
        }
        conn.borrow_mut().name = (!args[2].is_empty()).then(|| args[2].clone());
        return Frame::ok();
    }
    if is(sub, "setinfo") {
        return client_setinfo(&mut conn.borrow_mut(), args);
    }
    if is(sub, "info") && args.len() == 2 {
        return Frame::Verbatim(*b"txt", Bytes::from(conn.borrow().describe(now) + "\n"));
    }
    if is(sub, "no-evict") || is(sub, "no-touch") {
        return client_flag(ctx, conn, args).await;
    }
    if is(sub, "reply") {
        return client_reply(&mut conn.borrow_mut(), args);
    }
    if is(sub, "pause") {
        return client_pause(ctx, args);
    }
    if is(sub, "unblock") {
        return client_unblock(ctx, args).await;
    }
    if is(sub, "unpause") {
        if args.len() != 2 {
            return wrong_arity("client|unpause");
        }
        ctx.globals.pause.unpause();
        return Frame::ok();
    }
    if is(sub, "tracking") {
        return tracking::tracking(ctx, conn, args).await;
    }
    if is(sub, "caching") {
        return tracking::caching(&mut conn.borrow_mut(), args);
    }
    if is(sub, "getredir") {
        return tracking::getredir(&conn.borrow(), args);
    }
    if is(sub, "trackinginfo") {
        return tracking::trackinginfo(&conn.borrow(), args);
    }
    if is(sub, "list") {
        return client_list(ctx, conn, args).await;
    }
    if is(sub, "kill") {
        return client_kill(ctx, conn, args).await;
    }
    if is(sub, "help") {
        let lines = [
            "CLIENT <subcommand> [<arg> ...]. Subcommands are:",
            "ID",
            "GETNAME",
            "SETNAME <name>",
            "SETINFO <LIB-NAME|LIB-VER> <value>",
            "INFO",
            "LIST [TYPE normal] [ID <id> ...]",
            "KILL <ip:port> | KILL [ID <id>] [ADDR <ip:port>] [LADDR <ip:port>] [SKIPME yes|no]",
            "NO-EVICT <on|off>",
            "NO-TOUCH <on|off>",
            "REPLY <ON|OFF|SKIP>",
            "PAUSE <timeout> [WRITE|ALL]",
            "UNBLOCK <clientid> [TIMEOUT|ERROR]",
            "UNPAUSE",
            "TRACKING <ON|OFF> [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]] [OPTIN] [OPTOUT] [NOLOOP]",
            "CACHING <YES|NO>",
            "GETREDIR",
            "TRACKINGINFO",
        ];
        return Frame::Array(
            lines
                .iter()
                .map(|l| Frame::Simple(Bytes::from_static(l.as_bytes())))
                .collect(),
        );
    }
    unknown_subcommand("client", sub)
}

/// WAIT numreplicas timeout: a standalone server has no replica to acknowledge, so the
/// answer is 0, at once for 0 replicas and at the time-out otherwise (0: never), as Redis
/// without replicas does.
/// WAIT's arguments: (replicas, time-out in ms).
pub fn parse_wait(args: &[Bytes]) -> Result<(i64, u64), Frame> {
    let Some(replicas) = parse_i64(&args[1]) else {
        return Err(Frame::static_error(
            "ERR value is not an integer or out of range",
        ));
    };
    match parse_i64(&args[2]) {
        Some(ms) if ms < 0 => Err(Frame::static_error("ERR timeout is negative")),
        Some(ms) => Ok((replicas, ms as u64)),
        None => Err(Frame::static_error(
            "ERR timeout is not an integer or out of range",
        )),
    }
}

async fn wait_replicas(ctx: &ShardCtx, args: &[Bytes]) -> Frame {
    let (replicas, timeout) = match parse_wait(args) {
        Ok(parsed) => parsed,
        Err(err) => return err,
    };
    if replicas > 0 {
        let deadline = (timeout > 0).then(|| unix_ms().saturating_add(timeout));
        ctx.sleep_until(deadline).await;
    }
    Frame::Integer(0)
}

/// CLIENT UNBLOCK id [TIMEOUT|ERROR]: 1 when the client was blocked (in a blocking pop or
/// stream read) and now is not, on whichever shard it lives.
async fn client_unblock(ctx: &Rc<ShardCtx>, args: &[Bytes]) -> Frame {
    if args.len() < 3 {
        return wrong_arity("client|unblock");
    }
    if args.len() > 4 {
        return subcommand_syntax("client", &args[1]);
    }
    let error = match args.get(3) {
        None => false,
        Some(reason) if is(reason, "timeout") => false,
        Some(reason) if is(reason, "error") => true,
        Some(_) => {
            return Frame::static_error("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR")
        }
    };
    let Some(client) = parse_i64(&args[2]) else {
        return Frame::static_error("ERR value is not an integer or out of range");
    };
    let client = client.max(0) as u64;
    let pending =
        ctx.request_peers(|| Request::Admin(AdminRequest::ClientUnblock { client, error }));
    let mut unblocked = usize::from(ctx.unblock(client, error));
    for (_, future) in pending {
        if let Response::Count(n) = future.await {
            unblocked += n;
        }
    }
    Frame::Integer(unblocked.min(1) as i64)
}

/// CLIENT PAUSE timeout [WRITE|ALL]: Redis's checks, in its order.
fn client_pause(ctx: &ShardCtx, args: &[Bytes]) -> Frame {
    if args.len() < 3 {
        return wrong_arity("client|pause");
    }
    if args.len() > 4 {
        return subcommand_syntax("client", &args[1]);
    }
    let all = match args.get(3) {
        None => true,
        Some(mode) if is(mode, "all") => true,
        Some(mode) if is(mode, "write") => false,
        Some(_) => return Frame::static_error("ERR CLIENT PAUSE mode must be WRITE or ALL"),
    };
    let timeout = match parse_i64(&args[2]) {
        Some(ms) if ms < 0 => return Frame::static_error("ERR timeout is negative"),
        Some(ms) => ms as u64,
        None => return Frame::static_error("ERR timeout is not an integer or out of range"),
    };
    ctx.globals
        .pause
        .pause(unix_ms().saturating_add(timeout), all);
    Frame::ok()
}

/// CLIENT REPLY ON | OFF | SKIP: OFF and SKIP are not answered (SKIP drops the next
/// command's reply too; under OFF it changes nothing), ON is.
fn client_reply(state: &mut ConnState, args: &[Bytes]) -> Frame {
    if args.len() != 3 {
        return wrong_arity("client|reply");
    }
    let mode = &args[2];
    if is(mode, "on") {
        state.reply = ReplyMode::On;
    } else if is(mode, "off") {
        state.reply = ReplyMode::Off;
    } else if is(mode, "skip") {
        if state.reply != ReplyMode::Off {
            state.reply = ReplyMode::Skip(2);
        }
    } else {
        return Frame::static_error(SYNTAX);
    }
    Frame::ok()
}

async fn client_list(ctx: &Rc<ShardCtx>, conn: &Rc<RefCell<ConnState>>, args: &[Bytes]) -> Frame {
    let mut ids: Option<Vec<u64>> = None;
    let mut i = 2;
    while i < args.len() {
        if is(&args[i], "type") && i + 1 < args.len() {
            if !is(&args[i + 1], "normal") {
                return Frame::Verbatim(*b"txt", Bytes::new());
            }
            i += 2;
        } else if is(&args[i], "id") && i + 1 < args.len() {
            let mut list = Vec::new();
            for arg in &args[i + 1..] {
                match parse_i64(arg) {
                    Some(id) if id > 0 => list.push(id as u64),
                    _ => return Frame::static_error("ERR Invalid client ID"),
                }
            }
            ids = Some(list);
            i = args.len();
        } else {
            return Frame::static_error(SYNTAX);
        }
    }
    let pending = ctx.request_peers(|| Request::Admin(AdminRequest::ClientList));
    let mut text = ctx.clients.borrow().list(unix_ms(), Some(&conn.borrow()));
    for (_, future) in pending {
        if let Response::Text(more) = future.await {
            text.push_str(&more);
        }
    }
    if let Some(ids) = ids {
        text = text
            .lines()
            .filter(|line| {
                let id = line.split(' ').next().and_then(|f| f.strip_prefix("id="));
                id.and_then(|id| id.parse::<u64>().ok())
                    .is_some_and(|id| ids.contains(&id))
            })
            .map(|line| format!("{line}\n"))
            .collect();
    }
    Frame::Verbatim(*b"txt", Bytes::from(text))
}

async fn client_kill(ctx: &Rc<ShardCtx>, conn: &Rc<RefCell<ConnState>>, args: &[Bytes]) -> Frame {
    let caller = conn.borrow().id;
    let old_style = args.len() == 3;
    let filter = if old_style {
        KillFilter {
            caller,
            addr: Some(String::from_utf8_lossy(&args[2]).into_owned()),
            ..KillFilter::default()
        }
    } else {
        match kill_filter(caller, &args[2..]) {
            Ok(Some(filter)) => filter,
            // A USER or TYPE no connection here can match.
            Ok(None) => return Frame::Integer(0),
            Err(err) => return err,
        }
    };
    let pending = ctx.request_peers(|| {
        Request::Admin(AdminRequest::ClientKill {
            filter: filter.clone(),
        })
    });
    let mut killed = ctx
        .clients
        .borrow()
        .kill(&filter, Some(&mut conn.borrow_mut()));
    for (_, future) in pending {
        if let Response::Count(n) = future.await {
            killed += n;
        }
    }
    match (old_style, killed) {
        (true, 0) => Frame::static_error("ERR No such client"),
        (true, _) => Frame::ok(),
        (false, killed) => Frame::Integer(killed as i64),
    }
}

/// CLIENT KILL's `<filter> <value> …` pairs; `None` when a filter can match nobody here
/// (a USER other than default, a TYPE other than normal).
fn kill_filter(caller: u64, pairs: &[Bytes]) -> Result<Option<KillFilter>, Frame> {
    let mut filter = KillFilter {
        caller,
        skip_me: true,
        ..KillFilter::default()
    };
    // In order, as Redis: a bad pair is reported before a dangling last word.
    for pair in pairs.chunks(2) {
        let [name, value] = pair else {
            return Err(Frame::static_error(SYNTAX));
        };
        let text = String::from_utf8_lossy(value).into_owned();
        match name {
            a if is(a, "id") => match parse_i64(value) {
                Some(id) if id > 0 => filter.id = Some(id as u64),
                _ => {
                    return Err(Frame::static_error(
                        "ERR client-id should be greater than 0",
                    ))
                }
            },
            a if is(a, "addr") => filter.addr = Some(text),
            a if is(a, "laddr") => filter.laddr = Some(text),
            a if is(a, "skipme") => {
                filter.skip_me = match text.to_ascii_lowercase().as_str() {
                    "yes" => true,
                    "no" => false,
                    _ => return Err(Frame::static_error(SYNTAX)),
                }
            }
            a if is(a, "user") && text != "default" => return Ok(None),
            a if is(a, "type") && !is(value, "normal") => return Ok(None),
            a if is(a, "user") || is(a, "type") => {}
            _ => return Err(Frame::static_error(SYNTAX)),
        }
    }
    Ok(Some(filter))
}

/// CONFIG GET's parameters: name and current value.
// Long: one row per parameter, as CONFIG GET lists them; the table reads best whole.
fn config_params(ctx: &ShardCtx) -> Vec<(&'static str, String)> {
    let g = &ctx.globals;
    vec![
        ("bind", g.config.bind.clone()),
        ("port", g.port.load(Ordering::Relaxed).to_string()),
        ("databases", DATABASES.to_string()),
        (
            "maxclients",
            g.maxclients.load(Ordering::Relaxed).to_string(),
        ),
        (
            "requirepass",
            g.requirepass
                .lock()
                .expect("requirepass")
                .clone()
                .unwrap_or_default(),
        ),
        (
            "proto-max-bulk-len",
            g.config.proto_max_bulk_len.to_string(),
        ),
        (
            "busy-reply-threshold",
            g.busy_reply_threshold_ms
                .load(Ordering::Relaxed)
                .to_string(),
        ),
        (
            "slowlog-log-slower-than",
            g.slowlog.slower_than_us.load(Ordering::Relaxed).to_string(),
        ),
        (
            "latency-monitor-threshold",
            g.latency.threshold_ms.load(Ordering::Relaxed).to_string(),
        ),
        (
            "slowlog-max-len",
            g.slowlog.max_len.load(Ordering::Relaxed).to_string(),
        ),
        (
            "lua-time-limit",
            g.busy_reply_threshold_ms
                .load(Ordering::Relaxed)
                .to_string(),
        ),
        (
            "save",
            g.store.get().map_or(String::new(), |s| {
                s.save_points
                    .lock()
                    .expect("save points")
                    .iter()
                    .map(|(secs, changes)| format!("{secs} {changes}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            }),
        ),
        (
            "auto-aof-rewrite-percentage",
            g.store
                .get()
                .map_or(g.config.auto_aof_rewrite_percentage, |s| {
                    s.auto_rewrite_percentage.load(Ordering::Relaxed)
                })
                .to_string(),
        ),
        (
            "auto-aof-rewrite-min-size",
            g.store
                .get()
                .map_or(g.config.auto_aof_rewrite_min_size, |s| {
                    s.auto_rewrite_min_size.load(Ordering::Relaxed)
                })
                .to_string(),
        ),
        (
            "appendonly",
            if g.store.get().is_some() { "yes" } else { "no" }.into(),
        ),
        (
            "appendfsync",
            g.store
                .get()
                .map_or(g.config.appendfsync, |s| s.policy())
                .name()
                .into(),
        ),
        ("dir", g.config.dir.clone()),
        ("appenddirname", g.config.appenddirname.clone()),
        (
            "aof-load-truncated",
            if g.config.aof_load_truncated {
                "yes"
            } else {
                "no"
            }
            .into(),
        ),
        ("maxmemory", g.maxmemory().to_string()),
        ("maxmemory-policy", g.eviction_policy().name().into()),
        (
            "maxmemory-samples",
            g.maxmemory_samples.load(Ordering::Relaxed).to_string(),
        ),
        (
            "timeout",
            g.idle_timeout_s.load(Ordering::Relaxed).to_string(),
        ),
        (
            "tcp-keepalive",
            g.tcp_keepalive_s.load(Ordering::Relaxed).to_string(),
        ),
        ("client-output-buffer-limit", g.output_limits.describe()),
        (
            "protected-mode",
            if g.protected_mode.load(Ordering::Relaxed) {
                "yes"
            } else {
                "no"
            }
            .into(),
        ),
        (
            "notify-keyspace-events",
            wetask_shards::keyspace::notify::describe(
                g.notify_keyspace_events.load(Ordering::Relaxed),
            ),
        ),
        ("io-threads", "1".into()),
        ("shards", g.shard_count.to_string()),
    ]
}

async fn config(ctx: &Rc<ShardCtx>, args: &[Bytes]) -> Frame {
    let sub = &args[1];
    if is(sub, "get") && args.len() >= 3 {
        let patterns: Vec<Vec<u8>> = args[2..].iter().map(|p| p.to_ascii_lowercase()).collect();
        let matches = |name: &str| {
            patterns
                .iter()
                .any(|p| wetask_shards::glob::glob_match(p, name.as_bytes()))
        };
        let mut params: Vec<(&'static str, String)> = config_params(ctx);
        let live: Vec<&'static str> = params.iter().map(|(name, _)| *name).collect();
        params.retain(|(name, _)| matches(name));
        params.extend(config_inert::INERT.matching(&|n| live.contains(&n), &matches));
        let pairs = params
            .into_iter()
            .map(|(name, value)| {
                (
                    Frame::Bulk(Bytes::from_static(name.as_bytes())),
                    Frame::Bulk(Bytes::from(value)),
                )
            })
            .collect();
        return Frame::Map(pairs);
    }
    if is(sub, "set") && args.len() >= 4 && args.len().is_multiple_of(2) {
        let reply = config_set(ctx, &args[2..]);
        // Every shard keeps a copy of these: the next command anywhere sees the change.
        let shard_copies = ["notify-keyspace-events"];
        let mut names = args[2..].iter().step_by(2);
        if !reply.is_error() && names.any(|n| shard_copies.iter().any(|c| is(n, c))) {
            ctx.core.sync_settings();
            for (_, future) in ctx.request_peers(|| Request::Admin(AdminRequest::SyncSettings)) {
                future.await;
            }
        }
        return reply;
    }
    if is(sub, "resetstat") && args.len() == 2 {
        ctx.stats.reset();
        ctx.shard.borrow_mut().reset_keyspace_lookups();
        for (_, future) in ctx.request_peers(|| Request::Admin(AdminRequest::ResetStats)) {
            future.await;
        }
        return Frame::ok();
    }
    if is(sub, "rewrite") {
        return config_rewrite::rewrite(ctx);
    }
    if is(sub, "help") {
        return help_lines(&[
            "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "GET <pattern>",
            "    Return parameters matching the glob-like <pattern> and their values.",
            "SET <directive> <value>",
            "    Set the configuration <directive> to <value>.",
            "RESETSTAT",
            "    Reset statistics reported by the INFO command.",
            "REWRITE",
            "    Rewrite the configuration file.",
            "HELP",
            "    Prints this help.",
        ]);
    }
    unknown_subcommand("config", sub)
}

/// Every parameter CONFIG GET knows, with its value now (those WeTask serves, then the
/// inert ones it keeps for Redis's sake).
fn config_values(ctx: &ShardCtx) -> Vec<(&'static str, String)> {
    let mut params = config_params(ctx);
    let live: Vec<&'static str> = params.iter().map(|(name, _)| *name).collect();
    params.extend(config_inert::INERT.matching(&|n| live.contains(&n), &|_| true));
    params
}

/// A HELP reply: one simple string a line.
fn help_lines(lines: &[&'static str]) -> Frame {
    Frame::Array(
        lines
            .iter()
            .map(|l| Frame::Simple(Bytes::from_static(l.as_bytes())))
            .collect(),
    )
}

fn config_set(ctx: &ShardCtx, pairs: &[Bytes]) -> Frame {
    for pair in pairs.chunks(2) {
        let name = String::from_utf8_lossy(&pair[0]).to_ascii_lowercase();
        let value = String::from_utf8_lossy(&pair[1]).into_owned();
        let taken = set_parameter(&ctx.globals, &name, value.clone());
        if matches!(taken, Ok(true)) || config_inert::INERT.knows(&name) {
            let mut changed = ctx.globals.config_changed.lock().expect("config");
            if !changed.contains(&name) {
                changed.push(name.clone());
            }
        }
        match taken {
            Ok(true) => {}
            Ok(false) if config_params(ctx).iter().any(|(p, _)| *p == name) => {
                // Redis's word for `dir`, which it refuses too.
                let kind = if name == "dir" {
                    "protected"
                } else {
                    "immutable"
                };
                return Frame::error(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - can't set {kind} config"
                ));
            }
            Ok(false) => match config_inert::INERT.set(&name, &value) {
                Some(Ok(())) => {}
                Some(Err(why)) => {
                    return Frame::error(format!(
                        "ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"
                    ))
                }
                None => {
                    return Frame::error(format!(
                        "ERR Unknown option or number of arguments for CONFIG SET - '{name}'"
                    ))
                }
            },
            Err(why) => {
                return Frame::error(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"
                ))
            }
        }
    }
    Frame::ok()
}

/// Sets one parameter CONFIG SET may change; `Ok(false)` when `name` is not one of them,
/// `Err` with Redis's reason when the value is not acceptable.
// Long: one short arm per parameter CONFIG SET acts on, each with Redis's check; a table.
fn set_parameter(g: &Globals, name: &str, value: String) -> Result<bool, String> {
    const NOT_AN_INTEGER: &str = "argument couldn't be parsed into an integer";
    let integer = |value: &str| value.parse::<u64>().map_err(|_| NOT_AN_INTEGER.to_string());
    match name {
        "requirepass" => {
            g.password_set.store(!value.is_empty(), Ordering::Relaxed);
            *g.requirepass.lock().expect("requirepass") = (!value.is_empty()).then_some(value);
        }
        "busy-reply-threshold" | "lua-time-limit" => {
            g.busy_reply_threshold_ms.store(integer(&value)?, Ordering::Relaxed)
        }
        "slowlog-log-slower-than" | "slowlog-max-len" => g.slowlog.set(name, &value)?,
        "latency-monitor-threshold" => match value.parse::<i64>() {
            Ok(ms) if ms >= 0 => {
                g.latency.threshold_ms.store(ms as u64, Ordering::Relaxed);
                g.slowlog.latency_ms.store(ms as u64, Ordering::Relaxed);
                g.slowlog.refresh_notice();
            }
            Ok(_) => return Err("argument must be between 0 and 9223372036854775807 inclusive".into()),
            Err(_) => return Err(NOT_AN_INTEGER.into()),
        },
        "maxmemory" => match crate::config::memory_size(&value) {
            Ok(bytes) => crate::memory::set_maxmemory(bytes),
            Err(_) => return Err("argument must be a memory value".into()),
        },
        "maxmemory-policy" => match wetask_shards::keyspace::evict::POLICIES
            .iter()
            .position(|(_, n)| n.eq_ignore_ascii_case(&value))
        {
            Some(index) => g.maxmemory_policy.store(index, Ordering::Relaxed),
            None => return Err("argument(s) must be one of the following: volatile-lru, volatile-lfu, volatile-random, volatile-ttl, allkeys-lru, allkeys-lfu, allkeys-random, noeviction".into()),
        },
        "notify-keyspace-events" => match wetask_shards::keyspace::notify::parse(&value) {
            Some(flags) => g.notify_keyspace_events.store(flags, Ordering::Relaxed),
            None => return Err(wetask_shards::keyspace::notify::BAD_CLASS.into()),
        },
        "maxmemory-samples" => match value.parse::<u64>() {
            Ok(n) if (1..=64).contains(&n) => g.maxmemory_samples.store(n, Ordering::Relaxed),
            _ => return Err("argument must be between 1 and 64 inclusive".into()),
        },
        "client-output-buffer-limit" => g.output_limits.set(&value)?,
        "protected-mode" => match crate::config::yes_no(&value) {
            Ok(on) => g.protected_mode.store(on, Ordering::Relaxed),
            Err(_) => return Err("argument must be 'yes' or 'no'".into()),
        },
        "appendfsync" => match crate::persist::Fsync::parse(&value) {
            // With `appendonly no` there is no journal: accepted, and nothing to change.
            Some(policy) => {
                if let Some(store) = g.store.get() {
                    store.set_policy(policy)
                }
            }
            None => return Err("argument(s) must be one of the following: always, everysec, no".into()),
        },
        "save" => {
            let points = crate::persist::parse_save_points(&value)?;
            if let Some(dumps) = g.dumps.get() {
                *dumps.save_points.lock().expect("save points") = points.clone();
            }
            if let Some(store) = g.store.get() {
                *store.save_points.lock().expect("save points") = points;
            }
        }
        "auto-aof-rewrite-percentage" => {
            let n = integer(&value)?;
            if let Some(store) = g.store.get() {
                store.auto_rewrite_percentage.store(n, Ordering::Relaxed);
            }
        }
        "auto-aof-rewrite-min-size" => match crate::config::memory_size(&value) {
            Ok(bytes) => {
                if let Some(store) = g.store.get() {
                    store.auto_rewrite_min_size.store(bytes, Ordering::Relaxed);
                }
            }
            Err(_) => return Err("argument must be a memory value".into()),
        },
        "timeout" => g.idle_timeout_s.store(integer(&value)?, Ordering::Relaxed),
        "tcp-keepalive" => g.tcp_keepalive_s.store(integer(&value)?, Ordering::Relaxed),
        "maxclients" => match value.parse::<usize>() {
            Ok(n) if n > 0 => g.maxclients.store(n, Ordering::Relaxed),
            _ => return Err(NOT_AN_INTEGER.into()),
        },
        _ => return Ok(false),
    }
    Ok(true)
}

/// SCAN across shards: the cursor's low part (mod the shard count) names the shard, the rest
/// is that shard's own position cursor.
async fn scan(ctx: &Rc<ShardCtx>, db: usize, args: &[Bytes]) -> Frame {
    let Some(cursor) = std::str::from_utf8(&args[1])
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    else {
        return Frame::static_error("ERR invalid cursor");
    };
    let mut count = 10usize;
    let mut filter = ScanFilter::default();
    let mut i = 2;
    while i < args.len() {
        if i + 1 >= args.len() {
            return Frame::static_error(SYNTAX);
        }
        let value = &args[i + 1];
        match &args[i] {
            a if is(a, "count") => match parse_i64(value) {
                Some(n) if n >= 1 => count = n.min(1 << 20) as usize,
                Some(_) => return Frame::static_error(SYNTAX),
                None => return Frame::static_error(wetask_shards::errors::NOT_INTEGER),
            },
            a if is(a, "match") => filter.pattern = Some(value.clone()),
            a if is(a, "type") => {
                filter.type_name = Some(String::from_utf8_lossy(value).into_owned())
            }
            _ => return Frame::static_error(SYNTAX),
        }
        i += 2;
    }
    let shards = ctx.shard_count as u64;
    let mut shard = (cursor % shards) as usize;
    let mut position = cursor / shards;
    let mut keys = Vec::new();
    let mut budget = count;
    // COUNT is work, as in Redis: a shard that runs out of keys hands what is left of it to
    // the next, so a small keyspace is one call and the cursor is 0 once all are seen.
    let next_cursor = loop {
        let (next, found, visited) = scan_shard(ctx, shard, db, position, budget, &filter).await;
        keys.extend(found);
        budget = budget.saturating_sub(visited.max(1));
        if next != 0 {
            break next * shards + shard as u64;
        }
        if shard + 1 >= ctx.shard_count {
            break 0;
        }
        shard += 1;
        position = 0;
        if budget == 0 {
            break shard as u64;
        }
    };
    Frame::Array(vec![
        Frame::Bulk(Bytes::from(next_cursor.to_string())),
        Frame::Array(keys.into_iter().map(Frame::Bulk).collect()),
    ])
}

/// One shard's part of a SCAN: (next position, keys, positions looked at).
async fn scan_shard(
    ctx: &Rc<ShardCtx>,
    shard: usize,
    db: usize,
    position: u64,
    count: usize,
    filter: &ScanFilter,
) -> (u64, Vec<Bytes>, usize) {
    if shard == ctx.id {
        return ctx
            .shard
            .borrow_mut()
            .scan_counted(db, position, count, filter);
    }
    let request = Request::Keys(KeyRequest::Scan {
        db,
        cursor: position,
        count,
        filter: filter.clone(),
    });
    match ctx.request(shard, request).await {
        Response::Scan(next, keys, visited) => (next, keys, visited),
        _ => (0, Vec::new(), 0),
    }
}

async fn randomkey(ctx: &Rc<ShardCtx>, db: usize) -> Frame {
    let start = fastrand::usize(..ctx.shard_count);
    for offset in 0..ctx.shard_count {
        let shard = (start + offset) % ctx.shard_count;
        let key = if shard == ctx.id {
            ctx.shard.borrow_mut().random_key(db)
        } else {
            match ctx
                .request(shard, Request::Keys(KeyRequest::RandomKey { db }))
                .await
            {
                Response::Key(key) => key,
                _ => None,
            }
        };
        if let Some(key) = key {
            return Frame::Bulk(key);
        }
    }
    Frame::Null
}
