//! Redis 7 functions: FUNCTION LOAD | DELETE | FLUSH | LIST | DUMP | RESTORE | STATS | KILL
//! | HELP, and the lookup FCALL and FCALL_RO run through. Libraries live in one process-wide
//! registry (`lua::library`); each shard registers their functions in its own Lua state
//! when the registry has changed since it last looked, by running each library's code with
//! `redis.register_function` collecting the callbacks. FCALL then runs like EVAL
//! (`scripting::eval_in`): on the shards of its keys, atomically, rerun holding every shard
//! when it reaches an undeclared key elsewhere. The registry survives restarts in
//! `functions.rdb` and goes to replicas (`crate::function_store`).

use std::rc::Rc;

use bytes::Bytes;
use mlua::{Function, Lua};
use wetask_protocol::Frame;
use wetask_shards::args::is;
use wetask_shards::errors::{unknown_subcommand, wrong_arity};
use wetask_shards::glob::glob_match;

use crate::function_store::{changed, dump, parse_dump};
use crate::globals::Globals;
use crate::lua::library;
use crate::shard::ShardCtx;

/// FCALL's function as checked: its name, the registry epoch it was found at, whether it
/// may not write, and its number of keys.
pub struct Checked {
    pub name: String,
    pub epoch: u64,
    pub read_only: bool,
    pub numkeys: usize,
}

/// Registry names in each shard's Lua state: name -> callback, and the registry epoch they
/// were built at.
const FUNCTIONS: &str = "wetask_functions";
const FUNCTIONS_EPOCH: &str = "wetask_functions_epoch";
/// The chunk that binds a callback to one call's keys and arguments.
const BINDER: &str = "wetask_fcall_binder";

/// FCALL / FCALL_RO's function, with Redis's checks in its order.
pub fn check(
    ctx: &ShardCtx,
    ro: bool,
    args: &[Bytes],
    numkeys: Result<usize, Frame>,
) -> Result<Checked, Frame> {
    let asked = String::from_utf8_lossy(&args[1]).into_owned();
    // (Function names are case-insensitive: `name` is the one it was registered with.)
    let (name, no_writes, epoch) = {
        let registry = ctx.globals.functions.lock().expect("functions");
        let Some((_, info)) = registry.function(&asked) else {
            return Err(Frame::static_error("ERR Function not found"));
        };
        (info.name.clone(), info.no_writes(), registry.epoch)
    };
    // Its `numkeys` was parsed with the request; its error counts once the function is found.
    let numkeys = numkeys?;
    if ro && !no_writes {
        return Err(Frame::static_error(
            "ERR Can not execute a script with write flag using *_ro command.",
        ));
    }
    if !no_writes {
        // A function that may write counts as a write command, as Redis's flags make it:
        // it does not start where a write is refused (`replication::gate`).
        if let Some(refusal) = ctx.globals.replication.write_refusal() {
            return Err(Frame::static_error(refusal));
        }
    }
    Ok(Checked {
        name,
        epoch,
        read_only: ro || no_writes,
        numkeys,
    })
}

/// The callback of function `name` in this shard's Lua state, registering every library
/// again first when the registry changed.
pub fn callback(
    ctx: &ShardCtx,
    lua: &Lua,
    env: &mlua::Table,
    name: &str,
    epoch: u64,
) -> mlua::Result<Option<Function>> {
    let built: Option<u64> = lua.named_registry_value(FUNCTIONS_EPOCH)?;
    if built != Some(epoch) {
        let codes: Vec<Bytes> = ctx
            .globals
            .functions
            .lock()
            .expect("functions")
            .libraries()
            .map(|l| l.code.clone())
            .collect();
        let table = lua.create_table()?;
        for code in codes {
            for (function, callback) in register_in(lua, env, &code)? {
                table.raw_set(function, callback)?;
            }
        }
        lua.set_named_registry_value(FUNCTIONS, table)?;
        lua.set_named_registry_value(FUNCTIONS_EPOCH, epoch)?;
    }
    let table: mlua::Table = lua.named_registry_value(FUNCTIONS)?;
    table.raw_get(name)
}

/// Runs a library's code in the shard's script environment with `redis.register_function`
/// set for the while, and returns what it registered.
fn register_in(
    lua: &Lua,
    env: &mlua::Table,
    code: &Bytes,
) -> mlua::Result<Vec<(String, Function)>> {
    let callbacks: library::Callbacks = Default::default();
    let redis: mlua::Table = lua.globals().get("redis")?;
    library::install_registrar(lua, &redis, Default::default(), Some(callbacks.clone()))?;
    let body = &code[code.iter().position(|&b| b == b'\n').unwrap_or(0)..];
    let ran = lua
        .load(body)
        .set_name("@user_function")
        .set_mode(mlua::ChunkMode::Text)
        .set_environment(env.clone())
        .exec();
    redis.raw_set("register_function", mlua::Value::Nil)?;
    ran?;
    Ok(callbacks.take())
}

/// Binds a callback to the KEYS and ARGV of one call: what the script thread runs.
pub fn bound(
    lua: &Lua,
    function: &Function,
    keys: &[Bytes],
    argv: &[Bytes],
) -> mlua::Result<Function> {
    let strings = |items: &[Bytes]| crate::lua::string_table(lua, items);
    // Compiled once per Lua state, not per call.
    let binder: Function = match lua.named_registry_value::<Option<Function>>(BINDER)? {
        Some(binder) => binder,
        None => {
            let binder = lua
                .load("local f, k, a = ... return function() return f(k, a) end")
                .set_name("=fcall")
                .into_function()?;
            lua.set_named_registry_value(BINDER, binder.clone())?;
            binder
        }
    };
    binder.call((function.clone(), strings(keys)?, strings(argv)?))
}

// ---- FUNCTION ----

/// FUNCTION's subcommands.
pub fn function(ctx: &Rc<ShardCtx>, args: &[Bytes]) -> Frame {
    let sub = &args[1];
    let result = if is(sub, "load") {
        load(&ctx.globals, args)
    } else if is(sub, "delete") {
        delete(&ctx.globals, args)
    } else if is(sub, "flush") {
        flush(&ctx.globals, args)
    } else if is(sub, "list") {
        list(&ctx.globals, args)
    } else if is(sub, "dump") {
        if args.len() != 2 {
            return wrong_arity("function|dump");
        }
        Ok(Frame::Bulk(Bytes::from(dump(&ctx.globals))))
    } else if is(sub, "restore") {
        restore(&ctx.globals, args)
    } else if is(sub, "stats") {
        if args.len() != 2 {
            return wrong_arity("function|stats");
        }
        Ok(stats(&ctx.globals))
    } else if is(sub, "kill") {
        if args.len() != 2 {
            return wrong_arity("function|kill");
        }
        match crate::lua::busy::kill(&ctx.globals.script_slots) {
            Ok(()) => Ok(Frame::ok()),
            Err(text) => Err(Frame::static_error(text)),
        }
    } else if is(sub, "help") {
        Ok(help())
    } else {
        return unknown_subcommand("function", sub);
    };
    if result.is_ok() && changes_libraries(args) && ctx.globals.consensus.is_some() {
        // The metadata group's log carries the new set; the reply waits for its commit
        // (`session::consensus_route` ran this only on that group's leader).
        ctx.shard
            .borrow_mut()
            .log_functions(Bytes::from(dump(&ctx.globals)));
    }
    result.unwrap_or_else(|err| err)
}

/// FUNCTION LOAD, DELETE, FLUSH and RESTORE: the subcommands that change the libraries.
pub fn changes_libraries(args: &[Bytes]) -> bool {
    args.get(1).is_some_and(|sub| {
        ["load", "delete", "flush", "restore"]
            .iter()
            .any(|change| is(sub, change))
    })
}

/// FUNCTION LOAD [REPLACE] code.
fn load(g: &Globals, args: &[Bytes]) -> Result<Frame, Frame> {
    if args.len() < 3 {
        return Err(wrong_arity("function|load"));
    }
    let mut replace = false;
    for option in &args[2..args.len() - 1] {
        if is(option, "replace") {
            replace = true;
        } else {
            return Err(Frame::error(format!(
                "ERR Unknown option given: {}",
                String::from_utf8_lossy(option)
            )));
        }
    }
    let code = &args[args.len() - 1];
    // Redis's order: the metadata, then whether the library exists, then its code.
    let name = library::library_name(code).map_err(Frame::error)?;
    if !replace && g.functions.lock().expect("functions").contains(&name) {
        return Err(Frame::error(format!("ERR Library '{name}' already exists")));
    }
    let library = library::load(code, &g.config.announce_version, true).map_err(Frame::error)?;
    let name = library.name.clone();
    g.functions
        .lock()
        .expect("functions")
        .add(library, replace)
        .map_err(Frame::error)?;
    changed(g);
    Ok(Frame::Bulk(Bytes::from(name)))
}

fn delete(g: &Globals, args: &[Bytes]) -> Result<Frame, Frame> {
    if args.len() != 3 {
        return Err(wrong_arity("function|delete"));
    }
    let name = String::from_utf8_lossy(&args[2]).into_owned();
    let removed = g.functions.lock().expect("functions").remove(&name);
    if removed.is_none() {
        return Err(Frame::static_error("ERR Library not found"));
    }
    changed(g);
    Ok(Frame::ok())
}

fn flush(g: &Globals, args: &[Bytes]) -> Result<Frame, Frame> {
    match args.get(2) {
        None => {}
        Some(mode) if args.len() == 3 && (is(mode, "sync") || is(mode, "async")) => {}
        Some(_) if args.len() > 3 => return Err(wrong_arity("function|flush")),
        Some(_) => {
            return Err(Frame::static_error(
                "ERR FUNCTION FLUSH only supports SYNC|ASYNC option",
            ))
        }
    }
    g.functions.lock().expect("functions").clear();
    changed(g);
    Ok(Frame::ok())
}

/// FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE].
fn list(g: &Globals, args: &[Bytes]) -> Result<Frame, Frame> {
    let mut pattern: Option<Bytes> = None;
    let mut with_code = false;
    let mut i = 2;
    while i < args.len() {
        if is(&args[i], "withcode") && !with_code {
            with_code = true;
        } else if is(&args[i], "libraryname") && pattern.is_none() {
            let Some(p) = args.get(i + 1) else {
                return Err(Frame::static_error(
                    "ERR library name argument was not given",
                ));
            };
            pattern = Some(p.clone());
            i += 1;
        } else {
            return Err(Frame::error(format!(
                "ERR Unknown argument {}",
                String::from_utf8_lossy(&args[i])
            )));
        }
        i += 1;
    }
    let text = |s: &str| Frame::Bulk(Bytes::copy_from_slice(s.as_bytes()));
    let registry = g.functions.lock().expect("functions");
    let libraries = registry
        .libraries()
        .filter(|l| {
            pattern
                .as_ref()
                .is_none_or(|p| glob_match(p, l.name.as_bytes()))
        })
        .map(|l| {
            let functions = l
                .functions
                .iter()
                .map(|f| {
                    Frame::Map(vec![
                        (text("name"), text(&f.name)),
                        (
                            text("description"),
                            f.description.as_deref().map_or(Frame::Null, text),
                        ),
                        (
                            text("flags"),
                            Frame::Set(f.flags.iter().map(|s| text(s)).collect()),
                        ),
                    ])
                })
                .collect();
            let mut pairs = vec![
                (text("library_name"), text(&l.name)),
                (text("engine"), text("LUA")),
                (text("functions"), Frame::Array(functions)),
            ];
            if with_code {
                pairs.push((text("library_code"), Frame::Bulk(l.code.clone())));
            }
            Frame::Map(pairs)
        })
        .collect();
    Ok(Frame::Array(libraries))
}

/// FUNCTION RESTORE payload [FLUSH|APPEND|REPLACE].
fn restore(g: &Globals, args: &[Bytes]) -> Result<Frame, Frame> {
    if args.len() < 3 || args.len() > 4 {
        return Err(wrong_arity("function|restore"));
    }
    let policy =
        match args.get(3) {
            None => "append",
            Some(p) if is(p, "append") => "append",
            Some(p) if is(p, "replace") => "replace",
            Some(p) if is(p, "flush") => "flush",
            Some(_) => return Err(Frame::static_error(
                "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
            )),
        };
    let libraries = parse_dump(g, &args[2], true)?;
    let mut registry = g.functions.lock().expect("functions");
    if policy == "append" {
        if let Some(l) = libraries
            .iter()
            .find(|l| registry.libraries().any(|have| have.name == l.name))
        {
            return Err(Frame::error(format!(
                "ERR Library {} already exists",
                l.name
            )));
        }
    }
    // All or nothing: checked on a copy first.
    let mut trial = library::Registry::default();
    if policy != "flush" {
        for l in registry.libraries() {
            trial.add(l.clone(), false).map_err(Frame::error)?;
        }
    }
    for l in &libraries {
        trial
            .add(l.clone(), policy == "replace")
            .map_err(Frame::error)?;
    }
    if policy == "flush" {
        registry.clear();
    }
    for l in libraries {
        registry.add(l, policy != "append").map_err(Frame::error)?;
    }
    drop(registry);
    changed(g);
    Ok(Frame::ok())
}

fn stats(g: &Globals) -> Frame {
    let text = |s: &str| Frame::Bulk(Bytes::copy_from_slice(s.as_bytes()));
    let registry = g.functions.lock().expect("functions");
    let count = |n: usize| Frame::Integer(n as i64);
    Frame::Map(vec![
        (text("running_script"), Frame::Null),
        (
            text("engines"),
            Frame::Map(vec![(
                text("LUA"),
                Frame::Map(vec![
                    (text("libraries_count"), count(registry.libraries().count())),
                    (text("functions_count"), count(registry.function_count())),
                ]),
            )]),
        ),
    ])
}

/// FUNCTION HELP: Redis 7.2's text, line for line.
fn help() -> Frame {
    let lines = [
        "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "LOAD [REPLACE] <FUNCTION CODE>",
        "    Create a new library with the given library name and code.",
        "DELETE <LIBRARY NAME>",
        "    Delete the given library.",
        "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
        "    Return general information on all the libraries:",
        "    * Library name",
        "    * The engine used to run the Library",
        "    * Library description",
        "    * Functions list",
        "    * Library code (if WITHCODE is given)",
        "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
        "STATS",
        "    Return information about the current function running:",
        "    * Function name",
        "    * Command used to run the function",
        "    * Duration in MS that the function is running",
        "    If no function is running, return nil",
        "    In addition, returns a list of available engines.",
        "KILL",
        "    Kill the current running function.",
        "FLUSH [ASYNC|SYNC]",
        "    Delete all the libraries.",
        "    When called without the optional mode argument, the behavior is determined by the",
        "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
        "    * ASYNC: Asynchronously flush the libraries.",
        "    * SYNC: Synchronously flush the libraries.",
        "DUMP",
        "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
        "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
        "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
        "    control how to handle existing libraries (default APPEND):",
        "    * FLUSH: delete all existing libraries.",
        "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
        "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
        "      libraries with the new libraries (notice that even on this option there is a chance of failure",
        "      in case of functions name collision with another library).",
        "HELP",
        "    Print this help.",
    ];
    Frame::lines(&lines)
}
