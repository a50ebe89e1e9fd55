//! Snapshots without the journal (`appendonly no`), as Redis's RDB persistence: SAVE,
//! BGSAVE, the `save` points and SHUTDOWN SAVE write each shard's whole state as one
//! snapshot file under `<dir>/dump/` (`shard-<i>-of-<n>.snapshot`, the journal's snapshot
//! format), and a start with `appendonly no` loads them. Nothing is written per command.
//!
//! A save holds every shard (the cross-shard lock, so no cross-shard operation is half
//! done: one consistent cut, as Redis's fork gives), each shard copies its state into
//! memory in one go on its own thread (its stop-the-world moment), and the writer thread
//! puts it on disk: a temporary file, synced, renamed over the last one. A start with another shard count loads every
//! old file and keeps what it owns now; the old files go once every shard has saved in the
//! new layout. docs/DURABILITY.md says what this keeps and when.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};

use wetask_shards::keyspace::{ScanFilter, DATABASES};
use wetask_shards::{shard_of, Shard};

use super::files::Layout;
use super::load;

/// The snapshots' folder under `dir`.
const DUMP_DIR: &str = "dump";

/// One shard's copied state, on its way to the disk.
struct Job {
    id: usize,
    parts: Vec<Vec<u8>>,
    epoch: u64,
}

/// The state of `appendonly no` persistence, shared by the shards and the writer thread.
pub struct Dumps {
    dir: PathBuf,
    shard_count: usize,
    retention: (u64, u64, usize),
    /// Save points (`save`): (seconds, changes).
    pub save_points: Mutex<Vec<(u64, u64)>>,
    /// Saves asked for (SAVE, BGSAVE, a save point); each shard answers each.
    requested: AtomicU64,
    /// A save point's save is on its way.
    scheduled: AtomicBool,
    /// Per shard: the last request its snapshot answered, whether that write failed,
    /// whether one is being written, and its changes since it last saved.
    done: Vec<AtomicU64>,
    failed: Vec<AtomicBool>,
    saving: Vec<AtomicBool>,
    saved_here: Vec<AtomicBool>,
    changes: Vec<AtomicU64>,
    /// Unix seconds of the last complete save (LASTSAVE), how many, and when (ms).
    pub lastsave_s: AtomicU64,
    pub saves: AtomicU64,
    last_save_ms: AtomicU64,
    jobs: Mutex<Sender<Job>>,
}

/// Starts `appendonly no` persistence (the writer thread); `None` with `appendonly yes`.
pub fn open(
    config: &crate::config::Config,
    shard_count: usize,
) -> Result<Option<Arc<Dumps>>, String> {
    if config.appendonly {
        return Ok(None);
    }
    let now = crate::clock::unix_ms();
    let (sender, receiver) = std::sync::mpsc::channel();
    let dumps = Arc::new(Dumps {
        dir: Path::new(&config.dir).join(DUMP_DIR),
        shard_count,
        retention: (
            config.task_retention_ms,
            config.task_dead_retention_ms,
            config.task_events_max,
        ),
        save_points: Mutex::new(super::parse_save_points(&config.save)?),
        requested: AtomicU64::new(0),
        scheduled: AtomicBool::new(false),
        done: (0..shard_count).map(|_| AtomicU64::new(0)).collect(),
        failed: (0..shard_count).map(|_| AtomicBool::new(false)).collect(),
        saving: (0..shard_count).map(|_| AtomicBool::new(false)).collect(),
        saved_here: (0..shard_count).map(|_| AtomicBool::new(false)).collect(),
        changes: (0..shard_count).map(|_| AtomicU64::new(0)).collect(),
        lastsave_s: AtomicU64::new(now / 1000),
        saves: AtomicU64::new(0),
        last_save_ms: AtomicU64::new(now),
        jobs: Mutex::new(sender),
    });
    let writer = dumps.clone();
    std::thread::Builder::new()
        .name("wetask-dump".into())
        .spawn(move || writer.write_jobs(receiver))
        .map_err(|e| format!("cannot start the snapshot thread: {e}"))?;
    Ok(Some(dumps))
}

fn file_name(id: usize, layout: Layout) -> String {
    format!("shard-{id}-of-{layout}.snapshot")
}

impl Dumps {
    fn path(&self, id: usize, layout: Layout) -> PathBuf {
        self.dir.join(file_name(id, layout))
    }

    /// The layout this process writes (`files::Layout`).
    fn layout(&self) -> Layout {
        Layout::of(self.shard_count)
    }

    /// Asks every shard for a snapshot; returns the request to wait for.
    pub fn request(&self) -> u64 {
        self.requested.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Whether every shard answered `epoch` (and whether all succeeded); `None` while not.
    pub fn done(&self, epoch: u64) -> Option<bool> {
        if self.done.iter().any(|d| d.load(Ordering::Acquire) < epoch) {
            return None;
        }
        Some(!self.failed.iter().any(|f| f.load(Ordering::Acquire)))
    }

    /// A snapshot is being taken or written somewhere.
    pub fn in_progress(&self) -> bool {
        let asked = self.requested.load(Ordering::Acquire);
        self.done.iter().any(|d| d.load(Ordering::Acquire) < asked)
            || self.saving.iter().any(|s| s.load(Ordering::Acquire))
    }

    /// Writes since the last save, over every shard (`rdb_changes_since_last_save`).
    pub fn changes(&self) -> u64 {
        self.changes.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// The last save's outcome (`rdb_last_bgsave_status`).
    pub fn last_ok(&self) -> bool {
        !self.failed.iter().any(|f| f.load(Ordering::Acquire))
    }

    /// Called by shard `id` every few milliseconds: publishes its changes since its last
    /// save (`writes` now less `writes_at_save`); true when shard 0 finds a save point
    /// reached and no save under way (the caller then takes one: `commands::persistence`).
    pub fn note_changes(&self, id: usize, writes: u64, writes_at_save: u64, now_ms: u64) -> bool {
        self.changes[id].store(writes.saturating_sub(writes_at_save), Ordering::Relaxed);
        id == 0 && !self.in_progress() && !self.scheduled.swap(true, Ordering::AcqRel) && {
            let due = self.save_point_reached(now_ms);
            if !due {
                self.scheduled.store(false, Ordering::Release);
            }
            due
        }
    }

    /// A save point's save is over (taken or not): the next may be scheduled.
    pub fn unschedule(&self) {
        self.scheduled.store(false, Ordering::Release);
    }

    /// Shard `id` copies its state for snapshot `epoch` (every shard does, while a save holds
    /// them all: one consistent cut) and hands it to the writer thread. Returns the shard's
    /// write count at the copy.
    pub fn take(&self, id: usize, shard: &mut Shard, epoch: u64) -> u64 {
        let started = std::time::Instant::now();
        let mut parts = Vec::new();
        shard.export_snapshot(&mut |part| parts.push(part.to_vec()));
        tracing::info!(
            shard = id,
            bytes = parts.iter().map(Vec::len).sum::<usize>(),
            ms = started.elapsed().as_millis() as u64,
            "state copied for a snapshot"
        );
        self.saving[id].store(true, Ordering::Release);
        self.changes[id].store(0, Ordering::Relaxed);
        if self
            .jobs
            .lock()
            .expect("jobs")
            .send(Job { id, parts, epoch })
            .is_err()
        {
            tracing::error!("the snapshot thread is gone");
            self.failed[id].store(true, Ordering::Release);
            self.done[id].fetch_max(epoch, Ordering::AcqRel);
            self.saving[id].store(false, Ordering::Release);
        }
        shard.writes()
    }

    /// At a clean exit (SHUTDOWN without NOSAVE, SIGTERM) with save points configured, as
    /// Redis saves then: shard `id` writes its snapshot itself, if it changed since its last.
    pub fn save_at_exit(&self, id: usize, shard: &mut Shard, writes_at_save: u64) {
        let wanted = !self.save_points.lock().expect("save points").is_empty();
        if !wanted || shard.writes() == writes_at_save {
            return;
        }
        let mut parts = Vec::new();
        shard.export_snapshot(&mut |part| parts.push(part.to_vec()));
        let job = Job {
            id,
            parts,
            epoch: 0,
        };
        let result = std::fs::create_dir_all(&self.dir)
            .map_err(|e| format!("cannot create {}: {e}", self.dir.display()))
            .and_then(|()| self.write(&job));
        match result {
            Ok(bytes) => tracing::info!(shard = id, bytes, "snapshot written at exit"),
            Err(e) => tracing::error!(shard = id, "snapshot at exit failed: {e}"),
        }
    }

    fn save_point_reached(&self, now_ms: u64) -> bool {
        let since_ms = now_ms.saturating_sub(self.last_save_ms.load(Ordering::Relaxed));
        let changes = self.changes();
        self.save_points
            .lock()
            .expect("save points")
            .iter()
            .any(|&(seconds, min)| {
                changes >= min.max(1) && since_ms >= seconds.saturating_mul(1000)
            })
    }

    /// The writer thread: each shard's copied state to its file.
    fn write_jobs(&self, jobs: Receiver<Job>) {
        for job in jobs {
            let result = std::fs::create_dir_all(&self.dir)
                .map_err(|e| format!("cannot create {}: {e}", self.dir.display()))
                .and_then(|()| self.write(&job));
            match result {
                Ok(bytes) => {
                    tracing::info!(shard = job.id, bytes, "snapshot written");
                    self.failed[job.id].store(false, Ordering::Release);
                    self.saved_here[job.id].store(true, Ordering::Release);
                }
                Err(e) => {
                    tracing::error!(shard = job.id, "snapshot failed: {e}");
                    self.failed[job.id].store(true, Ordering::Release);
                }
            }
            self.done[job.id].fetch_max(job.epoch, Ordering::AcqRel);
            self.saving[job.id].store(false, Ordering::Release);
            if self.done(job.epoch) == Some(true) {
                let now = crate::clock::unix_ms();
                self.last_save_ms.store(now, Ordering::Relaxed);
                self.lastsave_s.store(now / 1000, Ordering::Release);
                self.saves.fetch_add(1, Ordering::AcqRel);
                self.remove_other_layouts();
            }
        }
    }

    fn write(&self, job: &Job) -> Result<u64, String> {
        let path = self.path(job.id, self.layout());
        let header = load::snapshot_header(job.id, self.layout(), 1);
        load::write_framed(&self.dir, &path, &header, &mut |part| {
            job.parts.iter().for_each(|p| part(p))
        })
    }

    /// Once every shard has saved in this layout, the files of another layout go.
    fn remove_other_layouts(&self) {
        if !self.saved_here.iter().all(|s| s.load(Ordering::Acquire)) {
            return;
        }
        for (layout, _) in self.layouts() {
            if layout != self.layout() {
                for id in 0..layout.shards {
                    let _ = std::fs::remove_file(self.path(id, layout));
                }
            }
        }
    }

    /// The layouts with a complete set of snapshot files, newest first.
    fn layouts(&self) -> Vec<(Layout, std::time::SystemTime)> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut layouts: Vec<Layout> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let rest = name.strip_prefix("shard-")?.strip_suffix(".snapshot")?;
                Layout::parse(rest.split_once("-of-")?.1)
            })
            .collect();
        layouts.sort_unstable();
        layouts.dedup();
        let mut complete: Vec<(Layout, std::time::SystemTime)> = layouts
            .into_iter()
            .filter_map(|layout| {
                let times: Option<Vec<_>> = (0..layout.shards)
                    .map(|id| {
                        std::fs::metadata(self.path(id, layout))
                            .and_then(|m| m.modified())
                            .ok()
                    })
                    .collect();
                Some((layout, times?.into_iter().max()?))
            })
            .collect();
        complete.sort_by_key(|&(_, modified)| std::cmp::Reverse(modified));
        complete
    }

    /// Loads shard `id`'s state at a start: its own file when the newest complete set of
    /// files is of this shard count, else what it owns of every file of that set. Returns
    /// the keys loaded, `None` when there is nothing to load.
    pub fn load(&self, id: usize, shard: &mut Shard) -> Result<Option<usize>, String> {
        let Some(&(layout, _)) = self.layouts().first() else {
            return Ok(None);
        };
        if layout == self.layout() {
            load::read_snapshot(&self.path(id, layout), shard)?;
            return Ok(Some(key_count(shard)));
        }
        tracing::info!(
            shard = id,
            from = %layout,
            to = self.shard_count,
            "snapshots of another layout: keeping this shard's part"
        );
        let (retention_ms, dead_ms, events) = self.retention;
        for old in 0..layout.shards {
            let mut source = Shard::new(old);
            source.tasks = wetask_shards::tasks::Engine::new(retention_ms)
                .with_dead_retention(dead_ms)
                .with_events_max(events);
            load::read_snapshot(&self.path(old, layout), &mut source)?;
            for db in 0..DATABASES {
                let (_, names) = source.scan(db, 0, usize::MAX >> 1, &ScanFilter::default());
                for key in names {
                    if shard_of(&key, self.shard_count) == id {
                        if let Some(entry) = source.take_entry(db, &key) {
                            shard.db(db).insert(&key, entry);
                        }
                    }
                }
            }
            let owns = |queue: &[u8]| shard_of(queue, self.shard_count) == id;
            shard
                .tasks
                .absorb(&mut source.tasks, &owns, id == old % self.shard_count);
            if shard.now_ms() < source.now_ms() {
                shard.set_clock(source.now_ms());
            }
        }
        Ok(Some(key_count(shard)))
    }
}

fn key_count(shard: &mut Shard) -> usize {
    (0..DATABASES).map(|db| shard.db(db).len()).sum()
}
