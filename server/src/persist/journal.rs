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
    /// The file's length: space preallocated ahead of `end` (see [`PREALLOCATE_BYTES`]).
    pub(super) allocated: u64,
    /// Bytes written since the start, over every segment, and how many of them are known
    /// to be on disk (monotonic: a ring fsync names the count it covers).
    pub(super) written: u64,
    pub(super) durable: u64,
    /// Under `always`, the shard's ring syncs (`net::held_sends`): `Now` commits only write,
    /// and the driver holds the turn's replies until an fsync it submitted covers them. Off
    /// on the glommio fallback path, where commits sync.
    pub(super) ring_sync: bool,
}

/// The journal is extended by this many bytes whenever a record would pass its end. Under
/// `appendfsync always` zeros are written and synced, so that a turn's fsync flushes data
/// blocks only (an append changes the file's size, and its fsync must then write the inode
/// too): 110-140 µs per 4 KiB write + fdatasync into zeroed space against 160-320 µs
/// appending, on this project's machines (docs/DURABILITY.md, "Group commit"). Under the
/// other policies a `fallocate`, so a write never extends the file. Zeros after the last
/// record read back as the end of the journal; a segment is cut to its records when it is
/// closed, at a clean shutdown, and when it is loaded.
pub const PREALLOCATE_BYTES: u64 = 1 << 20;

/// What a commit must do under `always` (see [`Journal::commit`]); under the other
/// policies both write and leave the sync to the syncer thread or the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Commit {
    /// Before a turn's replies leave, the shard sleeps, shuts down or compacts: write, and
    /// sync unless the shard's ring holds the replies for its own fsync (`held_sends`).
    Now,
    /// Before something leaves that no ring holds back (an envelope to a peer): write and
    /// sync now.
    Durable,
}

impl Journal {
    pub(super) fn open_segment(store: &Store, id: usize, gen: u64) -> Result<File, String> {
        let path = files::journal(&store.path, id, store.layout(), gen);
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
    ///
    /// Records are never kept back to batch several turns into one write (tried: it saves
    /// a syscall per turn, but a `kill -9` then loses acknowledged writes under `everysec`,
    /// which Redis does not, and which the crash tests caught).
    pub fn commit(&mut self, shard: &mut Shard, when: Commit) {
        if shard.take_journal(&mut self.pending) {
            self.records += 1;
            self.changes += 1;
        }
        let policy = self.store.policy();
        if self.pending.is_empty() {
            // Written but not yet synced (a ring fsync may be on its way): an envelope may
            // reveal it, so it goes to the disk first.
            if when == Commit::Durable && policy == Fsync::Always && self.written > self.durable {
                if let Err(e) = self.sync_all() {
                    self.sync_failed(e);
                }
            }
            return;
        }
        let sync_now = policy == Fsync::Always && (when == Commit::Durable || !self.ring_sync);
        let result = self
            .preallocate(policy)
            .and_then(|()| self.file.file.write_all_at(&self.pending, self.end))
            .and_then(|()| match sync_now {
                true => self.file.file.sync_data(),
                false => Ok(()),
            });
        match result {
            Ok(()) => {
                self.end += self.pending.len() as u64;
                self.publish_position();
                self.written += self.pending.len() as u64;
                self.allocated = self.allocated.max(self.end);
                self.pending.clear();
                match policy {
                    Fsync::Always if sync_now => {
                        self.durable = self.written;
                        self.store.synced();
                    }
                    // The ring's fsync follows (`net::held_sends`).
                    Fsync::Always => {}
                    Fsync::Everysec => self.file.dirty.store(true, Ordering::Release),
                    Fsync::No => {}
                }
                self.store.recovered();
            }
            Err(e) if policy == Fsync::Always => self.sync_failed(e),
            Err(e) => self.store.fail(format!("write failed: {e}")),
        }
    }

    /// A write or fsync failed under `always`: exits (see [`Journal::commit`]).
    pub fn sync_failed(&self, e: std::io::Error) -> ! {
        tracing::error!(
            "journal write failed under appendfsync always ({e}): exiting, as a reply may be \
             waiting on it"
        );
        std::process::exit(1);
    }

    /// Publishes where the journal ends, for WAIT (`ShardStatus::position`).
    pub fn publish_position(&self) {
        self.store.shards[self.id]
            .position
            .store(super::position(self.gen, self.end), Ordering::Release);
    }

    /// Lets the shard's ring sync under `always` (see `ring_sync`).
    pub fn set_ring_sync(&mut self, on: bool) {
        self.ring_sync = on;
    }

    /// Whether the ring should hold replies for an fsync: `always`, synced by the ring.
    pub fn ring_syncs(&self) -> bool {
        self.ring_sync && self.store.policy() == Fsync::Always
    }

    /// What a ring fsync submitted now would cover: the file, and the byte count to pass
    /// to [`Journal::made_durable`] once it completes. `None` when everything written is
    /// known to be on disk.
    pub fn sync_target(&self) -> Option<(Arc<SyncedFile>, u64)> {
        (self.written > self.durable).then(|| (self.file.clone(), self.written))
    }

    /// A ring fsync that covered `written` bytes completed.
    pub fn made_durable(&mut self, written: u64) {
        if written > self.durable {
            self.durable = written;
            self.store.synced();
        }
    }

    /// Makes sure the pending records land inside space the file already has (see
    /// [`PREALLOCATE_BYTES`]): under `always` zeros written and synced, so the turn's
    /// fdatasync has no size or block allocation to commit; under the other policies a
    /// `fallocate`, so a write only fills pages and never extends the file.
    fn preallocate(&mut self, policy: Fsync) -> std::io::Result<()> {
        let needed = self.end + self.pending.len() as u64;
        if needed <= self.allocated {
            return Ok(());
        }
        let target = needed + PREALLOCATE_BYTES;
        let from = self.allocated.max(self.end);
        let result = match policy {
            Fsync::Always => {
                write_zeros(&self.file.file, from, target).and_then(|()| self.file.file.sync_data())
            }
            Fsync::Everysec | Fsync::No => fallocate(&self.file.file, from, target),
        };
        // A disk too full for the space may still take the records: they are appended
        // (the slow path), and fail on their own if they cannot be written either.
        if let Err(e) = result {
            tracing::debug!("journal preallocation failed ({e}): appending");
            return Ok(());
        }
        self.allocated = target;
        Ok(())
    }

    /// Cuts the segment back to its records (drops preallocated zeros).
    fn trim(&mut self) -> std::io::Result<()> {
        if self.allocated > self.end {
            self.file.file.set_len(self.end)?;
            self.allocated = self.end;
        }
        Ok(())
    }

    /// Cuts the file to its records and flushes it to disk (a clean shutdown).
    pub fn close(&mut self) {
        if let Err(e) = self.trim().and_then(|()| self.sync_all()) {
            tracing::error!("journal fsync at shutdown failed: {e}");
        }
    }

    /// Syncs the segment: everything written so far is on disk.
    fn sync_all(&mut self) -> std::io::Result<()> {
        self.file.file.sync_data()?;
        self.durable = self.written;
        self.store.synced();
        Ok(())
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
        self.commit(shard, Commit::Now);
        if !self.pending.is_empty() {
            return;
        }
        // Everything so far is on disk after this: a ring fsync still in flight on this
        // segment covers no more, and the next one goes to the new segment.
        if let Err(e) = self.trim().and_then(|()| self.sync_all()) {
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
        self.publish_position();
        self.allocated = 0;
        self.changes = 0;
        status.compacting.store(true, Ordering::Release);
        status.started_ms.store(now_ms, Ordering::Release);
        store.submit(job);
    }
}

/// Writes zeros into `file` from `from` to `to`.
fn write_zeros(file: &File, from: u64, to: u64) -> std::io::Result<()> {
    let zeros = vec![0u8; 256 << 10];
    let mut at = from;
    while at < to {
        let n = zeros.len().min((to - at) as usize);
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// Gives `file` blocks from `from` to `to` (read back as zeros), growing its size.
fn fallocate(file: &File, from: u64, to: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: fallocate on our own open file, with no pointers.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, from as i64, (to - from) as i64) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
