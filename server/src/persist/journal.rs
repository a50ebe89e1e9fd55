//! One shard's journal as the shard thread writes it: the current segment, the turn's
//! records written (and under `always` synced) before anything of the turn leaves, retries
//! after a failed write, and rotation to a new segment when a compaction starts.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use wetask_shards::Shard;

use super::{files, Fsync, Store};

/// A journal file as the everysec syncer sees it: the file, and whether it has unsynced
/// writes.
pub struct SyncedFile {
    pub file: File,
    pub dirty: AtomicBool,
}

pub struct Journal {
    pub(super) store: Arc<Store>,
    pub(super) id: usize,
    pub(super) file: Arc<SyncedFile>,
    /// The segment written now.
    pub(super) gen: u64,
    /// Where the next record goes: the end of the last record written in full.
    pub(super) end: u64,
    /// The newest snapshot, and the bytes of the segments after it before this one.
    pub(super) snapshot: Option<u64>,
    pub(super) earlier_bytes: u64,
    /// Records taken from the shard and not yet written (kept across a failed write).
    pub(super) pending: Vec<u8>,
    /// Records written since the start, and since the last snapshot began.
    pub(super) records: u64,
    pub(super) changes: u64,
}

impl Journal {
    pub(super) fn open_segment(store: &Store, id: usize, gen: u64) -> Result<File, String> {
        let path = files::journal(&store.path, id, store.shard_count, gen);
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| format!("cannot open the journal {}: {e}", path.display()))
    }

    /// Writes the shard's operations of this turn as one record (and, under `always`,
    /// fdatasyncs). A failed write is retried at the next call; meanwhile writes get
    /// MISCONF. Under `always` a failure ends the process: a reply may already be queued
    /// behind this write, and it must not leave claiming durability (Redis exits too).
    pub fn commit(&mut self, shard: &mut Shard) {
        if shard.take_journal(&mut self.pending) {
            self.records += 1;
            self.changes += 1;
        }
        if self.pending.is_empty() {
            return;
        }
        let policy = self.store.policy();
        let result = self
            .file
            .file
            .write_all_at(&self.pending, self.end)
            .and_then(|()| match policy {
                Fsync::Always => self.file.file.sync_data(),
                _ => Ok(()),
            });
        match result {
            Ok(()) => {
                self.end += self.pending.len() as u64;
                self.pending.clear();
                match policy {
                    Fsync::Always => self.store.synced(),
                    Fsync::Everysec => self.file.dirty.store(true, Ordering::Release),
                    Fsync::No => {}
                }
                self.store.recovered();
            }
            Err(e) if policy == Fsync::Always => {
                tracing::error!(
                    "journal write failed under appendfsync always ({e}): exiting, as a reply \
                     may be waiting on it"
                );
                std::process::exit(1);
            }
            Err(e) => self.store.fail(format!("write failed: {e}")),
        }
    }

    /// Flushes the file to disk (a clean shutdown).
    pub fn sync(&self) {
        if let Err(e) = self.file.file.sync_data() {
            tracing::error!("journal fsync at shutdown failed: {e}");
        }
    }

    /// Bytes of journal since the last snapshot (what a compaction would fold in).
    pub fn size(&self) -> u64 {
        self.earlier_bytes + self.end
    }

    pub fn records_written(&self) -> u64 {
        self.records
    }

    pub fn pending_bytes(&self) -> usize {
        self.pending.len()
    }

    /// Starts a compaction if one is due (asked for, a `save` point reached, or the journal
    /// grown past `auto-aof-rewrite-*`) and none runs: closes this segment (written and
    /// synced), opens the next, and hands the closed ones to the compactor, which writes a
    /// snapshot as of the new segment's start and then removes what it replaces.
    pub fn maybe_compact(&mut self, shard: &mut Shard, now_ms: u64) {
        let store = self.store.clone();
        let status = &store.shards[self.id];
        if status.finished.swap(false, Ordering::AcqRel) {
            let gen = status.snapshot_gen.load(Ordering::Acquire);
            if gen > 0 && self.snapshot.is_none_or(|s| s < gen) {
                self.snapshot = Some(gen);
                self.earlier_bytes = self
                    .earlier_bytes
                    .saturating_sub(status.folded_bytes.load(Ordering::Acquire));
            }
        }
        if status.compacting.load(Ordering::Acquire) {
            return;
        }
        let asked =
            store.compact_epoch.load(Ordering::Acquire) > status.done_epoch.load(Ordering::Acquire);
        if !asked && !store.compaction_due(self.size(), status, self.changes, now_ms) {
            return;
        }
        self.commit(shard);
        if !self.pending.is_empty() {
            return;
        }
        if let Err(e) = self.file.file.sync_data() {
            store.fail(format!("fsync failed: {e}"));
            return;
        }
        let next = self.gen + 1;
        let file = match Journal::open_segment(&store, self.id, next).and_then(|f| {
            files::sync_dir(&store.path)
                .map(|()| f)
                .map_err(|e| e.to_string())
        }) {
            Ok(file) => file,
            Err(e) => {
                store.fail(e);
                return;
            }
        };
        // Without a snapshot there has been no rotation either: segment 1 is the first.
        let first = self.snapshot.unwrap_or(1);
        let job = super::compact::Job {
            id: self.id,
            base: self.snapshot,
            journals: (first..=self.gen).collect(),
            target: next,
            epoch: store.compact_epoch.load(Ordering::Acquire),
        };
        self.file = Arc::new(SyncedFile {
            file,
            dirty: AtomicBool::new(false),
        });
        store.syncing.lock().expect("syncing")[self.id] = Some(self.file.clone());
        self.gen = next;
        self.earlier_bytes += self.end;
        self.end = 0;
        self.changes = 0;
        status.compacting.store(true, Ordering::Release);
        status.started_ms.store(now_ms, Ordering::Release);
        store.submit(job);
    }
}
