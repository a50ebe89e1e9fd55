//! The server commands flagged `EMBEDDED` (SELECT, PING, ECHO, TIME, PUBLISH, SPUBLISH, WAIT,
//! LOLWUT):
//! one implementation, whether a client sends them, EXEC runs them from its queue or a
//! script calls them.

use std::cell::RefCell;

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::errors::wrong_arity;
use wetask_shards::table::{flag, CommandSpec};

use crate::clients::ConnState;
use crate::globals::unix_us;
use crate::shard::ShardCtx;

/// [`run_embedded`] on a connection's selected database (a client's command, or one EXEC
/// runs from its queue).
pub async fn run_embedded_for(
    ctx: &ShardCtx,
    conn: &RefCell<ConnState>,
    spec: &CommandSpec,
    args: &[Bytes],
) -> Frame {
    let mut db = conn.borrow().db;
    let frame = run_embedded(ctx, spec, args, &mut db).await;
    conn.borrow_mut().db = db;
    frame
}

/// The server commands flagged `EMBEDDED` (SELECT, PING, ECHO, TIME, PUBLISH, SPUBLISH):
/// one implementation, whether a client sends them, EXEC runs them from its queue or a
/// script calls them. `db` is the caller's selected database; SELECT changes it.
pub async fn run_embedded(
    ctx: &ShardCtx,
    spec: &CommandSpec,
    args: &[Bytes],
    db: &mut usize,
) -> Frame {
    debug_assert!(spec.has(flag::EMBEDDED), "{} is not embedded", spec.name);
    match spec.name {
        "select" => match wetask_shards::keyspace::db_index(&args[1]) {
            Ok(index) => {
                *db = index;
                Frame::ok()
            }
            Err(err) => err,
        },
        "ping" => ping(args),
        "echo" => Frame::Bulk(args[1].clone()),
        "time" => time(),
        "publish" => crate::commands::pubsub::publish(ctx, args, false).await,
        "spublish" => crate::commands::pubsub::publish(ctx, args, true).await,
        "lolwut" => lolwut(ctx, args),
        // Inside EXEC or a script WAIT does not block (Redis 7.2): the replicas that have
        // the writes now, of which there are none.
        "wait" => match crate::commands::replication::parse_wait(args) {
            Ok(_) => Frame::Integer(0),
            Err(err) => err,
        },
        other => Frame::error(format!("ERR '{other}' is flagged embedded but not handled")),
    }
}

/// TIME: unix seconds and microseconds.
pub fn time() -> Frame {
    let now = unix_us();
    Frame::Array(vec![
        Frame::Bulk(Bytes::from((now / 1_000_000).to_string())),
        Frame::Bulk(Bytes::from((now % 1_000_000).to_string())),
    ])
}

pub fn ping(args: &[Bytes]) -> Frame {
    match args.len() {
        1 => Frame::simple("PONG"),
        2 => Frame::Bulk(args[1].clone()),
        _ => wrong_arity("ping"),
    }
}

/// LOLWUT [VERSION v]: what Redis answers for a version it has no art for (Redis 7's own,
/// and any but 5 and 6): the server's version line. Versions 5 and 6 get it too; their art
/// (Schotter, the skyline) is not drawn (docs/COMPATIBILITY.md). `v` must be an integer,
/// as in Redis.
fn lolwut(ctx: &ShardCtx, args: &[Bytes]) -> Frame {
    if let [_, word, v, ..] = args {
        if wetask_shards::args::is(word, "version") && wetask_shards::args::parse_i64(v).is_none() {
            return Frame::static_error("ERR value is not an integer or out of range");
        }
    }
    let version = &ctx.globals.config.announce_version;
    Frame::Verbatim(*b"txt", Bytes::from(format!("Redis ver. {version}\n")))
}
