//! CLUSTER, ASKING, READONLY and READWRITE: cluster mode on one node (`crate::cluster`,
//! docs/CLUSTER.md). Every shard is a primary that owns one slot range and serves on its
//! own port; the subcommands describe them as Redis Cluster describes its nodes. With
//! cluster mode off, CLUSTER answers as Redis does: cluster support is disabled.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::args::is;
use wetask_shards::keyspace::ScanFilter;
use wetask_shards::slot::{key_slot, shard_of_slot, slot_range, SLOT_COUNT};

use crate::clients::ConnState;
use crate::cluster::Cluster;
use crate::shard::ShardCtx;

const DISABLED: &str = "ERR This instance has cluster support disabled";
const BAD_SLOT: &str = "ERR Invalid or out of range slot";

/// CLUSTER `args[1]` …
pub async fn cluster(ctx: &Rc<ShardCtx>, conn: &Rc<RefCell<ConnState>>, args: &[Bytes]) -> Frame {
    let Some(cluster) = ctx.globals.cluster.as_ref() else {
        return Frame::static_error(DISABLED);
    };
    let local = conn.borrow().laddr.clone();
    let host = cluster.host(&local);
    let me = ctx.id;
    let sub = &args[1];
    match args.len() {
        2 if is(sub, "info") => info(cluster, me),
        2 if is(sub, "myid") || is(sub, "myshardid") => Frame::bulk(cluster.node_ids[me].clone()),
        2 if is(sub, "slots") => slots(cluster, host),
        2 if is(sub, "shards") => shards(cluster, host),
        2 if is(sub, "nodes") => {
            Frame::Verbatim(*b"txt", Bytes::from(cluster.nodes(host, Some(me))))
        }
        // No cluster bus: there are no links to report.
        2 if is(sub, "links") => Frame::Array(Vec::new()),
        3 if is(sub, "keyslot") => Frame::Integer(i64::from(key_slot(&args[2]))),
        3 if is(sub, "countkeysinslot") => match slot_arg(&args[2]) {
            Ok(slot) => Frame::Integer(keys_in_slot(ctx, slot).await.len() as i64),
            Err(err) => err,
        },
        4 if is(sub, "getkeysinslot") => {
            let (slot, count) = match (slot_arg(&args[2]), count_arg(&args[3])) {
                (Ok(slot), Ok(count)) => (slot, count),
                (Err(err), _) | (_, Err(err)) => return err,
            };
            let keys = keys_in_slot(ctx, slot).await;
            Frame::Array(keys.into_iter().take(count).map(Frame::Bulk).collect())
        }
        2 if is(sub, "help") => help(),
        // Redis's other subcommands (arity checked by the table) manage several nodes.
        _ => Frame::error(format!(
            "ERR CLUSTER {} is not supported yet: a WeTask node's own shards form its cluster (docs/CLUSTER.md)",
            String::from_utf8_lossy(sub).to_ascii_uppercase()
        )),
    }
}

fn help() -> Frame {
    let lines = [
        "CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "COUNTKEYSINSLOT <slot>",
        "    Return the number of keys in <slot>.",
        "GETKEYSINSLOT <slot> <count>",
        "    Return key names stored by this node in a slot.",
        "INFO",
        "    Return information about the cluster.",
        "KEYSLOT <key>",
        "    Return the hash slot for <key>.",
        "LINKS",
        "    Return information about all network links between this node and its peers.",
        "MYID",
        "    Return the node id.",
        "MYSHARDID",
        "    Return the node's shard id.",
        "NODES",
        "    Return cluster configuration seen by node. Output format:",
        "    <id> <ip:port@bus-port> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
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

/// ASKING, READONLY, READWRITE: accepted (no slot is ever importing here yet, and every
/// shard is a primary).
pub fn accept(ctx: &ShardCtx) -> Frame {
    if ctx.globals.cluster.is_none() {
        return Frame::static_error(DISABLED);
    }
    Frame::ok()
}

fn info(cluster: &Cluster, me: usize) -> Frame {
    let nodes = cluster.shards();
    let text = format!(
        "cluster_state:ok\r\ncluster_slots_assigned:{SLOT_COUNT}\r\ncluster_slots_ok:{SLOT_COUNT}\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:{nodes}\r\ncluster_size:{nodes}\r\ncluster_current_epoch:{nodes}\r\ncluster_my_epoch:{}\r\ncluster_stats_messages_sent:0\r\ncluster_stats_messages_received:0\r\ntotal_cluster_links_buffer_limit_exceeded:0\r\n",
        me + 1
    );
    Frame::Verbatim(*b"txt", Bytes::from(text))
}

/// CLUSTER SLOTS: per shard, its range and its one node `[host, port, id, {}]`.
fn slots(cluster: &Cluster, host: &str) -> Frame {
    let entries = (0..cluster.shards())
        .map(|shard| {
            let (first, last) = slot_range(shard, cluster.shards());
            Frame::Array(vec![
                Frame::Integer(i64::from(first)),
                Frame::Integer(i64::from(last)),
                Frame::Array(vec![
                    Frame::bulk(host.to_string()),
                    Frame::Integer(i64::from(cluster.ports[shard])),
                    Frame::bulk(cluster.node_ids[shard].clone()),
                    Frame::Map(Vec::new()),
                ]),
            ])
        })
        .collect();
    Frame::Array(entries)
}

/// CLUSTER SHARDS: per shard, `slots` and its one node's description.
fn shards(cluster: &Cluster, host: &str) -> Frame {
    let text = |s: &str| Frame::bulk(s.to_string());
    let entries = (0..cluster.shards())
        .map(|shard| {
            let (first, last) = slot_range(shard, cluster.shards());
            let node = Frame::Map(vec![
                (text("id"), Frame::bulk(cluster.node_ids[shard].clone())),
                (
                    text("port"),
                    Frame::Integer(i64::from(cluster.ports[shard])),
                ),
                (text("ip"), text(host)),
                (text("endpoint"), text(host)),
                (text("role"), text("master")),
                (text("replication-offset"), Frame::Integer(0)),
                (text("health"), text("online")),
            ]);
            Frame::Map(vec![
                (
                    text("slots"),
                    Frame::Array(vec![
                        Frame::Integer(i64::from(first)),
                        Frame::Integer(i64::from(last)),
                    ]),
                ),
                (text("nodes"), Frame::Array(vec![node])),
            ])
        })
        .collect();
    Frame::Array(entries)
}

fn slot_arg(arg: &[u8]) -> Result<u16, Frame> {
    match wetask_shards::args::parse_i64(arg) {
        Some(slot) if (0..i64::from(SLOT_COUNT)).contains(&slot) => Ok(slot as u16),
        _ => Err(Frame::static_error(BAD_SLOT)),
    }
}

fn count_arg(arg: &[u8]) -> Result<usize, Frame> {
    match wetask_shards::args::parse_i64(arg) {
        Some(count) if count >= 0 => Ok(count as usize),
        _ => Err(Frame::static_error("ERR Invalid number of keys")),
    }
}

/// The keys of database 0 in `slot`, from the shard that owns it: one SCAN step over all of
/// its keys (`scan::scan_shard`), filtered by slot. (A walk of that shard's keys: there is no
/// slot index yet; docs/CLUSTER.md.)
async fn keys_in_slot(ctx: &Rc<ShardCtx>, slot: u16) -> Vec<Bytes> {
    let filter = ScanFilter {
        slot: Some(slot),
        ..ScanFilter::default()
    };
    let owner = shard_of_slot(slot, ctx.shard_count);
    let (_, keys, _) = super::scan::scan_shard(ctx, owner, 0, 0, usize::MAX >> 1, &filter).await;
    keys
}
