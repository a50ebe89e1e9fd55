//! Cluster mode (`cluster-enabled yes`; docs/CLUSTER.md). Each shard is a Redis Cluster
//! primary of its own: it has a node id, serves on a port of its own and keeps its own view
//! of the cluster (`view::View`: the nodes it knows, who owns each slot, the epochs). A
//! process of S shards is S nodes; nodes of other processes are met with `CLUSTER MEET` and
//! kept in step over the cluster bus (`bus`). The views are kept in `cluster-config-file`
//! (`conf`) and written before any reply that depends on a change.
//!
//! Routing reads one process-wide table (`wetask_shards::slot::map_slots`): per slot, the
//! local shard that owns or imports it, or "elsewhere". [`Cluster::publish`] derives it from
//! the views after every change; a slot a local shard's own view claims is that shard's.
//!
//! A fresh node owns nothing and knows only itself, as Redis's does, when
//! `cluster-self-assign no`: `redis-cli --cluster create` then builds the cluster. With
//! `cluster-self-assign yes` (the default), a fresh process's shards know each other and
//! own one slot range each, so that one process is a whole cluster with no setup.

pub mod bus;
pub mod bus_publish;
pub mod conf;
pub mod view;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use wetask_shards::slot::{self, slot_range, SLOT_COUNT};

use view::{Node, View};

/// The views and what goes with them, behind one lock (cluster commands and the bus are
/// rare next to commands; routing never takes it).
pub struct State {
    /// One per local shard.
    pub views: Vec<View>,
    /// When each MEET's placeholder was made (ms), so that an unanswered one expires.
    pub met_ms: HashMap<String, u64>,
    /// Counts the changes, so that the file is never overwritten by an older one.
    generation: u64,
}

/// A change's file text, to write once the state's lock is let go (`Cluster::write`).
pub struct Staged {
    generation: u64,
    text: String,
}

pub struct Cluster {
    state: Mutex<State>,
    /// The generation last written to the file. Writing (an fsync) happens under this lock,
    /// not the state's: a shard that answers MOVED reads the state and must not wait on a
    /// disk.
    written: Mutex<u64>,
    /// Each shard's own port.
    pub ports: Vec<u16>,
    /// Each shard's cluster bus port.
    pub bus_ports: Vec<u16>,
    /// `cluster-announce-ip`; empty: the address the asking client connected to.
    pub announce_ip: String,
    path: PathBuf,
    /// The bus's messages, for CLUSTER INFO.
    pub counters: bus::Counters,
    /// PUBLISH over the bus (`bus_publish`), and where what arrives goes (the node's relay,
    /// set at start).
    pub publishing: bus_publish::Publishing,
    pub relay: std::sync::OnceLock<std::sync::Arc<crate::pubsub_relay::Relay>>,
}

impl Cluster {
    /// Reads the views from `path` (a fresh node's when it has none) and writes the file
    /// back as this node now is. `own_ip` is the address to announce for the local nodes
    /// (empty: learnt from peers and clients).
    pub fn open(
        path: &Path,
        ports: Vec<u16>,
        bus_ports: Vec<u16>,
        own_ip: String,
        announce_ip: String,
        self_assign: bool,
    ) -> Result<Cluster, String> {
        let shards = ports.len();
        let mut views = match conf::read(path)? {
            conf::Saved::Views(views) if views.len() == shards => views,
            conf::Saved::Views(views) if views.iter().all(|v| knows_only_siblings(v, &views)) => {
                let ids = views.iter().map(|v| v.me().id.clone()).collect();
                fresh_views(ids, shards, self_assign)
            }
            conf::Saved::Views(views) => {
                return Err(format!(
                    "{}: {} nodes of a cluster of several processes, but {shards} shards now: a node's shard count cannot change (docs/CLUSTER.md)",
                    path.display(),
                    views.len()
                ))
            }
            conf::Saved::Ids(ids) => fresh_views(ids, shards, true),
            conf::Saved::Nothing => fresh_views(Vec::new(), shards, self_assign),
        };
        let local: Vec<String> = views.iter().map(|v| v.me().id.clone()).collect();
        for view in &mut views {
            for node in &mut view.nodes {
                if let Some(shard) = local.iter().position(|id| *id == node.id) {
                    node.port = ports[shard];
                    node.cport = bus_ports[shard];
                    if !own_ip.is_empty() {
                        node.ip = own_ip.clone();
                    }
                }
            }
        }
        let cluster = Cluster {
            state: Mutex::new(State {
                views,
                met_ms: HashMap::new(),
                generation: 0,
            }),
            written: Mutex::new(0),
            ports,
            bus_ports,
            announce_ip,
            path: path.to_path_buf(),
            counters: bus::Counters::default(),
            publishing: bus_publish::Publishing::default(),
            relay: std::sync::OnceLock::new(),
        };
        let text = conf::render(&cluster.lock().views);
        conf::write(&cluster.path, &text)?;
        Ok(cluster)
    }

    /// The file's path for `config`: `cluster-config-file` under `dir`.
    pub fn path(config: &crate::config::Config) -> PathBuf {
        Path::new(&config.dir).join(&config.cluster_config_file)
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies `change` to shard `shard`'s view; when it succeeds, publishes the routing
    /// table and writes the file before returning (Redis writes `nodes.conf` before it
    /// replies, too).
    pub fn change<R>(
        &self,
        shard: usize,
        change: impl FnOnce(&mut View) -> Result<R, String>,
    ) -> Result<R, String> {
        let mut state = self.lock();
        let result = change(&mut state.views[shard])?;
        self.commit(state)?;
        Ok(result)
    }

    /// Publishes the routing table and writes the file (after letting the lock go).
    pub fn commit(&self, mut state: MutexGuard<'_, State>) -> Result<(), String> {
        let staged = Self::stage(&mut state);
        drop(state);
        self.write(staged)
    }

    /// Publishes the routing table and renders the file, under the state's lock.
    pub fn stage(state: &mut State) -> Staged {
        publish(&state.views);
        state.generation += 1;
        Staged {
            generation: state.generation,
            text: conf::render(&state.views),
        }
    }

    /// Writes a staged file, unless a newer one was written meanwhile.
    pub fn write(&self, staged: Staged) -> Result<(), String> {
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        if staged.generation <= *written {
            return Ok(());
        }
        conf::write(&self.path, &staged.text).map_err(|e| format!("ERR {e}"))?;
        *written = staged.generation;
        Ok(())
    }

    /// Publishes the routing table from the views as opened (before the shards start).
    pub fn publish(&self) {
        publish(&self.lock().views);
    }

    /// The address to announce to a client connected to `local` (its `ip:port`) for a node
    /// whose address is not known.
    pub fn host<'a>(&'a self, local: &'a str) -> &'a str {
        if !self.announce_ip.is_empty() {
            return &self.announce_ip;
        }
        local.rsplit_once(':').map_or("127.0.0.1", |(ip, _)| ip)
    }

    /// A new node id: 40 hex digits.
    pub fn new_id() -> String {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mut rng = fastrand::Rng::with_seed(
            now ^ (u64::from(std::process::id()) << 32) ^ fastrand::u64(..),
        );
        (0..40)
            .map(|_| char::from_digit(rng.u32(0..16), 16).expect("a hex digit"))
            .collect()
    }
}

/// Whether `view` knows no node but the shards of its own process.
fn knows_only_siblings(view: &View, views: &[View]) -> bool {
    view.nodes
        .iter()
        .all(|n| views.iter().any(|v| v.me().id == n.id))
}

/// The views of a process with no configuration: `ids` kept where given, new ones drawn.
/// Self-assigned: every shard knows its siblings, and shard i owns the i-th slot range with
/// config epoch i + 1. Otherwise each knows only itself and owns nothing.
fn fresh_views(mut ids: Vec<String>, shards: usize, self_assign: bool) -> Vec<View> {
    ids.truncate(shards);
    while ids.len() < shards {
        ids.push(Cluster::new_id());
    }
    let nodes: Vec<Node> = ids
        .into_iter()
        .enumerate()
        .map(|(shard, id)| Node {
            id,
            ip: String::new(),
            port: 0,
            cport: 0,
            epoch: if self_assign { shard as u64 + 1 } else { 0 },
            handshake: false,
            seen_ms: 0,
        })
        .collect();
    (0..shards)
        .map(|shard| {
            let mut view = View::alone(nodes[shard].clone());
            if self_assign {
                view.nodes.extend(
                    nodes
                        .iter()
                        .enumerate()
                        .filter(|(other, _)| *other != shard)
                        .map(|(_, n)| n.clone()),
                );
                for (owner, node) in nodes.iter().enumerate() {
                    let index = view.index_of(&node.id).expect("every sibling is known");
                    let (first, last) = slot_range(owner, shards);
                    for slot in first..=last {
                        view.assign(slot, index);
                    }
                }
                view.current_epoch = shards as u64;
            }
            view
        })
        .collect()
}

/// Derives the routing table from the views: a slot goes to the local shard whose own view
/// says it owns it (flagged while it migrates), or imports it.
fn publish(views: &[View]) {
    let mut entries = vec![slot::ELSEWHERE; usize::from(SLOT_COUNT)];
    for (shard, view) in views.iter().enumerate() {
        for slot in 0..SLOT_COUNT {
            let entry = &mut entries[usize::from(slot)];
            if view.owns(slot) {
                *entry = shard as u16;
                if view.migrating.contains_key(&slot) {
                    *entry |= slot::MIGRATING;
                }
            } else if *entry == slot::ELSEWHERE && view.importing.contains_key(&slot) {
                *entry = shard as u16 | slot::IMPORTING;
            }
        }
    }
    slot::map_slots(&entries, views.len());
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
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
        let open = |ports: Vec<u16>| {
            let bus = ports.iter().map(|p| p + 10000).collect();
            Cluster::open(&path, ports, bus, String::new(), String::new(), true).unwrap()
        };
        let ids = |cluster: &Cluster| -> Vec<String> {
            cluster
                .lock()
                .views
                .iter()
                .map(|v| v.me().id.clone())
                .collect()
        };
        let first = ids(&open(vec![7001, 7002]));
        assert_eq!(first.len(), 2);
        assert!(first.iter().all(|id| id.len() == 40));
        assert_ne!(first[0], first[1]);
        assert_eq!(ids(&open(vec![7001, 7002])), first);
        let more = open(vec![7001, 7002, 7003]);
        assert_eq!(ids(&more)[..2], first[..]);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains(&format!("{} :7003@17003 master", ids(&more)[2])),
            "{text}"
        );
        assert!(text.contains("connected 10923-16383"), "{text}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_first_mode_file_keeps_its_ids() {
        let dir = std::env::temp_dir().join(format!("wetask-nodes1-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("nodes.conf");
        let (a, b) = ("a".repeat(40), "b".repeat(40));
        std::fs::write(
            &path,
            format!("{b} 127.0.0.1:7002@0 master - 0 0 2 connected 8192-16383\n{a} 127.0.0.1:7001@0 master - 0 0 1 connected 0-8191\nvars currentEpoch 2 lastVoteEpoch 0\n"),
        )
        .unwrap();
        let cluster = Cluster::open(
            &path,
            vec![1, 2],
            vec![3, 4],
            String::new(),
            String::new(),
            false,
        )
        .unwrap();
        let state = cluster.lock();
        assert_eq!(state.views[0].me().id, a);
        assert_eq!(state.views[1].me().id, b);
        assert_eq!(state.views[1].owner(0).map(|n| n.id.clone()), Some(a));
        let _ = std::fs::remove_dir_all(dir);
    }
}
