//! One node's view of the cluster, as a Redis Cluster node keeps it: the nodes it knows
//! (itself first), who owns each of the 16384 slots, each node's config epoch, the cluster's
//! current epoch, and the slots this node migrates or imports. Pure and synchronous: the
//! commands (`commands::cluster`) and the bus (`cluster::bus`) change it through the methods
//! here, and `cluster::Cluster` persists it and publishes what the routing table needs.
//!
//! The rules are Redis's (cluster_legacy.c), kept small:
//! - a node's claim on its own slots wins over an owner with a lower config epoch;
//! - two primaries with the same config epoch: the one with the lower node id bumps it;
//! - a slot being imported is not taken from a peer's claim until `SETSLOT … NODE`;
//! - a forgotten node is not learnt again from gossip for a minute.

use std::collections::{BTreeMap, HashMap};

use wetask_shards::slot::SLOT_COUNT;

const SLOTS: usize = SLOT_COUNT as usize;
/// No owner, in [`View::owners`].
const NONE: u16 = u16::MAX;
/// How long `CLUSTER FORGET` keeps a node from being learnt again (Redis's 60 s).
pub const FORGET_MS: u64 = 60_000;
/// How long a MEET waits for its peer's first message (Redis: the node timeout).
pub const HANDSHAKE_MS: u64 = 15_000;

/// A node as another node knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// 40 hex digits.
    pub id: String,
    /// Empty while unknown (a local node with no announced address: the address its peers
    /// reach it at, or the client's, stands in).
    pub ip: String,
    pub port: u16,
    /// The cluster bus port.
    pub cport: u16,
    pub epoch: u64,
    /// Met (`CLUSTER MEET`) but not heard from yet: its id is a placeholder.
    pub handshake: bool,
    /// When it was last heard from, in ms since the Unix epoch (0: never).
    pub seen_ms: u64,
}

/// What one node sends its peers on the bus: itself, its slots and the nodes it knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub sender: Node,
    pub current_epoch: u64,
    /// The sender was told to meet the receiver: an unknown sender is accepted.
    pub meet: bool,
    /// The slots the sender owns: a bit per slot, 2048 bytes.
    pub slots: Vec<u8>,
    /// Other nodes the sender knows (id, ip, port, bus port), so that a node met by one
    /// member is learnt by all.
    pub gossip: Vec<(String, String, u16, u16)>,
}

#[derive(Debug, Clone)]
pub struct View {
    /// Every known node; `nodes[0]` is this one.
    pub nodes: Vec<Node>,
    /// Per slot, the index in `nodes` of its owner, or [`NONE`].
    owners: Vec<u16>,
    /// Slot → the node it migrates to (slots this node owns).
    pub migrating: BTreeMap<u16, String>,
    /// Slot → the node it is imported from.
    pub importing: BTreeMap<u16, String>,
    pub current_epoch: u64,
    /// Forgotten node ids, with the time (ms) until which gossip may not bring them back.
    forgotten: HashMap<String, u64>,
}

impl View {
    /// A node that knows only itself and owns nothing (a fresh Redis Cluster node).
    pub fn alone(me: Node) -> View {
        View {
            nodes: vec![me],
            owners: vec![NONE; SLOTS],
            migrating: BTreeMap::new(),
            importing: BTreeMap::new(),
            current_epoch: 0,
            forgotten: HashMap::new(),
        }
    }

    pub fn me(&self) -> &Node {
        &self.nodes[0]
    }

    pub fn me_mut(&mut self) -> &mut Node {
        &mut self.nodes[0]
    }

    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.id == id)
    }

    pub fn node(&self, id: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// The node that owns `slot`.
    pub fn owner(&self, slot: u16) -> Option<&Node> {
        match self.owners[usize::from(slot)] {
            NONE => None,
            index => Some(&self.nodes[usize::from(index)]),
        }
    }

    pub fn owns(&self, slot: u16) -> bool {
        self.owners[usize::from(slot)] == 0
    }

    /// Gives `slot` to the node at `index` (no check).
    pub fn assign(&mut self, slot: u16, index: usize) {
        self.owners[usize::from(slot)] = index as u16;
    }

    /// The slots the node at `index` owns, as ranges `(first, last)`.
    pub fn ranges_of(&self, index: usize) -> Vec<(u16, u16)> {
        let mut ranges: Vec<(u16, u16)> = Vec::new();
        for slot in 0..SLOT_COUNT {
            if usize::from(self.owners[usize::from(slot)]) != index {
                continue;
            }
            match ranges.last_mut() {
                Some((_, last)) if *last + 1 == slot => *last = slot,
                _ => ranges.push((slot, slot)),
            }
        }
        ranges
    }

    /// How many slots have an owner.
    pub fn assigned(&self) -> usize {
        self.owners.iter().filter(|&&o| o != NONE).count()
    }

    /// The nodes that own at least one slot.
    pub fn primaries_with_slots(&self) -> usize {
        let mut owning = vec![false; self.nodes.len()];
        for &o in &self.owners {
            if o != NONE {
                owning[usize::from(o)] = true;
            }
        }
        owning.iter().filter(|&&o| o).count()
    }

    /// The highest config epoch known (Redis's `clusterGetMaxEpoch`).
    pub fn max_epoch(&self) -> u64 {
        self.nodes
            .iter()
            .map(|n| n.epoch)
            .max()
            .unwrap_or(0)
            .max(self.current_epoch)
    }

    /// CLUSTER ADDSLOTS / ADDSLOTSRANGE: every slot must be free, and named once.
    pub fn add_slots(&mut self, slots: &[u16]) -> Result<(), String> {
        let mut named = vec![false; SLOTS];
        for &slot in slots {
            if self.owners[usize::from(slot)] != NONE {
                return Err(format!("ERR Slot {slot} is already busy"));
            }
            if std::mem::replace(&mut named[usize::from(slot)], true) {
                return Err(format!("ERR Slot {slot} specified multiple times"));
            }
        }
        for &slot in slots {
            self.importing.remove(&slot);
            self.assign(slot, 0);
        }
        Ok(())
    }

    /// CLUSTER DELSLOTS / DELSLOTSRANGE: every slot must have an owner, and be named once.
    pub fn del_slots(&mut self, slots: &[u16]) -> Result<(), String> {
        let mut named = vec![false; SLOTS];
        for &slot in slots {
            if self.owners[usize::from(slot)] == NONE {
                return Err(format!("ERR Slot {slot} is already unassigned"));
            }
            if std::mem::replace(&mut named[usize::from(slot)], true) {
                return Err(format!("ERR Slot {slot} specified multiple times"));
            }
        }
        for &slot in slots {
            self.owners[usize::from(slot)] = NONE;
            self.importing.remove(&slot);
            self.migrating.remove(&slot);
        }
        Ok(())
    }

    /// CLUSTER SET-CONFIG-EPOCH, allowed only on a node that knows no other and has none.
    pub fn set_config_epoch(&mut self, epoch: u64) -> Result<(), String> {
        if self.nodes.len() > 1 {
            return Err(
                "ERR The user can assign a config epoch only when the node does not know any other node."
                    .into(),
            );
        }
        if self.me().epoch != 0 {
            return Err("ERR Node config epoch is already non-zero".into());
        }
        self.me_mut().epoch = epoch;
        self.current_epoch = self.current_epoch.max(epoch);
        Ok(())
    }

    /// CLUSTER BUMPEPOCH, and the bump a finished import makes (Redis's
    /// `clusterBumpConfigEpochWithoutConsensus`): true when the epoch changed.
    pub fn bump_epoch(&mut self) -> bool {
        let max = self.max_epoch();
        if self.me().epoch == 0 || self.me().epoch != max {
            self.current_epoch = max + 1;
            let epoch = self.current_epoch;
            self.me_mut().epoch = epoch;
            return true;
        }
        false
    }

    /// CLUSTER MEET: a placeholder node at that address until it answers on the bus.
    /// Nothing when a known node already has the address.
    pub fn meet(&mut self, ip: &str, port: u16, cport: u16, placeholder_id: String) {
        if self
            .nodes
            .iter()
            .skip(1)
            .any(|n| n.ip == ip && n.port == port)
        {
            return;
        }
        self.nodes.push(Node {
            id: placeholder_id,
            ip: ip.to_string(),
            port,
            cport,
            epoch: 0,
            handshake: true,
            seen_ms: 0,
        });
    }

    /// CLUSTER FORGET.
    pub fn forget(&mut self, id: &str, now_ms: u64) -> Result<(), String> {
        let Some(index) = self.index_of(id) else {
            return Err(format!("ERR Unknown node {id}"));
        };
        if index == 0 {
            return Err("ERR I tried hard but I can't forget myself...".into());
        }
        self.remove(index);
        self.forgotten.insert(id.to_string(), now_ms + FORGET_MS);
        Ok(())
    }

    /// Drops the node at `index` (not 0): its slots lose their owner.
    fn remove(&mut self, index: usize) {
        let last = self.nodes.len() - 1;
        self.nodes.swap_remove(index);
        for owner in &mut self.owners {
            if usize::from(*owner) == index {
                *owner = NONE;
            } else if usize::from(*owner) == last && *owner != NONE {
                *owner = index as u16;
            }
        }
    }

    /// CLUSTER RESET: forgets every other node and every slot; HARD also draws a new id
    /// and zeroes the epochs.
    pub fn reset(&mut self, hard: bool, new_id: String) {
        let mut me = self.me().clone();
        if hard {
            me.id = new_id;
            me.epoch = 0;
            self.current_epoch = 0;
        }
        self.nodes = vec![me];
        self.owners = vec![NONE; SLOTS];
        self.migrating.clear();
        self.importing.clear();
        self.forgotten.clear();
    }

    /// CLUSTER SETSLOT `slot` MIGRATING `id`.
    pub fn set_migrating(&mut self, slot: u16, id: &str) -> Result<(), String> {
        if !self.owns(slot) {
            return Err(format!("ERR I'm not the owner of hash slot {slot}"));
        }
        self.other_node(id, "Target")?;
        self.migrating.insert(slot, id.to_string());
        Ok(())
    }

    /// CLUSTER SETSLOT `slot` IMPORTING `id`.
    pub fn set_importing(&mut self, slot: u16, id: &str) -> Result<(), String> {
        if self.owns(slot) {
            return Err(format!("ERR I'm already the owner of hash slot {slot}"));
        }
        self.other_node(id, "Source")?;
        self.importing.insert(slot, id.to_string());
        Ok(())
    }

    /// Checks that `id` is a node this one knows, and not itself (`role` names it in the
    /// error, as Redis does).
    fn other_node(&self, id: &str, role: &str) -> Result<(), String> {
        match self.index_of(id) {
            None => Err(format!("ERR I don't know about node {id}")),
            Some(0) => Err(format!("ERR {role} node is the node itself")),
            Some(_) => Ok(()),
        }
    }

    /// CLUSTER SETSLOT `slot` STABLE.
    pub fn set_stable(&mut self, slot: u16) {
        self.migrating.remove(&slot);
        self.importing.remove(&slot);
    }

    /// CLUSTER SETSLOT `slot` NODE `id`; `keys_here` is how many keys this node holds in the
    /// slot. As Redis: a node may not give away a slot it still has keys in (unless it is
    /// migrating it, and then only once the keys are gone); a finished import bumps this
    /// node's epoch, so that its claim wins everywhere.
    pub fn set_node(&mut self, slot: u16, id: &str, keys_here: usize) -> Result<(), String> {
        let Some(index) = self.index_of(id) else {
            return Err(format!("ERR Unknown node {id}"));
        };
        if self.nodes[index].handshake {
            return Err(format!("ERR Unknown node {id}"));
        }
        if self.owns(slot) && index != 0 && keys_here > 0 {
            return Err(format!(
                "ERR Can't assign hashslot {slot} to a different node while I still hold keys for this hash slot."
            ));
        }
        if self.migrating.contains_key(&slot) && keys_here == 0 && index != 0 {
            self.migrating.remove(&slot);
        }
        let imported = index == 0 && self.importing.remove(&slot).is_some();
        self.assign(slot, index);
        if index == 0 {
            self.migrating.remove(&slot);
        }
        if imported {
            self.bump_epoch();
        }
        Ok(())
    }

    /// What this node tells its peers.
    pub fn message(&self, meet: bool) -> Message {
        let mut slots = vec![0u8; SLOTS / 8];
        for slot in 0..SLOTS {
            if self.owners[slot] == 0 {
                slots[slot / 8] |= 1 << (slot % 8);
            }
        }
        Message {
            sender: self.me().clone(),
            current_epoch: self.current_epoch,
            meet,
            slots,
            gossip: self
                .nodes
                .iter()
                .skip(1)
                .filter(|n| !n.handshake)
                .map(|n| (n.id.clone(), n.ip.clone(), n.port, n.cport))
                .collect(),
        }
    }

    /// Takes in a peer's message, received at `now_ms` from the address `from_ip`. Returns
    /// whether anything that is persisted changed (nodes, epochs, slots).
    pub fn merge(&mut self, message: &Message, from_ip: &str, now_ms: u64) -> bool {
        self.forgotten.retain(|_, until| *until > now_ms);
        let sender = &message.sender;
        if sender.id == self.me().id || self.forgotten.contains_key(&sender.id) {
            return false;
        }
        let ip = if sender.ip.is_empty() {
            from_ip.to_string()
        } else {
            sender.ip.clone()
        };
        let mut changed = false;
        let index = match self.index_of(&sender.id) {
            Some(index) => index,
            None => {
                let met = self
                    .nodes
                    .iter()
                    .position(|n| n.handshake && n.ip == ip && n.port == sender.port);
                match met {
                    Some(index) => index,
                    None if message.meet => {
                        self.nodes.push(sender.clone());
                        changed = true;
                        self.nodes.len() - 1
                    }
                    // Redis ignores a stranger's ping too.
                    None => return false,
                }
            }
        };
        {
            let node = &mut self.nodes[index];
            let before = node.clone();
            node.id = sender.id.clone();
            node.ip = ip;
            node.port = sender.port;
            node.cport = sender.cport;
            node.epoch = sender.epoch;
            node.handshake = false;
            changed |= (
                before.id.as_str(),
                before.ip.as_str(),
                before.port,
                before.cport,
            ) != (node.id.as_str(), node.ip.as_str(), node.port, node.cport)
                || before.epoch != node.epoch
                || before.handshake;
            node.seen_ms = now_ms;
        }
        if message.current_epoch > self.current_epoch {
            self.current_epoch = message.current_epoch;
            changed = true;
        }
        changed |= self.take_claims(index, message);
        changed |= self.epoch_collision(index);
        changed |= self.learn_gossip(&message.gossip);
        changed
    }

    /// The sender's claims on its slots, against the owners this view has. A node is the
    /// authority on what it owns, so a slot this view gives the sender and the sender no
    /// longer claims loses its owner (it gave the slot away, or lost it to a higher epoch:
    /// the new owner's claim fills it). Redis keeps such a stale owner until another node's
    /// claim replaces it, and repairs the rest with UPDATE messages; a whole state per
    /// message makes that unnecessary.
    fn take_claims(&mut self, index: usize, message: &Message) -> bool {
        let epoch = self.nodes[index].epoch;
        let mut changed = false;
        for slot in 0..SLOTS {
            let owner = self.owners[slot];
            if message.slots.get(slot / 8).copied().unwrap_or(0) & (1 << (slot % 8)) == 0 {
                if usize::from(owner) == index {
                    self.owners[slot] = NONE;
                    changed = true;
                }
                continue;
            }
            if usize::from(owner) == index || self.importing.contains_key(&(slot as u16)) {
                continue;
            }
            if owner == NONE || self.nodes[usize::from(owner)].epoch < epoch {
                self.owners[slot] = index as u16;
                if owner == 0 {
                    self.migrating.remove(&(slot as u16));
                }
                changed = true;
            }
        }
        changed
    }

    /// Redis's `clusterHandleConfigEpochCollision`: equal epochs, and this node's id is the
    /// lower, so this node takes a new one.
    fn epoch_collision(&mut self, index: usize) -> bool {
        let (me, other) = (&self.nodes[0], &self.nodes[index]);
        if other.epoch != me.epoch || other.id.as_str() <= me.id.as_str() {
            return false;
        }
        self.current_epoch += 1;
        let epoch = self.current_epoch;
        self.me_mut().epoch = epoch;
        true
    }

    fn learn_gossip(&mut self, gossip: &[(String, String, u16, u16)]) -> bool {
        let mut changed = false;
        for (id, ip, port, cport) in gossip {
            if ip.is_empty() || self.index_of(id).is_some() || self.forgotten.contains_key(id) {
                continue;
            }
            self.nodes.push(Node {
                id: id.clone(),
                ip: ip.clone(),
                port: *port,
                cport: *cport,
                epoch: 0,
                handshake: false,
                seen_ms: 0,
            });
            changed = true;
        }
        changed
    }

    /// Drops the MEETs no peer answered in time. True when one was dropped.
    pub fn expire_handshakes(&mut self, now_ms: u64, met_ms: &HashMap<String, u64>) -> bool {
        let stale: Vec<usize> = (1..self.nodes.len())
            .rev()
            .filter(|&i| {
                self.nodes[i].handshake
                    && met_ms
                        .get(&self.nodes[i].id)
                        .is_none_or(|&at| now_ms > at + HANDSHAKE_MS)
            })
            .collect();
        for &index in &stale {
            self.remove(index);
        }
        !stale.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn node(id: char, port: u16) -> Node {
        Node {
            id: id.to_string().repeat(40),
            ip: "127.0.0.1".into(),
            port,
            cport: port + 10000,
            epoch: 0,
            handshake: false,
            seen_ms: 0,
        }
    }

    /// Delivers every view's message to every node it knows, until nothing changes.
    fn converge(views: &mut [View]) {
        for _round in 0..20 {
            let mut changed = false;
            let messages: Vec<(Message, Vec<(String, u16)>)> = views
                .iter()
                .map(|v| {
                    let meet_targets = v.nodes[1..]
                        .iter()
                        .map(|n| (n.ip.clone(), n.port))
                        .collect();
                    (v.message(true), meet_targets)
                })
                .collect();
            for (message, targets) in &messages {
                for view in views.iter_mut() {
                    let me = (view.me().ip.clone(), view.me().port);
                    if targets.contains(&me) {
                        changed |= view.merge(message, "127.0.0.1", 1);
                    }
                }
            }
            if !changed {
                return;
            }
        }
        panic!("the views did not converge");
    }

    /// A fresh node per name, on ports 7000 up.
    fn alone(names: &[char]) -> Vec<View> {
        names
            .iter()
            .enumerate()
            .map(|(i, &c)| View::alone(node(c, 7000 + i as u16)))
            .collect()
    }

    fn cluster_of_three() -> Vec<View> {
        let mut views = alone(&['a', 'b', 'c']);
        for (i, view) in views.iter_mut().enumerate() {
            let first = (i * SLOTS / 3) as u16;
            let last = ((i + 1) * SLOTS / 3 - 1) as u16;
            view.add_slots(&(first..=last).collect::<Vec<_>>()).unwrap();
            view.set_config_epoch(i as u64 + 1).unwrap();
        }
        views[0].meet("127.0.0.1", 7001, 17001, "x".repeat(40));
        views[0].meet("127.0.0.1", 7002, 17002, "y".repeat(40));
        converge(&mut views);
        views
    }

    #[test]
    fn meet_and_gossip_make_every_node_know_every_slot() {
        let views = cluster_of_three();
        for view in &views {
            assert_eq!(view.nodes.len(), 3, "{:?}", view.nodes);
            assert!(view.nodes.iter().all(|n| !n.handshake));
            assert_eq!(view.assigned(), SLOTS);
            assert_eq!(view.owner(0).unwrap().id, "a".repeat(40));
            assert_eq!(view.owner(16383).unwrap().id, "c".repeat(40));
            assert_eq!(view.current_epoch, 3);
        }
    }

    #[test]
    fn a_moved_slot_is_won_by_the_importer_s_bumped_epoch() {
        let mut views = cluster_of_three();
        let (a, c) = ("a".repeat(40), "c".repeat(40));
        // Slot 12000 goes from c (epoch 3, the highest) to a (epoch 1).
        views[0].set_importing(12000, &c).unwrap();
        views[2].set_migrating(12000, &a).unwrap();
        assert_eq!(
            views[2].set_node(12000, &a, 1).unwrap_err(),
            "ERR Can't assign hashslot 12000 to a different node while I still hold keys for this hash slot."
        );
        converge(&mut views);
        assert_eq!(views[1].owner(12000).unwrap().id, c, "nothing moved yet");
        views[0].set_node(12000, &a, 0).unwrap();
        assert_eq!(
            views[0].me().epoch,
            4,
            "the importer's epoch passes every other"
        );
        assert!(views[0].importing.is_empty());
        converge(&mut views);
        for view in &views {
            assert_eq!(view.owner(12000).unwrap().id, a, "{}", view.me().id);
        }
        assert!(
            views[2].migrating.is_empty(),
            "the loser drops its migration"
        );
    }

    #[test]
    fn equal_epochs_are_told_apart_by_the_lower_id_bumping() {
        let mut views = alone(&['a', 'b']);
        views[0].set_config_epoch(1).unwrap();
        views[1].set_config_epoch(1).unwrap();
        views[1].meet("127.0.0.1", 7000, 17000, "x".repeat(40));
        converge(&mut views);
        let epochs: Vec<u64> = views.iter().map(|v| v.me().epoch).collect();
        assert_eq!(epochs, vec![2, 1], "node a (lower id) bumps");
    }

    #[test]
    fn slot_commands_refuse_as_redis_does() {
        let mut view = View::alone(node('a', 7000));
        view.add_slots(&[1, 2]).unwrap();
        assert_eq!(
            view.add_slots(&[3, 2]).unwrap_err(),
            "ERR Slot 2 is already busy"
        );
        assert_eq!(
            view.add_slots(&[4, 4]).unwrap_err(),
            "ERR Slot 4 specified multiple times"
        );
        assert_eq!(view.owner(3), None, "a refused ADDSLOTS assigns nothing");
        assert_eq!(
            view.del_slots(&[9]).unwrap_err(),
            "ERR Slot 9 is already unassigned"
        );
        assert_eq!(
            view.set_migrating(9, &"b".repeat(40)).unwrap_err(),
            "ERR I'm not the owner of hash slot 9"
        );
        assert_eq!(
            view.set_migrating(1, &"b".repeat(40)).unwrap_err(),
            format!("ERR I don't know about node {}", "b".repeat(40))
        );
        assert_eq!(
            view.set_importing(1, &"b".repeat(40)).unwrap_err(),
            "ERR I'm already the owner of hash slot 1"
        );
        view.set_config_epoch(5).unwrap();
        assert_eq!(
            view.set_config_epoch(6).unwrap_err(),
            "ERR Node config epoch is already non-zero"
        );
        assert!(view.forget(&view.me().id.clone(), 0).is_err());
        assert_eq!(view.ranges_of(0), vec![(1, 2)]);
    }

    #[test]
    fn a_forgotten_node_is_not_learnt_again_for_a_minute() {
        let mut views = cluster_of_three();
        let b = "b".repeat(40);
        views[0].forget(&b, 1).unwrap();
        assert!(views[0].node(&b).is_none());
        assert_eq!(views[0].owner(6000), None, "its slots lose their owner");
        let from_c = views[2].message(false);
        views[0].merge(&from_c, "127.0.0.1", 2);
        assert!(views[0].node(&b).is_none(), "gossip does not bring it back");
        views[0].merge(&from_c, "127.0.0.1", 2 + FORGET_MS);
        assert!(views[0].node(&b).is_some(), "after the minute it does");
    }

    proptest! {
        /// Whatever slots three nodes claim with whatever epochs, once their messages have
        /// gone round every view agrees on every slot, each slot is one of its claimants',
        /// and no two nodes keep the same epoch.
        #[test]
        fn views_agree_after_exchanging_claims(
            claims in proptest::collection::vec((0u16..64, 0usize..3), 0..40),
            epochs in proptest::collection::vec(1u64..5, 3),
        ) {
            let mut views = alone(&['a', 'b', 'c']);
            for (i, view) in views.iter_mut().enumerate() {
                view.set_config_epoch(epochs[i]).unwrap();
            }
            for &(slot, who) in &claims {
                let _ = views[who].add_slots(&[slot]);
            }
            views[0].meet("127.0.0.1", 7001, 17001, "x".repeat(40));
            views[0].meet("127.0.0.1", 7002, 17002, "y".repeat(40));
            converge(&mut views);
            let final_epochs: Vec<u64> = views.iter().map(|v| v.me().epoch).collect();
            let mut distinct = final_epochs.clone();
            distinct.sort();
            distinct.dedup();
            prop_assert_eq!(distinct.len(), 3, "epochs end distinct: {:?}", final_epochs);
            for slot in 0..64u16 {
                let owners: Vec<Option<String>> =
                    views.iter().map(|v| v.owner(slot).map(|n| n.id.clone())).collect();
                prop_assert!(owners.iter().all(|o| *o == owners[0]), "slot {}: {:?}", slot, owners);
                let claimants: Vec<usize> = claims.iter().filter(|c| c.0 == slot).map(|c| c.1).collect();
                if let Some(owner) = &owners[0] {
                    let winner = views.iter().position(|v| &v.me().id == owner).unwrap();
                    prop_assert!(claimants.contains(&winner), "slot {} went to a claimant", slot);
                } else {
                    prop_assert!(claimants.is_empty());
                }
            }
        }
    }
}
