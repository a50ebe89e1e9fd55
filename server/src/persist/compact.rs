//! The compactor: a background thread that folds a shard's closed journal segments into a
//! new snapshot, without touching the shard. It loads the shard's previous snapshot and
//! replays the closed segments into a scratch copy (the same replay a start does), writes
//! that state as the snapshot of the segment the shard writes now, and removes the files it
//! replaces. The shard goes on serving, with no fork and no per-write barrier; the price is
//! the scratch copy's memory while it runs and one thread's CPU (docs/DURABILITY.md says
//! why this rather than Dragonfly's versioned walk).

use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;

use wetask_shards::shard::cross_commit::Replay;
use wetask_shards::Shard;

use super::{files, load, Store};

/// One compaction: shard `id`'s snapshot `base` (if any) and closed segments `journals`
/// become snapshot `target`.
#[derive(Debug)]
pub struct Job {
    pub id: usize,
    pub base: Option<u64>,
    pub journals: Vec<u64>,
    pub target: u64,
    /// The request epoch it answers (SAVE, BGSAVE and BGREWRITEAOF wait on it).
    pub epoch: u64,
}

pub fn spawn(store: Arc<Store>, jobs: Receiver<Job>) -> Result<(), String> {
    std::thread::Builder::new()
        .name("wetask-compact".into())
        .spawn(move || {
            for job in jobs {
                let started = std::time::Instant::now();
                let status = &store.shards[job.id];
                match run(&store, &job) {
                    Ok((bytes, folded)) => {
                        tracing::info!(
                            shard = job.id,
                            snapshot = job.target,
                            bytes,
                            journal_bytes_folded = folded,
                            ms = started.elapsed().as_millis() as u64,
                            "snapshot written; older journal segments removed"
                        );
                        status.snapshot_bytes.store(bytes, Ordering::Release);
                        status.folded_bytes.store(folded, Ordering::Release);
                        status.snapshot_gen.store(job.target, Ordering::Release);
                        status.last_ok.store(true, Ordering::Release);
                        store.snapshot_written();
                    }
                    Err(e) => {
                        tracing::error!(shard = job.id, "compaction failed: {e}");
                        status.last_ok.store(false, Ordering::Release);
                    }
                }
                status.done_epoch.fetch_max(job.epoch, Ordering::AcqRel);
                status.finished.store(true, Ordering::Release);
                status.compacting.store(false, Ordering::Release);
            }
        })
        .map(drop)
        .map_err(|e| format!("cannot start the compactor thread: {e}"))
}

/// Builds and writes the snapshot; returns its size and the journal bytes it replaces.
fn run(store: &Store, job: &Job) -> Result<(u64, u64), String> {
    let dir = &store.path;
    let count = store.layout();
    let mut scratch = store.scratch_shard(job.id);
    let mut folded = 0;
    if let Some(base) = job.base {
        load::read_snapshot(&files::snapshot(dir, job.id, count, base), &mut scratch)?;
    }
    // The shard closes a segment only while no cross-shard operation holds it, so a part
    // at the end of the closed ones has committed.
    let mut replay = Replay::default();
    for &gen in &job.journals {
        let path = files::journal(dir, job.id, count, gen);
        folded += replay_closed(&path, &mut scratch, &mut replay)?;
    }
    replay.finish_committed(&mut scratch)?;
    let bytes = load::write_snapshot(dir, job.id, count, job.target, &mut scratch)?;
    drop(scratch);
    // The new snapshot is in place and synced: what it replaces can go.
    if let Some(base) = job.base {
        let _ = std::fs::remove_file(files::snapshot(dir, job.id, count, base));
    }
    for &gen in &job.journals {
        let _ = std::fs::remove_file(files::journal(dir, job.id, count, gen));
    }
    files::sync_dir(dir).map_err(|e| format!("cannot sync {}: {e}", dir.display()))?;
    Ok((bytes, folded))
}

/// Replays a closed segment, which must be whole; returns its size.
fn replay_closed(
    path: &std::path::Path,
    shard: &mut Shard,
    replay: &mut Replay,
) -> Result<u64, String> {
    use bytes::Bytes;
    use wetask_shards::persist::journal::{ops, record};
    let shown = path.display();
    let file = std::fs::read(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let (records, end) = record::read_all(&file);
    if end != record::Next::End {
        return Err(format!("{shown} is not whole ({end:?})"));
    }
    for payload in records {
        for op in ops::read_ops(Bytes::copy_from_slice(payload))
            .map_err(|e| format!("{shown}: {}", e.0))?
        {
            replay.op(shard, op).map_err(|e| format!("{shown}: {e}"))?;
        }
    }
    Ok(file.len() as u64)
}

/// The channel jobs go through.
pub fn channel() -> (Sender<Job>, Receiver<Job>) {
    std::sync::mpsc::channel()
}
