//! INFO: sections server, clients, memory, stats, keyspace and commandstats, gathered from
//! every shard. Counters are per shard (plain cells on each core) and summed here.

use std::fmt::Write;
use std::rc::Rc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use wetask_protocol::Frame;

/// The Redis version WeTask answers as (INFO, HELLO): the release whose commands it serves.
pub const REDIS_COMPAT_VERSION: &str = "7.2.0";
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
    "tasks",
    "keyspace",
];

async fn gather(ctx: &ShardCtx) -> ShardReport {
    let pending: Vec<_> = (0..ctx.shard_count)
        .filter(|&s| s != ctx.id)
        .map(|s| ctx.request(s, Request::Admin(AdminRequest::Stats)))
        .collect();
    let mut report = ctx.report();
    for future in pending {
        if let Response::Stats(other) = future.await {
            report.merge(*other);
        }
    }
    report
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
                "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\nblocked_clients:{}\r\n",
                g.connected_clients.load(Ordering::Relaxed),
                g.maxclients.load(Ordering::Relaxed),
                report.blocked_clients.len(),
            );
        }
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
                    "cmdstat_{name}:calls={},rejected_calls={},failed_calls={}\r\n",
                    counts.calls, counts.rejected, counts.failed
                );
            }
        }
        _ => {}
    }
}

/// `# Persistence`: Redis's main fields, from the shards' journals (docs/DURABILITY.md).
/// There are no snapshots yet: the RDB fields say none ran.
fn persistence_section(g: &Globals, report: &ShardReport, out: &mut String) {
    let store = g.store.get();
    let write_ok = store.is_none_or(|s| s.misconf().is_none());
    let started_s = crate::globals::unix_ms() / 1000 - g.started.elapsed().as_secs();
    let compacting = u8::from(store.is_some_and(|s| s.compacting()));
    let lastsave = store.map_or(started_s, |s| s.lastsave_s.load(Ordering::Relaxed));
    let snapshots = store.map_or(0, |s| s.snapshots_written.load(Ordering::Relaxed));
    let base = store.map_or(0, |s| s.snapshot_bytes());
    let _ = write!(
        out,
        "# Persistence\r\nloading:0\r\nasync_loading:0\r\nrdb_changes_since_last_save:{}\r\nrdb_bgsave_in_progress:{compacting}\r\nrdb_last_save_time:{lastsave}\r\nrdb_last_bgsave_status:ok\r\nrdb_saves:{snapshots}\r\naof_enabled:{}\r\naof_rewrite_in_progress:{compacting}\r\naof_rewrite_scheduled:0\r\naof_last_bgrewrite_status:ok\r\naof_rewrites:{snapshots}\r\naof_last_write_status:{}\r\naof_current_size:{}\r\naof_base_size:{base}\r\naof_buffer_length:{}\r\naof_fsync_policy:{}\r\naof_last_fsync_time:{}\r\naof_shard_files:{}\r\n",
        report.journal_records,
        u8::from(store.is_some()),
        if write_ok { "ok" } else { "err" },
        base + report.journal_bytes,
        report.journal_pending,
        store.map_or("no", |s| s.policy().name()),
        store.map_or(0, |s| s.last_sync_s.load(Ordering::Relaxed)),
        if store.is_some() { g.shard_count } else { 0 },
    );
}

/// `# Server`: version, mode, process, port, uptime, shards.
fn server_section(g: &Globals, out: &mut String) {
    let uptime = g.started.elapsed().as_secs();
    let io = match g.config.io {
        IoMode::Uring => "io_uring",
        IoMode::Glommio => "glommio",
    };
    let _ = write!(
        out,
        "# Server\r\nredis_version:{REDIS_COMPAT_VERSION}\r\nwetask_version:{}\r\nredis_mode:standalone\r\nos:Linux\r\narch_bits:64\r\nmultiplexing_api:{io}\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{uptime}\r\nuptime_in_days:{}\r\nshards:{}\r\n",
        env!("CARGO_PKG_VERSION"),
        std::process::id(),
        g.port.load(Ordering::Relaxed),
        uptime / 86_400,
        g.shard_count,
    );
}

/// `# Memory`: the allocator's count, RSS, Lua, scripts, maxmemory and its policy.
fn memory_section(g: &Globals, report: &ShardReport, out: &mut String) {
    let rss = rss_bytes();
    // The allocator's own count; RSS where the counting allocator is not installed.
    let used = match crate::memory::used_memory() {
        0 => rss,
        used => used,
    };
    let max = g.maxmemory();
    let _ = write!(
        out,
        "# Memory\r\nused_memory:{used}\r\nused_memory_human:{:.2}M\r\nused_memory_rss:{rss}\r\nused_memory_rss_human:{:.2}M\r\nused_memory_lua:{}\r\nnumber_of_cached_scripts:{}\r\nmaxmemory:{max}\r\nmaxmemory_human:{:.2}M\r\nmaxmemory_policy:{}\r\nevicted_keys:{}\r\n",
        used as f64 / (1024.0 * 1024.0),
        rss as f64 / (1024.0 * 1024.0),
        report.lua_memory,
        g.scripts.lock().map_or(0, |s| s.len()),
        max as f64 / (1024.0 * 1024.0),
        g.eviction_policy().name(),
        report.evicted_keys,
    );
}

/// `# Stats`: connections, commands, bytes, expiry and eviction, the ring, the watchdog, the mesh, pub/sub.
fn stats_section(g: &Globals, report: &ShardReport, out: &mut String) {
    let _ = write!(
        out,
        "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\ntotal_net_input_bytes:{}\r\ntotal_net_output_bytes:{}\r\nrejected_connections:{}\r\nexpired_keys:{}\r\nevicted_keys:{}\r\nnet_ring_enters:{}\r\nnet_ring_sleeps:{}\r\nnet_ring_fsyncs:{}\r\nnet_ring_fsync_usec:{}\r\nnet_held_sends:{}\r\nnet_doorbell_rings:{}\r\nwatchdog_rouses:{}\r\nmesh_envelopes_sent:{}\r\nmesh_messages_sent:{}\r\npubsub_channels:{}\r\npubsub_patterns:{}\r\n",
        g.total_connections.load(Ordering::Relaxed),
        report.commands,
        report.net_input_bytes,
        report.net_output_bytes,
        g.rejected_connections.load(Ordering::Relaxed),
        report.expired_keys,
        report.evicted_keys,
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
