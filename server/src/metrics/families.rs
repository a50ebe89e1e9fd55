//! A scrape as metric families, in the text format `prometheus-client` writes. The server's
//! families carry redis_exporter's names (`redis_commands_total{cmd}`, `redis_db_keys{db}`,
//! `redis_memory_used_bytes` …) so its dashboards and alerts work unchanged; the queues'
//! families are WeTask's own (`wetask_queue_*`).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use super::gather::{subfield, Scrape};

/// INFO fields served as one family each: (section, field, family, help, counter).
const INFO_FAMILIES: &[(&str, &str, &str, &str, bool)] = &[
    (
        "server",
        "uptime_in_seconds",
        "redis_uptime_in_seconds",
        "Seconds since the server started.",
        false,
    ),
    (
        "clients",
        "connected_clients",
        "redis_connected_clients",
        "Client connections open now.",
        false,
    ),
    (
        "clients",
        "blocked_clients",
        "redis_blocked_clients",
        "Clients in a blocking command.",
        false,
    ),
    (
        "stats",
        "total_connections_received",
        "redis_connections_received",
        "Connections accepted.",
        true,
    ),
    (
        "stats",
        "rejected_connections",
        "redis_rejected_connections",
        "Connections refused (maxclients).",
        true,
    ),
    (
        "stats",
        "total_commands_processed",
        "redis_commands_processed",
        "Commands run.",
        true,
    ),
    (
        "stats",
        "total_net_input_bytes",
        "redis_net_input_bytes",
        "Bytes read from clients.",
        true,
    ),
    (
        "stats",
        "total_net_output_bytes",
        "redis_net_output_bytes",
        "Bytes written to clients.",
        true,
    ),
    (
        "stats",
        "expired_keys",
        "redis_expired_keys",
        "Keys removed by their expiry.",
        true,
    ),
    (
        "stats",
        "evicted_keys",
        "redis_evicted_keys",
        "Keys evicted under maxmemory.",
        true,
    ),
    (
        "stats",
        "keyspace_hits",
        "redis_keyspace_hits",
        "Key lookups that found the key.",
        true,
    ),
    (
        "stats",
        "keyspace_misses",
        "redis_keyspace_misses",
        "Key lookups that did not.",
        true,
    ),
    (
        "stats",
        "total_error_replies",
        "redis_errors",
        "Error replies sent.",
        true,
    ),
    (
        "stats",
        "acl_access_denied_auth",
        "redis_acl_access_denied_auth",
        "Logins refused.",
        true,
    ),
    (
        "memory",
        "used_memory",
        "redis_memory_used_bytes",
        "Memory the allocator holds for data.",
        false,
    ),
    (
        "memory",
        "maxmemory",
        "redis_memory_max_bytes",
        "The maxmemory setting (0: none).",
        false,
    ),
    (
        "persistence",
        "rdb_changes_since_last_save",
        "redis_rdb_changes_since_last_save",
        "Writes since the last snapshot.",
        false,
    ),
    (
        "persistence",
        "rdb_last_save_time",
        "redis_rdb_last_save_timestamp_seconds",
        "When the last snapshot finished.",
        false,
    ),
    (
        "persistence",
        "rdb_bgsave_in_progress",
        "redis_rdb_bgsave_in_progress",
        "A snapshot is being written.",
        false,
    ),
    (
        "persistence",
        "aof_enabled",
        "redis_aof_enabled",
        "The journal is on.",
        false,
    ),
    (
        "persistence",
        "aof_rewrite_in_progress",
        "redis_aof_rewrite_in_progress",
        "The journal is being compacted.",
        false,
    ),
    (
        "replication",
        "connected_slaves",
        "redis_connected_slaves",
        "Replicas connected.",
        false,
    ),
];

/// The queue counts served as `wetask_queue_tasks{queue,state}`.
const STATES: &[&str] = &["queued", "scheduled", "leased", "dead"];

/// Queue totals: (TASK.STATS field, family, help).
const QUEUE_COUNTERS: &[(&str, &str, &str)] = &[
    (
        "submitted",
        "wetask_queue_submitted",
        "Tasks submitted to the queue.",
    ),
    ("acked", "wetask_queue_acked", "Tasks acknowledged."),
    ("failed", "wetask_queue_failed", "Failed attempts."),
    (
        "retried",
        "wetask_queue_retried",
        "Failed attempts given another try.",
    ),
];

#[derive(Debug)]
pub struct Families(pub Scrape);

fn field<'a>(scrape: &'a Scrape, section: &str, name: &str) -> Option<&'a str> {
    scrape
        .info
        .get(section)?
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

type Result = std::result::Result<(), std::fmt::Error>;

fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: f64) -> Result {
    let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(value).encode(metric)
}

fn counter(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: f64) -> Result {
    let metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    ConstCounter::new(value).encode(metric)
}

impl Families {
    fn info(&self, encoder: &mut DescriptorEncoder) -> Result {
        let scrape = &self.0;
        gauge(encoder, "redis_up", "The server answered this scrape.", 1.0)?;
        for &(section, name, family, help, is_counter) in INFO_FAMILIES {
            let value = field(scrape, section, name)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0);
            if is_counter {
                counter(encoder, family, help, value)?;
            } else {
                gauge(encoder, family, help, value)?;
            }
        }
        Ok(())
    }

    fn commands(&self, encoder: &mut DescriptorEncoder) -> Result {
        let stats = self.0.info.get("commandstats").cloned().unwrap_or_default();
        let families = [
            ("redis_commands", "Calls per command.", "calls", 1.0),
            (
                "redis_commands_duration_seconds",
                "Time spent per command.",
                "usec",
                1e-6,
            ),
            (
                "redis_commands_rejected_calls",
                "Calls refused before running.",
                "rejected_calls",
                1.0,
            ),
            (
                "redis_commands_failed_calls",
                "Calls that answered an error.",
                "failed_calls",
                1.0,
            ),
        ];
        for (family, help, key, scale) in families {
            let mut descriptor =
                encoder.encode_descriptor(family, help, None, MetricType::Counter)?;
            for (name, value) in &stats {
                let cmd = name.strip_prefix("cmdstat_").unwrap_or(name);
                let labels = [("cmd", cmd)];
                let metric = descriptor.encode_family(&labels)?;
                ConstCounter::new(subfield(value, key).unwrap_or(0.0) * scale).encode(metric)?;
            }
        }
        Ok(())
    }

    fn keyspace(&self, encoder: &mut DescriptorEncoder) -> Result {
        let dbs = self.0.info.get("keyspace").cloned().unwrap_or_default();
        for (family, help, key) in [
            ("redis_db_keys", "Keys per database.", "keys"),
            (
                "redis_db_keys_expiring",
                "Keys with an expiry per database.",
                "expires",
            ),
        ] {
            let mut descriptor =
                encoder.encode_descriptor(family, help, None, MetricType::Gauge)?;
            for (db, value) in &dbs {
                let labels = [("db", db.as_str())];
                let metric = descriptor.encode_family(&labels)?;
                ConstGauge::new(subfield(value, key).unwrap_or(0.0)).encode(metric)?;
            }
        }
        Ok(())
    }

    fn queues(&self, encoder: &mut DescriptorEncoder) -> Result {
        let queues = &self.0.queues;
        let mut tasks = encoder.encode_descriptor(
            "wetask_queue_tasks",
            "Tasks in the queue by state.",
            None,
            MetricType::Gauge,
        )?;
        for (queue, report) in queues {
            for state in STATES {
                let labels = [("queue", queue.as_str()), ("state", state)];
                let value = report.fields.get(*state).copied().unwrap_or(0);
                ConstGauge::new(value).encode(tasks.encode_family(&labels)?)?;
            }
        }
        for &(key, family, help) in QUEUE_COUNTERS {
            let mut descriptor =
                encoder.encode_descriptor(family, help, None, MetricType::Counter)?;
            for (queue, report) in queues {
                let value = report.fields.get(key).copied().unwrap_or(0).max(0) as u64;
                let labels = [("queue", queue.as_str())];
                ConstCounter::new(value).encode(descriptor.encode_family(&labels)?)?;
            }
        }
        for (family, help, key, scale) in [
            (
                "wetask_queue_oldest_queued_age_seconds",
                "Age of the oldest queued task.",
                "oldest_age_ms",
                1e-3,
            ),
            (
                "wetask_queue_paused",
                "The queue is paused (1) or not (0).",
                "paused",
                1.0,
            ),
            (
                "wetask_queue_workers",
                "Clients or worker identities that fetched from the queue in the last minute.",
                "workers",
                1.0,
            ),
        ] {
            let mut descriptor =
                encoder.encode_descriptor(family, help, None, MetricType::Gauge)?;
            for (queue, report) in queues {
                let value = report.fields.get(key).copied().unwrap_or(0) as f64 * scale;
                let labels = [("queue", queue.as_str())];
                ConstGauge::new(value).encode(descriptor.encode_family(&labels)?)?;
            }
        }
        self.histograms(encoder)
    }

    fn histograms(&self, encoder: &mut DescriptorEncoder) -> Result {
        for (family, help, which) in [
            (
                "wetask_queue_wait_seconds",
                "From submit to a task's first start.",
                "waiting",
            ),
            (
                "wetask_queue_run_seconds",
                "From a lease's start to its ACK.",
                "running",
            ),
        ] {
            let mut descriptor =
                encoder.encode_descriptor(family, help, None, MetricType::Histogram)?;
            for (queue, report) in &self.0.queues {
                let counts = if which == "waiting" {
                    &report.waiting
                } else {
                    &report.running
                };
                let mut buckets: Vec<(f64, u64)> = report
                    .bounds_ms
                    .iter()
                    .map(|&ms| ms as f64 / 1000.0)
                    .chain([f64::MAX]) // the encoder writes f64::MAX as `+Inf`
                    .zip(counts.iter().map(|&n| n.max(0) as u64))
                    .collect();
                buckets.truncate(counts.len());
                let sum = report
                    .fields
                    .get(&format!("{which}_sum_ms"))
                    .copied()
                    .unwrap_or(0);
                let count = report
                    .fields
                    .get(&format!("{which}_count"))
                    .copied()
                    .unwrap_or(0);
                let labels = [("queue", queue.as_str())];
                descriptor
                    .encode_family(&labels)?
                    .encode_histogram::<NoLabelSet>(
                        sum as f64 / 1000.0,
                        count.max(0) as u64,
                        &buckets,
                        None,
                    )?;
            }
        }
        Ok(())
    }
}

impl Collector for Families {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result {
        self.info(&mut encoder)?;
        self.commands(&mut encoder)?;
        self.keyspace(&mut encoder)?;
        self.queues(&mut encoder)?;
        gauge(
            &mut encoder,
            "wetask_workers_connected",
            "Worker identities bound by TASK.WORKER.",
            self.0.workers as f64,
        )
    }
}
