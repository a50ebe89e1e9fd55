//! Durability on the server side: the data directory (locked, with a manifest naming the
//! shard layout), each shard's journal file, recovery at start, and the fsync policies.
//!
//! Each shard owns one append-only file, `<dir>/<appenddirname>/shard-<id>-of-<n>.journal`.
//! Once per loop turn the shard's operations ([`wetask_shards::journal::ops`]) become one
//! record, written before anything of that turn leaves the shard: before the ring submits
//! the turn's replies and before an envelope goes to a peer (`ShardCore::commit_journal`).
//! With `appendfsync always` the write is followed by `fdatasync` right there, so one
//! flush covers every connection's writes of the turn (group commit), and no reply leaves
//! before its data is on disk. With `everysec` a syncer thread fsyncs every file once a
//! second; with `no` the kernel decides. docs/DURABILITY.md has the formats and promises.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::ValueEnum;
use wetask_shards::journal::{ops, record};
use wetask_shards::Shard;

use crate::config::Config;

/// Redis's `appendfsync`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Fsync {
    /// fdatasync after every loop turn's write, before its replies leave.
    Always,
    /// fdatasync once a second, from a background thread.
    Everysec,
    /// Never: the kernel writes back when it likes.
    No,
}

impl Fsync {
    pub const ALL: [Fsync; 3] = [Fsync::Always, Fsync::Everysec, Fsync::No];

    pub fn parse(name: &str) -> Option<Fsync> {
        Fsync::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(name))
    }

    pub fn name(self) -> &'static str {
        match self {
            Fsync::Always => "always",
            Fsync::Everysec => "everysec",
            Fsync::No => "no",
        }
    }
}

const MANIFEST: &str = "manifest";
const MANIFEST_MAGIC: &str = "wetask-journal 1";

/// The data directory, shared by the shards: held locked for the process's life.
pub struct Store {
    pub path: PathBuf,
    /// `appendfsync`, which CONFIG SET may change (an index into `Fsync::ALL`).
    policy: std::sync::atomic::AtomicUsize,
    pub load_corrupt: bool,
    pub load_truncated: bool,
    _lock: File,
    /// Files the everysec syncer flushes.
    syncing: Mutex<Vec<Arc<SyncedFile>>>,
    /// Set by a shard whose write or fsync failed; cleared when it succeeds again.
    pub failing: AtomicBool,
    pub last_error: Mutex<Option<String>>,
    /// Unix seconds of the last successful fsync (INFO's `aof_last_fsync` stand-in).
    pub last_sync_s: AtomicU64,
}

/// A journal file as the syncer sees it: the file, and whether it has unsynced writes.
pub struct SyncedFile {
    file: File,
    dirty: AtomicBool,
}

fn journal_name(id: usize, count: usize) -> String {
    format!("shard-{id}-of-{count}.journal")
}

/// Opens (creating) the data directory for `shard_count` shards, locks it, and checks its
/// manifest. `None` when `appendonly no`.
pub fn prepare(config: &Config, shard_count: usize) -> Result<Option<Arc<Store>>, String> {
    if !config.appendonly {
        return Ok(None);
    }
    let path = Path::new(&config.dir).join(&config.appenddirname);
    std::fs::create_dir_all(&path)
        .map_err(|e| format!("cannot create the data directory {}: {e}", path.display()))?;
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path.join("lock"))
        .map_err(|e| format!("cannot open {}/lock: {e}", path.display()))?;
    // SAFETY: flock on an open descriptor.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(format!(
            "the data directory {} is in use by another wetask process",
            path.display()
        ));
    }
    let manifest = path.join(MANIFEST);
    match std::fs::read_to_string(&manifest) {
        Ok(text) => {
            let old = parse_manifest(&text)
                .ok_or_else(|| format!("{} is not a wetask manifest", manifest.display()))?;
            if old != shard_count {
                return Err(format!(
                    "the data directory {} holds a journal written by {old} shards; start with \
                     --shards {old} (loading it into {shard_count} shards is not built yet: \
                     docs/DURABILITY.md)",
                    path.display()
                ));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            write_atomically(
                &path,
                MANIFEST,
                format!("{MANIFEST_MAGIC}\nshards {shard_count}\n").as_bytes(),
            )
            .map_err(|e| format!("cannot write {}: {e}", manifest.display()))?;
        }
        Err(e) => return Err(format!("cannot read {}: {e}", manifest.display())),
    }
    let store = Arc::new(Store {
        path,
        policy: std::sync::atomic::AtomicUsize::new(config.appendfsync as usize),
        load_corrupt: config.aof_load_corrupt,
        load_truncated: config.aof_load_truncated,
        _lock: lock,
        syncing: Mutex::new(Vec::new()),
        failing: AtomicBool::new(false),
        last_error: Mutex::new(None),
        last_sync_s: AtomicU64::new(crate::globals::unix_ms() / 1000),
    });
    spawn_syncer(store.clone())?;
    Ok(Some(store))
}

fn parse_manifest(text: &str) -> Option<usize> {
    let mut lines = text.lines();
    if lines.next()? != MANIFEST_MAGIC {
        return None;
    }
    lines.find_map(|l| l.strip_prefix("shards ")?.trim().parse().ok())
}

/// Writes `name` in `dir` through a temporary file, a rename and a directory fsync.
fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut file = File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))?;
    File::open(dir)?.sync_all()
}

/// The everysec syncer: once a second, fdatasync every file written since the last round
/// (idle under the other policies, which CONFIG SET may change).
fn spawn_syncer(store: Arc<Store>) -> Result<(), String> {
    std::thread::Builder::new()
        .name("wetask-fsync".into())
        .spawn(move || loop {
            let started = Instant::now();
            let files: Vec<Arc<SyncedFile>> = match store.policy() {
                Fsync::Everysec => store.syncing.lock().expect("syncing").clone(),
                _ => Vec::new(),
            };
            for f in files {
                if f.dirty.swap(false, Ordering::AcqRel) {
                    match f.file.sync_data() {
                        Ok(()) => store.synced(),
                        Err(e) => {
                            f.dirty.store(true, Ordering::Release);
                            store.fail(format!("fsync failed: {e}"));
                        }
                    }
                }
            }
            std::thread::sleep(Duration::from_secs(1).saturating_sub(started.elapsed()));
        })
        .map(drop)
        .map_err(|e| format!("cannot start the fsync thread: {e}"))
}

impl Store {
    pub fn policy(&self) -> Fsync {
        Fsync::ALL[self.policy.load(Ordering::Relaxed)]
    }

    /// CONFIG SET appendfsync.
    pub fn set_policy(&self, policy: Fsync) {
        self.policy.store(policy as usize, Ordering::Relaxed);
    }

    fn fail(&self, error: String) {
        if !self.failing.swap(true, Ordering::AcqRel) {
            tracing::error!("journal: {error}; writes are refused (MISCONF) until it recovers");
        }
        *self.last_error.lock().expect("error") = Some(error);
    }

    fn synced(&self) {
        self.last_sync_s
            .store(crate::globals::unix_ms() / 1000, Ordering::Relaxed);
    }

    fn recovered(&self) {
        if self.failing.swap(false, Ordering::AcqRel) {
            tracing::info!("journal: writes succeed again");
        }
    }

    /// The error a write gets while the journal cannot be written (Redis's MISCONF).
    pub fn misconf(&self) -> Option<String> {
        if !self.failing.load(Ordering::Acquire) {
            return None;
        }
        let error = self
            .last_error
            .lock()
            .expect("error")
            .clone()
            .unwrap_or_default();
        Some(format!("MISCONF Errors writing to the AOF file: {error}"))
    }
}

/// One shard's journal file.
pub struct Journal {
    store: Arc<Store>,
    file: Arc<SyncedFile>,
    /// Where the next record goes: the end of the last record written in full.
    end: u64,
    /// Records taken from the shard and not yet written (kept across a failed write).
    pending: Vec<u8>,
    /// Records written since the start.
    records: u64,
}

/// What recovery found, for the start-up log line.
#[derive(Debug, Default)]
pub struct Recovered {
    pub records: usize,
    pub operations: usize,
    pub bytes: u64,
    pub leases_released: usize,
}

/// Loads shard `id`'s journal into `shard` and opens it for appending. A torn tail is cut
/// off (logged); damage elsewhere stops the start, unless `aof-load-corrupt yes`, which
/// keeps a copy of the file and loads what precedes the damage.
pub fn recover(
    store: &Arc<Store>,
    id: usize,
    count: usize,
    shard: &mut Shard,
) -> Result<(Journal, Recovered), String> {
    let path = store.path.join(journal_name(id, count));
    let shown = path.display().to_string();
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| format!("cannot open the journal {shown}: {e}"))?;
    let bytes =
        std::fs::read(&path).map_err(|e| format!("cannot read the journal {shown}: {e}"))?;
    let mut recovered = Recovered::default();
    let mut at = 0;
    let keep = loop {
        match record::read(&bytes, at) {
            record::Next::Record { payload, end } => {
                match ops::read_ops(Bytes::copy_from_slice(payload)) {
                    Ok(list) => {
                        recovered.operations += list.len();
                        for op in list {
                            shard.replay(op).map_err(|e| {
                                format!("journal {shown}: the record at byte {at} cannot be replayed: {e}")
                            })?;
                        }
                    }
                    Err(e) => {
                        corrupt(store, &path, at, e.0)?;
                        break at;
                    }
                }
                recovered.records += 1;
                at = end;
            }
            record::Next::End => break at,
            record::Next::TornTail { at } => {
                if !store.load_truncated {
                    return Err(format!(
                        "journal {shown} ends in a torn record at byte {at} (a crash \
                         mid-write); start with --aof-load-truncated yes to drop it"
                    ));
                }
                tracing::warn!(
                    journal = %shown,
                    offset = at,
                    dropped_bytes = bytes.len() - at,
                    "journal ends in a torn record (a crash mid-write): dropped"
                );
                break at;
            }
            record::Next::Corrupt { at, reason } => {
                corrupt(store, &path, at, reason)?;
                break at;
            }
        }
    };
    if keep < bytes.len() {
        file.set_len(keep as u64)
            .and_then(|()| file.sync_all())
            .map_err(|e| format!("cannot truncate the journal {shown}: {e}"))?;
    }
    recovered.bytes = keep as u64;
    recovered.leases_released = shard.finish_replay(crate::globals::unix_ms(), true);
    let file = Arc::new(SyncedFile {
        file,
        dirty: AtomicBool::new(false),
    });
    store.syncing.lock().expect("syncing").push(file.clone());
    let mut journal = Journal {
        store: store.clone(),
        file,
        end: keep as u64,
        pending: Vec::new(),
        records: 0,
    };
    // What `finish_replay` logged (the released leases) goes down before anything else.
    journal.commit(shard);
    Ok((journal, recovered))
}

/// Damage before the end of a journal: stops the start, or with `aof-load-corrupt yes`
/// keeps a copy of the whole file and lets the caller load up to `at`.
fn corrupt(store: &Store, path: &Path, at: usize, reason: &str) -> Result<(), String> {
    let shown = path.display();
    if !store.load_corrupt {
        return Err(format!(
            "journal {shown} is damaged at byte {at} ({reason}); to load what precedes it, \
             start with --aof-load-corrupt yes (a copy of the file is kept)"
        ));
    }
    let copy = path.with_extension(format!("corrupt-{}", crate::globals::unix_ms()));
    std::fs::copy(path, &copy).map_err(|e| format!("cannot copy {shown}: {e}"))?;
    tracing::error!(
        journal = %shown,
        offset = at,
        reason,
        copy = %copy.display(),
        "journal damaged: loading what precedes the damage (aof-load-corrupt yes)"
    );
    Ok(())
}

impl Journal {
    /// Writes the shard's operations of this turn as one record (and, under `always`,
    /// fdatasyncs). A failed write is retried at the next call; meanwhile writes get
    /// MISCONF. Under `always` a failure ends the process: a reply may already be queued
    /// behind this write, and it must not leave claiming durability (Redis exits too).
    pub fn commit(&mut self, shard: &mut Shard) {
        if shard.take_journal(&mut self.pending) {
            self.records += 1;
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

    /// Bytes of journal written by this shard.
    pub fn size(&self) -> u64 {
        self.end
    }

    pub fn records_written(&self) -> u64 {
        self.records
    }

    pub fn pending_bytes(&self) -> usize {
        self.pending.len()
    }
}
