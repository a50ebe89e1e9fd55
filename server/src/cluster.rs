//! Cluster mode on one node (`cluster-enabled yes`; docs/CLUSTER.md). Each shard is
//! described to cluster clients as a primary that owns its slot range
//! (`wetask_shards::slot::slot_range`) and serves on a port of its own, so that a cluster
//! client sends each key to the shard that owns it and pays no hop. The node ids are kept in
//! `cluster-config-file` (in `dir`, in the format of Redis's `nodes.conf`), so that they
//! survive restarts; a shard count that changed keeps the ids it can and draws the rest.
//!
//! What this answers: `CLUSTER SLOTS`, `SHARDS`, `NODES`, `MYID`, `MYSHARDID`, `INFO`,
//! `KEYSLOT`, `COUNTKEYSINSLOT`, `GETKEYSINSLOT`, `LINKS` (`commands::cluster`), and the
//! `-MOVED` a shard port gives for a key another shard owns (`session::dispatch`).

use std::path::{Path, PathBuf};

use wetask_shards::slot::slot_range;

/// The node's cluster description, fixed at start.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// Each shard's node id: 40 hex digits.
    pub node_ids: Vec<String>,
    /// Each shard's own port.
    pub ports: Vec<u16>,
    /// `cluster-announce-ip`; empty: the address the asking client connected to.
    pub announce_ip: String,
}

impl Cluster {
    /// Reads the node ids from `path` (drawing new ones where it has none) and writes the
    /// file back as this node now is.
    pub fn open(path: &Path, ports: Vec<u16>, announce_ip: String) -> Result<Cluster, String> {
        let shards = ports.len();
        let mut node_ids = match std::fs::read_to_string(path) {
            Ok(text) => ids_in(&text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        node_ids.truncate(shards);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mut rng = fastrand::Rng::with_seed(now ^ (u64::from(std::process::id()) << 32));
        while node_ids.len() < shards {
            node_ids.push(
                (0..40)
                    .map(|_| char::from_digit(rng.u32(0..16), 16).expect("a hex digit"))
                    .collect(),
            );
        }
        let cluster = Cluster {
            node_ids,
            ports,
            announce_ip,
        };
        cluster.save(path)?;
        Ok(cluster)
    }

    /// The file's path for `config`: `cluster-config-file` under `dir`.
    pub fn path(config: &crate::config::Config) -> PathBuf {
        Path::new(&config.dir).join(&config.cluster_config_file)
    }

    /// Writes the configuration as Redis's `nodes.conf`: `CLUSTER NODES`' lines and the
    /// epochs, through a temporary file and a rename.
    fn save(&self, path: &Path) -> Result<(), String> {
        let host = if self.announce_ip.is_empty() {
            "127.0.0.1"
        } else {
            &self.announce_ip
        };
        let mut text = self.nodes(host, None);
        text.push_str(&format!(
            "vars currentEpoch {} lastVoteEpoch 0\n",
            self.node_ids.len()
        ));
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
    }

    pub fn shards(&self) -> usize {
        self.node_ids.len()
    }

    /// The address to announce to a client connected to `local` (its `ip:port`).
    pub fn host<'a>(&'a self, local: &'a str) -> &'a str {
        if !self.announce_ip.is_empty() {
            return &self.announce_ip;
        }
        local.rsplit_once(':').map_or("127.0.0.1", |(ip, _)| ip)
    }

    /// `CLUSTER NODES`: a line per shard; `myself` marks `me` (none for the shared port).
    pub fn nodes(&self, host: &str, me: Option<usize>) -> String {
        let mut out = String::new();
        for (shard, id) in self.node_ids.iter().enumerate() {
            let (first, last) = slot_range(shard, self.shards());
            let port = self.ports[shard];
            let flags = if me == Some(shard) {
                "myself,master"
            } else {
                "master"
            };
            out.push_str(&format!(
                "{id} {host}:{port}@0 {flags} - 0 0 {} connected {first}-{last}\n",
                shard + 1
            ));
        }
        out
    }
}

/// The node ids a `nodes.conf` names, in the order of the slot ranges they own.
fn ids_in(text: &str) -> Vec<String> {
    let mut owned: Vec<(u32, String)> = text
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let id = *fields.first()?;
            if id.len() != 40 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            let first = fields
                .get(8)
                .and_then(|range| range.split('-').next())
                .and_then(|slot| slot.parse().ok())
                .unwrap_or(u32::MAX);
            Some((first, id.to_string()))
        })
        .collect();
    owned.sort();
    owned.into_iter().map(|(_, id)| id).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ids_survive_a_restart_and_a_new_shard_count() {
        let dir = std::env::temp_dir().join(format!("wetask-nodes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("nodes.conf");
        let _ = std::fs::remove_file(&path);
        let first = Cluster::open(&path, vec![7001, 7002], String::new()).unwrap();
        assert_eq!(first.node_ids.len(), 2);
        assert!(first.node_ids.iter().all(|id| id.len() == 40));
        assert_ne!(first.node_ids[0], first.node_ids[1]);
        let again = Cluster::open(&path, vec![7001, 7002], String::new()).unwrap();
        assert_eq!(again.node_ids, first.node_ids);
        let more = Cluster::open(&path, vec![7001, 7002, 7003], String::new()).unwrap();
        assert_eq!(more.node_ids[..2], first.node_ids[..]);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(&format!("{} 127.0.0.1:7003@0 master", more.node_ids[2])));
        assert!(text.contains("connected 10923-16383"), "{text}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn nodes_lines_read_as_redis_writes_them() {
        let cluster = Cluster {
            node_ids: vec!["a".repeat(40), "b".repeat(40)],
            ports: vec![7001, 7002],
            announce_ip: String::new(),
        };
        let text = cluster.nodes("10.0.0.1", Some(1));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[1],
            format!(
                "{} 10.0.0.1:7002@0 myself,master - 0 0 2 connected 8192-16383",
                "b".repeat(40)
            )
        );
        assert_eq!(ids_in(&text), cluster.node_ids);
        assert_eq!(cluster.host("10.0.0.9:7001"), "10.0.0.9");
    }
}
