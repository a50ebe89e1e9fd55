//! Where a shard's persistence files live, what they are called, and which of them count.
//!
//! `shard-<i>-of-<n>.<gen>.journal`: the journal segments, numbered from 1; the highest is
//! the one written now. `shard-<i>-of-<n>.<gen>.snapshot`: the shard's state before journal
//! segment `gen`. A start loads the newest snapshot and replays the segments from its
//! generation on; older files are garbage left by a crash during compaction, and removed.

use std::path::{Path, PathBuf};

pub fn prefix(id: usize, count: usize) -> String {
    format!("shard-{id}-of-{count}.")
}

pub fn journal(dir: &Path, id: usize, count: usize, gen: u64) -> PathBuf {
    dir.join(format!("{}{gen}.journal", prefix(id, count)))
}

pub fn snapshot(dir: &Path, id: usize, count: usize, gen: u64) -> PathBuf {
    dir.join(format!("{}{gen}.snapshot", prefix(id, count)))
}

/// A shard's files found in `dir`: generations of snapshots and journals, ascending.
#[derive(Debug, Default)]
pub struct Found {
    pub snapshots: Vec<u64>,
    pub journals: Vec<u64>,
}

impl Found {
    /// The newest snapshot, and the journal generations to replay after it.
    pub fn plan(&self) -> (Option<u64>, Vec<u64>) {
        let base = self.snapshots.last().copied();
        let journals = self
            .journals
            .iter()
            .copied()
            .filter(|&g| base.is_none_or(|b| g >= b))
            .collect();
        (base, journals)
    }
}

pub fn list(dir: &Path, id: usize, count: usize) -> std::io::Result<Found> {
    let prefix = prefix(id, count);
    let mut found = Found::default();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        let Some((gen, kind)) = rest.split_once('.') else {
            continue;
        };
        let Ok(gen) = gen.parse::<u64>() else {
            continue;
        };
        match kind {
            "journal" => found.journals.push(gen),
            "snapshot" => found.snapshots.push(gen),
            _ => {}
        }
    }
    found.snapshots.sort_unstable();
    found.journals.sort_unstable();
    Ok(found)
}

/// Removes what the plan does not need: snapshots older than the newest, journals before
/// it, and unfinished temporary files.
pub fn remove_stale(dir: &Path, id: usize, count: usize) -> std::io::Result<()> {
    let found = list(dir, id, count)?;
    let (base, _) = found.plan();
    if let Some(base) = base {
        for &g in found.snapshots.iter().filter(|&&g| g < base) {
            std::fs::remove_file(snapshot(dir, id, count, g))?;
        }
        for &g in found.journals.iter().filter(|&&g| g < base) {
            std::fs::remove_file(journal(dir, id, count, g))?;
        }
    }
    let prefix = prefix(id, count);
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name
            .to_str()
            .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".tmp"))
        {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// Fsyncs a directory, so that a file created, renamed or removed in it stays so.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}
