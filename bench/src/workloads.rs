//! The workload table. Every workload is one row here; adding one is adding a row, not a
//! code path. `Kind::Load` rows drive the load generator against a running server;
//! `Boot` and `Memory` start a fresh server for each sample.
//!
//! `Kind::Tasks` rows run a job flow (`taskflow`): WeTask runs `TASK.*`, Redis the row's
//! list-based flow, so the ratio compares the two ways of running the same jobs.

use std::io;
use std::time::Duration;

use crate::keys::Distribution;
use crate::loadgen::{self, LoadSpec, Mix};
use crate::metrics::Metrics;
use crate::servers::{Server, ServerKind};
use crate::taskflow::{self, Flow, FlowSpec};

#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Load {
        mix: Mix,
        connections: usize,
        pipeline: usize,
        value_bytes: usize,
        /// `appendfsync` for both servers (`None`: no persistence on either).
        fsync: Option<&'static str>,
        /// WeTask's shards for this row, all on the server CPU (1: the run's `--shards`). A
        /// row with 2 measures a key's hop to the other shard, half the time: the `hop`
        /// rows, which the gate runs like any other, so a dearer hop fails it.
        shards: usize,
    },
    /// Load `--memory-keys` keys of `value_bytes` with `appendfsync everysec`, measure the
    /// log's size, compact it (BGREWRITEAOF), measure the files again, and time a restart
    /// to the first PONG (both servers with the same settings; Redis's base is RDB).
    Restart { value_bytes: usize },
    /// Process start to the first PONG.
    Boot,
    /// RSS growth per key after loading `--memory-keys` keys of `value_bytes`.
    Memory { value_bytes: usize },
    /// RSS growth per waiting job after queueing `--memory-keys` jobs of `payload_bytes`:
    /// WeTask `TASK.SUBMIT`, Redis `LPUSH` (a list element: the job as Sidekiq stores it).
    TaskMemory { payload_bytes: usize },
    /// Producers submit jobs, workers take them one at a time: WeTask with `TASK.*`, Redis
    /// with `redis_flow`.
    Tasks {
        redis_flow: Flow,
        producers: usize,
        workers: usize,
        /// WeTask's jobs carry `GROUP` keys of this many tenants, in turn (0: none); set
        /// beside a row without, it shows what groups cost against the same Redis flow.
        groups: usize,
    },
}

pub struct Workload {
    pub name: &'static str,
    pub group: &'static str,
    pub about: &'static str,
    pub kind: Kind,
}

const fn load(mix: Mix, connections: usize, pipeline: usize, value_bytes: usize) -> Kind {
    Kind::Load {
        mix,
        connections,
        pipeline,
        value_bytes,
        fsync: None,
        shards: 1,
    }
}

const fn hop(mix: Mix, connections: usize, pipeline: usize) -> Kind {
    Kind::Load {
        mix,
        connections,
        pipeline,
        value_bytes: 64,
        fsync: None,
        shards: 2,
    }
}

const fn durable(fsync: &'static str, connections: usize) -> Kind {
    Kind::Load {
        mix: Mix::Set,
        connections,
        pipeline: 1,
        value_bytes: 64,
        fsync: Some(fsync),
        shards: 1,
    }
}

const fn row(name: &'static str, group: &'static str, about: &'static str, kind: Kind) -> Workload {
    Workload {
        name,
        group,
        about,
        kind,
    }
}

#[rustfmt::skip]
pub static WORKLOADS: &[Workload] = &[
    row("set-64b-c16", "kv", "unary SET, 64 B values, 16 connections", load(Mix::Set, 16, 1, 64)),
    row("get-64b-c16", "kv", "unary GET, 64 B values, 16 connections", load(Mix::Get, 16, 1, 64)),
    row("set-64b-c64", "kv", "unary SET, 64 B values, 64 connections", load(Mix::Set, 64, 1, 64)),
    row("get-64b-c64", "kv", "unary GET, 64 B values, 64 connections", load(Mix::Get, 64, 1, 64)),
    row("set-64b-c256", "kv", "unary SET, 64 B values, 256 connections", load(Mix::Set, 256, 1, 64)),
    row("get-64b-c256", "kv", "unary GET, 64 B values, 256 connections", load(Mix::Get, 256, 1, 64)),
    row("set-1k-c16", "kv", "unary SET, 1 KiB values, 16 connections", load(Mix::Set, 16, 1, 1024)),
    row("get-1k-c16", "kv", "unary GET, 1 KiB values, 16 connections", load(Mix::Get, 16, 1, 1024)),
    row("set-1k-c64", "kv", "unary SET, 1 KiB values, 64 connections", load(Mix::Set, 64, 1, 1024)),
    row("get-1k-c64", "kv", "unary GET, 1 KiB values, 64 connections", load(Mix::Get, 64, 1, 1024)),
    row("set-64b-p16", "pipeline", "SET pipelines of 16, 64 B values, 16 connections", load(Mix::Set, 16, 16, 64)),
    row("get-64b-p16", "pipeline", "GET pipelines of 16, 64 B values, 16 connections", load(Mix::Get, 16, 16, 64)),
    row("mixed-p10", "mixed", "SET/GET/DEL pipelines of 10, 16 connections", load(Mix::SetGetDel, 16, 10, 64)),
    row("mixed-p1000", "mixed", "SET/GET/DEL pipelines of 1000, 16 connections", load(Mix::SetGetDel, 16, 1000, 64)),
    row("hop-get-c64", "hop", "unary GET, 64 connections, WeTask on 2 shards sharing the server CPU: half the keys a hop away", hop(Mix::Get, 64, 1)),
    row("hop-get-p16", "hop", "GET pipelines of 16, 16 connections, WeTask on 2 shards sharing the server CPU", hop(Mix::Get, 16, 16)),
    row("tasks-vs-brpop", "tasks", "jobs, 4 producers and 8 workers; Redis: LPUSH + BRPOP", Kind::Tasks { redis_flow: Flow::Brpop, producers: 4, workers: 8, groups: 0 }),
    row("tasks-groups-vs-brpop", "tasks", "jobs of 100 tenants (SUBMIT … GROUP, fetches take turns), 4 producers and 8 workers; Redis: LPUSH + BRPOP", Kind::Tasks { redis_flow: Flow::Brpop, producers: 4, workers: 8, groups: 100 }),
    row("tasks-vs-lmove", "tasks", "jobs, 4 producers and 8 workers; Redis: LPUSH + BLMOVE + LREM", Kind::Tasks { redis_flow: Flow::Lmove, producers: 4, workers: 8, groups: 0 }),
    row("boot", "boot", "process start to first PONG", Kind::Boot),
    row("memory-64b", "memory", "RSS growth per key, 64 B values", Kind::Memory { value_bytes: 64 }),
    row("memory-task-32b", "memory", "RSS growth per waiting job, 32 B payloads; Redis: LPUSH list elements", Kind::TaskMemory { payload_bytes: 32 }),
    row("set-c16-always", "durable", "unary SET, 64 B, 16 connections, appendfsync always on both", durable("always", 16)),
    row("set-c64-always", "durable", "unary SET, 64 B, 64 connections, appendfsync always on both", durable("always", 64)),
    row("set-c256-always", "durable", "unary SET, 64 B, 256 connections, appendfsync always on both", durable("always", 256)),
    row("set-c16-everysec", "durable", "unary SET, 64 B, 16 connections, appendfsync everysec on both", durable("everysec", 16)),
    row("set-c16-no", "durable", "unary SET, 64 B, 16 connections, appendonly with appendfsync no on both", durable("no", 16)),
    row("restart-64b", "durable", "--memory-keys keys of 64 B: log and compacted bytes per key, restart to first PONG", Kind::Restart { value_bytes: 64 }),
];

/// Picks workloads by name or group (`kv`, `pipeline`, `mixed`, `boot`, `memory`, `all`).
pub fn select(names: &[String]) -> Result<Vec<&'static Workload>, String> {
    let mut picked: Vec<&'static Workload> = Vec::new();
    for name in names {
        let matches: Vec<_> = WORKLOADS
            .iter()
            .filter(|w| name == "all" || w.name == name || w.group == name)
            .collect();
        if matches.is_empty() {
            let known: Vec<_> = WORKLOADS.iter().map(|w| w.name).collect();
            return Err(format!(
                "unknown workload '{name}'; known: all, kv, pipeline, mixed, tasks, boot, memory, durable, {}",
                known.join(", ")
            ));
        }
        for w in matches {
            if !picked.iter().any(|p| p.name == w.name) {
                picked.push(w);
            }
        }
    }
    Ok(picked)
}

/// How long and how big each measurement is.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RunOptions {
    pub duration: Option<Duration>,
    pub ops: Option<u64>,
    pub warmup: Duration,
    pub keyspace: u64,
    pub distribution: Distribution,
    pub memory_keys: u64,
    pub server_cpu: usize,
    pub load_cpu: usize,
}

/// Loads keys 0..count with `value_bytes` values, pipelined.
pub fn preload(server: &Server, count: u64, value_bytes: usize) -> io::Result<()> {
    let spec = LoadSpec {
        addr: server.addr,
        connections: 4,
        pipeline: 100,
        mix: Mix::LoadKeys,
        value_bytes,
        keyspace: count,
        distribution: Distribution::Uniform,
        warmup: Duration::ZERO,
        ops: Some(count.max(1)),
        duration: None,
    };
    let result = loadgen::run(&spec)?;
    if result.errors > 0 {
        return Err(io::Error::other(format!(
            "{} errors while loading keys",
            result.errors
        )));
    }
    Ok(())
}

/// One sample of a `Kind::Load` workload against a running, preloaded server.
pub fn measure_load(server: &Server, kind: Kind, opts: &RunOptions) -> io::Result<Metrics> {
    let Kind::Load {
        mix,
        connections,
        pipeline,
        value_bytes,
        ..
    } = kind
    else {
        unreachable!("measure_load takes load workloads")
    };
    let spec = LoadSpec {
        addr: server.addr,
        connections,
        pipeline,
        mix,
        value_bytes,
        keyspace: opts.keyspace,
        distribution: opts.distribution,
        warmup: opts.warmup,
        ops: opts.ops,
        duration: opts.duration,
    };
    let cpu_before = server.cpu_time_us()?;
    let result = loadgen::run(&spec)?;
    let cpu_after = server.cpu_time_us()?;
    if result.errors > 0 {
        return Err(io::Error::other(format!(
            "{} error replies during the run",
            result.errors
        )));
    }
    Ok(run_metrics(
        result.ops_per_sec(),
        &result.latency_us,
        cpu_after - cpu_before,
        result.total_ops,
    ))
}

/// What a sample against a running server reports: throughput, latency quantiles, and
/// server CPU per operation. The CPU delta spans the warm-up too, so it is divided by every
/// operation answered in it (`total_ops`).
fn run_metrics(
    ops_per_sec: f64,
    latency_us: &hdrhistogram::Histogram<u64>,
    cpu_us: f64,
    total_ops: u64,
) -> Metrics {
    let mut metrics = Metrics::default();
    metrics.set("ops_per_sec", ops_per_sec);
    for (name, quantile) in [
        ("p50_us", 0.5),
        ("p95_us", 0.95),
        ("p99_us", 0.99),
        ("p999_us", 0.999),
    ] {
        metrics.set(name, latency_us.value_at_quantile(quantile) as f64);
    }
    metrics.set("cpu_us_per_op", cpu_us / total_ops.max(1) as f64);
    metrics
}

/// One sample of a workload that needs its own fresh server (boot, memory).
pub fn measure_fresh(
    server_kind: &ServerKind,
    kind: Kind,
    opts: &RunOptions,
) -> io::Result<Metrics> {
    let server = Server::start(server_kind, opts.server_cpu)?;
    let mut metrics = Metrics::default();
    match kind {
        Kind::Boot => metrics.set("boot_ms", server.boot.as_secs_f64() * 1000.0),
        Kind::Memory { value_bytes } => {
            let before = server.rss_bytes()?;
            preload(&server, opts.memory_keys, value_bytes)?;
            let after = server.rss_bytes()?;
            metrics.set(
                "bytes_per_key",
                after.saturating_sub(before) as f64 / opts.memory_keys.max(1) as f64,
            );
        }
        Kind::TaskMemory { payload_bytes } => {
            let flow = match server_kind {
                ServerKind::Wetask { .. } => Flow::Tasks,
                ServerKind::Redis { .. } => Flow::Brpop,
            };
            let before = server.rss_bytes()?;
            taskflow::fill_queue(server.addr, flow, opts.memory_keys, payload_bytes)?;
            let after = server.rss_bytes()?;
            metrics.set(
                "bytes_per_job",
                after.saturating_sub(before) as f64 / opts.memory_keys.max(1) as f64,
            );
        }
        Kind::Load { .. } | Kind::Tasks { .. } | Kind::Restart { .. } => {
            unreachable!("load and task workloads share a running server")
        }
    }
    server.stop();
    Ok(metrics)
}

/// One sample of a `Kind::Tasks` workload: WeTask runs `TASK.*`, Redis the row's flow.
pub fn measure_tasks(
    server: &Server,
    redis: bool,
    kind: Kind,
    opts: &RunOptions,
) -> io::Result<Metrics> {
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let Kind::Tasks {
        redis_flow,
        producers,
        workers,
        groups,
    } = kind
    else {
        unreachable!("measure_tasks takes task workloads")
    };
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let spec = FlowSpec {
        addr: server.addr,
        flow: if redis { redis_flow } else { Flow::Tasks },
        producers,
        workers,
        groups,
        warmup: opts.warmup,
        duration: opts.duration.unwrap_or(Duration::from_secs(3)),
        jobs: opts.ops,
        queue: format!("bench:jobs:{}:{run}", std::process::id()),
    };
    let cpu_before = server.cpu_time_us()?;
    let result = taskflow::run(spec)?;
    let cpu_after = server.cpu_time_us()?;
    if result.errors > 0 {
        return Err(io::Error::other(format!(
            "{} error replies during the job flow",
            result.errors
        )));
    }
    Ok(run_metrics(
        result.jobs_per_sec(),
        &result.latency_us,
        cpu_after - cpu_before,
        result.total_jobs,
    ))
}

/// One sample of a `Kind::Restart` workload (see its row).
pub fn measure_restart(
    server_kind: &ServerKind,
    kind: Kind,
    opts: &RunOptions,
) -> io::Result<Metrics> {
    let Kind::Restart { value_bytes } = kind else {
        unreachable!("measure_restart takes restart workloads")
    };
    let dir = crate::servers::data_dir()?;
    let durable = Some(crate::servers::Durable {
        fsync: "everysec",
        dir: &dir,
    });
    let keys = opts.memory_keys.max(1);
    let mut metrics = Metrics::default();
    let server = Server::start_in(server_kind, opts.server_cpu, durable)?;
    preload(&server, keys, value_bytes)?;
    // The log as written (everysec has flushed to the files within a second).
    std::thread::sleep(Duration::from_millis(1100));
    metrics.set(
        "log_bytes_per_key",
        crate::servers::dir_bytes(&dir) as f64 / keys as f64,
    );
    crate::servers::ask(server.addr, &["BGREWRITEAOF"])?;
    let deadline = std::time::Instant::now() + Duration::from_secs(600);
    loop {
        let info = crate::servers::ask(server.addr, &["INFO", "persistence"])?;
        if info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0") {
            break;
        }
        if std::time::Instant::now() > deadline {
            return Err(io::Error::other("the rewrite did not finish"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    metrics.set(
        "disk_bytes_per_key",
        crate::servers::dir_bytes(&dir) as f64 / keys as f64,
    );
    server.stop();
    let restarted = Server::start_in(server_kind, opts.server_cpu, durable)?;
    metrics.set("restart_ms", restarted.boot.as_secs_f64() * 1000.0);
    let size = crate::servers::ask(restarted.addr, &["DBSIZE"])?;
    restarted.stop();
    let _ = std::fs::remove_dir_all(&dir);
    if size.trim() != format!(":{keys}") {
        return Err(io::Error::other(format!(
            "{} came back with {} keys of {keys}",
            server_kind.label(),
            size.trim()
        )));
    }
    Ok(metrics)
}
