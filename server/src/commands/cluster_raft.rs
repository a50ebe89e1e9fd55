//! CLUSTER's descriptive subcommands in consensus mode (`--consensus raft`): the slot map
//! is the Raft groups', as group 0's map has it (each shard's range until `RAFT MOVESLOTS`
//! moves slots between groups). Each group's ranges are served by its leader, described
//! as their primary, with the other members as its replicas; a range whose group has no
//! leader yet is left out (clients retry, as they do while a Redis Cluster fails over).
//! The subcommands that change the map by hand (MEET, ADDSLOTS, SETSLOT, FAILOVER …) are
//! refused: the groups decide it (`RAFT MOVESLOTS` moves slots between them). KEYSLOT,
//! COUNTKEYSINSLOT, GETKEYSINSLOT and LINKS answer as in cluster mode (`commands::cluster`).

use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::args::is;

use crate::consensus::Consensus;

/// The answer to CLUSTER `args[1]`, or `None` for cluster mode's own answer.
pub fn answer(
    consensus: &Consensus,
    shard: usize,
    shard_count: usize,
    args: &[Bytes],
) -> Option<Frame> {
    let sub = &args[1];
    let frame = match args.len() {
        2 if is(sub, "info") => info(consensus),
        2 if is(sub, "myid") || is(sub, "myshardid") => {
            Frame::bulk(Consensus::node_name(consensus.me, shard))
        }
        2 if is(sub, "slots") => slots(consensus),
        2 if is(sub, "shards") => shards(consensus, shard_count),
        2 if is(sub, "nodes") => Frame::Verbatim(*b"txt", Bytes::from(nodes(consensus, shard, shard_count))),
        _ if ["keyslot", "countkeysinslot", "getkeysinslot", "links", "help"]
            .iter()
            .any(|name| is(sub, name)) =>
        {
            return None
        }
        _ => Frame::static_error(
            "ERR the slot map follows the Raft groups in consensus mode: move slots between groups with RAFT MOVESLOTS on group 0's leader",
        ),
    };
    Some(frame)
}

/// A group's voting members whose address is known, its leader first (`None` while it
/// has none).
fn members(consensus: &Consensus, shard: usize) -> Option<Vec<u64>> {
    let leader = consensus.groups[shard].leader.load(Relaxed);
    consensus.peer(leader)?;
    let mut ids = vec![leader];
    ids.extend(
        consensus
            .voters(shard)
            .into_iter()
            .filter(|&id| id != leader && consensus.peer(id).is_some()),
    );
    Some(ids)
}

fn address(consensus: &Consensus, id: u64, shard: usize) -> (String, u16) {
    consensus.shard_address(id, shard).expect("a member")
}

/// The ranges of `shard`'s group.
fn ranges_of(ranges: &[(u16, u16, usize)], shard: usize) -> impl Iterator<Item = (u16, u16)> + '_ {
    ranges
        .iter()
        .filter(move |r| r.2 == shard)
        .map(|&(first, last, _)| (first, last))
}

fn slots(consensus: &Consensus) -> Frame {
    let entries = consensus
        .slot_ranges()
        .into_iter()
        .filter_map(|(first, last, shard)| {
            let nodes = members(consensus, shard)?.into_iter().map(|id| {
                let (host, port) = address(consensus, id, shard);
                Frame::Array(vec![
                    Frame::bulk(host),
                    Frame::Integer(i64::from(port)),
                    Frame::bulk(Consensus::node_name(id, shard)),
                    Frame::Map(Vec::new()),
                ])
            });
            let mut entry = vec![
                Frame::Integer(i64::from(first)),
                Frame::Integer(i64::from(last)),
            ];
            entry.extend(nodes);
            Some(Frame::Array(entry))
        })
        .collect();
    Frame::Array(entries)
}

fn shards(consensus: &Consensus, shard_count: usize) -> Frame {
    let text = |s: &str| Frame::bulk(s.to_string());
    let ranges = consensus.slot_ranges();
    let entries = (0..shard_count)
        .filter_map(|shard| {
            let slots = ranges_of(&ranges, shard)
                .flat_map(|(first, last)| {
                    [Frame::Integer(first.into()), Frame::Integer(last.into())]
                })
                .collect();
            let group = &consensus.groups[shard];
            let nodes = members(consensus, shard)?
                .into_iter()
                .enumerate()
                .map(|(rank, id)| {
                    let (host, port) = address(consensus, id, shard);
                    let offset = match id == consensus.me {
                        true => group.applied.load(Relaxed),
                        false => 0,
                    };
                    Frame::Map(vec![
                        (text("id"), Frame::bulk(Consensus::node_name(id, shard))),
                        (text("port"), Frame::Integer(i64::from(port))),
                        (text("ip"), text(&host)),
                        (text("endpoint"), text(&host)),
                        (
                            text("role"),
                            text(if rank == 0 { "master" } else { "replica" }),
                        ),
                        (text("replication-offset"), Frame::Integer(offset as i64)),
                        (text("health"), text("online")),
                    ])
                })
                .collect();
            Some(Frame::Map(vec![
                (text("slots"), Frame::Array(slots)),
                (text("nodes"), Frame::Array(nodes)),
            ]))
        })
        .collect();
    Frame::Array(entries)
}

/// CLUSTER NODES' lines: every member of every group, the leaders as masters with their
/// ranges, the others as their replicas.
fn nodes(consensus: &Consensus, me_shard: usize, shard_count: usize) -> String {
    let mut out = String::new();
    let ranges = consensus.slot_ranges();
    for shard in 0..shard_count {
        let leader = consensus.groups[shard].leader.load(Relaxed);
        let term = consensus.groups[shard].term.load(Relaxed);
        let voters = consensus.voters(shard);
        for peer in consensus.peers().iter().filter(|p| voters.contains(&p.id)) {
            let (host, port) = address(consensus, peer.id, shard);
            let myself = peer.id == consensus.me && shard == me_shard;
            let role = if peer.id == leader { "master" } else { "slave" };
            let flags = if myself {
                format!("myself,{role}")
            } else {
                role.to_string()
            };
            let master = match (peer.id == leader, consensus.peer(leader).is_some()) {
                (false, true) => Consensus::node_name(leader, shard),
                _ => "-".to_string(),
            };
            let range: String = match peer.id == leader {
                true => ranges_of(&ranges, shard)
                    .map(|(first, last)| match first == last {
                        true => format!(" {first}"),
                        false => format!(" {first}-{last}"),
                    })
                    .collect(),
                false => String::new(),
            };
            out.push_str(&format!(
                "{} {host}:{port}@{} {flags} {master} 0 0 {term} connected{range}\n",
                Consensus::node_name(peer.id, shard),
                peer.raft_port,
            ));
        }
    }
    out
}

fn info(consensus: &Consensus) -> Frame {
    let led = consensus
        .groups
        .iter()
        .filter(|g| consensus.peer(g.leader.load(Relaxed)).is_some())
        .count();
    let all = consensus.groups.len();
    let ok = if led == all { "ok" } else { "fail" };
    let assigned: usize = consensus
        .slot_ranges()
        .into_iter()
        .filter(|&(_, _, s)| {
            consensus
                .peer(consensus.groups[s].leader.load(Relaxed))
                .is_some()
        })
        .map(|(a, b, _)| usize::from(b - a) + 1)
        .sum();
    let epoch = consensus
        .groups
        .iter()
        .map(|g| g.term.load(Relaxed))
        .max()
        .unwrap_or(0);
    let text = format!(
        "cluster_state:{ok}\r\ncluster_slots_assigned:{assigned}\r\ncluster_slots_ok:{assigned}\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:{}\r\ncluster_size:{all}\r\ncluster_current_epoch:{epoch}\r\ncluster_my_epoch:{epoch}\r\ncluster_stats_messages_sent:0\r\ncluster_stats_messages_received:0\r\ntotal_cluster_links_buffer_limit_exceeded:0\r\n",
        (0..all).map(|s| consensus.voters(s).len()).sum::<usize>(),
    );
    Frame::Verbatim(*b"txt", Bytes::from(text))
}
