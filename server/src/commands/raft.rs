//! RAFT: the consensus groups' members (`--consensus raft`, docs/REPLICATION.md). MEMBERS
//! lists them from any node; ADD, REMOVE and TRANSFER run on the group's leader, which
//! proposes the change (`consensus::membership`) and answers once it has committed.
//!
//! With several shards each is a group of its own, and RAFT acts on the group of the shard
//! port it is sent to (the shared port's connections land on any shard: refused there).
//! Group 0 is the metadata group: ADD and REMOVE go to its port, and every other group's
//! leader follows its members (`shard::raft`, `follow_membership`).
//!
//! - `RAFT MEMBERS`: each member of the connection's group: id, `host:port`, Raft port,
//!   and its role: leader, follower or learner.
//! - `RAFT ADD id host:port[:raft-port]`: adds a node started with `--raft-join yes`, as a
//!   learner: it catches up from the leader's snapshot and log without a vote, and the
//!   leader makes it a voter once it has every committed entry.
//! - `RAFT REMOVE id`: removes a learner, or a voter other than the leader (a group keeps
//!   3 voters).
//! - `RAFT TRANSFER id`: hands the leadership to another voter.
//! - `RAFT MOVESLOTS first last group`: moves slots `first..=last` (all served by one
//!   group) to `group`; on group 0's leader, which begins the move in its map and answers
//!   once that has committed; the groups then move the keys and queues
//!   (`shard::slot_mover`).
//! - `RAFT SLOTS`: each group's slot ranges, as this node's copy of group 0's map has
//!   them; `RAFT MOVING`: the move under way (nil when none).

use std::rc::Rc;

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::args::is;

use crate::consensus::peers::{clashes, parse_one, MEMBERS};
use crate::consensus::{membership, Consensus};
use crate::shard::ShardCtx;
use wetask_shards::shard::slot_moves::GroupMap;

const OFF: &str = "ERR consensus mode is off (start the server with --consensus raft)";
const ONE_GROUP: &str = "ERR with several shards each is a group of its own: send RAFT to the shard's port (port + 1 + shard)";
const MEMBERS_OF_GROUP_0: &str = "ERR with several shards group 0 holds the cluster's members: send RAFT ADD and REMOVE to shard 0's port; the other groups follow it";
const MAP_OF_GROUP_0: &str =
    "ERR group 0 holds the slot map: send RAFT MOVESLOTS to shard 0's port (port + 1)";
const USAGE: &str = "ERR unknown RAFT subcommand or wrong number of arguments; try RAFT HELP";

const HELP: &[&str] = &[
    "RAFT <subcommand> [<arg> ...]. Subcommands are:",
    "MEMBERS",
    "    The members of this node's group: id, host:port, Raft port, leader, follower or learner.",
    "ADD <id> <host:port[:raft-port]>",
    "    Adds a node (started with --raft-join yes) as a learner, made a voter once it has",
    "    caught up; on the leader.",
    "REMOVE <id>",
    "    Removes a learner, or a voter other than the leader; on the leader.",
    "TRANSFER <id>",
    "    Hands the leadership to another voter; on the leader.",
    "MOVESLOTS <first-slot> <last-slot> <group>",
    "    Moves the slots (all of one group) to another group; on group 0's leader.",
    "SLOTS",
    "    Each group's slot ranges: first slot, last slot, group.",
    "MOVING",
    "    The slot move under way: id, first slot, last slot, from group, to group (nil: none).",
    "HELP",
    "    Prints this help.",
];

/// RAFT `args[1]` …, on a connection to a shard's port (`shard_port`) or the shared one.
pub fn raft(ctx: &Rc<ShardCtx>, args: &[Bytes], shard_port: bool) -> Frame {
    let sub = &args[1];
    if args.len() == 2 && is(sub, "help") {
        return Frame::Array(HELP.iter().map(|line| Frame::simple(line)).collect());
    }
    let Some(consensus) = ctx.globals.consensus.as_ref() else {
        return Frame::static_error(OFF);
    };
    match args.len() {
        2 if is(sub, "slots") => return slots(consensus),
        2 if is(sub, "moving") => return moving(consensus),
        _ => {}
    }
    if ctx.shard_count > 1 && !shard_port {
        // The shared port's connections land on any shard: the group would be chance's.
        return Frame::static_error(ONE_GROUP);
    }
    let shard = ctx.id;
    if shard != 0 && (is(sub, "add") || is(sub, "remove")) {
        return Frame::static_error(MEMBERS_OF_GROUP_0);
    }
    if is(sub, "moveslots") {
        return match (args.len(), shard) {
            (5, 0) => move_slots(ctx, consensus, args),
            (5, _) => Frame::static_error(MAP_OF_GROUP_0),
            _ => Frame::static_error(USAGE),
        };
    }
    match args.len() {
        2 if is(sub, "members") => members(consensus, shard),
        3 | 4 if is(sub, "add") => add(ctx, consensus, args),
        3 if is(sub, "remove") => match member_id(&args[2]) {
            Ok(id) => on_leader(ctx, consensus, |raft, state, voters| {
                let learner = consensus.learners(shard).contains(&id);
                if !voters.contains(&id) && !learner {
                    return Err(format!("{id} is not a member"));
                }
                if id == consensus.me {
                    return Err(
                        "this node leads the group: move the leadership first (RAFT TRANSFER)"
                            .into(),
                    );
                }
                if !learner && voters.len() <= *MEMBERS.start() {
                    return Err("a group keeps at least 3 voters".into());
                }
                raft.propose_change(state, membership::remove(id))
            }),
            Err(e) => e,
        },
        3 if is(sub, "transfer") => match member_id(&args[2]) {
            Ok(id) => on_leader(ctx, consensus, |raft, _, voters| {
                if !voters.contains(&id) || id == consensus.me {
                    return Err(format!("{id} is not another member"));
                }
                raft.transfer_leadership(id);
                Ok(())
            }),
            Err(e) => e,
        },
        _ => Frame::static_error(USAGE),
    }
}

/// RAFT ADD id host:port[:raft-port], on the group's leader.
fn add(ctx: &Rc<ShardCtx>, consensus: &Consensus, args: &[Bytes]) -> Frame {
    let text = format!(
        "{}={}",
        String::from_utf8_lossy(&args[2]),
        String::from_utf8_lossy(args.get(3).map_or(&b""[..], |a| &a[..]))
    );
    match parse_one(&text) {
        Ok(peer) => on_leader(ctx, consensus, |raft, state, _| {
            let members = consensus.members(ctx.id);
            if members.contains(&peer.id) {
                return Err(format!("{} is a member already", peer.id));
            }
            if members.len() >= *MEMBERS.end() {
                return Err("a group has at most 7 members".into());
            }
            let others: Vec<_> = consensus
                .peers()
                .into_iter()
                .filter(|p| p.id != peer.id)
                .collect();
            if let Some(clash) = clashes(&others, &peer) {
                return Err(clash);
            }
            raft.propose_change(state, membership::add_learner(&peer))
        }),
        Err(e) => Frame::error(format!("ERR RAFT ADD: {e}")),
    }
}

/// RAFT MOVESLOTS first last group, on group 0's leader: the move begins in its map.
fn move_slots(ctx: &Rc<ShardCtx>, consensus: &Consensus, args: &[Bytes]) -> Frame {
    let number = |arg: &[u8]| std::str::from_utf8(arg).ok()?.parse::<u16>().ok();
    let (Some(first), Some(last), Some(to)) =
        (number(&args[2]), number(&args[3]), number(&args[4]))
    else {
        return Frame::static_error("ERR Invalid or out of range slot");
    };
    let groups = ctx.shard_count;
    if groups < 2 {
        return Frame::static_error(
            "ERR one shard is one group: there is no other group to move slots to",
        );
    }
    on_leader(ctx, consensus, |_, state, _| {
        let map = state
            .slot_map()
            .cloned()
            .unwrap_or_else(|| GroupMap::arithmetic(groups));
        let next = map
            .begin(first, last, to, groups)
            .map_err(|e| e.trim_start_matches("ERR ").to_string())?;
        tracing::info!(
            id = next.last_move,
            first,
            last,
            to,
            "slot move: begun in group 0's map"
        );
        state.log_slot_map(next);
        Ok(())
    })
}

/// RAFT SLOTS: each group's ranges, as this node's copy of group 0's map has them.
fn slots(consensus: &Consensus) -> Frame {
    let rows = consensus
        .slot_ranges()
        .into_iter()
        .map(|(first, last, group)| {
            Frame::Array(vec![
                Frame::Integer(i64::from(first)),
                Frame::Integer(i64::from(last)),
                Frame::Integer(group as i64),
            ])
        })
        .collect();
    Frame::Array(rows)
}

/// RAFT MOVING: the move under way in this node's copy of the map.
fn moving(consensus: &Consensus) -> Frame {
    match consensus.slot_map().and_then(|map| map.moving) {
        Some(m) => Frame::Array(
            [
                m.id,
                m.first.into(),
                m.last.into(),
                m.from.into(),
                m.to.into(),
            ]
            .into_iter()
            .map(|v| Frame::Integer(v as i64))
            .collect(),
        ),
        None => Frame::Null,
    }
}

fn member_id(arg: &[u8]) -> Result<u64, Frame> {
    std::str::from_utf8(arg)
        .ok()
        .and_then(|text| text.parse().ok())
        .filter(|&id| id > 0)
        .ok_or_else(|| Frame::static_error("ERR a member id is a number, 1 and up"))
}

/// Runs `change` on this shard's Raft node if it leads its group; `+OK` or its error.
fn on_leader(
    ctx: &ShardCtx,
    consensus: &Consensus,
    change: impl FnOnce(
        &mut crate::shard::raft::ShardRaft,
        &mut wetask_shards::Shard,
        &[u64],
    ) -> Result<(), String>,
) -> Frame {
    let shard = ctx.id;
    if !consensus.serving(shard) {
        let leader = consensus.groups[shard]
            .leader
            .load(std::sync::atomic::Ordering::Relaxed);
        return match consensus.peer(leader) {
            Some(peer) => Frame::error(format!(
                "ERR this node does not lead its group; its leader is {}:{}",
                peer.host, peer.port
            )),
            None => Frame::static_error("CLUSTERDOWN the group has no leader now"),
        };
    }
    let mut raft = ctx.core.raft.borrow_mut();
    let Some(raft) = raft.as_mut() else {
        return Frame::static_error(OFF);
    };
    let voters = consensus.voters(shard);
    let mut state = ctx.shard.borrow_mut();
    match change(raft, &mut state, &voters) {
        Ok(()) => Frame::ok(),
        Err(e) => Frame::error(format!("ERR {e}")),
    }
}

/// The members of `shard`'s group as this node knows them.
fn members(consensus: &Consensus, shard: usize) -> Frame {
    let leader = consensus.groups[shard]
        .leader
        .load(std::sync::atomic::Ordering::Relaxed);
    let learners = consensus.learners(shard);
    let rows = consensus
        .members(shard)
        .into_iter()
        .map(|id| {
            let (address, raft_port) = match consensus.peer(id) {
                Some(peer) => (format!("{}:{}", peer.host, peer.port), peer.raft_port),
                None => ("?".to_string(), 0),
            };
            Frame::Array(vec![
                Frame::Integer(id as i64),
                Frame::bulk(address),
                Frame::Integer(i64::from(raft_port)),
                Frame::bulk(match id {
                    _ if id == leader => "leader",
                    _ if learners.contains(&id) => "learner",
                    _ => "follower",
                }),
            ])
        })
        .collect();
    Frame::Array(rows)
}
