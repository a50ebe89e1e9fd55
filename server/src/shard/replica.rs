//! A replica's shard thread: each loop turn it applies what its inbox holds (a bounded
//! amount, so that its clients are served meanwhile), logging it to its own journal.
//!
//! Its clock is its own: reads hide keys expired by it without removing them
//! (`Shard::set_replica`), and it never runs its own expiry or task engine: the primary's
//! records carry both, at the primary's clock.

use std::cell::{Cell, RefCell};
use std::sync::atomic::Ordering;

use wetask_shards::shard::cross_commit::Replay;

use super::ShardCore;
use crate::replication::Item;

/// Bytes applied per loop turn at most.
const TURN_BYTES_MAX: usize = 1 << 20;

/// A replica shard's replay state between turns.
#[derive(Default)]
pub struct ShardReplica {
    /// Holds a cross-shard operation's part until its outcome arrives (as a restart does).
    replay: RefCell<Replay>,
    /// Items were applied since the last journal commit (`ShardCore::commit_journal`).
    pub unjournaled: Cell<bool>,
}

impl ShardCore {
    /// Applies what the inbox holds (on a replica; a no-op elsewhere).
    pub fn apply_replication(&self) {
        let replication = &self.globals.replication;
        let inbox = &replication.inboxes[self.id];
        let epoch = replication.link_epoch.load(Ordering::Acquire);
        let items = inbox.take(TURN_BYTES_MAX, epoch);
        if items.is_empty() {
            return;
        }
        self.replica.unjournaled.set(true);
        let mut shard = self.shard.borrow_mut();
        let mut replay = self.replica.replay.borrow_mut();
        let mut failed = None;
        for item in items {
            let result = match item {
                Item::FullStart => {
                    *replay = Replay::default();
                    shard.begin_full_sync();
                    Ok(())
                }
                Item::Part(part) => shard.sync_part(part),
                Item::FullEnd { position } => shard.end_full_sync().map(|()| {
                    inbox.applied.store(position, Ordering::Release);
                    inbox.synced.store(true, Ordering::Release);
                }),
                Item::Record { payload, position } => shard
                    .apply_replicated(payload, &mut replay)
                    .map(|()| inbox.applied.store(position, Ordering::Release)),
                Item::Functions(dump) => {
                    // A library this node cannot load is logged, not fatal: the primary's
                    // records carry the functions' writes as their effects.
                    if let Err(e) =
                        crate::function_store::replace_from_primary(&self.globals, &dump)
                    {
                        tracing::error!("cannot take the primary's function libraries: {e}");
                    }
                    Ok(())
                }
                Item::SyncWhole => {
                    shard.end_partial_sync();
                    Ok(())
                }
                Item::Idle { position } => {
                    inbox.applied.fetch_max(position, Ordering::AcqRel);
                    Ok(())
                }
            };
            if let Err(e) = result {
                failed = Some(e);
                break;
            }
        }
        inbox
            .holds_part
            .store(replay.holds_part(), std::sync::atomic::Ordering::Release);
        inbox
            .loading
            .store(shard.holds_partial_sync(), Ordering::Release);
        drop((shard, replay));
        if let Some(e) = failed {
            tracing::error!(
                shard = self.id,
                "cannot apply the primary's stream ({e}): syncing in full"
            );
            inbox.broken.store(true, Ordering::Release);
            inbox.clear();
            replication.links.close(Some(epoch));
        }
        replication.wake_acks(self.id);
    }

    /// After the journal's commit: what was applied is written (and under `always`
    /// synced); the ack thread tells the primary once it is on disk. A journal that cannot
    /// be written (MISCONF) tells nothing.
    pub fn replica_journaled(&self) {
        let store_failed = self
            .globals
            .store
            .get()
            .is_none_or(|s| s.misconf().is_some());
        if store_failed {
            return;
        }
        let inbox = &self.globals.replication.inboxes[self.id];
        let applied = inbox.applied.load(Ordering::Acquire);
        if inbox.journaled.swap(applied, Ordering::AcqRel) != applied {
            self.globals.replication.wake_acks(self.id);
        }
    }
}
