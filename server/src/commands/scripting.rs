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
//!
//! Its rooms: `calls` (`redis.call` and `redis.pcall`), `convert` (replies and Lua values,
//! script errors), `script_command` (SCRIPT).

mod calls;
mod convert;
mod script_command;

use calls::redis_call;
use convert::{lua_to_frame, script_error};
pub use script_command::script;

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
use crate::shard::{ScriptAcl, ScriptRun, ShardCtx, UndoLog};

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
    let (db, client, acl) = {
        let state = conn.borrow();
        (state.db, state.task_owner(), script_acl(&state))
    };
    let script = ScriptCall {
        spec,
        args,
        numkeys,
        acl,
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
/// `--lua-whole-server`. In consensus mode with several shards, only its own: a script
/// stays in its shard's group (`session::consensus_route` sent it there with its keys).
pub fn script_shards(ctx: &ShardCtx, sha: &str, keys: &[Bytes]) -> Vec<usize> {
    if ctx.globals.consensus.is_some() && ctx.shard_count > 1 {
        return vec![ctx.id];
    }
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
    let acl = call.acl.clone();
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
        acl: acl.clone(),
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
    /// The caller, when its ACL rules restrict it ([`script_acl`]).
    pub acl: Option<ScriptAcl>,
}

/// The caller as a script's calls are checked: `None` for a user allowed everything.
pub fn script_acl(conn: &ConnState) -> Option<ScriptAcl> {
    (!conn.user.unrestricted).then(|| ScriptAcl {
        user: conn.user.clone(),
        client_info: conn.describe(crate::globals::unix_ms()),
    })
}

fn runnable(ctx: &Rc<ShardCtx>, call: ScriptCall<'_>) -> Result<Runnable, Frame> {
    let ScriptCall {
        spec,
        args,
        numkeys,
        acl: _,
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
