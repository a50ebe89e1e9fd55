//! A start with another shard count than the data was written with: every old shard is
//! loaded (snapshot and journal, read only) into memory, cross-shard parts left open are
//! resolved among them, each key and each queue (with its tasks) moves to the shard that owns it now, and each new shard's state is written as a
//! snapshot. The manifest, rewritten after (by the caller), is the moment the new layout
//! takes over; the old files are removed only then, so a crash at any point leaves one
//! complete layout to start from.

use std::path::Path;

use wetask_shards::keyspace::{ScanFilter, DATABASES};
use wetask_shards::{shard_of, Shard};

use super::{files, load, Store};

pub fn run(store: &Store, old_count: usize) -> Result<(), String> {
    let dir = &store.path;
    let new_count = store.shard_count;
    let started = std::time::Instant::now();
    tracing::info!(
        from = old_count,
        to = new_count,
        "the data was written by {old_count} shards: moving it to {new_count}"
    );
    // Past every generation any old file used, so no new file meets an old one.
    let mut gen = 1;
    let sources = load_all(store, old_count, &mut gen)?;
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
        load::write_snapshot(dir, i, new_count, gen, target)?;
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
fn load_all(store: &Store, old_count: usize, gen: &mut u64) -> Result<Vec<Shard>, String> {
    let dir = &store.path;
    let mut sources = Vec::with_capacity(old_count);
    let mut open = Vec::with_capacity(old_count);
    for j in 0..old_count {
        let found = files::list(dir, j, old_count)
            .map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
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
        open.push(load::load_shard(dir, j, old_count, &mut source, repair)?.open);
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

/// Removes every file of a layout (`shard-*-of-<count>.*`).
pub fn remove_layout(dir: &Path, count: usize) -> Result<(), String> {
    let suffix = format!("-of-{count}.");
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with("shard-") && name.contains(&suffix) {
            std::fs::remove_file(entry.path()).map_err(|e| format!("cannot remove {name}: {e}"))?;
        }
    }
    files::sync_dir(dir).map_err(|e| format!("cannot sync {}: {e}", dir.display()))
}

/// Removes the files of every layout but `keep` (left by a move to another shard count that
/// a crash interrupted before its manifest was written).
pub fn remove_other_layouts(dir: &Path, keep: usize) -> Result<(), String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    let mut counts = std::collections::BTreeSet::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(count) = name
            .to_str()
            .and_then(|n| n.strip_prefix("shard-"))
            .and_then(|n| n.split_once("-of-"))
            .and_then(|(_, rest)| rest.split_once('.'))
            .and_then(|(count, _)| count.parse::<usize>().ok())
        else {
            continue;
        };
        if count != keep {
            counts.insert(count);
        }
    }
    for count in counts {
        tracing::warn!("removing the files of an unfinished move to {count} shards");
        remove_layout(dir, count)?;
    }
    Ok(())
}
