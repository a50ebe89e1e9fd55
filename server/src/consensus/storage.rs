//! A group's Raft log as raft-rs reads it: the entries since the last snapshot, in memory,
//! with the hard state and the snapshot's index and term (raft-rs's `Storage`).
//!
//! raft-rs's own `MemStorage` is a test double: compacting it forgets the term of the
//! entry before the first one kept, which Raft needs to match a follower's log, and its
//! snapshots carry no data. Here compaction records the snapshot's index and term, and
//! [`LogStore::snapshot`] hands out the snapshot file the shard last wrote or installed
//! (`consensus::snapshot_file`), which the leader sends to a follower that has fallen
//! behind the compacted log.

use std::path::PathBuf;

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, StorageError};

/// The in-memory log of one group (see the module's comment).
pub struct LogStore {
    hard_state: HardState,
    conf_state: ConfState,
    /// The entries after `base`, in index order without gaps.
    entries: Vec<Entry>,
    /// The index and term of the last entry the snapshot holds (0, 0: none).
    base: (u64, u64),
    /// The entries' data bytes (what a snapshot would fold).
    bytes: usize,
    /// Where the snapshot file is, to send it.
    snapshot_path: PathBuf,
}

impl LogStore {
    pub fn new(conf_state: ConfState, snapshot_path: PathBuf) -> LogStore {
        LogStore {
            hard_state: HardState::default(),
            conf_state,
            entries: Vec::new(),
            base: (0, 0),
            bytes: 0,
            snapshot_path,
        }
    }

    pub fn set_conf_state(&mut self, conf_state: ConfState) {
        self.conf_state = conf_state;
    }

    pub fn set_hard_state(&mut self, hard_state: HardState) {
        self.hard_state = hard_state;
    }

    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    /// The snapshot's index and term.
    pub fn base(&self) -> (u64, u64) {
        self.base
    }

    /// The entries kept, after the snapshot.
    #[cfg(test)]
    pub fn kept(&self) -> &[Entry] {
        &self.entries
    }

    /// The bytes of entry data kept (what a snapshot would fold).
    pub fn kept_bytes(&self) -> usize {
        self.bytes
    }

    /// Appends `entries`, replacing any kept entry at or after the first one's index (a
    /// leader overwriting an uncommitted tail). Entries at or below the snapshot are
    /// skipped: the snapshot holds them.
    pub fn append(&mut self, entries: &[Entry]) -> Result<(), String> {
        let entries: Vec<&Entry> = entries.iter().filter(|e| e.index > self.base.0).collect();
        let Some(first) = entries.first().map(|e| e.index) else {
            return Ok(());
        };
        if first > self.last() + 1 {
            return Err(format!(
                "a gap in the Raft log: entry {first} after {}",
                self.last()
            ));
        }
        let keep = (first - self.base.0 - 1) as usize;
        self.bytes -= data_bytes(&self.entries[keep..]);
        self.entries.truncate(keep);
        self.bytes += entries.iter().map(|e| e.data.len()).sum::<usize>();
        self.entries.extend(entries.into_iter().cloned());
        Ok(())
    }

    /// Drops the entries up to `index`, which the snapshot of `(index, term)` now holds.
    pub fn compact(&mut self, index: u64, term: u64) {
        if index <= self.base.0 {
            return;
        }
        let drop = ((index - self.base.0) as usize).min(self.entries.len());
        self.bytes -= data_bytes(&self.entries[..drop]);
        self.entries.drain(..drop);
        self.base = (index, term);
    }

    /// A snapshot of `(index, term)` replaces the whole log (a follower installing the
    /// leader's snapshot).
    pub fn install(&mut self, index: u64, term: u64) {
        self.entries.clear();
        self.bytes = 0;
        self.base = (index, term);
        self.hard_state.commit = self.hard_state.commit.max(index);
        self.hard_state.term = self.hard_state.term.max(term);
    }

    /// The log's records as a rewrite of its file holds them: the entries kept and the
    /// hard state (`LogFile::rewrite`).
    pub fn encode_whole(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        super::log_file::encode(&self.entries, Some(&self.hard_state), &mut bytes);
        bytes
    }

    fn last(&self) -> u64 {
        self.entries.last().map_or(self.base.0, |e| e.index)
    }
}

fn data_bytes(entries: &[Entry]) -> usize {
    entries.iter().map(|e| e.data.len()).sum()
}

impl raft::Storage for LogStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(
            self.hard_state.clone(),
            self.conf_state.clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low <= self.base.0 {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last() + 1 || low > high {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let from = (low - self.base.0 - 1) as usize;
        let to = (high - self.base.0 - 1) as usize;
        let max_size = max_size.into().unwrap_or(u64::MAX);
        let mut size = 0u64;
        let mut out = Vec::with_capacity(to - from);
        for entry in &self.entries[from..to] {
            size += protobuf::Message::compute_size(entry) as u64;
            // At least one entry, whatever its size (raft-rs's contract).
            if !out.is_empty() && size > max_size {
                break;
            }
            out.push(entry.clone());
        }
        Ok(out)
    }

    fn term(&self, index: u64) -> raft::Result<u64> {
        if index == self.base.0 {
            return Ok(self.base.1);
        }
        if index < self.base.0 {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        match self.entries.get((index - self.base.0 - 1) as usize) {
            Some(entry) => Ok(entry.term),
            None => Err(raft::Error::Store(StorageError::Unavailable)),
        }
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.base.0 + 1)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    /// The snapshot file as it is now (it may be newer than `base`: the snapshot thread
    /// renames its file in before the shard compacts), its header read on the shard's
    /// thread: a follower needs one only after falling behind the compacted log.
    /// One that does not name `to` among its members is not offered (raft-rs on `to`
    /// would refuse it): a member just added waits for the snapshot its addition calls
    /// for (`ShardRaft::change_members`).
    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        let unavailable = raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable);
        // The header only: the file itself is streamed to `to` by the transport, which the
        // shard hands it opened (`ShardRaft::send`), so the message carries no data. While
        // the snapshot does not suit `to` (a member just added waits for one that names
        // it), raft-rs asks again at every heartbeat.
        let found = match super::snapshot_file::read_meta(&self.snapshot_path) {
            Ok(meta) if meta.index >= request_index && meta.member_ids().contains(&to) => meta,
            _ => return Err(unavailable),
        };
        let mut snapshot = Snapshot::default();
        let meta = snapshot.mut_metadata();
        meta.index = found.index;
        meta.term = found.term;
        meta.set_conf_state(found.conf_state());
        Ok(snapshot)
    }
}

#[cfg(test)]
mod tests {
    use raft::Storage;

    use super::*;

    fn entry(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            data: bytes::Bytes::from(vec![index as u8; 10]),
            ..Default::default()
        }
    }

    fn store() -> LogStore {
        let mut store = LogStore::new(ConfState::default(), PathBuf::from("/nonexistent"));
        store
            .append(&(1..=5).map(|i| entry(i, 1)).collect::<Vec<_>>())
            .unwrap();
        store
    }

    fn indexes(entries: &[Entry]) -> Vec<u64> {
        entries.iter().map(|e| e.index).collect()
    }

    #[test]
    fn a_later_append_replaces_the_tail_and_a_gap_is_refused() {
        let mut store = store();
        assert_eq!(store.kept_bytes(), 50);
        store.append(&[entry(3, 2), entry(4, 2)]).unwrap();
        assert_eq!(indexes(store.kept()), vec![1, 2, 3, 4]);
        assert_eq!(store.kept_bytes(), 40);
        assert_eq!(store.term(3).unwrap(), 2);
        assert!(store.append(&[entry(6, 2)]).is_err());
        assert_eq!(store.last_index().unwrap(), 4);
    }

    #[test]
    fn compaction_keeps_the_term_of_the_snapshots_last_entry() {
        let mut store = store();
        store.compact(3, 1);
        assert_eq!(store.kept_bytes(), 20);
        assert_eq!(store.first_index().unwrap(), 4);
        assert_eq!(store.last_index().unwrap(), 5);
        // Raft matches a follower's log at the entry before the first one kept.
        assert_eq!(store.term(3).unwrap(), 1);
        assert!(matches!(
            store.term(2),
            Err(raft::Error::Store(StorageError::Compacted))
        ));
        assert!(matches!(
            store.entries(3, 5, None, GetEntriesContext::empty(false)),
            Err(raft::Error::Store(StorageError::Compacted))
        ));
        let got = store
            .entries(4, 6, None, GetEntriesContext::empty(false))
            .unwrap();
        assert_eq!(indexes(&got), vec![4, 5]);
        // Entries the snapshot holds are skipped on append; the rest go on.
        store
            .append(&[entry(3, 1), entry(4, 1), entry(5, 1), entry(6, 1)])
            .unwrap();
        assert_eq!(indexes(store.kept()), vec![4, 5, 6]);
        // Compacting past what is kept (a snapshot ahead of the log) leaves none.
        store.compact(9, 3);
        assert!(store.kept().is_empty());
        assert_eq!(
            (store.first_index().unwrap(), store.last_index().unwrap()),
            (10, 9)
        );
        assert_eq!(store.term(9).unwrap(), 3);
    }

    #[test]
    fn an_installed_snapshot_replaces_the_log_and_moves_the_commit() {
        let mut store = store();
        store.install(20, 4);
        assert!(store.kept().is_empty());
        assert_eq!(store.last_index().unwrap(), 20);
        assert_eq!(store.term(20).unwrap(), 4);
        assert_eq!(store.hard_state().commit, 20);
        store.append(&[entry(21, 4)]).unwrap();
        assert_eq!(indexes(store.kept()), vec![21]);
    }

    #[test]
    fn entries_stop_at_the_size_limit_but_give_at_least_one() {
        let store = store();
        let one = store
            .entries(1, 6, Some(1), GetEntriesContext::empty(false))
            .unwrap();
        assert_eq!(indexes(&one), vec![1]);
        let all = store
            .entries(1, 6, None, GetEntriesContext::empty(false))
            .unwrap();
        assert_eq!(indexes(&all), vec![1, 2, 3, 4, 5]);
    }

    #[test]
    fn a_missing_snapshot_file_is_temporarily_unavailable() {
        assert!(matches!(
            store().snapshot(0, 2),
            Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable
            ))
        ));
    }
}
