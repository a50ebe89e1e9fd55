//! SLOWLOG: the commands that took longer than `slowlog-log-slower-than` microseconds (10 ms
//! by default; negative: off, 0: every command), newest first, at most `slowlog-max-len`
//! (128) of them, one log for the whole server as in Redis.
//!
//! A command's time runs from its start to its reply, so a command whose keys live on other
//! shards includes its mesh round trips (Redis has no such hop). Commands that may block
//! (BLPOP, XREAD BLOCK, TASK.FETCH … BLOCK, TASK.WAIT) and those that carry secrets (AUTH,
//! HELLO) are never logged, nor are EXEC and MULTI (as in Redis). Recording takes a lock, but
//! only for a command over the threshold. The check itself must be nearly free: it runs for
//! every command, and two `Instant::now()` per command cost 9% of a pipelined SET's CPU and
//! 17% of mixed-p1000's (bench gate). So a command is timed with the CPU's cycle counter
//! (as Redis 7's monotonic clock is, where it has one), converted to microseconds at a rate
//! the shards' crons calibrate against the monotonic clock; elsewhere, `Instant`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::args::is;
use wetask_shards::table::{flag, CommandSpec};

/// Most arguments an entry keeps; the last kept says how many more there were.
const ARGS_MAX: usize = 32;
/// Most bytes of one argument an entry keeps.
const ARG_BYTES_MAX: usize = 128;

const HELP: &[&str] = &[
    "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET [<count>]",
    "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
    "    Entries are made of:",
    "    id, timestamp, time in microseconds, arguments array, client IP and port,",
    "    client name",
    "LEN",
    "    Return the length of the slowlog.",
    "RESET",
    "    Reset the slowlog.",
    "HELP",
    "    Prints this help.",
];

struct Entry {
    id: u64,
    unix_s: i64,
    micros: i64,
    args: Vec<Bytes>,
    addr: Bytes,
    name: Bytes,
}

pub struct SlowLog {
    /// Newest first.
    entries: Mutex<VecDeque<Entry>>,
    next_id: AtomicU64,
    pub slower_than_us: AtomicI64,
    pub max_len: AtomicU64,
    /// Where the counter and the monotonic clock stood together, and the counter's ticks per
    /// microsecond measured since (until the first calibration: a 3 GHz guess).
    origin: (u64, Instant),
    ticks_per_us: AtomicU64,
    /// `latency-monitor-threshold` in ms (0: off): the latency monitor's, mirrored here so
    /// one precomputed bound decides for both.
    pub latency_ms: AtomicU64,
    /// The fewest ticks that SLOWLOG or the latency monitor may want to see (u64::MAX: both
    /// off): every command costs one load and one compare against it.
    notice_ticks: AtomicU64,
}

/// The counter's rate until the first calibration: a 3 GHz guess (nanoseconds elsewhere).
const GUESSED_TICKS_PER_US: u64 = if cfg!(target_arch = "x86_64") {
    3000
} else {
    1000
};

impl Default for SlowLog {
    fn default() -> Self {
        SlowLog {
            entries: Mutex::new(VecDeque::new()),
            next_id: AtomicU64::new(0),
            slower_than_us: AtomicI64::new(10_000),
            max_len: AtomicU64::new(128),
            origin: (ticks(), Instant::now()),
            ticks_per_us: AtomicU64::new(GUESSED_TICKS_PER_US),
            latency_ms: AtomicU64::new(0),
            notice_ticks: AtomicU64::new(10_000 * GUESSED_TICKS_PER_US),
        }
    }
}

/// A timestamp for timing one command: the CPU's cycle counter on x86-64, else nanoseconds of
/// the monotonic clock.
#[inline]
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no preconditions; every x86-64 CPU has it.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// A command that may wait for others (its time is not its own work) or carries a secret.
pub fn never_logged(spec: &CommandSpec, args: &[Bytes]) -> bool {
    spec.has(flag::BLOCKING)
        || matches!(spec.name, "auth" | "hello" | "exec" | "multi" | "task.wait")
        || (matches!(spec.name, "task.fetch" | "task.events")
            && args.iter().any(|a| is(a, "block")))
}

impl SlowLog {
    /// CONFIG SET of `slowlog-log-slower-than` (any integer) or `slowlog-max-len` (not
    /// negative), with Redis's reasons for a bad value.
    pub fn set(&self, name: &str, value: &str) -> Result<(), String> {
        let Ok(n) = value.parse::<i64>() else {
            return Err("argument couldn't be parsed into an integer".into());
        };
        if name == "slowlog-log-slower-than" {
            self.slower_than_us.store(n, Ordering::Relaxed);
        } else if n < 0 {
            return Err("argument must be between 0 and 9223372036854775807 inclusive".into());
        } else {
            self.max_len.store(n as u64, Ordering::Relaxed);
        }
        self.refresh_notice();
        Ok(())
    }

    /// Recomputes the bound [`SlowLog::is_slow`] checks, after a threshold or the rate moved.
    pub fn refresh_notice(&self) {
        let rate = self.ticks_per_us();
        let slow_us = self.slower_than_us.load(Ordering::Relaxed);
        let slow = (slow_us >= 0).then(|| (slow_us as u64).saturating_mul(rate));
        let latency_ms = self.latency_ms.load(Ordering::Relaxed);
        let spike = (latency_ms > 0).then(|| latency_ms.saturating_mul(1000).saturating_mul(rate));
        let notice = slow.into_iter().chain(spike).min().unwrap_or(u64::MAX);
        self.notice_ticks.store(notice, Ordering::Relaxed);
    }

    /// Measures the counter's rate against the monotonic clock (each shard's cron, every
    /// 100 ms: the longer since the start, the closer).
    pub fn calibrate(&self) {
        let (ticks0, instant0) = self.origin;
        let us = instant0.elapsed().as_micros() as u64;
        if us >= 10_000 {
            let rate = ticks().wrapping_sub(ticks0) / us;
            self.ticks_per_us.store(rate.max(1), Ordering::Relaxed);
            self.refresh_notice();
        }
    }

    /// The cycle counter's ticks per microsecond, as last calibrated.
    pub fn ticks_per_us(&self) -> u64 {
        self.ticks_per_us.load(Ordering::Relaxed).max(1)
    }

    /// Whether a command that took `ticks` (from [`ticks`]) may interest SLOWLOG or the
    /// latency monitor (each then checks its own threshold): a load and a compare.
    #[inline]
    pub fn is_slow(&self, ticks: u64) -> bool {
        ticks >= self.notice_ticks.load(Ordering::Relaxed)
    }

    /// Logs a command that took `ticks` if over the threshold (see [`SlowLog::is_slow`]);
    /// returns the microseconds.
    pub fn record_ticks(
        &self,
        ticks: u64,
        args: &[Bytes],
        addr: &str,
        name: Option<&Bytes>,
    ) -> u64 {
        // Rare, so the rate can be brought up to date first (the first crons may not have).
        self.calibrate();
        let micros = ticks / self.ticks_per_us.load(Ordering::Relaxed).max(1);
        self.record(micros, args, addr, name);
        micros
    }

    /// Logs a command that took `micros`, if that is over the threshold.
    pub fn record(&self, micros: u64, args: &[Bytes], addr: &str, name: Option<&Bytes>) {
        let threshold = self.slower_than_us.load(Ordering::Relaxed);
        if threshold < 0 || (micros as i64) < threshold {
            return;
        }
        let max_len = self.max_len.load(Ordering::Relaxed) as usize;
        let entry = Entry {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            unix_s: (crate::clock::unix_ms() / 1000) as i64,
            micros: micros as i64,
            args: kept_args(args),
            addr: Bytes::copy_from_slice(addr.as_bytes()),
            name: name.cloned().unwrap_or_default(),
        };
        let mut entries = self.entries.lock().expect("slowlog");
        entries.push_front(entry);
        entries.truncate(max_len);
    }

    /// SLOWLOG GET [count] | LEN | RESET | HELP.
    pub fn command(&self, args: &[Bytes]) -> Frame {
        let sub = &args[1];
        // Each subcommand's arity (counting SLOWLOG and itself), as Redis checks it first.
        let known = [
            ("get", 2..=usize::MAX),
            ("len", 2..=2),
            ("reset", 2..=2),
            ("help", 2..=2),
        ];
        let Some((name, arity)) = known.into_iter().find(|(name, _)| is(sub, name)) else {
            return wetask_shards::errors::unknown_subcommand("slowlog", sub);
        };
        if !arity.contains(&args.len()) {
            return wetask_shards::errors::wrong_arity(&format!("slowlog|{name}"));
        }
        match name {
            "help" => Frame::Array(
                HELP.iter()
                    .map(|l| Frame::Simple(Bytes::from_static(l.as_bytes())))
                    .collect(),
            ),
            "len" => Frame::Integer(self.entries.lock().expect("slowlog").len() as i64),
            "reset" => {
                self.entries.lock().expect("slowlog").clear();
                Frame::ok()
            }
            _ if args.len() > 3 => wetask_shards::errors::subcommand_syntax("slowlog", sub),
            _ => {
                let count = match args.get(2).map(|n| wetask_shards::args::parse_i64(n)) {
                    None => 10,
                    Some(Some(-1)) => usize::MAX,
                    Some(Some(n)) if n >= 0 => n as usize,
                    Some(_) => {
                        return Frame::static_error(
                            "ERR count should be greater than or equal to -1",
                        )
                    }
                };
                let entries = self.entries.lock().expect("slowlog");
                Frame::Array(entries.iter().take(count).map(entry_frame).collect())
            }
        }
    }
}

fn entry_frame(entry: &Entry) -> Frame {
    Frame::Array(vec![
        Frame::Integer(entry.id as i64),
        Frame::Integer(entry.unix_s),
        Frame::Integer(entry.micros),
        Frame::Array(entry.args.iter().cloned().map(Frame::Bulk).collect()),
        Frame::Bulk(entry.addr.clone()),
        Frame::Bulk(entry.name.clone()),
    ])
}

/// The arguments as Redis keeps them: at most 32 (the last kept then says how many more
/// there were), each cut to 128 bytes (saying how many more there were).
fn kept_args(args: &[Bytes]) -> Vec<Bytes> {
    let keep = if args.len() > ARGS_MAX {
        ARGS_MAX - 1
    } else {
        args.len()
    };
    let mut kept: Vec<Bytes> = args[..keep]
        .iter()
        .map(|arg| {
            if arg.len() > ARG_BYTES_MAX {
                let mut cut = arg[..ARG_BYTES_MAX].to_vec();
                cut.extend_from_slice(
                    format!("... ({} more bytes)", arg.len() - ARG_BYTES_MAX).as_bytes(),
                );
                Bytes::from(cut)
            } else {
                Bytes::copy_from_slice(arg)
            }
        })
        .collect();
    if args.len() > ARGS_MAX {
        kept.push(Bytes::from(format!(
            "... ({} more arguments)",
            args.len() - keep
        )));
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_keep_what_redis_keeps_newest_first_up_to_max_len() {
        let log = SlowLog::default();
        log.slower_than_us.store(100, Ordering::Relaxed);
        log.max_len.store(2, Ordering::Relaxed);
        let args: Vec<Bytes> = (0..40).map(|i| Bytes::from(format!("a{i}"))).collect();
        log.record(50, &args, "1.2.3.4:5", None);
        assert_eq!(log.entries.lock().unwrap().len(), 0, "under the threshold");
        log.record(100, &args, "1.2.3.4:5", None);
        let long = Bytes::from(vec![b'x'; 200]);
        log.record(500, &[Bytes::from_static(b"SET"), long], "1.2.3.4:6", None);
        log.record(700, &args[..2], "1.2.3.4:7", None);
        let entries = log.entries.lock().unwrap();
        assert_eq!(entries.len(), 2, "max-len");
        assert_eq!(entries[0].micros, 700);
        assert_eq!(entries[1].args[1].len(), 128 + "... (72 more bytes)".len());
        drop(entries);
        let kept = kept_args(&args);
        assert_eq!(kept.len(), 32);
        assert_eq!(kept[31], Bytes::from_static(b"... (9 more arguments)"));
    }
}
