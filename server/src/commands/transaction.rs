//! Transactions: MULTI, EXEC, DISCARD, WATCH and UNWATCH, over keys on any shards (no
//! CROSSSLOT).
//!
//! Between MULTI and EXEC a connection's commands are checked (name, arity, whether they may
//! run in a transaction), copied and queued; a rejected one makes EXEC fail with EXECABORT,
//! as in Redis. EXEC then locks every shard the transaction touches (its keys' owners, its
//! watched keys' owners, and every shard for a command such as FLUSHALL) in ascending order,
//! so concurrent transactions cannot deadlock (DESIGN §2.4). Under the locks it compares the
//! watched keys' versions, borrows the other shards' keys onto this shard (as the cross-shard
//! coordinator does, `cross::borrow`), runs the queued commands in order, and gives the keys
//! back before it unlocks. No other client's command runs on a locked shard, so nobody sees
//! a transaction half applied.
//!
//! A transaction of administration commands (Redis Sentinel's failover: REPLICAOF, CONFIG
//! REWRITE, CLIENT KILL) runs apart, with no locks (`transaction_admin`).
//!
//! WATCH registers the key on its owner shard, which bumps the key's version on every write
//! (`Shard::watch`); EXEC aborts (nil reply) when a version moved.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::request::{Form, Request as Command};
use wetask_shards::table::{flag, CommandSpec, Route};

use crate::clients::{ConnState, Watched};
use crate::mesh::{KeyRequest, Request, Response, WatchRequest};
use crate::routing::cross::{borrow, give_back, on, Held};
use crate::shard::{watch, ShardCtx};

/// Most commands one transaction may queue.
pub const QUEUED_COMMANDS_MAX: usize = 100_000;
/// Most keys one connection may WATCH.
pub const WATCHED_KEYS_MAX: usize = 10_000;

/// A server command that may be queued: one flagged `EMBEDDED` (EXEC runs it with the
/// client's code, `commands::embedded`), or a script (run under EXEC's locks).
fn may_queue_server_command(spec: &CommandSpec) -> bool {
    spec.has(flag::EMBEDDED) || is_script(spec)
}

/// EVAL, EVALSHA and their read-only forms.
fn is_script(spec: &CommandSpec) -> bool {
    spec.name.starts_with("eval") || spec.name.starts_with("fcall")
}

/// Commands that act on the transaction itself and run at once even inside MULTI.
pub fn controls_transaction(spec: &CommandSpec) -> bool {
    spec.has(flag::TRANSACTION_CONTROL)
}

/// Queues a command inside MULTI (or rejects it, which makes EXEC abort).
pub fn queue(conn: &mut ConnState, spec: &CommandSpec, command: &Command) -> Frame {
    let admin = super::transaction_admin::is_admin(spec, &command.args);
    if spec.route == Route::Server && !may_queue_server_command(spec) && !admin {
        conn.multi_failed = true;
        return Frame::static_error("ERR Command not allowed inside a transaction");
    }
    let queued = conn.multi.as_mut().expect("inside MULTI");
    if let Err(refused) = super::transaction_admin::fits(queued, spec, &command.args) {
        conn.multi_failed = true;
        return refused;
    }
    if queued.len() >= QUEUED_COMMANDS_MAX {
        conn.multi_failed = true;
        return Frame::error(format!(
            "ERR too many commands in one transaction ({QUEUED_COMMANDS_MAX})"
        ));
    }
    // Copied: a queued command must not pin the connection's read buffer. Its parse is
    // kept: EXEC reads it.
    queued.push(command.detached());
    Frame::simple("QUEUED")
}

pub fn multi(conn: &mut ConnState) -> Frame {
    if conn.multi.is_some() {
        return Frame::static_error("ERR MULTI calls can not be nested");
    }
    conn.multi = Some(Vec::new());
    conn.multi_failed = false;
    Frame::ok()
}

pub fn discard(ctx: &ShardCtx, conn: &mut ConnState) -> Frame {
    if conn.multi.take().is_none() {
        return Frame::static_error("ERR DISCARD without MULTI");
    }
    conn.multi_failed = false;
    conn.asking = false;
    watch::release(ctx, std::mem::take(&mut conn.watched));
    Frame::ok()
}

pub fn unwatch(ctx: &ShardCtx, conn: &mut ConnState) -> Frame {
    watch::release(ctx, std::mem::take(&mut conn.watched));
    Frame::ok()
}

pub async fn watch(ctx: &Rc<ShardCtx>, conn: &Rc<RefCell<ConnState>>, args: &[Bytes]) -> Frame {
    let db = {
        let state = conn.borrow();
        if state.multi.is_some() {
            return Frame::static_error("ERR WATCH inside MULTI is not allowed");
        }
        if state.watched.len() + args.len() - 1 > WATCHED_KEYS_MAX {
            return Frame::error(format!(
                "ERR too many watched keys on one connection ({WATCHED_KEYS_MAX})"
            ));
        }
        state.db
    };
    for key in &args[1..] {
        let key = Bytes::copy_from_slice(key);
        let shard = ctx.owner_of(&key);
        let version = if shard == ctx.id {
            ctx.shard.borrow_mut().watch(db, &key)
        } else {
            match ctx
                .request(
                    shard,
                    Request::Watch(WatchRequest::Watch {
                        db,
                        key: key.clone(),
                    }),
                )
                .await
            {
                Response::Version(version) => version,
                _ => return Frame::static_error("ERR internal error: unexpected shard response"),
            }
        };
        conn.borrow_mut().watched.push(Watched {
            shard,
            db,
            key,
            version,
        });
    }
    Frame::ok()
}

/// The shards a transaction locks, and the (database, key) pairs it borrows.
struct Plan {
    shards: Vec<usize>,
    keys: Vec<(usize, Bytes)>,
    /// Keys a queued write command names (every key when a script runs): they count as
    /// changed for their owners' WATCH.
    written: Vec<(usize, Bytes)>,
    scripts: bool,
}

fn plan(ctx: &ShardCtx, start_db: usize, queued: &[Command], watched: &[Watched]) -> Plan {
    let mut shards: Vec<usize> = watched.iter().map(|w| w.shard).collect();
    let mut keys = Vec::new();
    let mut written = Vec::new();
    let mut scripts = false;
    let mut keys_of_scripts = Vec::new();
    let mut db = start_db;
    for command in queued {
        let (spec, args) = (
            command.spec().expect("checked when queued"),
            &command.args[..],
        );
        match spec.route {
            Route::Server if is_script(spec) => {
                // A script's declared keys are borrowed with the rest; the shards it may
                // use are locked.
                let keys: Vec<Bytes> = match command.form() {
                    Form::Script(Ok(numkeys)) => args[3..3 + numkeys].to_vec(),
                    _ => Vec::new(),
                };
                scripts = true;
                let sha = crate::commands::scripting::sha_of(spec, args);
                shards.extend(crate::commands::scripting::script_shards(ctx, &sha, &keys));
                keys_of_scripts.extend(keys.into_iter().map(|k| (db, k)));
            }
            Route::Server => {
                if spec.name == "select" {
                    if let Ok(n) = wetask_shards::keyspace::db_index(&args[1]) {
                        db = n;
                    }
                }
            }
            Route::AllShards(_) => shards.extend(0..ctx.shard_count),
            // Its patterns' keys are borrowed when it runs: every shard is held.
            _ if crate::routing::cross::sort_reaches_elsewhere(ctx, command) => {
                shards.extend(0..ctx.shard_count);
                let positions = command.key_positions();
                keys.extend(positions.iter().map(|&i| (db, args[i].clone())));
                written.extend(positions.iter().skip(1).map(|&i| (db, args[i].clone())));
            }
            Route::Keyed | Route::Split(_) => {
                for (i, owner) in command.key_owners(ctx.shard_count) {
                    shards.push(owner);
                    // Task state is not borrowed: task commands run on their owner.
                    if !spec.has(flag::TASK) {
                        keys.push((db, args[i].clone()));
                        if spec.has(wetask_shards::table::flag::WRITE) {
                            written.push((db, args[i].clone()));
                        }
                    }
                }
                if spec.name == "copy" {
                    if let Ok(opts) = wetask_shards::families::keys::copy_options(args) {
                        keys.push((opts.db.unwrap_or(db), args[2].clone()));
                    }
                }
            }
        }
    }
    keys.extend(keys_of_scripts);
    if shards.is_empty() {
        shards.push(ctx.id);
    }
    Plan {
        shards,
        keys,
        written,
        scripts,
    }
}

// Long: EXEC's steps in order (lock, check WATCH, borrow, run each queued command, give back, unlock); apart, the locks' span would be hard to see.
pub async fn exec(ctx: &Rc<ShardCtx>, conn: &Rc<RefCell<ConnState>>) -> Frame {
    let (queued, failed, watched, start_db, client) = {
        let mut state = conn.borrow_mut();
        let Some(queued) = state.multi.take() else {
            return Frame::static_error("ERR EXEC without MULTI");
        };
        let failed = std::mem::take(&mut state.multi_failed);
        (
            queued,
            failed,
            std::mem::take(&mut state.watched),
            state.db,
            state.task_owner(),
        )
    };
    if failed {
        watch::release(ctx, watched);
        return Frame::static_error("EXECABORT Transaction discarded because of previous errors.");
    }
    if super::transaction_admin::holds_admin(&queued) {
        let watching = !watched.is_empty();
        watch::release(ctx, watched);
        return super::transaction_admin::exec(ctx, conn, queued, watching).await;
    }
    let plan = plan(ctx, start_db, &queued, &watched);
    let held = Held::lock_shards(ctx, plan.shards).await;
    for w in &watched {
        let request = Request::Watch(WatchRequest::Version {
            db: w.db,
            key: w.key.clone(),
        });
        let now = match on(&held, w.shard, request).await {
            Response::Version(version) => version,
            _ => u64::MAX,
        };
        if now != w.version {
            held.unlock().await;
            watch::release(ctx, watched);
            return Frame::NullArray;
        }
    }
    let mut borrowed = borrow(&held, plan.keys.into_iter()).await;
    let mut frames = Vec::with_capacity(queued.len());
    for command in &queued {
        let (spec, args) = (
            command.spec().expect("checked when queued"),
            &command.args[..],
        );
        let db = conn.borrow().db;
        let allowed = crate::access::recheck_queued(ctx, &conn.borrow(), spec, command);
        let frame = if let Err(refused) = allowed {
            refused
        } else if let Form::Script(numkeys) = command.form() {
            let under = Some((&held, &mut borrowed));
            let call = crate::commands::scripting::ScriptCall {
                spec,
                args,
                numkeys: numkeys.clone(),
                acl: crate::commands::scripting::script_acl(&conn.borrow()),
            };
            crate::commands::scripting::eval_in(ctx, call, db, client, under).await
        } else if let Form::Malformed(error) = command.form() {
            error.clone()
        } else if crate::routing::cross::sort_reaches_elsewhere(ctx, command) {
            crate::routing::cross::borrow_sort_patterns(&held, &mut borrowed, db, command).await;
            ctx.shard
                .borrow_mut()
                .execute_all_here(db, client, spec, command)
        } else {
            run_one(&held, conn, db, client, spec, command).await
        };
        ctx.stats.record(spec, frame.is_error());
        frames.push(frame);
    }
    let written = if plan.scripts {
        borrowed.clone()
    } else {
        plan.written
    };
    give_back(&held, borrowed, &written).await;
    held.unlock().await;
    watch::release(ctx, watched);
    Frame::Array(frames)
}

/// Runs one queued command under the transaction's locks.
async fn run_one(
    held: &Held<'_>,
    conn: &Rc<RefCell<ConnState>>,
    db: usize,
    client: u64,
    spec: &'static CommandSpec,
    command: &Command,
) -> Frame {
    let (ctx, args) = (held.ctx, &command.args[..]);
    // The command travels with its parse (no key finder runs again on its owner).
    let exec_on = |shard: usize| {
        on(
            held,
            shard,
            Request::Keys(KeyRequest::ExecParsed {
                db,
                client,
                spec: spec.index(),
                request: Box::new(command.clone()),
            }),
        )
    };
    match spec.route {
        Route::Server if spec.has(flag::EMBEDDED) => {
            crate::commands::embedded::run_embedded_for(ctx, conn, spec, args).await
        }
        Route::Server => Frame::static_error("ERR Command not allowed inside a transaction"),
        Route::AllShards(merge) => {
            let mut replies = Vec::new();
            for shard in 0..ctx.shard_count {
                let frame = if shard == ctx.id || ctx.shard_count == 1 {
                    ctx.shard.borrow_mut().execute(db, client, spec, args)
                } else {
                    crate::routing::single_reply(exec_on(shard).await)
                };
                replies.push((frame, Vec::new()));
                if ctx.shard_count == 1 {
                    break;
                }
            }
            crate::routing::merge_replies(merge, replies)
        }
        _ if spec.has(flag::TASK) => {
            let shard = command
                .key_owners(ctx.shard_count)
                .first()
                .map_or(ctx.id, |&(_, owner)| owner);
            if shard == ctx.id {
                ctx.shard
                    .borrow_mut()
                    .execute_request(db, client, spec, command, None)
            } else {
                crate::routing::single_reply(exec_on(shard).await)
            }
        }
        // A SORT, or a blocking command's attempt (inside MULTI it never blocks), runs from
        // its parsed form; its keys are here, owned or borrowed.
        _ => ctx
            .shard
            .borrow_mut()
            .execute_request(db, client, spec, command, None),
    }
}
