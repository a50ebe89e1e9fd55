//! A start with another shard count than the data was written with: every old shard is
//! loaded (snapshot and journal, read only) into memory, cross-shard parts left open are
//! resolved among them, each key and each queue (with its tasks) moves to the shard that owns it now, and each new shard's state is written as a
//! snapshot. The manifest, rewritten after (by the caller), is the moment the new layout
//! takes over; the old files are removed only then, so a crash at any point leaves one
//! complete layout to start from.

use std::path::Path;

use wetask_shards::keyspace::{ScanFilter, DATABASES};
use wetask_shards::{shard_of, Shard};

use super::files::{self, Layout};
use super::{load, Store};

pub fn run(store: &Store, old: Layout) -> Result<(), String> {
    let dir = &store.path;
    let new_count = store.shard_count;
    let started = std::time::Instant::now();
    tracing::info!(
        from = %old,
        to = new_count,
        "the data was written in layout {old}: moving it to {new_count} shards by slot ranges"
    );
    // Past every generation any old file used, so no new file meets an old one.
    let mut gen = 1;
    let sources = load_all(store, old, &mut gen)?;
    let mut targets: Vec<_> = (0..new_count).map(|i| store.scratch_shard(i)).collect();
    let mut keys = 0usize;
    for (j, mut source) in sources.into_iter().enumerate() {
        for db in 0..DATABASES {
            let (_, names) = source.scan(db, 0, usize::MAX >> 1, &ScanFilter::default());
            for key in names {
                if let Some(entry) = source.take_entry(db, &key) {
                    targets[shard_of(&key, new_count)]
                        .db(db)
                        .insert(&key, entry);
                    keys += 1;
                }
            }
        }
        let now = source.now_ms();
        for (i, target) in targets.iter_mut().enumerate() {
            let owns = |queue: &[u8]| shard_of(queue, new_count) == i;
            target
                .tasks
                .absorb(&mut source.tasks, &owns, i == j % new_count);
            if target.now_ms() < now {
                target.set_clock(now);
            }
        }
    }
    for (i, target) in targets.iter_mut().enumerate() {
        load::write_snapshot(dir, i, store.layout(), gen, target)?;
    }
    tracing::info!(
        keys,
        ms = started.elapsed().as_millis() as u64,
        "data moved to {new_count} shards"
    );
    Ok(())
}

/// Loads every old shard (read only), then resolves the cross-shard parts left open: one
/// is replayed only if its coordinator, another old shard, committed it. Moves `gen` past
/// every generation the old files use.
fn load_all(store: &Store, old: Layout, gen: &mut u64) -> Result<Vec<Shard>, String> {
    let dir = &store.path;
    let mut sources = Vec::with_capacity(old.shards);
    let mut open = Vec::with_capacity(old.shards);
    for j in 0..old.shards {
        let found =
            files::list(dir, j, old).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
        *gen = found
            .snapshots
            .iter()
            .chain(&found.journals)
            .fold(*gen, |g, &x| g.max(x + 1));
        let mut source = store.scratch_shard(j);
        let repair = load::Repair {
            truncated: store.load_truncated,
            corrupt: false,
            write: false,
        };
        open.push(load::load_shard(dir, j, old, &mut source, repair)?.open);
        sources.push(source);
    }
    let commits: Vec<_> = sources.iter().map(|s| s.last_commits()).collect();
    for (j, part) in open.into_iter().enumerate() {
        if let Some(part) = part {
            let coordinator = commits.get(part.coordinator());
            super::resolve::resolve(part, j, coordinator, &mut sources[j])?;
        }
    }
    Ok(sources)
}

/// Removes every file of a layout (`shard-*-of-<layout>.*`).
pub fn remove_layout(dir: &Path, layout: Layout) -> Result<(), String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if files::layout_of(name) == Some(layout) {
            std::fs::remove_file(entry.path()).map_err(|e| format!("cannot remove {name}: {e}"))?;
        }
    }
    files::sync_dir(dir).map_err(|e| format!("cannot sync {}: {e}", dir.display()))
}

/// Removes the files of every layout but `keep` (left by a move to another layout that a
/// crash interrupted before its manifest was written).
pub fn remove_other_layouts(dir: &Path, keep: Layout) -> Result<(), String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    let mut others = std::collections::BTreeSet::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        if let Some(layout) = name.to_str().and_then(files::layout_of) {
            if layout != keep {
                others.insert(layout);
            }
        }
    }
    for layout in others {
        tracing::warn!("removing the files of an unfinished move to layout {layout}");
        remove_layout(dir, layout)?;
    }
    Ok(())
}
