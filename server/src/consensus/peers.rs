//! The members of the consensus groups as `--raft-peers` names them:
//! `id=host:port[:raft-port]`, comma separated. `port` is the node's client port; its
//! shards serve on `port` + 1 + i (cluster mode's shard ports) and Raft listens on
//! `raft-port` (default `port` + 20000).

/// Ports kept free above a member's client port for its shards' ports.
pub const SHARD_PORTS: u16 = 1024;

/// One member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub id: u64,
    pub host: String,
    pub port: u16,
    pub raft_port: u16,
}

/// A group has this many members at least, and at most.
pub const MEMBERS: std::ops::RangeInclusive<usize> = 3..=7;

impl std::fmt::Display for Peer {
    /// `id=host:port:raft-port`, as [`parse_one`] reads it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}={}:{}:{}",
            self.id, self.host, self.port, self.raft_port
        )
    }
}

/// The members, at least three and at most seven, with distinct ids (1 and up) and
/// addresses, `me` among them.
pub fn parse(text: &str, me: u64) -> Result<Vec<Peer>, String> {
    let mut peers: Vec<Peer> = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let peer = parse_one(item).map_err(|e| format!("raft-peers: {e}"))?;
        if let Some(clash) = clashes(&peers, &peer) {
            return Err(format!("raft-peers: {clash}"));
        }
        peers.push(peer);
    }
    if !MEMBERS.contains(&peers.len()) {
        return Err(format!(
            "raft-peers: a group has 3 to 7 members, not {}",
            peers.len()
        ));
    }
    if !peers.iter().any(|p| p.id == me) {
        return Err(format!("raft-peers does not name this node's id {me}"));
    }
    Ok(peers)
}

/// Why `peer` cannot join `peers` (its id or address is taken), if it cannot.
pub fn clashes(peers: &[Peer], peer: &Peer) -> Option<String> {
    if peers.iter().any(|p| p.id == peer.id) {
        return Some(format!("id {} is named twice", peer.id));
    }
    if peers
        .iter()
        .any(|p| p.host == peer.host && (p.port == peer.port || p.raft_port == peer.raft_port))
    {
        return Some(format!("{}:{} is named twice", peer.host, peer.port));
    }
    None
}

/// One member, `id=host:port[:raft-port]`.
pub fn parse_one(item: &str) -> Result<Peer, String> {
    let (id, address) = item
        .split_once('=')
        .ok_or_else(|| format!("'{item}' is not id=host:port"))?;
    let id: u64 = id
        .trim()
        .parse()
        .ok()
        .filter(|&id| id > 0)
        .ok_or_else(|| format!("'{id}' is not an id (1 and up)"))?;
    let mut parts = address.trim().rsplitn(3, ':').collect::<Vec<_>>();
    parts.reverse();
    let port_of = |text: &str| {
        text.parse::<u16>()
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| format!("'{text}' is not a port"))
    };
    // Room above it for the shard ports (`port` + 1 + shard).
    let port_of_node = |text: &str| {
        port_of(text).and_then(|port| match port < u16::MAX - SHARD_PORTS {
            true => Ok(port),
            false => Err(format!("{port} leaves no room for its shard ports")),
        })
    };
    let (host, port, raft_port) = match parts.as_slice() {
        [host, port] => {
            let port = port_of_node(port)?;
            let raft = port
                .checked_add(20000)
                .ok_or_else(|| format!("{port} + 20000 is past 65535"))?;
            (host.to_string(), port, raft)
        }
        [host, port, raft] => (host.to_string(), port_of_node(port)?, port_of(raft)?),
        _ => return Err(format!("'{address}' is not host:port")),
    };
    if host.is_empty() {
        return Err(format!("'{address}' has no host"));
    }
    Ok(Peer {
        id,
        host,
        port,
        raft_port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_members_with_default_and_explicit_raft_ports() {
        let peers = parse("1=127.0.0.1:7000, 2=127.0.0.2:7000:9000,3=h:1", 2).unwrap();
        assert_eq!(peers.len(), 3);
        assert_eq!(peers[0].raft_port, 27000);
        assert_eq!(peers[1].raft_port, 9000);
        assert_eq!(peers[2].host, "h");
        // Written as read back.
        let text = peers[1].to_string();
        assert_eq!(text, "2=127.0.0.2:7000:9000");
        assert_eq!(parse_one(&text).unwrap(), peers[1]);
        assert!(clashes(&peers, &peers[0]).is_some());
    }

    #[test]
    fn refuses_bad_lists() {
        for (text, me) in [
            ("1=a:1,2=b:2", 1),
            ("1=a:1,2=b:2,3=c:3", 4),
            ("1=a:1,1=b:2,3=c:3", 1),
            ("1=a:1,2=a:1,3=c:3", 1),
            ("0=a:1,2=b:2,3=c:3", 2),
            ("1=a:0,2=b:2,3=c:3", 1),
            ("1=a:60000,2=b:2,3=c:3", 1),
            ("1=a:65000:100,2=b:2,3=c:3", 1),
            ("1=a,2=b:2,3=c:3", 1),
            ("1=:5,2=b:2,3=c:3", 1),
            ("x=a:1,2=b:2,3=c:3", 2),
        ] {
            assert!(parse(text, me).is_err(), "{text}");
        }
    }
}
