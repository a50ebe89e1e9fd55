//! The little state all shards share: configuration, client counting, and shutdown. Only
//! atomics and rarely-touched mutexes live here; per-command state never does.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub use crate::clock::{unix_ms, unix_us};

use crate::config::Config;

pub struct Globals {
    pub config: Config,
    /// Cluster mode's description of this node (`cluster-enabled yes`), set at start.
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
    /// Consensus mode's groups and transport (`--consensus raft`), set at start.
    pub consensus: Option<Arc<crate::consensus::Consensus>>,
    /// Parameters CONFIG SET changed since the start, in order (CONFIG REWRITE appends the
    /// ones the config file does not name).
    pub config_changed: Mutex<Vec<String>>,
    /// The data directory, when `appendonly yes` (set once at start).
    pub store: std::sync::OnceLock<Arc<crate::persist::Store>>,
    /// Snapshots without the journal, when `appendonly no` (set once at start).
    pub dumps: std::sync::OnceLock<Arc<crate::persist::dump::Dumps>>,
    /// SHUTDOWN NOSAVE: no snapshot at exit, save points or not.
    pub exit_without_save: AtomicBool,
    pub shard_count: usize,
    /// Replicas of this node, and the primary it follows (`replication`).
    pub replication: Arc<crate::replication::Replication>,
    pub requirepass: Mutex<Option<String>>,
    /// The ACL users (`acl`); the default user's password is `requirepass`. Boxed: the
    /// hot fields around it keep their places.
    pub acl: Box<crate::acl::Acl>,
    pub maxclients: AtomicUsize,
    pub connected_clients: AtomicUsize,
    pub total_connections: AtomicU64,
    pub rejected_connections: AtomicU64,
    /// AUTH and HELLO … AUTH refused (INFO's `acl_access_denied_auth`).
    pub auth_failures: AtomicU64,
    next_client_id: AtomicU64,
    shutdown: AtomicBool,
    /// Shards still loading their data (`shard_loaded`).
    loading: AtomicUsize,
    /// Each shard's beats: the watchdog rouses a shard that has work but sleeps.
    pub watchdog: Arc<crate::watchdog::Watchdog>,
    /// Per shard: how other threads wake its network loop when it sleeps in its ring.
    pub doorbells: Arc<[crate::doorbell::Doorbell]>,
    pub started: Instant,
    pub port: std::sync::atomic::AtomicU16,
    /// Per shard: how many channels and patterns its clients subscribe to (PUBLISH skips
    /// shards with none).
    pub subscriptions: Vec<AtomicUsize>,
    /// PUBLISH messages other nodes sent, for shard 0 to deliver here (`pubsub_relay`).
    pub relay: Arc<crate::pubsub_relay::Relay>,
    /// MONITOR connections per shard, and over all shards.
    pub monitors: Vec<AtomicUsize>,
    pub monitoring: AtomicUsize,
    /// Per shard: the last cross-shard operation it journaled a part of, published before
    /// it answers the operation's coordinator (`ShardCore::parts_written`).
    pub cross_parts: Vec<AtomicU64>,
    /// Script bodies by SHA1, for EVALSHA on any shard.
    pub scripts: Mutex<std::collections::HashMap<String, bytes::Bytes>>,
    /// Scripts seen reaching for undeclared keys on other shards: they hold every shard.
    pub whole_server_scripts: Mutex<std::collections::HashSet<String>>,
    /// Bumped by SCRIPT FLUSH: each shard drops its Lua state when it sees a new value.
    pub script_flush_epoch: std::sync::atomic::AtomicU64,
    /// Per shard: the script running there, for BUSY replies and SCRIPT KILL.
    pub script_slots: std::sync::Arc<[crate::lua::busy::ScriptSlot]>,
    /// `maxmemory-policy` (an index into `wetask_shards::keyspace::evict::POLICIES`) and
    /// `maxmemory-samples`; `maxmemory` itself is `memory::maxmemory()`.
    pub maxmemory_policy: std::sync::atomic::AtomicUsize,
    pub maxmemory_samples: AtomicU64,
    /// `notify-keyspace-events`, as `wetask_shards::keyspace::notify::class` flags.
    pub notify_keyspace_events: std::sync::atomic::AtomicU32,
    /// `client-output-buffer-limit`, per class.
    pub output_limits: crate::output_limits::OutputLimits,
    /// `protected-mode`: without a password, only loopback clients are served.
    pub protected_mode: AtomicBool,
    /// A password is set (mirrors `requirepass`, read per command without the lock).
    pub password_set: AtomicBool,
    /// `timeout`: idle seconds before a client is closed (0: never).
    pub idle_timeout_s: AtomicU64,
    /// `tcp-keepalive`, in seconds (0: off), for sockets accepted from now on.
    pub tcp_keepalive_s: AtomicU64,
    /// `busy-reply-threshold` (alias `lua-time-limit`), in ms; 0 never reports busy.
    pub busy_reply_threshold_ms: std::sync::Arc<AtomicU64>,
    /// SLOWLOG's entries and its two parameters.
    pub slowlog: crate::slowlog::SlowLog,
    /// LATENCY's samples and `latency-monitor-threshold`.
    pub latency: crate::latency::LatencyMonitor,
    /// CLIENT PAUSE's state.
    pub pause: crate::pause::Pause,
    /// FUNCTION's libraries.
    pub functions: Mutex<crate::lua::library::Registry>,
}

impl Globals {
    pub fn new(
        config: Config,
        shard_count: usize,
        doorbells: Arc<[crate::doorbell::Doorbell]>,
    ) -> Self {
        Globals {
            cluster: None,
            consensus: None,
            store: std::sync::OnceLock::new(),
            dumps: std::sync::OnceLock::new(),
            exit_without_save: AtomicBool::new(false),
            watchdog: Arc::new(crate::watchdog::Watchdog::new(doorbells.clone())),
            relay: Arc::new(crate::pubsub_relay::Relay::new(doorbells.clone())),
            doorbells,
            replication: Arc::new(crate::replication::Replication::new(shard_count)),
            requirepass: Mutex::new(config.requirepass.clone()),
            acl: Box::new(crate::acl::Acl::new(
                config.requirepass.as_deref(),
                config.aclfile.clone(),
                config.acl_pubsub_default == "allchannels",
                config.acllog_max_len,
            )),
            maxclients: AtomicUsize::new(config.maxclients),
            loading: AtomicUsize::new(shard_count),
            shard_count,
            subscriptions: (0..shard_count).map(|_| AtomicUsize::new(0)).collect(),
            monitors: (0..shard_count).map(|_| AtomicUsize::new(0)).collect(),
            monitoring: AtomicUsize::new(0),
            cross_parts: (0..shard_count).map(|_| AtomicU64::new(0)).collect(),
            scripts: Mutex::new(std::collections::HashMap::new()),
            whole_server_scripts: Mutex::new(std::collections::HashSet::new()),
            script_flush_epoch: std::sync::atomic::AtomicU64::new(0),
            script_slots: (0..shard_count).map(|_| Default::default()).collect(),
            output_limits: Default::default(),
            maxmemory_policy: AtomicUsize::new(
                wetask_shards::keyspace::evict::POLICIES
                    .iter()
                    .position(|(p, _)| *p == config.maxmemory_policy)
                    .unwrap_or(0),
            ),
            maxmemory_samples: AtomicU64::new(config.maxmemory_samples),
            notify_keyspace_events: std::sync::atomic::AtomicU32::new(
                config.notify_keyspace_events,
            ),
            protected_mode: AtomicBool::new(config.protected_mode),
            password_set: AtomicBool::new(config.requirepass.is_some()),
            idle_timeout_s: AtomicU64::new(config.timeout),
            tcp_keepalive_s: AtomicU64::new(config.tcp_keepalive),
            busy_reply_threshold_ms: std::sync::Arc::new(AtomicU64::new(
                config.busy_reply_threshold,
            )),
            slowlog: Default::default(),
            latency: Default::default(),
            pause: Default::default(),
            functions: Mutex::new(Default::default()),
            connected_clients: AtomicUsize::new(0),
            total_connections: AtomicU64::new(0),
            rejected_connections: AtomicU64::new(0),
            auth_failures: AtomicU64::new(0),
            next_client_id: AtomicU64::new(1),
            shutdown: AtomicBool::new(false),
            started: Instant::now(),
            port: std::sync::atomic::AtomicU16::new(config.port),
            config,
            config_changed: Mutex::new(Vec::new()),
        }
    }

    /// The current `maxmemory-policy`.
    pub fn eviction_policy(&self) -> wetask_shards::keyspace::evict::Policy {
        let index = self.maxmemory_policy.load(Ordering::Relaxed);
        wetask_shards::keyspace::evict::POLICIES.get(index).map_or(
            wetask_shards::keyspace::evict::Policy::NoEviction,
            |(p, _)| *p,
        )
    }

    pub fn maxmemory(&self) -> u64 {
        crate::memory::maxmemory()
    }

    /// Moves the client ids past a primary's (a replica applies its records, which name its
    /// clients as lease owners; a promoted replica's own clients must not be taken for them).
    pub fn skip_client_ids(&self) {
        self.next_client_id.fetch_add(1 << 32, Ordering::Relaxed);
    }

    /// The ACL file's users, at start (`aclfile`).
    pub fn load_acl_file(&self) -> Result<(), String> {
        self.acl.load_at_start(self.config.requirepass.as_deref())?;
        self.sync_password_set();
        Ok(())
    }

    /// Protected mode's test (`password_set`) follows the default user: it is open while
    /// that user needs no password. Called after every change to the users.
    pub fn sync_password_set(&self) {
        let default = self.acl.default_user();
        self.password_set.store(!default.nopass, Ordering::Relaxed);
    }

    pub fn next_client_id(&self) -> u64 {
        self.next_client_id.fetch_add(1, Ordering::Relaxed)
    }

    pub fn shutting_down(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// Commands without Redis's `loading` flag are answered LOADING: on a replica whose
    /// data is part of a full sync (`Replication::loading`), or whose shards have not all
    /// loaded their journals since it started (one may end inside a full sync); and on a
    /// node that started as a primary from a journal that ends inside one, until it syncs
    /// again or REPLICAOF NO ONE keeps the part. On a primary this costs two relaxed loads.
    pub fn answers_loading(&self) -> bool {
        let replication = &self.replication;
        if replication.is_replica() {
            return self.loading.load(Ordering::Acquire) > 0 || replication.loading();
        }
        replication.started_partial.load(Ordering::Relaxed) && replication.loading()
    }

    /// A shard has loaded its data and serves: the last one says so in the log and to the
    /// service manager (`service`).
    pub fn shard_loaded(&self) {
        if self.loading.fetch_sub(1, Ordering::AcqRel) == 1 {
            tracing::info!("ready to accept connections");
            crate::service::notify_ready();
        }
    }

    /// Wakes every shard's loop, asleep or not.
    pub fn ring_every_shard(&self) {
        self.doorbells
            .iter()
            .for_each(crate::doorbell::Doorbell::ring);
    }

    /// Asks every shard to drain and stop, waking those that are parked.
    pub fn begin_shutdown(&self) {
        if !self.shutdown.swap(true, Ordering::AcqRel) {
            crate::service::notify_stopping();
        }
        self.ring_every_shard();
        self.watchdog.wake_loops();
    }

    /// Tries to count one more client; false when `maxclients` is reached.
    pub fn admit_client(&self) -> bool {
        let max = self.maxclients.load(Ordering::Relaxed);
        let admitted = self
            .connected_clients
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok();
        if admitted {
            self.total_connections.fetch_add(1, Ordering::Relaxed);
        } else {
            self.rejected_connections.fetch_add(1, Ordering::Relaxed);
        }
        admitted
    }

    pub fn release_client(&self) {
        self.connected_clients.fetch_sub(1, Ordering::AcqRel);
    }
}
