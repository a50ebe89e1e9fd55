//! Typed access to the keyspace for the collection families (lists, hashes, sets): find a
//! key's collection or WRONGTYPE, create one on first write, and delete the key when a
//! command leaves its collection empty (Redis never keeps an empty collection).

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::args::{int_arg, is};
use crate::errors::{SYNTAX, WRONGTYPE};
use crate::keyspace::{Db, Entry, Hash, List, Set, Value};

/// A collection type stored as a `Value` variant.
pub trait Collection: Default {
    fn of_mut(value: &mut Value) -> Option<&mut Self>;
    fn into_value(self) -> Value;
    fn is_empty(&self) -> bool;
    fn len(&self) -> usize;
}

macro_rules! collection {
    ($ty:ty, $variant:ident) => {
        impl Collection for $ty {
            fn of_mut(value: &mut Value) -> Option<&mut Self> {
                match value {
                    Value::$variant(inner) => Some(inner),
                    _ => None,
                }
            }
            fn into_value(self) -> Value {
                Value::$variant(Box::new(self))
            }
            fn is_empty(&self) -> bool {
                <$ty>::is_empty(self)
            }
            fn len(&self) -> usize {
                <$ty>::len(self)
            }
        }
    };
}

collection!(List, List);
collection!(Hash, Hash);
collection!(Set, Set);
collection!(crate::values::sorted_set::ZSet, ZSet);
collection!(crate::values::stream::Stream, Stream);

fn wrongtype() -> Frame {
    Frame::static_error(WRONGTYPE)
}

/// The collection at `key`: `Ok(None)` when the key is missing, WRONGTYPE for another type.
pub fn get<'a, T: Collection>(
    db: &'a mut Db,
    key: &[u8],
    now_ms: u64,
) -> Result<Option<&'a mut T>, Frame> {
    match db.get(key, now_ms) {
        None => Ok(None),
        Some(entry) => entry
            .into_typed_mut()
            .and_then(T::of_mut)
            .map(Some)
            .ok_or_else(wrongtype),
    }
}

/// The collection at `key`, created empty when missing. The caller must leave it non-empty,
/// or call [`drop_if_empty`].
pub fn get_or_create<'a, T: Collection>(
    db: &'a mut Db,
    key: &[u8],
    now_ms: u64,
) -> Result<&'a mut T, Frame> {
    if !db.contains(key, now_ms) {
        db.insert(key, Entry::new(T::default().into_value()));
    } else if get::<T>(db, key, now_ms)?.is_none() {
        unreachable!("the key is live");
    }
    Ok(get::<T>(db, key, now_ms)?.expect("present: just checked or created"))
}

/// Checks that `key` is missing or holds a `T` (for commands that must fail before any
/// change, such as a move whose destination has the wrong type).
pub fn check<T: Collection>(db: &mut Db, key: &[u8], now_ms: u64) -> Result<(), Frame> {
    get::<T>(db, key, now_ms).map(|_| ())
}

/// Deletes `key` if its `T` is empty.
pub fn drop_if_empty<T: Collection>(db: &mut Db, key: &[u8], now_ms: u64) {
    if matches!(get::<T>(db, key, now_ms), Ok(Some(c)) if c.is_empty()) {
        db.remove(key);
    }
}

/// The length of the collection at `key` (0 when missing).
pub fn len<T: Collection>(db: &mut Db, key: &[u8], now_ms: u64) -> Result<usize, Frame> {
    Ok(get::<T>(db, key, now_ms)?.map_or(0, |c| c.len()))
}

/// Resolves Redis's `start`/`stop` index pair (negative counts from the end) against a
/// length; `None` when the range is empty.
pub fn index_range(start: i64, stop: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        len + stop
    } else {
        stop.min(len - 1)
    };
    if start > stop || start >= len || stop < 0 {
        return None;
    }
    Some((start as usize, stop as usize))
}

/// HSCAN/SSCAN's cursor and options: `cursor [MATCH pattern] [COUNT n]` from `args[2]`.
pub struct ScanArgs {
    pub cursor: u64,
    pub pattern: Option<Bytes>,
    pub count: usize,
}

pub fn parse_scan(args: &[Bytes]) -> Result<ScanArgs, Frame> {
    let cursor = std::str::from_utf8(&args[2])
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| Frame::static_error("ERR invalid cursor"))?;
    let mut scan = ScanArgs {
        cursor,
        pattern: None,
        count: 10,
    };
    let mut i = 3;
    while i < args.len() {
        let Some(value) = args.get(i + 1) else {
            return Err(Frame::static_error(SYNTAX));
        };
        if is(&args[i], "match") {
            scan.pattern = Some(value.clone());
        } else if is(&args[i], "count") {
            match int_arg(value)? {
                n if n >= 1 => scan.count = n as usize,
                _ => return Err(Frame::static_error(SYNTAX)),
            }
        } else {
            return Err(Frame::static_error(SYNTAX));
        }
        i += 2;
    }
    Ok(scan)
}

/// One SCAN step over positions `0..len`, high to low as the keyspace's SCAN (a removal
/// swaps the last element into the hole, so an element present throughout is never
/// skipped). Calls `visit` on each position; returns the next cursor (0 when done).
pub fn scan_positions(len: usize, scan: &ScanArgs, mut visit: impl FnMut(usize)) -> u64 {
    let len = len as u64;
    let mut upper = if scan.cursor == 0 {
        len
    } else {
        scan.cursor.min(len)
    };
    let mut visited = 0;
    while upper > 0 && visited < scan.count {
        upper -= 1;
        visited += 1;
        visit(upper as usize);
    }
    upper
}

/// Whether `member` passes a scan's MATCH pattern.
pub fn scan_matches(scan: &ScanArgs, member: &[u8]) -> bool {
    scan.pattern
        .as_ref()
        .is_none_or(|p| crate::glob::glob_match(p, member))
}

/// The reply of one SCAN step: `[cursor, [items]]`.
pub fn scan_reply(cursor: u64, items: Vec<Frame>) -> Frame {
    Frame::Array(vec![
        Frame::Bulk(Bytes::from(cursor.to_string())),
        Frame::Array(items),
    ])
}

/// A small random source for SPOP, SRANDMEMBER and HRANDFIELD (xorshift, seeded from the
/// clock and an address: not for anything but picking elements).
pub fn random_index(len: usize) -> usize {
    use std::cell::Cell;
    thread_local! {
        static STATE: Cell<u64> = const { Cell::new(0) };
    }
    STATE.with(|state| {
        let mut x = state.get();
        if x == 0 {
            let seed = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64);
            x = seed ^ (state as *const Cell<u64> as u64) | 1;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        (x % len.max(1) as u64) as usize
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_follow_redis() {
        assert_eq!(index_range(0, -1, 3), Some((0, 2)));
        assert_eq!(index_range(-100, 100, 3), Some((0, 2)));
        assert_eq!(index_range(2, 1, 3), None);
        assert_eq!(index_range(5, 10, 3), None);
        assert_eq!(index_range(0, -4, 3), None);
        assert_eq!(index_range(0, 0, 0), None);
    }

    #[test]
    fn a_value_stays_small() {
        // A shared `Bytes` (32) and a tag: only long strings and collections pay it.
        assert_eq!(std::mem::size_of::<Value>(), 40);
    }
}
