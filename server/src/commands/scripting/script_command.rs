//! SCRIPT and its subcommands: LOAD, EXISTS, FLUSH, KILL, HELP.

use super::*;

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
