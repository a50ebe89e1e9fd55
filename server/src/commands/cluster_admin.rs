//! CLUSTER's subcommands that change a node's view (`crate::cluster::view`): MEET,
//! ADDSLOTS[RANGE], DELSLOTS[RANGE], SETSLOT, SET-CONFIG-EPOCH, BUMPEPOCH, FORGET, RESET,
//! SAVECONFIG, and COUNT-FAILURE-REPORTS. Each acts on the node of the shard that serves the
//! connection (send them to a shard's own port, as `redis-cli --cluster` does), and the
//! change is written to `cluster-config-file` before the reply (`Cluster::change`).
//! Replicas and failover are the replication issue's: REPLICATE and FAILOVER say so.

use std::rc::Rc;

use crate::mesh::{KeyRequest, Request, Response};
use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::args::{is, parse_i64};
use wetask_shards::slot::{key_slot, placement, Placement, SLOT_COUNT};

const BAD_SLOT: &str = "ERR Invalid or out of range slot";

use crate::cluster::{bus::valid_id, now_ms, Cluster};
use crate::shard::ShardCtx;

/// CLUSTER `args[1]` for a subcommand that is not a description.
pub async fn change(ctx: &Rc<ShardCtx>, cluster: &Cluster, args: &[Bytes]) -> Frame {
    let me = ctx.id;
    let sub = &args[1];
    let rest = &args[2..];
    let result = if is(sub, "meet") && (2..=3).contains(&rest.len()) {
        meet(cluster, me, rest)
    } else if is(sub, "addslots") && !rest.is_empty() {
        slots_of(rest).and_then(|slots| cluster.change(me, |v| v.add_slots(&slots)))
    } else if is(sub, "delslots") && !rest.is_empty() {
        slots_of(rest).and_then(|slots| cluster.change(me, |v| v.del_slots(&slots)))
    } else if is(sub, "addslotsrange") && !rest.is_empty() {
        ranges_of(rest, "addslotsrange")
            .and_then(|slots| cluster.change(me, |v| v.add_slots(&slots)))
    } else if is(sub, "delslotsrange") && !rest.is_empty() {
        ranges_of(rest, "delslotsrange")
            .and_then(|slots| cluster.change(me, |v| v.del_slots(&slots)))
    } else if is(sub, "setslot") && (2..=3).contains(&rest.len()) {
        return setslot(ctx, cluster, rest).await;
    } else if is(sub, "set-config-epoch") && rest.len() == 1 {
        match parse_i64(&rest[0]).filter(|&e| e >= 0) {
            Some(epoch) => cluster.change(me, |v| v.set_config_epoch(epoch as u64)),
            None => Err(format!(
                "ERR Invalid config epoch specified: {}",
                String::from_utf8_lossy(&rest[0])
            )),
        }
    } else if is(sub, "bumpepoch") && rest.is_empty() {
        return match cluster.change(me, |v| Ok((v.bump_epoch(), v.me().epoch))) {
            Ok((true, epoch)) => Frame::Simple(Bytes::from(format!("BUMPED {epoch}"))),
            Ok((false, epoch)) => Frame::Simple(Bytes::from(format!("STILL {epoch}"))),
            Err(e) => Frame::error(e),
        };
    } else if is(sub, "forget") && rest.len() == 1 {
        let id = String::from_utf8_lossy(&rest[0]).into_owned();
        cluster.change(me, |v| v.forget(&id, now_ms()))
    } else if is(sub, "reset") && rest.len() <= 1 {
        return reset(ctx, cluster, rest);
    } else if is(sub, "saveconfig") && rest.is_empty() {
        cluster.change(me, |_| Ok(()))
    } else if is(sub, "count-failure-reports") && rest.len() == 1 {
        // No failure detector (docs/CLUSTER.md): a known node has no reports.
        let id = String::from_utf8_lossy(&rest[0]);
        return match cluster.lock().views[me].node(&id) {
            Some(_) => Frame::Integer(0),
            None => Frame::error(format!("ERR Unknown node {id}")),
        };
    } else if is(sub, "replicas") || is(sub, "slaves") {
        return Frame::Array(Vec::new());
    } else if is(sub, "replicate") || is(sub, "failover") {
        Err(format!(
            "ERR CLUSTER {} is not supported yet: every WeTask node is a primary; replicas and failover come with replication (docs/CLUSTER.md)",
            String::from_utf8_lossy(sub).to_ascii_uppercase()
        ))
    } else {
        Err(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLUSTER HELP.",
            String::from_utf8_lossy(sub)
        ))
    };
    match result {
        Ok(()) => Frame::ok(),
        Err(e) => Frame::error(e),
    }
}

/// CLUSTER MEET ip port [bus-port]: the bus greets the address (`cluster::bus`); the node
/// joins the view when it answers.
fn meet(cluster: &Cluster, me: usize, rest: &[Bytes]) -> Result<(), String> {
    let ip = String::from_utf8_lossy(&rest[0]).into_owned();
    let port = parse_i64(&rest[1]).filter(|p| (1..=65535).contains(p));
    let cport = match rest.get(2) {
        Some(arg) => parse_i64(arg).filter(|p| (1..=65535).contains(p)),
        None => port.map(|p| p + 10000).filter(|p| *p <= 65535),
    };
    let (Ok(address), Some(port), Some(cport)) = (ip.parse::<std::net::IpAddr>(), port, cport)
    else {
        return Err(format!(
            "ERR Invalid node address specified: {ip}:{}",
            String::from_utf8_lossy(&rest[1])
        ));
    };
    let ip = address.to_string();
    let placeholder = Cluster::new_id();
    let mut state = cluster.lock();
    state.met_ms.insert(placeholder.clone(), now_ms());
    state.views[me].meet(&ip, port as u16, cport as u16, placeholder);
    cluster.commit(state)
}

/// ADDSLOTS' and DELSLOTS' arguments: slots.
fn slots_of(args: &[Bytes]) -> Result<Vec<u16>, String> {
    args.iter()
        .map(|arg| slot_arg(arg).map_err(error_text))
        .collect()
}

/// ADDSLOTSRANGE's and DELSLOTSRANGE's arguments: pairs of first and last slots.
fn ranges_of(args: &[Bytes], sub: &str) -> Result<Vec<u16>, String> {
    if !args.len().is_multiple_of(2) {
        return Err(format!(
            "ERR wrong number of arguments for 'cluster|{sub}' command"
        ));
    }
    let mut slots = Vec::new();
    for pair in args.chunks_exact(2) {
        let first = slot_arg(&pair[0]).map_err(error_text)?;
        let last = slot_arg(&pair[1]).map_err(error_text)?;
        if first > last {
            return Err(format!(
                "ERR start slot number {first} is greater than end slot number {last}"
            ));
        }
        slots.extend(first..=last);
    }
    Ok(slots)
}

fn error_text(frame: Frame) -> String {
    match frame {
        Frame::Error(text) => String::from_utf8_lossy(&text).into_owned(),
        _ => "ERR Invalid or out of range slot".into(),
    }
}

/// CLUSTER SETSLOT slot IMPORTING id | MIGRATING id | STABLE | NODE id.
async fn setslot(ctx: &Rc<ShardCtx>, cluster: &Cluster, rest: &[Bytes]) -> Frame {
    let me = ctx.id;
    let slot = match slot_arg(&rest[0]) {
        Ok(slot) => slot,
        Err(err) => return err,
    };
    let id = rest
        .get(2)
        .map(|id| String::from_utf8_lossy(id).into_owned());
    let action = &rest[1];
    let result = match (id, rest.len()) {
        (None, 2) if is(action, "stable") => cluster.change(me, |v| {
            v.set_stable(slot);
            Ok(())
        }),
        (Some(id), 3) if is(action, "importing") => {
            cluster.change(me, |v| v.set_importing(slot, &id))
        }
        (Some(id), 3) if is(action, "migrating") => {
            cluster.change(me, |v| v.set_migrating(slot, &id))
        }
        (Some(id), 3) if is(action, "node") => {
            if !valid_id(&id) {
                return Frame::error(format!("ERR Unknown node {id}"));
            }
            // The keys this node still holds in the slot decide whether it may give it up.
            let held = held_in_slot(ctx, slot).await;
            cluster.change(me, |v| v.set_node(slot, &id, held))
        }
        _ => Err(
            "ERR Invalid CLUSTER SETSLOT action or number of arguments. Try CLUSTER HELP".into(),
        ),
    };
    match result {
        Ok(()) => Frame::ok(),
        Err(e) => Frame::error(e),
    }
}

/// CLUSTER RESET [HARD|SOFT]: refused while this node holds keys, as Redis refuses it on a
/// primary with keys.
fn reset(ctx: &ShardCtx, cluster: &Cluster, rest: &[Bytes]) -> Frame {
    let hard = match rest.first() {
        None => false,
        Some(mode) if is(mode, "soft") => false,
        Some(mode) if is(mode, "hard") => true,
        Some(_) => return Frame::static_error("ERR CLUSTER RESET only accepts HARD or SOFT"),
    };
    if !ctx.shard.borrow_mut().db(0).is_empty() {
        return Frame::static_error(
            "ERR CLUSTER RESET can't be called with master nodes containing keys",
        );
    }
    match cluster.change(ctx.id, |v| {
        v.reset(hard, Cluster::new_id());
        Ok(())
    }) {
        Ok(()) => Frame::ok(),
        Err(e) => Frame::error(e),
    }
}

pub fn slot_arg(arg: &[u8]) -> Result<u16, Frame> {
    match wetask_shards::args::parse_i64(arg) {
        Some(slot) if (0..i64::from(SLOT_COUNT)).contains(&slot) => Ok(slot as u16),
        _ => Err(Frame::static_error(BAD_SLOT)),
    }
}

/// How many keys of every database, and queues, `slot` holds here. SELECT works in cluster
/// mode (docs/COMPATIBILITY.md) but reshard moves database 0, so a slot with keys in another
/// database is not given up: SETSLOT NODE refuses, rather than strand them.
async fn held_in_slot(ctx: &Rc<ShardCtx>, slot: u16) -> usize {
    let mut held = keys_in_slot(ctx, slot, 0).await.0;
    let Some(owner) = local_owner(slot, ctx.shard_count) else {
        return held;
    };
    for db in 1..wetask_shards::keyspace::DATABASES {
        held += keys_in_slot_on(ctx, owner, db, slot, 0).await.0;
    }
    held
}

/// The local shard that owns, migrates or imports `slot`; None when another node serves it.
fn local_owner(slot: u16, shard_count: usize) -> Option<usize> {
    match placement(slot, shard_count) {
        Placement::Here(shard) | Placement::Migrating(shard) | Placement::Importing(shard) => {
            Some(shard)
        }
        Placement::Elsewhere => None,
    }
}

/// `Shard::keys_in_slot` of database `db` on local shard `owner`: here, or through the mesh.
async fn keys_in_slot_on(
    ctx: &Rc<ShardCtx>,
    owner: usize,
    db: usize,
    slot: u16,
    count: usize,
) -> (usize, Vec<Bytes>) {
    if owner == ctx.id {
        return ctx.shard.borrow().keys_in_slot(db, slot, count);
    }
    let request = Request::Keys(KeyRequest::InSlot { db, slot, count });
    match ctx.request(owner, request).await {
        Response::InSlot(held, keys) => (held, keys),
        _ => (0, Vec::new()),
    }
}

/// How many keys and queues of database 0 `slot` holds, and up to `count` of them, from the
/// local shard that owns or imports it (none when another node serves it). Keys come from
/// that shard's slot index (`Shard::keys_in_slot`), queues from its list of queue names: a
/// queue is a key of its slot here, and MIGRATE moves it with its tasks.
pub async fn keys_in_slot(ctx: &Rc<ShardCtx>, slot: u16, count: usize) -> (usize, Vec<Bytes>) {
    let Some(owner) = local_owner(slot, ctx.shard_count) else {
        return (0, Vec::new());
    };
    let (mut held, mut keys) = keys_in_slot_on(ctx, owner, 0, slot, count).await;
    let queues = if owner == ctx.id {
        ctx.shard.borrow().tasks.queue_names()
    } else {
        let spec = wetask_shards::table::lookup(b"task.queues").expect("a row");
        let at = crate::routing::Target { db: 0, client: 0 };
        let args = vec![Bytes::from_static(b"TASK.QUEUES")];
        match crate::routing::single_reply(
            crate::routing::send_one(ctx, owner, at, spec, args).await,
        ) {
            Frame::Array(names) => names
                .into_iter()
                .filter_map(|n| n.as_bytes().cloned())
                .collect(),
            _ => Vec::new(),
        }
    };
    for queue in queues {
        // A queue counts as one more key; a name both a key and a queue is listed once
        // (MIGRATE moves both).
        if key_slot(&queue) == slot {
            held += 1;
            if keys.len() < count && !keys.contains(&queue) {
                keys.push(queue);
            }
        }
    }
    (held, keys)
}
