//! Loading a shard from its files: the newest snapshot, then the journal segments after it.
//! Used at start (which may repair a torn tail or, if allowed, damage), by the compactor
//! (which only reads, and refuses anything but whole files) and by resharding.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use bytes::Bytes;
use wetask_shards::persist::journal::{ops, record};
use wetask_shards::shard::cross_commit::{OpenPart, Replay};
use wetask_shards::Shard;

use super::files;

const SNAPSHOT_MAGIC: &str = "wetask-snapshot 1";

/// What a load may do with a damaged journal.
#[derive(Clone, Copy, Debug)]
pub struct Repair {
    /// Drop a torn tail of the last segment (and truncate the file there).
    pub truncated: bool,
    /// Load up to damage anywhere (keeping a copy of the damaged file).
    pub corrupt: bool,
    /// Change files at all (a start does; the compactor and resharding only read).
    pub write: bool,
}

/// What a load found.
#[derive(Debug, Default)]
pub struct Loaded {
    pub snapshot: Option<u64>,
    pub snapshot_bytes: u64,
    /// Journal generations replayed, ascending, and their bytes.
    pub journals: Vec<u64>,
    pub journal_bytes: u64,
    /// The length of the last segment kept.
    pub last_len: u64,
    pub records: usize,
    pub operations: usize,
    /// A cross-shard operation's part at the journal's end whose commit this shard cannot
    /// see: the caller resolves it (`wetask_shards::shard::cross_commit`).
    pub open: Option<OpenPart>,
}

pub fn load_shard(
    dir: &Path,
    id: usize,
    layout: files::Layout,
    shard: &mut Shard,
    repair: Repair,
) -> Result<Loaded, String> {
    let found =
        files::list(dir, id, layout).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    let (base, journals) = found.plan();
    let mut loaded = Loaded {
        snapshot: base,
        ..Loaded::default()
    };
    if let Some(gen) = base {
        loaded.snapshot_bytes = read_snapshot(&files::snapshot(dir, id, layout, gen), shard)?;
    }
    let last = journals.last().copied();
    let mut replay = Replay::default();
    for gen in journals {
        let path = files::journal(dir, id, layout, gen);
        let is_last = Some(gen) == last;
        let kept = replay_journal(&path, shard, &mut replay, is_last, repair, &mut loaded)?;
        loaded.journal_bytes += kept;
        if is_last {
            loaded.last_len = kept;
        }
        loaded.journals.push(gen);
    }
    loaded.open = replay.finish();
    Ok(loaded)
}

/// Replays one segment into `shard`; returns the bytes kept.
fn replay_journal(
    path: &Path,
    shard: &mut Shard,
    replay: &mut Replay,
    is_last: bool,
    repair: Repair,
    loaded: &mut Loaded,
) -> Result<u64, String> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read the journal {shown}: {e}"))?;
    let mut at = 0;
    let keep = loop {
        match record::read(&bytes, at) {
            record::Next::Record { payload, end } => {
                match ops::read_ops(Bytes::copy_from_slice(payload)) {
                    Ok(list) => {
                        loaded.operations += list.len();
                        for op in list {
                            replay.op(shard, op).map_err(|e| {
                                format!("journal {shown}: the record at byte {at} cannot be replayed: {e}")
                            })?;
                        }
                    }
                    Err(e) => {
                        damaged(path, at, e.0, repair)?;
                        break at;
                    }
                }
                loaded.records += 1;
                at = end;
            }
            record::Next::End => break at,
            record::Next::TornTail { at } if preallocated(&bytes[at..]) => break at,
            record::Next::TornTail { at } if is_last && repair.truncated => {
                tracing::warn!(
                    journal = %shown,
                    offset = at,
                    dropped_bytes = bytes.len() - at,
                    "journal ends in a torn record (a crash mid-write): dropped"
                );
                break at;
            }
            record::Next::TornTail { at } if is_last => {
                return Err(format!(
                    "journal {shown} ends in a torn record at byte {at} (a crash mid-write); \
                     start with --aof-load-truncated yes to drop it"
                ));
            }
            // A segment before the last was synced whole when the next one began: a torn
            // end there is damage.
            record::Next::TornTail { at } => {
                damaged(path, at, "a segment before the last ends early", repair)?;
                break at;
            }
            record::Next::Corrupt { at, reason } => {
                damaged(path, at, reason, repair)?;
                break at;
            }
        }
    };
    if keep < bytes.len() && repair.write {
        cut(path, keep as u64)?;
    }
    Ok(keep as u64)
}

/// Cuts a journal segment to its first `keep` bytes (synced).
fn cut(path: &Path, keep: u64) -> Result<(), String> {
    let shown = path.display();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| format!("cannot open {shown}: {e}"))?;
    file.set_len(keep)
        .and_then(|()| file.sync_all())
        .map_err(|e| format!("cannot truncate the journal {shown}: {e}"))
}

/// Zeros from a record boundary on: preallocated space not used yet, the journal's end (a
/// record that never reached the disk at all was never acknowledged either).
fn preallocated(rest: &[u8]) -> bool {
    rest.iter().all(|&b| b == 0)
}

/// Damage before the end of a journal: an error, or with `aof-load-corrupt yes` a copy of
/// the file and a load up to `at`.
fn damaged(path: &Path, at: usize, reason: &str, repair: Repair) -> Result<(), String> {
    let shown = path.display();
    if !(repair.corrupt && repair.write) {
        return Err(format!(
            "journal {shown} is damaged at byte {at} ({reason}); to load what precedes it, \
             start with --aof-load-corrupt yes (a copy of the file is kept)"
        ));
    }
    let copy = path.with_extension(format!("corrupt-{}", crate::clock::unix_ms()));
    std::fs::copy(path, &copy).map_err(|e| format!("cannot copy {shown}: {e}"))?;
    tracing::error!(
        journal = %shown,
        offset = at,
        reason,
        copy = %copy.display(),
        "journal damaged: loading what precedes the damage (aof-load-corrupt yes)"
    );
    Ok(())
}

/// Reads one framed record from a stream; `None` at a clean end of file.
fn next_record(reader: &mut impl Read, shown: &str) -> Result<Option<Vec<u8>>, String> {
    let mut header = [0u8; record::HEADER_BYTES];
    match reader.read_exact(&mut header) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(format!("cannot read {shown}: {e}")),
    }
    let length = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
    if length > record::PAYLOAD_BYTES_MAX {
        return Err(format!(
            "snapshot {shown} is damaged (a record claims {length} bytes)"
        ));
    }
    let mut buf = Vec::with_capacity(record::HEADER_BYTES + length);
    buf.extend_from_slice(&header);
    buf.resize(record::HEADER_BYTES + length, 0);
    reader
        .read_exact(&mut buf[record::HEADER_BYTES..])
        .map_err(|e| format!("snapshot {shown} is damaged (it ends inside a record: {e})"))?;
    match record::read(&buf, 0) {
        record::Next::Record { payload, .. } => Ok(Some(payload.to_vec())),
        _ => Err(format!(
            "snapshot {shown} is damaged (a record's checksum fails)"
        )),
    }
}

/// Loads a snapshot into a fresh `shard`; returns its size. A snapshot is written whole and
/// renamed into place, so any damage is an error.
pub fn read_snapshot(path: &Path, shard: &mut Shard) -> Result<u64, String> {
    let shown = path.display().to_string();
    let file = File::open(path).map_err(|e| format!("cannot open the snapshot {shown}: {e}"))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let header = next_record(&mut reader, &shown)?.ok_or(format!("snapshot {shown} is empty"))?;
    if !header.starts_with(SNAPSHOT_MAGIC.as_bytes()) {
        return Err(format!("{shown} is not a wetask snapshot"));
    }
    let mut parts = 0u64;
    loop {
        let part = next_record(&mut reader, &shown)?.ok_or(format!(
            "snapshot {shown} is damaged (it has no end record)"
        ))?;
        if let Some(count) = part.strip_prefix(b"end ") {
            if std::str::from_utf8(count).ok().and_then(|c| c.parse().ok()) != Some(parts) {
                return Err(format!(
                    "snapshot {shown} is damaged (its part count is wrong)"
                ));
            }
            break;
        }
        shard
            .import_snapshot_part(Bytes::from(part))
            .map_err(|e| format!("snapshot {shown}: {e}"))?;
        parts += 1;
    }
    shard
        .finish_snapshot()
        .map_err(|e| format!("snapshot {shown}: {e}"))?;
    Ok(size)
}

/// Hands each part of the snapshot file `file` to `each`, in order (a replica's full sync:
/// `crate::replication::sender`). The header and end records are checked, not handed on.
pub fn snapshot_parts(
    file: File,
    shown: &str,
    each: &mut dyn FnMut(&[u8]) -> Result<(), String>,
) -> Result<(), String> {
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let header = next_record(&mut reader, shown)?.ok_or(format!("snapshot {shown} is empty"))?;
    if !header.starts_with(SNAPSHOT_MAGIC.as_bytes()) {
        return Err(format!("{shown} is not a wetask snapshot"));
    }
    loop {
        let part = next_record(&mut reader, shown)?.ok_or(format!(
            "snapshot {shown} is damaged (it has no end record)"
        ))?;
        if part.starts_with(b"end ") {
            return Ok(());
        }
        each(&part)?;
    }
}

/// Writes `shard`'s state as snapshot `gen` of shard `id`: into a temporary file, synced,
/// then renamed into place (and the directory synced). Returns its size.
pub fn write_snapshot(
    dir: &Path,
    id: usize,
    layout: files::Layout,
    gen: u64,
    shard: &mut Shard,
) -> Result<u64, String> {
    let path = files::snapshot(dir, id, layout, gen);
    write_framed(
        dir,
        &path,
        &format!("{SNAPSHOT_MAGIC} {id} {layout} {gen}"),
        &mut |part| shard.export_snapshot(part),
    )
}

/// What hands a snapshot's parts, one call each, to the sink it is given.
pub type Exporter<'a> = dyn FnMut(&mut dyn FnMut(&[u8])) + 'a;

/// Writes a snapshot file at `path` (in `dir`): the `header` record, every part `export`
/// hands over, and the end record, into a temporary file, synced, renamed into place, and
/// the directory synced. Returns its size.
pub fn write_framed(
    dir: &Path,
    path: &Path,
    header: &str,
    export: &mut Exporter<'_>,
) -> Result<u64, String> {
    let tmp = path.with_extension("snapshot.tmp");
    let shown = tmp.display().to_string();
    let file = File::create(&tmp).map_err(|e| format!("cannot create {shown}: {e}"))?;
    let mut writer = BufWriter::with_capacity(1 << 20, file);
    let mut framed = Vec::new();
    let mut failed: Option<std::io::Error> = None;
    let mut write = |payload: &[u8], writer: &mut BufWriter<File>| {
        framed.clear();
        record::append(&mut framed, payload);
        if failed.is_none() {
            if let Err(e) = writer.write_all(&framed) {
                failed = Some(e);
            }
        }
    };
    write(header.as_bytes(), &mut writer);
    let mut parts = 0u64;
    export(&mut |part| {
        parts += 1;
        write(part, &mut writer);
    });
    write(format!("end {parts}").as_bytes(), &mut writer);
    if let Some(e) = failed {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("cannot write {shown}: {e}"));
    }
    let file = writer
        .into_inner()
        .map_err(|e| format!("cannot write {shown}: {e}"))?;
    file.sync_all()
        .map_err(|e| format!("cannot sync {shown}: {e}"))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    std::fs::rename(&tmp, path).map_err(|e| format!("cannot rename {shown}: {e}"))?;
    files::sync_dir(dir).map_err(|e| format!("cannot sync {}: {e}", dir.display()))?;
    Ok(size)
}

/// A snapshot's header record (for [`write_framed`]): magic, shard, shard count, generation.
pub fn snapshot_header(id: usize, layout: files::Layout, gen: u64) -> String {
    format!("{SNAPSHOT_MAGIC} {id} {layout} {gen}")
}
