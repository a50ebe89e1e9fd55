//! A whole RDB file, as a Redis primary sends one to its replica (versions 1 to 12: Redis
//! 7.2 writes 11, 7.4 and 8.0 write 12, whose only additions are per-slot sizes and hashes
//! whose fields expire; a key holding such a hash is refused by name):
//! the header, auxiliary fields, database selectors, expiry times and LRU/LFU hints, function
//! libraries, and each key with its value. Each key comes out as a DUMP payload (the value's
//! bytes as the file holds them, framed with a version and CRC64), which RESTORE reads in any
//! of Redis's encodings; the live migration from Redis (`REPLICAOF` at a redis-server) loads
//! them that way. The file's trailing CRC64 is checked when it has one.

use bytes::Bytes;

use super::rdb::{crc64, frame};
use super::rdb_encoding::{Reader, Refused};

/// The newest RDB file version read: Redis 7.4's and 8.0's. (RESTORE's payloads stop at
/// 11, as Redis 7.2's RESTORE does: `rdb::RDB_VERSION_MAX`.)
pub const RDB_FILE_VERSION_MAX: u16 = 12;

mod opcode {
    pub const SLOT_INFO: u8 = 0xF4;
    pub const FUNCTION2: u8 = 0xF5;
    pub const FUNCTION_PRE_GA: u8 = 0xF6;
    pub const MODULE_AUX: u8 = 0xF7;
    pub const IDLE: u8 = 0xF8;
    pub const FREQ: u8 = 0xF9;
    pub const AUX: u8 = 0xFA;
    pub const RESIZE_DB: u8 = 0xFB;
    pub const EXPIRE_MS: u8 = 0xFC;
    pub const EXPIRE_S: u8 = 0xFD;
    pub const SELECT_DB: u8 = 0xFE;
    pub const EOF: u8 = 0xFF;
}

/// What an RDB file holds, one item at a time.
#[derive(Debug, PartialEq)]
pub enum RdbItem {
    /// A key: its database, its name, its absolute expiry (ms) if any, and its value as a
    /// DUMP payload.
    Key {
        db: usize,
        key: Bytes,
        expire_at_ms: Option<u64>,
        payload: Vec<u8>,
    },
    /// A function library's code (FUNCTION LOAD's argument).
    Library(Bytes),
}

/// Reads the RDB file `bytes`, handing each item to `each`. Returns the file's version.
pub fn read(
    bytes: &[u8],
    each: &mut dyn FnMut(RdbItem) -> Result<(), String>,
) -> Result<u16, String> {
    let version = header(bytes)?;
    let mut r = Reader::new(&bytes[9..]);
    let mut at = Position::default();
    loop {
        let op = r.byte().map_err(|e| bad("an opcode", e))?;
        if op == opcode::EOF {
            break;
        }
        if !metadata(&mut r, op, &mut at)? {
            item(&mut r, op, &mut at, each)?;
        }
    }
    if version >= 5 {
        let end = 9 + r.pos;
        let stored = bytes
            .get(end..end + 8)
            .ok_or("the RDB ends before its checksum")?;
        let stored = u64::from_le_bytes(stored.try_into().expect("8 bytes"));
        if stored != 0 && stored != crc64(&bytes[..end]) {
            return Err("the RDB's checksum does not match".into());
        }
    }
    Ok(version)
}

/// The database being read, and the expiry the next key takes.
#[derive(Default)]
struct Position {
    db: usize,
    expire_at_ms: Option<u64>,
}

fn bad(what: &str, e: Refused) -> String {
    format!("the RDB is damaged ({what}: {e:?})")
}

/// Reads an opcode's fields that are not an item (a database, sizes, an expiry, hints,
/// auxiliary fields); false when `op` is none of them.
fn metadata(r: &mut Reader<'_>, op: u8, at: &mut Position) -> Result<bool, String> {
    match op {
        opcode::SELECT_DB => {
            at.db = r.len().map_err(|e| bad("a database", e))?;
            if at.db >= crate::keyspace::DATABASES {
                return Err(format!("the RDB names database {}; WeTask has 16", at.db));
            }
        }
        opcode::RESIZE_DB => {
            r.len()
                .and_then(|_| r.len())
                .map_err(|e| bad("RESIZEDB", e))?;
        }
        opcode::SLOT_INFO => {
            for _ in 0..3 {
                r.len().map_err(|e| bad("SLOT_INFO", e))?;
            }
        }
        opcode::AUX => {
            r.string()
                .and_then(|_| r.string())
                .map_err(|e| bad("an AUX field", e))?;
        }
        opcode::EXPIRE_MS => {
            let ms = r.take(8).map_err(|e| bad("an expiry", e))?;
            at.expire_at_ms = Some(u64::from_le_bytes(ms.try_into().expect("8 bytes")));
        }
        opcode::EXPIRE_S => {
            let s = r.take(4).map_err(|e| bad("an expiry", e))?;
            at.expire_at_ms =
                Some(u64::from(u32::from_le_bytes(s.try_into().expect("4 bytes"))) * 1000);
        }
        opcode::FREQ => {
            r.byte().map_err(|e| bad("a FREQ", e))?;
        }
        opcode::IDLE => {
            r.len().map_err(|e| bad("an IDLE", e))?;
        }
        opcode::FUNCTION_PRE_GA | opcode::MODULE_AUX => {
            return Err(format!(
                "the RDB holds {} data, which WeTask does not read",
                if op == opcode::MODULE_AUX {
                    "module"
                } else {
                    "pre-7.0 function"
                }
            ));
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// Reads a function library or a key (of value type `op`) and hands it on.
fn item(
    r: &mut Reader<'_>,
    op: u8,
    at: &mut Position,
    each: &mut dyn FnMut(RdbItem) -> Result<(), String>,
) -> Result<(), String> {
    if op == opcode::FUNCTION2 {
        let code = r.string().map_err(|e| bad("a function library", e))?;
        return each(RdbItem::Library(code));
    }
    let key = r.string().map_err(|e| bad("a key", e))?;
    let value = value_bytes(r, op).map_err(|e| match e {
        Refused::Unsupported(what) => format!(
            "the key {:?} holds a {what} value, which WeTask does not read",
            String::from_utf8_lossy(&key)
        ),
        e => bad("a value", e),
    })?;
    each(RdbItem::Key {
        db: at.db,
        key,
        expire_at_ms: at.expire_at_ms.take(),
        payload: frame(value),
    })
}

/// `REDIS` and a four-digit version.
fn header(bytes: &[u8]) -> Result<u16, String> {
    let head = bytes.get(..9).ok_or("the RDB is shorter than its header")?;
    if &head[..5] != b"REDIS" {
        return Err("not an RDB file (no REDIS header)".into());
    }
    let version: u16 = std::str::from_utf8(&head[5..])
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or("the RDB's version is not a number")?;
    if version == 0 || version > RDB_FILE_VERSION_MAX {
        return Err(format!(
            "RDB version {version} is newer than WeTask reads (up to {RDB_FILE_VERSION_MAX}, Redis 7.4's and 8.0's)"
        ));
    }
    Ok(version)
}

/// The bytes of the value of type `kind` at the reader (its type byte first), checked by
/// reading it whole.
fn value_bytes(r: &mut Reader<'_>, kind: u8) -> Result<Vec<u8>, Refused> {
    let start = r.pos;
    super::rdb::read_value_of(r, kind)?;
    let mut value = Vec::with_capacity(1 + r.pos - start);
    value.push(kind);
    value.extend_from_slice(&r.data[start..r.pos]);
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small RDB as Redis 7.2 writes one: two keys in db 0 (one with an expiry), a
    /// hash in db 3, an AUX field, and the checksum.
    fn sample(version: &str) -> Vec<u8> {
        let mut out = format!("REDIS{version}").into_bytes();
        out.push(opcode::AUX);
        super::super::rdb::put_string(&mut out, b"redis-ver");
        super::super::rdb::put_string(&mut out, b"7.2.4");
        out.extend([opcode::SELECT_DB, 0, opcode::RESIZE_DB, 2, 1]);
        out.push(0); // a string
        super::super::rdb::put_string(&mut out, b"plain");
        super::super::rdb::put_string(&mut out, b"value");
        out.push(opcode::EXPIRE_MS);
        out.extend(1_900_000_000_000u64.to_le_bytes());
        out.push(0);
        super::super::rdb::put_string(&mut out, b"timed");
        super::super::rdb::put_string(&mut out, b"soon");
        out.extend([opcode::SELECT_DB, 3]);
        out.push(4); // a hash
        super::super::rdb::put_string(&mut out, b"h");
        out.push(1);
        super::super::rdb::put_string(&mut out, b"f");
        super::super::rdb::put_string(&mut out, b"v");
        out.push(opcode::EOF);
        let crc = crc64(&out);
        out.extend(crc.to_le_bytes());
        out
    }

    fn items(bytes: &[u8]) -> Result<Vec<RdbItem>, String> {
        let mut found = Vec::new();
        read(bytes, &mut |item| {
            found.push(item);
            Ok(())
        })?;
        Ok(found)
    }

    #[test]
    fn keys_come_out_as_payloads_restore_reads() {
        let found = items(&sample("0011")).expect("reads");
        assert_eq!(found.len(), 3);
        let RdbItem::Key {
            db,
            key,
            expire_at_ms,
            payload,
        } = &found[1]
        else {
            panic!("a key")
        };
        assert_eq!(
            (*db, &key[..], *expire_at_ms),
            (0, &b"timed"[..], Some(1_900_000_000_000))
        );
        let value = super::super::rdb::restore(payload).expect("restores");
        assert_eq!(
            value,
            crate::values::value::Value::Str(Bytes::from_static(b"soon"))
        );
        let RdbItem::Key {
            db, expire_at_ms, ..
        } = &found[2]
        else {
            panic!("a key")
        };
        assert_eq!((*db, *expire_at_ms), (3, None));
    }

    #[test]
    fn redis_74s_files_read_and_a_hash_whose_fields_expire_is_refused_by_name() {
        // Version 12 with a cluster's per-slot sizes before the keys: the same keys.
        let mut file = sample("0012");
        let at = file
            .iter()
            .position(|&b| b == opcode::SELECT_DB)
            .expect("a db");
        file.splice(at..at, [opcode::SLOT_INFO, 7, 2, 0]);
        let end = file.len() - 8;
        let crc = crc64(&file[..end]);
        file[end..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(items(&file).expect("reads").len(), 3);
        assert_eq!(
            items(&sample("0011")).expect("reads"),
            items(&file).expect("reads")
        );

        // A listpack hash with field expirations (type 25): named, not misread.
        let mut file = b"REDIS0012".to_vec();
        file.extend([opcode::SELECT_DB, 0, 25]);
        super::super::rdb::put_string(&mut file, b"expiring");
        file.extend([0u8; 16]);
        file.push(opcode::EOF);
        let refused = items(&file).expect_err("refused");
        assert!(
            refused.contains("\"expiring\"") && refused.contains("field expirations"),
            "{refused}"
        );
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_after_a_header_read_without_panic(
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)
        ) {
            let mut file = b"REDIS0011".to_vec();
            file.extend_from_slice(&body);
            let _ = items(&file);
        }
    }

    #[test]
    fn damage_is_an_error_not_a_panic() {
        let good = sample("0011");
        let mut flipped = good.clone();
        flipped[30] ^= 0x55;
        assert!(items(&flipped).is_err());
        assert!(items(&good[..good.len() - 12]).is_err());
        assert!(items(b"REDIS0012").is_err());
        let newer = items(b"REDIS0013").expect_err("refused");
        assert!(newer.contains("RDB version 13"), "{newer}");
        assert!(items(b"NOTRDB000").is_err());
        for cut in 0..good.len() {
            let _ = items(&good[..cut]);
        }
    }
}
