//! Where a shard's persistence files live, what they are called, and which of them count.
//!
//! `shard-<i>-of-<layout>.<gen>.journal`: the journal segments, numbered from 1; the highest
//! is the one written now. `shard-<i>-of-<layout>.<gen>.snapshot`: the shard's state before journal
//! segment `gen`. A start loads the newest snapshot and replays the segments from its
//! generation on; older files are garbage left by a crash during compaction, and removed.

use std::path::{Path, PathBuf};

/// How a data directory's keys are spread over its shards: how many, and how a slot finds
/// its shard. Files name it, so that the files of two layouts never meet (`shard-<i>-of-
/// <layout>.…`): `<n>r` for slot ranges (shard i owns the i-th of n contiguous ranges,
/// `wetask_shards::slot::shard_of_slot`), `<n>` for the first layout (slot mod n), which a
/// start moves to ranges (`reshard`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Layout {
    pub shards: usize,
    pub ranges: bool,
}

impl Layout {
    /// The layout this version writes, for `shards` shards.
    pub fn of(shards: usize) -> Layout {
        Layout {
            shards,
            ranges: true,
        }
    }

    /// A layout as a file name spells it.
    pub fn parse(token: &str) -> Option<Layout> {
        match token.strip_suffix('r') {
            Some(shards) => Some(Layout {
                shards: shards.parse().ok()?,
                ranges: true,
            }),
            None => Some(Layout {
                shards: token.parse().ok()?,
                ranges: false,
            }),
        }
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.shards, if self.ranges { "r" } else { "" })
    }
}

pub fn prefix(id: usize, layout: Layout) -> String {
    format!("shard-{id}-of-{layout}.")
}

pub fn journal(dir: &Path, id: usize, layout: Layout, gen: u64) -> PathBuf {
    dir.join(format!("{}{gen}.journal", prefix(id, layout)))
}

pub fn snapshot(dir: &Path, id: usize, layout: Layout, gen: u64) -> PathBuf {
    dir.join(format!("{}{gen}.snapshot", prefix(id, layout)))
}

/// The layout a persistence file's name gives (`shard-<i>-of-<layout>.<rest>`).
pub fn layout_of(name: &str) -> Option<Layout> {
    let (_, rest) = name.strip_prefix("shard-")?.split_once("-of-")?;
    Layout::parse(rest.split_once('.')?.0)
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

pub fn list(dir: &Path, id: usize, layout: Layout) -> std::io::Result<Found> {
    let prefix = prefix(id, layout);
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
pub fn remove_stale(dir: &Path, id: usize, layout: Layout) -> std::io::Result<()> {
    let found = list(dir, id, layout)?;
    let (base, _) = found.plan();
    if let Some(base) = base {
        for &g in found.snapshots.iter().filter(|&&g| g < base) {
            std::fs::remove_file(snapshot(dir, id, layout, g))?;
        }
        for &g in found.journals.iter().filter(|&&g| g < base) {
            std::fs::remove_file(journal(dir, id, layout, g))?;
        }
    }
    let prefix = prefix(id, layout);
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
