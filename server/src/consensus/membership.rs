//! Membership changes: a group's voters change one at a time through a Raft entry of its
//! own (raft-rs's `ConfChange`, a single-step change), proposed by the leader on `RAFT ADD`
//! or `RAFT REMOVE` and applied by every member when it commits. An addition's context
//! carries the new member's address (`id=host:port:raft-port`), so every node can reach it.

use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeType};

use super::peers::{parse_one, Peer};

/// The change that adds `peer` as a voter.
pub fn add(peer: &Peer) -> ConfChange {
    ConfChange {
        change_type: ConfChangeType::AddNode,
        node_id: peer.id,
        context: peer.to_string().into_bytes().into(),
        ..Default::default()
    }
}

/// The change that removes voter `id`.
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

/// The member an addition brings, with its address.
pub fn added(change: &ConfChange) -> Result<Option<Peer>, String> {
    if change.get_change_type() != ConfChangeType::AddNode {
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

/// `members` after `change`.
pub fn apply(members: &mut Vec<Peer>, change: &ConfChange) -> Result<(), String> {
    match change.get_change_type() {
        ConfChangeType::AddNode => {
            let peer = added(change)?.expect("an addition");
            members.retain(|p| p.id != peer.id);
            members.push(peer);
        }
        ConfChangeType::RemoveNode => members.retain(|p| p.id != change.node_id),
        ConfChangeType::AddLearnerNode => {
            return Err("learners are not used in this group".into());
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
        let four = parse_one("4=d:4000").unwrap();
        let bytes = add(&four).write_to_bytes().unwrap();
        let change = read(&bytes).unwrap();
        assert_eq!(added(&change).unwrap(), Some(four.clone()));
        apply(&mut members, &change).unwrap();
        assert_eq!(members.last(), Some(&four));
        let bytes = remove(2).write_to_bytes().unwrap();
        apply(&mut members, &read(&bytes).unwrap()).unwrap();
        let ids: Vec<u64> = members.iter().map(|p| p.id).collect();
        assert_eq!(ids, vec![1, 3, 4]);
        // An address that names another id is refused.
        let mut forged = add(&four);
        forged.node_id = 5;
        assert!(apply(&mut members, &forged).is_err());
        assert!(read(b"\xff\xff\xff").is_err());
    }
}
