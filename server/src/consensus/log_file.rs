//! A group's Raft log on disk: its entries and hard state, appended as framed records
//! (`[length u32][crc32c u32][kind u8][body]`, little-endian, the CRC over kind and body)
//! and fdatasynced before the Ready that produced them is advanced, as Raft requires.
//!
//! An entry whose index is at or below the last one read replaces the log from there (a
//! new leader overwrote an uncommitted tail). A record cut short or failing its CRC ends
//! the log: the file is cut there (a crash mid-append), and Raft refetches what a quorum
//! has from the leader.
//!
//! Compaction rewrites the file ([`LogFile::rewrite`]) with only the entries after the
//! group's snapshot (`consensus::snapshot_file`); at open, entries the snapshot holds are
//! skipped (a crash between the snapshot and the rewrite leaves them).

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use protobuf::Message as _;
use raft::eraftpb::{Entry, HardState};

const KIND_ENTRY: u8 = 1;
const KIND_HARD_STATE: u8 = 2;
const HEADER: usize = 9;
/// A record larger than this is taken for damage (a turn's records are far smaller).
const RECORD_MAX: usize = 256 << 20;

pub struct LogFile {
    file: File,
    path: PathBuf,
    /// Where the next record goes, and the file's length: zeros are written and synced
    /// ahead of `end` (see [`PREALLOCATE_BYTES`]).
    end: u64,
    allocated: u64,
    /// How far ahead it is extended at a time ([`PREALLOCATE_BYTES`]; a simulation's
    /// logs, on tmpfs, take less).
    chunk: u64,
}

/// The log is extended by this many zero bytes, synced, when it is opened and whenever a
/// write would pass its end, so that a Ready's fdatasync flushes data blocks only (an
/// append that grows the file must also write its inode), as the journal does under
/// `appendfsync always` (docs/DURABILITY.md, "Group commit"). Zeros after the last record
/// read as the log's end. With 1 MiB, the extension (a write and an fsync on the log
/// writer's path) came every thousand entries and put 22-28 ms into the p99.9 of writes
/// (3 nodes, 16 connections); at 32 MiB it is paid at the start and then once per 32 MiB.
pub const PREALLOCATE_BYTES: u64 = 32 << 20;

/// What a log file held.
#[derive(Default, Debug)]
pub struct Loaded {
    pub entries: Vec<Entry>,
    pub hard_state: HardState,
}

impl LogFile {
    pub fn path(dir: &Path, shard: usize) -> PathBuf {
        dir.join(format!("raft-{shard}.log"))
    }

    /// Opens (creating) the log at `path` and reads it.
    #[cfg(test)]
    pub fn open(path: &Path) -> Result<(LogFile, Loaded), String> {
        Self::open_extending(path, PREALLOCATE_BYTES)
    }

    /// [`LogFile::open`], extending the file `chunk` bytes at a time.
    pub fn open_extending(path: &Path, chunk: u64) -> Result<(LogFile, Loaded), String> {
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| format!("cannot open the Raft log {}: {e}", path.display()))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read the Raft log {}: {e}", path.display()))?;
        let (loaded, good) = read(&bytes);
        let mut allocated = bytes.len() as u64;
        if bytes[good..].iter().any(|&b| b != 0) {
            tracing::warn!(
                path = %path.display(),
                kept = good,
                dropped = bytes.len() - good,
                "the Raft log ends in a damaged record: cut there"
            );
            file.set_len(good as u64)
                .and_then(|()| file.sync_all())
                .map_err(|e| format!("cannot cut the Raft log {}: {e}", path.display()))?;
            allocated = good as u64;
        }
        let mut log = LogFile {
            file,
            path: path.to_path_buf(),
            end: good as u64,
            allocated,
            chunk,
        };
        log.preallocate(log.end + 1)
            .map_err(|e| format!("cannot extend the Raft log {}: {e}", path.display()))?;
        Ok((log, loaded))
    }

    /// Writes records `encode` made, and syncs them.
    pub fn write_synced(&mut self, bytes: &[u8]) -> Result<(), String> {
        if bytes.is_empty() {
            return Ok(());
        }
        let end = self.end + bytes.len() as u64;
        self.preallocate(end)
            .and_then(|()| self.file.write_all_at(bytes, self.end))
            .and_then(|()| self.file.sync_data())
            .map_err(|e| format!("cannot write the Raft log {}: {e}", self.path.display()))?;
        self.end = end;
        Ok(())
    }

    /// Replaces the whole log with the records in `bytes` (a compaction, or a snapshot
    /// installed): written to a new file, synced, and renamed over the old one.
    pub fn rewrite(&mut self, bytes: &[u8]) -> Result<(), String> {
        let fresh = self.path.with_extension("log.new");
        let shown = fresh.display().to_string();
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&fresh)
            .map_err(|e| format!("cannot create {shown}: {e}"))?;
        let mut log = LogFile {
            file,
            path: self.path.clone(),
            end: 0,
            allocated: 0,
            chunk: self.chunk,
        };
        log.preallocate(bytes.len() as u64 + 1)
            .and_then(|()| log.file.write_all_at(bytes, 0))
            .and_then(|()| log.file.sync_all())
            .map_err(|e| format!("cannot write {shown}: {e}"))?;
        log.end = bytes.len() as u64;
        std::fs::rename(&fresh, &self.path).map_err(|e| format!("cannot rename {shown}: {e}"))?;
        if let Some(dir) = self.path.parent() {
            crate::persist::files::sync_dir(dir)
                .map_err(|e| format!("cannot sync {}: {e}", dir.display()))?;
        }
        *self = log;
        Ok(())
    }

    fn preallocate(&mut self, end: u64) -> std::io::Result<()> {
        if end <= self.allocated {
            return Ok(());
        }
        let target = end.next_multiple_of(self.chunk);
        let zeros = vec![0u8; (target - self.allocated) as usize];
        self.file.write_all_at(&zeros, self.allocated)?;
        self.file.sync_all()?;
        self.allocated = target;
        Ok(())
    }
}

/// Appends the records of `entries` and the hard state to `out`.
pub fn encode(entries: &[Entry], hard_state: Option<&HardState>, out: &mut Vec<u8>) {
    for entry in entries {
        let body = entry.write_to_bytes().expect("an entry encodes");
        frame(out, KIND_ENTRY, &body);
    }
    if let Some(hs) = hard_state {
        let body = hs.write_to_bytes().expect("a hard state encodes");
        frame(out, KIND_HARD_STATE, &body);
    }
}

fn frame(out: &mut Vec<u8>, kind: u8, body: &[u8]) {
    let mut crc = crc32c::crc32c(&[kind]);
    crc = crc32c::crc32c_append(crc, body);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc.to_le_bytes());
    out.push(kind);
    out.extend_from_slice(body);
}

/// The log `bytes` hold, and how many of them are whole, valid records.
fn read(bytes: &[u8]) -> (Loaded, usize) {
    let mut loaded = Loaded::default();
    let mut at = 0;
    while bytes.len() - at >= HEADER {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes"));
        let kind = bytes[at + 8];
        if len > RECORD_MAX || bytes.len() - at - HEADER < len {
            break;
        }
        let body = &bytes[at + HEADER..at + HEADER + len];
        if crc32c::crc32c_append(crc32c::crc32c(&[kind]), body) != crc {
            break;
        }
        let ok = match kind {
            KIND_ENTRY => Entry::parse_from_bytes(body)
                .ok()
                .is_some_and(|entry| place(&mut loaded.entries, entry)),
            KIND_HARD_STATE => HardState::parse_from_bytes(body)
                .map(|hs| loaded.hard_state = hs)
                .is_ok(),
            _ => false,
        };
        if !ok {
            break;
        }
        at += HEADER + len;
    }
    (loaded, at)
}

/// Puts `entry` at its index, dropping what followed; false on a gap.
fn place(entries: &mut Vec<Entry>, entry: Entry) -> bool {
    let Some(first) = entries.first().map(|e| e.index) else {
        entries.push(entry);
        return true;
    };
    let last = entries.last().map_or(0, |e| e.index);
    if entry.index > last + 1 || entry.index < first {
        return false;
    }
    entries.truncate((entry.index - first) as usize);
    entries.push(entry);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, term: u64, data: &str) -> Entry {
        Entry {
            index,
            term,
            data: bytes::Bytes::copy_from_slice(data.as_bytes()),
            ..Default::default()
        }
    }

    fn append(log: &mut LogFile, entries: &[Entry], hs: Option<&HardState>) {
        let mut bytes = Vec::new();
        encode(entries, hs, &mut bytes);
        log.write_synced(&bytes).unwrap();
    }

    fn temp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("wetask-raftlog-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        LogFile::path(&dir, 0)
    }

    #[test]
    fn entries_and_hard_state_survive_a_reopen_and_a_later_entry_replaces_the_tail() {
        let path = temp("reopen");
        let (mut log, loaded) = LogFile::open(&path).unwrap();
        assert!(loaded.entries.is_empty());
        let hs = HardState {
            term: 2,
            vote: 3,
            commit: 1,
            ..Default::default()
        };
        append(
            &mut log,
            &[entry(1, 1, "a"), entry(2, 1, "b"), entry(3, 1, "c")],
            Some(&hs),
        );
        drop(log);
        // Reopened: writing goes on after the last record, not after the zeros.
        let (mut log, _) = LogFile::open(&path).unwrap();
        append(&mut log, &[entry(2, 2, "B")], None);
        drop(log);
        // One preallocated stretch, still ending in zeros.
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() as u64, PREALLOCATE_BYTES);
        assert!(bytes[bytes.len() - 4096..].iter().all(|&b| b == 0));
        let (_, loaded) = LogFile::open(&path).unwrap();
        let got: Vec<_> = loaded.entries.iter().map(|e| (e.index, e.term)).collect();
        assert_eq!(got, vec![(1, 1), (2, 2)]);
        assert_eq!(&loaded.entries[1].data[..], b"B");
        assert_eq!((loaded.hard_state.term, loaded.hard_state.vote), (2, 3));
    }

    #[test]
    fn a_torn_or_damaged_tail_is_cut_and_the_rest_kept() {
        let path = temp("torn");
        let mut records = Vec::new();
        encode(
            &[entry(1, 1, "one"), entry(2, 1, "two")],
            None,
            &mut records,
        );
        for cut in [records.len() - 1, records.len() - 5, records.len() - 12] {
            // Cut short, at the file's end or followed by preallocated zeros.
            for zeros in [0, 4096] {
                let mut bytes = records[..cut].to_vec();
                bytes.resize(cut + zeros, 0);
                std::fs::write(&path, &bytes).unwrap();
                let (mut log, loaded) = LogFile::open(&path).unwrap();
                assert_eq!(loaded.entries.len(), 1, "cut at {cut}");
                // The next write lands where the whole records end.
                append(&mut log, &[entry(2, 2, "again")], None);
                drop(log);
                let (_, loaded) = LogFile::open(&path).unwrap();
                assert_eq!(loaded.entries.len(), 2);
                assert_eq!(&loaded.entries[1].data[..], b"again");
            }
        }
        let mut flipped = records.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0xff;
        std::fs::write(&path, &flipped).unwrap();
        assert_eq!(LogFile::open(&path).unwrap().1.entries.len(), 1);
    }

    #[test]
    fn a_rewrite_keeps_only_its_records_and_appends_go_on_after_them() {
        let path = temp("rewrite");
        let (mut log, _) = LogFile::open(&path).unwrap();
        append(
            &mut log,
            &[entry(1, 1, "a"), entry(2, 1, "b"), entry(3, 1, "c")],
            None,
        );
        let hs = HardState {
            term: 1,
            commit: 3,
            ..Default::default()
        };
        let mut kept = Vec::new();
        encode(&[entry(3, 1, "c")], Some(&hs), &mut kept);
        log.rewrite(&kept).unwrap();
        append(&mut log, &[entry(4, 1, "d")], None);
        drop(log);
        let (_, loaded) = LogFile::open(&path).unwrap();
        let got: Vec<_> = loaded.entries.iter().map(|e| e.index).collect();
        assert_eq!(got, vec![3, 4]);
        assert_eq!(loaded.hard_state.commit, 3);
        assert!(!path.with_extension("log.new").exists());
    }

    #[test]
    fn a_gap_ends_the_log() {
        let mut entries = vec![entry(1, 1, "a")];
        assert!(!place(&mut entries, entry(3, 1, "c")));
        assert!(place(&mut entries, entry(2, 1, "b")));
        assert!(!place(&mut entries, entry(0, 1, "z")));
    }
}
