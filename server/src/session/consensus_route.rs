//! Where a command runs in consensus mode (`shard::raft`): each shard's slot range is its own
//! Raft group, led by one node, and a command runs only on the shard port of the leader of
//! the one group it touches. Its effects then go through that group's log, and its reply
//! waits for that group's commit (`net::uring::sends`).
//!
//! So, unlike a plain cluster node (`super::redirect`), a node in consensus mode never runs a
//! command for another local shard with a hop: the hop's writes would skip the barrier of the
//! group they change (the reply waits on the connection's group), and a local shard that
//! only follows its group would change its copy on its own. Instead:
//!
//! * keys of one other shard: `-MOVED` to that group's leader, on that shard's port (this
//!   node's own, when it leads there too); keys of several shards: `-CROSSSLOT`, as Redis
//!   Cluster answers keys of several slots on different nodes;
//! * TASK.BATCH and TASK.FLOW belong to the group of their id, and every child, callback and
//!   id must live there too (hash tags put them together); TASK.CRON SET to its queue's;
//!   TASK.SUBMIT's FALLBACK queue must live with its queue (a dead task's fallback is made
//!   in the same group's log step);
//! * FLUSHALL, FLUSHDB and SWAPDB on the shared port would change every group: refused
//!   there; on a shard's port they change that shard's group, as a Redis Cluster node's
//!   cover its own slots;
//! * FUNCTION LOAD, DELETE, FLUSH and RESTORE change the libraries, which group 0's log
//!   carries (the metadata group): they run on shard 0 only, and count as keyless writes
//!   (refused on a node that does not lead group 0);
//! * then, on the group's own shard: a node that does not lead it answers `-MOVED` to the
//!   leader, `-TRYAGAIN` while it leads but has not applied its predecessors' entries, and
//!   `-CLUSTERDOWN` while no leader is known. A keyless write is refused; keyless reads
//!   (INFO, DBSIZE …) are served from this node's state, and so are keyed reads on a
//!   connection that sent READONLY (Redis Cluster's replica reads).
//!
//! The receiving side keeps the rule too (`shard::ShardCore::consensus_refuses`): a peer's
//! request that writes is refused on a node with several groups, so a path this file does
//! not know cannot change a group's copy outside its log.

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::args::is;
use wetask_shards::request::{Owners, Request};
use wetask_shards::spec::{flag, Route};

use crate::clients::ConnState;
use crate::consensus::Consensus;
use crate::shard::ShardCtx;

const CROSSSLOT: &str = "CROSSSLOT Keys in request don't hash to the same slot";
const METADATA_GROUP: &str = "ERR in consensus mode with several shards the function libraries live in the metadata group: send FUNCTION LOAD, DELETE, FLUSH and RESTORE to shard 0's port (CLUSTER SHARDS)";
const EVERY_GROUP: &str = "ERR in consensus mode with several shards this command would change every shard's group: send it to each shard's port (CLUSTER SHARDS)";

/// The redirect or refusal for `request` in consensus mode, or None when it runs here.
pub fn consensus(ctx: &ShardCtx, conn: &ConnState, request: &Request) -> Option<Frame> {
    let consensus = ctx.globals.consensus.as_ref()?;
    let replica_read = request
        .spec()
        .is_some_and(|spec| spec.has(flag::READONLY) && !spec.has(flag::BLOCKING));
    if ctx.shard_count > 1 {
        match group_of(ctx, conn, request) {
            Err(refusal) => return Some(refusal),
            Ok(Some((shard, _))) if shard != ctx.id && conn.replica_reads && replica_read => {
                // A read after READONLY: any local copy will do, perhaps stale.
                return None;
            }
            Ok(Some((shard, slot))) if shard != ctx.id => {
                return Some(moved(consensus, shard, slot));
            }
            Ok(_) => {}
        }
    }
    if consensus.serving(ctx.id) {
        return None;
    }
    if conn.replica_reads && replica_read {
        return None;
    }
    if matches!(request.owners(), Owners::None) {
        // EXEC runs what MULTI queued, checked when it was queued, perhaps under a leader.
        let writes = request.spec().is_some_and(|spec| {
            spec.has(flag::WRITE) || spec.name == "exec" || changes_functions(request)
        });
        return writes.then(|| Frame::static_error(crate::consensus::NOT_LEADER));
    }
    let slot = first_slot(request)?;
    let leader = consensus.groups[ctx.id]
        .leader
        .load(std::sync::atomic::Ordering::Relaxed);
    if leader == consensus.me {
        return Some(Frame::static_error(
            "TRYAGAIN This node leads its group but does not serve yet (just elected and catching up, or handing the leadership over); retry",
        ));
    }
    Some(moved(consensus, ctx.id, slot))
}

/// The slot of `request`'s first key: as the parse placed it, or from its first key
/// position (a fixed-key row on one shard keeps no placed keys).
fn first_slot(request: &Request) -> Option<u16> {
    match request.placed_keys().first() {
        Some(key) => Some(key.slot),
        None => {
            let position = *request.key_positions().first()?;
            Some(wetask_shards::slot::key_slot(&request.args[position]))
        }
    }
}

/// `-MOVED slot host:port` to the leader of `shard`'s group, or CLUSTERDOWN while it has
/// none.
fn moved(consensus: &Consensus, shard: usize, slot: u16) -> Frame {
    let leader = consensus.groups[shard]
        .leader
        .load(std::sync::atomic::Ordering::Relaxed);
    match consensus.shard_address(leader, shard) {
        Some((host, port)) => Frame::error(format!("MOVED {slot} {host}:{port}")),
        None => Frame::static_error("CLUSTERDOWN No leader is elected for this slot's group yet"),
    }
}

/// The shard whose group `request` touches and a slot of it to name in a redirect; `None`
/// for a command of no group (keyless, or one its handler will refuse); `Err` when it would
/// touch several groups.
fn group_of(
    ctx: &ShardCtx,
    conn: &ConnState,
    request: &Request,
) -> Result<Option<(usize, u16)>, Frame> {
    let Some(spec) = request.spec() else {
        return Ok(None);
    };
    let args = &request.args[..];
    match request.owners() {
        Owners::Several => return Err(Frame::static_error(CROSSSLOT)),
        Owners::One(shard) => {
            let Some(slot) = first_slot(request) else {
                return Ok(None);
            };
            if spec.name == "task.submit" {
                return task_submit(ctx, args, shard, slot).map(Some);
            }
            return Ok(Some((shard, slot)));
        }
        Owners::None => {}
    }
    match spec.name {
        "task.batch" | "task.flow" => {
            let Ok(plan) = wetask_shards::families::tasks::batch::plan(args) else {
                return Ok(None);
            };
            let mut names = vec![&plan.id];
            for task in plan
                .children
                .iter()
                .chain(plan.on_success.iter())
                .chain(plan.on_complete.iter())
            {
                names.extend([&task.queue, &task.id]);
            }
            one_group(ctx, names.into_iter()).map(Some)
        }
        "task.cron" if args.len() >= 6 && is(&args[1], "set") => {
            one_group(ctx, std::iter::once(&args[4])).map(Some)
        }
        "function" if ctx.id != 0 && changes_functions(request) => {
            Err(Frame::static_error(METADATA_GROUP))
        }
        _ if matches!(spec.route, Route::AllShards(_))
            && spec.has(flag::WRITE)
            && !conn.shard_port =>
        {
            Err(Frame::static_error(EVERY_GROUP))
        }
        _ => Ok(None),
    }
}

/// FUNCTION LOAD, DELETE, FLUSH or RESTORE: the metadata group's log carries the
/// libraries (`wetask_shards::shard::functions`).
fn changes_functions(request: &Request) -> bool {
    request.spec().is_some_and(|spec| spec.name == "function")
        && crate::commands::functions::changes_libraries(&request.args)
}

/// The one group that every name lives in (with the first name's slot), or CROSSSLOT.
fn one_group<'a>(
    ctx: &ShardCtx,
    mut names: impl Iterator<Item = &'a Bytes>,
) -> Result<(usize, u16), Frame> {
    let Some(first) = names.next() else {
        return Ok((ctx.id, 0));
    };
    let shard = ctx.owner_of(first);
    if names.any(|name| ctx.owner_of(name) != shard) {
        return Err(Frame::static_error(CROSSSLOT));
    }
    Ok((shard, wetask_shards::slot::key_slot(first)))
}

/// TASK.SUBMIT queue payload [options]: a FALLBACK queue must live in the queue's group.
/// Every argument after the payload that reads FALLBACK is taken for the option (a UNIQUE
/// or GROUP value spelled so, followed by a name of another shard, is refused too: the
/// safe side).
fn task_submit(
    ctx: &ShardCtx,
    args: &[Bytes],
    shard: usize,
    slot: u16,
) -> Result<(usize, u16), Frame> {
    let elsewhere = args
        .windows(2)
        .skip(3)
        .any(|pair| is(&pair[0], "fallback") && ctx.owner_of(&pair[1]) != shard);
    match elsewhere {
        true => Err(Frame::static_error(
            "CROSSSLOT in consensus mode a FALLBACK queue must live on its queue's shard (give both one hash tag)",
        )),
        false => Ok((shard, slot)),
    }
}
