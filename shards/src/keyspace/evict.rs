//! `maxmemory` eviction: the policies, the per-key access stamps, and the pick of a victim.
//!
//! As in Redis, LRU and LFU are approximated: a key's node carries a 21-bit stamp (`node`),
//! refreshed on each access when the policy needs one, and a victim is the best of a few
//! sampled keys (`maxmemory-samples`, default 5). LRU stamps are seconds (wrapping after 24
//! days, compared modulo the wrap, as Redis's 24-bit clock); LFU stamps hold Redis's 8-bit
//! logarithmic counter (factor 10, starting at 5) and the minute it last decayed (13 bits),
//! decaying by one per minute without access (`lfu-decay-time 1`). Volatile policies sample
//! only keys with a TTL.

use crate::keyspace::node::STAMP_MASK;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Policy {
    #[default]
    NoEviction,
    AllkeysLru,
    AllkeysLfu,
    AllkeysRandom,
    VolatileLru,
    VolatileLfu,
    VolatileRandom,
    VolatileTtl,
}

/// What access stamps keys need.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Tracking {
    #[default]
    None,
    Lru,
    Lfu,
}

pub const POLICIES: &[(Policy, &str)] = &[
    (Policy::NoEviction, "noeviction"),
    (Policy::AllkeysLru, "allkeys-lru"),
    (Policy::AllkeysLfu, "allkeys-lfu"),
    (Policy::AllkeysRandom, "allkeys-random"),
    (Policy::VolatileLru, "volatile-lru"),
    (Policy::VolatileLfu, "volatile-lfu"),
    (Policy::VolatileRandom, "volatile-random"),
    (Policy::VolatileTtl, "volatile-ttl"),
];

impl Policy {
    pub fn parse(name: &str) -> Option<Policy> {
        let name = name.to_ascii_lowercase();
        POLICIES.iter().find(|(_, n)| *n == name).map(|(p, _)| *p)
    }

    pub fn name(self) -> &'static str {
        POLICIES
            .iter()
            .find(|(p, _)| *p == self)
            .map_or("noeviction", |(_, n)| n)
    }

    pub fn tracking(self) -> Tracking {
        match self {
            Policy::AllkeysLru | Policy::VolatileLru => Tracking::Lru,
            Policy::AllkeysLfu | Policy::VolatileLfu => Tracking::Lfu,
            _ => Tracking::None,
        }
    }

    pub fn volatile_only(self) -> bool {
        matches!(
            self,
            Policy::VolatileLru
                | Policy::VolatileLfu
                | Policy::VolatileRandom
                | Policy::VolatileTtl
        )
    }
}

/// Redis's LFU starting counter, so a new key is not evicted before it had a chance.
pub const LFU_INIT: u32 = 5;
const LFU_LOG_FACTOR: f64 = 10.0;
const MINUTE_BITS: u32 = 13;
const MINUTE_MASK: u32 = (1 << MINUTE_BITS) - 1;

/// The stamp a key gets when created or accessed at `now_ms`.
pub fn fresh_stamp(tracking: Tracking, now_ms: u64) -> u32 {
    match tracking {
        Tracking::None => 0,
        Tracking::Lru => lru_clock(now_ms),
        Tracking::Lfu => lfu_stamp(minutes(now_ms), LFU_INIT),
    }
}

/// The stamp after one access at `now_ms`.
pub fn touched(tracking: Tracking, stamp: u32, now_ms: u64) -> u32 {
    match tracking {
        Tracking::None => stamp,
        Tracking::Lru => lru_clock(now_ms),
        Tracking::Lfu => {
            let now = minutes(now_ms);
            let counter = lfu_log_increment(lfu_decayed(stamp, now));
            lfu_stamp(now, counter)
        }
    }
}

/// How much a key deserves eviction under `tracking` (higher first): its idle seconds for
/// LRU, 255 minus its decayed counter for LFU.
pub fn eviction_score(tracking: Tracking, stamp: u32, now_ms: u64) -> u64 {
    match tracking {
        Tracking::None => 0,
        Tracking::Lru => u64::from(lru_clock(now_ms).wrapping_sub(stamp) & STAMP_MASK),
        Tracking::Lfu => 255 - u64::from(lfu_decayed(stamp, minutes(now_ms))),
    }
}

fn lru_clock(now_ms: u64) -> u32 {
    ((now_ms / 1000) as u32) & STAMP_MASK
}

fn minutes(now_ms: u64) -> u32 {
    ((now_ms / 60_000) as u32) & MINUTE_MASK
}

fn lfu_stamp(minute: u32, counter: u32) -> u32 {
    (minute << 8) | counter.min(255)
}

/// The counter, less one per minute since it last decayed.
fn lfu_decayed(stamp: u32, now_minute: u32) -> u32 {
    let counter = stamp & 0xFF;
    let last = (stamp >> 8) & MINUTE_MASK;
    let elapsed = now_minute.wrapping_sub(last) & MINUTE_MASK;
    counter.saturating_sub(elapsed)
}

/// Redis's logarithmic increment: the higher the counter, the less likely a hit raises it.
fn lfu_log_increment(counter: u32) -> u32 {
    if counter >= 255 {
        return 255;
    }
    let base = counter.saturating_sub(LFU_INIT) as f64;
    let p = 1.0 / (base * LFU_LOG_FACTOR + 1.0);
    if fastrand::f64() < p {
        counter + 1
    } else {
        counter
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_round_trip_their_names() {
        for (policy, name) in POLICIES {
            assert_eq!(Policy::parse(name), Some(*policy));
            assert_eq!(policy.name(), *name);
        }
        assert_eq!(Policy::parse("ALLKEYS-LRU"), Some(Policy::AllkeysLru));
        assert_eq!(Policy::parse("lru"), None);
    }

    #[test]
    fn lru_scores_idle_time_and_lfu_scores_rarity() {
        let t0 = 1_700_000_000_000;
        let old = fresh_stamp(Tracking::Lru, t0);
        let new = fresh_stamp(Tracking::Lru, t0 + 50_000);
        let now = t0 + 60_000;
        assert_eq!(eviction_score(Tracking::Lru, old, now), 60);
        assert_eq!(eviction_score(Tracking::Lru, new, now), 10);
        let mut hot = fresh_stamp(Tracking::Lfu, t0);
        for _ in 0..10_000 {
            hot = touched(Tracking::Lfu, hot, t0);
        }
        let cold = fresh_stamp(Tracking::Lfu, t0);
        assert!(eviction_score(Tracking::Lfu, cold, t0) > eviction_score(Tracking::Lfu, hot, t0));
        // A hot key cools down without access: one step per minute.
        let later = t0 + 30 * 60_000;
        assert_eq!(
            eviction_score(Tracking::Lfu, hot, later),
            eviction_score(Tracking::Lfu, hot, t0) + 30
        );
    }
}
