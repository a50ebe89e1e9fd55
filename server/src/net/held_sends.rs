//! Group commit on the shard's own ring under `appendfsync always`: replies wait for the
//! journal's fsync without the shard thread waiting for the disk.
//!
//! The driver writes each turn's journal records (to the page cache) before the turn's
//! submissions, as under every policy. Under `always` it does not `fdatasync` there: every
//! send goes into [`HeldSends::held`] instead of the ring, and at the next commit point
//! (the start of a turn, or before it sleeps) the sends held so far become one group behind
//! one `IORING_OP_FSYNC` (DATASYNC) on the journal's segment. The group's sends go to the
//! ring when that fsync completes. While an fsync is in flight, later groups gather in
//! [`HeldSends::next`] and ride the fsync submitted when it completes, which covers every
//! record written by then, once as many replies are held as the last fsync released (or
//! [`GATHER_MAX`] has passed). So the shard keeps receiving, executing and journaling while
//! the disk flushes, and one fsync covers what arrived during and just after the one
//! before it (docs/DURABILITY.md, "Group commit").
//!
//! Everything else that leaves the shard keeps its own rule: an envelope to a peer syncs
//! the journal first (`Commit::Durable`), and the glommio fallback syncs in its commits.

use std::sync::Arc;

use io_uring::squeue;

use crate::persist::SyncedFile;

/// After an fsync releases its group, the next fsync waits up to this long for as many
/// replies to be held as that group released (the clients it answered sending again), so
/// that groups do not split in two: with the next fsync submitted at once, half the
/// clients rode each fsync (8 of 16 connections on this machine) while the other half were
/// on their way back. Measured at 16 connections: 13 replies per fsync instead of 8, 33-35 k
/// SET/s instead of 24-27 k (docs/perf-notes.md). One client's next request makes a group as
/// large as the last one, so light load waits for nothing.
pub const GATHER_MAX: std::time::Duration = std::time::Duration::from_micros(200);

#[derive(Default)]
pub struct HeldSends {
    /// Sends queued since the last commit point: their records may not be written yet.
    pub held: Vec<squeue::Entry>,
    /// Sends whose records are written, waiting for the next fsync.
    pub next: Vec<squeue::Entry>,
    /// The fsync submitted and not completed, and the sends it releases.
    pub in_flight: Option<InFlight>,
    /// The last completed fsync: when, and how many sends it released (see [`GATHER_MAX`]).
    pub released_at: Option<std::time::Instant>,
    pub last_group: usize,
    /// Consensus mode: groups of sends waiting for their turn's Raft barrier, oldest first
    /// (`Net::release_on_commit`).
    pub raft: std::collections::VecDeque<(crate::shard::raft::Barrier, Vec<squeue::Entry>)>,
}

pub struct InFlight {
    /// Kept open until the fsync completes (a compaction may move the journal to a new
    /// segment meanwhile, and the fd must not be closed or reused under the kernel).
    pub _file: Arc<SyncedFile>,
    /// The journal's written-byte count this fsync covers (`Journal::made_durable`).
    pub covers: u64,
    pub sends: Vec<squeue::Entry>,
    pub submitted: std::time::Instant,
}

impl HeldSends {
    /// Nothing held or waiting.
    pub fn is_idle(&self) -> bool {
        self.held.is_empty()
            && self.next.is_empty()
            && self.in_flight.is_none()
            && self.raft.is_empty()
    }

    /// How long the next fsync should still wait for its group to gather; `None`: submit it
    /// now.
    pub fn gather_for(&self) -> Option<std::time::Duration> {
        let at = self.released_at?;
        if self.next.len() >= self.last_group {
            return None;
        }
        GATHER_MAX
            .checked_sub(at.elapsed())
            .filter(|left| !left.is_zero())
    }

    /// At a commit point: what was held has its records written now.
    pub fn committed(&mut self) {
        self.next.append(&mut self.held);
    }
}
