//! CLIENT PAUSE and UNPAUSE: for a while, every client command (ALL) or every command that
//! writes or may replicate (WRITE) waits instead of running, as in Redis 7. The state is
//! process-wide (atomics in `Globals`); each shard parks its waiting commands and wakes
//! them when the pause ends or changes (`ShardCtx::tick`, at least every cron period).
//! Checked once per command by one relaxed load while no pause is on.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use bytes::Bytes;
#[cfg(test)]
use wetask_shards::lookup;
use wetask_shards::request::Request;
use wetask_shards::table::{flag, CommandSpec};

/// On a cache line of its own: every command reads `end_ms`, so no hot counter may share
/// its line.
#[derive(Default)]
#[repr(align(64))]
pub struct Pause {
    /// Unix ms the pause lasts until; 0 when none.
    end_ms: AtomicU64,
    /// ALL (every command) rather than WRITE.
    all: AtomicBool,
    /// Bumped by every PAUSE and UNPAUSE: parked commands look again.
    generation: AtomicU64,
}

impl Pause {
    /// Whether a pause may be on (the hot path's one test).
    #[inline]
    pub fn active(&self) -> bool {
        self.end_ms.load(Relaxed) != 0
    }

    /// CLIENT PAUSE: the new mode replaces the old one; the end is the later of the two,
    /// as Redis keeps it.
    pub fn pause(&self, end_ms: u64, all: bool) {
        self.all.store(all, Relaxed);
        self.end_ms.fetch_max(end_ms.max(1), Relaxed);
        self.generation.fetch_add(1, Relaxed);
    }

    pub fn unpause(&self) {
        self.end_ms.store(0, Relaxed);
        self.all.store(false, Relaxed);
        self.generation.fetch_add(1, Relaxed);
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Relaxed)
    }

    /// Whether the pause is over at `now_ms` (clearing it then).
    pub fn over(&self, now_ms: u64) -> bool {
        let end = self.end_ms.load(Relaxed);
        if end != 0 && now_ms >= end {
            let _ = self.end_ms.compare_exchange(end, 0, Relaxed, Relaxed);
            return true;
        }
        end == 0
    }

    /// Whether command `spec` (`args`; `queued`: a MULTI's commands, for EXEC) must wait.
    pub fn holds(
        &self,
        spec: &CommandSpec,
        args: &[Bytes],
        queued: Option<&dyn Queued>,
        now_ms: u64,
    ) -> bool {
        if self.over(now_ms) {
            return false;
        }
        self.all.load(Relaxed) || may_replicate(spec, args, queued)
    }
}

/// Redis's "write or may-replicate" commands, which a WRITE pause holds: the writes, the
/// scripts that may write, PUBLISH, PFCOUNT (it may rewrite its sketch), and an EXEC with
/// any of those queued.
fn may_replicate(spec: &CommandSpec, args: &[Bytes], queued: Option<&dyn Queued>) -> bool {
    if spec.has(flag::WRITE) {
        return true;
    }
    match spec.name {
        "eval" | "evalsha" | "fcall" | "publish" | "spublish" | "pfcount" => true,
        "exec" => queued.is_some_and(|queued| queued.any_may_replicate()),
        "script" | "function" => args.get(1).is_some_and(|sub| {
            ["flush", "load", "delete", "restore"]
                .iter()
                .any(|w| sub.eq_ignore_ascii_case(w.as_bytes()))
        }),
        _ => false,
    }
}

/// The commands a MULTI queued, as a pause reads them.
pub trait Queued {
    /// True when any of them is one a WRITE pause holds.
    fn any_may_replicate(&self) -> bool;
}

impl Queued for Vec<Request> {
    fn any_may_replicate(&self) -> bool {
        self.iter().any(|command| {
            command
                .spec()
                .is_some_and(|spec| may_replicate(spec, &command.args, None))
        })
    }
}

/// Argument lists, looked up here (the tests' shape).
#[cfg(test)]
impl Queued for Vec<Vec<Bytes>> {
    fn any_may_replicate(&self) -> bool {
        self.iter().any(|command| {
            lookup(&command[0]).is_some_and(|spec| may_replicate(spec, command, None))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<Bytes> {
        line.split(' ')
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect()
    }

    fn holds(p: &Pause, line: &str, now: u64) -> bool {
        let a = args(line);
        p.holds(lookup(&a[0]).unwrap(), &a, None, now)
    }

    #[test]
    fn write_pauses_hold_writes_and_all_pauses_hold_everything_until_the_end() {
        let p = Pause::default();
        assert!(!p.active() && !holds(&p, "SET k v", 0));
        p.pause(1_000, false);
        assert!(holds(&p, "SET k v", 10));
        assert!(holds(&p, "PUBLISH c m", 10));
        assert!(holds(&p, "EVAL x 0", 10));
        assert!(!holds(&p, "GET k", 10));
        assert!(!holds(&p, "EVAL_RO x 0", 10));
        let queued = vec![args("GET k"), args("INCR k")];
        let exec = args("EXEC");
        assert!(p.holds(lookup(b"exec").unwrap(), &exec, Some(&queued), 10));
        // A shorter pause keeps the later end; its mode replaces the old one.
        p.pause(500, true);
        assert!(holds(&p, "GET k", 900));
        assert!(!holds(&p, "GET k", 1_000), "over at its end");
        assert!(!p.active());
        p.pause(5_000, true);
        p.unpause();
        assert!(!holds(&p, "SET k v", 10));
    }
}
