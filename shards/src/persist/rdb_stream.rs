//! A stream in Redis's serialization (`rdb`'s stream types 15, 19 and 21): its entries in
//! listpack nodes, each keyed by a master id and opening with a master entry whose field
//! names later entries may share (then only their values are written); then the stream's
//! counters; then its consumer groups with their pending entries and consumers.
//!
//! DUMP writes type 19 (Redis 7.0) with up to `NODE_ENTRIES` entries a node, as Redis's
//! `stream-node-max-entries` default. RESTORE reads types 15 (Redis 5 and 6), 19 and 21
//! (Redis 7.2, which adds a consumer's active time), and checks what it reads: ids in order,
//! the length Redis states, pending entries each owned by one consumer of the group.

use bytes::Bytes;

use crate::persist::rdb_encoding::{
    backlen_size, listpack, put_len, put_string, Read, Reader, BAD,
};
use crate::values::stream::{Consumer, Group, Pending, Stream, StreamId};

/// Entries per listpack node DUMP writes (Redis's `stream-node-max-entries` default).
pub const NODE_ENTRIES: usize = 100;

/// An entry's flags: deleted (skipped on load), and "the master entry's field names".
const FLAG_DELETED: i64 = 1;
const FLAG_SAME_FIELDS: i64 = 2;

/// Redis's `SCG_INVALID_ENTRIES_READ` as `rdbSaveLen` writes it: -1 as unsigned.
const ENTRIES_READ_UNKNOWN: u64 = u64::MAX;

// ---- writing ----

/// A listpack under construction.
#[derive(Default)]
struct ListpackWriter {
    body: Vec<u8>,
    count: usize,
}

impl ListpackWriter {
    fn int(&mut self, n: i64) {
        let start = self.body.len();
        if (0..=127).contains(&n) {
            self.body.push(n as u8);
        } else {
            self.body.push(0xf4);
            self.body.extend_from_slice(&n.to_le_bytes());
        }
        self.end_entry(start);
    }

    fn string(&mut self, s: &[u8]) {
        let start = self.body.len();
        let len = s.len();
        if len < 64 {
            self.body.push(0x80 | len as u8);
        } else if len < 4096 {
            self.body.push(0xe0 | (len >> 8) as u8);
            self.body.push(len as u8);
        } else {
            self.body.push(0xf0);
            self.body.extend_from_slice(&(len as u32).to_le_bytes());
        }
        self.body.extend_from_slice(s);
        self.end_entry(start);
    }

    /// The entry's back-length, as `lpEncodeBacklen` writes it (most significant 7 bits
    /// first, every byte but the first with its high bit set).
    fn end_entry(&mut self, start: usize) {
        let size = self.body.len() - start;
        let n = backlen_size(size);
        for i in (0..n).rev() {
            let group = ((size >> (7 * i)) & 127) as u8;
            self.body.push(if i == n - 1 { group } else { group | 128 });
        }
        self.count += 1;
    }

    fn finish(self) -> Vec<u8> {
        let total = 6 + self.body.len() + 1;
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(&(total as u32).to_le_bytes());
        out.extend_from_slice(&(self.count.min(65_535) as u16).to_le_bytes());
        out.extend_from_slice(&self.body);
        out.push(0xff);
        out
    }
}

fn id_bytes(id: StreamId) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&id.ms.to_be_bytes());
    out[8..].copy_from_slice(&id.seq.to_be_bytes());
    out
}

/// Field names of an entry's flattened field/value pairs.
fn names(fields: &[Bytes]) -> impl Iterator<Item = &Bytes> {
    fields.iter().step_by(2)
}

/// Writes `stream` as Redis 7.0's RDB_TYPE_STREAM_LISTPACKS_2 (after the type byte).
pub(crate) fn put_stream(out: &mut Vec<u8>, stream: &Stream) {
    let entries = stream.range(StreamId::MIN, StreamId::MAX, false, usize::MAX);
    let nodes: Vec<_> = entries.chunks(NODE_ENTRIES).collect();
    put_len(out, nodes.len() as u64);
    for node in nodes {
        let (master, master_fields) = node[0];
        let mut lp = ListpackWriter::default();
        lp.int(node.len() as i64);
        lp.int(0);
        lp.int((master_fields.len() / 2) as i64);
        for name in names(master_fields) {
            lp.string(name);
        }
        lp.int(0);
        for (id, fields) in node {
            let same =
                fields.len() == master_fields.len() && names(fields).eq(names(master_fields));
            lp.int(if same { FLAG_SAME_FIELDS } else { 0 });
            lp.int((id.ms - master.ms) as i64);
            lp.int(id.seq.wrapping_sub(master.seq) as i64);
            let pairs = fields.len() / 2;
            if same {
                fields.iter().skip(1).step_by(2).for_each(|v| lp.string(v));
            } else {
                lp.int(pairs as i64);
                fields.iter().for_each(|f| lp.string(f));
            }
            let lp_count = if same { pairs + 3 } else { 2 * pairs + 4 };
            lp.int(lp_count as i64);
        }
        put_string(out, &id_bytes(master));
        put_string(out, &lp.finish());
    }
    put_len(out, stream.len() as u64);
    put_len(out, stream.last_id.ms);
    put_len(out, stream.last_id.seq);
    let first = stream.first_id().unwrap_or_default();
    put_len(out, first.ms);
    put_len(out, first.seq);
    put_len(out, stream.max_deleted_id.ms);
    put_len(out, stream.max_deleted_id.seq);
    put_len(out, stream.entries_added);
    put_len(out, stream.groups.len() as u64);
    for (name, group) in &stream.groups {
        put_string(out, name);
        put_len(out, group.last_delivered.ms);
        put_len(out, group.last_delivered.seq);
        put_len(out, group.entries_read.unwrap_or(ENTRIES_READ_UNKNOWN));
        put_len(out, group.pending.len() as u64);
        for (id, pending) in &group.pending {
            out.extend_from_slice(&id_bytes(*id));
            out.extend_from_slice(&pending.delivered_ms.to_le_bytes());
            put_len(out, pending.deliveries);
        }
        put_len(out, group.consumers.len() as u64);
        for (name, consumer) in &group.consumers {
            put_string(out, name);
            out.extend_from_slice(&consumer.seen_ms.to_le_bytes());
            put_len(out, consumer.pending.len() as u64);
            for id in &consumer.pending {
                out.extend_from_slice(&id_bytes(*id));
            }
        }
    }
}

// ---- reading ----

fn int_of(entry: &Bytes) -> Read<i64> {
    crate::args::parse_i64(entry).ok_or(BAD)
}

fn id_of(bytes: &[u8]) -> Read<StreamId> {
    if bytes.len() != 16 {
        return Err(BAD);
    }
    Ok(StreamId {
        ms: u64::from_be_bytes(bytes[..8].try_into().expect("8")),
        seq: u64::from_be_bytes(bytes[8..].try_into().expect("8")),
    })
}

fn u64_of(r: &mut Reader<'_>) -> Read<u64> {
    Ok(r.len()? as u64)
}

fn ms_time(r: &mut Reader<'_>) -> Read<u64> {
    Ok(u64::from_le_bytes(r.take(8)?.try_into().expect("8")))
}

/// The entries of one listpack node keyed by `master`, in order, added to `stream`.
fn read_node(stream: &mut Stream, master: StreamId, lp: &[Bytes]) -> Read<()> {
    let mut it = lp.iter();
    let mut next = || it.next().ok_or(BAD);
    let _count = int_of(next()?)?;
    let _deleted = int_of(next()?)?;
    let master_fields = usize::try_from(int_of(next()?)?).map_err(|_| BAD)?;
    if master_fields > lp.len() {
        return Err(BAD);
    }
    let mut names = Vec::with_capacity(master_fields);
    for _ in 0..master_fields {
        names.push(next()?.clone());
    }
    if int_of(next()?)? != 0 {
        return Err(BAD);
    }
    let mut iter = it;
    while let Some(flags) = iter.next() {
        let flags = int_of(flags)?;
        let mut next = || iter.next().ok_or(BAD);
        let ms = master
            .ms
            .checked_add(u64::try_from(int_of(next()?)?).map_err(|_| BAD)?);
        let seq = master.seq.wrapping_add(int_of(next()?)? as u64);
        let id = StreamId {
            ms: ms.ok_or(BAD)?,
            seq,
        };
        let mut fields = Vec::new();
        if flags & FLAG_SAME_FIELDS != 0 {
            for name in &names {
                fields.push(name.clone());
                fields.push(next()?.clone());
            }
        } else {
            let pairs = usize::try_from(int_of(next()?)?).map_err(|_| BAD)?;
            if pairs > lp.len() {
                return Err(BAD);
            }
            for _ in 0..2 * pairs {
                fields.push(next()?.clone());
            }
        }
        let _lp_count = int_of(next()?)?;
        if flags & FLAG_DELETED != 0 {
            continue;
        }
        if stream.last_entry_id().is_some_and(|last| id <= last) {
            return Err(BAD);
        }
        stream.add(id, fields);
    }
    Ok(())
}

/// Reads a stream of format `version` (1: type 15, 2: type 19, 3: type 21).
pub(crate) fn read_stream(r: &mut Reader<'_>, version: u8) -> Read<Stream> {
    let mut stream = Stream::default();
    let nodes = r.count(2)?;
    for _ in 0..nodes {
        let master = id_of(&r.string()?)?;
        let lp = listpack(&r.string()?)?;
        if lp.is_empty() {
            return Err(BAD);
        }
        read_node(&mut stream, master, &lp)?;
    }
    let length = u64_of(r)?;
    if length != stream.len() as u64 {
        return Err(BAD);
    }
    stream.last_id = StreamId {
        ms: u64_of(r)?,
        seq: u64_of(r)?,
    };
    if stream
        .last_entry_id()
        .is_some_and(|last| last > stream.last_id)
    {
        return Err(BAD);
    }
    if version >= 2 {
        let _first = (u64_of(r)?, u64_of(r)?);
        stream.max_deleted_id = StreamId {
            ms: u64_of(r)?,
            seq: u64_of(r)?,
        };
        stream.entries_added = u64_of(r)?;
    } else {
        stream.entries_added = stream.len() as u64;
    }
    let groups = r.count(3)?;
    for _ in 0..groups {
        let name = r.string()?;
        let group = read_group(r, version)?;
        if stream.groups.insert(name, group).is_some() {
            return Err(BAD);
        }
    }
    Ok(stream)
}

fn read_group(r: &mut Reader<'_>, version: u8) -> Read<Group> {
    let mut group = Group {
        last_delivered: StreamId {
            ms: u64_of(r)?,
            seq: u64_of(r)?,
        },
        ..Group::default()
    };
    if version >= 2 {
        let read = u64_of(r)?;
        group.entries_read = (read != ENTRIES_READ_UNKNOWN).then_some(read);
    }
    // The group's pending entries: id, delivery time, delivery count; owners come below.
    let pending = r.count(17)?;
    let mut unowned = std::collections::BTreeMap::new();
    for _ in 0..pending {
        let id = id_of(r.take(16)?)?;
        let delivered_ms = ms_time(r)?;
        let deliveries = u64_of(r)?;
        if unowned.insert(id, (delivered_ms, deliveries)).is_some() {
            return Err(BAD);
        }
    }
    let consumers = r.count(10)?;
    for _ in 0..consumers {
        let name = r.string()?;
        let seen_ms = ms_time(r)?;
        // Redis 7.2's active-time (-1: never); before it, Redis counts the last seen time.
        let active_ms = if version >= 3 {
            let active = ms_time(r)?;
            (active != u64::MAX).then_some(active)
        } else {
            Some(seen_ms)
        };
        let mut consumer = Consumer {
            seen_ms,
            active_ms,
            pending: Default::default(),
        };
        let owned = r.count(16)?;
        for _ in 0..owned {
            let id = id_of(r.take(16)?)?;
            let (delivered_ms, deliveries) = unowned.remove(&id).ok_or(BAD)?;
            consumer.pending.insert(id);
            group.pending.insert(
                id,
                Pending {
                    consumer: name.clone(),
                    delivered_ms,
                    deliveries,
                },
            );
        }
        if group.consumers.insert(name, consumer).is_some() {
            return Err(BAD);
        }
    }
    if !unowned.is_empty() {
        return Err(BAD);
    }
    Ok(group)
}
