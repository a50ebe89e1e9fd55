//! Durability on the server side: the data directory (locked, with a manifest naming the
//! shard layout), each shard's journal, recovery at start, the fsync policies, and
//! compaction into snapshots.
//!
//! Each shard owns its files under `<dir>/<appenddirname>/` (`files`). Once per loop turn the
//! shard's operations ([`wetask_shards::persist::journal::ops`]) become one record, written before
//! anything of that turn leaves the shard: before the ring submits the turn's replies and
//! before an envelope goes to a peer (`ShardCore::commit_journal`). With `appendfsync
//! always` one flush covers every connection's writes of the turn (group commit): on the
//! ring path an fsync submitted on the shard's ring while the turn's replies wait for it
//! (`net::held_sends`), elsewhere an `fdatasync` right there. With `everysec` a syncer thread fsyncs
//! every journal once a second; with `no` the kernel decides. When the journal has grown
//! enough, or a client asks (SAVE, BGSAVE, BGREWRITEAOF), the shard starts a new segment
//! and the compactor thread folds the old ones into a snapshot (`compact`).
//! docs/DURABILITY.md has the formats and the promises.

pub mod compact;
pub mod dump;
pub(crate) mod files;
mod journal;
pub(crate) mod load;
mod reshard;
mod resolve;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wetask_shards::Shard;

use files::Layout;

use crate::config::Config;
pub use crate::config::Fsync;
pub use journal::{Commit, Journal, SyncedFile};

const MANIFEST: &str = "manifest";
const MANIFEST_MAGIC: &str = "wetask-journal 1";

/// Redis's `save` points: `"<seconds> <changes> …"` (empty: none).
pub fn parse_save_points(text: &str) -> Result<Vec<(u64, u64)>, String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    if !words.len().is_multiple_of(2) {
        return Err("Invalid save parameters".into());
    }
    words
        .chunks(2)
        .map(|pair| match (pair[0].parse(), pair[1].parse()) {
            (Ok(s), Ok(c)) => Ok((s, c)),
            _ => Err("Invalid save parameters".into()),
        })
        .collect()
}

/// Bits of a journal position that hold the byte offset in a segment.
const OFFSET_BITS: u32 = 40;

/// A journal position: segment `gen`, byte `offset` in it, as one number that only grows
/// (WAIT and the replication stream compare them).
pub fn position(gen: u64, offset: u64) -> u64 {
    gen << OFFSET_BITS | offset.min((1 << OFFSET_BITS) - 1)
}

/// (segment, offset) of a [`position`].
pub fn segment_and_offset(position: u64) -> (u64, u64) {
    (position >> OFFSET_BITS, position & ((1 << OFFSET_BITS) - 1))
}

/// One shard's compaction state, shared with the compactor thread.
#[derive(Default)]
pub struct ShardStatus {
    pub compacting: AtomicBool,
    /// Set by the compactor when a job ends; the shard takes it (`Journal::maybe_compact`).
    pub finished: AtomicBool,
    pub snapshot_gen: AtomicU64,
    pub snapshot_bytes: AtomicU64,
    pub folded_bytes: AtomicU64,
    /// The newest request epoch a finished job answered.
    pub done_epoch: AtomicU64,
    pub started_ms: AtomicU64,
    pub last_ok: AtomicBool,
    /// Where the shard's journal ends (`position`: segment, offset),
    /// published after every write: WAIT waits for replicas to reach it.
    pub position: AtomicU64,
}

/// The data directory, shared by the shards: held locked for the process's life.
pub struct Store {
    pub path: PathBuf,
    pub shard_count: usize,
    retention_ms: u64,
    dead_retention_ms: u64,
    events_max: usize,
    /// `appendfsync`, which CONFIG SET may change (an index into `Fsync::ALL`).
    policy: AtomicUsize,
    load_corrupt: bool,
    load_truncated: bool,
    _lock: File,
    /// Each shard's current journal file, for the everysec syncer.
    syncing: Mutex<Vec<Option<Arc<SyncedFile>>>>,
    /// Set by a shard whose write or fsync failed; cleared when it succeeds again.
    failing: AtomicBool,
    last_error: Mutex<Option<String>>,
    /// Unix seconds of the last successful fsync.
    pub last_sync_s: AtomicU64,
    /// The everysec syncer's rounds begun and ended: a round begun after a write was
    /// journaled has it on disk once it ends (WAITAOF).
    pub sync_rounds_begun: AtomicU64,
    pub sync_rounds_ended: AtomicU64,
    pub shards: Vec<ShardStatus>,
    jobs: Mutex<std::sync::mpsc::Sender<compact::Job>>,
    /// Bumped by SAVE, BGSAVE and BGREWRITEAOF: every shard compacts once more.
    pub compact_epoch: AtomicU64,
    /// Unix seconds of the last snapshot written (LASTSAVE), and how many were.
    pub lastsave_s: AtomicU64,
    pub snapshots_written: AtomicU64,
    /// `auto-aof-rewrite-percentage`, `auto-aof-rewrite-min-size`, `save`.
    pub auto_rewrite_percentage: AtomicU64,
    pub auto_rewrite_min_size: AtomicU64,
    pub save_points: Mutex<Vec<(u64, u64)>>,
    started_ms: u64,
    /// Where the shards publish their last commits at a start, for the cross-shard parts
    /// left open.
    rendezvous: resolve::Rendezvous,
}

impl Store {
    /// The layout this process writes: its shard count, by slot ranges.
    pub fn layout(&self) -> Layout {
        Layout::of(self.shard_count)
    }
}

/// Opens (creating) the data directory for `shard_count` shards, locks it, checks its
/// manifest (moving the data to the new layout when the shard count changed), and starts
/// the syncer and compactor threads. `None` when `appendonly no`.
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
    let (jobs, receiver) = compact::channel();
    let now = crate::clock::unix_ms();
    let store = Arc::new(Store {
        path: path.clone(),
        shard_count,
        retention_ms: config.task_retention_ms,
        dead_retention_ms: config.task_dead_retention_ms,
        events_max: config.task_events_max,
        policy: AtomicUsize::new(config.appendfsync as usize),
        load_corrupt: config.aof_load_corrupt,
        load_truncated: config.aof_load_truncated,
        _lock: lock,
        syncing: Mutex::new(vec![None; shard_count]),
        failing: AtomicBool::new(false),
        last_error: Mutex::new(None),
        last_sync_s: AtomicU64::new(now / 1000),
        sync_rounds_begun: AtomicU64::new(0),
        sync_rounds_ended: AtomicU64::new(0),
        shards: (0..shard_count).map(|_| ShardStatus::default()).collect(),
        jobs: Mutex::new(jobs),
        compact_epoch: AtomicU64::new(0),
        lastsave_s: AtomicU64::new(now / 1000),
        snapshots_written: AtomicU64::new(0),
        auto_rewrite_percentage: AtomicU64::new(config.auto_aof_rewrite_percentage),
        auto_rewrite_min_size: AtomicU64::new(config.auto_aof_rewrite_min_size),
        save_points: Mutex::new(parse_save_points(&config.save)?),
        started_ms: now,
        rendezvous: resolve::Rendezvous::new(shard_count),
    });
    take_up_layout(&store)?;
    spawn_syncer(store.clone())?;
    compact::spawn(store.clone(), receiver)?;
    Ok(Some(store))
}

/// Reads the manifest and, when the data was written in another layout (another shard count,
/// or slot mod n), moves it to this one (`reshard`); the rewritten manifest is the moment
/// the new layout takes over. A new directory gets a manifest.
fn take_up_layout(store: &Store) -> Result<(), String> {
    let path = &store.path;
    let manifest = path.join(MANIFEST);
    let layout = store.layout();
    match std::fs::read_to_string(&manifest) {
        Ok(text) => {
            let old = parse_manifest(&text)
                .ok_or_else(|| format!("{} is not a wetask manifest", manifest.display()))?;
            if old != layout {
                reshard::remove_other_layouts(path, old)?;
                reshard::run(store, old)?;
                write_manifest(path, layout)?;
                reshard::remove_layout(path, old)?;
            }
            reshard::remove_other_layouts(path, layout)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => write_manifest(path, layout),
        Err(e) => Err(format!("cannot read {}: {e}", manifest.display())),
    }
}

/// The layout a manifest names: `shards <n>`, and `slots ranges` since the layout by slot
/// ranges (a manifest without it was written with slot mod n).
fn parse_manifest(text: &str) -> Option<Layout> {
    let mut lines = text.lines();
    if lines.next()? != MANIFEST_MAGIC {
        return None;
    }
    let lines: Vec<&str> = lines.collect();
    let shards = lines
        .iter()
        .find_map(|l| l.strip_prefix("shards ")?.trim().parse().ok())?;
    let ranges = lines.iter().any(|l| l.trim() == "slots ranges");
    Some(Layout { shards, ranges })
}

/// Writes the manifest through a temporary file, a rename and a directory fsync: the
/// moment a new layout takes over.
fn write_manifest(dir: &Path, layout: Layout) -> Result<(), String> {
    let tmp = dir.join(format!("{MANIFEST}.tmp"));
    let slots = if layout.ranges { "slots ranges\n" } else { "" };
    let shards = layout.shards;
    let write = || -> std::io::Result<()> {
        let mut file = File::create(&tmp)?;
        file.write_all(format!("{MANIFEST_MAGIC}\nshards {shards}\n{slots}").as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, dir.join(MANIFEST))?;
        files::sync_dir(dir)
    };
    write().map_err(|e| format!("cannot write {}/{MANIFEST}: {e}", dir.display()))
}

/// The everysec syncer: once a second, fdatasync every journal written since the last
/// round (idle under the other policies, which CONFIG SET may change).
fn spawn_syncer(store: Arc<Store>) -> Result<(), String> {
    std::thread::Builder::new()
        .name("wetask-fsync".into())
        .spawn(move || loop {
            let started = Instant::now();
            store.sync_rounds_begun.fetch_add(1, Ordering::AcqRel);
            let files: Vec<Arc<SyncedFile>> = match store.policy() {
                Fsync::Everysec => store
                    .syncing
                    .lock()
                    .expect("syncing")
                    .iter()
                    .flatten()
                    .cloned()
                    .collect(),
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
            store.sync_rounds_ended.fetch_add(1, Ordering::AcqRel);
            std::thread::sleep(Duration::from_secs(1).saturating_sub(started.elapsed()));
        })
        .map(drop)
        .map_err(|e| format!("cannot start the fsync thread: {e}"))
}

impl Store {
    /// A shard that failed before its `recover`: the others stop waiting for it.
    pub fn abandon_recovery(&self) {
        self.rendezvous.abandon();
    }

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

    /// True when everything journaled before the call that returned `begun` is on disk:
    /// `begun` is [`Store::sync_round_begun`]'s answer. Under `always` every write is synced
    /// before its reply; under `no` nothing ever is (as Redis's WAITAOF sees it).
    pub fn synced_since(&self, begun: u64) -> bool {
        match self.policy() {
            Fsync::Always => true,
            Fsync::Everysec => {
                self.sync_rounds_ended.load(Ordering::Acquire) > begun || self.nothing_unsynced()
            }
            Fsync::No => false,
        }
    }

    /// No journal has writes not yet on disk (everysec): none that the syncer has not
    /// taken up, and no round of it under way.
    fn nothing_unsynced(&self) -> bool {
        let begun = self.sync_rounds_begun.load(Ordering::Acquire);
        if begun != self.sync_rounds_ended.load(Ordering::Acquire) {
            return false;
        }
        let clean = {
            let files = self.syncing.lock().expect("syncing");
            files
                .iter()
                .flatten()
                .all(|f| !f.dirty.load(Ordering::Acquire))
        };
        // A round that began meanwhile may have cleared a flag before its fsync ended.
        clean && self.sync_rounds_begun.load(Ordering::Acquire) == begun
    }

    /// The syncer's round count now, for [`Store::synced_since`].
    pub fn sync_round_begun(&self) -> u64 {
        self.sync_rounds_begun.load(Ordering::Acquire)
    }

    fn synced(&self) {
        self.last_sync_s
            .store(crate::clock::unix_ms() / 1000, Ordering::Relaxed);
    }

    fn recovered(&self) {
        if self.failing.swap(false, Ordering::AcqRel) {
            tracing::info!("journal: writes succeed again");
        }
    }

    fn snapshot_written(&self) {
        self.lastsave_s
            .store(crate::clock::unix_ms() / 1000, Ordering::Release);
        self.snapshots_written.fetch_add(1, Ordering::AcqRel);
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

    /// A shard as a start or the compactor builds it: empty, with the configured retention.
    fn scratch_shard(&self, id: usize) -> Shard {
        let mut shard = Shard::new(id);
        shard.tasks = wetask_shards::tasks::Engine::new(self.retention_ms)
            .with_dead_retention(self.dead_retention_ms)
            .with_events_max(self.events_max);
        shard
    }

    fn submit(&self, job: compact::Job) {
        if self.jobs.lock().expect("jobs").send(job).is_err() {
            tracing::error!("the compactor thread is gone");
        }
    }

    /// Whether a shard whose journal since its snapshot is `size` bytes, with `changes`
    /// records since its last compaction began, should compact now.
    fn compaction_due(&self, size: u64, status: &ShardStatus, changes: u64, now_ms: u64) -> bool {
        let percentage = self.auto_rewrite_percentage.load(Ordering::Relaxed);
        let min_size = self.auto_rewrite_min_size.load(Ordering::Relaxed);
        let base = status.snapshot_bytes.load(Ordering::Relaxed);
        if percentage > 0
            && size >= min_size
            && (base == 0 || size.saturating_mul(100) >= base.saturating_mul(percentage))
        {
            return true;
        }
        let since = now_ms.saturating_sub(
            status
                .started_ms
                .load(Ordering::Relaxed)
                .max(self.started_ms),
        );
        self.save_points
            .lock()
            .expect("save points")
            .iter()
            .any(|&(seconds, min_changes)| {
                changes >= min_changes.max(1) && since >= seconds.saturating_mul(1000)
            })
    }

    /// Asks every shard for one more compaction; returns the epoch to wait for.
    pub fn request_compaction(&self) -> u64 {
        self.compact_epoch.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Whether every shard finished a compaction answering `epoch`, and whether all
    /// succeeded.
    pub fn compaction_done(&self, epoch: u64) -> Option<bool> {
        self.shards
            .iter()
            .all(|s| s.done_epoch.load(Ordering::Acquire) >= epoch)
            .then(|| {
                self.shards
                    .iter()
                    .all(|s| s.last_ok.load(Ordering::Acquire))
            })
    }

    /// Whether a compaction runs, or was asked for and not done yet.
    pub fn compacting(&self) -> bool {
        let asked = self.compact_epoch.load(Ordering::Acquire);
        self.shards.iter().any(|s| {
            s.compacting.load(Ordering::Acquire) || s.done_epoch.load(Ordering::Acquire) < asked
        })
    }

    pub fn snapshot_bytes(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.snapshot_bytes.load(Ordering::Relaxed))
            .sum()
    }
}

/// Loads shard `id`, publishes its last commits for the others (even when the load failed,
/// so that none waits for ever), and resolves the cross-shard part a crash left open, if
/// any, which waits for its coordinator's commits.
fn load_and_resolve(
    store: &Store,
    id: usize,
    shard: &mut Shard,
    repair: load::Repair,
) -> Result<load::Loaded, String> {
    let loaded = load::load_shard(&store.path, id, store.layout(), shard, repair);
    store
        .rendezvous
        .publish(id, loaded.as_ref().ok().map(|_| shard.last_commits()));
    let mut loaded = loaded?;
    if let Some(part) = loaded.open.take() {
        let coordinator = part.coordinator();
        let commits = match coordinator == id {
            true => Some(shard.last_commits()),
            false => store.rendezvous.commits_of(coordinator),
        };
        if commits.is_none() && coordinator < store.shard_count {
            return Err("another shard failed to load its data".into());
        }
        resolve::resolve(part, id, commits.as_ref(), shard)?;
    }
    Ok(loaded)
}

/// What recovery found, for the start-up log line.
#[derive(Debug, Default)]
pub struct Recovered {
    pub snapshot: Option<u64>,
    pub snapshot_bytes: u64,
    pub segments: usize,
    pub records: usize,
    pub operations: usize,
    pub bytes: u64,
    pub leases_released: usize,
}

/// Loads shard `id` from its snapshot and journal into `shard` and opens its journal for
/// appending. Every shard of the process must call it (a shard with an open cross-shard
/// part waits for its coordinator's load; `Store::abandon_recovery` when a shard cannot). A torn tail is cut off (logged); damage elsewhere stops the start, unless
/// `aof-load-corrupt yes`, which keeps a copy of the file and loads what precedes it.
pub fn recover(
    store: &Arc<Store>,
    id: usize,
    count: usize,
    shard: &mut Shard,
) -> Result<(Journal, Recovered), String> {
    debug_assert_eq!(count, store.shard_count);
    let dir = &store.path;
    let repair = load::Repair {
        truncated: store.load_truncated,
        corrupt: store.load_corrupt,
        write: true,
    };
    let loaded = load_and_resolve(store, id, shard, repair)?;
    files::remove_stale(dir, id, store.layout())
        .map_err(|e| format!("cannot tidy {}: {e}", dir.display()))?;
    let leases_released = shard.finish_replay(crate::clock::unix_ms(), true);
    let (gen, end) = match loaded.journals.last() {
        Some(&gen) => (gen, loaded.last_len),
        None => (loaded.snapshot.unwrap_or(1), 0),
    };
    let file = Journal::open_segment(store, id, gen)?;
    files::sync_dir(dir).map_err(|e| format!("cannot sync {}: {e}", dir.display()))?;
    let file = Arc::new(SyncedFile {
        file,
        dirty: AtomicBool::new(false),
    });
    store.syncing.lock().expect("syncing")[id] = Some(file.clone());
    let status = &store.shards[id];
    status
        .snapshot_gen
        .store(loaded.snapshot.unwrap_or(0), Ordering::Release);
    status
        .snapshot_bytes
        .store(loaded.snapshot_bytes, Ordering::Release);
    let mut journal = Journal {
        store: store.clone(),
        id,
        file,
        gen,
        end,
        snapshot: loaded.snapshot,
        earlier_bytes: loaded.journal_bytes - loaded.last_len,
        pending: Vec::new(),
        records: 0,
        changes: 0,
        allocated: end,
        written: 0,
        durable: 0,
        ring_sync: false,
    };
    journal.publish_position();
    // What `finish_replay` logged (the released leases) goes down before anything else.
    journal.commit(shard, Commit::Now);
    let recovered = Recovered {
        snapshot: loaded.snapshot,
        snapshot_bytes: loaded.snapshot_bytes,
        segments: loaded.journals.len(),
        records: loaded.records,
        operations: loaded.operations,
        bytes: loaded.journal_bytes,
        leases_released,
    };
    Ok((journal, recovered))
}
