//! `wetask-bench`: WeTask's own RESP load generator and side-by-side harness.
//!
//! * `run`: drive one server with one load shape and print throughput and latency.
//! * `vs-redis`: WeTask and Redis in turns on the same CPU, ratios per workload.
//! * `journal-cost`: WeTask with persistence against WeTask without, on the `durable` workloads.
//! * `gate`: the current build against an earlier revision of itself; fails on a slowdown.
//! * `list`: the workload table.

mod chart;
mod compare;
mod gate;
mod keys;
mod loadgen;
mod metrics;
mod servers;
mod taskflow;
mod workloads;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::keys::Distribution;
use crate::servers::ServerKind;
use crate::workloads::{RunOptions, WORKLOADS};

#[derive(Parser)]
#[command(
    name = "wetask-bench",
    version,
    about = "WeTask's load generator and paired benchmark harness"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Drive one running server with one load shape.
    Run(RunArgs),
    /// Compare WeTask with Redis: both pinned to the same CPU, in turns, ratio per pair.
    VsRedis(CompareArgs),
    /// Did we get slower than ourselves? Runs the current build paired against a baseline
    /// revision and exits 1 if any workload's median ratio is more than --threshold worse
    /// (and worse in at least 80% of the pairs, so noise alone does not fail it).
    /// It says nothing about Redis: use vs-redis for that.
    Gate {
        /// The git revision to compare against (built into target/bench-baseline).
        #[arg(long)]
        baseline: String,
        /// Allowed slowdown before failing (0.05 = 5%).
        #[arg(long, default_value_t = 0.05)]
        threshold: f64,
        #[command(flatten)]
        compare: CompareArgs,
    },
    /// WeTask against itself with a different shard count (default: --shards 2 against 1),
    /// every shard pinned to the server CPU: the cost of cross-shard hops on the same load.
    VsShards {
        /// Shard count of the baseline side.
        #[arg(long, default_value_t = 1)]
        baseline_shards: usize,
        #[command(flatten)]
        compare: CompareArgs,
    },
    /// WeTask with the workloads' persistence against WeTask with none (run it on the
    /// `durable` workloads): what the journal costs.
    JournalCost(CompareArgs),
    /// Pools the pairs of several earlier runs (their `--json` files, of the same two
    /// servers) into one table: each metric's median ratio over every pair, and each run's
    /// own median beside it. Runs nothing.
    Pool {
        /// The runs' JSON files.
        #[arg(required = true)]
        runs: Vec<PathBuf>,
    },
    /// List the workloads.
    List,
}

#[derive(Args)]
struct Shared {
    /// Measure for this long per sample (ms), after the warm-up.
    #[arg(long, default_value_t = 3000)]
    duration_ms: u64,
    /// Or stop after this many requests per sample (whichever comes first).
    #[arg(long)]
    ops: Option<u64>,
    /// Warm-up before measuring (ms).
    #[arg(long, default_value_t = 500)]
    warmup_ms: u64,
    /// Distinct keys the load draws from.
    #[arg(long, default_value_t = 100_000)]
    keyspace: u64,
    #[arg(long, value_enum, default_value_t = Distribution::Uniform)]
    distribution: Distribution,
    /// Pin the load generator to this CPU.
    #[arg(long = "load-cpu", visible_alias = "cpu", default_value_t = 1)]
    load_cpu: usize,
}

#[derive(Args)]
struct RunArgs {
    #[arg(long, default_value = "127.0.0.1:6379")]
    addr: std::net::SocketAddr,
    #[arg(long, default_value_t = 16)]
    connections: usize,
    #[arg(long, default_value_t = 1)]
    pipeline: usize,
    /// set, get, mixed (SET/GET/DEL) or set-wait (SET then WAIT 1 0); or a job flow: tasks (TASK.SUBMIT and TASK.FETCH …
    /// ACK), brpop (LPUSH + BRPOP) or lmove (LPUSH + BLMOVE + LREM), 4 producers and 8
    /// workers (for profiling one side of the `tasks` workloads).
    #[arg(long, default_value = "get")]
    mix: String,
    #[arg(long, default_value_t = 64)]
    value_bytes: usize,
    #[command(flatten)]
    shared: Shared,
}

#[derive(Args)]
struct CompareArgs {
    /// Pairs of runs per workload (A B A B ...).
    #[arg(long, default_value_t = 12)]
    pairs: usize,
    /// Workloads or groups, comma-separated: kv, pipeline, mixed, hop, tasks, boot, memory, durable, all, or names.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    workloads: Vec<String>,
    /// The CPU both servers are pinned to.
    #[arg(long, default_value_t = 0)]
    server_cpu: usize,
    /// The wetask binary (default: build the workspace's release binary).
    #[arg(long)]
    wetask: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    shards: usize,
    #[arg(long, default_value = "redis-server")]
    redis_server: PathBuf,
    /// Keys loaded by the memory workload.
    #[arg(long, default_value_t = 1_000_000)]
    memory_keys: u64,
    /// Write every pair's raw numbers here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write a chart of the ratios here.
    #[arg(long)]
    svg: Option<PathBuf>,
    #[command(flatten)]
    shared: Shared,
}

impl CompareArgs {
    fn options(&self) -> RunOptions {
        RunOptions {
            duration: Some(Duration::from_millis(self.shared.duration_ms)),
            ops: self.shared.ops,
            warmup: Duration::from_millis(self.shared.warmup_ms),
            keyspace: self.shared.keyspace,
            distribution: self.shared.distribution,
            memory_keys: self.memory_keys,
            server_cpu: self.server_cpu,
            load_cpu: self.shared.load_cpu,
        }
    }
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Cmd::List => {
            for w in WORKLOADS {
                println!("{:<13} {:<7} {}", w.name, w.group, w.about);
            }
            ExitCode::SUCCESS
        }
        Cmd::Run(args) => report(run_once(&args)),
        Cmd::Pool { runs } => report(pool(&runs)),
        Cmd::VsRedis(args) => report(vs_redis(&args)),
        Cmd::JournalCost(args) => report(journal_cost(&args)),
        Cmd::VsShards {
            baseline_shards,
            compare,
        } => report(vs_shards(baseline_shards, &compare)),
        Cmd::Gate {
            baseline,
            threshold,
            compare,
        } => match gate(&baseline, threshold, &compare) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::from(1),
            Err(message) => {
                eprintln!("wetask-bench: {message}");
                ExitCode::from(2)
            }
        },
    }
}

fn report(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("wetask-bench: {message}");
            ExitCode::from(2)
        }
    }
}

fn run_once(args: &RunArgs) -> Result<(), String> {
    servers::pin_self(args.shared.load_cpu)
        .map_err(|e| format!("cannot pin to CPU {}: {e}", args.shared.load_cpu))?;
    let flow = match args.mix.as_str() {
        "tasks" => Some(taskflow::Flow::Tasks),
        "brpop" => Some(taskflow::Flow::Brpop),
        "lmove" => Some(taskflow::Flow::Lmove),
        _ => None,
    };
    if let Some(flow) = flow {
        return run_flow(args, flow);
    }
    let mix = match args.mix.as_str() {
        "set" => loadgen::Mix::Set,
        "get" => loadgen::Mix::Get,
        "mixed" => loadgen::Mix::SetGetDel,
        "set-wait" => loadgen::Mix::SetWait,
        other => {
            return Err(format!(
                "unknown mix '{other}': set, get, mixed or set-wait"
            ))
        }
    };
    let spec = loadgen::LoadSpec {
        addr: args.addr,
        connections: args.connections,
        pipeline: args.pipeline,
        mix,
        value_bytes: args.value_bytes,
        keyspace: args.shared.keyspace,
        distribution: args.shared.distribution,
        warmup: Duration::from_millis(args.shared.warmup_ms),
        ops: args.shared.ops,
        duration: Some(Duration::from_millis(args.shared.duration_ms)),
    };
    let result = loadgen::run(&spec).map_err(|e| format!("load failed: {e}"))?;
    let h = &result.latency_us;
    println!(
        "{} requests in {:.2} s: {:.0} ops/s, {} errors; latency µs p50 {} p95 {} p99 {} p99.9 {}",
        result.ops,
        result.elapsed.as_secs_f64(),
        result.ops_per_sec(),
        result.errors,
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.95),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999)
    );
    Ok(())
}

/// `run --mix tasks|brpop|lmove`: one job flow against a running server.
fn run_flow(args: &RunArgs, flow: taskflow::Flow) -> Result<(), String> {
    let spec = taskflow::FlowSpec {
        addr: args.addr,
        flow,
        producers: 4,
        workers: 8,
        groups: 0,
        warmup: Duration::from_millis(args.shared.warmup_ms),
        duration: Duration::from_millis(args.shared.duration_ms),
        jobs: args.shared.ops,
        queue: format!("flow-{}", std::process::id()),
    };
    let result = taskflow::run(spec).map_err(|e| format!("flow failed: {e}"))?;
    let h = &result.latency_us;
    println!(
        "{} jobs in {:.2} s: {:.0} jobs/s, {} errors; submit-to-worker µs p50 {} p99 {} (p90 {} p99.9 {})",
        result.jobs,
        result.elapsed.as_secs_f64(),
        result.jobs_per_sec(),
        result.errors,
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.9),
        h.value_at_quantile(0.999)
    );
    Ok(())
}

fn wetask_binary(args: &CompareArgs) -> Result<PathBuf, String> {
    match &args.wetask {
        Some(path) => Ok(path.clone()),
        None => gate::build_current(&gate::repo_root()?),
    }
}

fn compare(a: &ServerKind, b: &ServerKind, args: &CompareArgs) -> Result<compare::Report, String> {
    let workloads = workloads::select(&args.workloads)?;
    let opts = args.options();
    servers::pin_self(opts.load_cpu)
        .map_err(|e| format!("cannot pin to CPU {}: {e}", opts.load_cpu))?;
    let mut progress = |line: &str| eprintln!("  {line}");
    let report = compare::run(a, b, &workloads, args.pairs, &opts, &mut progress)
        .map_err(|e| e.to_string())?;
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Some(path) = &args.svg {
        chart::write_svg(&report, path)?;
    }
    Ok(report)
}

fn header(report: &compare::Report, pairs: usize) {
    println!(
        "# {} vs {} — {}",
        report.b_version, report.a_version, report.machine
    );
    println!(
        "# {pairs} pairs per workload; servers on CPU {}, load on CPU {}; {:?} per sample after {:?} warm-up",
        report.options.server_cpu,
        report.options.load_cpu,
        report.options.duration.unwrap_or_default(),
        report.options.warmup
    );
}

fn vs_redis(args: &CompareArgs) -> Result<(), String> {
    let redis = ServerKind::Redis {
        binary: args.redis_server.clone(),
    };
    let wetask = ServerKind::Wetask {
        binary: wetask_binary(args)?,
        shards: args.shards,
        journal: true,
    };
    let report = compare(&redis, &wetask, args)?;
    header(&report, args.pairs);
    if report.a_version == report.b_version {
        println!(
            "# VOID: both servers report '{}': the control is not Redis",
            report.a_version
        );
        return Err("void run: identical server versions".into());
    }
    print!("{}", compare::table(&report));
    Ok(())
}

fn pool(paths: &[PathBuf]) -> Result<(), String> {
    let runs = paths
        .iter()
        .map(|path| {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
        })
        .collect::<Result<Vec<compare::SavedRun>, String>>()?;
    print!("{}", compare::pool(&runs)?);
    Ok(())
}

fn vs_shards(baseline_shards: usize, args: &CompareArgs) -> Result<(), String> {
    let binary = wetask_binary(args)?;
    let base = ServerKind::Wetask {
        binary: binary.clone(),
        shards: baseline_shards,
        journal: true,
    };
    let candidate = ServerKind::Wetask {
        binary,
        shards: args.shards.max(2),
        journal: true,
    };
    let labels = [
        format!("{baseline_shards} shard(s)"),
        format!("{} shards", args.shards.max(2)),
    ];
    wetask_pair(&base, &candidate, labels, args)
}

/// Two WeTask configurations paired, printed under `labels`.
fn wetask_pair(
    a: &ServerKind,
    b: &ServerKind,
    [a_label, b_label]: [String; 2],
    args: &CompareArgs,
) -> Result<(), String> {
    let mut report = compare(a, b, args)?;
    report.a_label = a_label;
    report.b_label = b_label;
    header(&report, args.pairs);
    print!("{}", compare::table(&report));
    Ok(())
}

fn journal_cost(args: &CompareArgs) -> Result<(), String> {
    let binary = wetask_binary(args)?;
    let memory = ServerKind::Wetask {
        binary: binary.clone(),
        shards: args.shards,
        journal: false,
    };
    let journaled = ServerKind::Wetask {
        binary,
        shards: args.shards,
        journal: true,
    };
    let labels = ["no persistence".into(), "journal".into()];
    wetask_pair(&memory, &journaled, labels, args)
}

fn gate(baseline: &str, threshold: f64, args: &CompareArgs) -> Result<bool, String> {
    let root = gate::repo_root()?;
    eprintln!("building baseline {baseline} ...");
    let old = gate::build_baseline(&root, baseline)?;
    let current = wetask_binary(args)?;
    let base = ServerKind::Wetask {
        binary: old,
        shards: args.shards,
        journal: true,
    };
    let now = ServerKind::Wetask {
        binary: current,
        shards: args.shards,
        journal: true,
    };
    let mut report = compare(&base, &now, args)?;
    report.a_label = "baseline".into();
    report.b_label = "current".into();
    header(&report, args.pairs);
    print!("{}", compare::table(&report));
    let slower = gate::regressions(&report, threshold);
    if slower.is_empty() {
        println!(
            "gate: PASS — no workload more than {:.0}% slower than {baseline}",
            threshold * 100.0
        );
        Ok(true)
    } else {
        println!(
            "gate: FAIL — slower than {baseline} by more than {:.0}%:",
            threshold * 100.0
        );
        for line in slower {
            println!("  {line}");
        }
        Ok(false)
    }
}
