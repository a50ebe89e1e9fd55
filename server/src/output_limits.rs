//! `client-output-buffer-limit`: how many reply bytes a client that does not read may make
//! the server hold, per class (normal clients, pub/sub subscribers), as Redis's option:
//! a hard limit closes the client at once, a soft one when it stays exceeded for its
//! seconds.
//!
//! The check runs while replies are produced (after each command of a pipeline, and for each
//! published message), on what the client has queued: the replies not yet handed to the
//! kernel plus those handed but not yet sent (the transport keeps `ConnState::unsent`). So
//! a pipeline of LRANGEs against a client that never reads stops at the limit, not after
//! the whole pipeline ran.
//!
//! Defaults: normal hard 1 GiB (Redis: unlimited, which lets one such client exhaust the
//! server), pubsub 32 MiB hard, 8 MiB for 60 s soft (Redis's).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::clients::ConnState;

/// One class's limits, in bytes and seconds (0: none).
#[derive(Default)]
pub struct ClassLimit {
    pub hard: AtomicU64,
    pub soft: AtomicU64,
    pub soft_seconds: AtomicU64,
}

impl ClassLimit {
    fn new(hard: u64, soft: u64, soft_seconds: u64) -> Self {
        ClassLimit {
            hard: AtomicU64::new(hard),
            soft: AtomicU64::new(soft),
            soft_seconds: AtomicU64::new(soft_seconds),
        }
    }

    fn describe(&self, name: &str) -> String {
        format!(
            "{name} {} {} {}",
            self.hard.load(Ordering::Relaxed),
            self.soft.load(Ordering::Relaxed),
            self.soft_seconds.load(Ordering::Relaxed)
        )
    }
}

pub struct OutputLimits {
    pub normal: ClassLimit,
    pub pubsub: ClassLimit,
    /// Replicas do not exist yet; the class is kept so CONFIG GET/SET round-trip.
    pub replica: ClassLimit,
}

impl Default for OutputLimits {
    fn default() -> Self {
        OutputLimits {
            normal: ClassLimit::new(1 << 30, 0, 0),
            replica: ClassLimit::new(256 << 20, 64 << 20, 60),
            pubsub: ClassLimit::new(32 << 20, 8 << 20, 60),
        }
    }
}

impl OutputLimits {
    /// CONFIG GET's value: `normal H S T replica H S T pubsub H S T` (Redis says `slave`).
    pub fn describe(&self) -> String {
        format!(
            "{} {} {}",
            self.normal.describe("normal"),
            self.replica.describe("slave"),
            self.pubsub.describe("pubsub")
        )
    }

    /// CONFIG SET's value: one or more `class hard soft seconds` groups, sizes with Redis's
    /// units (`32mb`, `8m`, `1gb` …). Nothing changes unless the whole value parses.
    pub fn set(&self, value: &str) -> Result<(), String> {
        let words: Vec<&str> = value.split_whitespace().collect();
        if words.is_empty() || !words.len().is_multiple_of(4) {
            return Err("wrong number of arguments".into());
        }
        let mut parsed = Vec::new();
        for group in words.chunks(4) {
            let class = match group[0].to_ascii_lowercase().as_str() {
                "normal" => &self.normal,
                "pubsub" => &self.pubsub,
                "slave" | "replica" => &self.replica,
                other => return Err(format!("invalid client class '{other}'")),
            };
            let hard = parse_memory(group[1]).ok_or("invalid hard limit")?;
            let soft = parse_memory(group[2]).ok_or("invalid soft limit")?;
            let seconds: u64 = group[3].parse().map_err(|_| "invalid soft seconds")?;
            parsed.push((class, hard, soft, seconds));
        }
        for (class, hard, soft, seconds) in parsed {
            class.hard.store(hard, Ordering::Relaxed);
            class.soft.store(soft, Ordering::Relaxed);
            class.soft_seconds.store(seconds, Ordering::Relaxed);
        }
        Ok(())
    }

    /// True when `conn`, with `pending` reply bytes queued, must be closed now. Keeps the
    /// time its soft limit was first passed.
    pub fn exceeded(&self, conn: &mut ConnState, pending: usize, now_ms: u64) -> bool {
        let class = if conn.subscriptions.is_empty() {
            &self.normal
        } else {
            &self.pubsub
        };
        let pending = pending as u64;
        let hard = class.hard.load(Ordering::Relaxed);
        if hard > 0 && pending > hard {
            return true;
        }
        let soft = class.soft.load(Ordering::Relaxed);
        if soft == 0 || pending <= soft {
            conn.soft_limit_since_ms = None;
            return false;
        }
        let since = *conn.soft_limit_since_ms.get_or_insert(now_ms);
        now_ms.saturating_sub(since) >= class.soft_seconds.load(Ordering::Relaxed) * 1000
    }
}

/// A size with Redis's units: `1k` = 1000, `1kb` = 1024, and so on for m/mb, g/gb.
pub fn parse_memory(text: &str) -> Option<u64> {
    let lower = text.to_ascii_lowercase();
    let split = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (digits, unit) = lower.split_at(split);
    let number: u64 = digits.parse().ok()?;
    let scale: u64 = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    number.checked_mul(scale)
}

/// New output below which `client-output-buffer-limit` is not looked at (a limit set lower
/// acts from here).
pub const OUTPUT_CHECK_FLOOR: usize = 16 * 1024;

/// Checks the client's queued output against `client-output-buffer-limit` after a reply
/// was added; past it, the output is dropped and the connection closes (true).
/// `now_ms` is only asked for past the floor.
#[inline]
pub fn reached(
    limits: &OutputLimits,
    now_ms: impl FnOnce() -> u64,
    state: &std::cell::RefCell<ConnState>,
    out: &mut wetask_protocol::Output,
) -> bool {
    // Cheap while the queued output is small: limits are checked from 16 KiB of new output
    // on (the hot path of small pipelined replies pays one comparison).
    if out.len() < OUTPUT_CHECK_FLOOR {
        return false;
    }
    let now_ms = now_ms();
    let mut state = state.borrow_mut();
    let pending = out.len() + state.unsent;
    if !limits.exceeded(&mut state, pending, now_ms) {
        return false;
    }
    tracing::warn!(
        client = state.id,
        pending,
        "client-output-buffer-limit reached; closing the client"
    );
    out.clear();
    crate::clients::shut_down(&mut state);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_groups_parse_as_redis_writes_them() {
        assert_eq!(parse_memory("32mb"), Some(32 << 20));
        assert_eq!(parse_memory("8m"), Some(8_000_000));
        assert_eq!(parse_memory("1GB"), Some(1 << 30));
        assert_eq!(parse_memory("0"), Some(0));
        assert_eq!(parse_memory("12x"), None);
        assert_eq!(parse_memory(""), None);
        let limits = OutputLimits::default();
        assert!(limits.set("normal 1mb 512kb 10 pubsub 0 0 0").is_ok());
        assert_eq!(
            limits.describe(),
            "normal 1048576 524288 10 slave 268435456 67108864 60 pubsub 0 0 0"
        );
        assert!(limits.set("normal 1mb 0").is_err());
        assert!(limits.set("bogus 1 1 1").is_err());
        assert!(limits.set("normal 1mb 0 0 pubsub x 0 0").is_err());
        assert_eq!(
            limits.normal.hard.load(Ordering::Relaxed),
            1 << 20,
            "unchanged"
        );
    }
}
