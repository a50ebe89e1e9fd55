//! CLUSTER's descriptive subcommands, ASKING, READONLY and READWRITE (`crate::cluster`,
//! docs/CLUSTER.md). Each shard is a Redis Cluster primary with its own view of the
//! cluster; a subcommand answers from the view of the shard that serves the connection (on
//! a shard's own port, that shard's node). The subcommands that change a view (MEET,
//! ADDSLOTS, SETSLOT …) are in `cluster_admin`. With cluster mode off, CLUSTER answers as
//! Redis does: cluster support is disabled.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::args::is;
use wetask_shards::slot::{key_slot, SLOT_COUNT};

use super::cluster_admin::{keys_in_slot, slot_arg};
use crate::clients::ConnState;
use crate::cluster::bus::LINK_TIMEOUT_MS;
use crate::cluster::conf::nodes_text;
use crate::cluster::view::{Node, View};
use crate::cluster::{now_ms, Cluster};
use crate::shard::ShardCtx;

pub const DISABLED: &str = "ERR This instance has cluster support disabled";

/// CLUSTER `args[1]` …
pub async fn cluster(ctx: &Rc<ShardCtx>, conn: &Rc<RefCell<ConnState>>, args: &[Bytes]) -> Frame {
    let Some(cluster) = ctx.globals.cluster.as_ref() else {
        return Frame::static_error(DISABLED);
    };
    if let Some(consensus) = ctx.globals.consensus.as_ref() {
        if let Some(frame) = super::cluster_raft::answer(consensus, ctx.id, ctx.shard_count, args) {
            return frame;
        }
    }
    let local = conn.borrow().laddr.clone();
    let host = cluster.host(&local).to_string();
    let me = ctx.id;
    let sub = &args[1];
    match args.len() {
        2 if is(sub, "info") => info(cluster, me),
        2 if is(sub, "myid") || is(sub, "myshardid") => {
            Frame::bulk(cluster.lock().views[me].me().id.clone())
        }
        2 if is(sub, "slots") => slots(&cluster.lock().views[me], &host),
        2 if is(sub, "shards") => shards(&cluster.lock().views[me], &host),
        2 if is(sub, "nodes") => {
            let now = now_ms();
            let text = nodes_text(&cluster.lock().views[me], &host, |n| linked(n, now));
            Frame::Verbatim(*b"txt", Bytes::from(text))
        }
        // The bus keeps no per-link buffers worth reporting.
        2 if is(sub, "links") => Frame::Array(Vec::new()),
        3 if is(sub, "keyslot") => Frame::Integer(i64::from(key_slot(&args[2]))),
        3 if is(sub, "countkeysinslot") => match slot_arg(&args[2]) {
            Ok(slot) => Frame::Integer(keys_in_slot(ctx, slot, 0).await.0 as i64),
            Err(err) => err,
        },
        4 if is(sub, "getkeysinslot") => {
            let (slot, count) = match (slot_arg(&args[2]), count_arg(&args[3])) {
                (Ok(slot), Ok(count)) => (slot, count),
                (Err(err), _) | (_, Err(err)) => return err,
            };
            let (_, keys) = keys_in_slot(ctx, slot, count).await;
            Frame::Array(keys.into_iter().map(Frame::Bulk).collect())
        }
        2 if is(sub, "help") => help(),
        _ => super::cluster_admin::change(ctx, cluster, args).await,
    }
}

fn help() -> Frame {
    let lines = [
        "CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "ADDSLOTS <slot> [<slot> ...]",
        "    Assign slots to current node.",
        "ADDSLOTSRANGE <start slot> <end slot> [<start slot> <end slot> ...]",
        "    Assign slots which are between <start-slot> and <end-slot> to current node.",
        "BUMPEPOCH",
        "    Advance the cluster config epoch.",
        "COUNT-FAILURE-REPORTS <node-id>",
        "    Return number of failure reports for <node-id>.",
        "COUNTKEYSINSLOT <slot>",
        "    Return the number of keys in <slot>.",
        "DELSLOTS <slot> [<slot> ...]",
        "    Delete slots information from current node.",
        "DELSLOTSRANGE <start slot> <end slot> [<start slot> <end slot> ...]",
        "    Delete slots information which are between <start-slot> and <end-slot> from current node.",
        "FORGET <node-id>",
        "    Remove a node from the cluster.",
        "GETKEYSINSLOT <slot> <count>",
        "    Return key names stored by current node in a slot.",
        "INFO",
        "    Return information about the cluster.",
        "KEYSLOT <key>",
        "    Return the hash slot for <key>.",
        "LINKS",
        "    Return information about all network links between this node and its peers.",
        "MEET <ip> <port> [<bus-port>]",
        "    Connect nodes into a working cluster.",
        "MYID",
        "    Return the node id.",
        "MYSHARDID",
        "    Return the node's shard id.",
        "NODES",
        "    Return cluster configuration seen by node. Output format:",
        "    <id> <ip:port@bus-port> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
        "RESET [HARD|SOFT]",
        "    Reset current node (default: soft).",
        "SAVECONFIG",
        "    Force saving cluster configuration on disk.",
        "SET-CONFIG-EPOCH <epoch>",
        "    Set config epoch of current node.",
        "SETSLOT <slot> (IMPORTING <node-id>|MIGRATING <node-id>|STABLE|NODE <node-id>)",
        "    Set slot state.",
        "SHARDS",
        "    Return information about slot range mappings and the nodes associated with them.",
        "SLOTS",
        "    Return information about slots range mappings. Each range is made of:",
        "    start, end, master and replicas IP addresses, ports and ids",
        "HELP",
        "    Print this help.",
    ];
    super::config::help_lines(&lines)
}

/// ASKING (the next command may use a slot this node imports), READONLY and READWRITE
/// (accepted: every node is a primary).
pub fn accept(ctx: &ShardCtx, conn: &Rc<RefCell<ConnState>>, name: &str) -> Frame {
    if ctx.globals.cluster.is_none() {
        return Frame::static_error(DISABLED);
    }
    match name {
        "asking" => conn.borrow_mut().asking = true,
        "readonly" => conn.borrow_mut().replica_reads = true,
        "readwrite" => conn.borrow_mut().replica_reads = false,
        _ => {}
    }
    Frame::ok()
}

/// Whether `node`'s bus link is up: heard from lately.
fn linked(node: &Node, now: u64) -> bool {
    node.seen_ms + LINK_TIMEOUT_MS >= now
}

fn info(cluster: &Cluster, me: usize) -> Frame {
    use std::sync::atomic::Ordering::Relaxed;
    let state = cluster.lock();
    let view = &state.views[me];
    let assigned = view.assigned();
    let ok = if assigned == usize::from(SLOT_COUNT) {
        "ok"
    } else {
        "fail"
    };
    let text = format!(
        "cluster_state:{ok}\r\ncluster_slots_assigned:{assigned}\r\ncluster_slots_ok:{assigned}\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:{}\r\ncluster_size:{}\r\ncluster_current_epoch:{}\r\ncluster_my_epoch:{}\r\ncluster_stats_messages_sent:{}\r\ncluster_stats_messages_received:{}\r\ntotal_cluster_links_buffer_limit_exceeded:0\r\n",
        view.nodes.len(),
        view.primaries_with_slots(),
        view.current_epoch,
        view.me().epoch,
        cluster.counters.sent.load(Relaxed),
        cluster.counters.received.load(Relaxed),
    );
    Frame::Verbatim(*b"txt", Bytes::from(text))
}

/// A node's address as clients are told it.
fn ip_of<'a>(node: &'a Node, host: &'a str) -> &'a str {
    if node.ip.is_empty() {
        host
    } else {
        &node.ip
    }
}

/// CLUSTER SLOTS: per range of one owner, `[first, last, [ip, port, id, {}]]`, in slot
/// order.
fn slots(view: &View, host: &str) -> Frame {
    let mut ranges: Vec<(u16, u16, usize)> = (0..view.nodes.len())
        .flat_map(|index| {
            view.ranges_of(index)
                .into_iter()
                .map(move |(a, b)| (a, b, index))
        })
        .collect();
    ranges.sort_unstable();
    let entries = ranges
        .into_iter()
        .map(|(first, last, index)| {
            let node = &view.nodes[index];
            Frame::Array(vec![
                Frame::Integer(i64::from(first)),
                Frame::Integer(i64::from(last)),
                Frame::Array(vec![
                    Frame::bulk(ip_of(node, host).to_string()),
                    Frame::Integer(i64::from(node.port)),
                    Frame::bulk(node.id.clone()),
                    Frame::Map(Vec::new()),
                ]),
            ])
        })
        .collect();
    Frame::Array(entries)
}

/// CLUSTER SHARDS: per node (a shard of one primary), its slots and its description.
fn shards(view: &View, host: &str) -> Frame {
    let text = |s: &str| Frame::bulk(s.to_string());
    let now = now_ms();
    let entries = view
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, node)| !node.handshake)
        .map(|(index, node)| {
            let health = if index == 0 || linked(node, now) {
                "online"
            } else {
                "loading"
            };
            let description = Frame::Map(vec![
                (text("id"), Frame::bulk(node.id.clone())),
                (text("port"), Frame::Integer(i64::from(node.port))),
                (text("ip"), text(ip_of(node, host))),
                (text("endpoint"), text(ip_of(node, host))),
                (text("role"), text("master")),
                (text("replication-offset"), Frame::Integer(0)),
                (text("health"), text(health)),
            ]);
            let slots = view
                .ranges_of(index)
                .into_iter()
                .flat_map(|(a, b)| [Frame::Integer(i64::from(a)), Frame::Integer(i64::from(b))])
                .collect();
            Frame::Map(vec![
                (text("slots"), Frame::Array(slots)),
                (text("nodes"), Frame::Array(vec![description])),
            ])
        })
        .collect();
    Frame::Array(entries)
}

fn count_arg(arg: &[u8]) -> Result<usize, Frame> {
    match wetask_shards::args::parse_i64(arg) {
        Some(count) if count >= 0 => Ok(count as usize),
        _ => Err(Frame::static_error("ERR Invalid number of keys")),
    }
}
