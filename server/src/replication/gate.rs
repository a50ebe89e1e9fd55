//! Which clients' commands replication refuses, as Redis refuses them:
//!
//! - on a read-only replica (`replica-read-only yes`), writes: `-READONLY`;
//! - on a primary with `min-replicas-to-write N`, writes while fewer than N replicas are
//!   online with an acknowledgement at most `min-replicas-max-lag` seconds old:
//!   `-NOREPLICAS` (a primary cut off from its replicas stops taking writes it could lose
//!   at a failover);
//! - on a replica with `replica-serve-stale-data no`, while its link is down, every command
//!   without Redis's `stale` flag: `-MASTERDOWN`.
//!
//! The dispatcher asks for a client's write commands (a container's by its subcommand's
//! flags, EXEC by what it queued), `redis.call` for a script's, and FCALL before it runs a
//! function that may write, as Redis's `scriptPrepareForRun` does. The replication
//! applier's connection is never refused.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::Replication;

pub const NOREPLICAS: &str = "NOREPLICAS Not enough good replicas to write.";
pub const MASTERDOWN: &str =
    "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.";

/// How long a count of good replicas is used before it is taken again.
const RECOUNT_MS: u64 = 100;

pub struct Gate {
    /// `min-replicas-to-write` (0: off) and `min-replicas-max-lag` (seconds).
    pub min_replicas_to_write: AtomicU64,
    pub min_replicas_max_lag: AtomicU64,
    /// `replica-serve-stale-data`.
    pub serve_stale_data: AtomicBool,
    /// A replica's link is up (`Replication::set_link`).
    pub link_up: AtomicBool,
    /// `replica-priority`, which INFO shows for Redis Sentinel to choose whom to promote
    /// (lower first; 0: never).
    pub priority: AtomicU64,
    /// The last count of good replicas, and when it was taken (ms).
    good: AtomicU64,
    counted_at_ms: AtomicU64,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            min_replicas_to_write: AtomicU64::new(0),
            min_replicas_max_lag: AtomicU64::new(10),
            serve_stale_data: AtomicBool::new(true),
            link_up: AtomicBool::new(false),
            priority: AtomicU64::new(100),
            good: AtomicU64::new(0),
            counted_at_ms: AtomicU64::new(0),
        }
    }
}

impl Gate {
    /// The settings the node started with.
    pub fn configure(&self, config: &crate::config::Config) {
        let settings = [
            (&self.min_replicas_to_write, config.min_replicas_to_write),
            (&self.min_replicas_max_lag, config.min_replicas_max_lag),
            (&self.priority, config.replica_priority),
        ];
        for (setting, value) in settings {
            setting.store(value, Ordering::Relaxed);
        }
        self.serve_stale_data
            .store(config.replica_serve_stale_data, Ordering::Relaxed);
    }
}

impl Replication {
    /// Why a client's write is refused here, if it is: READONLY or NOREPLICAS.
    #[inline]
    pub fn write_refusal(&self) -> Option<&'static str> {
        if self.refuses_writes() {
            return Some(super::READONLY);
        }
        let wanted = self.gate.min_replicas_to_write.load(Ordering::Relaxed);
        (wanted > 0 && !self.is_replica() && self.good_replicas() < wanted).then_some(NOREPLICAS)
    }

    /// Why a command without the `stale` flag is refused here, if it is: MASTERDOWN.
    #[inline]
    pub fn stale_refusal(&self) -> Option<&'static str> {
        let gate = &self.gate;
        let refused = !gate.serve_stale_data.load(Ordering::Relaxed)
            && self.is_replica()
            && !gate.link_up.load(Ordering::Relaxed);
        refused.then_some(MASTERDOWN)
    }

    /// Replicas online on every shard whose last acknowledgement is at most
    /// `min-replicas-max-lag` seconds old (counted again at most every [`RECOUNT_MS`]).
    pub fn good_replicas(&self) -> u64 {
        let gate = &self.gate;
        let now = crate::clock::unix_ms();
        if now.saturating_sub(gate.counted_at_ms.load(Ordering::Acquire)) < RECOUNT_MS {
            return gate.good.load(Ordering::Acquire);
        }
        let lag_ms = gate.min_replicas_max_lag.load(Ordering::Relaxed) * 1000;
        let good = self
            .peers
            .lock()
            .expect("peers")
            .iter()
            .filter(|peer| {
                peer.online.load(Ordering::Acquire) >= peer.acked.len()
                    && now.saturating_sub(peer.last_ack_ms.load(Ordering::Acquire)) <= lag_ms
            })
            .count() as u64;
        gate.good.store(good, Ordering::Release);
        gate.counted_at_ms.store(now, Ordering::Release);
        good
    }
}
