//! The command table, declared as data. Each row names a command, its arity (Redis's rule:
//! `n` exactly, `-n` at least), its flags, where its keys sit (first, last, step), how the
//! server routes it, and the shard handler that runs it. Routing, arity checks, `COMMAND
//! COUNT|INFO|DOCS` and `docs/COMPATIBILITY.md` all read this one table.

pub mod compat;
pub mod docs;
pub mod info;

use std::collections::HashMap;
use std::sync::OnceLock;

use bytes::Bytes;

use crate::families::tasks::{
    admin as task_admin, batch as task_batch, commands as tasks, cron as task_cron,
    reports as task_reports,
};
use crate::families::{
    bitfield, bitmaps, blocking, dump, geo, hashes, hyperloglog, introspection, keys, lcs, lists,
    sets, sort, stream_groups, streams, strings, zsets,
};

pub use crate::spec::{
    flag, CommandSpec, FormKind, Handler, KeyFinder, KeyPositions, Merge, Route,
};

use flag::*;
use Merge::*;
use Route::*;

#[allow(clippy::too_many_arguments)] // one argument per table column
const fn row(
    name: &'static str,
    arity: i32,
    flags: u32,
    keys: (i32, i32, i32),
    route: Route,
    handler: Option<Handler>,
    group: &'static str,
    summary: &'static str,
) -> CommandSpec {
    CommandSpec {
        name,
        arity,
        flags,
        first_key: keys.0,
        last_key: keys.1,
        step: keys.2,
        route,
        handler,
        group,
        summary,
        movable_keys: None,
        form: FormKind::Plain,
    }
}

impl CommandSpec {
    /// This row, its request parsed into `form` once (see [`FormKind`]).
    const fn parsed(self, form: FormKind) -> CommandSpec {
        CommandSpec { form, ..self }
    }

    /// This row, with its keys found by `find` (Redis's `movablekeys`).
    const fn movable(self, find: KeyFinder) -> CommandSpec {
        CommandSpec {
            movable_keys: Some(find),
            ..self
        }
    }
}

fn lmpop_keys(args: &[Bytes]) -> Vec<usize> {
    lists::mpop_keys(args, 1)
}

fn blmpop_keys(args: &[Bytes]) -> Vec<usize> {
    lists::mpop_keys(args, 2)
}

/// MIGRATE's keys: the key at 3, or (when it is empty) every argument after KEYS.
fn migrate_keys(args: &[Bytes]) -> Vec<usize> {
    if args.len() > 3 && !args[3].is_empty() {
        return vec![3];
    }
    match args.iter().skip(6).position(|a| crate::args::is(a, "keys")) {
        Some(at) => (6 + at + 1..args.len()).collect(),
        None => Vec::new(),
    }
}

/// EVAL's keys: `numkeys` at 2, then the keys.
fn eval_keys(args: &[Bytes]) -> Vec<usize> {
    match args.get(2).and_then(|n| crate::args::parse_i64(n)) {
        Some(n) if n > 0 && (n as usize) <= args.len() - 3 => (3..3 + n as usize).collect(),
        _ => Vec::new(),
    }
}

fn sintercard_keys(args: &[Bytes]) -> Vec<usize> {
    sets::sintercard_keys(args)
}

const NONE: (i32, i32, i32) = (0, 0, 0);
const ONE: (i32, i32, i32) = (1, 1, 1);
const TWO: (i32, i32, i32) = (1, 2, 1);
const ALL: (i32, i32, i32) = (1, -1, 1);
const PAIRS: (i32, i32, i32) = (1, -1, 2);
const S: &str = "string";
const BM: &str = "bitmap";
const HLL: &str = "hyperloglog";
const GEO: &str = "geo";
const G: &str = "generic";
const C: &str = "connection";
const SV: &str = "server";
const CL: &str = "cluster";
const T: &str = "tasks";
const L: &str = "list";
const H: &str = "hash";
const ST: &str = "set";
const Z: &str = "sorted-set";
/// BLPOP-like: every argument but the last (the timeout) is a key.
const ALL_BUT_LAST: (i32, i32, i32) = (1, -2, 1);
/// Keys found by the row's `movable` function (after a count): none fixed.
const MOVABLE: (i32, i32, i32) = (0, 0, 0);
/// Keys found by a function, the first at position 1 (what `COMMAND INFO` shows for SORT,
/// GEORADIUS, ZUNIONSTORE …, as Redis does).
const MOVABLE_FROM_1: (i32, i32, i32) = (1, 1, 1);

pub static COMMANDS: &[CommandSpec] = &[
    // strings
    row("get", 2, READONLY | FAST, ONE, Keyed, Some(strings::get), S, "Returns the string value of a key."),
    row("set", -3, WRITE | DENYOOM, ONE, Keyed, Some(strings::set), S, "Sets the string value of a key, ignoring its type. The key is created if it doesn't exist."),
    row("setnx", 3, WRITE | DENYOOM | FAST, ONE, Keyed, Some(strings::setnx), S, "Set the string value of a key only when the key doesn't exist."),
    row("setex", 4, WRITE | DENYOOM, ONE, Keyed, Some(strings::setex), S, "Sets the string value and expiration time of a key. Creates the key if it doesn't exist."),
    row("psetex", 4, WRITE | DENYOOM, ONE, Keyed, Some(strings::psetex), S, "Sets both string value and expiration time in milliseconds of a key."),
    row("mget", -2, READONLY | FAST, ALL, Split(PerKey), Some(strings::mget), S, "Atomically returns the string values of one or more keys."),
    row("mset", -3, WRITE | DENYOOM, PAIRS, Split(Ok), Some(strings::mset), S, "Atomically creates or modifies the string values of one or more keys."),
    row("msetnx", -3, WRITE | DENYOOM, PAIRS, Keyed, Some(strings::msetnx), S, "Atomically modifies the string values of one or more keys only when all keys don't exist."),
    row("getset", 3, WRITE | DENYOOM | FAST, ONE, Keyed, Some(strings::getset), S, "Returns the previous string value of a key after setting it to a new value."),
    row("getdel", 2, WRITE | FAST, ONE, Keyed, Some(strings::getdel), S, "Returns the string value of a key after deleting the key."),
    row("getex", -2, WRITE | FAST, ONE, Keyed, Some(strings::getex), S, "Returns the string value of a key after setting its expiration time."),
    row("append", 3, WRITE | DENYOOM | FAST, ONE, Keyed, Some(strings::append), S, "Appends a string to the value of a key. Creates the key if it doesn't exist."),
    row("strlen", 2, READONLY | FAST, ONE, Keyed, Some(strings::strlen), S, "Returns the length of a string value."),
    row("incr", 2, WRITE | DENYOOM | FAST, ONE, Keyed, Some(strings::incr), S, "Increments the integer value of a key by one. Uses 0 as initial value if the key doesn't exist."),
    row("decr", 2, WRITE | DENYOOM | FAST, ONE, Keyed, Some(strings::decr), S, "Decrements the integer value of a key by one. Uses 0 as initial value if the key doesn't exist."),
    row("incrby", 3, WRITE | DENYOOM | FAST, ONE, Keyed, Some(strings::incrby), S, "Increments the integer value of a key by a number. Uses 0 as initial value if the key doesn't exist."),
    row("decrby", 3, WRITE | DENYOOM | FAST, ONE, Keyed, Some(strings::decrby), S, "Decrements a number from the integer value of a key. Uses 0 as initial value if the key doesn't exist."),
    row("incrbyfloat", 3, WRITE | DENYOOM | FAST, ONE, Keyed, Some(strings::incrbyfloat), S, "Increment the floating point value of a key by a number. Uses 0 as initial value if the key doesn't exist."),
    row("substr", 4, READONLY, ONE, Keyed, Some(strings::getrange), S, "Returns a substring from a string value."),
    row("getrange", 4, READONLY, ONE, Keyed, Some(strings::getrange), S, "Returns a substring of the string stored at a key."),
    row("lcs", -3, READONLY, (1, 2, 1), Keyed, Some(lcs::lcs), S, "Finds the longest common substring."),
    row("setrange", 4, WRITE | DENYOOM, ONE, Keyed, Some(strings::setrange), S, "Overwrites a part of a string value with another by an offset. Creates the key if it doesn't exist."),
    // bitmaps
    row("setbit", 4, WRITE | DENYOOM, ONE, Keyed, Some(bitmaps::setbit), BM, "Sets or clears the bit at offset of the string value. Creates the key if it doesn't exist."),
    row("getbit", 3, READONLY | FAST, ONE, Keyed, Some(bitmaps::getbit), BM, "Returns a bit value by offset."),
    row("bitcount", -2, READONLY, ONE, Keyed, Some(bitmaps::bitcount), BM, "Counts the number of set bits (population counting) in a string."),
    row("bitpos", -3, READONLY, ONE, Keyed, Some(bitmaps::bitpos), BM, "Finds the first set (1) or clear (0) bit in a string."),
    row("bitop", -4, WRITE | DENYOOM, (2, -1, 1), Keyed, Some(bitmaps::bitop), BM, "Performs bitwise operations on multiple strings, and stores the result."),
    row("bitfield", -2, WRITE | DENYOOM, ONE, Keyed, Some(bitfield::bitfield), BM, "Performs arbitrary bitfield integer operations on strings."),
    row("bitfield_ro", -2, READONLY | FAST, ONE, Keyed, Some(bitfield::bitfield_ro), BM, "Performs arbitrary read-only bitfield integer operations on strings."),
    // hyperloglog
    row("pfadd", -2, WRITE | DENYOOM | FAST, ONE, Keyed, Some(hyperloglog::pfadd), HLL, "Adds elements to a HyperLogLog key. Creates the key if it doesn't exist."),
    row("pfcount", -2, READONLY, ALL, Keyed, Some(hyperloglog::pfcount), HLL, "Returns the approximated cardinality of the set(s) observed by the HyperLogLog key(s)."),
    row("pfmerge", -2, WRITE | DENYOOM, ALL, Keyed, Some(hyperloglog::pfmerge), HLL, "Merges one or more HyperLogLog values into a single key."),
    // geo
    row("geoadd", -5, WRITE | DENYOOM, ONE, Keyed, Some(geo::geoadd), GEO, "Adds one or more members to a geospatial index. The key is created if it doesn't exist."),
    row("geodist", -4, READONLY, ONE, Keyed, Some(geo::geodist), GEO, "Returns the distance between two members of a geospatial index."),
    row("geohash", -2, READONLY, ONE, Keyed, Some(geo::geohash_command), GEO, "Returns members from a geospatial index as geohash strings."),
    row("geopos", -2, READONLY, ONE, Keyed, Some(geo::geopos), GEO, "Returns the longitude and latitude of members from a geospatial index."),
    row("georadius", -6, WRITE | DENYOOM, MOVABLE_FROM_1, Keyed, Some(geo::georadius), GEO, "Queries a geospatial index for members within a distance from a coordinate, optionally stores the result.").movable(geo::radius_keys),
    row("georadius_ro", -6, READONLY, ONE, Keyed, Some(geo::georadius_ro), GEO, "Returns members from a geospatial index that are within a distance from a coordinate."),
    row("georadiusbymember", -5, WRITE | DENYOOM, MOVABLE_FROM_1, Keyed, Some(geo::georadiusbymember), GEO, "Queries a geospatial index for members within a distance from a member, optionally stores the result.").movable(geo::radius_keys),
    row("georadiusbymember_ro", -5, READONLY, ONE, Keyed, Some(geo::georadiusbymember_ro), GEO, "Returns members from a geospatial index that are within a distance from a member."),
    row("geosearch", -7, READONLY, ONE, Keyed, Some(geo::geosearch), GEO, "Queries a geospatial index for members inside an area of a box or a circle."),
    row("geosearchstore", -8, WRITE | DENYOOM, (1, 2, 1), Keyed, Some(geo::geosearchstore), GEO, "Queries a geospatial index for members inside an area of a box or a circle, optionally stores the result."),
    // sort
    row("sort", -2, WRITE | DENYOOM, MOVABLE_FROM_1, Keyed, Some(sort::sort), G, "Sorts the elements in a list, a set, or a sorted set, optionally storing the result.").movable(sort::sort_keys).parsed(FormKind::Sort),
    row("sort_ro", -2, READONLY, MOVABLE_FROM_1, Keyed, Some(sort::sort_ro), G, "Returns the sorted elements of a list, a set, or a sorted set.").movable(sort::sort_keys).parsed(FormKind::Sort),
    // lists
    row("lpush", -3, WRITE | DENYOOM | FAST, ONE, Keyed, Some(lists::lpush), L, "Prepends one or more elements to a list. Creates the key if it doesn't exist."),
    row("rpush", -3, WRITE | DENYOOM | FAST, ONE, Keyed, Some(lists::rpush), L, "Appends one or more elements to a list. Creates the key if it doesn't exist."),
    row("lpushx", -3, WRITE | DENYOOM | FAST, ONE, Keyed, Some(lists::lpushx), L, "Prepends one or more elements to a list only when the list exists."),
    row("rpushx", -3, WRITE | DENYOOM | FAST, ONE, Keyed, Some(lists::rpushx), L, "Appends an element to a list only when the list exists."),
    row("lpop", -2, WRITE | FAST, ONE, Keyed, Some(lists::lpop), L, "Returns the first elements in a list after removing it. Deletes the list if the last element was popped."),
    row("rpop", -2, WRITE | FAST, ONE, Keyed, Some(lists::rpop), L, "Returns and removes the last elements of a list. Deletes the list if the last element was popped."),
    row("llen", 2, READONLY | FAST, ONE, Keyed, Some(lists::llen), L, "Returns the length of a list."),
    row("lrange", 4, READONLY, ONE, Keyed, Some(lists::lrange), L, "Returns a range of elements from a list."),
    row("lindex", 3, READONLY, ONE, Keyed, Some(lists::lindex), L, "Returns an element from a list by its index."),
    row("lset", 4, WRITE | DENYOOM, ONE, Keyed, Some(lists::lset), L, "Sets the value of an element in a list by its index."),
    row("linsert", 5, WRITE | DENYOOM, ONE, Keyed, Some(lists::linsert), L, "Inserts an element before or after another element in a list."),
    row("lrem", 4, WRITE, ONE, Keyed, Some(lists::lrem), L, "Removes elements from a list. Deletes the list if the last element was removed."),
    row("ltrim", 4, WRITE, ONE, Keyed, Some(lists::ltrim), L, "Removes elements from both ends a list. Deletes the list if all elements were trimmed."),
    row("lpos", -3, READONLY, ONE, Keyed, Some(lists::lpos), L, "Returns the index of matching elements in a list."),
    row("lmove", 5, WRITE | DENYOOM, TWO, Keyed, Some(lists::lmove), L, "Returns an element after popping it from one list and pushing it to another. Deletes the list if the last element was moved."),
    row("rpoplpush", 3, WRITE | DENYOOM, TWO, Keyed, Some(lists::rpoplpush), L, "Returns the last element of a list after removing and pushing it to another list. Deletes the list if the last element was popped."),
    row("lmpop", -4, WRITE, MOVABLE, Keyed, Some(lists::lmpop), L, "Returns multiple elements from a list after removing them. Deletes the list if the last element was popped.").movable(lmpop_keys),
    row("blpop", -3, WRITE | BLOCKING, ALL_BUT_LAST, Keyed, Some(blocking::blpop), L, "Removes and returns the first element in a list. Blocks until an element is available otherwise. Deletes the list if the last element was popped.").parsed(FormKind::Blocking),
    row("brpop", -3, WRITE | BLOCKING, ALL_BUT_LAST, Keyed, Some(blocking::brpop), L, "Removes and returns the last element in a list. Blocks until an element is available otherwise. Deletes the list if the last element was popped.").parsed(FormKind::Blocking),
    row("blmove", 6, WRITE | DENYOOM | BLOCKING, TWO, Keyed, Some(blocking::blmove), L, "Pops an element from a list, pushes it to another list and returns it. Blocks until an element is available otherwise. Deletes the list if the last element was moved.").parsed(FormKind::Blocking),
    row("brpoplpush", 4, WRITE | DENYOOM | BLOCKING, TWO, Keyed, Some(blocking::brpoplpush), L, "Pops an element from a list, pushes it to another list and returns it. Block until an element is available otherwise. Deletes the list if the last element was popped.").parsed(FormKind::Blocking),
    row("blmpop", -5, WRITE | BLOCKING, MOVABLE, Keyed, Some(blocking::blmpop), L, "Pops the first element from one of multiple lists. Blocks until an element is available otherwise. Deletes the list if the last element was popped.").movable(blmpop_keys).parsed(FormKind::Blocking),
    // hashes
    row("hset", -4, WRITE | DENYOOM | FAST, ONE, Keyed, Some(hashes::hset), H, "Creates or modifies the value of a field in a hash."),
    row("hmset", -4, WRITE | DENYOOM | FAST, ONE, Keyed, Some(hashes::hmset), H, "Sets the values of multiple fields."),
    row("hsetnx", 4, WRITE | DENYOOM | FAST, ONE, Keyed, Some(hashes::hsetnx), H, "Sets the value of a field in a hash only when the field doesn't exist."),
    row("hget", 3, READONLY | FAST, ONE, Keyed, Some(hashes::hget), H, "Returns the value of a field in a hash."),
    row("hmget", -3, READONLY | FAST, ONE, Keyed, Some(hashes::hmget), H, "Returns the values of all fields in a hash."),
    row("hdel", -3, WRITE | FAST, ONE, Keyed, Some(hashes::hdel), H, "Deletes one or more fields and their values from a hash. Deletes the hash if no fields remain."),
    row("hlen", 2, READONLY | FAST, ONE, Keyed, Some(hashes::hlen), H, "Returns the number of fields in a hash."),
    row("hstrlen", 3, READONLY | FAST, ONE, Keyed, Some(hashes::hstrlen), H, "Returns the length of the value of a field."),
    row("hexists", 3, READONLY | FAST, ONE, Keyed, Some(hashes::hexists), H, "Determines whether a field exists in a hash."),
    row("hkeys", 2, READONLY, ONE, Keyed, Some(hashes::hkeys), H, "Returns all fields in a hash."),
    row("hvals", 2, READONLY, ONE, Keyed, Some(hashes::hvals), H, "Returns all values in a hash."),
    row("hgetall", 2, READONLY, ONE, Keyed, Some(hashes::hgetall), H, "Returns all fields and values in a hash."),
    row("hincrby", 4, WRITE | DENYOOM | FAST, ONE, Keyed, Some(hashes::hincrby), H, "Increments the integer value of a field in a hash by a number. Uses 0 as initial value if the field doesn't exist."),
    row("hincrbyfloat", 4, WRITE | DENYOOM | FAST, ONE, Keyed, Some(hashes::hincrbyfloat), H, "Increments the floating point value of a field by a number. Uses 0 as initial value if the field doesn't exist."),
    row("hrandfield", -2, READONLY, ONE, Keyed, Some(hashes::hrandfield), H, "Returns one or more random fields from a hash."),
    row("hscan", -3, READONLY, ONE, Keyed, Some(hashes::hscan), H, "Iterates over fields and values of a hash."),
    // sets
    row("sadd", -3, WRITE | DENYOOM | FAST, ONE, Keyed, Some(sets::sadd), ST, "Adds one or more members to a set. Creates the key if it doesn't exist."),
    row("srem", -3, WRITE | FAST, ONE, Keyed, Some(sets::srem), ST, "Removes one or more members from a set. Deletes the set if the last member was removed."),
    row("smembers", 2, READONLY, ONE, Keyed, Some(sets::smembers), ST, "Returns all members of a set."),
    row("sismember", 3, READONLY | FAST, ONE, Keyed, Some(sets::sismember), ST, "Determines whether a member belongs to a set."),
    row("smismember", -3, READONLY | FAST, ONE, Keyed, Some(sets::smismember), ST, "Determines whether multiple members belong to a set."),
    row("scard", 2, READONLY | FAST, ONE, Keyed, Some(sets::scard), ST, "Returns the number of members in a set."),
    row("spop", -2, WRITE | FAST, ONE, Keyed, Some(sets::spop), ST, "Returns one or more random members from a set after removing them. Deletes the set if the last member was popped."),
    row("srandmember", -2, READONLY, ONE, Keyed, Some(sets::srandmember), ST, "Get one or multiple random members from a set"),
    row("smove", 4, WRITE | FAST, TWO, Keyed, Some(sets::smove), ST, "Moves a member from one set to another."),
    row("sinter", -2, READONLY, ALL, Keyed, Some(sets::sinter), ST, "Returns the intersect of multiple sets."),
    row("sunion", -2, READONLY, ALL, Keyed, Some(sets::sunion), ST, "Returns the union of multiple sets."),
    row("sdiff", -2, READONLY, ALL, Keyed, Some(sets::sdiff), ST, "Returns the difference of multiple sets."),
    row("sinterstore", -3, WRITE | DENYOOM, ALL, Keyed, Some(sets::sinterstore), ST, "Stores the intersect of multiple sets in a key."),
    row("sunionstore", -3, WRITE | DENYOOM, ALL, Keyed, Some(sets::sunionstore), ST, "Stores the union of multiple sets in a key."),
    row("sdiffstore", -3, WRITE | DENYOOM, ALL, Keyed, Some(sets::sdiffstore), ST, "Stores the difference of multiple sets in a key."),
    row("sintercard", -3, READONLY, MOVABLE, Keyed, Some(sets::sintercard), ST, "Returns the number of members of the intersect of multiple sets.").movable(sintercard_keys),
    row("sscan", -3, READONLY, ONE, Keyed, Some(sets::sscan), ST, "Iterates over members of a set."),
    // streams
    row("xadd", -5, WRITE | DENYOOM | FAST, ONE, Keyed, Some(streams::xadd), "stream", "Appends a new message to a stream. Creates the key if it doesn't exist."),
    row("xrange", -4, READONLY, ONE, Keyed, Some(streams::xrange), "stream", "Returns the messages from a stream within a range of IDs."),
    row("xrevrange", -4, READONLY, ONE, Keyed, Some(streams::xrevrange), "stream", "Returns the messages from a stream within a range of IDs in reverse order."),
    row("xlen", 2, READONLY | FAST, ONE, Keyed, Some(streams::xlen), "stream", "Return the number of messages in a stream."),
    row("xdel", -3, WRITE | FAST, ONE, Keyed, Some(streams::xdel), "stream", "Returns the number of messages after removing them from a stream."),
    row("xtrim", -4, WRITE, ONE, Keyed, Some(streams::xtrim), "stream", "Deletes messages from the beginning of a stream."),
    row("xread", -4, READONLY | BLOCKING, MOVABLE, Keyed, Some(blocking::xread), "stream", "Returns messages from multiple streams with IDs greater than the ones requested. Blocks until a message is available otherwise.").movable(streams::xread_keys).parsed(FormKind::Blocking),
    row("xgroup", -2, WRITE | DENYOOM | CONTAINER, (2, 2, 1), Keyed, Some(stream_groups::xgroup), "stream", "A container for consumer groups commands."),
    row("xreadgroup", -7, WRITE | BLOCKING, MOVABLE, Keyed, Some(blocking::xreadgroup), "stream", "Returns new or historical messages from a stream for a consumer in a group. Blocks until a message is available otherwise.").movable(stream_groups::xreadgroup_keys).parsed(FormKind::Blocking),
    row("xack", -4, WRITE | FAST, ONE, Keyed, Some(stream_groups::xack), "stream", "Returns the number of messages that were successfully acknowledged by the consumer group member of a stream."),
    row("xpending", -3, READONLY, ONE, Keyed, Some(stream_groups::xpending), "stream", "Returns the information and entries from a stream consumer group's pending entries list."),
    row("xclaim", -6, WRITE | FAST, ONE, Keyed, Some(stream_groups::xclaim), "stream", "Changes, or acquires, ownership of a message in a consumer group, as if the message was delivered a consumer group member."),
    row("xautoclaim", -6, WRITE | FAST, ONE, Keyed, Some(stream_groups::xautoclaim), "stream", "Changes, or acquires, ownership of messages in a consumer group, as if the messages were delivered to as consumer group member."),
    row("xsetid", -3, WRITE | DENYOOM | FAST, ONE, Keyed, Some(stream_groups::xsetid), "stream", "An internal command for replicating stream values."),
    row("xinfo", -2, READONLY | CONTAINER, (2, 2, 1), Keyed, Some(stream_groups::xinfo), "stream", "A container for stream introspection commands."),
    // sorted sets
    row("zadd", -4, WRITE | DENYOOM | FAST, ONE, Keyed, Some(zsets::zadd), Z, "Adds one or more members to a sorted set, or updates their scores. Creates the key if it doesn't exist."),
    row("zincrby", 4, WRITE | DENYOOM | FAST, ONE, Keyed, Some(zsets::zincrby), Z, "Increments the score of a member in a sorted set."),
    row("zrem", -3, WRITE | FAST, ONE, Keyed, Some(zsets::zrem), Z, "Removes one or more members from a sorted set. Deletes the sorted set if all members were removed."),
    row("zcard", 2, READONLY | FAST, ONE, Keyed, Some(zsets::zcard), Z, "Returns the number of members in a sorted set."),
    row("zscore", 3, READONLY | FAST, ONE, Keyed, Some(zsets::zscore), Z, "Returns the score of a member in a sorted set."),
    row("zmscore", -3, READONLY | FAST, ONE, Keyed, Some(zsets::zmscore), Z, "Returns the score of one or more members in a sorted set."),
    row("zrank", -3, READONLY | FAST, ONE, Keyed, Some(zsets::zrank), Z, "Returns the index of a member in a sorted set ordered by ascending scores."),
    row("zrevrank", -3, READONLY | FAST, ONE, Keyed, Some(zsets::zrevrank), Z, "Returns the index of a member in a sorted set ordered by descending scores."),
    row("zcount", 4, READONLY | FAST, ONE, Keyed, Some(zsets::zcount), Z, "Returns the count of members in a sorted set that have scores within a range."),
    row("zlexcount", 4, READONLY | FAST, ONE, Keyed, Some(zsets::zlexcount), Z, "Returns the number of members in a sorted set within a lexicographical range."),
    row("zrange", -4, READONLY, ONE, Keyed, Some(zsets::zrange), Z, "Returns members in a sorted set within a range of indexes."),
    row("zrangestore", -5, WRITE | DENYOOM, TWO, Keyed, Some(zsets::zrangestore), Z, "Stores a range of members from sorted set in a key."),
    row("zrevrange", -4, READONLY, ONE, Keyed, Some(zsets::zrevrange), Z, "Returns members in a sorted set within a range of indexes in reverse order."),
    row("zrangebyscore", -4, READONLY, ONE, Keyed, Some(zsets::zrangebyscore), Z, "Returns members in a sorted set within a range of scores."),
    row("zrevrangebyscore", -4, READONLY, ONE, Keyed, Some(zsets::zrevrangebyscore), Z, "Returns members in a sorted set within a range of scores in reverse order."),
    row("zrangebylex", -4, READONLY, ONE, Keyed, Some(zsets::zrangebylex), Z, "Returns members in a sorted set within a lexicographical range."),
    row("zrevrangebylex", -4, READONLY, ONE, Keyed, Some(zsets::zrevrangebylex), Z, "Returns members in a sorted set within a lexicographical range in reverse order."),
    row("zremrangebyrank", 4, WRITE, ONE, Keyed, Some(zsets::zremrangebyrank), Z, "Removes members in a sorted set within a range of indexes. Deletes the sorted set if all members were removed."),
    row("zremrangebyscore", 4, WRITE, ONE, Keyed, Some(zsets::zremrangebyscore), Z, "Removes members in a sorted set within a range of scores. Deletes the sorted set if all members were removed."),
    row("zremrangebylex", 4, WRITE, ONE, Keyed, Some(zsets::zremrangebylex), Z, "Removes members in a sorted set within a lexicographical range. Deletes the sorted set if all members were removed."),
    row("zpopmin", -2, WRITE | FAST, ONE, Keyed, Some(zsets::zpopmin), Z, "Returns the lowest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped."),
    row("zpopmax", -2, WRITE | FAST, ONE, Keyed, Some(zsets::zpopmax), Z, "Returns the highest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped."),
    row("bzpopmin", -3, WRITE | FAST | BLOCKING, ALL_BUT_LAST, Keyed, Some(blocking::bzpopmin), Z, "Removes and returns the member with the lowest score from one or more sorted sets. Blocks until a member is available otherwise. Deletes the sorted set if the last element was popped.").parsed(FormKind::Blocking),
    row("bzpopmax", -3, WRITE | FAST | BLOCKING, ALL_BUT_LAST, Keyed, Some(blocking::bzpopmax), Z, "Removes and returns the member with the highest score from one or more sorted sets. Blocks until a member available otherwise.  Deletes the sorted set if the last element was popped.").parsed(FormKind::Blocking),
    row("zmpop", -4, WRITE, MOVABLE, Keyed, Some(zsets::zmpop), Z, "Returns the highest- or lowest-scoring members from one or more sorted sets after removing them. Deletes the sorted set if the last member was popped.").movable(zsets::numkeys_at_1),
    row("bzmpop", -5, WRITE | BLOCKING, MOVABLE, Keyed, Some(blocking::bzmpop), Z, "Removes and returns a member by score from one or more sorted sets. Blocks until a member is available otherwise. Deletes the sorted set if the last element was popped.").movable(zsets::numkeys_at_2).parsed(FormKind::Blocking),
    row("zunion", -3, READONLY, MOVABLE, Keyed, Some(zsets::zunion), Z, "Returns the union of multiple sorted sets.").movable(zsets::numkeys_at_1),
    row("zinter", -3, READONLY, MOVABLE, Keyed, Some(zsets::zinter), Z, "Returns the intersect of multiple sorted sets.").movable(zsets::numkeys_at_1),
    row("zdiff", -3, READONLY, MOVABLE, Keyed, Some(zsets::zdiff), Z, "Returns the difference between multiple sorted sets.").movable(zsets::numkeys_at_1),
    row("zintercard", -3, READONLY, MOVABLE, Keyed, Some(zsets::zintercard), Z, "Returns the number of members of the intersect of multiple sorted sets.").movable(zsets::numkeys_at_1),
    row("zunionstore", -4, WRITE | DENYOOM, MOVABLE_FROM_1, Keyed, Some(zsets::zunionstore), Z, "Stores the union of multiple sorted sets in a key.").movable(zsets::store_keys),
    row("zinterstore", -4, WRITE | DENYOOM, MOVABLE_FROM_1, Keyed, Some(zsets::zinterstore), Z, "Stores the intersect of multiple sorted sets in a key.").movable(zsets::store_keys),
    row("zdiffstore", -4, WRITE | DENYOOM, MOVABLE_FROM_1, Keyed, Some(zsets::zdiffstore), Z, "Stores the difference of multiple sorted sets in a key.").movable(zsets::store_keys),
    row("zrandmember", -2, READONLY, ONE, Keyed, Some(zsets::zrandmember), Z, "Returns one or more random members from a sorted set."),
    row("zscan", -3, READONLY, ONE, Keyed, Some(zsets::zscan), Z, "Iterates over members and scores of a sorted set."),
    // keys
    row("del", -2, WRITE, ALL, Split(Sum), Some(keys::del), G, "Deletes one or more keys."),
    row("unlink", -2, WRITE | FAST, ALL, Split(Sum), Some(keys::del), G, "Asynchronously deletes one or more keys."),
    row("exists", -2, READONLY | FAST, ALL, Split(Sum), Some(keys::exists), G, "Determines whether one or more keys exist."),
    row("touch", -2, READONLY | FAST, ALL, Split(Sum), Some(keys::exists), G, "Returns the number of existing keys out of those specified after updating the time they were last accessed."),
    row("expire", -3, WRITE | FAST, ONE, Keyed, Some(keys::expire), G, "Sets the expiration time of a key in seconds."),
    row("pexpire", -3, WRITE | FAST, ONE, Keyed, Some(keys::pexpire), G, "Sets the expiration time of a key in milliseconds."),
    row("expireat", -3, WRITE | FAST, ONE, Keyed, Some(keys::expireat), G, "Sets the expiration time of a key to a Unix timestamp."),
    row("pexpireat", -3, WRITE | FAST, ONE, Keyed, Some(keys::pexpireat), G, "Sets the expiration time of a key to a Unix milliseconds timestamp."),
    row("expiretime", 2, READONLY | FAST, ONE, Keyed, Some(keys::expiretime), G, "Returns the expiration time of a key as a Unix timestamp."),
    row("pexpiretime", 2, READONLY | FAST, ONE, Keyed, Some(keys::pexpiretime), G, "Returns the expiration time of a key as a Unix milliseconds timestamp."),
    row("ttl", 2, READONLY | FAST, ONE, Keyed, Some(keys::ttl), G, "Returns the expiration time in seconds of a key."),
    row("pttl", 2, READONLY | FAST, ONE, Keyed, Some(keys::pttl), G, "Returns the expiration time in milliseconds of a key."),
    row("persist", 2, WRITE | FAST, ONE, Keyed, Some(keys::persist), G, "Removes the expiration time of a key."),
    row("type", 2, READONLY | FAST, ONE, Keyed, Some(keys::type_of), G, "Determines the type of value stored at a key."),
    row("keys", 2, READONLY, NONE, AllShards(Concat), Some(keys::keys), G, "Returns all key names that match a pattern."),
    row("scan", -2, READONLY, NONE, Server, None, G, "Iterates over the key names in the database."),
    row("randomkey", 1, READONLY, NONE, Server, None, G, "Returns a random key name from the database."),
    row("rename", 3, WRITE, TWO, Keyed, Some(keys::rename), G, "Renames a key and overwrites the destination."),
    row("renamenx", 3, WRITE | FAST, TWO, Keyed, Some(keys::renamenx), G, "Renames a key only when the target key name doesn't exist."),
    row("move", 3, WRITE | FAST, ONE, Keyed, Some(keys::move_key), G, "Moves a key to another database."),
    row("object", -2, READONLY | CONTAINER, (2, 2, 1), Keyed, Some(introspection::object), G, "A container for object introspection commands."),
    row("memory", -2, READONLY | CONTAINER, (2, 2, 1), Keyed, Some(introspection::memory), SV, "A container for memory diagnostics commands."),
    row("copy", -3, WRITE | DENYOOM, TWO, Keyed, Some(keys::copy), G, "Copies the value of a key to a new key."),
    row("dump", 2, READONLY, ONE, Keyed, Some(dump::dump), G, "Returns a serialized representation of the value stored at a key."),
    row("restore", -4, WRITE | DENYOOM, ONE, Keyed, Some(dump::restore), G, "Creates a key from the serialized representation of a value."),
    row("restore-asking", -4, WRITE | DENYOOM | ASKING, ONE, Keyed, Some(dump::restore), "server", "An internal command for migrating keys in a cluster."),
    row("migrate", -6, WRITE, (3, 3, 1), Server, None, G, "Atomically transfers a key from one Redis instance to another.").movable(migrate_keys),
    row("dbsize", 1, READONLY | FAST, NONE, AllShards(Sum), Some(keys::dbsize), SV, "Returns the number of keys in the database."),
    row("swapdb", 3, WRITE | FAST, NONE, AllShards(Ok), Some(keys::swapdb), SV, "Swaps two Redis databases."),
    row("flushdb", -1, WRITE, NONE, AllShards(Ok), Some(keys::flushdb), SV, "Remove all keys from the current database."),
    row("flushall", -1, WRITE, NONE, AllShards(Ok), Some(keys::flushall), SV, "Removes all keys from all databases."),
    // tasks
    row("task.submit", -3, WRITE | DENYOOM | FAST | TASK, ONE, Keyed, Some(tasks::submit), T, "Submits a task to a queue; returns its id."),
    row("task.fetch", -2, WRITE | FAST | TASK, NONE, Server, None, T, "Leases tasks from queues in order, after acknowledging finished ones.").parsed(FormKind::Fetch),
    row("task.ack", -2, WRITE | FAST | TASK, ONE, Keyed, Some(tasks::ack), T, "Finishes a leased task, with an optional result."),
    row("task.fail", -2, WRITE | FAST | TASK, ONE, Keyed, Some(tasks::fail), T, "Fails a leased task: retried with backoff while attempts remain, else dead."),
    row("task.extend", 3, WRITE | FAST | TASK, ONE, Keyed, Some(tasks::extend), T, "Extends the lease on a task."),
    row("task.get", 2, READONLY | FAST | TASK, ONE, Keyed, Some(tasks::get), T, "Returns a task's state, attempts, payload, result and error."),
    row("task.wait", -2, READONLY | TASK, NONE, Server, None, T, "Waits until a task finishes and returns its fields.").parsed(FormKind::Wait),
    row("task.cancel", 2, WRITE | FAST | TASK, ONE, Keyed, Some(tasks::cancel), T, "Cancels a task that has not finished."),
    row("task.dead", 2, READONLY | TASK, ONE, Keyed, Some(tasks::dead), T, "Lists the dead tasks of a queue."),
    row("task.requeue", 2, WRITE | TASK, ONE, Keyed, Some(tasks::requeue), T, "Puts a dead task, or every dead task of a queue, back in its queue."),
    row("task.pause", 2, WRITE | FAST | TASK, ONE, Keyed, Some(tasks::pause), T, "Stops leasing from a queue."),
    row("task.resume", 2, WRITE | FAST | TASK, ONE, Keyed, Some(tasks::resume), T, "Resumes leasing from a queue."),
    row("task.limit", -2, WRITE | TASK, ONE, Keyed, Some(tasks::limit), T, "Sets or shows a queue's concurrency and rate limits."),
    row("task.stats", -2, READONLY | TASK, ONE, Keyed, Some(tasks::stats), T, "Returns a queue's counts, the age of its oldest waiting task and, with LATENCY, its wait and run time histograms."),
    row("task.queues", 1, READONLY | TASK, NONE, AllShards(Concat), Some(tasks::queues), T, "Lists the queues."),
    row("task.worker", -2, NOSCRIPT | FAST | TASK, NONE, Server, None, T, "Binds the connection to a worker identity that owns its leases.").parsed(FormKind::Worker),
    row("task.workers", 1, READONLY | TASK, NONE, Server, None, T, "Lists the workers, their connections and leases."),
    row("task.quiet", 2, NOSCRIPT | TASK, NONE, Server, None, T, "Stops a worker's fetches (to drain it)."),
    row("task.cron", -2, WRITE | TASK, NONE, Server, Some(task_cron::cron), T, "Defines, removes or lists server-side schedules that submit tasks."),
    row("task.progress", 3, WRITE | FAST | TASK, ONE, Keyed, Some(task_reports::progress), T, "Reports a leased task's progress."),
    row("task.log", 3, WRITE | FAST | TASK, ONE, Keyed, Some(task_reports::log), T, "Adds a log line to a leased task."),
    row("task.logs", 2, READONLY | TASK, ONE, Keyed, Some(task_reports::logs), T, "Returns a task's log lines."),
    row("task.events", -2, READONLY | TASK, NONE, Server, None, T, "Reads a queue's task state changes from a cursor, optionally waiting.").parsed(FormKind::Events),
    row("task.batch", -4, WRITE | DENYOOM | TASK, NONE, Server, Some(task_batch::open), T, "Submits child tasks with callbacks that run once after the last child ends."),
    row("task.batchinfo", 2, READONLY | TASK, ONE, Keyed, Some(task_batch::info), T, "Returns a batch's counts and callbacks."),
    row("task.flow", -6, WRITE | DENYOOM | TASK, NONE, Server, Some(task_batch::open), T, "Submits child tasks and a parent that runs after them, with a rule for failed children."),
    row("task.results", 2, READONLY | TASK, ONE, Keyed, Some(task_batch::results), T, "Returns a flow's children's ends and results."),
    row("task.release", -2, WRITE | FAST | TASK, ONE, Keyed, Some(task_batch::release), T, "Lets a held task go to its queue."),
    row("task.list", -3, READONLY | TASK, ONE, Keyed, Some(task_admin::list), T, "Pages through a queue's tasks in one state."),
    row("task.export", 2, WRITE | TASK, ONE, Keyed, Some(task_admin::export), T, "Takes a queue out with its tasks, as a payload for TASK.IMPORT (MIGRATE sends it)."),
    row("task.import", 3, WRITE | DENYOOM | TASK | ASKING, ONE, Keyed, Some(task_admin::import), T, "Takes in a queue that TASK.EXPORT gave out."),
    row("task.purge", 3, WRITE | TASK, ONE, Keyed, Some(task_admin::purge), T, "Drops every task of a queue in one state."),
    row("task.delete", 2, WRITE | TASK, ONE, Keyed, Some(task_admin::delete), T, "Drops one task that is not leased, for good."),
    row("task.batches", -1, READONLY | TASK, NONE, AllShards(Concat), Some(task_batch::list), T, "Lists the newest batches and flows with their counts."),
    row("task.delqueue", -2, WRITE | TASK, ONE, Keyed, Some(task_admin::delqueue), T, "Deletes a queue and every task in it."),
    // pub/sub
    row("subscribe", -2, NOSCRIPT | LOADING | STALE | WHILE_SUBSCRIBED | PUBSUB, NONE, Server, None, "pubsub", "Listens for messages published to channels."),
    row("psubscribe", -2, NOSCRIPT | LOADING | STALE | WHILE_SUBSCRIBED | PUBSUB, NONE, Server, None, "pubsub", "Listens for messages published to channels that match one or more patterns."),
    row("unsubscribe", -1, NOSCRIPT | LOADING | STALE | WHILE_SUBSCRIBED | PUBSUB, NONE, Server, None, "pubsub", "Stops listening to messages posted to channels."),
    row("punsubscribe", -1, NOSCRIPT | LOADING | STALE | WHILE_SUBSCRIBED | PUBSUB, NONE, Server, None, "pubsub", "Stops listening to messages published to channels that match one or more patterns."),
    row("publish", 3, LOADING | STALE | FAST | EMBEDDED | PUBSUB, NONE, Server, None, "pubsub", "Posts a message to a channel."),
    row("pubsub", -2, LOADING | STALE | CONTAINER, NONE, Server, None, "pubsub", "A container for Pub/Sub commands."),
    row("ssubscribe", -2, NOSCRIPT | LOADING | STALE | WHILE_SUBSCRIBED | PUBSUB, ALL, Server, None, "pubsub", "Listens for messages published to shard channels."),
    row("sunsubscribe", -1, NOSCRIPT | LOADING | STALE | WHILE_SUBSCRIBED | PUBSUB, ALL, Server, None, "pubsub", "Stops listening to messages posted to shard channels."),
    row("spublish", 3, LOADING | STALE | FAST | EMBEDDED | PUBSUB, ONE, Server, None, "pubsub", "Post a message to a shard channel"),
    // scripting
    row("eval", -3, NOSCRIPT | STALE | SKIP_MONITOR | NO_MANDATORY_KEYS, MOVABLE, Server, None, "scripting", "Executes a server-side Lua script.").movable(eval_keys).parsed(FormKind::Script),
    row("evalsha", -3, NOSCRIPT | STALE | SKIP_MONITOR | NO_MANDATORY_KEYS, MOVABLE, Server, None, "scripting", "Executes a server-side Lua script by SHA1 digest.").movable(eval_keys).parsed(FormKind::Script),
    row("eval_ro", -3, NOSCRIPT | STALE | READONLY | SKIP_MONITOR | NO_MANDATORY_KEYS, MOVABLE, Server, None, "scripting", "Executes a read-only server-side Lua script.").movable(eval_keys).parsed(FormKind::Script),
    row("evalsha_ro", -3, NOSCRIPT | STALE | READONLY | SKIP_MONITOR | NO_MANDATORY_KEYS, MOVABLE, Server, None, "scripting", "Executes a read-only server-side Lua script by SHA1 digest.").movable(eval_keys).parsed(FormKind::Script),
    row("fcall", -3, NOSCRIPT | STALE | SKIP_MONITOR | NO_MANDATORY_KEYS, MOVABLE, Server, None, "scripting", "Invokes a function.").movable(eval_keys).parsed(FormKind::Script),
    row("fcall_ro", -3, NOSCRIPT | STALE | READONLY | SKIP_MONITOR | NO_MANDATORY_KEYS, MOVABLE, Server, None, "scripting", "Invokes a read-only function.").movable(eval_keys).parsed(FormKind::Script),
    row("function", -2, NOSCRIPT | PASSES_LOCKS | CONTAINER, NONE, Server, None, "scripting", "A container for function commands."),
    row("script", -2, NOSCRIPT | PASSES_LOCKS | CONTAINER, NONE, Server, None, "scripting", "A container for Lua scripts management commands."),
    // transactions
    row("multi", 1, NOSCRIPT | LOADING | STALE | FAST | TRANSACTION_CONTROL | ALLOW_BUSY, NONE, Server, None, "transactions", "Starts a transaction."),
    row("exec", 1, NOSCRIPT | LOADING | STALE | TRANSACTION_CONTROL | SKIP_SLOWLOG, NONE, Server, None, "transactions", "Executes all commands in a transaction."),
    row("discard", 1, NOSCRIPT | LOADING | STALE | FAST | TRANSACTION_CONTROL | ALLOW_BUSY, NONE, Server, None, "transactions", "Discards a transaction."),
    row("watch", -2, NOSCRIPT | LOADING | STALE | FAST | TRANSACTION_CONTROL | ALLOW_BUSY, ALL, Server, None, "transactions", "Monitors changes to keys to determine the execution of a transaction."),
    row("unwatch", 1, NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY, NONE, Server, None, "transactions", "Forgets about watched keys of a transaction."),
    // connection and server
    row("ping", -1, FAST | WHILE_SUBSCRIBED | EMBEDDED, NONE, Server, None, C, "Returns the server's liveliness response."),
    row("echo", 2, FAST | EMBEDDED | LOADING | STALE, NONE, Server, None, C, "Returns the given string."),
    row("hello", -1, FAST | NO_AUTH | NOSCRIPT | LOADING | STALE | PASSES_LOCKS | ALLOW_BUSY, NONE, Server, None, C, "Handshakes with the Redis server."),
    row("auth", -2, FAST | NO_AUTH | NOSCRIPT | LOADING | STALE | PASSES_LOCKS | ALLOW_BUSY, NONE, Server, None, C, "Authenticates the connection."),
    row("quit", -1, FAST | NO_AUTH | NOSCRIPT | LOADING | STALE | TRANSACTION_CONTROL | WHILE_SUBSCRIBED | PASSES_LOCKS | ALLOW_BUSY, NONE, Server, None, C, "Closes the connection."),
    row("reset", 1, FAST | NO_AUTH | NOSCRIPT | LOADING | STALE | TRANSACTION_CONTROL | WHILE_SUBSCRIBED | ALLOW_BUSY, NONE, Server, None, C, "Resets the connection."),
    row("select", 2, FAST | LOADING | STALE | EMBEDDED, NONE, Server, None, C, "Changes the selected database."),
    row("client", -2, NOSCRIPT | LOADING | STALE | PASSES_LOCKS | CONTAINER, NONE, Server, None, C, "A container for client connection commands."),
    row("acl", -2, CONTAINER, NONE, Server, None, SV, "A container for Access List Control commands."),
    row("command", -1, LOADING | STALE | CONTAINER, NONE, Server, None, SV, "Returns detailed information about all commands."),
    row("cluster", -2, CONTAINER, NONE, Server, None, CL, "A container for Redis Cluster commands."),
    row("asking", 1, FAST, NONE, Server, None, CL, "Signals that a cluster client is following an -ASK redirect."),
    row("readonly", 1, FAST | LOADING | STALE, NONE, Server, None, CL, "Enables read-only queries for a connection to a Redis Cluster replica node."),
    row("readwrite", 1, FAST | LOADING | STALE, NONE, Server, None, CL, "Enables read-write queries for a connection to a Redis Cluster replica node."),
    row("config", -2, ADMIN | NOSCRIPT | LOADING | STALE | CONTAINER, NONE, Server, None, SV, "A container for server configuration commands."),
    row("info", -1, LOADING | STALE, NONE, Server, None, SV, "Returns information and statistics about the server."),
    row("time", 1, FAST | LOADING | STALE | EMBEDDED, NONE, Server, None, SV, "Returns the server time."),
    row("save", 1, ADMIN | NOSCRIPT | NO_ASYNC_LOADING | NO_MULTI, NONE, Server, None, SV, "Synchronously saves the database(s) to disk."),
    row("bgsave", -1, ADMIN | NOSCRIPT | NO_ASYNC_LOADING, NONE, Server, None, SV, "Asynchronously saves the database(s) to disk."),
    row("bgrewriteaof", 1, ADMIN | NOSCRIPT | NO_ASYNC_LOADING, NONE, Server, None, SV, "Asynchronously rewrites the append-only file to disk."),
    row("latency", -2, ADMIN | NOSCRIPT | LOADING | STALE | CONTAINER, NONE, Server, None, SV, "A container for latency diagnostics commands."),
    row("slowlog", -2, ADMIN | LOADING | STALE | CONTAINER, NONE, Server, None, SV, "A container for slow log commands."),
    row("role", 1, NOSCRIPT | LOADING | STALE | FAST, NONE, Server, None, SV, "Returns the replication role."),
    row("replicaof", 3, ADMIN | NOSCRIPT | STALE | NO_ASYNC_LOADING, NONE, Server, None, SV, "Configures a server as replica of another, or promotes it to a master."),
    row("raft", -2, ADMIN | NOSCRIPT | STALE, NONE, Server, None, CL, "Lists and changes the members of the consensus groups, and moves slots between them (consensus mode)."),
    row("slaveof", 3, ADMIN | NOSCRIPT | STALE | NO_ASYNC_LOADING, NONE, Server, None, SV, "Sets a Redis server as a replica of another, or promotes it to being a master."),
    row("replconf", -1, ADMIN | NOSCRIPT | LOADING | STALE | ALLOW_BUSY, NONE, Server, None, SV, "An internal command for configuring the replication stream."),
    row("monitor", 1, ADMIN | NOSCRIPT | LOADING | STALE, NONE, Server, None, SV, "Listens for all requests received by the server in real-time."),
    row("lolwut", -1, READONLY | FAST | EMBEDDED, NONE, Server, None, SV, "Displays computer art and the Redis version"),
    row("wait", 3, EMBEDDED, NONE, Server, None, G, "Blocks until the asynchronous replication of all preceding write commands sent by the connection is completed."),
    row("waitaof", 4, NOSCRIPT, NONE, Server, None, G, "Blocks until all of the preceding write commands sent by the connection are written to the append-only file of the master and/or replicas."),
    row("lastsave", 1, LOADING | STALE | FAST, NONE, Server, None, SV, "Returns the Unix timestamp of the last successful save to disk."),
    row("shutdown", -1, ADMIN | NOSCRIPT | LOADING | STALE | PASSES_LOCKS | ALLOW_BUSY | NO_MULTI, NONE, Server, None, SV, "Synchronously saves the database(s) to disk and shuts down the Redis server."),
];

type NameIndex = HashMap<&'static [u8], &'static CommandSpec, foldhash::fast::FixedState>;

/// Name -> spec, hashed with foldhash: the lookup runs once per command.
fn index() -> &'static NameIndex {
    static INDEX: OnceLock<NameIndex> = OnceLock::new();
    INDEX.get_or_init(|| COMMANDS.iter().map(|c| (c.name.as_bytes(), c)).collect())
}

impl CommandSpec {
    /// This row's position in [`COMMANDS`], in O(1): it identifies the command in mesh
    /// messages and indexes per-command counters.
    pub fn index(&'static self) -> usize {
        let offset = (self as *const CommandSpec as usize) - (COMMANDS.as_ptr() as usize);
        let index = offset / std::mem::size_of::<CommandSpec>();
        debug_assert!(
            std::ptr::eq(&COMMANDS[index], self),
            "spec comes from the table"
        );
        index
    }
}

/// Looks a command up by name, case-insensitively, without allocating.
pub fn lookup(name: &[u8]) -> Option<&'static CommandSpec> {
    const NAME_BYTES_MAX: usize = 32;
    if name.len() > NAME_BYTES_MAX {
        return None;
    }
    let mut lower = [0u8; NAME_BYTES_MAX];
    for (dst, src) in lower.iter_mut().zip(name) {
        *dst = src.to_ascii_lowercase();
    }
    index().get(&lower[..name.len()]).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_lowercase_and_routed_consistently() {
        assert_eq!(index().len(), COMMANDS.len());
        for spec in COMMANDS {
            assert_eq!(spec.name, spec.name.to_ascii_lowercase());
            // A server-routed command has no shard handler, but for the ones whose server
            // side only decides which shards run the handler (TASK.CRON).
            let server_decides_shards =
                ["task.cron", "task.batch", "task.flow"].contains(&spec.name);
            assert_eq!(
                spec.route == Server,
                spec.handler.is_none() || server_decides_shards,
                "{}",
                spec.name
            );
            assert!(spec.arity != 0, "{}", spec.name);
        }
        assert_eq!(lookup(b"GeT").unwrap().name, "get");
        for (i, spec) in COMMANDS.iter().enumerate() {
            assert_eq!(spec.index(), i);
        }
        assert!(lookup(b"nosuch").is_none());
    }

    #[test]
    fn key_positions_follow_first_last_step() {
        let mset = lookup(b"mset").unwrap();
        let args = |n: usize| vec![Bytes::from_static(b"x"); n];
        assert_eq!(mset.key_positions(&args(5)).collect::<Vec<_>>(), vec![1, 3]);
        let del = lookup(b"del").unwrap();
        assert_eq!(
            del.key_positions(&args(4)).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        assert_eq!(lookup(b"ping").unwrap().key_positions(&args(1)).count(), 0);
        assert_eq!(
            lookup(b"copy")
                .unwrap()
                .key_positions(&args(5))
                .collect::<Vec<_>>(),
            vec![1, 2]
        );
        let lmpop = lookup(b"lmpop").unwrap();
        let lmpop_args: Vec<Bytes> = ["lmpop", "2", "a", "b", "left"]
            .iter()
            .map(|s| Bytes::from(*s))
            .collect();
        assert_eq!(
            lmpop.key_positions(&lmpop_args).collect::<Vec<_>>(),
            vec![2, 3]
        );
        let bad: Vec<Bytes> = ["lmpop", "9", "a", "left"]
            .iter()
            .map(|s| Bytes::from(*s))
            .collect();
        assert_eq!(lmpop.key_positions(&bad).count(), 0);
        let blpop = lookup(b"blpop").unwrap();
        assert_eq!(
            blpop.key_positions(&args(4)).collect::<Vec<_>>(),
            vec![1, 2]
        );
    }
}
