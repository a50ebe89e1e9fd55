//! How a key's value and expiry are written into a journal record (and, later, a snapshot):
//! every type in full, with the positions that commands can observe preserved. A hash, set
//! or sorted set is written in its insertion-position order and rebuilt by inserting in
//! that order, so HSCAN, SPOP's and HRANDFIELD's positions, and everything replayed after
//! it, come out as they were; a stream keeps its groups, consumers and pending entries.

use bytes::Bytes;

use crate::keyspace::Entry;
use crate::values::sorted_set::ZSet;
use crate::values::stream::{Consumer, Group, Pending, Stream, StreamId};
use crate::values::value::{Hash, List, Set, Value};
use crate::wire::{put_bytes, put_f64, put_opt_u64, put_u64, DecodeError, Decoded, Reader};

pub(crate) const STR: u8 = 0;
const LIST: u8 = 1;
const HASH: u8 = 2;
const SET: u8 = 3;
const ZSET: u8 = 4;
/// A stream as builds before Redis 7.2's consumer `active-time` wrote it (read only).
const STREAM: u8 = 5;
/// A stream whose consumers carry when they last read or claimed something.
const STREAM_2: u8 = 6;

pub fn put_entry(out: &mut Vec<u8>, entry: &Entry) {
    put_u64(out, entry.expire_at_ms);
    put_value(out, &entry.value);
}

pub fn read_entry(r: &mut Reader) -> Decoded<Entry> {
    let expire_at_ms = r.u64()?;
    Ok(Entry {
        value: read_value(r)?,
        expire_at_ms,
    })
}

pub fn put_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Str(bytes) => {
            out.push(STR);
            put_bytes(out, bytes);
        }
        Value::List(list) => {
            out.push(LIST);
            put_u64(out, list.len() as u64);
            list.iter().for_each(|e| put_bytes(out, e));
        }
        Value::Hash(hash) => {
            out.push(HASH);
            put_u64(out, hash.len() as u64);
            for (field, value) in hash.iter() {
                put_bytes(out, field);
                put_bytes(out, value);
            }
        }
        Value::Set(set) => {
            out.push(SET);
            put_u64(out, set.len() as u64);
            set.iter().for_each(|m| put_bytes(out, m));
        }
        Value::ZSet(z) => {
            out.push(ZSET);
            put_u64(out, z.len() as u64);
            for i in 0..z.len() {
                let (member, score) = z.at_position(i).expect("in range");
                put_bytes(out, member);
                put_f64(out, score);
            }
        }
        Value::Stream(stream) => {
            out.push(STREAM_2);
            put_stream(out, stream);
        }
    }
}

pub fn read_value(r: &mut Reader) -> Decoded<Value> {
    Ok(match r.u8()? {
        STR => Value::Str(r.bytes()?),
        LIST => {
            let n = r.count()?;
            let mut list = List::with_capacity(n);
            for _ in 0..n {
                list.push_back(r.bytes()?);
            }
            Value::List(Box::new(list))
        }
        HASH => {
            let n = r.count()?;
            let mut hash = Hash::default();
            hash.reserve(n);
            for _ in 0..n {
                let field = r.bytes()?;
                hash.insert(field, r.bytes()?);
            }
            Value::Hash(Box::new(hash))
        }
        SET => {
            let n = r.count()?;
            let mut set = Set::default();
            set.reserve(n);
            for _ in 0..n {
                set.insert(r.bytes()?);
            }
            Value::Set(Box::new(set))
        }
        ZSET => {
            let n = r.count()?;
            let mut z = ZSet::default();
            for _ in 0..n {
                let member = r.bytes()?;
                let score = r.f64()?;
                if score.is_nan() {
                    return Err(DecodeError("NaN score"));
                }
                z.insert(member, score);
            }
            Value::ZSet(Box::new(z))
        }
        STREAM => Value::Stream(Box::new(read_stream(r, false)?)),
        STREAM_2 => Value::Stream(Box::new(read_stream(r, true)?)),
        _ => return Err(DecodeError("unknown value type")),
    })
}

fn put_id(out: &mut Vec<u8>, id: StreamId) {
    put_u64(out, id.ms);
    put_u64(out, id.seq);
}

fn read_id(r: &mut Reader) -> Decoded<StreamId> {
    Ok(StreamId {
        ms: r.u64()?,
        seq: r.u64()?,
    })
}

fn put_stream(out: &mut Vec<u8>, stream: &Stream) {
    put_id(out, stream.last_id);
    put_u64(out, stream.entries_added);
    put_id(out, stream.max_deleted_id);
    let entries = stream.range(StreamId::MIN, StreamId::MAX, false, usize::MAX);
    put_u64(out, entries.len() as u64);
    for (id, fields) in entries {
        put_id(out, id);
        crate::wire::put_bytes_list(out, fields);
    }
    put_u64(out, stream.groups.len() as u64);
    for (name, group) in &stream.groups {
        put_bytes(out, name);
        put_id(out, group.last_delivered);
        put_opt_u64(out, group.entries_read);
        put_u64(out, group.pending.len() as u64);
        for (id, p) in &group.pending {
            put_id(out, *id);
            put_bytes(out, &p.consumer);
            put_u64(out, p.delivered_ms);
            put_u64(out, p.deliveries);
        }
        put_u64(out, group.consumers.len() as u64);
        for (name, consumer) in &group.consumers {
            put_bytes(out, name);
            put_u64(out, consumer.seen_ms);
            put_opt_u64(out, consumer.active_ms);
            put_u64(out, consumer.pending.len() as u64);
            consumer.pending.iter().for_each(|id| put_id(out, *id));
        }
    }
}

/// `active`: the consumers carry their `active_ms` (STREAM_2); an older record's consumers
/// count as active when last seen, as Redis 7.2 loads a 7.0 stream.
fn read_stream(r: &mut Reader, active: bool) -> Decoded<Stream> {
    let last_id = read_id(r)?;
    let entries_added = r.u64()?;
    let max_deleted_id = read_id(r)?;
    let mut stream = Stream::default();
    let n = r.count()?;
    let mut previous: Option<StreamId> = None;
    for _ in 0..n {
        let id = read_id(r)?;
        if previous.is_some_and(|p| p >= id) || id > last_id {
            return Err(DecodeError("stream ids out of order"));
        }
        previous = Some(id);
        stream.add(id, r.bytes_list()?);
    }
    stream.last_id = last_id;
    stream.entries_added = entries_added;
    stream.max_deleted_id = max_deleted_id;
    let groups = r.count()?;
    for _ in 0..groups {
        let name = r.bytes()?;
        let mut group = Group {
            last_delivered: read_id(r)?,
            entries_read: r.opt_u64()?,
            ..Group::default()
        };
        let pending = r.count()?;
        for _ in 0..pending {
            let id = read_id(r)?;
            let p = Pending {
                consumer: r.bytes()?,
                delivered_ms: r.u64()?,
                deliveries: r.u64()?,
            };
            group.pending.insert(id, p);
        }
        let consumers = r.count()?;
        for _ in 0..consumers {
            let name: Bytes = r.bytes()?;
            let seen_ms = r.u64()?;
            let active_ms = if active { r.opt_u64()? } else { Some(seen_ms) };
            let mut consumer = Consumer {
                seen_ms,
                active_ms,
                pending: Default::default(),
            };
            let ids = r.count()?;
            for _ in 0..ids {
                consumer.pending.insert(read_id(r)?);
            }
            group.consumers.insert(name, consumer);
        }
        stream.groups.insert(name, group);
    }
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Shard;
    use proptest::prelude::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    /// A decoded value owns its bytes: nothing in it points into the buffer it came from
    /// (which would keep a whole snapshot part alive for one surviving element).
    #[test]
    fn decoded_values_do_not_borrow_their_buffer() {
        let mut list = List::default();
        list.push_back(b("element-one"));
        list.push_back(b("element-two"));
        let mut out = Vec::new();
        put_entry(&mut out, &Entry::new(Value::List(Box::new(list))));
        let buf = Bytes::from(out);
        let range = buf.as_ptr() as usize..buf.as_ptr() as usize + buf.len();
        let entry = read_entry(&mut Reader::new(buf.clone())).expect("decodes");
        let Value::List(list) = entry.value else {
            panic!("not a list")
        };
        for element in list.iter() {
            assert!(
                !range.contains(&(element.as_ptr() as usize)),
                "an element borrows the buffer"
            );
        }
    }

    fn round_trip(entry: &Entry) -> Entry {
        let mut out = Vec::new();
        put_entry(&mut out, entry);
        let mut r = Reader::new(Bytes::from(out));
        let back = read_entry(&mut r).expect("decodes");
        assert!(r.is_done());
        back
    }

    fn run(shard: &mut Shard, line: &str) {
        let args: Vec<Bytes> = line.split(' ').map(b).collect();
        let frame = shard.execute_args(0, &args);
        assert!(!frame.is_error(), "{line}: {frame:?}");
    }

    /// Every type, built by commands (so with the histories that shape positions: deletes
    /// that swap, a stream with a group, pending entries and a deleted entry).
    #[test]
    fn every_type_round_trips_with_its_positions() {
        let mut shard = Shard::new(0);
        shard.set_clock(1_000);
        for line in [
            "set s hello",
            "pexpireat s 99999999",
            "rpush l a b c",
            "lpush l z",
            "hset h f1 v1 f2 v2 f3 v3",
            "hdel h f1",
            "sadd st m1 m2 m3 m4",
            "srem st m2",
            "zadd z 1 a 2 b 3 c -0 d",
            "zrem z b",
            "xadd x 1-1 f v",
            "xadd x 2-1 f v",
            "xadd x 3-1 f v",
            "xgroup create x g 0",
            "xreadgroup group g alice count 2 streams x >",
            "xdel x 3-1",
        ] {
            run(&mut shard, line);
        }
        for key in ["s", "l", "h", "st", "z", "x"] {
            let entry = shard.clone_entry(0, key.as_bytes()).expect("exists");
            assert_eq!(round_trip(&entry), entry, "{key}");
        }
    }

    proptest! {
        #[test]
        fn hashes_and_sets_keep_positions(ops in proptest::collection::vec((any::<bool>(), 0u8..20), 1..80)) {
            let mut hash = Hash::default();
            let mut set = Set::default();
            for (add, k) in ops {
                let k = Bytes::from(vec![k]);
                if add {
                    hash.insert(k.clone(), k.clone());
                    set.insert(k);
                } else {
                    hash.swap_remove(&k);
                    set.swap_remove(&k);
                }
            }
            for value in [Value::Hash(Box::new(hash)), Value::Set(Box::new(set))] {
                let entry = Entry::new(value);
                let back = round_trip(&entry);
                match (&back.value, &entry.value) {
                    (Value::Hash(a), Value::Hash(b)) => prop_assert!(a.iter().eq(b.iter())),
                    (Value::Set(a), Value::Set(b)) => prop_assert!(a.iter().eq(b.iter())),
                    _ => prop_assert!(false),
                }
            }
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut r = Reader::new(Bytes::from(bytes));
            let _ = read_entry(&mut r);
        }
    }
}
