//! CONFIG GET, SET, RESETSTAT, REWRITE and HELP: the parameters and their current values,
//! each one CONFIG SET acts on with Redis's checks (the inert ones in `config_inert`, the
//! file in `config_rewrite`, the names in `config_table`).

use std::rc::Rc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::args::is;
use wetask_shards::errors::unknown_subcommand;
use wetask_shards::DATABASES;

use crate::globals::Globals;
use crate::mesh::{AdminRequest, Request};
use crate::shard::ShardCtx;

/// CONFIG GET's parameters: name and current value.
// Long: one row per parameter, as CONFIG GET lists them; the table reads best whole.
pub(super) fn config_params(ctx: &ShardCtx) -> Vec<(&'static str, String)> {
    let g = &ctx.globals;
    let gate = &g.replication.gate;
    let mut params = vec![
        ("bind", g.config.bind.clone()),
        ("port", g.port.load(Ordering::Relaxed).to_string()),
        ("databases", DATABASES.to_string()),
        (
            "maxclients",
            g.maxclients.load(Ordering::Relaxed).to_string(),
        ),
        (
            "requirepass",
            g.requirepass
                .lock()
                .expect("requirepass")
                .clone()
                .unwrap_or_default(),
        ),
        (
            "aclfile",
            g.acl
                .file
                .as_ref()
                .map_or(String::new(), |p| p.display().to_string()),
        ),
        (
            "acllog-max-len",
            g.acl.log_max_len.load(Ordering::Relaxed).to_string(),
        ),
        (
            "acl-pubsub-default",
            if g.acl.pubsub_all_channels.load(Ordering::Relaxed) {
                "allchannels"
            } else {
                "resetchannels"
            }
            .into(),
        ),
        (
            "proto-max-bulk-len",
            g.config.proto_max_bulk_len.to_string(),
        ),
        (
            "busy-reply-threshold",
            g.busy_reply_threshold_ms
                .load(Ordering::Relaxed)
                .to_string(),
        ),
        (
            "slowlog-log-slower-than",
            g.slowlog.slower_than_us.load(Ordering::Relaxed).to_string(),
        ),
        (
            "latency-monitor-threshold",
            g.latency.threshold_ms.load(Ordering::Relaxed).to_string(),
        ),
        (
            "slowlog-max-len",
            g.slowlog.max_len.load(Ordering::Relaxed).to_string(),
        ),
        (
            "lua-time-limit",
            g.busy_reply_threshold_ms
                .load(Ordering::Relaxed)
                .to_string(),
        ),
        (
            "save",
            g.store.get().map_or(String::new(), |s| {
                s.save_points
                    .lock()
                    .expect("save points")
                    .iter()
                    .map(|(secs, changes)| format!("{secs} {changes}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            }),
        ),
        (
            "auto-aof-rewrite-percentage",
            g.store
                .get()
                .map_or(g.config.auto_aof_rewrite_percentage, |s| {
                    s.auto_rewrite_percentage.load(Ordering::Relaxed)
                })
                .to_string(),
        ),
        (
            "auto-aof-rewrite-min-size",
            g.store
                .get()
                .map_or(g.config.auto_aof_rewrite_min_size, |s| {
                    s.auto_rewrite_min_size.load(Ordering::Relaxed)
                })
                .to_string(),
        ),
        (
            "appendonly",
            if g.store.get().is_some() { "yes" } else { "no" }.into(),
        ),
        (
            "appendfsync",
            g.store
                .get()
                .map_or(g.config.appendfsync, |s| s.policy())
                .name()
                .into(),
        ),
        ("dir", g.config.dir.clone()),
        (
            "cluster-enabled",
            if g.cluster.is_some() { "yes" } else { "no" }.into(),
        ),
        ("cluster-config-file", g.config.cluster_config_file.clone()),
        ("appenddirname", g.config.appenddirname.clone()),
        (
            "aof-load-truncated",
            if g.config.aof_load_truncated {
                "yes"
            } else {
                "no"
            }
            .into(),
        ),
        ("maxmemory", g.maxmemory().to_string()),
        ("maxmemory-policy", g.eviction_policy().name().into()),
        (
            "maxmemory-samples",
            g.maxmemory_samples.load(Ordering::Relaxed).to_string(),
        ),
        (
            "timeout",
            g.idle_timeout_s.load(Ordering::Relaxed).to_string(),
        ),
        (
            "tcp-keepalive",
            g.tcp_keepalive_s.load(Ordering::Relaxed).to_string(),
        ),
        ("client-output-buffer-limit", g.output_limits.describe()),
        (
            "protected-mode",
            if g.protected_mode.load(Ordering::Relaxed) {
                "yes"
            } else {
                "no"
            }
            .into(),
        ),
        (
            "notify-keyspace-events",
            wetask_shards::keyspace::notify::describe(
                g.notify_keyspace_events.load(Ordering::Relaxed),
            ),
        ),
        ("io-threads", "1".into()),
        ("shards", g.shard_count.to_string()),
    ];
    // Replication's, each under its old `slave` name too, as Redis lists them.
    let replication = [
        (
            ["replica-read-only", "slave-read-only"],
            yes_no(g.replication.read_only.load(Ordering::Relaxed)),
        ),
        (
            ["replica-serve-stale-data", "slave-serve-stale-data"],
            yes_no(gate.serve_stale_data.load(Ordering::Relaxed)),
        ),
        (
            ["min-replicas-to-write", "min-slaves-to-write"],
            gate.min_replicas_to_write
                .load(Ordering::Relaxed)
                .to_string(),
        ),
        (
            ["min-replicas-max-lag", "min-slaves-max-lag"],
            gate.min_replicas_max_lag
                .load(Ordering::Relaxed)
                .to_string(),
        ),
        (
            ["replica-priority", "slave-priority"],
            gate.priority.load(Ordering::Relaxed).to_string(),
        ),
    ];
    params.extend(
        replication
            .into_iter()
            .flat_map(|(names, value)| names.map(|name| (name, value.clone()))),
    );
    params
}

pub(super) async fn config(ctx: &Rc<ShardCtx>, args: &[Bytes]) -> Frame {
    let sub = &args[1];
    if is(sub, "get") && args.len() >= 3 {
        let patterns: Vec<Vec<u8>> = args[2..].iter().map(|p| p.to_ascii_lowercase()).collect();
        let matches = |name: &str| {
            patterns
                .iter()
                .any(|p| wetask_shards::glob::glob_match(p, name.as_bytes()))
        };
        let mut params: Vec<(&'static str, String)> = config_params(ctx);
        let live: Vec<&'static str> = params.iter().map(|(name, _)| *name).collect();
        params.retain(|(name, _)| matches(name));
        params.extend(super::config_inert::INERT.matching(&|n| live.contains(&n), &matches));
        let pairs = params
            .into_iter()
            .map(|(name, value)| {
                (
                    Frame::Bulk(Bytes::from_static(name.as_bytes())),
                    Frame::Bulk(Bytes::from(value)),
                )
            })
            .collect();
        return Frame::Map(pairs);
    }
    if is(sub, "set") && args.len() >= 4 && args.len().is_multiple_of(2) {
        let reply = config_set(ctx, &args[2..]);
        // Every shard keeps a copy of these: the next command anywhere sees the change.
        let shard_copies = ["notify-keyspace-events"];
        let mut names = args[2..].iter().step_by(2);
        if !reply.is_error() && names.any(|n| shard_copies.iter().any(|c| is(n, c))) {
            ctx.core.sync_settings();
            ctx.sync_every_shard().await;
        }
        return reply;
    }
    if is(sub, "resetstat") && args.len() == 2 {
        ctx.stats.reset();
        ctx.shard.borrow_mut().reset_keyspace_lookups();
        for (_, future) in ctx.request_peers(|| Request::Admin(AdminRequest::ResetStats)) {
            future.await;
        }
        return Frame::ok();
    }
    if is(sub, "rewrite") {
        return super::config_rewrite::rewrite(ctx, config_values(ctx));
    }
    if is(sub, "help") {
        return help_lines(&[
            "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "GET <pattern>",
            "    Return parameters matching the glob-like <pattern> and their values.",
            "SET <directive> <value>",
            "    Set the configuration <directive> to <value>.",
            "RESETSTAT",
            "    Reset statistics reported by the INFO command.",
            "REWRITE",
            "    Rewrite the configuration file.",
            "HELP",
            "    Prints this help.",
        ]);
    }
    unknown_subcommand("config", sub)
}

/// Every parameter CONFIG GET knows, with its value now (those WeTask serves, then the
/// inert ones it keeps for Redis's sake).
pub(super) fn config_values(ctx: &ShardCtx) -> Vec<(&'static str, String)> {
    let mut params = config_params(ctx);
    let live: Vec<&'static str> = params.iter().map(|(name, _)| *name).collect();
    params.extend(super::config_inert::INERT.matching(&|n| live.contains(&n), &|_| true));
    params
}

/// A HELP reply: one simple string a line.
pub(super) fn help_lines(lines: &[&'static str]) -> Frame {
    Frame::lines(lines)
}

pub(super) fn config_set(ctx: &ShardCtx, pairs: &[Bytes]) -> Frame {
    for pair in pairs.chunks(2) {
        let name = String::from_utf8_lossy(&pair[0]).to_ascii_lowercase();
        let value = String::from_utf8_lossy(&pair[1]).into_owned();
        let taken = set_parameter(&ctx.globals, &name, value.clone());
        if matches!(taken, Ok(true)) || super::config_inert::INERT.knows(&name) {
            let mut changed = ctx.globals.config_changed.lock().expect("config");
            if !changed.contains(&name) {
                changed.push(name.clone());
            }
        }
        match taken {
            Ok(true) => {}
            Ok(false) if config_params(ctx).iter().any(|(p, _)| *p == name) => {
                // Redis's word for `dir`, which it refuses too.
                let kind = if name == "dir" {
                    "protected"
                } else {
                    "immutable"
                };
                return Frame::error(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - can't set {kind} config"
                ));
            }
            Ok(false) => match super::config_inert::INERT.set(&name, &value) {
                Some(Ok(())) => {}
                Some(Err(why)) => {
                    return Frame::error(format!(
                        "ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"
                    ))
                }
                None => {
                    return Frame::error(format!(
                        "ERR Unknown option or number of arguments for CONFIG SET - '{name}'"
                    ))
                }
            },
            Err(why) => {
                return Frame::error(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"
                ))
            }
        }
    }
    Frame::ok()
}

/// Sets one parameter CONFIG SET may change; `Ok(false)` when `name` is not one of them,
/// `Err` with Redis's reason when the value is not acceptable.
// Long: one short arm per parameter CONFIG SET acts on, each with Redis's check; a table.
pub(super) fn set_parameter(g: &Globals, name: &str, value: String) -> Result<bool, String> {
    const NOT_AN_INTEGER: &str = "argument couldn't be parsed into an integer";
    let integer = |value: &str| value.parse::<u64>().map_err(|_| NOT_AN_INTEGER.to_string());
    // Redis's int parameters: 0 to INT_MAX.
    let int_max = |value: &str| match value.parse::<i64>() {
        Ok(n) if (0..=i64::from(i32::MAX)).contains(&n) => Ok(n as u64),
        Ok(_) => Err("argument must be between 0 and 2147483647 inclusive".to_string()),
        Err(_) => Err(NOT_AN_INTEGER.to_string()),
    };
    let gate = &g.replication.gate;
    match name {
        "requirepass" => {
            g.acl
                .set_default_password((!value.is_empty()).then_some(value.as_str()));
            g.sync_password_set();
            *g.requirepass.lock().expect("requirepass") = (!value.is_empty()).then_some(value);
        }
        "acllog-max-len" => {
            let max = integer(&value)?;
            g.acl.log_max_len.store(max as usize, Ordering::Relaxed);
        }
        "acl-pubsub-default" => match value.to_ascii_lowercase().as_str() {
            "allchannels" => g.acl.pubsub_all_channels.store(true, Ordering::Relaxed),
            "resetchannels" => g.acl.pubsub_all_channels.store(false, Ordering::Relaxed),
            _ => return Err("argument(s) must be one of the following: allchannels, resetchannels".into()),
        },
        "busy-reply-threshold" | "lua-time-limit" => {
            g.busy_reply_threshold_ms.store(integer(&value)?, Ordering::Relaxed)
        }
        "slowlog-log-slower-than" | "slowlog-max-len" => g.slowlog.set(name, &value)?,
        "latency-monitor-threshold" => match value.parse::<i64>() {
            Ok(ms) if ms >= 0 => {
                g.latency.threshold_ms.store(ms as u64, Ordering::Relaxed);
                g.slowlog.latency_ms.store(ms as u64, Ordering::Relaxed);
                g.slowlog.refresh_notice();
            }
            Ok(_) => return Err("argument must be between 0 and 9223372036854775807 inclusive".into()),
            Err(_) => return Err(NOT_AN_INTEGER.into()),
        },
        "maxmemory" => match crate::config::memory_size(&value) {
            Ok(bytes) => crate::memory::set_maxmemory(bytes),
            Err(_) => return Err("argument must be a memory value".into()),
        },
        "maxmemory-policy" => match wetask_shards::keyspace::evict::POLICIES
            .iter()
            .position(|(_, n)| n.eq_ignore_ascii_case(&value))
        {
            Some(index) => g.maxmemory_policy.store(index, Ordering::Relaxed),
            None => return Err("argument(s) must be one of the following: volatile-lru, volatile-lfu, volatile-random, volatile-ttl, allkeys-lru, allkeys-lfu, allkeys-random, noeviction".into()),
        },
        "notify-keyspace-events" => match wetask_shards::keyspace::notify::parse(&value) {
            Some(flags) => g.notify_keyspace_events.store(flags, Ordering::Relaxed),
            None => return Err(wetask_shards::keyspace::notify::BAD_CLASS.into()),
        },
        "maxmemory-samples" => match value.parse::<u64>() {
            Ok(n) if (1..=64).contains(&n) => g.maxmemory_samples.store(n, Ordering::Relaxed),
            _ => return Err("argument must be between 1 and 64 inclusive".into()),
        },
        "client-output-buffer-limit" => g.output_limits.set(&value)?,
        "protected-mode" => match crate::config::yes_no(&value) {
            Ok(on) => g.protected_mode.store(on, Ordering::Relaxed),
            Err(_) => return Err("argument must be 'yes' or 'no'".into()),
        },
        "appendfsync" => match crate::persist::Fsync::parse(&value) {
            // With `appendonly no` there is no journal: accepted, and nothing to change.
            Some(policy) => {
                if let Some(store) = g.store.get() {
                    store.set_policy(policy)
                }
            }
            None => return Err("argument(s) must be one of the following: always, everysec, no".into()),
        },
        "save" => {
            let points = crate::persist::parse_save_points(&value)?;
            if let Some(dumps) = g.dumps.get() {
                *dumps.save_points.lock().expect("save points") = points.clone();
            }
            if let Some(store) = g.store.get() {
                *store.save_points.lock().expect("save points") = points;
            }
        }
        "auto-aof-rewrite-percentage" => {
            let n = integer(&value)?;
            if let Some(store) = g.store.get() {
                store.auto_rewrite_percentage.store(n, Ordering::Relaxed);
            }
        }
        "auto-aof-rewrite-min-size" => match crate::config::memory_size(&value) {
            Ok(bytes) => {
                if let Some(store) = g.store.get() {
                    store.auto_rewrite_min_size.store(bytes, Ordering::Relaxed);
                }
            }
            Err(_) => return Err("argument must be a memory value".into()),
        },
        "replica-read-only" | "slave-read-only" => match crate::config::yes_no(&value) {
            Ok(on) => g.replication.read_only.store(on, Ordering::Relaxed),
            Err(_) => return Err("argument must be 'yes' or 'no'".into()),
        },
        "replica-serve-stale-data" | "slave-serve-stale-data" => {
            match crate::config::yes_no(&value) {
                Ok(on) => gate.serve_stale_data.store(on, Ordering::Relaxed),
                Err(_) => return Err("argument must be 'yes' or 'no'".into()),
            }
        }
        "min-replicas-to-write" | "min-slaves-to-write" => {
            gate.min_replicas_to_write
                .store(int_max(&value)?, Ordering::Relaxed);
        }
        "replica-priority" | "slave-priority" => {
            gate.priority.store(int_max(&value)?, Ordering::Relaxed);
        }
        "min-replicas-max-lag" | "min-slaves-max-lag" => {
            gate.min_replicas_max_lag
                .store(int_max(&value)?, Ordering::Relaxed);
        }
        "timeout" => g.idle_timeout_s.store(integer(&value)?, Ordering::Relaxed),
        "tcp-keepalive" => g.tcp_keepalive_s.store(integer(&value)?, Ordering::Relaxed),
        "maxclients" => match value.parse::<usize>() {
            Ok(n) if n > 0 => g.maxclients.store(n, Ordering::Relaxed),
            _ => return Err(NOT_AN_INTEGER.into()),
        },
        _ => return Ok(false),
    }
    Ok(true)
}

fn yes_no(on: bool) -> String {
    if on { "yes" } else { "no" }.into()
}
