//! The command line (`clap`) and the optional config file. The file holds the same options
//! as `name value` lines (`port 6380`, `shards 2`; `#` starts a comment), and flags given on
//! the command line win over the file.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use wetask_protocol::BULK_BYTES_MAX_DEFAULT;

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum IoMode {
    /// Completion-based io_uring rings on the `io-uring` crate (the default).
    Uring,
    /// glommio's readiness-based TcpStream: a measured baseline and a fallback.
    Glommio,
}

#[derive(Parser, Clone, Debug)]
#[command(
    name = "wetask",
    version,
    about = "WeTask: a thread-per-core Redis-compatible server and task engine"
)]
#[command(args_override_self = true)]
pub struct Config {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: String,
    /// TCP port (0 picks a free one and logs it).
    #[arg(long, default_value_t = 6379)]
    pub port: u16,
    /// Number of shards, one per core (default: all online CPUs).
    #[arg(long)]
    pub shards: Option<usize>,
    /// Require clients to AUTH with this password.
    #[arg(long)]
    pub requirepass: Option<String>,
    /// The ACL file: the users are read from it at start and by ACL LOAD, and ACL SAVE
    /// writes them there (docs/SECURITY.md).
    #[arg(long)]
    pub aclfile: Option<PathBuf>,
    /// The channels a new ACL user may use: `resetchannels` (none) or `allchannels`.
    #[arg(long, default_value = "resetchannels", value_parser = ["allchannels", "resetchannels"])]
    pub acl_pubsub_default: String,
    /// Most entries ACL LOG keeps.
    #[arg(long, default_value_t = 128)]
    pub acllog_max_len: usize,
    /// Serve Prometheus metrics at http://<bind>:<port>/metrics (off unless given; 0 picks
    /// a free port and logs it).
    #[arg(long)]
    pub metrics_port: Option<u16>,
    /// Serve the task dashboard at http://<bind>:<port>/ (off unless given; 0 picks a free
    /// port and logs it). It signs in with an ACL user (docs/DASHBOARD.md).
    #[arg(long)]
    pub http_port: Option<u16>,
    /// The ACL user the server's own helpers log in as: the metrics scrape and the
    /// dashboard's history sampler (unset: the default user, with `requirepass`). It needs
    /// `~* +info +task.queues +task.stats +task.workers`; with it, a deployment can disable
    /// the default user (docs/METRICS.md).
    #[arg(long)]
    pub monitor_user: Option<String>,
    /// The password of `--monitor-user`.
    #[arg(long)]
    pub monitor_password: Option<String>,
    /// Most simultaneous client connections, over all shards.
    #[arg(long, default_value_t = 10_000)]
    pub maxclients: usize,
    /// Read options from this file first (`name value` per line).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Network path.
    #[arg(long, value_enum, default_value_t = IoMode::Uring)]
    pub io: IoMode,
    /// Largest bulk string a client may send.
    #[arg(long, default_value_t = BULK_BYTES_MAX_DEFAULT)]
    pub proto_max_bulk_len: usize,
    /// How long a finished task (and its result) stays readable, in ms (docs/TASKS.md).
    #[arg(long, default_value_t = wetask_shards::tasks::model::RETENTION_MS_DEFAULT)]
    pub task_retention_ms: u64,
    /// How long a dead task stays in its queue's dead set, in ms (kept apart from finished
    /// tasks; docs/TASKS.md).
    #[arg(long, default_value_t = wetask_shards::tasks::model::DEAD_RETENTION_MS_DEFAULT)]
    pub task_dead_retention_ms: u64,
    /// How many events (TASK.EVENTS) each queue keeps; a consumer further behind gets an
    /// error saying so.
    #[arg(long, default_value_t = wetask_shards::tasks::EVENTS_PER_QUEUE_MAX)]
    pub task_events_max: usize,
    /// Let Lua scripts touch keys they did not declare, on any shard: every script then
    /// locks every shard while it runs (for clients such as BullMQ; docs/ARCHITECTURE.md).
    #[arg(long)]
    pub lua_whole_server: bool,
    /// Most memory one shard's Lua state may use, in bytes; a script that needs more fails
    /// with an out-of-memory error (docs/SECURITY.md).
    #[arg(long, default_value_t = 256 * 1024 * 1024)]
    pub lua_memory_limit: usize,
    /// After this many ms a running script makes the shards it holds answer BUSY, and
    /// SCRIPT KILL may stop it (Redis's `busy-reply-threshold`; 0: never).
    #[arg(long, default_value_t = 5000)]
    pub busy_reply_threshold: u64,
    /// With no password set, serve only clients on loopback addresses (`yes`, Redis's
    /// default) or anyone (`no`).
    #[arg(long, default_value = "yes", value_parser = yes_no, action = clap::ArgAction::Set)]
    pub protected_mode: bool,
    /// Close a client connection idle for this many seconds (0: never). Clients blocked in
    /// a command or subscribed to channels are exempt, as in Redis.
    #[arg(long, default_value_t = 0)]
    pub timeout: u64,
    /// TCP keepalive probes on client sockets after this many idle seconds (0: off).
    #[arg(long, default_value_t = 300)]
    pub tcp_keepalive: u64,
    /// Most bytes of memory the server may use for data (its allocator's count, as Redis's
    /// `used_memory`), with Redis's units (`64mb`, `1gb`); 0: no limit.
    #[arg(long, default_value = "0", value_parser = memory_size)]
    pub maxmemory: u64,
    /// What to do past `maxmemory`: noeviction (refuse writes with OOM), allkeys-lru,
    /// allkeys-lfu, allkeys-random, volatile-lru, volatile-lfu, volatile-random, volatile-ttl.
    /// Task data is never evicted: TASK.SUBMIT is refused instead.
    #[arg(long, default_value = "noeviction", value_parser = eviction_policy)]
    pub maxmemory_policy: wetask_shards::keyspace::evict::Policy,
    /// Keys sampled per eviction (Redis's approximated LRU/LFU).
    #[arg(long, default_value_t = 5)]
    pub maxmemory_samples: u64,
    /// Keyspace notifications to publish, as Redis's `notify-keyspace-events` classes
    /// (`KEA`: every event on both channel kinds; empty: none).
    #[arg(long, default_value = "", value_parser = notify_classes)]
    pub notify_keyspace_events: u32,
    /// Log filter (`tracing` env-filter syntax), e.g. `info` or `wetask=debug`.
    #[arg(long, default_value = "info")]
    pub log_level: String,
    /// Keep a journal of every write under `dir` and load it at start (Redis's
    /// `appendonly`; docs/DURABILITY.md). On by default: a task engine that forgets its
    /// tasks on restart is not reliable.
    #[arg(long, default_value = "yes", value_parser = yes_no, action = clap::ArgAction::Set)]
    pub appendonly: bool,
    /// When journal writes reach the disk: `always` (before the reply), `everysec` (at most
    /// about a second of acknowledged writes lost in a crash), `no` (the kernel decides).
    #[arg(long, value_enum, default_value_t = Fsync::Everysec)]
    pub appendfsync: Fsync,
    /// The working directory for persistence files.
    #[arg(long, default_value = ".")]
    pub dir: String,
    /// The folder inside `dir` that holds the journals and their manifest.
    #[arg(long, default_value = "appendonlydir")]
    pub appenddirname: String,
    /// Start even if a journal ends in a torn record (a crash mid-write), dropping it
    /// (`yes`, Redis's default), or refuse to (`no`).
    #[arg(long, default_value = "yes", value_parser = yes_no, action = clap::ArgAction::Set)]
    pub aof_load_truncated: bool,
    /// Start even if a journal is damaged before its end, loading what precedes the damage
    /// (a copy of the damaged file is kept); by default such a start stops with the file,
    /// offset and reason.
    #[arg(long, default_value = "no", value_parser = yes_no, action = clap::ArgAction::Set)]
    pub aof_load_corrupt: bool,
    /// Compact a shard's journal into a snapshot when it has grown by this percentage of
    /// the last snapshot's size (Redis's `auto-aof-rewrite-percentage`; 0: never)...
    #[arg(long, default_value_t = 100)]
    pub auto_aof_rewrite_percentage: u64,
    /// ... and is at least this large (`auto-aof-rewrite-min-size`).
    #[arg(long, default_value = "64mb", value_parser = memory_size)]
    pub auto_aof_rewrite_min_size: u64,
    /// Snapshot points, `"<seconds> <changes> …"`: compact once `changes` writes happened
    /// and `seconds` passed since the last snapshot (Redis's `save`; empty: none, the
    /// default, as the journal is always on).
    #[arg(long, default_value = "")]
    pub save: String,
    /// Comma-separated CPUs to pin shards to, in order (default: the online CPUs).
    #[arg(long, value_delimiter = ',')]
    pub cpus: Vec<usize>,
    /// The Redis version HELLO and INFO report. Clients gate features on it: redis-py's
    /// client-side cache (`cache_config`) refuses servers under 7.4, so set `7.4.0` for it
    /// (docs/COMPATIBILITY.md says what of 7.4 is not here).
    #[arg(long, default_value = REDIS_COMPAT_VERSION, value_parser = version)]
    pub announce_version: String,
    /// Cluster mode (Redis's option): every shard also serves on a port of its own and is
    /// described to cluster clients as a primary owning its slot range, so a cluster client
    /// sends each key to its shard with no hop (docs/CLUSTER.md).
    #[arg(long, default_value = "no", value_parser = yes_no, action = clap::ArgAction::Set)]
    pub cluster_enabled: bool,
    /// Where cluster mode keeps its node ids (in `dir`; Redis's format).
    #[arg(long, default_value = "nodes.conf")]
    pub cluster_config_file: String,
    /// The address cluster mode announces for its shard ports (default: the address the
    /// asking client connected to).
    #[arg(long, default_value = "")]
    pub cluster_announce_ip: String,
    /// Cluster mode: shard i serves on this port + i (0: `port` + 1 + i).
    #[arg(long, default_value_t = 0)]
    pub cluster_shard_port_base: u16,
    /// Cluster mode: shard i's cluster bus listens on this port + i (0: its own port +
    /// 10000, as Redis; a free port where that passes 65535 or the ports are free ones).
    #[arg(long, default_value_t = 0)]
    pub cluster_port: u16,
    /// Cluster mode: a process with no cluster configuration gives each shard one slot range
    /// (one process is a whole cluster). `no`: each shard starts as a fresh Redis Cluster
    /// node, alone and owning nothing, for `redis-cli --cluster create` (docs/CLUSTER.md).
    #[arg(long, default_value = "yes", value_parser = yes_no, action = clap::ArgAction::Set)]
    pub cluster_self_assign: bool,
    /// Start as a replica of this primary: `"host port"` (REPLICAOF at start;
    /// docs/REPLICATION.md).
    #[arg(long, default_value = "")]
    pub replicaof: String,
    /// The password (and user) a replica gives its primary.
    #[arg(long)]
    pub masterauth: Option<String>,
    #[arg(long)]
    pub masteruser: Option<String>,
    /// Whether a replica refuses clients' writes (READONLY).
    #[arg(long, default_value = "yes", value_parser = yes_no, action = clap::ArgAction::Set)]
    pub replica_read_only: bool,
    /// Whether a replica whose link is down serves commands (no: `-MASTERDOWN` for every
    /// command without Redis's `stale` flag).
    #[arg(long, alias = "slave-serve-stale-data", default_value = "yes", value_parser = yes_no, action = clap::ArgAction::Set)]
    pub replica_serve_stale_data: bool,
    /// A primary refuses writes (`-NOREPLICAS`) while fewer replicas than this are online
    /// with an acknowledgement at most `min-replicas-max-lag` seconds old (0: never).
    #[arg(long, alias = "min-slaves-to-write", default_value_t = 0)]
    pub min_replicas_to_write: u64,
    #[arg(long, alias = "min-slaves-max-lag", default_value_t = 10)]
    pub min_replicas_max_lag: u64,
    /// A replica's priority for Redis Sentinel's promotion (lower first; 0: never).
    #[arg(long, alias = "slave-priority", default_value_t = 100)]
    pub replica_priority: u64,
    /// Where this node serves its replicas' journal streams (0: a free port; INFO
    /// replication's `repl_port` and REPLCONF WETASK name it).
    #[arg(long, default_value_t = 0)]
    pub repl_port: u16,
    /// Consensus mode: `raft` makes each shard a member of a Raft group with the same shard
    /// of every node in `raft-peers`; a write is acknowledged once a quorum has it
    /// (docs/REPLICATION.md, "Consensus mode"). Implies cluster mode.
    #[arg(long, default_value = "", value_parser = consensus_mode)]
    pub consensus: String,
    /// Consensus mode: this node's id among `raft-peers`.
    #[arg(long, default_value_t = 0)]
    pub raft_id: u64,
    /// Consensus mode: every member, `id=host:port[:raft-port]`, comma separated (`port` is
    /// the member's client port; Raft's defaults to `port` + 20000).
    #[arg(long, default_value = "")]
    pub raft_peers: String,
    /// Consensus mode: once a group's log since its last snapshot holds this many bytes of
    /// entries, a snapshot of the shard is made (off the shard thread) and the log is
    /// compacted to it. A follower that falls behind the compacted log is sent the
    /// snapshot.
    #[arg(long, default_value_t = 64 << 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub raft_snapshot_log_bytes: u64,
    /// Consensus mode: start outside the groups, to be added to them by their leaders
    /// (`RAFT ADD` on each group's leader); `raft-peers` names the members this node can
    /// reach, itself included. The node serves nothing until a group adds it.
    #[arg(long, default_value = "no", value_parser = yes_no, action = clap::ArgAction::Set)]
    pub raft_join: bool,
    /// Consensus mode: a secret every member's Raft links open with; a link without it
    /// is dropped. Sent in the clear (as AUTH is): keep the Raft ports on a private
    /// network.
    #[arg(long)]
    pub raft_auth: Option<String>,
}

fn consensus_mode(text: &str) -> Result<String, String> {
    match text.to_ascii_lowercase().as_str() {
        "" | "no" | "off" => Ok(String::new()),
        "raft" => Ok("raft".into()),
        other => Err(format!("consensus mode '{other}' is not 'raft'")),
    }
}

/// The Redis version WeTask announces by default (INFO, HELLO): the release whose
/// commands it serves.
pub const REDIS_COMPAT_VERSION: &str = "7.2.0";

/// A version as Redis writes it: `major.minor.patch`.
fn version(value: &str) -> Result<String, String> {
    let parts: Vec<&str> = value.split('.').collect();
    if parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
    {
        Ok(value.to_string())
    } else {
        Err(format!("'{value}' is not a version like 7.2.0"))
    }
}

/// A size with Redis's units (`64mb`, `1gb`, `100k`, plain bytes).
pub fn memory_size(value: &str) -> Result<u64, String> {
    crate::output_limits::parse_memory(value).ok_or_else(|| format!("not a size: {value:?}"))
}

/// A `maxmemory-policy` name.
pub fn eviction_policy(value: &str) -> Result<wetask_shards::keyspace::evict::Policy, String> {
    wetask_shards::keyspace::evict::Policy::parse(value)
        .ok_or_else(|| format!("unknown maxmemory-policy {value:?}"))
}

/// `notify-keyspace-events` classes (`KEA`, `Ex` …).
pub fn notify_classes(value: &str) -> Result<u32, String> {
    wetask_shards::keyspace::notify::parse(value)
        .ok_or_else(|| wetask_shards::keyspace::notify::BAD_CLASS.into())
}

/// Redis's boolean option values.
pub fn yes_no(value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err(format!("expected yes or no, got {value:?}")),
    }
}

impl Config {
    /// Parses the process arguments, reading `--config FILE` first when given.
    pub fn load() -> Result<Config, String> {
        let cli: Vec<String> = std::env::args().collect();
        let first = Config::try_parse_from(&cli).map_err(|e| e.to_string())?;
        let Some(path) = &first.config else {
            return Ok(first);
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
        let mut args = vec![cli[0].clone()];
        args.extend(file_args(&text)?);
        args.extend(cli[1..].iter().cloned());
        Config::try_parse_from(args).map_err(|e| e.to_string())
    }
}

/// Turns `name value` lines into `--name value` arguments.
fn file_args(text: &str) -> Result<Vec<String>, String> {
    let mut args = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, value) = line
            .split_once(char::is_whitespace)
            .ok_or_else(|| format!("config line {}: expected `name value`", number + 1))?;
        if name == "config" {
            return Err(format!(
                "config line {}: a config file cannot include another",
                number + 1
            ));
        }
        args.push(format!("--{}", name.replace('_', "-")));
        args.push(value.trim().trim_matches('"').to_string());
    }
    Ok(args)
}

/// Redis's `appendfsync` (the journal's policy; `persist` acts on it).
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Fsync {
    /// fdatasync after every loop turn's write, before its replies leave.
    Always,
    /// fdatasync once a second, from a background thread.
    Everysec,
    /// Never: the kernel writes back when it likes.
    No,
}

impl Fsync {
    pub const ALL: [Fsync; 3] = [Fsync::Always, Fsync::Everysec, Fsync::No];

    pub fn parse(name: &str) -> Option<Fsync> {
        Fsync::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(name))
    }

    pub fn name(self) -> &'static str {
        match self {
            Fsync::Always => "always",
            Fsync::Everysec => "everysec",
            Fsync::No => "no",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_lines_become_flags() {
        let args =
            file_args("# comment\nport 7000\nrequirepass \"s3cret\"\n\nmax_clients 5").unwrap();
        assert_eq!(
            args,
            [
                "--port",
                "7000",
                "--requirepass",
                "s3cret",
                "--max-clients",
                "5"
            ]
        );
        assert!(file_args("lonely").is_err());
    }

    /// Redis's yes/no options take a value (they once parsed as bare flags, so `--x no`
    /// was refused).
    #[test]
    fn yes_no_options_take_a_value() {
        let config = Config::try_parse_from([
            "wetask",
            "--protected-mode",
            "no",
            "--appendonly",
            "no",
            "--aof-load-corrupt",
            "yes",
        ])
        .unwrap();
        assert!(!config.protected_mode && !config.appendonly && config.aof_load_corrupt);
        let defaults = Config::try_parse_from(["wetask"]).unwrap();
        assert!(defaults.protected_mode && defaults.appendonly && !defaults.aof_load_corrupt);
        assert_eq!(defaults.appendfsync, Fsync::Everysec);
    }

    #[test]
    fn later_flags_override_earlier_ones() {
        let config =
            Config::try_parse_from(["wetask", "--port", "7000", "--port", "7001"]).unwrap();
        assert_eq!(config.port, 7001);
    }
}
