//! `redis.call` and `redis.pcall`: a script's command checked (arity, flags, NOSCRIPT, a
//! read-only script's writes), run where its keys live (here, borrowed under the script's
//! locks, on a peer, or on every shard), and what a write owes (WATCH, tracking, the undo
//! a script that reaches for undeclared keys may need).

use super::convert::frame_to_lua;
use super::*;

/// Converts a Lua argument of `redis.call` to a command argument, as Redis does.
pub(super) fn argument(value: &Value) -> Option<Bytes> {
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

pub(super) async fn redis_call(
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
// Long: redis.call's checks in Redis's order (unknown command, arity, NOSCRIPT, read-only script, OOM, keys elsewhere), then where it runs; one list.
pub(super) async fn call_command(ctx: &Rc<ShardCtx>, args: MultiValue) -> Result<Frame, String> {
    let (spec, argv) = call_arguments(&args)?;
    // The call parsed once, as a client's command is (its SORT patterns, its keys).
    let command = wetask_shards::request::Request::with_spec(argv, spec, ctx.shard_count);
    let argv = &command.args;
    let (db, client, token, read_only, acl) = {
        let run = ctx.scripts.run.borrow();
        let run = run.as_ref().ok_or("ERR no script is running")?;
        if run.retry_whole {
            return Err(RETRY_WHOLE.into());
        }
        (
            run.db,
            run.client,
            run.token,
            run.read_only,
            run.acl.clone(),
        )
    };
    if let Some(acl) = acl {
        crate::access::check_script_call(ctx, &acl, spec, &command)?;
    }
    if read_only && spec.has(flag::WRITE) {
        return Err("ERR Write commands are not allowed from read-only scripts.".into());
    }
    if spec.has(flag::WRITE) {
        // A read-only replica, or too few good replicas (`replication::gate`).
        if let Some(refusal) = ctx.globals.replication.write_refusal() {
            return Err(refusal.into());
        }
    }
    if ctx.make_room(spec).is_err() {
        return Err(wetask_shards::errors::OOM.into());
    }
    // (Under an eviction policy the shard that runs the command makes room for it.)
    let at = Target { db, client };
    match spec.route {
        Route::Server if spec.has(flag::EMBEDDED) => {
            return Ok(call_embedded(ctx, spec, argv, db).await);
        }
        Route::Server => {
            return Err("ERR This Redis command is not allowed from script".into());
        }
        Route::AllShards(merge) => {
            let reply = call_everywhere(ctx, at, token, spec, argv, merge).await;
            return reply.map(|frame| counted(ctx, spec, frame));
        }
        Route::Keyed | Route::Split(_) => {}
    }
    let needed = undeclared_keys_to_borrow(ctx, spec, &command, db)?;
    let held = Held::resume(ctx, token, script_shards_held(ctx));
    if !needed.is_empty() {
        let got = borrow(&held, needed.into_iter()).await;
        if let Some(run) = ctx.scripts.run.borrow_mut().as_mut() {
            run.borrowed.extend(got);
        }
    }
    // A SORT whose patterns name keys anywhere (the script holds every shard by now):
    // those keys are borrowed too, and it runs as if every key were here.
    let sort_anywhere = crate::routing::cross::sort_reaches_elsewhere(ctx, &command);
    if sort_anywhere {
        let mut borrowed = ctx
            .scripts
            .run
            .borrow_mut()
            .as_mut()
            .map(|run| std::mem::take(&mut run.borrowed))
            .unwrap_or_default();
        crate::routing::cross::borrow_sort_patterns(&held, &mut borrowed, db, &command).await;
        if let Some(run) = ctx.scripts.run.borrow_mut().as_mut() {
            run.borrowed = borrowed;
        }
    }
    if spec.has(flag::WRITE) {
        note_write(ctx, spec, argv, db);
    }
    if spec.has(flag::TASK) {
        let shard = command
            .key_owners(ctx.shard_count)
            .first()
            .map_or(ctx.id, |&(_, owner)| owner);
        if shard != ctx.id {
            return Ok(counted(
                ctx,
                spec,
                exec_request_on(&held, shard, at, spec, &command).await,
            ));
        }
    }
    let frame = if sort_anywhere {
        ctx.shard
            .borrow_mut()
            .execute_all_here(db, client, spec, &command)
    } else {
        ctx.shard
            .borrow_mut()
            .execute_request(db, client, spec, &command, None)
    };
    Ok(counted(ctx, spec, frame))
}

/// A `redis.call` of an embedded server command (SELECT, PING, PUBLISH …).
pub(super) async fn call_embedded(
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
pub(super) fn note_write(ctx: &ShardCtx, spec: &CommandSpec, argv: &[Bytes], db: usize) {
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
pub(super) fn remember_before_write(ctx: &ShardCtx, spec: &CommandSpec, argv: &[Bytes], db: usize) {
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
pub(super) fn other_db_target(spec: &CommandSpec, argv: &[Bytes]) -> Option<(usize, Bytes)> {
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
pub(super) fn mark_irreversible(ctx: &ShardCtx) {
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
pub(super) fn counted(ctx: &ShardCtx, spec: &'static CommandSpec, frame: Frame) -> Frame {
    ctx.stats.record(spec, frame.is_error());
    frame
}

/// A `redis.call`'s arguments as a command: looked up, its arity checked, and allowed
/// from a script.
pub(super) fn call_arguments(
    args: &MultiValue,
) -> Result<(&'static CommandSpec, Vec<Bytes>), String> {
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
pub(super) fn stream_read_blocks(argv: &[Bytes]) -> bool {
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
pub(super) fn script_shards_held(ctx: &ShardCtx) -> Vec<usize> {
    ctx.scripts
        .run
        .borrow()
        .as_ref()
        .map(|r| r.shards.clone())
        .unwrap_or_default()
}

/// Runs one command on `shard` under the script's locks.
pub(super) async fn exec_on(
    held: &Held<'_>,
    shard: usize,
    at: Target,
    spec: &'static CommandSpec,
    argv: &[Bytes],
) -> Frame {
    let request = Request::Keys(KeyRequest::Exec {
        db: at.db,
        client: at.client,
        commands: crate::mesh::ShardCommands::one(spec.index(), argv.to_vec()),
    });
    crate::routing::single_reply(crate::routing::cross::on(held, shard, request).await)
}

/// Runs `command` on `shard` under the script's locks, with its parse (no key finder runs
/// again there).
async fn exec_request_on(
    held: &Held<'_>,
    shard: usize,
    at: Target,
    spec: &'static CommandSpec,
    command: &wetask_shards::request::Request,
) -> Frame {
    let request = Request::Keys(KeyRequest::ExecParsed {
        db: at.db,
        client: at.client,
        spec: spec.index(),
        request: Box::new(command.clone()),
    });
    crate::routing::single_reply(crate::routing::cross::on(held, shard, request).await)
}

/// A command that runs on every shard (FLUSHALL, DBSIZE …), from a script that must hold
/// them all.
pub(super) async fn call_everywhere(
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
pub(super) fn undeclared_keys_to_borrow(
    ctx: &ShardCtx,
    spec: &CommandSpec,
    command: &wetask_shards::request::Request,
    db: usize,
) -> Result<Vec<(usize, Bytes)>, String> {
    let argv = &command.args[..];
    let mut needed = Vec::new();
    let mut run = ctx.scripts.run.borrow_mut();
    let run = run.as_mut().ok_or("ERR no script is running")?;
    // A SORT whose patterns name keys anywhere needs every shard, as a key of each would.
    let everywhere = crate::routing::cross::sort_reaches_elsewhere(ctx, command);
    for (i, shard) in command.key_owners(ctx.shard_count) {
        let key = &argv[i];
        let declared = run.declared.iter().any(|k| k == key);
        let all_open = (0..ctx.shard_count).all(|s| run.open_shards.contains(&s));
        let elsewhere =
            (!declared && !run.open_shards.contains(&shard)) || (everywhere && !all_open);
        if elsewhere && ctx.globals.consensus.is_some() {
            // Consensus mode: another shard is another group, whose writes this script's
            // group cannot carry (`script_shards`).
            return Err(format!(
                "ERR Script attempted to access key '{}', which lives in another shard's group: in consensus mode a script stays in its own group (give its keys one hash tag)",
                String::from_utf8_lossy(key)
            ));
        }
        if elsewhere {
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

pub(super) fn mark_written(ctx: &ShardCtx) {
    if let Some(run) = ctx.scripts.run.borrow_mut().as_mut() {
        run.wrote = true;
    }
    ctx.globals.script_slots[ctx.id]
        .wrote
        .store(true, std::sync::atomic::Ordering::Release);
}
