//! SHUTDOWN: its arguments, the save it may ask for first, and the drain.

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::args::is;
use wetask_shards::errors::SYNTAX;

use crate::clients::ConnState;
use crate::shard::ShardCtx;

/// SHUTDOWN SAVE compacts first (the journal alone would do: it is complete and synced at
/// exit, but a user who asks for a save expects a fast restart).
pub(super) async fn save_before_shutdown(ctx: &ShardCtx, args: &[Bytes]) -> Result<(), Frame> {
    let persisted = ctx.globals.store.get().is_some() || ctx.globals.dumps.get().is_some();
    let save = args[1..].iter().any(|a| is(a, "save"))
        && !args[1..].iter().any(|a| is(a, "nosave"))
        && persisted
        && !crate::lua::busy::any_busy(&ctx.globals.script_slots);
    if save && shutdown_args_valid(args) && super::persistence::save(ctx).await.is_error() {
        tracing::warn!("SHUTDOWN SAVE: the snapshot failed; not shutting down");
        return Err(Frame::static_error(
            "ERR Errors trying to SHUTDOWN. Check logs.",
        ));
    }
    Ok(())
}

/// SHUTDOWN's options are all known ones, and none is ABORT.
pub(super) fn shutdown_args_valid(args: &[Bytes]) -> bool {
    args[1..].iter().all(|arg| {
        ["nosave", "save", "now", "force"]
            .iter()
            .any(|o| is(arg, o))
    })
}

pub(super) fn shutdown(ctx: &ShardCtx, conn: &mut ConnState, args: &[Bytes]) -> Frame {
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
