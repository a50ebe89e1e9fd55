//! A thread that rouses a shard which has work but sleeps: the safety net for a lost
//! wake-up in glommio 0.9's executor loop.
//!
//! The loop parks when `run_task_queues` reports that nothing ran, and it reports that
//! whenever the preemption timer (`NET_LATENCY`) has already fired when it starts, runnable tasks
//! or not (`need_preempt()` is checked before the first queue runs). A thread descheduled
//! for that long between arming that timer and running the queues (any busy machine)
//! then sleeps with its network loop runnable; and a task that is runnable has no timer
//! armed, so if the cron is one of them, nothing but I/O wakes the shard
//! (docs/ARCHITECTURE.md, "Lost wake-ups"). Test servers were seen asleep for 10 s that way.
//!
//! Each shard publishes two beats: its network loop's last turn (0 while it sleeps in its
//! ring, where a completion or its doorbell will wake it) and its cron's last tick. Every
//! 10 ms the watchdog rouses a shard whose loop is not parked, has not turned for [`LOOP_STALL_MS`]
//! and whose thread is asleep (a running one is busy with a long turn: left alone), or
//! whose cron has not ticked for [`CRON_STALL_MS`]: it wakes the
//! loop's task from this thread (glommio's cross-thread wake-up, which always reaches a
//! sleeping executor) and rings the shard's doorbell (which ends a sleep in its ring). A
//! long script shows as a silent cron; rousing it is harmless. It costs a thread waking 100 times a second, one atomic store per turn,
//! and a read of the thread's state in /proc while a turn is overdue.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::doorbell::Doorbell;

/// How often the watchdog looks.
pub const PERIOD: Duration = Duration::from_millis(10);
/// How long a network loop that is not parked may go without a turn before it is roused.
pub const LOOP_STALL_MS: u64 = 25;
/// How long a shard's cron may go without a tick before the shard is roused.
pub const CRON_STALL_MS: u64 = 500;

/// What a shard publishes for the watchdog (unix ms).
#[derive(Default)]
pub struct Beats {
    /// The cron's last tick.
    pub cron: AtomicU64,
    /// The network loop's last turn; 0 while it sleeps in its ring (or there is no loop).
    pub turn: AtomicU64,
    /// The network loop task's waker. Woken from this thread it goes through glommio's
    /// cross-thread path, whose eventfd read glommio keeps armed whenever it sleeps: the
    /// one wake-up that always reaches an executor asleep with work, however often it
    /// falls asleep that way again (the doorbell's read is on the loop's own ring).
    pub loop_waker: Mutex<Option<std::task::Waker>>,
    /// The shard's executor has finished (after shutdown): nothing left to rouse.
    pub exited: std::sync::atomic::AtomicBool,
}

impl Beats {
    pub fn new(now_ms: u64) -> Self {
        Beats {
            // Beating from birth: a shard that stalls before its first cron tick (seen in
            // CI, a request sent within 100 ms of start) is roused like any other.
            cron: AtomicU64::new(now_ms),
            turn: AtomicU64::new(0),
            loop_waker: Mutex::new(None),
            exited: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

struct Watched {
    shard: usize,
    beats: Arc<Beats>,
    tid: libc::pid_t,
}

/// Why a shard was roused, for the log.
pub struct Rouse {
    pub shard: usize,
    pub what: &'static str,
    pub stalled_ms: u64,
    /// The shard thread's state when found: "S io_cqring_wait" is a lost wake-up.
    pub thread: String,
}

/// Every shard's doorbell and beats.
pub struct Watchdog {
    doorbells: Arc<[Doorbell]>,
    shards: Mutex<Vec<Watched>>,
    /// Rouses so far (INFO: watchdog_rouses).
    pub rouses: AtomicU64,
}

impl Watchdog {
    pub fn new(doorbells: Arc<[Doorbell]>) -> Self {
        Watchdog {
            doorbells,
            shards: Mutex::new(Vec::new()),
            rouses: AtomicU64::new(0),
        }
    }

    /// Registers shard `shard`'s beats; called on the shard's own thread.
    pub fn register(&self, shard: usize, beats: Arc<Beats>) {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        self.shards
            .lock()
            .expect("watchdog")
            .push(Watched { shard, beats, tid });
    }

    /// Wakes every shard's network loop through glommio's cross-thread path (shutdown):
    /// that reaches a shard whose executor went to sleep with the loop runnable, which the
    /// doorbell on the loop's own ring cannot.
    pub fn wake_loops(&self) {
        for shard in self.shards.lock().expect("watchdog").iter() {
            if let Some(waker) = shard.beats.loop_waker.lock().expect("waker").as_ref() {
                waker.wake_by_ref();
            }
        }
    }

    /// Every registered shard's executor has finished.
    pub fn all_exited(&self) -> bool {
        self.shards
            .lock()
            .expect("watchdog")
            .iter()
            .all(|shard| shard.beats.exited.load(Ordering::Acquire))
    }

    /// One round: rouses each stalled shard; returns why, for each.
    pub fn round(&self, now_ms: u64) -> Vec<Rouse> {
        let mut roused = Vec::new();
        for shard in self.shards.lock().expect("watchdog").iter() {
            if shard.beats.exited.load(Ordering::Acquire) {
                continue;
            }
            let turn = shard.beats.turn.load(Ordering::Relaxed);
            let cron = shard.beats.cron.load(Ordering::Relaxed);
            let loop_stalled = turn != 0 && now_ms.saturating_sub(turn) > LOOP_STALL_MS;
            let cron_stalled = now_ms.saturating_sub(cron) > CRON_STALL_MS;
            if !loop_stalled && !cron_stalled {
                continue;
            }
            let thread = thread_state(shard.tid);
            // A loop that is running (a long pipelined turn, a script) is left alone: only
            // one asleep with work is the lost wake-up. A silent cron is roused either way.
            let asleep = thread.starts_with('S');
            let stall = if loop_stalled && asleep {
                Some(("network loop", now_ms - turn))
            } else if cron_stalled {
                Some(("cron", now_ms - cron))
            } else {
                None
            };
            if let Some((what, stalled_ms)) = stall {
                self.doorbells[shard.shard].ring();
                if let Some(waker) = shard.beats.loop_waker.lock().expect("waker").as_ref() {
                    waker.wake_by_ref();
                }
                self.rouses.fetch_add(1, Ordering::Relaxed);
                roused.push(Rouse {
                    shard: shard.shard,
                    what,
                    stalled_ms,
                    thread,
                });
            }
        }
        roused
    }
}

/// Runs the watchdog until `stopping` says so and every shard has exited: a shard still
/// draining or on its way out after shutdown can meet glommio's lost wake-up like any other
/// (its loop finished, the executor asleep before running the task that ends the shard).
pub fn spawn(
    watchdog: Arc<Watchdog>,
    stopping: impl Fn() -> bool + Send + 'static,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("wetask-watchdog".into())
        .spawn(move || {
            let mut last_warned: Vec<u64> = Vec::new();
            while !(stopping() && watchdog.all_exited()) {
                std::thread::sleep(PERIOD);
                let now = crate::clock::unix_ms();
                for rouse in watchdog.round(now) {
                    // Worth a line: a shard asleep with work (the lost wake-up), or a cron
                    // silent for long (a script past its time). Not a busy CPU's hiccup.
                    let asleep = rouse.thread.starts_with('S');
                    if !asleep && rouse.what != "cron" {
                        continue;
                    }
                    if last_warned.len() <= rouse.shard {
                        last_warned.resize(rouse.shard + 1, 0);
                    }
                    if now >= last_warned[rouse.shard] + 10_000 {
                        last_warned[rouse.shard] = now;
                        tracing::warn!(
                            shard = rouse.shard,
                            stalled = rouse.what,
                            stalled_ms = rouse.stalled_ms,
                            thread = rouse.thread,
                            "a shard with work went without a turn (a lost wake-up, or a long script); roused it"
                        );
                    }
                }
            }
        })
        .map(|_| ())
}

/// A thread's scheduler state and, when asleep, where in the kernel: "S io_cqring_wait".
fn thread_state(tid: libc::pid_t) -> String {
    let read = |what: &str| std::fs::read_to_string(format!("/proc/self/task/{tid}/{what}"));
    let state = read("stat")
        .ok()
        .and_then(|stat| {
            let after = stat.rsplit_once(") ")?.1;
            after.split_whitespace().next().map(str::to_string)
        })
        .unwrap_or_else(|| "?".into());
    let wchan = read("wchan").unwrap_or_default();
    format!("{state} {wchan}").trim().to_string()
}
