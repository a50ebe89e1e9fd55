//! Start-up and shutdown: kernel checks, listeners, one pinned glommio executor per shard
//! (placement stated explicitly, in one place), the cross-shard mesh, and signal handling.

use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use glommio::channels::channel_mesh::{Full, MeshBuilder};
use glommio::{CpuSet, Latency, LocalExecutorPoolBuilder, PoolPlacement, Shares};

use crate::config::{Config, IoMode};
use crate::globals::Globals;
use crate::mesh::{Envelope, Mesh, CHANNEL_CAPACITY};
use crate::net;
use crate::shard::{ShardCtx, CRON_PERIOD};

/// Memory glommio registers per executor for its own I/O buffers (locked memory).
pub const GLOMMIO_IO_MEMORY_BYTES: usize = 2 * 1024 * 1024;
/// The driver's task queue latency: glommio's preemption period while the network loop is
/// busy, so the most that glommio's own work waits then (its timers, wake-ups from other
/// threads, tasks in other queues; the loop serves the mesh and its parked commands itself).
/// Each period ends in a pass through glommio's reactor that serves no client: two
/// `io_uring_enter`s and a re-armed timer, 16–23 µs on the 2-CPU VM. At 1 ms that was
/// ~2% of a saturated shard, and every job in flight during a pass waited for it: 10 ms
/// gave 1.03x jobs/s and 0.90x p99 on the job flow (docs/perf-notes.md, "glommio's
/// preemption pass").
pub const NET_LATENCY: Duration = Duration::from_millis(10);

/// The CPUs this process may run on, in order.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: sched_getaffinity fills a zeroed cpu_set_t of the size we pass.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return vec![0];
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect()
    }
}

/// Raises RLIMIT_MEMLOCK, which glommio's registered buffers need: to unlimited where
/// allowed (root with CAP_SYS_RESOURCE), else to the hard limit.
fn raise_memlock() {
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: getrlimit/setrlimit with valid structs.
    unsafe {
        if libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) == 0 {
            return;
        }
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_MEMLOCK, &limit);
            let needed = (GLOMMIO_IO_MEMORY_BYTES as u64 + (1 << 20)) * 4;
            if limit.rlim_cur != libc::RLIM_INFINITY && limit.rlim_cur < needed {
                tracing::warn!(
                    "locked-memory limit is {} KiB; if start-up fails, raise it (linux-setup/README.md)",
                    limit.rlim_cur / 1024
                );
            }
        }
    }
}

/// Logs every panic through `tracing`. A panic inside a shard command's boundary
/// (`wetask_shards::contain`) is logged with the command's name and unwinds to the boundary,
/// which answers the client with an error; a panic anywhere else aborts the process at once,
/// loudly, so a supervisor restarts it instead of a half-dead shard living on
/// (docs/SECURITY.md).
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        let thread = thread.name().unwrap_or("unnamed");
        match wetask_shards::contain::current_command() {
            Some(command) => tracing::error!(
                command,
                thread,
                "command panicked (contained: the client gets an error, the shard goes on): {info}"
            ),
            None => {
                tracing::error!(
                    thread,
                    "panic outside any command: aborting the process so a supervisor restarts it: {info}"
                );
                eprintln!("{}", std::backtrace::Backtrace::force_capture());
                std::process::abort();
            }
        }
    }));
}

pub fn run(config: Config) -> Result<(), String> {
    crate::memory::note_startup();
    crate::memory::set_maxmemory(config.maxmemory);
    let cpus = if config.cpus.is_empty() {
        allowed_cpus()
    } else {
        config.cpus.clone()
    };
    let shard_count = config.shards.unwrap_or(cpus.len()).max(1);
    let io = usable_io(config.io);
    raise_memlock();
    ignore_signals();

    let (listeners, port) = net::bind_listeners(&config.bind, config.port, shard_count)
        .map_err(|e| format!("cannot listen on {}:{}: {e}", config.bind, config.port))?;
    let mut config = config;
    config.io = io;
    check_consensus(&mut config)?;
    let doorbells = crate::doorbell::Doorbell::for_shards(shard_count)
        .map_err(|e| format!("cannot create the shards' doorbells: {e}"))?;
    let (shard_listeners, cluster) = cluster_listeners(&config, port, shard_count)?;
    let mut globals = Globals::new(config.clone(), shard_count, doorbells.clone());
    globals.load_acl_file()?;
    globals.cluster = start_cluster(cluster, &globals.relay)?;
    globals.consensus = start_consensus(&config, shard_count, doorbells, &globals.relay)?;
    let globals = Arc::new(globals);
    let resume = open_data(&globals, shard_count)?;
    globals
        .port
        .store(port, std::sync::atomic::Ordering::Relaxed);
    start_replication(&globals, resume)?;
    spawn_service_threads(&globals)?;
    let watched = globals.clone();
    crate::watchdog::spawn(globals.watchdog.clone(), move || watched.shutting_down())
        .map_err(|e| format!("cannot start the watchdog thread: {e}"))?;

    let listeners: Arc<Mutex<Vec<Option<OwnedFd>>>> =
        Arc::new(Mutex::new(listeners.into_iter().map(Some).collect()));
    let shard_listeners: Arc<Mutex<Vec<Option<OwnedFd>>>> =
        Arc::new(Mutex::new(shard_listeners.into_iter().map(Some).collect()));
    let placement = placement(&cpus, shard_count)?;
    let builders = Arc::new(Mutex::new(mesh_builders(shard_count)));
    let exiting = globals.clone();
    tracing::info!(
        shards = shard_count,
        io = ?io,
        cpus = ?(0..shard_count).map(|i| cpus[i % cpus.len()]).collect::<Vec<_>>(),
        "WeTask {} listening on {}:{port}",
        env!("CARGO_PKG_VERSION"),
        config.bind,
    );
    let handles = LocalExecutorPoolBuilder::new(PoolPlacement::Custom(placement))
        .name("wetask-shard")
        .io_memory(GLOMMIO_IO_MEMORY_BYTES)
        .on_all_shards(move || {
            let (globals, listeners) = (globals.clone(), listeners.clone());
            let shard_listeners = shard_listeners.clone();
            let mesh = builders
                .lock()
                .expect("mesh builders")
                .iter_mut()
                .find_map(Option::take)
                .expect("one mesh builder per shard");
            async move { shard_main(globals, listeners, shard_listeners, mesh).await }
        })
        .map_err(|e| format!("cannot start the shard executors: {e}"))?;
    join_shards(handles)?;
    save_replication_resume(&exiting);
    Ok(())
}

/// After a clean exit, every journal closed: what a restart continues the replication
/// streams from (`replication::resume`).
fn save_replication_resume(globals: &Globals) {
    if let Some(store) = globals.store.get() {
        if let Err(e) = crate::replication::resume::save(&store.path, &globals.replication) {
            tracing::warn!("cannot save the replication positions: {e}");
        }
    }
}

/// Each shard's CPU: shard `i` on `cpus[i % cpus.len()]`.
fn placement(cpus: &[usize], shard_count: usize) -> Result<Vec<CpuSet>, String> {
    (0..shard_count)
        .map(|i| CpuSet::online().map(|set| set.filter(|l| l.cpu == cpus[i % cpus.len()])))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("cannot read the CPU topology: {e}"))
}

/// Consensus mode's requirements, checked before anything starts: the io_uring path (its
/// ring holds the replies until they commit), and cluster mode, which it implies (clients
/// follow the leaders through `-MOVED` and `CLUSTER SLOTS`; each shard's group is a slot
/// range with its own leader). The Raft log is the node's persistence: the journal and
/// snapshots are off.
fn check_consensus(config: &mut Config) -> Result<(), String> {
    if config.consensus.is_empty() {
        return Ok(());
    }
    if config.io != IoMode::Uring {
        return Err(
            "consensus mode needs --io uring (its ring holds replies until they commit)".into(),
        );
    }
    if !config.replicaof.is_empty() {
        return Err("consensus mode and --replicaof exclude each other".into());
    }
    config.cluster_enabled = true;
    config.cluster_self_assign = true;
    config.appendonly = false;
    Ok(())
}

/// Consensus mode: the groups, and the transport's threads.
fn start_consensus(
    config: &Config,
    shard_count: usize,
    doorbells: Arc<[crate::doorbell::Doorbell]>,
    relay: &Arc<crate::pubsub_relay::Relay>,
) -> Result<Option<Arc<crate::consensus::Consensus>>, String> {
    if config.consensus.is_empty() {
        return Ok(None);
    }
    let peers = crate::consensus::peers::parse(&config.raft_peers, config.raft_id)?;
    let dir = crate::consensus::data_dir(config);
    std::fs::create_dir_all(&dir)
        .map_err(|e| format!("cannot create the Raft directory {}: {e}", dir.display()))?;
    let mut consensus = crate::consensus::Consensus::new(
        config.raft_id,
        peers,
        shard_count,
        doorbells,
        config.raft_snapshot_log_bytes,
        config.raft_join,
        config.raft_auth.clone(),
    );
    consensus.dir = dir;
    consensus.relay = relay.clone();
    let consensus = Arc::new(consensus);
    crate::consensus::transport::spawn(consensus.clone())?;
    tracing::info!(
        id = config.raft_id,
        known = consensus.peers().len(),
        joining = consensus.joining,
        "consensus mode (Raft)"
    );
    Ok(Some(consensus))
}

/// The signal thread, the metrics thread when `--metrics-port` is given, and the dashboard's
/// when `--http-port` is.
fn spawn_service_threads(globals: &Arc<Globals>) -> Result<(), String> {
    spawn_signal_thread(globals.clone())?;
    if let Some(port) = globals.config.metrics_port {
        crate::metrics::spawn(globals.clone(), &globals.config.bind, port)?;
    }
    if let Some(port) = globals.config.http_port {
        crate::dashboard::spawn(globals.clone(), &globals.config.bind, port)?;
    }
    Ok(())
}

/// Serves replicas (with a journal to serve them from), and follows `replicaof` if set,
/// from `resume` when the last clean exit left the stream there.
fn start_replication(
    globals: &Arc<Globals>,
    resume: Option<(String, Vec<u64>)>,
) -> Result<(), String> {
    let config = &globals.config;
    let replication = &globals.replication;
    replication.read_only.store(
        config.replica_read_only,
        std::sync::atomic::Ordering::Relaxed,
    );
    replication.gate.configure(config);
    let inert = &crate::commands::config_inert::INERT;
    for (name, value) in [
        ("masterauth", &config.masterauth),
        ("masteruser", &config.masteruser),
    ] {
        if let Some(value) = value {
            let _ = inert.set(name, value);
        }
    }
    if let Some(store) = globals.store.get() {
        let port = crate::replication::sender::spawn(
            replication.clone(),
            store.clone(),
            &config.bind,
            config.repl_port,
        )?;
        tracing::info!(port, "serving replicas");
    }
    if !config.replicaof.trim().is_empty() {
        let (host, port) = config
            .replicaof
            .trim()
            .split_once(char::is_whitespace)
            .and_then(|(h, p)| Some((h.to_string(), p.trim().parse::<u16>().ok()?)))
            .ok_or_else(|| {
                format!(
                    "replicaof: expected \"host port\", got {:?}",
                    config.replicaof
                )
            })?;
        crate::commands::replication::follow_from(globals, host, port, resume);
    }
    Ok(())
}

/// Opens the data directory (the journal, or the snapshots of `appendonly no`) and loads
/// the saved function libraries; returns where the last clean exit left the stream this
/// node followed as a replica, if anywhere (its own run id is restored here).
fn open_data(
    globals: &Arc<Globals>,
    shard_count: usize,
) -> Result<Option<(String, Vec<u64>)>, String> {
    if globals.consensus.is_some() {
        // The Raft log is the node's persistence (`check_consensus`).
        return Ok(None);
    }
    let config = &globals.config;
    let mut follows = None;
    if let Some(store) = crate::persist::prepare(config, shard_count)? {
        let saved =
            crate::replication::resume::take(&store.path, shard_count, &globals.replication);
        if let Some(run) = saved.run_id {
            *globals.replication.run_id.lock().expect("run id") = run;
        }
        follows = saved.follows;
        *globals.replication.redis_saved.lock().expect("redis saved") = saved.follows_redis;
        let _ = globals.store.set(store);
    }
    if let Some(dumps) = crate::persist::dump::open(config, shard_count)? {
        let _ = globals.dumps.set(dumps);
    }
    let libraries = crate::function_store::load_saved(globals)?;
    if libraries > 0 {
        tracing::info!(libraries, "function libraries loaded");
    }
    Ok(follows)
}

/// Publishes the cluster's routing table (before the data: loading places keys by it) and
/// starts its bus.
fn start_cluster(
    cluster: Option<(Arc<crate::cluster::Cluster>, Vec<std::net::TcpListener>)>,
    relay: &Arc<crate::pubsub_relay::Relay>,
) -> Result<Option<Arc<crate::cluster::Cluster>>, String> {
    let Some((cluster, bus)) = cluster else {
        return Ok(None);
    };
    let _ = cluster.relay.set(relay.clone());
    cluster.publish();
    crate::cluster::bus::spawn(cluster.clone(), bus)?;
    Ok(Some(cluster))
}

/// A shard's port, its bus listener, the cluster: what cluster mode starts with.
type ClusterStart = (
    Vec<OwnedFd>,
    Option<(Arc<crate::cluster::Cluster>, Vec<std::net::TcpListener>)>,
);

/// Cluster mode (`cluster-enabled yes`): binds each shard's own port (`port` + 1 + i, or
/// `cluster-shard-port-base` + i; with `port 0`, free ports) and its cluster bus port, and
/// opens the cluster's configuration (`cluster::Cluster`). Nothing when cluster mode is off.
fn cluster_listeners(
    config: &Config,
    port: u16,
    shard_count: usize,
) -> Result<ClusterStart, String> {
    if !config.cluster_enabled {
        return Ok((Vec::new(), None));
    }
    if config.io != IoMode::Uring {
        return Err(
            "cluster mode needs --io uring (the shard ports are served by its ring)".into(),
        );
    }
    let mut listeners = Vec::with_capacity(shard_count);
    let mut ports = Vec::with_capacity(shard_count);
    for shard in 0..shard_count {
        let wanted = match (config.cluster_shard_port_base, config.port) {
            (0, 0) => 0,
            (0, _) => port as usize + 1 + shard,
            (base, _) => base as usize + shard,
        };
        let wanted = u16::try_from(wanted)
            .map_err(|_| format!("shard {shard}'s port {wanted} is past 65535"))?;
        let (listener, bound) = net::bind_one(&config.bind, wanted).map_err(|e| {
            format!(
                "cannot listen on {}:{wanted} (shard {shard}): {e}",
                config.bind
            )
        })?;
        listeners.push(listener);
        ports.push(bound);
    }
    let (bus, bus_ports) = bus_listeners(config, &ports)?;
    // A node announces its bind address when it is one (127.0.0.2, a NIC's); bound to all
    // interfaces, it learns its address from the first MEET, as Redis does.
    let own_ip = match config.cluster_announce_ip.as_str() {
        "" => match config.bind.parse::<std::net::IpAddr>() {
            Ok(ip) if !ip.is_unspecified() => ip.to_string(),
            _ => String::new(),
        },
        ip => ip.to_string(),
    };
    let cluster = crate::cluster::Cluster::open(
        &crate::cluster::Cluster::path(config),
        ports,
        bus_ports,
        own_ip,
        config.cluster_announce_ip.clone(),
        config.cluster_self_assign,
    )?;
    tracing::info!(ports = ?cluster.ports, bus = ?cluster.bus_ports, "cluster mode: each shard serves on its own port too");
    Ok((listeners, Some((Arc::new(cluster), bus))))
}

/// Binds each shard's cluster bus port: `cluster-port` + i, or its own port + 10000 (a
/// free one where that passes 65535, or with `port 0`).
fn bus_listeners(
    config: &Config,
    ports: &[u16],
) -> Result<(Vec<std::net::TcpListener>, Vec<u16>), String> {
    let mut bus = Vec::with_capacity(ports.len());
    let mut bus_ports = Vec::with_capacity(ports.len());
    for (shard, &own) in ports.iter().enumerate() {
        let wanted = match config.cluster_port {
            0 if config.port == 0 => 0,
            0 => own.checked_add(10000).unwrap_or(0),
            base => base
                .checked_add(shard as u16)
                .ok_or_else(|| format!("shard {shard}'s cluster bus port is past 65535"))?,
        };
        let listener =
            std::net::TcpListener::bind((config.bind.as_str(), wanted)).map_err(|e| {
                format!(
                    "cannot listen on {}:{wanted} (cluster bus of shard {shard}): {e}",
                    config.bind
                )
            })?;
        bus_ports.push(listener.local_addr().map_err(|e| e.to_string())?.port());
        bus.push(listener);
    }
    Ok((bus, bus_ports))
}

/// One mesh builder per shard, each shard to take one. glommio 0.9's `MeshBuilder` is
/// `Send` but shares its peer list through an `Rc`, so cloning it on the shard threads raced
/// on the reference count: heap corruption in about one two-shard start in fifteen (found
/// with AddressSanitizer; docs/perf-notes.md). Every clone is made here, on this thread,
/// before any shard starts. The shards' concurrent drops at the end of `join` can then only
/// lose a decrement (the peer list, a few bytes, is never freed), never free it early.
fn mesh_builders(shard_count: usize) -> Vec<Option<MeshBuilder<Envelope, Full>>> {
    let mesh = MeshBuilder::<Envelope, _>::full(shard_count, CHANNEL_CAPACITY);
    (0..shard_count).map(|_| Some(mesh.clone())).collect()
}

/// Signals that must not kill the server: SIGPIPE (sends use MSG_NOSIGNAL anyway) and
/// SIGXFSZ (a journal write past a file-size limit then fails with EFBIG, which the journal
/// handles like a full disk: MISCONF).
fn ignore_signals() {
    // SAFETY: setting two signals' dispositions to SIG_IGN, process-wide, before any thread
    // that could receive them starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

/// The network path asked for, or the glommio fallback when the kernel lacks the ring's
/// features.
fn usable_io(io: IoMode) -> IoMode {
    if io == IoMode::Uring {
        if let Err(missing) = net::uring::check_kernel() {
            tracing::warn!("{missing}; falling back to --io glommio (readiness-based, slower)");
            return IoMode::Glommio;
        }
    }
    io
}

/// Waits for every shard executor; the first failure, if any.
fn join_shards(handles: glommio::PoolThreadHandles<Result<(), String>>) -> Result<(), String> {
    let mut failure = None;
    for result in handles.join_all() {
        match result {
            Ok(Ok(())) => {}
            Ok(Err(err)) => failure = Some(err),
            Err(err) => failure = Some(format!("a shard executor failed: {err}")),
        }
    }
    match failure {
        Some(err) => Err(err),
        None => {
            tracing::info!("all shards drained; bye");
            Ok(())
        }
    }
}

fn spawn_signal_thread(globals: Arc<Globals>) -> Result<(), String> {
    let mut signals = signal_hook::iterator::Signals::new([libc::SIGTERM, libc::SIGINT])
        .map_err(|e| format!("cannot install signal handlers: {e}"))?;
    std::thread::Builder::new()
        .name("wetask-signals".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                tracing::info!(signal, "signal received; draining");
                globals.begin_shutdown();
            }
        })
        .map_err(|e| format!("cannot start the signal thread: {e}"))?;
    Ok(())
}

/// The shard's cron on the glommio fallback: every `CRON_PERIOD` it beats for the watchdog
/// and runs the turn's chores. (The io_uring loop keeps its own cron: it sleeps in its ring,
/// where glommio's timers cannot wake it.)
fn spawn_cron(cron_ctx: Rc<ShardCtx>) {
    glommio::spawn_local(async move {
        while !cron_ctx.globals.shutting_down() {
            glommio::timer::sleep(CRON_PERIOD).await;
            cron_ctx.beats.cron.store(
                crate::globals::unix_ms(),
                std::sync::atomic::Ordering::Relaxed,
            );
            cron_ctx.tick();
        }
    })
    .detach();
}

/// `appendonly no`: shard 0 starts a save when its housekeeping finds a save point reached
/// (`ShardCore::save_point_due`), from a task, since a save waits for every shard.
fn spawn_save_points(ctx: Rc<ShardCtx>) {
    glommio::spawn_local(async move {
        while !ctx.globals.shutting_down() {
            glommio::timer::sleep(CRON_PERIOD).await;
            if ctx.save_point_due.replace(false) {
                crate::commands::persistence::save_point(ctx.clone()).await;
            }
        }
    })
    .detach();
}

/// Loads the shard's snapshot and journal (persistence on) and opens its journal; every
/// envelope to a peer writes and syncs the journal first.
fn recover_shard(ctx: &Rc<ShardCtx>, store: &Arc<crate::persist::Store>) -> Result<(), String> {
    let started = std::time::Instant::now();
    let (journal, recovered) = {
        let mut shard = ctx.shard.borrow_mut();
        let recovered = crate::persist::recover(store, ctx.id, ctx.shard_count, &mut shard)?;
        if shard.holds_partial_sync() {
            // The journal ends inside a full sync from a primary: the node answers LOADING
            // until the next one ends (`Globals::answers_loading`), or, not a replica, until
            // REPLICAOF NO ONE keeps the part.
            tracing::warn!(
                shard = ctx.id,
                "the journal ends inside a full sync from a primary: the data is partial; it answers LOADING until REPLICAOF host port syncs it again (or, not a replica, REPLICAOF NO ONE keeps the part)"
            );
            let replication = &ctx.globals.replication;
            replication
                .started_partial
                .store(true, std::sync::atomic::Ordering::Release);
            replication.inboxes[ctx.id]
                .loading
                .store(true, std::sync::atomic::Ordering::Release);
        }
        recovered
    };
    tracing::info!(
        shard = ctx.id,
        records = recovered.records,
        operations = recovered.operations,
        bytes = recovered.bytes,
        leases_released = recovered.leases_released,
        ms = started.elapsed().as_millis() as u64,
        "journal loaded"
    );
    ctx.seed_tokens();
    *ctx.journal.borrow_mut() = Some(journal);
    if let Some(mesh) = &ctx.mesh {
        let core = ctx.clone();
        mesh.set_before_send(Box::new(move || {
            core.commit_journal(crate::persist::Commit::Durable)
        }));
    }
    // Runs once the shard serves: it asks its peers about batch children it has not heard of.
    glommio::spawn_local(crate::commands::reconcile_batches(ctx.clone())).detach();
    Ok(())
}

/// Until the network loop's first poll publishes its own waker, the watchdog (registered by
/// `Net::new`) rouses the shard's start-up task instead: glommio's lost wake-up can strike
/// between the loop's spawn and its first poll, the executor parked, and with no waker to
/// wake the shard slept until a peer happened to send it something (a restarted server that
/// read nothing for seconds: docs/ARCHITECTURE.md).
async fn publish_start_waker(ctx: &ShardCtx) {
    let waker = std::future::poll_fn(|cx| std::task::Poll::Ready(cx.waker().clone())).await;
    *ctx.beats.loop_waker.lock().expect("waker") = Some(waker);
}

// Long: a shard's start, step by step in the order each needs the one before (state, journal, mesh, listener, ring, tasks), then its run and drain.
async fn shard_main(
    globals: Arc<Globals>,
    listeners: Arc<Mutex<Vec<Option<OwnedFd>>>>,
    shard_listeners: Arc<Mutex<Vec<Option<OwnedFd>>>>,
    mesh: MeshBuilder<Envelope, Full>,
) -> Result<(), String> {
    let shard_count = globals.shard_count;
    let (id, mesh, receivers) = if shard_count > 1 {
        let Ok((senders, receivers)) = mesh.join().await else {
            if let Some(store) = globals.store.get() {
                store.abandon_recovery();
            }
            return Err("cannot join the shard mesh".to_string());
        };
        (
            senders.peer_id(),
            Some(Rc::new(Mesh::new(senders, globals.doorbells.clone()))),
            Some(receivers),
        )
    } else {
        (0, None, None)
    };
    let ctx = Rc::new(ShardCtx::new(id, globals.clone(), mesh.clone()));
    if let Some(consensus) = &globals.consensus {
        let dir = crate::consensus::data_dir(&globals.config);
        let config = &globals.config;
        let (retention, dead, events) = (
            config.task_retention_ms,
            config.task_dead_retention_ms,
            config.task_events_max,
        );
        let scratch: crate::consensus::snapshotter::ScratchShard = Arc::new(move || {
            let mut shard = wetask_shards::Shard::new(id);
            shard.tasks = wetask_shards::tasks::Engine::new(retention)
                .with_dead_retention(dead)
                .with_events_max(events);
            shard
        });
        let raft = crate::shard::raft::ShardRaft::open(
            consensus.clone(),
            id,
            &dir,
            &crate::shard::raft::logger(),
            &mut ctx.shard.borrow_mut(),
            scratch,
        )?;
        ctx.shard.borrow_mut().set_replica(true);
        *ctx.raft.borrow_mut() = Some(raft);
    }
    if let Some(store) = globals.store.get() {
        recover_shard(&ctx, store)?;
    }
    if let Some(dumps) = globals.dumps.get() {
        let started = std::time::Instant::now();
        let loaded = dumps.load(id, &mut ctx.shard.borrow_mut())?;
        if let Some(keys) = loaded {
            let ms = started.elapsed().as_millis() as u64;
            tracing::info!(shard = id, keys, ms, "snapshot loaded");
            ctx.shard
                .borrow_mut()
                .finish_replay(crate::clock::unix_ms(), false);
        }
        if id == 0 {
            spawn_save_points(ctx.clone());
        }
    }
    globals.shard_loaded();
    let beats = ctx.beats.clone();
    let listener = listeners.lock().expect("listeners")[id]
        .take()
        .expect("one listener per shard");
    let shard_listener = shard_listeners
        .lock()
        .expect("shard listeners")
        .get_mut(id)
        .and_then(Option::take);
    let peers = receivers.map(|mut r| r.streams()).unwrap_or_default();
    match globals.config.io {
        IoMode::Uring => {
            // The loop's own queue: its cross-shard batch tasks and the mesh flusher land
            // here too, since glommio spawns into the running queue (`Net::let_others_run`).
            // The loop reads the mesh channels itself and keeps its own cron.
            let net_queue = glommio::executor().create_task_queue(
                Shares::default(),
                Latency::Matters(NET_LATENCY),
                "net",
            );
            let mut listeners = vec![listener];
            listeners.extend(shard_listener);
            let net = net::uring::Net::new(ctx.clone(), listeners, peers)
                .map_err(|e| format!("shard {id}: io_uring set-up failed: {e}"))?;
            publish_start_waker(&ctx).await;
            glommio::spawn_local_into(net.run(), net_queue)
                .map_err(|e| format!("shard {id}: cannot spawn the network loop: {e}"))?
                .await;
        }
        IoMode::Glommio => {
            if let Some(mesh) = mesh {
                for (peer, receiver) in peers {
                    glommio::spawn_local(ctx.clone().serve_peer(peer, receiver)).detach();
                }
                for peer in (0..shard_count).filter(|&p| p != id) {
                    glommio::spawn_local(mesh.clone().run_overflow_sender(peer)).detach();
                }
            }
            spawn_cron(ctx.clone());
            net::fallback::run(ctx.clone(), listener).await
        }
    }
    // With `appendonly no` and save points, a clean exit saves, as Redis's does.
    if let Some(dumps) = globals.dumps.get() {
        if !globals
            .exit_without_save
            .load(std::sync::atomic::Ordering::Acquire)
        {
            dumps.save_at_exit(id, &mut ctx.shard.borrow_mut(), ctx.dump_writes.get());
        }
    }
    // A clean exit leaves nothing unsynced, whatever the policy.
    ctx.commit_journal(crate::persist::Commit::Now);
    if let Some(journal) = ctx.journal.borrow_mut().as_mut() {
        journal.close();
    }
    beats
        .exited
        .store(true, std::sync::atomic::Ordering::Release);
    Ok(())
}
