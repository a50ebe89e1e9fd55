//! Membership changes: a group's members change one at a time through a Raft entry of its
//! own (raft-rs's `ConfChange`, a single-step change), proposed by the leader and applied
//! by every member when it commits. `RAFT ADD` brings a node in as a **learner**: it gets
//! the log and votes on nothing, so the quorum stays the old voters' while it catches up;
//! the leader promotes it to a voter once it has every committed entry
//! (`ShardRaft::promote_caught_up`). `RAFT REMOVE` removes a voter or a learner. An
//! addition's context carries the member's address (`id=host:port:raft-port`), so every
//! node can reach it.

use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeType};

use super::peers::{parse_one, Peer};

/// The change that makes `peer` a voter (a learner promoted).
pub fn add(peer: &Peer) -> ConfChange {
    ConfChange {
        change_type: ConfChangeType::AddNode,
        node_id: peer.id,
        context: peer.to_string().into_bytes().into(),
        ..Default::default()
    }
}

/// The change that adds `peer` as a learner.
pub fn add_learner(peer: &Peer) -> ConfChange {
    ConfChange {
        change_type: ConfChangeType::AddLearnerNode,
        ..add(peer)
    }
}

/// The change that removes member `id` (a voter or a learner).
pub fn remove(id: u64) -> ConfChange {
    ConfChange {
        change_type: ConfChangeType::RemoveNode,
        node_id: id,
        ..Default::default()
    }
}

/// The change an entry's data holds.
pub fn read(data: &[u8]) -> Result<ConfChange, String> {
    ConfChange::parse_from_bytes(data)
        .map_err(|e| format!("a membership change does not read: {e}"))
}

/// The member an addition (as a voter or a learner) brings, with its address.
pub fn added(change: &ConfChange) -> Result<Option<Peer>, String> {
    if change.get_change_type() == ConfChangeType::RemoveNode {
        return Ok(None);
    }
    let text = std::str::from_utf8(&change.context)
        .map_err(|_| "a membership change's address is not text".to_string())?;
    let peer = parse_one(text)?;
    match peer.id == change.node_id {
        true => Ok(Some(peer)),
        false => Err(format!(
            "a membership change names {} for {text}",
            change.node_id
        )),
    }
}

/// `members` and `learners` (the members that do not vote, by id) after `change`.
pub fn apply(
    members: &mut Vec<Peer>,
    learners: &mut Vec<u64>,
    change: &ConfChange,
) -> Result<(), String> {
    let id = change.node_id;
    match change.get_change_type() {
        kind @ (ConfChangeType::AddNode | ConfChangeType::AddLearnerNode) => {
            let peer = added(change)?.expect("an addition");
            members.retain(|p| p.id != id);
            members.push(peer);
            learners.retain(|&l| l != id);
            if kind == ConfChangeType::AddLearnerNode {
                learners.push(id);
                learners.sort_unstable();
            }
        }
        ConfChangeType::RemoveNode => {
            members.retain(|p| p.id != id);
            learners.retain(|&l| l != id);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn additions_and_removals_round_trip_through_an_entrys_bytes() {
        let mut members = super::super::peers::parse("1=a:1,2=b:2,3=c:3", 1).unwrap();
        let mut learners = Vec::new();
        let four = parse_one("4=d:4000").unwrap();
        let bytes = add_learner(&four).write_to_bytes().unwrap();
        let change = read(&bytes).unwrap();
        assert_eq!(change.get_change_type(), ConfChangeType::AddLearnerNode);
        assert_eq!(added(&change).unwrap(), Some(four.clone()));
        apply(&mut members, &mut learners, &change).unwrap();
        assert_eq!(members.last(), Some(&four));
        assert_eq!(learners, vec![4]);
        // Its promotion keeps its address and makes it a voter.
        let bytes = add(&four).write_to_bytes().unwrap();
        apply(&mut members, &mut learners, &read(&bytes).unwrap()).unwrap();
        assert_eq!(members.len(), 4);
        assert!(learners.is_empty());
        let bytes = remove(2).write_to_bytes().unwrap();
        apply(&mut members, &mut learners, &read(&bytes).unwrap()).unwrap();
        let ids: Vec<u64> = members.iter().map(|p| p.id).collect();
        assert_eq!(ids, vec![1, 3, 4]);
        // A learner removed is gone from both.
        let five = parse_one("5=e:5000").unwrap();
        apply(&mut members, &mut learners, &add_learner(&five)).unwrap();
        apply(&mut members, &mut learners, &remove(5)).unwrap();
        assert_eq!(members.len(), 3);
        assert!(learners.is_empty());
        // An address that names another id is refused.
        let mut forged = add(&four);
        forged.node_id = 5;
        assert!(apply(&mut members, &mut learners, &forged).is_err());
        assert!(read(b"\xff\xff\xff").is_err());
    }
}
