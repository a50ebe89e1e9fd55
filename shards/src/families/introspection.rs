//! What Redis reports about how a key is stored: OBJECT (ENCODING, REFCOUNT, IDLETIME, FREQ,
//! HELP) and MEMORY (USAGE, DOCTOR, MALLOC-STATS, PURGE, HELP; STATS not yet). Tools and test suites read
//! them, so the replies take Redis's shapes and texts.
//!
//! This store keeps every value in one representation per type, so the encoding reported is
//! the one Redis 7.2 would pick for the value as it is now, with Redis's default thresholds
//! (a string of an integer `int`, up to 44 bytes `embstr`, else `raw`; a list `listpack`
//! while its listpack would fit 8 KB, else `quicklist`; a hash or sorted set of at most 128
//! entries of at most 64 bytes `listpack`, else `hashtable` / `skiplist`; a set of at most
//! 512 integers `intset`, else of at most 128 members of at most 64 bytes `listpack`, else
//! `hashtable`).
//! Redis also keeps a converted encoding after the value shrinks, and makes an APPENDed
//! string `raw`; those histories are not kept here (docs/COMPATIBILITY.md). IDLETIME is the
//! time since the last access when `maxmemory` eviction tracks it, else 0; MEMORY USAGE is an
//! estimate of this store's bytes for the key, sampled as Redis samples.

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::args::is;
use crate::ctx::Ctx;
use crate::errors::*;
use crate::keyspace::evict::Tracking;
use crate::keyspace::node::ValueRef;
use crate::values::value::Value;

/// Redis's shared integers (0 up to this, exclusive) report this reference count.
const SHARED_INTEGERS: i64 = 10_000;
const SHARED_REFCOUNT: i64 = i32::MAX as i64;
/// Redis 7.0's default encoding thresholds.
const EMBSTR_MAX: usize = 44;
const LISTPACK_ENTRIES_MAX: usize = 128;
const LISTPACK_VALUE_MAX: usize = 64;
const INTSET_ENTRIES_MAX: usize = 512;
/// `list-max-listpack-size -2`: a list's listpack holds at most 8 KB.
const LIST_LISTPACK_BYTES_MAX: usize = 8192;
/// A listpack's header (total bytes, element count) and end byte.
const LISTPACK_OVERHEAD: usize = 7;
/// MEMORY USAGE's default sample of a collection's elements.
const USAGE_SAMPLES: usize = 5;

const IDLE_NOT_TRACKED: &str = "ERR An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.";
const LFU_NOT_SELECTED: &str = "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.";

const OBJECT_HELP: &[&str] = &[
    "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ENCODING <key>",
    "    Return the kind of internal representation used in order to store the value",
    "    associated with a <key>.",
    "FREQ <key>",
    "    Return the access frequency index of the <key>. The returned integer is",
    "    proportional to the logarithm of the recent access frequency of the key.",
    "IDLETIME <key>",
    "    Return the idle time of the <key>, that is the approximated number of",
    "    seconds elapsed since the last access to the key.",
    "REFCOUNT <key>",
    "    Return the number of references of the value associated with the specified",
    "    <key>.",
    "HELP",
    "    Prints this help.",
];

const MEMORY_HELP: &[&str] = &[
    "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return memory problems reports.",
    "MALLOC-STATS",
    "    Return internal statistics report from the memory allocator.",
    "PURGE",
    "    Attempt to purge dirty pages for reclamation by the allocator.",
    "STATS",
    "    Return information about the memory usage of the server.",
    "USAGE <key> [SAMPLES <count>]",
    "    Return memory in bytes used by <key> and its value. Nested values are",
    "    sampled up to <count> times (default: 5, 0 means sample all).",
    "HELP",
    "    Prints this help.",
];

fn help(lines: &[&'static str]) -> Frame {
    Frame::Array(
        lines
            .iter()
            .map(|l| Frame::Simple(Bytes::from_static(l.as_bytes())))
            .collect(),
    )
}

/// OBJECT ENCODING | REFCOUNT | IDLETIME | FREQ <key>, OBJECT HELP.
pub fn object(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let sub = &args[1];
    if is(sub, "help") && args.len() == 2 {
        return help(OBJECT_HELP);
    }
    let name = ["encoding", "refcount", "idletime", "freq"]
        .into_iter()
        .find(|name| is(sub, name));
    let Some(name) = name else {
        return unknown_subcommand("object", sub);
    };
    if args.len() != 3 {
        return wrong_arity(&format!("object|{name}"));
    }
    let now = ctx.now_ms;
    let tracking = ctx.db().tracking();
    let score = ctx.db().access_score(&args[2], now);
    let Some(entry) = ctx.db().get(&args[2], now) else {
        return Frame::Null;
    };
    let score = score.unwrap_or(0) as i64;
    match (name, tracking) {
        ("encoding", _) => Frame::Bulk(Bytes::from_static(encoding(entry.value()).as_bytes())),
        ("refcount", _) => Frame::Integer(refcount(entry.value())),
        ("idletime", Tracking::Lfu) => Frame::static_error(IDLE_NOT_TRACKED),
        ("idletime", Tracking::Lru) => Frame::Integer(score),
        // Without a policy no access time is kept: a key reads as just used.
        ("idletime", Tracking::None) => Frame::Integer(0),
        (_, Tracking::Lfu) => Frame::Integer(255 - score),
        _ => Frame::static_error(LFU_NOT_SELECTED),
    }
}

/// The encoding Redis 7.2 would report for `value` (see the module docs).
fn encoding(value: ValueRef<'_>) -> &'static str {
    match value {
        ValueRef::Inline(bytes) => string_encoding(bytes),
        ValueRef::Typed(Value::Str(bytes)) => string_encoding(bytes),
        ValueRef::Typed(Value::List(list)) => {
            let mut bytes = LISTPACK_OVERHEAD;
            let small = list.len() < usize::from(u16::MAX)
                && list.iter().all(|item| {
                    bytes += crate::values::stream_nodes::string_element(item);
                    bytes <= LIST_LISTPACK_BYTES_MAX
                });
            if small {
                "listpack"
            } else {
                "quicklist"
            }
        }
        ValueRef::Typed(Value::Hash(hash)) => {
            let small = hash.len() <= LISTPACK_ENTRIES_MAX
                && hash
                    .iter()
                    .all(|(f, v)| f.len() <= LISTPACK_VALUE_MAX && v.len() <= LISTPACK_VALUE_MAX);
            if small {
                "listpack"
            } else {
                "hashtable"
            }
        }
        ValueRef::Typed(Value::Set(set)) => {
            let ints =
                set.len() <= INTSET_ENTRIES_MAX && set.iter().all(|m| canonical_int(m).is_some());
            let small = set.len() <= LISTPACK_ENTRIES_MAX
                && set.iter().all(|m| m.len() <= LISTPACK_VALUE_MAX);
            if ints {
                "intset"
            } else if small {
                "listpack"
            } else {
                "hashtable"
            }
        }
        ValueRef::Typed(Value::ZSet(zset)) => {
            let small = zset.len() <= LISTPACK_ENTRIES_MAX
                && zset.iter().all(|(m, _)| m.len() <= LISTPACK_VALUE_MAX);
            if small {
                "listpack"
            } else {
                "skiplist"
            }
        }
        ValueRef::Typed(Value::Stream(_)) => "stream",
    }
}

fn string_encoding(bytes: &[u8]) -> &'static str {
    if canonical_int(bytes).is_some() {
        "int"
    } else if bytes.len() <= EMBSTR_MAX {
        "embstr"
    } else {
        "raw"
    }
}

/// `bytes` as an integer when it is one's canonical text (what Redis stores as `int`).
fn canonical_int(bytes: &[u8]) -> Option<i64> {
    if bytes.len() > 20 {
        return None;
    }
    let n: i64 = std::str::from_utf8(bytes).ok()?.parse().ok()?;
    (n.to_string().as_bytes() == bytes).then_some(n)
}

fn refcount(value: ValueRef<'_>) -> i64 {
    let bytes = match value {
        ValueRef::Inline(bytes) => bytes,
        ValueRef::Typed(Value::Str(bytes)) => bytes,
        ValueRef::Typed(_) => return 1,
    };
    match canonical_int(bytes) {
        Some(n) if (0..SHARED_INTEGERS).contains(&n) => SHARED_REFCOUNT,
        _ => 1,
    }
}

/// MEMORY USAGE <key> [SAMPLES n] | DOCTOR | MALLOC-STATS | PURGE | HELP.
pub fn memory(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let sub = &args[1];
    let only = args.len() == 2;
    if is(sub, "help") && only {
        return help(MEMORY_HELP);
    }
    if is(sub, "purge") && only {
        return Frame::ok();
    }
    if is(sub, "malloc-stats") && only {
        return Frame::Bulk(Bytes::from_static(
            b"Stats not supported for the current allocator",
        ));
    }
    if is(sub, "doctor") && only {
        return Frame::Bulk(Bytes::from_static(
            b"Sam, I detected no memory problems in this instance that I can report. (This store keeps no allocator fragmentation or peak history to diagnose.)",
        ));
    }
    if is(sub, "stats") && only {
        return Frame::static_error(
            "ERR MEMORY STATS gathers from every shard: call it directly, not from a script",
        );
    }
    if !is(sub, "usage") {
        return unknown_subcommand("memory", sub);
    }
    if args.len() < 3 {
        return wrong_arity("memory|usage");
    }
    let samples = match &args[3..] {
        [] => USAGE_SAMPLES,
        [word, n] if is(word, "samples") => match crate::args::int_arg(n) {
            Ok(n) if n < 0 => return Frame::static_error(SYNTAX),
            Ok(0) => usize::MAX,
            Ok(n) => n as usize,
            Err(err) => return err,
        },
        _ => return Frame::static_error(SYNTAX),
    };
    let now = ctx.now_ms;
    let key_len = args[2].len();
    match ctx.db().get(&args[2], now) {
        Some(entry) => Frame::Integer(usage(key_len, entry.value(), samples) as i64),
        None => Frame::Null,
    }
}

/// Bytes of node, key and value; a collection's elements sampled (`samples` of them, the
/// rest counted at the sample's mean), as Redis estimates.
fn usage(key_len: usize, value: ValueRef<'_>, samples: usize) -> usize {
    /// The keyspace node's header and index slot.
    const NODE: usize = 24;
    /// Per element of a collection: its handle and the structure's share.
    const ELEMENT: usize = 24;
    fn sampled<I: ExactSizeIterator<Item = usize>>(sizes: I, samples: usize) -> usize {
        let len = sizes.len();
        let taken: Vec<usize> = sizes.take(samples).collect();
        if taken.is_empty() {
            return 0;
        }
        let sum: usize = taken.iter().map(|s| s + ELEMENT).sum();
        sum * len / taken.len()
    }
    let body = match value {
        ValueRef::Inline(bytes) => bytes.len(),
        ValueRef::Typed(Value::Str(bytes)) => bytes.len() + 32,
        ValueRef::Typed(Value::List(list)) => sampled(list.iter().map(|e| e.len()), samples),
        ValueRef::Typed(Value::Hash(hash)) => {
            sampled(hash.iter().map(|(f, v)| f.len() + v.len()), samples)
        }
        ValueRef::Typed(Value::Set(set)) => sampled(set.iter().map(|m| m.len()), samples),
        ValueRef::Typed(Value::ZSet(zset)) => {
            let sizes: Vec<usize> = zset.iter().map(|(m, _)| m.len() + 8).collect();
            sampled(sizes.into_iter(), samples)
        }
        ValueRef::Typed(Value::Stream(stream)) => stream.len() * 64,
    };
    NODE + key_len + body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_report_redis_encodings() {
        assert_eq!(string_encoding(b"12345"), "int");
        assert_eq!(string_encoding(b"-7"), "int");
        assert_eq!(string_encoding(b"007"), "embstr", "not canonical");
        assert_eq!(string_encoding(b"v"), "embstr");
        assert_eq!(string_encoding(&[b'a'; 44]), "embstr");
        assert_eq!(string_encoding(&[b'a'; 45]), "raw");
        assert_eq!(refcount(ValueRef::Inline(b"99")), SHARED_REFCOUNT);
        assert_eq!(refcount(ValueRef::Inline(b"12345")), 1);
    }
}
