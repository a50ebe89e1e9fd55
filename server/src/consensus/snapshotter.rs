//! Raft snapshots made off the shard thread, as the compactor makes the journal's
//! (`persist::compact`): a thread of its own loads the group's last snapshot into a scratch
//! shard, replays the committed entries since, and writes the result as the snapshot of
//! the last of them. The shard goes on serving; it hands over the entries (cheap: their
//! data is shared) and, once the snapshot is in place, drops them from its log.

use std::sync::Arc;
use std::thread::JoinHandle;

use raft::eraftpb::{Entry, EntryType};
use wetask_shards::shard::cross_commit::Replay;
use wetask_shards::Shard;

use super::snapshot_file::{Meta, Snapshots};

/// Makes an empty shard with the server's settings (the task engine's retention times).
pub type ScratchShard = Arc<dyn Fn() -> Shard + Send + Sync>;

/// A snapshot being made: the index and term it will hold.
pub struct Making {
    pub index: u64,
    pub term: u64,
    work: Work,
}

/// Where the snapshot is being made: a thread of its own, or already made in place (a
/// simulation's, which must not depend on a thread's timing).
enum Work {
    Thread(JoinHandle<Result<u64, String>>),
    Done(Result<u64, String>),
}

/// What a finished one came to.
pub enum Made {
    /// In place, `bytes` long (0: a newer snapshot was there already).
    Done {
        index: u64,
        term: u64,
        bytes: u64,
    },
    Failed(String),
}

impl Making {
    /// Starts making the snapshot of `entries` (committed, in order, ending at
    /// `(index, term)`) over the snapshot in place; `in_place`: on this thread, now.
    pub fn start(
        snapshots: Arc<Snapshots>,
        scratch: &ScratchShard,
        entries: Vec<Entry>,
        (index, term): (u64, u64),
        in_place: bool,
    ) -> Result<Making, String> {
        let work = if in_place {
            Work::Done(make(&snapshots, scratch(), &entries, (index, term)))
        } else {
            let scratch = scratch.clone();
            let thread = std::thread::Builder::new()
                .name("wetask-raft-snap".into())
                .spawn(move || make(&snapshots, scratch(), &entries, (index, term)))
                .map_err(|e| format!("cannot start the Raft snapshot thread: {e}"))?;
            Work::Thread(thread)
        };
        Ok(Making { index, term, work })
    }

    /// The outcome, once the thread has finished.
    pub fn finished(&self) -> bool {
        match &self.work {
            Work::Thread(thread) => thread.is_finished(),
            Work::Done(_) => true,
        }
    }

    pub fn outcome(self) -> Made {
        let made = match self.work {
            Work::Thread(thread) => thread
                .join()
                .unwrap_or_else(|_| Err("the snapshot thread panicked".into())),
            Work::Done(made) => made,
        };
        match made {
            Ok(bytes) => Made::Done {
                index: self.index,
                term: self.term,
                bytes,
            },
            Err(e) => Made::Failed(e),
        }
    }
}

fn make(
    snapshots: &Snapshots,
    mut shard: Shard,
    entries: &[Entry],
    (index, term): (u64, u64),
) -> Result<u64, String> {
    shard.set_replica(true);
    let Meta {
        index: base,
        mut members,
        mut learners,
        ..
    } = snapshots
        .load(&mut shard)?
        .ok_or("no snapshot to start from (the group's start is one)")?;
    if base >= index {
        return Ok(0);
    }
    let mut replay = Replay::default();
    let mut next = base + 1;
    for entry in entries.iter().filter(|e| e.index > base) {
        if entry.index != next {
            return Err(format!(
                "the entries to fold skip from {} to {} (snapshot at {base})",
                next - 1,
                entry.index
            ));
        }
        next += 1;
        if entry.get_entry_type() == EntryType::EntryConfChange {
            let change = super::membership::read(&entry.data)?;
            super::membership::apply(&mut members, &mut learners, &change)?;
            continue;
        }
        if entry.get_entry_type() != EntryType::EntryNormal || entry.data.is_empty() {
            continue;
        }
        shard
            .apply_replicated(entry.data.clone(), &mut replay)
            .map_err(|e| format!("entry {} does not apply: {e}", entry.index))?;
    }
    if next != index + 1 {
        return Err(format!(
            "the entries to fold end at {}, not {index}",
            next - 1
        ));
    }
    let meta = Meta {
        index,
        term,
        members,
        learners,
    };
    snapshots.write(&meta, &mut shard)
}
