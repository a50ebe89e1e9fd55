//! The administration commands a transaction may hold, so that Redis Sentinel can fail a
//! WeTask primary over: its failover sends each instance it reconfigures
//! `MULTI`, `SLAVEOF host port` (or `NO ONE`), `CONFIG REWRITE`, `CLIENT KILL TYPE normal`,
//! `CLIENT KILL TYPE pubsub`, `EXEC`, and gives up when the transaction is refused.
//!
//! A transaction of such commands (with PING, ECHO and the other commands EXEC runs with
//! the client's code) runs them at EXEC in order, each as it runs outside a transaction.
//! Key commands run under the shard locks EXEC takes (`transaction`), and these reach every
//! shard (CLIENT KILL) or change the node (REPLICAOF), so the two do not mix: a transaction
//! that would hold both, or WATCH keys as well, is refused, as a command not allowed inside
//! a transaction is.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::args::is;
use wetask_shards::request::Request as Command;
use wetask_shards::table::{flag, CommandSpec};

use crate::clients::ConnState;
use crate::shard::ShardCtx;

/// The commands (and CLIENT's subcommands) a transaction may hold.
const ADMIN: &[&str] = &["replicaof", "slaveof", "config", "client", "info", "role"];
const CLIENT: &[&str] = &["kill", "setname", "getname", "id", "info", "list"];

const MIXED: &str = "ERR in a transaction, REPLICAOF, CONFIG, CLIENT, INFO and ROLE run only with each other (and PING, ECHO …), not with key commands or WATCH";

/// Whether `spec` with `args` is one of the administration commands above.
pub fn is_admin(spec: &CommandSpec, args: &[Bytes]) -> bool {
    if !ADMIN.contains(&spec.name) {
        return false;
    }
    spec.name != "client"
        || args
            .get(1)
            .is_some_and(|sub| CLIENT.iter().any(|c| is(sub, c)))
}

/// A command that runs with the client's code inside a transaction: it mixes with either.
fn embedded(spec: &CommandSpec) -> bool {
    spec.has(flag::EMBEDDED)
}

/// Whether a command may join `queued`: administration commands only with each other.
/// The first command that is not embedded decides which kind the transaction is (a mix
/// never gets in), so only the commands before it are looked at.
pub fn fits(queued: &[Command], spec: &CommandSpec, args: &[Bytes]) -> Result<(), Frame> {
    if embedded(spec) {
        return Ok(());
    }
    let first = queued
        .iter()
        .find_map(|c| c.spec().filter(|other| !embedded(other)).map(|s| (s, c)));
    match first {
        Some((other, c)) if is_admin(other, &c.args) != is_admin(spec, args) => {
            Err(Frame::static_error(MIXED))
        }
        _ => Ok(()),
    }
}

/// Whether `queued` is a transaction of administration commands.
pub fn holds_admin(queued: &[Command]) -> bool {
    queued
        .iter()
        .any(|c| c.spec().is_some_and(|spec| is_admin(spec, &c.args)))
}

/// EXEC of a transaction of administration commands: each runs in order, as it would
/// alone. `watching`: the connection WATCHes keys, which such a transaction cannot check.
pub async fn exec(
    ctx: &Rc<ShardCtx>,
    conn: &Rc<RefCell<ConnState>>,
    queued: Vec<Command>,
    watching: bool,
) -> Frame {
    if watching {
        return Frame::static_error(MIXED);
    }
    let mut frames = Vec::with_capacity(queued.len());
    for command in &queued {
        let spec = command.spec().expect("checked when queued");
        let args = &command.args[..];
        let frame = match spec.name {
            _ if embedded(spec) => super::embedded::run_embedded_for(ctx, conn, spec, args).await,
            "replicaof" | "slaveof" => super::replication::replicaof(ctx, args),
            "config" => super::config::config(ctx, args).await,
            "client" => super::client::client(ctx, conn, args).await,
            "info" => super::info::info(ctx, args).await,
            "role" => super::replication::role(ctx),
            _ => Frame::static_error("ERR Command not allowed inside a transaction"),
        };
        ctx.stats.record(spec, frame.is_error());
        frames.push(frame);
    }
    Frame::Array(frames)
}
