//! A group's Raft snapshot on disk: `raft-<shard>.snapshot` in the Raft directory, the
//! shard's state at a committed index, in the snapshot files' framing (`persist::load`:
//! CRC-checked records, a header, the shard's parts, an end record with their count). Its
//! header names the index and term of the last entry it holds, and the group's members at
//! that entry with their addresses ([`Meta`]).
//!
//! Two writers may race: the shard's snapshot thread (`consensus::snapshotter`) and the
//! shard installing a snapshot its leader sent. Each writes a file of its own, synced, and
//! [`Snapshots::promote`] renames it into place only if it is newer than the one there.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use bytes::Bytes;
use wetask_shards::persist::journal::record;
use wetask_shards::Shard;

use super::peers::{parse_one, Peer};

const MAGIC: &str = "wetask-raft-snapshot 1";

/// What a snapshot's header says: the last entry it holds, and the group's members then
/// (with their addresses), and which of them are learners (they do not vote yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    pub index: u64,
    pub term: u64,
    pub members: Vec<Peer>,
    pub learners: Vec<u64>,
}

impl Meta {
    /// Every member's id, in order.
    pub fn member_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.members.iter().map(|p| p.id).collect();
        ids.sort_unstable();
        ids
    }

    /// The voting members' ids, in order.
    pub fn voters(&self) -> Vec<u64> {
        let mut ids = self.member_ids();
        ids.retain(|id| !self.learners.contains(id));
        ids
    }

    /// Raft's configuration: the voters and the learners.
    pub fn conf_state(&self) -> raft::eraftpb::ConfState {
        raft::eraftpb::ConfState::from((self.voters(), self.learners.clone()))
    }
}

/// The snapshot files of one shard's group.
pub struct Snapshots {
    dir: PathBuf,
    shard: usize,
    /// The index of the snapshot in place (0: none).
    installed: Mutex<u64>,
}

impl Snapshots {
    pub fn new(dir: &Path, shard: usize) -> Snapshots {
        Snapshots {
            dir: dir.to_path_buf(),
            shard,
            installed: Mutex::new(0),
        }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(format!("raft-{}.snapshot", self.shard))
    }

    fn pending(&self, index: u64) -> PathBuf {
        self.dir
            .join(format!("raft-{}.snapshot-{index}.new", self.shard))
    }

    /// Loads the snapshot in place, if any, into a fresh `shard`: what its header says.
    pub fn load(&self, shard: &mut Shard) -> Result<Option<Meta>, String> {
        let path = self.path();
        let data = match std::fs::read(&path) {
            Ok(data) => data,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        let found = import(&data, shard).map_err(|e| format!("{}: {e}", path.display()))?;
        *self.installed.lock().expect("snapshots") = found.index;
        Ok(Some(found))
    }

    /// Writes `shard`'s state as the snapshot `meta` describes and puts it in place
    /// unless a newer one is there. Returns its size (0: it was not needed).
    pub fn write(&self, meta: &Meta, shard: &mut Shard) -> Result<u64, String> {
        let pending = self.pending(meta.index);
        let size = crate::persist::load::write_framed(
            &self.dir,
            &pending,
            &header(self.shard, meta),
            &mut |part| shard.export_snapshot(part),
        )?;
        Ok(if self.promote(&pending, meta.index)? {
            size
        } else {
            0
        })
    }

    /// Puts a snapshot the leader sent in place (written and synced first); what its
    /// header says. The caller loads it into the shard (`import`).
    pub fn install(&self, data: &[u8]) -> Result<Meta, String> {
        let meta = check(data)?;
        let pending = self.pending(meta.index);
        let shown = pending.display();
        let mut file =
            std::fs::File::create(&pending).map_err(|e| format!("cannot create {shown}: {e}"))?;
        file.write_all(data)
            .and_then(|()| file.sync_all())
            .map_err(|e| format!("cannot write {shown}: {e}"))?;
        self.promote(&pending, meta.index)?;
        Ok(meta)
    }

    /// Puts a snapshot the leader streamed in place: its file at `path` (synced by the
    /// transport), held in `data`, checked whole and renamed into place; what its header
    /// says. The caller loads `data` into the shard (`import`).
    pub fn install_file(&self, path: &Path, data: &[u8]) -> Result<Meta, String> {
        let meta = check(data)?;
        self.promote(path, meta.index)?;
        Ok(meta)
    }

    /// Deletes the streamed snapshots a run left behind unstepped
    /// (`raft-<shard>.snapshot-from-….incoming`, `consensus::transport`).
    pub fn remove_incoming(&self) {
        let prefix = format!("raft-{}.snapshot-from-", self.shard);
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(&prefix) && name.ends_with(".incoming") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    /// Renames `pending` into place if its `index` is past the one there; false (and
    /// `pending` removed) otherwise.
    fn promote(&self, pending: &Path, index: u64) -> Result<bool, String> {
        {
            let mut installed = self.installed.lock().expect("snapshots");
            if index <= *installed {
                let _ = std::fs::remove_file(pending);
                return Ok(false);
            }
            std::fs::rename(pending, self.path())
                .map_err(|e| format!("cannot rename {}: {e}", pending.display()))?;
            *installed = index;
        }
        crate::persist::files::sync_dir(&self.dir)
            .map_err(|e| format!("cannot sync {}: {e}", self.dir.display()))?;
        Ok(true)
    }
}

/// `MAGIC shard index term members [learners=id,id]` (the learners' field only when
/// there are some, so a header without learners reads as it always did).
fn header(shard: usize, meta: &Meta) -> String {
    let members: Vec<String> = meta.members.iter().map(Peer::to_string).collect();
    let mut header = format!(
        "{MAGIC} {shard} {} {} {}",
        meta.index,
        meta.term,
        members.join(",")
    );
    if !meta.learners.is_empty() {
        let learners: Vec<String> = meta.learners.iter().map(u64::to_string).collect();
        header.push_str(&format!(" {LEARNERS}{}", learners.join(",")));
    }
    header
}

/// The header's learners field's prefix.
const LEARNERS: &str = "learners=";

/// The snapshot of a shard that holds nothing: a founding member's first, at the group's
/// start (`shard::raft::START`), where its log begins. A node that joins later is sent a
/// snapshot, never the entries before it, so it learns the members from a header.
pub fn empty(shard: usize, meta: &Meta) -> Vec<u8> {
    let mut out = Vec::new();
    record::append(&mut out, header(shard, meta).as_bytes());
    record::append(&mut out, b"end 0");
    out
}

/// What the header of the snapshot file at `path` says, reading that record only (the
/// leader asks before it streams a snapshot).
pub fn read_meta(path: &Path) -> Result<Meta, String> {
    let shown = path.display();
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open {shown}: {e}"))?;
    header_of(&file).map_err(|e| format!("{shown}: {e}"))
}

/// The header record of the snapshot file `file`, read from where it stands.
fn header_of(file: &std::fs::File) -> Result<Meta, String> {
    use std::io::Read;
    let mut head = Vec::new();
    file.take(record::HEADER_BYTES as u64 + 64 * 1024)
        .read_to_end(&mut head)
        .map_err(|e| format!("cannot read: {e}"))?;
    match record::read(&head, 0) {
        record::Next::Record { payload, .. } => parse_header(payload),
        _ => Err("a damaged header".into()),
    }
}

/// Opens the snapshot file at `path` to stream it (`consensus::transport`), if it holds
/// entry (`index`, `term`): the file, at its start, and its length. A newer snapshot may
/// have been renamed into place since raft-rs asked for this one.
pub fn open_to_send(path: &Path, index: u64, term: u64) -> Result<(std::fs::File, u64), String> {
    use std::io::Seek;
    let shown = path.display();
    let mut file = std::fs::File::open(path).map_err(|e| format!("cannot open {shown}: {e}"))?;
    let meta = header_of(&file).map_err(|e| format!("{shown}: {e}"))?;
    if (meta.index, meta.term) != (index, term) {
        return Err(format!(
            "{shown} now holds entry ({}, {}), not ({index}, {term})",
            meta.index, meta.term
        ));
    }
    let len = file
        .metadata()
        .map_err(|e| format!("cannot read {shown}: {e}"))?
        .len();
    file.rewind()
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    Ok((file, len))
}

/// Checks every record of a snapshot file held in `data` (header, checksums, the end
/// record's count); what its header says.
pub fn check(data: &[u8]) -> Result<Meta, String> {
    let mut found = None;
    parts(data, &mut |_| Ok(()), &mut found)?;
    found.ok_or_else(|| "a Raft snapshot without a header".to_string())
}

/// Loads the snapshot file held in `data` into a fresh `shard`, checked whole first (a
/// damaged one must not leave the shard half loaded); what its header says.
pub fn import(data: &[u8], shard: &mut Shard) -> Result<Meta, String> {
    check(data)?;
    let mut found = None;
    parts(
        data,
        &mut |part| shard.import_snapshot_part(Bytes::copy_from_slice(part)),
        &mut found,
    )?;
    shard.finish_snapshot()?;
    found.ok_or_else(|| "a Raft snapshot without a header".to_string())
}

/// Hands each part to `each`, and what the header says to `found`.
fn parts(
    data: &[u8],
    each: &mut dyn FnMut(&[u8]) -> Result<(), String>,
    found: &mut Option<Meta>,
) -> Result<(), String> {
    let mut at = 0;
    let mut count = 0u64;
    loop {
        let payload = match record::read(data, at) {
            record::Next::Record { payload, end } => {
                at = end;
                payload
            }
            _ => return Err("a Raft snapshot is damaged or cut short".into()),
        };
        if found.is_none() {
            *found = Some(parse_header(payload)?);
            continue;
        }
        if let Some(end) = payload.strip_prefix(b"end ") {
            let said = std::str::from_utf8(end).ok().and_then(|c| c.parse().ok());
            if said != Some(count) || at != data.len() {
                return Err("a Raft snapshot's end record does not match it".into());
            }
            return Ok(());
        }
        each(payload)?;
        count += 1;
    }
}

fn parse_header(payload: &[u8]) -> Result<Meta, String> {
    let damaged = || "a Raft snapshot's header is damaged".to_string();
    let text = std::str::from_utf8(payload).map_err(|_| "not a Raft snapshot")?;
    let rest = text
        .strip_prefix(MAGIC)
        .ok_or("not a Raft snapshot (its header)")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let (index, term, members, learners) = match fields[..] {
        [_shard, index, term, members] => (index, term, members, ""),
        [_shard, index, term, members, learners] => (
            index,
            term,
            members,
            learners.strip_prefix(LEARNERS).ok_or_else(damaged)?,
        ),
        _ => return Err(damaged()),
    };
    let members = members
        .split(',')
        .map(parse_one)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", damaged()))?;
    let learners = learners
        .split(',')
        .filter(|id| !id.is_empty())
        .map(|id| id.parse::<u64>().map_err(|_| damaged()))
        .collect::<Result<Vec<_>, _>>()?;
    if learners
        .iter()
        .any(|id| !members.iter().any(|m| m.id == *id))
    {
        return Err(format!("{}: a learner that is not a member", damaged()));
    }
    match (index.parse(), term.parse()) {
        (Ok(index), Ok(term)) => Ok(Meta {
            index,
            term,
            members,
            learners,
        }),
        _ => Err(damaged()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("wetask-raftsnap-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn meta(index: u64, term: u64) -> Meta {
        let members = super::super::peers::parse("1=a:1,2=b:2,3=c:3", 1).unwrap();
        Meta {
            index,
            term,
            members,
            learners: Vec::new(),
        }
    }

    fn shard_with(keys: usize) -> Shard {
        let mut shard = Shard::new(0);
        for i in 0..keys {
            shard
                .db(0)
                .insert_new_str(format!("k{i}").as_bytes(), b"v", 0);
        }
        shard
    }

    #[test]
    fn a_snapshot_round_trips_and_an_older_one_does_not_replace_a_newer() {
        let dir = temp("round");
        let snapshots = Snapshots::new(&dir, 0);
        assert_eq!(snapshots.load(&mut Shard::new(0)).unwrap(), None);
        assert!(snapshots.write(&meta(10, 2), &mut shard_with(3)).unwrap() > 0);
        // A snapshot the leader sent, newer: in place.
        let newer = std::fs::read(snapshots.path()).unwrap();
        let mut other = Snapshots::new(&temp("other"), 0);
        other.write(&meta(20, 3), &mut shard_with(5)).unwrap();
        let sent = std::fs::read(other.path()).unwrap();
        assert_eq!(snapshots.install(&sent).unwrap(), meta(20, 3));
        // The snapshot thread finishing an older one afterwards changes nothing.
        assert_eq!(
            snapshots.write(&meta(15, 2), &mut shard_with(4)).unwrap(),
            0
        );
        let mut loaded = Shard::new(0);
        assert_eq!(snapshots.load(&mut loaded).unwrap(), Some(meta(20, 3)));
        assert_eq!(read_meta(&snapshots.path()).unwrap(), meta(20, 3));
        assert_eq!(loaded.db(0).len(), 5);
        assert_eq!(check(&newer).unwrap(), meta(10, 2));
        // The empty snapshot of a group's start loads as a shard with nothing.
        let start = empty(0, &meta(5, 5));
        let mut nothing = shard_with(2);
        nothing.begin_full_sync();
        assert_eq!(import(&start, &mut nothing).unwrap(), meta(5, 5));
        assert_eq!(nothing.db(0).len(), 0);
        other = Snapshots::new(&dir, 0);
        drop(other);
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(leftovers, vec!["raft-0.snapshot".to_string()]);
    }

    #[test]
    fn a_header_names_its_learners_and_one_without_them_reads_as_before() {
        let with = Meta {
            learners: vec![3],
            ..meta(7, 2)
        };
        let text = header(0, &with);
        assert!(text.ends_with(" learners=3"), "{text}");
        assert_eq!(parse_header(text.as_bytes()).unwrap(), with);
        assert_eq!(with.voters(), vec![1, 2]);
        assert_eq!(with.member_ids(), vec![1, 2, 3]);
        assert_eq!(with.conf_state().learners, vec![3]);
        let without = header(0, &meta(7, 2));
        assert_eq!(without.split_whitespace().count(), 6, "{without}");
        assert_eq!(parse_header(without.as_bytes()).unwrap(), meta(7, 2));
        // A learner that is not a member, or a field that is not the learners', is damage.
        let stray = format!("{without} learners=9");
        assert!(parse_header(stray.as_bytes()).is_err());
        let other = format!("{without} voters=1");
        assert!(parse_header(other.as_bytes()).is_err());
    }

    #[test]
    fn a_damaged_or_cut_snapshot_is_refused_before_it_loads() {
        let dir = temp("damaged");
        let snapshots = Snapshots::new(&dir, 0);
        snapshots.write(&meta(7, 1), &mut shard_with(50)).unwrap();
        let good = std::fs::read(snapshots.path()).unwrap();
        let mut flipped = good.clone();
        let middle = flipped.len() / 2;
        flipped[middle] ^= 0x40;
        for bad in [&good[..good.len() - 3], &flipped[..], &good[..0]] {
            assert!(check(bad).is_err());
            let mut shard = Shard::new(0);
            assert!(import(bad, &mut shard).is_err());
            assert_eq!(shard.db(0).len(), 0, "nothing half loaded");
            assert!(snapshots.install(bad).is_err());
        }
        let mut extra = good.clone();
        record::append(&mut extra, b"more");
        assert!(check(&extra).is_err());
    }
}
