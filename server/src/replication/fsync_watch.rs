//! What a replica tells its primary of its own journal's fsyncs (WAITAOF's replica count):
//! the positions written, each waiting for the fsync round that covers it. Used by the
//! stream from a WeTask primary (`receiver`, an `F` ack) and by the one from a Redis
//! primary (`from_redis`, `REPLCONF ACK … FACK`).

use crate::persist::Store;

/// The positions a replica shard's journal has written, each with the fsync round that was
/// under way when it was seen (`Store::sync_round_begun`): once a round begun after it
/// ends (`Store::synced_since`), the position is on disk. Under `always` a position is on
/// disk once written (the shard's commit synced it); under `no`, never, as Redis's
/// WAITAOF sees it. (Right after the replica's `appendfsync` turns from `no` to `always`,
/// positions written under `no` count as synced up to a second before the next commit,
/// which the primary's heartbeat brings, syncs them.)
#[derive(Default)]
pub struct FsyncWatch {
    waiting: std::collections::VecDeque<(u64, u64)>,
    seen: u64,
    told: u64,
}

/// Positions waiting for their fsync, at most: more are folded into the newest (a later
/// round then covers both, which is only later, never wrong).
const FSYNC_WAITING_MAX: usize = 64;

impl FsyncWatch {
    /// Whether a position written waits for its fsync (its ack is then looked at soon).
    pub fn waits(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Notes `journaled`; returns the position now known fsynced, when it moved.
    pub fn moved(&mut self, journaled: u64, store: &Store) -> Option<u64> {
        if journaled > self.seen {
            self.seen = journaled;
            let round = (journaled, store.sync_round_begun());
            if self.waiting.len() >= FSYNC_WAITING_MAX {
                self.waiting.pop_back();
            }
            self.waiting.push_back(round);
        }
        let mut fsynced = None;
        while let Some(&(position, begun)) = self.waiting.front() {
            if !store.synced_since(begun) {
                break;
            }
            fsynced = Some(position);
            self.waiting.pop_front();
        }
        let fsynced = fsynced.filter(|&p| p > self.told)?;
        self.told = fsynced;
        Some(fsynced)
    }
}
