//! Scripting: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT LOAD/EXISTS/FLUSH, with an
//! embedded Lua 5.1 (mlua, built from source: no system library).
//!
//! A script runs atomically on the shards of its declared keys: EVAL locks them (ascending,
//! as transactions do), borrows the declared keys of other shards onto this shard, runs the
//! script here, and gives the keys back before it unlocks. `redis.call` runs commands on this
//! shard's keyspace. A key the script did not declare may be used only when its shard is
//! locked anyway (the same shard as a declared key: a hash tag such as `{queue}` puts related
//! keys there); any other undeclared key is never touched behind the locks' back: the run
//! stops, its writes are undone (the run keeps each written key's entry from before its first
//! write, `UndoLog`), and it runs again from the start holding every shard, as it does on
//! every later run (the server learns it by SHA). The client sees one success, never a
//! partial write. Only a script that had already done what no entry can take back (a task
//! command, a PUBLISH) fails that once instead. A script that declares no key locks every
//! shard (Redis lets it use any key). `--lua-whole-server` makes every script
//! lock every shard from the first run, so
//! scripts that build key names at run time (BullMQ's, for one) work unchanged; the price is
//! that a script then stalls every shard while it runs (docs/ARCHITECTURE.md).
//!
//! Conversions follow Redis's RESP2 rules; errors carry Redis 7's `script: <sha>, on
//! @user_script:<line>.` suffix. A script that runs past `busy-reply-threshold` makes the
//! shards it holds answer BUSY until it ends or SCRIPT KILL stops it (`script_busy`). The
//! sandbox it runs in is `lua::sandbox`'s.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use mlua::{Function, Lua, LuaOptions, MultiValue, StdLib, Value};
use wetask_protocol::{format_double, Frame};
use wetask_shards::args::is;
use wetask_shards::lookup;
use wetask_shards::table::{flag, CommandSpec, Merge, Route};

use crate::clients::ConnState;
use crate::lua::sha1_hex;
use crate::mesh::{KeyRequest, Request};
use crate::routing::cross::{borrow, give_back, Held};
use crate::routing::Target;
use crate::shard::{ScriptRun, ShardCtx, UndoLog};

/// Most scripts kept for EVALSHA.
pub const SCRIPTS_MAX: usize = 100_000;
/// Most results one `redis.call` reply may nest (arrays in arrays).
const NESTING_MAX: usize = 64;

/// The error that stops a script which must run again holding every shard; never reaches
/// a client when the rerun happens.
const RETRY_WHOLE: &str = "ERR script needs every shard (it runs again holding them)";

/// This shard's Lua state, made on first use.
pub fn lua(ctx: &Rc<ShardCtx>) -> mlua::Result<Lua> {
    // SCRIPT FLUSH (on any shard) bumps the epoch: this shard then drops its whole state,
    // compiled scripts and all, and starts a fresh one (a script still running keeps the
    // old one alive until it ends).
    let epoch = flush_epoch(ctx);
    if let Some(lua) = ctx.scripts.lua.borrow().as_ref() {
        if ctx.scripts.epoch.get() == epoch {
            return Ok(lua.clone());
        }
    }
    ctx.scripts.lua.borrow_mut().take();
    let lua = Lua::new_with(
        StdLib::TABLE | StdLib::STRING | StdLib::MATH,
        LuaOptions::new(),
    )?;
    let globals = lua.globals();
    for unsafe_name in ["dofile", "loadfile", "print"] {
        globals.set(unsafe_name, Value::Nil)?;
    }
    globals.set("redis", redis_table(ctx, &lua)?)?;
    crate::lua::libs::install(&lua)?;
    let (env, transparent, paused) = crate::lua::sandbox::seal(&lua)?;
    lua.set_named_registry_value(SCRIPT_ENV, env)?;
    lua.set_named_registry_value(crate::lua::busy::TRANSPARENT, transparent)?;
    lua.set_named_registry_value(crate::lua::busy::PAUSED, paused)?;
    lua.set_named_registry_value(COMPILED, lua.create_table()?)?;
    lua.set_memory_limit(ctx.globals.config.lua_memory_limit)?;
    *ctx.scripts.lua.borrow_mut() = Some(lua.clone());
    ctx.scripts.epoch.set(epoch);
    Ok(lua)
}

/// The `redis` table scripts see: call and pcall (which run commands on the keyspace),
/// the reply helpers, sha1hex, log, and Redis's constants and replication knobs.
// Long: one registration per redis.* function and constant; the table reads best whole.
fn redis_table(ctx: &Rc<ShardCtx>, lua: &Lua) -> mlua::Result<mlua::Table> {
    let redis = lua.create_table()?;
    let call_ctx = ctx.clone();
    redis.set(
        "call",
        lua.create_async_function(move |lua, args: MultiValue| {
            let ctx = call_ctx.clone();
            async move { redis_call(&ctx, &lua, args, false).await }
        })?,
    )?;
    let pcall_ctx = ctx.clone();
    redis.set(
        "pcall",
        lua.create_async_function(move |lua, args: MultiValue| {
            let ctx = pcall_ctx.clone();
            async move { redis_call(&ctx, &lua, args, true).await }
        })?,
    )?;
    crate::lua::redis_lib::install(lua, &redis, &ctx.globals.config.announce_version)?;
    Ok(redis)
}

/// How many SCRIPT FLUSHes the server has seen; a Lua state made before the latest is stale.
fn flush_epoch(ctx: &ShardCtx) -> u64 {
    ctx.globals
        .script_flush_epoch
        .load(std::sync::atomic::Ordering::Relaxed)
}

/// Registry names: the scripts' sealed environment, and the compiled scripts by SHA.
pub(crate) const SCRIPT_ENV: &str = "wetask_script_env";
const COMPILED: &str = "wetask_compiled";

/// Converts a Lua argument of `redis.call` to a command argument, as Redis does.
fn argument(value: &Value) -> Option<Bytes> {
    match value {
        Value::String(s) => Some(Bytes::copy_from_slice(&s.as_bytes())),
        Value::Integer(n) => Some(Bytes::from(n.to_string())),
        Value::Number(n) => Some(Bytes::from(if n.fract() == 0.0 && n.abs() < 1e17 {
            format!("{}", *n as i64)
        } else {
            format_double(*n)
        })),
        _ => None,
    }
}

async fn redis_call(
    ctx: &Rc<ShardCtx>,
    lua: &Lua,
    args: MultiValue,
    protected: bool,
) -> mlua::Result<Value> {
    let frame = match call_command(ctx, args).await {
        Ok(frame) => frame,
        Err(text) => Frame::error(text),
    };
    match frame {
        Frame::Error(text) if !protected => Err(crate::lua::raise(
            lua,
            String::from_utf8_lossy(&text).into_owned(),
        )),
        frame => frame_to_lua(lua, &frame, 0, crate::lua::redis_lib::script_resp(lua)),
    }
}

/// Runs one `redis.call`; an `Err` is the error reply's text.
async fn call_command(ctx: &Rc<ShardCtx>, args: MultiValue) -> Result<Frame, String> {
    let (spec, argv) = call_arguments(&args)?;
    let (db, client, token, read_only) = {
        let run = ctx.scripts.run.borrow();
        let run = run.as_ref().ok_or("ERR no script is running")?;
        if run.retry_whole {
            return Err(RETRY_WHOLE.into());
        }
        (run.db, run.client, run.token, run.read_only)
    };
    if read_only && spec.has(flag::WRITE) {
        return Err("ERR Write commands are not allowed from read-only scripts.".into());
    }
    if ctx.make_room(spec).is_err() {
        return Err(wetask_shards::errors::OOM.into());
    }
    // (Under an eviction policy the shard that runs the command makes room for it.)
    let at = Target { db, client };
    match spec.route {
        Route::Server if spec.has(flag::EMBEDDED) => {
            return Ok(call_embedded(ctx, spec, &argv, db).await);
        }
        Route::Server => {
            return Err("ERR This Redis command is not allowed from script".into());
        }
        Route::AllShards(merge) => {
            let reply = call_everywhere(ctx, at, token, spec, &argv, merge).await;
            return reply.map(|frame| counted(ctx, spec, frame));
        }
        Route::Keyed | Route::Split(_) => {}
    }
    let needed = undeclared_keys_to_borrow(ctx, spec, &argv, db)?;
    let held = Held::resume(ctx, token, script_shards_held(ctx));
    if !needed.is_empty() {
        let got = borrow(&held, needed.into_iter()).await;
        if let Some(run) = ctx.scripts.run.borrow_mut().as_mut() {
            run.borrowed.extend(got);
        }
    }
    // A SORT whose patterns name keys anywhere (the script holds every shard by now):
    // those keys are borrowed too, and it runs as if every key were here.
    let sort_anywhere = crate::routing::cross::sort_reaches_elsewhere(ctx, spec, &argv);
    if sort_anywhere {
        let mut borrowed = ctx
            .scripts
            .run
            .borrow_mut()
            .as_mut()
            .map(|run| std::mem::take(&mut run.borrowed))
            .unwrap_or_default();
        crate::routing::cross::borrow_sort_patterns(&held, &mut borrowed, db, spec, &argv).await;
        if let Some(run) = ctx.scripts.run.borrow_mut().as_mut() {
            run.borrowed = borrowed;
        }
    }
    if spec.has(flag::WRITE) {
        note_write(ctx, spec, &argv, db);
    }
    if spec.has(flag::TASK) {
        let shard = spec
            .key_positions(&argv)
            .next()
            .map_or(ctx.id, |i| ctx.owner_of(&argv[i]));
        if shard != ctx.id {
            return Ok(counted(
                ctx,
                spec,
                exec_on(&held, shard, at, spec, &argv).await,
            ));
        }
    }
    let frame = if sort_anywhere {
        ctx.shard
            .borrow_mut()
            .execute_all_here(db, client, spec, &argv)
    } else {
        ctx.shard.borrow_mut().execute(db, client, spec, &argv)
    };
    Ok(counted(ctx, spec, frame))
}

/// A `redis.call` of an embedded server command (SELECT, PING, PUBLISH …).
async fn call_embedded(
    ctx: &Rc<ShardCtx>,
    spec: &'static CommandSpec,
    argv: &[Bytes],
    db: usize,
) -> Frame {
    if spec.name.ends_with("publish") {
        mark_irreversible(ctx);
    }
    let mut selected = db;
    let frame = crate::commands::embedded::run_embedded(ctx, spec, argv, &mut selected).await;
    if selected != db {
        if let Some(run) = ctx.scripts.run.borrow_mut().as_mut() {
            run.db = selected;
        }
    }
    frame
}

/// Before a write command runs: the script has written (it can no longer simply start
/// again), its keys count as changed for WATCH, and what it replaces goes into the undo log
/// (a task command's effects cannot: the run becomes irreversible).
fn note_write(ctx: &ShardCtx, spec: &CommandSpec, argv: &[Bytes], db: usize) {
    mark_written(ctx);
    if let Some(run) = ctx.scripts.run.borrow_mut().as_mut() {
        run.written
            .extend(spec.key_positions(argv).map(|i| (db, argv[i].clone())));
        run.written.extend(other_db_target(spec, argv));
    }
    if spec.has(flag::TASK) {
        mark_irreversible(ctx);
    } else {
        remember_before_write(ctx, spec, argv, db);
    }
}

/// Keeps, in the run's undo log, the entries a write command is about to change: its keys,
/// and MOVE's and COPY … DB's key in the other database.
fn remember_before_write(ctx: &ShardCtx, spec: &CommandSpec, argv: &[Bytes], db: usize) {
    let mut run = ctx.scripts.run.borrow_mut();
    let Some(undo) = run.as_mut().and_then(|run| run.undo.as_mut()) else {
        return;
    };
    let mut shard = ctx.shard.borrow_mut();
    for i in spec.key_positions(argv) {
        undo.remember(&mut shard, db, &argv[i]);
    }
    if let Some((to, key)) = other_db_target(spec, argv) {
        undo.remember(&mut shard, to, &key);
    }
}

/// The key a command writes in another database than the selected one: MOVE's, and
/// COPY … DB n's destination. (It is borrowed, remembered and given back like the command's own keys.)
fn other_db_target(spec: &CommandSpec, argv: &[Bytes]) -> Option<(usize, Bytes)> {
    let (db, key) = match spec.name {
        "move" => (argv.get(2)?, &argv[1]),
        "copy" => {
            let at = argv.iter().skip(3).position(|a| is(a, "db"))? + 3;
            (argv.get(at + 1)?, &argv[2])
        }
        _ => return None,
    };
    let to: usize = std::str::from_utf8(db).ok()?.parse().ok()?;
    (to < wetask_shards::DATABASES).then(|| (to, key.clone()))
}

/// The running script did something its undo log cannot take back.
fn mark_irreversible(ctx: &ShardCtx) {
    if let Some(undo) = ctx
        .scripts
        .run
        .borrow_mut()
        .as_mut()
        .and_then(|run| run.undo.as_mut())
    {
        undo.irreversible = true;
    }
}

/// A `redis.call`'s reply, counted in INFO commandstats as Redis counts it.
fn counted(ctx: &ShardCtx, spec: &'static CommandSpec, frame: Frame) -> Frame {
    ctx.stats.record(spec, frame.is_error());
    frame
}

/// A `redis.call`'s arguments as a command: looked up, its arity checked, and allowed
/// from a script.
fn call_arguments(args: &MultiValue) -> Result<(&'static CommandSpec, Vec<Bytes>), String> {
    let mut argv = Vec::with_capacity(args.len());
    for value in args.iter() {
        argv.push(argument(value).ok_or_else(|| {
            "ERR Lua redis lib command arguments must be strings or integers".to_string()
        })?);
    }
    if argv.is_empty() {
        return Err("ERR Please specify at least one argument for this redis lib call".into());
    }
    let Some(spec) = lookup(&argv[0]) else {
        return Err("ERR Unknown Redis command called from script".into());
    };
    if !spec.arity_ok(argv.len()) {
        return Err("ERR Wrong number of args calling Redis command from script".into());
    }
    if spec.has(flag::NOSCRIPT) {
        return Err("ERR This Redis command is not allowed from script".into());
    }
    if matches!(spec.name, "xread" | "xreadgroup") && stream_read_blocks(&argv) {
        // Redis refuses it outright in scripts (elsewhere a blocking read in MULTI just
        // does not block).
        return Err(format!(
            "ERR {} command is not allowed with BLOCK option from scripts",
            String::from_utf8_lossy(&argv[0])
        ));
    }
    Ok((spec, argv))
}

/// Whether an XREAD or XREADGROUP names BLOCK among its options (before STREAMS).
fn stream_read_blocks(argv: &[Bytes]) -> bool {
    let mut i = 1;
    while i < argv.len() {
        let more = argv.len() - i - 1;
        if is(&argv[i], "streams") {
            return false;
        }
        if is(&argv[i], "block") && more > 0 {
            return true;
        }
        i += if is(&argv[i], "group") {
            3
        } else if is(&argv[i], "count") {
            2
        } else {
            1
        };
    }
    false
}

/// The shards the running script holds.
fn script_shards_held(ctx: &ShardCtx) -> Vec<usize> {
    ctx.scripts
        .run
        .borrow()
        .as_ref()
        .map(|r| r.shards.clone())
        .unwrap_or_default()
}

/// Runs one command on `shard` under the script's locks.
async fn exec_on(
    held: &Held<'_>,
    shard: usize,
    at: Target,
    spec: &'static CommandSpec,
    argv: &[Bytes],
) -> Frame {
    let request = Request::Keys(KeyRequest::Exec {
        db: at.db,
        client: at.client,
        commands: vec![(spec.index(), argv.to_vec())],
    });
    crate::routing::single_reply(crate::routing::cross::on(held, shard, request).await)
}

/// A command that runs on every shard (FLUSHALL, DBSIZE …), from a script that must hold
/// them all.
async fn call_everywhere(
    ctx: &Rc<ShardCtx>,
    at: Target,
    token: u64,
    spec: &'static CommandSpec,
    argv: &[Bytes],
    merge: Merge,
) -> Result<Frame, String> {
    let shards = script_shards_held(ctx);
    if shards.len() < ctx.shard_count {
        return Err(format!(
            "ERR '{}' from a script needs every shard: start the server with --lua-whole-server",
            spec.name
        ));
    }
    if spec.has(flag::WRITE) {
        mark_written(ctx);
    }
    let held = Held::resume(ctx, token, shards);
    let mut replies = Vec::new();
    for shard in 0..ctx.shard_count {
        let frame = if shard == ctx.id {
            ctx.shard.borrow_mut().execute(at.db, at.client, spec, argv)
        } else {
            exec_on(&held, shard, at, spec, argv).await
        };
        replies.push((frame, Vec::new()));
    }
    Ok(crate::routing::merge_replies(merge, replies))
}

/// Checks that every key the command names is declared or lives on a shard the script
/// holds, and returns those it must borrow to this shard first. An undeclared key on
/// another shard makes the script hold every shard from now on: rerun at once if it has
/// written nothing, else this call fails.
fn undeclared_keys_to_borrow(
    ctx: &ShardCtx,
    spec: &CommandSpec,
    argv: &[Bytes],
    db: usize,
) -> Result<Vec<(usize, Bytes)>, String> {
    let mut needed = Vec::new();
    let mut run = ctx.scripts.run.borrow_mut();
    let run = run.as_mut().ok_or("ERR no script is running")?;
    // A SORT whose patterns name keys anywhere needs every shard, as a key of each would.
    let everywhere = crate::routing::cross::sort_reaches_elsewhere(ctx, spec, argv);
    for i in spec.key_positions(argv) {
        let key = &argv[i];
        let shard = ctx.owner_of(key);
        let declared = run.declared.iter().any(|k| k == key);
        let all_open = (0..ctx.shard_count).all(|s| run.open_shards.contains(&s));
        if (!declared && !run.open_shards.contains(&shard)) || (everywhere && !all_open) {
            ctx.globals
                .whole_server_scripts
                .lock()
                .expect("whole-server scripts")
                .insert(run.sha.clone());
            let undoable = run.undo.as_ref().is_some_and(|undo| !undo.irreversible);
            if !run.wrote || undoable {
                run.retry_whole = true;
                return Err(RETRY_WHOLE.into());
            }
            return Err(format!(
                "ERR Script attempted to access key '{}', which was not declared in KEYS and lives on another shard, after a task command or PUBLISH that cannot be undone; it will hold every shard from its next run (declare the key, or give related keys one hash tag)",
                String::from_utf8_lossy(key)
            ));
        }
        let borrowed = run.borrowed.iter().any(|(d, k)| *d == db && k == key);
        if shard != ctx.id && !borrowed && !spec.has(flag::TASK) {
            needed.push((db, key.clone()));
        }
    }
    if let Some((to, key)) = other_db_target(spec, argv) {
        let borrowed = run.borrowed.iter().any(|(d, k)| *d == to && *k == key);
        if ctx.owner_of(&key) != ctx.id && !borrowed {
            needed.push((to, key));
        }
    }
    Ok(needed)
}

fn mark_written(ctx: &ShardCtx) {
    if let Some(run) = ctx.scripts.run.borrow_mut().as_mut() {
        run.wrote = true;
    }
    ctx.globals.script_slots[ctx.id]
        .wrote
        .store(true, std::sync::atomic::Ordering::Release);
}

/// A reply as Lua sees it: Redis's RESP2-to-Lua rules, or its RESP3 ones once the script
/// called `redis.setresp(3)` (`resp`): null as nil, booleans as booleans, and maps, sets,
/// doubles, big numbers and verbatim strings as tables named for their type.
fn frame_to_lua(lua: &Lua, frame: &Frame, depth: usize, resp: u8) -> mlua::Result<Value> {
    if depth > NESTING_MAX {
        return Err(mlua::Error::runtime("reply nested too deeply"));
    }
    let list = |items: &mut dyn Iterator<Item = &Frame>| -> mlua::Result<Value> {
        let table = lua.create_table()?;
        for (i, item) in items.enumerate() {
            table.raw_set(i + 1, frame_to_lua(lua, item, depth + 1, resp)?)?;
        }
        Ok(Value::Table(table))
    };
    let pairs = |pairs: &[(Frame, Frame)]| -> mlua::Result<Value> {
        let table = lua.create_table()?;
        for (i, (k, v)) in pairs.iter().enumerate() {
            let pair = lua.create_table()?;
            pair.raw_set(1, frame_to_lua(lua, k, depth + 1, resp)?)?;
            pair.raw_set(2, frame_to_lua(lua, v, depth + 1, resp)?)?;
            table.raw_set(i + 1, pair)?;
        }
        Ok(Value::Table(table))
    };
    let named = |name: &str, value: Value| -> mlua::Result<Value> {
        let table = lua.create_table()?;
        table.raw_set(name, value)?;
        Ok(Value::Table(table))
    };
    if resp == 3 {
        match frame {
            Frame::Null | Frame::NullArray => return Ok(Value::Nil),
            Frame::Boolean(b) => return Ok(Value::Boolean(*b)),
            Frame::Double(d) => return named("double", Value::Number(*d)),
            Frame::DoubleText(text) => {
                let d = std::str::from_utf8(text)
                    .ok()
                    .and_then(|t| t.parse::<f64>().ok())
                    .unwrap_or(0.0);
                return named("double", Value::Number(d));
            }
            Frame::BigNumber(b) => {
                return named("big_number", Value::String(lua.create_string(b)?))
            }
            Frame::Verbatim(format, text) => {
                let inner = lua.create_table()?;
                inner.raw_set("string", lua.create_string(text)?)?;
                inner.raw_set("format", lua.create_string(format)?)?;
                return named("verbatim_string", Value::Table(inner));
            }
            Frame::Map(items) | Frame::Keyed(items) => {
                let map = lua.create_table()?;
                for (k, v) in items {
                    let key = frame_to_lua(lua, k, depth + 1, resp)?;
                    if !matches!(key, Value::Nil) {
                        map.raw_set(key, frame_to_lua(lua, v, depth + 1, resp)?)?;
                    }
                }
                return named("map", Value::Table(map));
            }
            Frame::Set(items) => {
                let set = lua.create_table()?;
                for item in items {
                    let member = frame_to_lua(lua, item, depth + 1, resp)?;
                    if !matches!(member, Value::Nil) {
                        set.raw_set(member, true)?;
                    }
                }
                return named("set", Value::Table(set));
            }
            Frame::Pairs(items) => return pairs(items),
            _ => {}
        }
    }
    Ok(match frame {
        Frame::Integer(n) => Value::Integer(*n),
        Frame::Bulk(b) | Frame::BigNumber(b) | Frame::DoubleText(b) | Frame::Verbatim(_, b) => {
            Value::String(lua.create_string(b)?)
        }
        Frame::Double(d) => Value::String(lua.create_string(format_double(*d))?),
        Frame::Null | Frame::NullArray => Value::Boolean(false),
        Frame::Boolean(b) => Value::Integer(i64::from(*b)),
        Frame::Simple(text) => named("ok", Value::String(lua.create_string(text)?))?,
        Frame::Error(text) | Frame::BulkError(text) => {
            // Redis marks a command's error so that returning it does not count it twice.
            let table = lua.create_table()?;
            table.raw_set("err", lua.create_string(text)?)?;
            table.raw_set("ignore_error_stats_update", true)?;
            Value::Table(table)
        }
        Frame::Array(items) | Frame::Set(items) | Frame::Push(items) | Frame::Several(items) => {
            list(&mut items.iter())?
        }
        Frame::Map(items) | Frame::Pairs(items) => {
            list(&mut items.iter().flat_map(|(k, v)| [k, v]))?
        }
        Frame::Keyed(items) => pairs(items)?,
        Frame::Written => Value::Nil,
    })
}

/// A status or error text as Redis replies it from a script: line breaks become spaces.
fn one_line(text: &[u8]) -> Bytes {
    text.iter()
        .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b })
        .collect()
}

/// A script's result as a reply (Redis's Lua-to-RESP rules): `{err=…}`, `{ok=…}`,
/// `{double=…}`, `{big_number=…}`, `{verbatim_string={format=…, string=…}}`, `{map=…}`,
/// `{set=…}`, else an array up to the first nil. Booleans follow the script's
/// `redis.setresp` (`resp`): 1 and nil under 2, booleans under 3.
fn lua_to_frame(value: &Value, depth: usize, resp: u8) -> Frame {
    if depth > NESTING_MAX {
        return Frame::static_error("ERR reached lua stack limit");
    }
    match value {
        Value::Nil => Frame::Null,
        Value::Boolean(b) if resp == 3 => Frame::Boolean(*b),
        Value::Boolean(false) => Frame::Null,
        Value::Boolean(true) => Frame::Integer(1),
        Value::Integer(n) => Frame::Integer(*n),
        Value::Number(n) => Frame::Integer(*n as i64),
        Value::String(s) => Frame::Bulk(Bytes::copy_from_slice(&s.as_bytes())),
        Value::Table(table) => table_to_frame(table, depth, resp),
        _ => Frame::Null,
    }
}

fn table_to_frame(table: &mlua::Table, depth: usize, resp: u8) -> Frame {
    let field = |name: &str| table.raw_get::<Value>(name).unwrap_or(Value::Nil);
    if let Value::String(_) = field("err") {
        // Redis reads the text through metamethods, as its error extraction does.
        let text = match table.get::<Value>("err") {
            Ok(Value::String(err)) => err.as_bytes().to_vec(),
            _ => Vec::new(),
        };
        return Frame::Error(one_line(&text));
    }
    if let Value::String(ok) = field("ok") {
        return Frame::Simple(one_line(&ok.as_bytes()));
    }
    match field("double") {
        Value::Number(n) => return Frame::Double(n),
        Value::Integer(n) => return Frame::Double(n as f64),
        _ => {}
    }
    if let Value::String(big) = field("big_number") {
        return Frame::BigNumber(one_line(&big.as_bytes()));
    }
    if let Value::Table(verbatim) = field("verbatim_string") {
        if let (Ok(Value::String(format)), Ok(Value::String(text))) = (
            verbatim.raw_get::<Value>("format"),
            verbatim.raw_get::<Value>("string"),
        ) {
            let format = format.as_bytes();
            let mut tag = *b"txt";
            if format.len() == 3 {
                tag.copy_from_slice(&format);
            }
            return Frame::Verbatim(tag, Bytes::copy_from_slice(&text.as_bytes()));
        }
    }
    if let Value::Table(map) = field("map") {
        let mut items = Vec::new();
        for pair in map.pairs::<Value, Value>() {
            let Ok((k, v)) = pair else { break };
            items.push((
                lua_to_frame(&k, depth + 1, resp),
                lua_to_frame(&v, depth + 1, resp),
            ));
        }
        return Frame::Map(items);
    }
    if let Value::Table(set) = field("set") {
        let mut items = Vec::new();
        for pair in set.pairs::<Value, Value>() {
            let Ok((k, _)) = pair else { break };
            items.push(lua_to_frame(&k, depth + 1, resp));
        }
        return Frame::Set(items);
    }
    let mut items = Vec::new();
    for i in 1.. {
        match table.raw_get::<Value>(i) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(item) => items.push(lua_to_frame(&item, depth + 1, resp)),
        }
    }
    Frame::Array(items)
}

/// The line a Lua error message points at (`user_script:LINE:`), for Redis's error suffix.
fn error_line(message: &str, chunk: &str) -> Option<u32> {
    let at = message.find(chunk)? + chunk.len() + 1;
    let digits: String = message[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// A script failure as Redis 7 words it.
fn script_error(
    error: &mlua::Error,
    sha: &str,
    chunk: &str,
    raised: Option<&crate::lua::sandbox::RaisedTable>,
) -> Frame {
    let (text, line) = match crate::lua::root_cause(error) {
        mlua::Error::ExternalError(e) => match e.downcast_ref::<crate::lua::ReplyError>() {
            Some(call) => (
                call.0.clone(),
                call.1.or_else(|| error_line(&error.to_string(), chunk)),
            ),
            None => (format!("ERR {e}"), None),
        },
        mlua::Error::RuntimeError(message)
            if raised.and_then(|t| t.reply_for(message)).is_some() =>
        {
            raised
                .and_then(|t| t.reply_for(message))
                .expect("matched above")
        }
        mlua::Error::RuntimeError(message) => {
            let first = message.lines().next().unwrap_or_default();
            let line = error_line(first, chunk);
            match first.find(&format!("{chunk}:")) {
                Some(at) => (format!("ERR {}", &first[at..]), line),
                None => (format!("ERR {first}"), line),
            }
        }
        other => (
            format!(
                "ERR {}",
                other.to_string().lines().next().unwrap_or_default()
            ),
            None,
        ),
    };
    Frame::error(format!(
        "{text} script: {sha}, on @{chunk}:{}.",
        line.unwrap_or(1)
    ))
}

/// The compiled function for a script body, cached per shard by its SHA.
fn compiled(lua: &Lua, sha: &str, body: &[u8]) -> Result<Function, Frame> {
    let internal = |e: mlua::Error| Frame::error(format!("ERR {e}"));
    let cache: mlua::Table = lua.named_registry_value(COMPILED).map_err(internal)?;
    if let Ok(function) = cache.raw_get::<Function>(sha) {
        return Ok(function);
    }
    let env: mlua::Table = lua.named_registry_value(SCRIPT_ENV).map_err(internal)?;
    let function = lua
        .load(body)
        .set_name("@user_script")
        .set_mode(mlua::ChunkMode::Text)
        .set_environment(env)
        .into_function()
        .map_err(|e| {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default();
            let detail = first.find("user_script:").map_or(first, |at| &first[at..]);
            Frame::error(format!(
                "ERR Error compiling script (new function): {detail}"
            ))
        })?;
    cache.raw_set(sha, function.clone()).map_err(internal)?;
    Ok(function)
}

/// Stores a script body for EVALSHA; returns its SHA.
fn remember(ctx: &ShardCtx, body: &Bytes) -> Result<String, Frame> {
    let sha = sha1_hex(body);
    let mut scripts = ctx.globals.scripts.lock().expect("scripts");
    if !scripts.contains_key(&sha) {
        if scripts.len() >= SCRIPTS_MAX {
            return Err(Frame::error(format!(
                "ERR too many scripts loaded ({SCRIPTS_MAX}); SCRIPT FLUSH frees them"
            )));
        }
        scripts.insert(sha.clone(), Bytes::copy_from_slice(body));
    }
    Ok(sha)
}

/// EVAL / EVALSHA / EVAL_RO / EVALSHA_RO.
pub async fn eval(
    ctx: &Rc<ShardCtx>,
    conn: &Rc<RefCell<ConnState>>,
    spec: &CommandSpec,
    args: &[Bytes],
    numkeys: Result<usize, Frame>,
) -> Frame {
    let (db, client) = {
        let state = conn.borrow();
        (state.db, state.task_owner())
    };
    let script = ScriptCall {
        spec,
        args,
        numkeys,
    };
    eval_in(ctx, script, db, client, None).await
}

/// The SHA a queued EVAL or EVALSHA names.
pub fn sha_of(spec: &CommandSpec, args: &[Bytes]) -> String {
    if spec.name.starts_with("fcall") {
        return String::from_utf8_lossy(&args[1]).into_owned();
    }
    if spec.name.starts_with("evalsha") {
        String::from_utf8_lossy(&args[1]).to_ascii_lowercase()
    } else {
        sha1_hex(&args[1])
    }
}

/// The shards a script locks: those of its declared keys, or every shard when it declares
/// none, was seen reaching for undeclared keys elsewhere, or the server runs with
/// `--lua-whole-server`.
pub fn script_shards(ctx: &ShardCtx, sha: &str, keys: &[Bytes]) -> Vec<usize> {
    let learned = ctx
        .globals
        .whole_server_scripts
        .lock()
        .expect("whole-server scripts")
        .contains(sha);
    if ctx.globals.config.lua_whole_server || keys.is_empty() || learned {
        (0..ctx.shard_count).collect()
    } else {
        keys.iter().map(|k| ctx.owner_of(k)).collect()
    }
}

/// Runs a script. `under` is a running transaction's locks and its borrowed keys: the
/// transaction already locked [`script_shards`] and borrowed the declared keys, so the
/// script runs inside them, and anything it borrows besides joins the transaction's list
/// (given back at EXEC's end).
pub async fn eval_in(
    ctx: &Rc<ShardCtx>,
    call: ScriptCall<'_>,
    db: usize,
    client: u64,
    under: Option<(&Held<'_>, &mut Vec<(usize, Bytes)>)>,
) -> Frame {
    let runnable = match runnable(ctx, call) {
        Ok(runnable) => runnable,
        Err(err) => return err,
    };
    let Runnable {
        sha,
        lua,
        function,
        read_only,
        keys,
        argv,
        chunk,
    } = runnable;
    // A script that declares no key at all may still use keys (Redis allows it): it locks
    // every shard, as `--lua-whole-server` makes every script do.
    let new_run = |held: &Held<'_>, open_shards: Vec<usize>, borrowed| ScriptRun {
        token: held.token,
        shards: held.shards().to_vec(),
        open_shards,
        db,
        client,
        declared: keys.clone(),
        borrowed,
        read_only,
        sha: sha.clone(),
        wrote: false,
        written: Vec::new(),
        retry_whole: false,
        undo: None,
    };
    let script = Script {
        lua: &lua,
        function: &function,
        sha: &sha,
        keys: &keys,
        argv: &argv,
    };
    let result = match under {
        // Inside EXEC: under the transaction's locks, with its borrowed keys.
        Some((held, tx_borrowed)) => {
            let open_shards = script_shards(ctx, &sha, &keys);
            *ctx.scripts.run.borrow_mut() =
                Some(new_run(held, open_shards, std::mem::take(tx_borrowed)));
            let result = run_script(ctx, &lua, function.clone(), &keys, &argv).await;
            let run = ctx.scripts.run.borrow_mut().take().expect("set above");
            *tx_borrowed = run.borrowed;
            result
        }
        None => run_holding(ctx, &script, db, &new_run).await,
    };
    match result {
        Ok(value) => lua_to_frame(&value, 0, crate::lua::redis_lib::script_resp(&lua)),
        Err(error) => {
            let raised = lua.remove_app_data::<crate::lua::sandbox::RaisedTable>();
            script_error(&error, &sha, chunk, raised.as_ref())
        }
    }
}

/// What EVAL or FCALL runs, found and checked: the SHA (FCALL: the function's name), the
/// Lua state and function, whether it may write, its keys and arguments, and the chunk name
/// its errors cite.
struct Runnable {
    sha: String,
    lua: Lua,
    function: Function,
    read_only: bool,
    keys: Vec<Bytes>,
    argv: Vec<Bytes>,
    chunk: &'static str,
}

/// An EVAL or FCALL to run: its row, its arguments, and its `numkeys` as the request parsed
/// it (`wetask_shards::request::parse_numkeys`).
pub struct ScriptCall<'a> {
    pub spec: &'a CommandSpec,
    pub args: &'a [Bytes],
    pub numkeys: Result<usize, Frame>,
}

fn runnable(ctx: &Rc<ShardCtx>, call: ScriptCall<'_>) -> Result<Runnable, Frame> {
    let ScriptCall {
        spec,
        args,
        numkeys,
    } = call;
    let owned = |items: &[Bytes]| items.iter().map(|k| Bytes::copy_from_slice(k)).collect();
    if spec.name.starts_with("fcall") {
        use crate::commands::functions;
        let found = functions::check(ctx, spec.name == "fcall_ro", args, numkeys)?;
        let (keys, argv): (Vec<Bytes>, Vec<Bytes>) = (
            owned(&args[3..3 + found.numkeys]),
            owned(&args[3 + found.numkeys..]),
        );
        let internal = |e: mlua::Error| Frame::error(format!("ERR {e}"));
        let lua = lua(ctx).map_err(|e| Frame::error(format!("ERR cannot start Lua: {e}")))?;
        let env: mlua::Table = lua.named_registry_value(SCRIPT_ENV).map_err(internal)?;
        let callback = functions::callback(ctx, &lua, &env, &found.name, found.epoch)
            .map_err(internal)?
            .ok_or(Frame::static_error("ERR Function not found"))?;
        let function = functions::bound(&lua, &callback, &keys, &argv).map_err(internal)?;
        return Ok(Runnable {
            sha: found.name,
            lua,
            function,
            read_only: found.read_only,
            keys,
            argv,
            chunk: "user_function",
        });
    }
    let numkeys = numkeys?;
    let (sha, body) = script_body(ctx, spec.name.starts_with("evalsha"), &args[1])?;
    let (lua, function) = lua_and_function(ctx, &sha, &body)?;
    Ok(Runnable {
        sha,
        lua,
        function,
        read_only: spec.name.ends_with("_ro"),
        keys: owned(&args[3..3 + numkeys]),
        argv: owned(&args[3 + numkeys..]),
        chunk: "user_script",
    })
}

/// This shard's Lua state and the script compiled in it.
fn lua_and_function(ctx: &Rc<ShardCtx>, sha: &str, body: &[u8]) -> Result<(Lua, Function), Frame> {
    let lua = lua(ctx).map_err(|e| Frame::error(format!("ERR cannot start Lua: {e}")))?;
    let function = compiled(&lua, sha, body)?;
    Ok((lua, function))
}

/// The script to run and its SHA: EVAL's body (remembered for EVALSHA), or EVALSHA's
/// by its SHA.
fn script_body(ctx: &ShardCtx, by_sha: bool, arg: &Bytes) -> Result<(String, Bytes), Frame> {
    if !by_sha {
        return Ok((remember(ctx, arg)?, arg.clone()));
    }
    let sha = String::from_utf8_lossy(arg).to_ascii_lowercase();
    let body = ctx
        .globals
        .scripts
        .lock()
        .expect("scripts")
        .get(&sha)
        .cloned();
    match body {
        Some(body) => Ok((sha, body)),
        None => Err(Frame::static_error(
            "NOSCRIPT No matching script. Please use EVAL.",
        )),
    }
}

/// Makes the running script's record from its locks, open shards and borrowed keys.
type NewRun<'a> = dyn Fn(&Held<'_>, Vec<usize>, Vec<(usize, Bytes)>) -> ScriptRun + 'a;

/// A compiled script and what it runs with.
#[derive(Clone, Copy)]
struct Script<'a> {
    lua: &'a Lua,
    function: &'a Function,
    sha: &'a str,
    keys: &'a [Bytes],
    argv: &'a [Bytes],
}

/// Runs a script holding the shards of its keys (every shard when it must), borrowing its
/// declared keys; runs it again holding every shard when it reached for an undeclared key
/// elsewhere before writing anything.
async fn run_holding(
    ctx: &Rc<ShardCtx>,
    script: &Script<'_>,
    db: usize,
    new_run: &NewRun<'_>,
) -> mlua::Result<Value> {
    let Script {
        lua,
        function,
        sha,
        keys,
        argv,
    } = *script;
    loop {
        let open_shards = script_shards(ctx, sha, keys);
        let mut shards = open_shards.clone();
        shards.push(ctx.id);
        let held = Held::lock_shards(ctx, shards).await;
        let borrowed = borrow(&held, keys.iter().map(|k| (db, k.clone()))).await;
        // Holding fewer than every shard, the run may have to start again: keep what its
        // writes replace.
        let may_restart = (0..ctx.shard_count).any(|s| !open_shards.contains(&s));
        let mut run = new_run(&held, open_shards, borrowed);
        run.undo = may_restart.then(|| UndoLog::starting(&ctx.shard.borrow()));
        *ctx.scripts.run.borrow_mut() = Some(run);
        let result = run_script(ctx, lua, function.clone(), keys, argv).await;
        let mut run = ctx.scripts.run.borrow_mut().take().expect("set above");
        // It reached for a key elsewhere: take its writes back (borrowed keys too, before
        // they go home), then run it again, now holding every shard.
        let restart = run.retry_whole;
        if restart {
            if let Some(undo) = run.undo.take() {
                undo.undo(&mut ctx.shard.borrow_mut());
            }
        }
        give_back(&held, run.borrowed, &run.written).await;
        held.unlock().await;
        if restart {
            continue;
        }
        return result;
    }
}

async fn run_script(
    ctx: &Rc<ShardCtx>,
    lua: &Lua,
    function: Function,
    keys: &[Bytes],
    argv: &[Bytes],
) -> mlua::Result<Value> {
    lua.remove_app_data::<crate::lua::sandbox::RaisedTable>();
    lua.set_app_data(crate::lua::redis_lib::ScriptResp(2));
    let globals = lua.globals();
    globals.raw_set("KEYS", crate::lua::string_table(lua, keys)?)?;
    globals.raw_set("ARGV", crate::lua::string_table(lua, argv)?)?;
    let thread = lua.create_thread(function)?;
    let transparent: mlua::Table = lua.named_registry_value(crate::lua::busy::TRANSPARENT)?;
    transparent.raw_set(thread.clone(), true)?;
    let token = ctx.scripts.run.borrow().as_ref().map_or(0, |r| r.token);
    // Until the script ends (or its task is dropped), its slot and hook say what it does.
    let _watching = crate::lua::busy::watch(
        &ctx.globals.script_slots,
        &ctx.globals.busy_reply_threshold_ms,
        ctx.id,
        token,
        &thread,
    );
    thread.into_async::<Value>(()).await
}

/// SCRIPT LOAD | EXISTS | FLUSH | HELP.
pub fn script(ctx: &Rc<ShardCtx>, args: &[Bytes]) -> Frame {
    let sub = &args[1];
    if is(sub, "load") && args.len() == 3 {
        let lua = match lua(ctx) {
            Ok(lua) => lua,
            Err(e) => return Frame::error(format!("ERR cannot start Lua: {e}")),
        };
        let sha = sha1_hex(&args[2]);
        if let Err(err) = compiled(&lua, &sha, &args[2]) {
            return err;
        }
        match remember(ctx, &args[2]) {
            Ok(sha) => Frame::Bulk(Bytes::from(sha)),
            Err(err) => err,
        }
    } else if is(sub, "exists") && args.len() >= 3 {
        let scripts = ctx.globals.scripts.lock().expect("scripts");
        Frame::Array(
            args[2..]
                .iter()
                .map(|sha| {
                    let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
                    Frame::Integer(i64::from(scripts.contains_key(&sha)))
                })
                .collect(),
        )
    } else if is(sub, "flush") && args.len() <= 3 {
        if let Some(mode) = args.get(2) {
            if !is(mode, "sync") && !is(mode, "async") {
                return Frame::static_error("ERR SCRIPT FLUSH only support SYNC|ASYNC option");
            }
        }
        ctx.globals.scripts.lock().expect("scripts").clear();
        // Every shard drops its Lua state (and so its compiled scripts) before its next
        // script; this one at once.
        ctx.globals
            .script_flush_epoch
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if ctx.scripts.run.borrow().is_none() {
            ctx.scripts.lua.borrow_mut().take();
        }
        Frame::ok()
    } else if is(sub, "help") {
        Frame::Array(
            [
                "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "EXISTS <sha1> [<sha1> ...]",
                "FLUSH [ASYNC|SYNC]",
                "LOAD <script>",
            ]
            .iter()
            .map(|l| Frame::Simple(Bytes::from_static(l.as_bytes())))
            .collect(),
        )
    } else if is(sub, "kill") && args.len() == 2 {
        match crate::lua::busy::kill(&ctx.globals.script_slots) {
            Ok(()) => Frame::ok(),
            Err(text) => Frame::static_error(text),
        }
    } else {
        wetask_shards::errors::unknown_subcommand("script", sub)
    }
}
