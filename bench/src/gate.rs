//! The regression gate: build an earlier revision, then run it paired against the current
//! build. It answers "did we get slower than ourselves?", never "are we faster than Redis?".

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::compare::Report;
use crate::metrics::higher_is_better;

/// The metric that decides each workload's verdict.
const HEADLINE: &[&str] = &["ops_per_sec", "cpu_us_per_op", "boot_ms", "bytes_per_key"];

fn run(command: &mut Command) -> Result<(), String> {
    let status = command.status().map_err(|e| format!("cannot run {command:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{command:?} failed: {status}"))
    }
}

/// The repository root (where `git` and the workspace live).
pub fn repo_root() -> Result<PathBuf, String> {
    let out = Command::new("git")
        .args(["rev-parse", "--show-toplevel"])
        .output()
        .map_err(|e| format!("git: {e}"))?;
    if !out.status.success() {
        return Err("not inside the WeTask git repository".into());
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// Exports `rev` into `target/bench-baseline/src` and builds its server in release mode
/// into a separate target directory. Returns the binary.
pub fn build_baseline(root: &Path, rev: &str) -> Result<PathBuf, String> {
    let dir = root.join("target").join("bench-baseline");
    let src = dir.join("src");
    let _ = std::fs::remove_dir_all(&src);
    std::fs::create_dir_all(&src).map_err(|e| e.to_string())?;
    let archive = format!(
        "git -C '{}' archive --format=tar '{}' | tar -x -C '{}'",
        root.display(),
        rev.replace('\'', ""),
        src.display()
    );
    run(Command::new("sh").args(["-c", &archive]))?;
    let target = dir.join("target");
    run(Command::new("cargo")
        .current_dir(&src)
        .args(["build", "--release", "-p", "wetask-server", "--bin", "wetask", "--target-dir"])
        .arg(&target))?;
    Ok(target.join("release").join("wetask"))
}

/// Builds the working tree's server in release mode. Returns the binary.
pub fn build_current(root: &Path) -> Result<PathBuf, String> {
    run(Command::new("cargo")
        .current_dir(root)
        .args(["build", "--release", "-p", "wetask-server", "--bin", "wetask"]))?;
    Ok(root.join("target").join("release").join("wetask"))
}

/// Workloads whose headline metric got worse by more than `threshold` (0.05 = 5%).
pub fn regressions(report: &Report, threshold: f64) -> Vec<String> {
    let mut slower = Vec::new();
    for w in &report.workloads {
        for metric in HEADLINE {
            let Some(summary) = w.summary.get(*metric) else { continue };
            let ratio = summary.ratio.median;
            let worse = if higher_is_better(metric) { ratio < 1.0 - threshold } else { ratio > 1.0 + threshold };
            if worse {
                slower.push(format!("{} {metric}: current/baseline median {ratio:.3}", w.name));
            }
        }
    }
    slower
}
