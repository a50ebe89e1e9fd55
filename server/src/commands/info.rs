//! INFO: Redis's sections (server, clients, memory, persistence, stats, replication, cpu,
//! modules, cluster, keyspace, commandstats) with Redis's field names, WeTask's own (tasks,
//! shards), gathered from every shard. Counters are per shard (plain cells on each core) and
//! summed here. Fields for what WeTask does not have (replicas, forks, defragmentation,
//! threaded I/O) report what Redis reports without them, so that clients
//! and exporters that read them work; docs/COMPATIBILITY.md lists them.

use std::fmt::Write;
use std::rc::Rc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::config::IoMode;
use crate::globals::Globals;
use crate::mesh::{AdminRequest, Request, Response};
use crate::shard::ShardCtx;
use crate::stats::ShardReport;

const SECTIONS: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "modules",
    "cluster",
    "consensus",
    "tasks",
    "keyspace",
    "commandstats",
    "shards",
];
const DEFAULT_SECTIONS: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "modules",
    "cluster",
    "tasks",
    "keyspace",
];

async fn gather(ctx: &ShardCtx) -> ShardReport {
    let pending = ctx.request_peers(|| Request::Admin(AdminRequest::Stats));
    let mut report = ctx.report();
    for (_, future) in pending {
        if let Response::Stats(other) = future.await {
            report.merge(*other);
        }
    }
    report
}

/// LATENCY HISTOGRAM [command …]: each command's calls and cumulative latency distribution
/// in Redis's form (power-of-two microsecond buckets from 1 µs, only where the count grows),
/// from every shard's per-command buckets; commands never called, or unknown, are left out.
pub async fn latency_histogram(ctx: &ShardCtx, args: &[Bytes]) -> Frame {
    let report = gather(ctx).await;
    let ticks_per_us = ctx.globals.slowlog.ticks_per_us().max(1);
    let names: Vec<&'static str> = if args.len() > 2 {
        args[2..]
            .iter()
            .filter_map(|a| wetask_shards::lookup(a).map(|s| s.name))
            .collect()
    } else {
        report.histograms.keys().copied().collect()
    };
    let text = |s: &str| Frame::Bulk(Bytes::copy_from_slice(s.as_bytes()));
    let mut out = Vec::new();
    for name in names {
        let Some(buckets) = report.histograms.get(name) else {
            continue;
        };
        if out.iter().any(|(n, _)| *n == text(name)) {
            continue;
        }
        out.push((text(name), histogram_frame(buckets, ticks_per_us)));
    }
    Frame::Map(out)
}

/// One command's `calls` and `histogram_usec` from its tick buckets (bucket b: under 2^b
/// ticks), re-bucketed by microseconds as Redis's HDR iteration reports them.
fn histogram_frame(buckets: &[u64], ticks_per_us: u64) -> Frame {
    let text = |s: &str| Frame::Bulk(Bytes::copy_from_slice(s.as_bytes()));
    // Redis's boundaries: 1024 ns doubling; reported as whole microseconds (1, 2, 4 … 65 …).
    let mut by_us: Vec<u64> = Vec::new();
    for (b, &count) in buckets.iter().enumerate() {
        if count == 0 {
            continue;
        }
        let upper_ticks = if b == 0 { 0 } else { (1u64 << b) - 1 };
        let ns = upper_ticks.saturating_mul(1000) / ticks_per_us;
        let mut k = 0;
        while k < 40 && ns >= 1024u64 << k {
            k += 1;
        }
        if by_us.len() <= k {
            by_us.resize(k + 1, 0);
        }
        by_us[k] += count;
    }
    let mut pairs = Vec::new();
    let mut cumulative = 0;
    for (k, count) in by_us.into_iter().enumerate() {
        if count == 0 {
            continue;
        }
        cumulative += count;
        pairs.push((
            Frame::Integer(((1024u64 << k) / 1000) as i64),
            Frame::Integer(cumulative as i64),
        ));
    }
    Frame::Map(vec![
        (text("calls"), Frame::Integer(cumulative as i64)),
        (text("histogram_usec"), Frame::Map(pairs)),
    ])
}

/// MEMORY STATS: Redis 7.0's fields, in its order, from the same numbers as INFO memory.
/// What this store does not have (replication backlogs, cluster links, slot maps) is 0;
/// a database's hash-table overheads are estimates (a slot per key, and per key with a TTL).
pub async fn memory_stats(ctx: &ShardCtx) -> Frame {
    let report = gather(ctx).await;
    let memory = Memory::now();
    let (rss, used, peak, startup) = (memory.rss, memory.used, memory.peak, memory.startup);
    let text = |s: &str| Frame::Bulk(Bytes::copy_from_slice(s.as_bytes()));
    let int = |n: u64| Frame::Integer(n as i64);
    let ratio = |a: u64, b: u64| Frame::Double(a as f64 / b.max(1) as f64);
    let mut pairs = vec![
        (text("peak.allocated"), int(peak)),
        (text("total.allocated"), int(used)),
        (text("startup.allocated"), int(startup)),
        (text("replication.backlog"), int(0)),
        (text("clients.slaves"), int(0)),
        (text("clients.normal"), int(0)),
        (text("cluster.links"), int(0)),
        (text("aof.buffer"), int(report.journal_pending)),
        (text("lua.caches"), int(report.lua_memory)),
        (text("functions.caches"), int(0)),
    ];
    let mut overhead = startup;
    let mut keys = 0u64;
    for &(db, count, volatile) in &report.keyspace {
        let main = count as u64 * 8;
        let expires = volatile as u64 * 8;
        overhead += main + expires;
        keys += count as u64;
        pairs.push((
            text(&format!("db.{db}")),
            Frame::Map(vec![
                (text("overhead.hashtable.main"), int(main)),
                (text("overhead.hashtable.expires"), int(expires)),
                (text("overhead.hashtable.slot-to-keys"), int(0)),
            ]),
        ));
    }
    let overhead = overhead.min(used);
    let dataset = used - overhead;
    let percent = |a: u64, b: u64| Frame::Double(a as f64 * 100.0 / b.max(1) as f64);
    pairs.extend([
        (text("overhead.total"), int(overhead)),
        (text("keys.count"), int(keys)),
        (
            text("keys.bytes-per-key"),
            int((used - startup).checked_div(keys).unwrap_or(0)),
        ),
        (text("dataset.bytes"), int(dataset)),
        (text("dataset.percentage"), percent(dataset, used - startup)),
        (text("peak.percentage"), percent(used, peak)),
        (text("allocator.allocated"), int(used)),
        (text("allocator.active"), int(used)),
        (text("allocator.resident"), int(rss)),
        (text("allocator-fragmentation.ratio"), Frame::Double(1.0)),
        (text("allocator-fragmentation.bytes"), int(0)),
        (text("allocator-rss.ratio"), ratio(rss, used)),
        (
            text("allocator-rss.bytes"),
            Frame::Integer(rss as i64 - used as i64),
        ),
        (text("rss-overhead.ratio"), Frame::Double(1.0)),
        (text("rss-overhead.bytes"), int(0)),
        (text("fragmentation"), ratio(rss, used)),
        (
            text("fragmentation.bytes"),
            Frame::Integer(rss as i64 - used as i64),
        ),
    ]);
    Frame::Map(pairs)
}

pub async fn info(ctx: &Rc<ShardCtx>, args: &[Bytes]) -> Frame {
    let mut wanted: Vec<&str> = Vec::new();
    for arg in &args[1..] {
        let name = String::from_utf8_lossy(arg).to_ascii_lowercase();
        match name.as_str() {
            "all" | "everything" => wanted.extend(SECTIONS),
            "default" => wanted.extend(DEFAULT_SECTIONS),
            other => {
                if let Some(section) = SECTIONS.iter().find(|s| **s == other) {
                    wanted.push(section);
                }
            }
        }
    }
    if args.len() == 1 {
        wanted.extend(DEFAULT_SECTIONS);
    }
    let report = gather(ctx).await;
    let mut text = String::new();
    for section in SECTIONS.iter().filter(|s| wanted.contains(s)) {
        if !text.is_empty() {
            text.push_str("\r\n");
        }
        render(ctx, section, &report, &mut text);
    }
    Frame::Verbatim(*b"txt", Bytes::from(text))
}

/// Resident set size in bytes, from /proc/self/statm.
pub fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    pages * page
}

fn render(ctx: &ShardCtx, section: &str, report: &ShardReport, out: &mut String) {
    let g = &ctx.globals;
    match section {
        "server" => server_section(g, out),
        "clients" => {
            let _ = write!(
                out,
                "# Clients\r\nconnected_clients:{}\r\ncluster_connections:0\r\nmaxclients:{}\r\nclient_recent_max_input_buffer:0\r\nclient_recent_max_output_buffer:0\r\nblocked_clients:{}\r\ntracking_clients:{}\r\nclients_in_timeout_table:0\r\ntotal_blocking_keys:{}\r\ntotal_blocking_keys_on_nokey:{}\r\n",
                g.connected_clients.load(Ordering::Relaxed),
                g.maxclients.load(Ordering::Relaxed),
                report.blocked_clients.len(),
                report.tracking_clients,
                report.blocking_keys.0,
                report.blocking_keys.1,
            );
        }
        "replication" => super::replication::section(g, out),
        "cpu" => cpu_section(out),
        "modules" => out.push_str("# Modules\r\n"),
        "cluster" => {
            let enabled = u8::from(g.cluster.is_some());
            let _ = write!(out, "# Cluster\r\ncluster_enabled:{enabled}\r\n");
        }
        "consensus" => match &g.consensus {
            Some(consensus) => consensus.info_section(out),
            None => out.push_str("# Consensus\r\nconsensus_enabled:0\r\n"),
        },
        "memory" => memory_section(g, report, out),
        "persistence" => persistence_section(g, report, out),
        "stats" => stats_section(g, report, out),
        "tasks" => tasks_section(report, out),
        "shards" => {
            out.push_str("# Shards\r\n");
            let mut lines = report.shard_lines.clone();
            lines.sort();
            for line in lines {
                let _ = write!(out, "{line}\r\n");
            }
        }
        "keyspace" => {
            out.push_str("# Keyspace\r\n");
            for (db, keys, expires) in &report.keyspace {
                let _ = write!(out, "db{db}:keys={keys},expires={expires}\r\n");
            }
        }
        "commandstats" => {
            out.push_str("# Commandstats\r\n");
            for (name, counts) in &report.per_command {
                let _ = write!(
                    out,
                    "cmdstat_{name}:calls={},usec={},usec_per_call={:.2},rejected_calls={},failed_calls={}\r\n",
                    counts.calls,
                    counts.time,
                    counts.time as f64 / counts.calls.max(1) as f64,
                    counts.rejected,
                    counts.failed
                );
            }
        }
        _ => {}
    }
}

/// `# Persistence`: Redis's main fields, from the shards' journals (docs/DURABILITY.md).
/// There are no snapshots yet: the RDB fields say none ran.
/// Redis's persistence fields about its forked child, and the times of its last RDB and AOF
/// rewrite. WeTask compacts without a fork, on the compactor thread (docs/DURABILITY.md): no
/// copy-on-write, no child; the durations are not kept (-1, as Redis before its first).
const NO_FORK_FIELDS: &str = "current_cow_peak:0\r\ncurrent_cow_size:0\r\ncurrent_cow_size_age:0\r\ncurrent_fork_perc:0.00\r\ncurrent_save_keys_processed:0\r\ncurrent_save_keys_total:0\r\nrdb_last_bgsave_time_sec:-1\r\nrdb_current_bgsave_time_sec:-1\r\nrdb_last_cow_size:0\r\nrdb_last_load_keys_expired:0\r\nrdb_last_load_keys_loaded:0\r\naof_last_rewrite_time_sec:-1\r\naof_current_rewrite_time_sec:-1\r\naof_rewrites_consecutive_failures:0\r\naof_last_cow_size:0\r\nmodule_fork_in_progress:0\r\nmodule_fork_last_cow_size:0\r\n";

fn persistence_section(g: &Globals, report: &ShardReport, out: &mut String) {
    let store = g.store.get();
    let dumps = g.dumps.get();
    let write_ok = store.is_none_or(|s| s.misconf().is_none());
    let started_s = crate::globals::unix_ms() / 1000 - g.started.elapsed().as_secs();
    let compacting =
        u8::from(store.is_some_and(|s| s.compacting()) || dumps.is_some_and(|d| d.in_progress()));
    let lastsave = match (store, dumps) {
        (Some(s), _) => s.lastsave_s.load(Ordering::Relaxed),
        (None, Some(d)) => d.lastsave_s.load(Ordering::Relaxed),
        (None, None) => started_s,
    };
    let snapshots = match (store, dumps) {
        (Some(s), _) => s.snapshots_written.load(Ordering::Relaxed),
        (None, Some(d)) => d.saves.load(Ordering::Relaxed),
        (None, None) => 0,
    };
    // `appendonly no`: the writes since the last snapshot; else those journaled.
    let changes = dumps.map_or(report.journal_records, |d| d.changes());
    let bgsave_ok = if dumps.is_none_or(|d| d.last_ok()) {
        "ok"
    } else {
        "err"
    };
    let base = store.map_or(0, |s| s.snapshot_bytes());
    let _ = write!(
        out,
        "# Persistence\r\nloading:{}\r\nasync_loading:0\r\nrdb_changes_since_last_save:{changes}\r\nrdb_bgsave_in_progress:{compacting}\r\nrdb_last_save_time:{lastsave}\r\nrdb_last_bgsave_status:{bgsave_ok}\r\nrdb_saves:{snapshots}\r\naof_enabled:{}\r\naof_rewrite_in_progress:{compacting}\r\naof_rewrite_scheduled:0\r\naof_last_bgrewrite_status:ok\r\naof_rewrites:{snapshots}\r\naof_last_write_status:{}\r\naof_current_size:{}\r\naof_base_size:{base}\r\naof_buffer_length:{}\r\naof_fsync_policy:{}\r\naof_last_fsync_time:{}\r\naof_shard_files:{}\r\n{NO_FORK_FIELDS}",
        u8::from(g.answers_loading()),
        u8::from(store.is_some()),
        if write_ok { "ok" } else { "err" },
        base + report.journal_bytes,
        report.journal_pending,
        store.map_or("no", |s| s.policy().name()),
        store.map_or(0, |s| s.last_sync_s.load(Ordering::Relaxed)),
        if store.is_some() { g.shard_count } else { 0 },
    );
}

/// `# Server`: version, mode, process, port, uptime, shards, and Redis's build fields.
fn server_section(g: &Globals, out: &mut String) {
    let uptime = g.started.elapsed().as_secs();
    let io = match g.config.io {
        IoMode::Uring => "io_uring",
        IoMode::Glommio => "glommio",
    };
    let now_us = crate::globals::unix_ms() * 1000;
    let executable = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let config_file = g
        .config
        .config
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    // Redis 7.2's listener line: the TCP listener's addresses and port.
    let mut listener = "listener0:name=tcp".to_string();
    for address in g.config.bind.split_whitespace() {
        listener.push_str(",bind=");
        listener.push_str(address);
    }
    let _ = write!(listener, ",port={}\r\n", g.port.load(Ordering::Relaxed));
    // Redis's mode: `cluster` when cluster mode is on (redis-py and redis-cli read it).
    let mode = if g.cluster.is_some() {
        "cluster"
    } else {
        "standalone"
    };
    let _ = write!(
        out,
        "# Server\r\nredis_version:{}\r\nwetask_version:{}\r\nredis_git_sha1:00000000\r\nredis_git_dirty:0\r\nredis_build_id:0\r\nredis_mode:{mode}\r\nos:Linux\r\narch_bits:64\r\nmonotonic_clock:POSIX clock_gettime\r\nmultiplexing_api:{io}\r\natomicvar_api:c11-builtin\r\ngcc_version:0.0.0\r\nprocess_id:{}\r\nprocess_supervised:no\r\nrun_id:{}\r\ntcp_port:{}\r\nserver_time_usec:{now_us}\r\nuptime_in_seconds:{uptime}\r\nuptime_in_days:{}\r\nhz:10\r\nconfigured_hz:10\r\nlru_clock:{}\r\nexecutable:{executable}\r\nconfig_file:{config_file}\r\nio_threads_active:0\r\n{listener}shards:{}\r\n",
        g.config.announce_version,
        env!("CARGO_PKG_VERSION"),
        std::process::id(),
        run_id(),
        g.port.load(Ordering::Relaxed),
        uptime / 86_400,
        (now_us / 1_000_000) & ((1 << 24) - 1),
        g.shard_count,
    );
}

/// This run's 40 hex digits (INFO's `run_id`, and the `master_replid` of a server no replica
/// follows), drawn once at start.
fn run_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| crate::replication::random_hex(40))
}

/// CPU seconds used by `who` (RUSAGE_SELF, RUSAGE_CHILDREN, RUSAGE_THREAD): system, user.
fn cpu_seconds(who: libc::c_int) -> (f64, f64) {
    // SAFETY: getrusage fills the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(who, &mut usage) } != 0 {
        return (0.0, 0.0);
    }
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (seconds(usage.ru_stime), seconds(usage.ru_utime))
}

/// `# CPU`: the process's CPU time; `main_thread` is the shard thread that answers.
fn cpu_section(out: &mut String) {
    let (sys, user) = cpu_seconds(libc::RUSAGE_SELF);
    let (sys_children, user_children) = cpu_seconds(libc::RUSAGE_CHILDREN);
    let (sys_main, user_main) = cpu_seconds(libc::RUSAGE_THREAD);
    let _ = write!(
        out,
        "# CPU\r\nused_cpu_sys:{sys:.6}\r\nused_cpu_user:{user:.6}\r\nused_cpu_sys_children:{sys_children:.6}\r\nused_cpu_user_children:{user_children:.6}\r\nused_cpu_sys_main_thread:{sys_main:.6}\r\nused_cpu_user_main_thread:{user_main:.6}\r\n",
    );
}

/// The machine's memory, from sysinfo(2).
fn total_system_memory() -> u64 {
    // SAFETY: sysinfo fills the struct it is given.
    let mut info: libc::sysinfo = unsafe { std::mem::zeroed() };
    if unsafe { libc::sysinfo(&mut info) } != 0 {
        return 0;
    }
    info.totalram as u64 * u64::from(info.mem_unit)
}

fn human(bytes: u64) -> String {
    format!("{:.2}M", bytes as f64 / (1024.0 * 1024.0))
}

/// `# Memory`: the allocator's count, its peak, RSS, Lua, scripts, maxmemory and its policy.
/// The process's memory numbers INFO memory and MEMORY STATS report.
struct Memory {
    rss: u64,
    used: u64,
    peak: u64,
    startup: u64,
}

impl Memory {
    fn now() -> Memory {
        let rss = rss_bytes();
        // The allocator's own count; RSS where the counting allocator is not installed.
        let used = match crate::memory::used_memory() {
            0 => rss,
            used => used,
        };
        Memory {
            rss,
            used,
            peak: crate::memory::note_peak().max(used),
            startup: crate::memory::startup_memory().min(used),
        }
    }
}

fn memory_section(g: &Globals, report: &ShardReport, out: &mut String) {
    let Memory {
        rss,
        used,
        peak,
        startup,
    } = Memory::now();
    let dataset = used - startup;
    let system = total_system_memory();
    let max = g.maxmemory();
    let lua = report.lua_memory;
    let _ = write!(
        out,
        "# Memory\r\nused_memory:{used}\r\nused_memory_human:{}\r\nused_memory_rss:{rss}\r\nused_memory_rss_human:{}\r\nused_memory_peak:{peak}\r\nused_memory_peak_human:{}\r\nused_memory_peak_perc:{:.2}%\r\nused_memory_overhead:{startup}\r\nused_memory_startup:{startup}\r\nused_memory_dataset:{dataset}\r\nused_memory_dataset_perc:{:.2}%\r\ntotal_system_memory:{system}\r\ntotal_system_memory_human:{}\r\nused_memory_lua:{lua}\r\nused_memory_vm_eval:{lua}\r\nused_memory_lua_human:{}\r\nused_memory_scripts_eval:0\r\nnumber_of_cached_scripts:{}\r\nnumber_of_functions:{}\r\nnumber_of_libraries:{}\r\nused_memory_vm_functions:0\r\nused_memory_vm_total:{lua}\r\nused_memory_vm_total_human:{}\r\nused_memory_functions:0\r\nused_memory_scripts:0\r\nused_memory_scripts_human:0B\r\nmaxmemory:{max}\r\nmaxmemory_human:{}\r\nmaxmemory_policy:{}\r\nallocator_allocated:{used}\r\nallocator_active:{used}\r\nallocator_resident:{rss}\r\nallocator_frag_ratio:1.00\r\nallocator_frag_bytes:0\r\nallocator_rss_ratio:{:.2}\r\nallocator_rss_bytes:{}\r\nrss_overhead_ratio:1.00\r\nrss_overhead_bytes:0\r\nmem_fragmentation_ratio:{:.2}\r\nmem_fragmentation_bytes:{}\r\nmem_not_counted_for_evict:0\r\nmem_replication_backlog:0\r\nmem_total_replication_buffers:0\r\nmem_clients_slaves:0\r\nmem_clients_normal:0\r\nmem_cluster_links:0\r\nmem_aof_buffer:{}\r\nmem_allocator:libc\r\nactive_defrag_running:0\r\nlazyfree_pending_objects:0\r\nlazyfreed_objects:0\r\nevicted_keys:{}\r\n",
        human(used),
        human(rss),
        human(peak),
        used as f64 * 100.0 / peak.max(1) as f64,
        dataset as f64 * 100.0 / used.max(1) as f64,
        human(system),
        human(lua),
        g.scripts.lock().map_or(0, |s| s.len()),
        g.functions.lock().map_or(0, |f| f.function_count()),
        g.functions.lock().map_or(0, |f| f.libraries().count()),
        human(lua),
        human(max),
        g.eviction_policy().name(),
        rss as f64 / used.max(1) as f64,
        rss as i64 - used as i64,
        rss as f64 / used.max(1) as f64,
        rss as i64 - used as i64,
        report.journal_pending,
        report.evicted_keys,
    );
}

/// Redis's stats for what WeTask does not do or measure (replication, forks,
/// defragmentation, threaded I/O, eviction of clients, ACL rules, the event loop's
/// durations), as Redis reports them without it: the part before the tracking totals, and
/// the part after. (`eventloop_cycles` counts the rings' waits in the kernel.)
const NOT_DONE_STATS: &str = "expired_stale_perc:0.00\r\nexpired_time_cap_reached_count:0\r\nexpire_cycle_cpu_milliseconds:0\r\nevicted_clients:0\r\ntotal_eviction_exceeded_time:0\r\ncurrent_eviction_exceeded_time:0\r\npubsubshard_channels:0\r\nlatest_fork_usec:0\r\ntotal_forks:0\r\nmigrate_cached_sockets:0\r\nslave_expires_tracked_keys:0\r\nactive_defrag_hits:0\r\nactive_defrag_misses:0\r\nactive_defrag_key_hits:0\r\nactive_defrag_key_misses:0\r\ntotal_active_defrag_time:0\r\ncurrent_active_defrag_time:0\r\n";
const NOT_DONE_STATS_AFTER_TRACKING: &str = "unexpected_error_replies:0\r\ndump_payload_sanitizations:0\r\nio_threaded_reads_processed:0\r\nio_threaded_writes_processed:0\r\nreply_buffer_shrinks:0\r\nreply_buffer_expands:0\r\neventloop_duration_sum:0\r\neventloop_duration_cmd_sum:0\r\ninstantaneous_eventloop_cycles_per_sec:0\r\ninstantaneous_eventloop_duration_usec:0\r\n";
/// ... and after the replication counters.
const NOT_DONE_STATS_AFTER_SYNCS: &str = "total_net_repl_input_bytes:0\r\ntotal_net_repl_output_bytes:0\r\ninstantaneous_input_repl_kbps:0.00\r\ninstantaneous_output_repl_kbps:0.00\r\n";

/// `# Stats`: connections, commands, rates, bytes, keyspace hits, expiry and eviction,
/// errors, the ring, the watchdog, the mesh, pub/sub.
fn stats_section(g: &Globals, report: &ShardReport, out: &mut String) {
    let rates = report.instantaneous;
    let errors: u64 = report
        .per_command
        .values()
        .map(|c| c.failed + c.rejected)
        .sum();
    let _ = write!(
        out,
        "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\ninstantaneous_ops_per_sec:{}\r\ntotal_net_input_bytes:{}\r\ntotal_net_output_bytes:{}\r\ninstantaneous_input_kbps:{:.2}\r\ninstantaneous_output_kbps:{:.2}\r\nrejected_connections:{}\r\nexpired_keys:{}\r\nevicted_keys:{}\r\nkeyspace_hits:{}\r\nkeyspace_misses:{}\r\ntotal_error_replies:{errors}\r\ntotal_reads_processed:{}\r\ntotal_writes_processed:{}\r\n{NOT_DONE_STATS}tracking_total_keys:{}\r\ntracking_total_items:{}\r\ntracking_total_prefixes:{}\r\n{NOT_DONE_STATS_AFTER_TRACKING}sync_full:{}\r\nsync_partial_ok:{}\r\nsync_partial_err:{}\r\n{NOT_DONE_STATS_AFTER_SYNCS}eventloop_cycles:{}\r\nacl_access_denied_auth:{}\r\nacl_access_denied_cmd:{}\r\nacl_access_denied_key:{}\r\nacl_access_denied_channel:{}\r\nnet_ring_enters:{}\r\nnet_ring_sleeps:{}\r\nnet_ring_fsyncs:{}\r\nnet_ring_fsync_usec:{}\r\nnet_held_sends:{}\r\nnet_doorbell_rings:{}\r\nwatchdog_rouses:{}\r\nmesh_envelopes_sent:{}\r\nmesh_messages_sent:{}\r\npubsub_channels:{}\r\npubsub_patterns:{}\r\npubsub_relayed:{}\r\npubsub_relay_dropped:{}\r\n",
        g.total_connections.load(Ordering::Relaxed),
        report.commands,
        rates.ops_per_sec.round() as u64,
        report.net_input_bytes,
        report.net_output_bytes,
        rates.input_kbps,
        rates.output_kbps,
        g.rejected_connections.load(Ordering::Relaxed),
        report.expired_keys,
        report.evicted_keys,
        report.keyspace_hits,
        report.keyspace_misses,
        report.reads,
        report.writes,
        report.tracking_keys,
        report.tracking_items,
        report.tracking_prefixes,
        g.replication.sync_full.load(Ordering::Relaxed),
        g.replication.sync_partial_ok.load(Ordering::Relaxed),
        g.replication.sync_partial_err.load(Ordering::Relaxed),
        report.ring_enters,
        g.auth_failures.load(Ordering::Relaxed),
        g.acl.denied_commands.load(Ordering::Relaxed),
        g.acl.denied_keys.load(Ordering::Relaxed),
        g.acl.denied_channels.load(Ordering::Relaxed),
        report.ring_enters,
        report.ring_sleeps,
        report.ring_fsyncs,
        report.ring_fsync_us,
        report.held_sends,
        g.doorbells
            .iter()
            .map(|bell| bell.rings.load(Ordering::Relaxed))
            .sum::<u64>(),
        g.watchdog.rouses.load(Ordering::Relaxed),
        report.mesh_envelopes,
        report.mesh_messages,
        report.pubsub_channels.len(),
        report.pubsub_patterns.len(),
        g.relay.relayed.load(Ordering::Relaxed),
        g.relay.dropped.load(Ordering::Relaxed),
    );
}

/// `# Tasks`: the engine's totals, then one line per queue.
fn tasks_section(report: &ShardReport, out: &mut String) {
    let t = &report.tasks;
    let _ = write!(
        out,
        "# Tasks\r\ntasks_submitted:{}\r\ntasks_acked:{}\r\ntasks_failed:{}\r\ntasks_retried:{}\r\ntasks_dead:{}\r\ntasks_cancelled:{}\r\ntasks_fallbacks:{}\r\ntasks_leases_lost:{}\r\n",
        t.submitted, t.acked, t.failed, t.retried, t.dead, t.cancelled, t.fallbacks, t.leases_lost,
    );
    for (name, q) in &report.queues {
        let _ = write!(
            out,
            "queue:{}:queued={},scheduled={},leased={},dead={},oldest_age_ms={},paused={}\r\n",
            String::from_utf8_lossy(name),
            q.queued,
            q.scheduled,
            q.leased,
            q.dead,
            q.oldest_age_ms,
            u8::from(q.paused),
        );
    }
}
