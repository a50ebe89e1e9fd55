//! Redis's serialization of one value, as DUMP writes it and RESTORE reads it: the RDB type
//! byte, the value in RDB's encoding, the RDB version (2 bytes, little-endian) and a CRC64
//! (Jones polynomial, as Redis's `crc64.c`) of everything before it. So values move between
//! Redis and WeTask (MIGRATE-style tools, redis-shake, a hand-made DUMP | RESTORE).
//!
//! DUMP writes version 10 (Redis 7.0) with the plainest encodings every Redis since 2.x
//! loads: a list as a plain list, sets and hashes as plain collections, sorted sets with
//! binary scores, streams as Redis 7.0 writes them (`rdb_stream`). RESTORE reads those and
//! every compact encoding Redis 2.6 to 7.2 writes: integer and LZF strings, ziplists,
//! intsets, listpacks, quicklists, and streams of RDB types 15, 19 and 21. Module values are
//! refused (an error says so). Every length read from a payload is checked against the
//! bytes that remain before anything is allocated for it.

use bytes::Bytes;

pub use crate::persist::rdb_encoding::Refused;
use crate::persist::rdb_encoding::{intset, listpack, put_len, ziplist, Read, Reader, BAD};
use crate::values::value::Value;

/// What DUMP writes: Redis 7.0's RDB version.
pub const RDB_VERSION: u16 = 10;
/// The newest RDB version RESTORE reads (Redis 7.2's).
pub const RDB_VERSION_MAX: u16 = 11;

mod kind {
    pub const STRING: u8 = 0;
    pub const LIST: u8 = 1;
    pub const SET: u8 = 2;
    pub const ZSET: u8 = 3;
    pub const HASH: u8 = 4;
    pub const ZSET_2: u8 = 5;
    pub const LIST_ZIPLIST: u8 = 10;
    pub const SET_INTSET: u8 = 11;
    pub const ZSET_ZIPLIST: u8 = 12;
    pub const HASH_ZIPLIST: u8 = 13;
    pub const LIST_QUICKLIST: u8 = 14;
    pub const HASH_LISTPACK: u8 = 16;
    pub const ZSET_LISTPACK: u8 = 17;
    pub const LIST_QUICKLIST_2: u8 = 18;
    pub const STREAM_LISTPACKS: u8 = 15;
    pub const STREAM_LISTPACKS_2: u8 = 19;
    pub const SET_LISTPACK: u8 = 20;
    pub const STREAM_LISTPACKS_3: u8 = 21;
}

// ---- CRC64 (Redis's: reflected, polynomial 0xad93d23594c935a9, no final xor) ----

const CRC64_TABLE: [u64; 256] = {
    // The reflected form of Redis's polynomial.
    const POLY: u64 = 0x95ac_9329_ac4b_c9b5;
    let mut table = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u64;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

pub fn crc64(data: &[u8]) -> u64 {
    data.iter().fold(0u64, |crc, &b| {
        CRC64_TABLE[((crc ^ u64::from(b)) & 0xff) as usize] ^ (crc >> 8)
    })
}

// ---- DUMP ----

/// The DUMP payload of `value`.
pub fn dump(value: &Value) -> Result<Vec<u8>, Refused> {
    let mut out = Vec::new();
    match value {
        Value::Str(s) => {
            out.push(kind::STRING);
            put_string(&mut out, s);
        }
        Value::List(list) => {
            out.push(kind::LIST);
            put_len(&mut out, list.len() as u64);
            list.iter().for_each(|e| put_string(&mut out, e));
        }
        Value::Set(set) => {
            out.push(kind::SET);
            put_len(&mut out, set.len() as u64);
            set.iter().for_each(|m| put_string(&mut out, m));
        }
        Value::Hash(hash) => {
            out.push(kind::HASH);
            put_len(&mut out, hash.len() as u64);
            for (field, value) in hash.iter() {
                put_string(&mut out, field);
                put_string(&mut out, value);
            }
        }
        Value::ZSet(zset) => {
            out.push(kind::ZSET_2);
            put_len(&mut out, zset.len() as u64);
            for i in 0..zset.len() {
                let (member, score) = zset.at_position(i).expect("in range");
                put_string(&mut out, member);
                out.extend_from_slice(&score.to_le_bytes());
            }
        }
        Value::Stream(stream) => {
            out.push(kind::STREAM_LISTPACKS_2);
            crate::persist::rdb_stream::put_stream(&mut out, stream);
        }
    }
    Ok(frame(out))
}

/// A payload around `body` (type byte and value): the RDB version DUMP writes and the CRC64.
pub fn frame(mut body: Vec<u8>) -> Vec<u8> {
    body.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crc64(&body);
    body.extend_from_slice(&crc.to_le_bytes());
    body
}

// ---- RESTORE ----

/// The body of a payload whose version and checksum hold (FUNCTION RESTORE's check).
pub fn verified_body(payload: &[u8]) -> Option<&[u8]> {
    if payload.len() < 10 {
        return None;
    }
    let (body, footer) = payload.split_at(payload.len() - 10);
    let version = u16::from_le_bytes([footer[0], footer[1]]);
    let crc = u64::from_le_bytes(footer[2..10].try_into().expect("8 bytes"));
    (version <= RDB_VERSION_MAX && crc64(&payload[..payload.len() - 8]) == crc).then_some(body)
}

/// Appends an RDB string (its length, then its bytes).
pub fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    crate::persist::rdb_encoding::put_string(out, s);
}

/// Reads one RDB string from the start of `bytes`: the string and the bytes it took.
pub fn read_string(bytes: &[u8]) -> Option<(Bytes, usize)> {
    let mut r = Reader::new(bytes);
    let s = r.string().ok()?;
    Some((s, r.pos))
}

/// Checks a payload's version and checksum (Redis's `verifyDumpPayload`) and reads its value.
pub fn restore(payload: &[u8]) -> Result<Value, Refused> {
    let body = verified_body(payload).ok_or(Refused::VersionOrChecksum)?;
    let mut r = Reader::new(body);
    let value = r.value()?;
    if !r.at_end() {
        return Err(Refused::BadFormat);
    }
    Ok(value)
}

/// Reads a value of RDB type `kind` (its type byte already read) at the reader: an RDB
/// file's key (`rdb_file`).
pub(crate) fn read_value_of(r: &mut Reader<'_>, kind: u8) -> Read<Value> {
    r.value_of(kind)
}

impl Reader<'_> {
    fn value(&mut self) -> Read<Value> {
        let kind = self.byte()?;
        self.value_of(kind)
    }

    fn value_of(&mut self, kind: u8) -> Read<Value> {
        match kind {
            kind::STRING => Ok(Value::Str(self.string()?)),
            kind::LIST => {
                let n = self.count(1)?;
                let list = (0..n).map(|_| self.string()).collect::<Read<_>>()?;
                non_empty(Value::List(Box::new(list)))
            }
            kind::SET => {
                let n = self.count(1)?;
                let mut set = crate::values::value::Set::default();
                for _ in 0..n {
                    if !set.insert(self.string()?) {
                        return Err(BAD);
                    }
                }
                non_empty(Value::Set(Box::new(set)))
            }
            kind::ZSET | kind::ZSET_2 => {
                let n = self.count(2)?;
                let mut pairs = Vec::with_capacity(n);
                for _ in 0..n {
                    let member = self.string()?;
                    let score = if kind == kind::ZSET_2 {
                        f64::from_le_bytes(self.take(8)?.try_into().expect("8"))
                    } else {
                        self.old_score()?
                    };
                    pairs.push((member, score));
                }
                zset(pairs)
            }
            kind::HASH => {
                let n = self.count(2)?;
                let mut pairs = Vec::with_capacity(n);
                for _ in 0..n {
                    pairs.push((self.string()?, self.string()?));
                }
                hash(pairs)
            }
            kind::LIST_ZIPLIST => list(ziplist(&self.string()?)?),
            kind::SET_INTSET => set(intset(&self.string()?)?),
            kind::SET_LISTPACK => set(listpack(&self.string()?)?),
            kind::ZSET_ZIPLIST => zset(scored(ziplist(&self.string()?)?)?),
            kind::ZSET_LISTPACK => zset(scored(listpack(&self.string()?)?)?),
            kind::HASH_ZIPLIST => hash(paired(ziplist(&self.string()?)?)?),
            kind::HASH_LISTPACK => hash(paired(listpack(&self.string()?)?)?),
            kind::LIST_QUICKLIST | kind::LIST_QUICKLIST_2 => list(self.quicklist(kind)?),
            kind::STREAM_LISTPACKS => self.stream(1),
            kind::STREAM_LISTPACKS_2 => self.stream(2),
            kind::STREAM_LISTPACKS_3 => self.stream(3),
            6 | 7 => Err(Refused::Unsupported("module")),
            // Redis 7.4's hashes whose fields expire (HEXPIRE): 7.2 has no such hash.
            22..=25 => Err(Refused::Unsupported(
                "hash with field expirations (Redis 7.4's HEXPIRE)",
            )),
            _ => Err(BAD),
        }
    }

    /// A quicklist's elements: nodes of ziplists (RDB type 14), or of listpacks and plain
    /// elements (type 18).
    fn quicklist(&mut self, kind: u8) -> Read<Vec<Bytes>> {
        let nodes = self.count(1)?;
        let mut elements = Vec::new();
        for _ in 0..nodes {
            if kind == kind::LIST_QUICKLIST {
                elements.extend(ziplist(&self.string()?)?);
                continue;
            }
            match self.len()? {
                // PLAIN: one large element as is.
                1 => elements.push(self.string()?),
                // PACKED: a listpack.
                2 => elements.extend(listpack(&self.string()?)?),
                _ => return Err(BAD),
            }
        }
        Ok(elements)
    }

    fn stream(&mut self, version: u8) -> Read<Value> {
        crate::persist::rdb_stream::read_stream(self, version)
            .map(|stream| Value::Stream(Box::new(stream)))
    }

    /// A score of RDB's first sorted-set type: a length-prefixed decimal, or 253 (NaN),
    /// 254 (+inf), 255 (-inf).
    fn old_score(&mut self) -> Read<f64> {
        match self.byte()? {
            253 => Ok(f64::NAN),
            254 => Ok(f64::INFINITY),
            255 => Ok(f64::NEG_INFINITY),
            len => {
                let text = self.take(usize::from(len))?;
                std::str::from_utf8(text)
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .ok_or(BAD)
            }
        }
    }
}

fn non_empty(value: Value) -> Read<Value> {
    let empty = match &value {
        Value::List(l) => l.is_empty(),
        Value::Set(s) => s.is_empty(),
        Value::Hash(h) => h.is_empty(),
        Value::ZSet(z) => z.is_empty(),
        Value::Str(_) | Value::Stream(_) => false,
    };
    if empty {
        Err(BAD)
    } else {
        Ok(value)
    }
}

fn list(elements: Vec<Bytes>) -> Read<Value> {
    non_empty(Value::List(Box::new(elements.into_iter().collect())))
}

fn set(members: Vec<Bytes>) -> Read<Value> {
    let mut set = crate::values::value::Set::default();
    for member in members {
        if !set.insert(member) {
            return Err(BAD);
        }
    }
    non_empty(Value::Set(Box::new(set)))
}

fn hash(pairs: Vec<(Bytes, Bytes)>) -> Read<Value> {
    let mut hash = crate::values::value::Hash::default();
    for (field, value) in pairs {
        if hash.insert(field, value).is_some() {
            return Err(BAD);
        }
    }
    non_empty(Value::Hash(Box::new(hash)))
}

fn zset(pairs: Vec<(Bytes, f64)>) -> Read<Value> {
    let mut zset = crate::values::sorted_set::ZSet::default();
    for (member, score) in pairs {
        if score.is_nan() || zset.insert(member, score).is_some() {
            return Err(BAD);
        }
    }
    non_empty(Value::ZSet(Box::new(zset)))
}

/// A flat member, value, member, value … sequence as pairs.
fn paired(flat: Vec<Bytes>) -> Read<Vec<(Bytes, Bytes)>> {
    if !flat.len().is_multiple_of(2) {
        return Err(BAD);
    }
    let mut it = flat.into_iter();
    let mut out = Vec::new();
    while let (Some(a), Some(b)) = (it.next(), it.next()) {
        out.push((a, b));
    }
    Ok(out)
}

/// A flat member, score, member, score … sequence (scores as decimal text).
fn scored(flat: Vec<Bytes>) -> Read<Vec<(Bytes, f64)>> {
    paired(flat)?
        .into_iter()
        .map(|(member, score)| Ok((member, crate::args::parse_f64(&score).ok_or(BAD)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    fn framed(body: &[u8]) -> Vec<u8> {
        frame(body.to_vec())
    }

    #[test]
    fn crc64_is_redis_s() {
        // crc64.c's own check value.
        assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    }

    #[test]
    fn redis_7_0_s_own_payloads_are_read() {
        // DUMP replies of a redis-server 7.0.15, byte for byte.
        let string = b"\x00\x05hello\n\x00cr\xdfve4 \n";
        assert_eq!(restore(string), Ok(Value::Str(b("hello"))));
        let int = b"\x00\xc190\n\x00\x9d\x94\xea'\x93\xfc\x08\xb9";
        assert_eq!(restore(int), Ok(Value::Str(b("12345"))));
        let lzf = b"\x00\xc3\t@d\x01aa\xe0W\x00\x01aa\n\x00\xe8\xa3\xb5\x07\xb0m\xf2q";
        assert_eq!(restore(lzf), Ok(Value::Str(b(&"a".repeat(100)))));
        let list = b"\x12\x01\x02\x0f\x0f\x00\x00\x00\x03\x00\x81a\x02\x81b\x02\x01\x01\xff\n\x00\xe0\x1b\xabJG\xceY\"";
        assert_eq!(
            restore(list),
            Ok(Value::List(Box::new(
                [b("a"), b("b"), b("1")].into_iter().collect()
            )))
        );
        let hash = b"\x10\x12\x12\x00\x00\x00\x04\x00\x81f\x02\x81v\x02\x81n\x02\x07\x01\xff\n\x00\xb8*\xde\xa8@\x7f\xfa\xa8";
        let Ok(Value::Hash(h)) = restore(hash) else {
            panic!("hash")
        };
        assert_eq!(
            (h.get(&b("f")), h.get(&b("n"))),
            (Some(&b("v")), Some(&b("7")))
        );
        let set = b"\x0b\x0e\x02\x00\x00\x00\x03\x00\x00\x00\x01\x00\x02\x00,\x01\n\x00\xe5\x10\xb2\x8e{\x95)\xaa";
        let Ok(Value::Set(s)) = restore(set) else {
            panic!("set")
        };
        assert!(s.len() == 3 && s.contains(&b("300")));
        let zset = b"\x11\x14\x14\x00\x00\x00\x04\x00\x81m\x02\x831.5\x04\x81n\x02\x02\x01\xff\n\x00\xf1\xb0:mX_i8";
        let Ok(Value::ZSet(z)) = restore(zset) else {
            panic!("zset")
        };
        assert_eq!((z.score(b"m"), z.score(b"n")), (Some(1.5), Some(2.0)));
        // An integer-encoded string built by hand (INT16), framed as Redis frames it.
        assert_eq!(
            restore(&framed(b"\x00\xc1\x39\x30")),
            Ok(Value::Str(b("12345")))
        );
    }

    #[test]
    fn every_value_round_trips() {
        let mut hash = crate::values::value::Hash::default();
        hash.insert(b("f"), b("v"));
        hash.insert(b("g"), b(&"x".repeat(70_000)));
        let mut set = crate::values::value::Set::default();
        set.insert(b("a"));
        set.insert(b("1"));
        let mut zset = crate::values::sorted_set::ZSet::default();
        zset.insert(b("m"), 1.5);
        zset.insert(b("n"), f64::NEG_INFINITY);
        for value in [
            Value::Str(b("")),
            Value::Str(b(&"y".repeat(20_000))),
            Value::List(Box::new([b("a"), b(""), b("c")].into_iter().collect())),
            Value::Hash(Box::new(hash)),
            Value::Set(Box::new(set)),
            Value::ZSet(Box::new(zset)),
        ] {
            let payload = dump(&value).unwrap();
            assert_eq!(restore(&payload), Ok(value));
        }
    }

    #[test]
    fn a_stream_with_groups_round_trips() {
        use crate::values::stream::{Stream, StreamId};
        let id = |ms, seq| StreamId { ms, seq };
        let mut stream = Stream::default();
        for i in 0..250u64 {
            let fields = if i % 3 == 0 {
                vec![b("c"), b(&i.to_string())]
            } else {
                vec![b("a"), b(&"v".repeat(i as usize % 90)), b("b"), b("1")]
            };
            stream.add(id(1_000 + i / 4, i % 4), fields);
        }
        stream.remove(id(1_001, 1));
        let group = stream.groups.entry(b("g")).or_default();
        group.last_delivered = id(1_002, 0);
        group.entries_read = Some(9);
        group.assign(id(1_000, 2), &b("alice"), 5_000, 2);
        group.assign(id(1_002, 0), &b("bob"), 6_000, 1);
        stream.groups.entry(b("empty")).or_default();
        let payload = dump(&Value::Stream(Box::new(stream.clone()))).unwrap();
        // DUMP writes Redis 7.0's stream (no active-time); read back, a consumer counts as
        // active when last seen, as Redis 7.2 loads one.
        for consumer in stream
            .groups
            .values_mut()
            .flat_map(|g| g.consumers.values_mut())
        {
            consumer.active_ms = Some(consumer.seen_ms);
        }
        assert_eq!(restore(&payload), Ok(Value::Stream(Box::new(stream))));
    }

    #[test]
    fn damaged_payloads_are_refused() {
        let payload = dump(&Value::Str(b("hello"))).unwrap();
        for cut in 0..payload.len() {
            assert!(restore(&payload[..cut]).is_err());
        }
        let mut flipped = payload.clone();
        flipped[2] ^= 1;
        assert_eq!(restore(&flipped), Err(Refused::VersionOrChecksum));
        let mut future = payload[..payload.len() - 10].to_vec();
        future.extend_from_slice(&12u16.to_le_bytes());
        let crc = crc64(&future);
        future.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(restore(&future), Err(Refused::VersionOrChecksum));
        // A list that claims a billion elements in a few bytes.
        assert_eq!(restore(&framed(b"\x01\x80\x40\x00\x00\x00\x01a")), Err(BAD));
        // An empty set, and a set with a member twice.
        assert_eq!(restore(&framed(b"\x02\x00")), Err(BAD));
        assert_eq!(restore(&framed(b"\x02\x02\x01a\x01a")), Err(BAD));
    }

    proptest::proptest! {
        /// Any body, framed with a valid checksum, is read or refused, never a panic, and
        /// never more allocation than its size allows.
        #[test]
        fn any_framed_body_is_read_or_refused(kind in 0u8..24, body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let mut data = vec![kind];
            data.extend_from_slice(&body);
            let _ = restore(&framed(&data));
        }

        /// A real payload with bytes changed (and the checksum fixed up) is read or refused.
        #[test]
        fn mutated_payloads_are_read_or_refused(at in 0usize..64, byte in proptest::prelude::any::<u8>()) {
            let mut set = crate::values::value::Set::default();
            set.insert(b("7"));
            set.insert(b("member"));
            for value in [Value::Set(Box::new(set)), Value::Str(b("hello world"))] {
                let payload = dump(&value).unwrap();
                let mut body = payload[..payload.len() - 10].to_vec();
                let i = at % body.len();
                body[i] = byte;
                let _ = restore(&framed(&body));
            }
        }
    }

    #[test]
    fn compact_encodings_are_read() {
        // An intset of 16-bit members 1, 2, 300.
        let mut intset_blob = vec![2, 0, 0, 0, 3, 0, 0, 0];
        for n in [1i16, 2, 300] {
            intset_blob.extend_from_slice(&n.to_le_bytes());
        }
        let mut body = vec![kind::SET_INTSET];
        put_string(&mut body, &intset_blob);
        let Ok(Value::Set(set)) = restore(&framed(&body)) else {
            panic!("intset")
        };
        assert!(set.contains(&b("300")) && set.len() == 3);
        // A listpack hash: f1 -> v1, n -> 7 (a 7-bit integer) and -100 (13-bit).
        let mut lp = vec![0, 0, 0, 0, 6, 0];
        for entry in [&b"\x82f1"[..], b"\x82v1", b"\x81n", b"\x07"] {
            lp.extend_from_slice(entry);
            lp.push(entry.len() as u8);
        }
        lp.extend_from_slice(&[0xdf, 0x9c, 2]);
        lp.extend_from_slice(&[0x81, b'x', 2]);
        lp.push(0xff);
        let total = lp.len() as u32;
        lp[..4].copy_from_slice(&total.to_le_bytes());
        let mut body = vec![kind::HASH_LISTPACK];
        put_string(&mut body, &lp);
        let Ok(Value::Hash(hash)) = restore(&framed(&body)) else {
            panic!("listpack")
        };
        assert_eq!(hash.get(&b("n")), Some(&b("7")));
        assert_eq!(hash.get(&b("-100")), Some(&b("x")));
        // An LZF string: a literal run of "abc", then a back reference copying it twice.
        let lzf = [2, b'a', b'b', b'c', 0x80, 2];
        let mut body = vec![kind::STRING, 0xc3];
        put_len(&mut body, lzf.len() as u64);
        put_len(&mut body, 9);
        body.extend_from_slice(&lzf);
        assert_eq!(restore(&framed(&body)), Ok(Value::Str(b("abcabcabc"))));
    }
}
