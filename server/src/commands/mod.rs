//! Connection and server commands (the table's `Route::Server` rows). They touch the
//! connection's state or gather from every shard, so they live in the server, not in a
//! shard family. This file holds only the dispatch: which of them needs a task
//! (`needs_task`) and which family runs each (`run`). The families, a file each:
//! `connection` (AUTH, HELLO, RESET), `client` (CLIENT), `config` (CONFIG, with
//! `config_inert`, `config_rewrite`, `config_table`), `command` (COMMAND), `info` (INFO,
//! MEMORY STATS, LATENCY HISTOGRAM), `shutdown`, `replication` (WAIT), `scan` (SCAN,
//! RANDOMKEY), `persistence` (SAVE, BGSAVE, WAITAOF …), `pubsub`, `tracking` (CLIENT
//! TRACKING and kin), `transaction` (MULTI/EXEC/WATCH), `scripting` and `functions` (EVAL,
//! FCALL, SCRIPT, FUNCTION), `blocking` (blocking pops, client side), `tasks` and `workers`
//! (TASK.FETCH/WAIT/EVENTS, TASK.WORKER …), `cron` and `batch`, and `embedded` (what EXEC
//! and scripts run too: SELECT, PING, ECHO, TIME, PUBLISH).

mod acl;
mod batch;
pub mod blocking;
mod client;
pub mod cluster;
pub mod cluster_admin;
pub mod cluster_raft;
pub mod command;
pub mod config;
pub(crate) mod config_inert;
mod config_rewrite;
mod config_table;
mod connection;
mod cron;
pub mod embedded;
pub mod functions;
pub mod info;
mod migrate;
pub mod persistence;
pub mod pubsub;
pub mod raft;
pub mod replication;
mod scan;
pub mod scripting;
mod shutdown;
pub mod tasks;
pub mod tracking;
pub mod transaction;
pub mod transaction_admin;
pub mod workers;

use std::cell::RefCell;
use std::rc::Rc;

use wetask_protocol::Frame;
use wetask_shards::args::is;
use wetask_shards::request::{Form, Request as Command};
use wetask_shards::table::{flag, CommandSpec};

use crate::clients::ConnState;
use crate::shard::ShardCtx;

/// True when a server command must run in a task rather than inline: it may wait (a
/// blocking TASK.FETCH, TASK.WAIT), or must hear from other shards.
pub fn needs_task(ctx: &ShardCtx, spec: &CommandSpec, request: &Command) -> bool {
    let several = ctx.shard_count > 1;
    let args = &request.args[..];
    match spec.name {
        "task.fetch" => crate::commands::tasks::needs_remote(ctx, request),
        "task.wait" | "save" | "task.worker" | "task.quiet" | "task.events" | "wait"
        | "waitaof" | "migrate" => true,
        "task.workers" | "task.cron" | "task.batch" | "task.flow" => several,
        // SHUTDOWN SAVE waits for the snapshots.
        "shutdown" => args[1..].iter().any(|a| is(a, "save")),
        "info" | "scan" | "randomkey" | "exec" | "watch" | "pubsub" => several,
        // With several shards, in a task whatever the subscriptions now: another shard's
        // may appear between this look and the run, and a PUBLISH run inline that then
        // had to wait was run again in a task, delivering twice (and a debug build's
        // assertion caught it under Redis Sentinel, whose SUBSCRIBE raced its PUBLISH).
        "publish" | "spublish" => several,
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro" => true,
        "client" => {
            several
                && ["list", "kill", "tracking", "unblock", "no-touch"]
                    .iter()
                    .any(|sub| is(&args[1], sub))
        }
        "config" => several && (is(&args[1], "resetstat") || is(&args[1], "set")),
        // Closing a removed user's connections, or those subscribed to channels taken
        // away, asks every shard.
        "acl" => {
            several
                && ["deluser", "load", "setuser"]
                    .iter()
                    .any(|sub| is(&args[1], sub))
        }
        // SETSLOT NODE, RESET and the key counts read a shard's keys.
        "cluster" => true,
        "latency" => several && is(&args[1], "histogram"),
        _ => false,
    }
}

pub use batch::reconcile as reconcile_batches;

/// Runs a server command. Its request's form parsed (`dispatch::run_admitted` answers a
/// malformed one before it gets here).
// Long: one arm per server command: the dispatch table reads best whole.
pub async fn run(
    ctx: &Rc<ShardCtx>,
    conn: &Rc<RefCell<ConnState>>,
    spec: &'static CommandSpec,
    request: &Command,
) -> Frame {
    let args = &request.args[..];
    match (spec.name, request.form()) {
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
        "migrate" => migrate::migrate(ctx, task_target(conn), args).await,
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
        // Blocks a client until enough replicas have its writes; EXEC and scripts run the
        // embedded form, which never blocks.
        "wait" => replication::wait_replicas(ctx, conn, args).await,
        _ if spec.has(flag::EMBEDDED) => embedded::run_embedded_for(ctx, conn, spec, args).await,
        "hello" => connection::hello(ctx, &mut conn.borrow_mut(), args),
        "auth" => connection::auth(ctx, &mut conn.borrow_mut(), args),
        "quit" => {
            conn.borrow_mut().close_requested = true;
            Frame::ok()
        }
        "reset" => connection::reset(ctx, &mut conn.borrow_mut()),
        "client" => client::client(ctx, conn, args).await,
        "acl" => acl::acl(ctx, conn, args).await,
        "command" => command::command(args),
        "config" => config::config(ctx, args).await,
        "cluster" => cluster::cluster(ctx, conn, args).await,
        "asking" | "readonly" | "readwrite" => cluster::accept(ctx, conn, spec.name),
        "info" => info::info(ctx, args).await,
        "shutdown" => match shutdown::save_before_shutdown(ctx, args).await {
            Ok(()) => shutdown::shutdown(ctx, &mut conn.borrow_mut(), args),
            Err(e) => e,
        },
        "save" => persistence::save(ctx).await,
        "bgsave" => persistence::bgsave(ctx, args),
        "bgrewriteaof" => persistence::bgrewriteaof(ctx),
        "lastsave" => persistence::lastsave(ctx),
        "waitaof" => persistence::waitaof(ctx, conn, args).await,
        "monitor" => {
            ctx.monitors.add(ctx, conn.borrow().id);
            Frame::ok()
        }
        "slowlog" => ctx.globals.slowlog.command(args),
        "latency" if is(&args[1], "histogram") => info::latency_histogram(ctx, args).await,
        "latency" => ctx.globals.latency.command(args),
        "role" => replication::role(ctx),
        "replicaof" | "slaveof" => replication::replicaof(ctx, args),
        "raft" => raft::raft(ctx, args, conn.borrow().shard_port),
        "replconf" => replication::replconf(ctx, &mut conn.borrow_mut(), args),
        "scan" => {
            let (db, only_here) = (conn.borrow().db, conn.borrow().shard_port);
            scan::scan(ctx, db, args, only_here).await
        }
        "randomkey" => {
            let (db, only_here) = (conn.borrow().db, conn.borrow().shard_port);
            scan::randomkey(ctx, db, only_here).await
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
