//! Paired comparisons: two servers take turns (A B A B ...) on the same CPU for every
//! workload, and each metric is summarised as the median and min–max of the per-pair ratios
//! B / A. Used by `vs-redis` (A = Redis, B = WeTask) and `gate` (A = baseline, B = current).

use std::collections::BTreeMap;
use std::io;

use crate::metrics::{higher_is_better, label, Metrics, Spread};
use crate::servers::{Server, ServerKind};
use crate::workloads::{self, Kind, RunOptions, Workload};

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Pair {
    pub a: Metrics,
    pub b: Metrics,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct MetricSummary {
    pub a: Spread,
    pub b: Spread,
    /// B / A per pair.
    pub ratio: Spread,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct WorkloadReport {
    pub name: String,
    pub about: String,
    pub pairs: Vec<Pair>,
    pub summary: BTreeMap<String, MetricSummary>,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {
    pub a_label: String,
    pub b_label: String,
    pub a_version: String,
    pub b_version: String,
    pub machine: String,
    pub options: RunOptions,
    pub workloads: Vec<WorkloadReport>,
}

/// `nproc`, CPU model and kernel, for the report header.
pub fn machine() -> String {
    // Online CPUs, not this (pinned) thread's affinity.
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cpus} CPUs, {model}, Linux {}", kernel.trim())
}

fn summarise(pairs: &[Pair]) -> BTreeMap<String, MetricSummary> {
    let mut out = BTreeMap::new();
    let Some(first) = pairs.first() else {
        return out;
    };
    for name in first.a.0.keys() {
        let column = |side: fn(&Pair) -> &Metrics| -> Vec<f64> {
            pairs.iter().filter_map(|p| side(p).get(name)).collect()
        };
        let ratios: Vec<f64> = pairs
            .iter()
            .filter_map(|p| Some(p.b.get(name)? / p.a.get(name)?))
            .collect();
        if let (Some(a), Some(b), Some(ratio)) = (
            Spread::of(&column(|p| &p.a)),
            Spread::of(&column(|p| &p.b)),
            Spread::of(&ratios),
        ) {
            out.insert(name.clone(), MetricSummary { a, b, ratio });
        }
    }
    out
}

/// Runs every workload for `pairs` pairs. `progress` hears one line per sample.
pub fn run(
    a: &ServerKind,
    b: &ServerKind,
    workloads: &[&Workload],
    pairs: usize,
    opts: &RunOptions,
    progress: &mut dyn FnMut(&str),
) -> io::Result<Report> {
    let (a_version, b_version) = {
        let (sa, sb) = (
            Server::start(a, opts.server_cpu)?,
            Server::start(b, opts.server_cpu)?,
        );
        let versions = (sa.version()?, sb.version()?);
        sa.stop();
        sb.stop();
        versions
    };
    let mut reports = Vec::new();
    for workload in workloads {
        let samples;
        match workload.kind {
            Kind::Load {
                mix,
                value_bytes,
                fsync,
                shards,
                ..
            } => {
                // A row with its own shard count (the `hop` rows) runs both sides with it.
                let (a, b) = if shards > 1 {
                    (&a.with_shards(shards), &b.with_shards(shards))
                } else {
                    (a, b)
                };
                let dirs = [crate::servers::data_dir()?, crate::servers::data_dir()?];
                let durable = |side: usize| {
                    fsync.map(|fsync| crate::servers::Durable {
                        fsync,
                        dir: &dirs[side],
                    })
                };
                let servers = [
                    Server::start_in(a, opts.server_cpu, durable(0))?,
                    Server::start_in(b, opts.server_cpu, durable(1))?,
                ];
                if mix == crate::loadgen::Mix::Get {
                    for server in &servers {
                        workloads::preload(server, opts.keyspace, value_bytes)?;
                    }
                }
                samples = take_pairs(workload.name, pairs, progress, |side| {
                    workloads::measure_load(&servers[side], workload.kind, opts)
                })?;
                for server in servers {
                    server.stop();
                }
                for dir in dirs {
                    let _ = std::fs::remove_dir_all(dir);
                }
            }
            Kind::Tasks { .. } => {
                let servers = [
                    Server::start(a, opts.server_cpu)?,
                    Server::start(b, opts.server_cpu)?,
                ];
                let redis = [a.label() == "redis", b.label() == "redis"];
                samples = take_pairs(workload.name, pairs, progress, |side| {
                    workloads::measure_tasks(&servers[side], redis[side], workload.kind, opts)
                })?;
                for server in servers {
                    server.stop();
                }
            }
            Kind::Restart { .. } => {
                let kinds = [a, b];
                samples = take_pairs(workload.name, pairs, progress, |side| {
                    workloads::measure_restart(kinds[side], workload.kind, opts)
                })?;
            }
            Kind::Boot | Kind::Memory { .. } | Kind::TaskMemory { .. } => {
                let kinds = [a, b];
                samples = take_pairs(workload.name, pairs, progress, |side| {
                    workloads::measure_fresh(kinds[side], workload.kind, opts)
                })?;
            }
        }
        reports.push(WorkloadReport {
            name: workload.name.to_string(),
            about: workload.about.to_string(),
            summary: summarise(&samples),
            pairs: samples,
        });
    }
    Ok(Report {
        a_label: a.label().to_string(),
        b_label: b.label().to_string(),
        a_version,
        b_version,
        machine: machine(),
        options: opts.clone(),
        workloads: reports,
    })
}

/// Takes `pairs` pairs of samples, A (side 0) then B (side 1), reporting each pair.
fn take_pairs(
    name: &str,
    pairs: usize,
    progress: &mut dyn FnMut(&str),
    mut sample: impl FnMut(usize) -> io::Result<Metrics>,
) -> io::Result<Vec<Pair>> {
    let mut out = Vec::with_capacity(pairs);
    for pair in 0..pairs {
        let (a, b) = (sample(0)?, sample(1)?);
        progress(&format!(
            "{name} pair {}/{pairs}: {}",
            pair + 1,
            brief(&a, &b)
        ));
        out.push(Pair { a, b });
    }
    Ok(out)
}

fn brief(a: &Metrics, b: &Metrics) -> String {
    a.0.iter()
        .filter(|(k, _)| {
            matches!(
                k.as_str(),
                "ops_per_sec"
                    | "cpu_us_per_op"
                    | "boot_ms"
                    | "bytes_per_key"
                    | "bytes_per_job"
                    | "restart_ms"
                    | "disk_bytes_per_key"
            )
        })
        .map(|(k, va)| {
            format!(
                "{} {:.2} vs {:.2}",
                label(k),
                va,
                b.get(k).unwrap_or(f64::NAN)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The metrics shown in the table, in order.
const SHOWN: &[&str] = &[
    "ops_per_sec",
    "p99_us",
    "cpu_us_per_op",
    "p50_us",
    "boot_ms",
    "bytes_per_key",
    "bytes_per_job",
    "restart_ms",
    "log_bytes_per_key",
    "disk_bytes_per_key",
];

/// The width of the workload column: the longest name, and at least 13.
fn name_width<'a>(names: impl Iterator<Item = &'a str>) -> usize {
    names.map(|n| n.chars().count()).max().unwrap_or(0).max(13)
}

/// The readable table: one row per workload and metric.
pub fn table(report: &Report) -> String {
    table_of(&report.a_label, &report.b_label, &report.workloads)
}

fn table_of(a_label: &str, b_label: &str, workloads: &[WorkloadReport]) -> String {
    let mut out = String::new();
    let width = name_width(workloads.iter().map(|w| w.name.as_str()));
    out.push_str(&format!(
        "{:<width$} {:<17} {:>14} {:>14}   {} / {} ratio: median (min–max)\n",
        "workload", "metric", a_label, b_label, b_label, a_label
    ));
    for w in workloads {
        for metric in SHOWN {
            let Some(s) = w.summary.get(*metric) else {
                continue;
            };
            let better = if higher_is_better(metric) {
                "higher is better"
            } else {
                "lower is better"
            };
            out.push_str(&format!(
                "{:<width$} {:<17} {:>14.2} {:>14.2}   {:.2} ({:.2}–{:.2})  {better}\n",
                w.name,
                label(metric),
                s.a.median,
                s.b.median,
                s.ratio.median,
                s.ratio.min,
                s.ratio.max
            ));
        }
    }
    out
}

/// One earlier run, as its `--json` file holds it (the fields `pool` reads).
#[derive(serde::Deserialize)]
pub struct SavedRun {
    pub a_label: String,
    pub b_label: String,
    pub a_version: String,
    pub b_version: String,
    pub workloads: Vec<SavedWorkload>,
}

#[derive(serde::Deserialize)]
pub struct SavedWorkload {
    pub name: String,
    pub about: String,
    pub pairs: Vec<Pair>,
}

/// Several runs' pairs taken as one sample: per workload and metric, the median and range of
/// every pair's ratio, then each run's own median beside it, so that the spread between runs
/// shows next to the pooled figure. Runs must compare the same two servers.
pub fn pool(runs: &[SavedRun]) -> Result<String, String> {
    let first = runs.first().ok_or("no runs to pool")?;
    if let Some(other) = runs
        .iter()
        .find(|r| r.a_label != first.a_label || r.b_label != first.b_label)
    {
        return Err(format!(
            "runs compare different servers: {} / {} and {} / {}",
            first.b_label, first.a_label, other.b_label, other.a_label
        ));
    }
    // Workloads in the order first met, each with its runs' pairs.
    let mut groups: Vec<(&SavedWorkload, Vec<&[Pair]>)> = Vec::new();
    for run in runs {
        for w in &run.workloads {
            match groups.iter_mut().find(|(first, _)| first.name == w.name) {
                Some((_, pairs)) => pairs.push(&w.pairs),
                None => groups.push((w, vec![&w.pairs])),
            }
        }
    }
    let pooled: Vec<WorkloadReport> = groups
        .iter()
        .map(|(w, per_run)| {
            let pairs: Vec<Pair> = per_run.iter().flat_map(|p| p.iter().cloned()).collect();
            WorkloadReport {
                name: w.name.clone(),
                about: w.about.clone(),
                summary: summarise(&pairs),
                pairs,
            }
        })
        .collect();
    let mut out = String::new();
    let versions: std::collections::BTreeSet<&str> =
        runs.iter().map(|r| r.b_version.as_str()).collect();
    out.push_str(&format!(
        "# {} runs pooled: {} ({}) / {} ({})\n",
        runs.len(),
        first.b_label,
        versions.into_iter().collect::<Vec<_>>().join(", "),
        first.a_label,
        first.a_version
    ));
    for (w, (_, per_run)) in pooled.iter().zip(&groups) {
        out.push_str(&format!(
            "# {}: {} pairs from {} runs\n",
            w.name,
            w.pairs.len(),
            per_run.len()
        ));
    }
    out.push_str(&table_of(&first.a_label, &first.b_label, &pooled));
    out.push_str("each run's median ratio, in the order given:\n");
    let width = name_width(pooled.iter().map(|w| w.name.as_str()));
    for (w, (_, per_run)) in pooled.iter().zip(&groups) {
        let run_summaries: Vec<_> = per_run.iter().map(|pairs| summarise(pairs)).collect();
        for metric in SHOWN {
            if !w.summary.contains_key(*metric) {
                continue;
            }
            let medians: Vec<String> = run_summaries
                .iter()
                .filter_map(|summary| summary.get(*metric))
                .map(|s| format!("{:.2}", s.ratio.median))
                .collect();
            out.push_str(&format!(
                "{:<width$} {:<17} {}\n",
                w.name,
                label(metric),
                medians.join(" ")
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str, ratios: &[f64]) -> SavedRun {
        let pairs = ratios
            .iter()
            .map(|r| {
                let mut a = Metrics::default();
                let mut b = Metrics::default();
                a.set("p99_us", 100.0);
                b.set("p99_us", 100.0 * r);
                Pair { a, b }
            })
            .collect();
        SavedRun {
            a_label: "redis".into(),
            b_label: "wetask".into(),
            a_version: "redis 7".into(),
            b_version: "wetask 0.1.0".into(),
            workloads: vec![SavedWorkload {
                name: name.into(),
                about: String::new(),
                pairs,
            }],
        }
    }

    #[test]
    fn pooling_takes_the_median_of_every_pair_and_lists_each_runs() {
        let runs = [run("flow", &[0.9, 1.0, 1.3]), run("flow", &[0.8, 1.1])];
        let text = pool(&runs).unwrap();
        assert!(text.contains("# flow: 5 pairs from 2 runs"), "{text}");
        // The pooled median of 0.8 0.9 1.0 1.1 1.3 is 1.0; the runs' medians 1.0 and 0.95.
        assert!(text.contains("1.00 (0.80–1.30)"), "{text}");
        assert!(text.contains("1.00 0.95"), "{text}");
    }

    #[test]
    fn pooling_refuses_runs_of_other_servers() {
        let mut other = run("flow", &[1.0]);
        other.a_label = "baseline".into();
        assert!(pool(&[run("flow", &[1.0]), other]).is_err());
        assert!(pool(&[]).is_err());
    }
}
