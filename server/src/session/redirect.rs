//! What a node answers instead of running a command whose keys it does not serve, as a
//! Redis Cluster node does (cluster.c's `getNodeByQuery`): `-MOVED slot ip:port` for a slot
//! another node owns, `-ASK slot ip:port` for a missing key of a slot this node migrates,
//! `-CROSSSLOT` for keys of several slots that are not all here, `-TRYAGAIN` while some of
//! a multi-key command's keys have moved, and `-CLUSTERDOWN` for a slot nobody owns.
//!
//! Two WeTask rules (docs/COMPATIBILITY.md): keys of several slots that are all served by
//! this process's shards run, with hops (Redis refuses them with CROSSSLOT); and on a
//! shard's own port a command whose keys all live on one other local shard is sent there
//! with MOVED, so that cluster clients pay no hop.

use wetask_protocol::Frame;
use wetask_shards::request::{Owners, Request};
use wetask_shards::slot::{placement, Placement};

use crate::clients::ConnState;
use crate::cluster::view::Node;
use crate::shard::ShardCtx;

/// The answer while a MIGRATE is sending a name (WeTask's; Redis blocks instead). Cluster
/// clients retry any TRYAGAIN.
const IN_FLIGHT: &str = "TRYAGAIN the key is being migrated to another node, retry";

/// The redirect for `request` on this connection, or None when it runs here. `asking`:
/// the connection sent ASKING just before.
pub fn redirect(
    ctx: &ShardCtx,
    conn: &ConnState,
    request: &Request,
    asking: bool,
) -> Option<Frame> {
    // The common case, decided by the placement the parse made: every key on this shard,
    // or (on the shared port) every key on one local shard, nothing moving.
    match request.owners() {
        Owners::None => return None,
        Owners::One(owner) if !conn.shard_port || owner == ctx.id => return None,
        _ => {}
    }
    let keys = request.placed_keys();
    let first = keys.first()?.slot;
    let mut several_slots = false;
    let mut foreign = None;
    let mut shards = Vec::new();
    let mut migrating = None;
    for key in keys {
        several_slots |= key.slot != first;
        let shard = match placement(key.slot, ctx.shard_count) {
            Placement::Here(shard) => shard,
            Placement::Migrating(shard) if shard == ctx.id => {
                // MIGRATE moves the keys that are still here, whatever is missing.
                if request.spec().is_none_or(|spec| spec.name != "migrate") {
                    migrating = Some(key.slot);
                }
                shard
            }
            Placement::Importing(shard) if asking && (shard == ctx.id || !conn.shard_port) => shard,
            _ => {
                foreign.get_or_insert(key.slot);
                continue;
            }
        };
        if !shards.contains(&shard) {
            shards.push(shard);
        }
    }
    if let Some(slot) = foreign {
        if several_slots {
            return Some(Frame::static_error(
                "CROSSSLOT Keys in request don't hash to the same slot",
            ));
        }
        return Some(moved(ctx, conn, slot));
    }
    if conn.shard_port && shards.len() == 1 && shards[0] != ctx.id {
        return Some(moved(ctx, conn, first));
    }
    missing_here(ctx, conn, request, migrating?)
}

/// At EXEC, in cluster mode: the redirect (MOVED, ASK, TRYAGAIN …) for the first queued
/// command whose slot left this node since it was queued. The transaction is then discarded
/// and EXEC answers the redirect, as Redis's does (its `getNodeByQuery` checks every queued
/// command of an EXEC). ASKING sent before MULTI holds until here.
pub fn check_transaction(ctx: &ShardCtx, conn: &mut ConnState) -> Result<(), Frame> {
    let asking = std::mem::take(&mut conn.asking);
    if conn.multi_failed {
        return Ok(());
    }
    let queued = conn.multi.as_deref().unwrap_or_default();
    let Some(redirect) = queued.iter().find_map(|c| redirect(ctx, conn, c, asking)) else {
        return Ok(());
    };
    conn.multi = None;
    crate::shard::watch::release(ctx, std::mem::take(&mut conn.watched));
    Err(redirect)
}

/// On a slot this shard migrates: ASK when every key has left (or was never here),
/// TRYAGAIN while some have and some have not, or while one is on its way.
fn missing_here(ctx: &ShardCtx, conn: &ConnState, request: &Request, slot: u16) -> Option<Frame> {
    let keys = request.placed_keys();
    let in_flight = ctx.keys_in_flight.borrow();
    if !in_flight.is_empty()
        && keys
            .iter()
            .any(|k| in_flight.contains(&(conn.db, request.args[k.position as usize].clone())))
    {
        // A MIGRATE is sending the key: until the target has it, a write here would be
        // lost and a read there would miss it. Cluster clients retry TRYAGAIN.
        return Some(Frame::static_error(IN_FLIGHT));
    }
    drop(in_flight);
    // A name is here as a key, a queue, or a task id.
    let missing = {
        let mut shard = ctx.shard.borrow_mut();
        keys.iter()
            .filter(|k| {
                let name = &request.args[k.position as usize];
                !shard.exists(conn.db, name)
                    && !shard.tasks.has_queue(name)
                    && shard.tasks.get(name).is_none()
            })
            .count()
    };
    match missing {
        0 => None,
        // A queue of the slot is on its way: its tasks are neither here nor there yet.
        _ if ctx.slots_in_flight.borrow().contains_key(&slot) => {
            Some(Frame::static_error(IN_FLIGHT))
        }
        n if n == keys.len() => Some(ask(ctx, conn, slot)),
        _ => Some(Frame::static_error(
            "TRYAGAIN Multiple keys request during rehashing of slot",
        )),
    }
}

/// `-MOVED slot ip:port`: the local shard that serves the slot, or the owner this shard's
/// node knows, or CLUSTERDOWN when it knows none.
fn moved(ctx: &ShardCtx, conn: &ConnState, slot: u16) -> Frame {
    let cluster = ctx.globals.cluster.as_ref().expect("cluster mode");
    let host = cluster.host(&conn.laddr);
    let state = cluster.lock();
    let local = match placement(slot, ctx.shard_count) {
        Placement::Here(shard) | Placement::Migrating(shard) => Some(shard),
        _ => None,
    };
    let node = match local {
        Some(shard) => Some(state.views[shard].me()),
        None => state.views[ctx.id].owner(slot),
    };
    redirect_to("MOVED", slot, node, host)
}

/// `-<kind> slot ip:port` to `node` (`host` standing in for an address it does not know),
/// or CLUSTERDOWN when there is no node.
fn redirect_to(kind: &str, slot: u16, node: Option<&Node>, host: &str) -> Frame {
    match node {
        Some(node) => Frame::error(format!(
            "{kind} {slot} {}:{}",
            if node.ip.is_empty() { host } else { &node.ip },
            node.port
        )),
        None => Frame::static_error("CLUSTERDOWN Hash slot not served"),
    }
}

/// `-ASK slot ip:port`: the node this shard migrates the slot to.
fn ask(ctx: &ShardCtx, conn: &ConnState, slot: u16) -> Frame {
    let cluster = ctx.globals.cluster.as_ref().expect("cluster mode");
    let host = cluster.host(&conn.laddr);
    let state = cluster.lock();
    let view = &state.views[ctx.id];
    let target = view.migrating.get(&slot).and_then(|id| view.node(id));
    redirect_to("ASK", slot, target, host)
}
