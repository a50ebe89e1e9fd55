//! Stream consumer groups: XGROUP (CREATE, SETID, DESTROY, CREATECONSUMER, DELCONSUMER),
//! XREADGROUP's attempt (the server parks one with BLOCK, as XREAD), XACK, XPENDING, XCLAIM,
//! XAUTOCLAIM and XINFO (STREAM, GROUPS, CONSUMERS). Each group keeps its pending entries
//! list: an entry read with `>` stays pending for its consumer until XACK, and XCLAIM or
//! XAUTOCLAIM hands an idle one to another consumer: the at-least-once worker pattern.
//!
//! Its rooms: `claims` (XCLAIM, XAUTOCLAIM) and `info` (XINFO).

mod claims;
mod info;

pub use claims::{xautoclaim, xclaim};
pub use info::xinfo;

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::args::{int_arg, is};
use crate::ctx::Ctx;
use crate::errors::*;
use crate::families::streams::entries_frame;
use crate::keyspace::typed;
use crate::spec::Handler;
use crate::values::stream::{Group, Stream, StreamId};

const INVALID_ID: &str = "ERR Invalid stream ID specified as stream command argument";

fn parse_id(arg: &[u8]) -> Result<StreamId, Frame> {
    StreamId::parse(arg, 0).ok_or_else(|| Frame::static_error(INVALID_ID))
}

/// Redis's NOGROUP text; only XREADGROUP's names the command.
pub(crate) fn no_group(key: &[u8], group: &[u8], command: &str) -> Frame {
    let suffix = if command.starts_with("XREADGROUP") {
        format!(" in {command}")
    } else {
        String::new()
    };
    Frame::error(format!(
        "NOGROUP No such key '{}' or consumer group '{}'{suffix}",
        String::from_utf8_lossy(key),
        String::from_utf8_lossy(group)
    ))
}

const XGROUP_NEEDS_KEY: &str = "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.";

/// XGROUP CREATE | CREATECONSUMER | DELCONSUMER | DESTROY | SETID | HELP.
pub fn xgroup(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let sub = &args[1];
    if is(sub, "help") {
        return Frame::Array(
            [
                "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "CREATE <key> <groupname> <id|$> [option]",
                "CREATECONSUMER <key> <groupname> <consumer>",
                "DELCONSUMER <key> <groupname> <consumer>",
                "DESTROY <key> <groupname>",
                "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
            ]
            .iter()
            .map(|l| Frame::Simple(Bytes::from_static(l.as_bytes())))
            .collect(),
        );
    }
    if args.len() < 4 {
        return wrong_arity("xgroup");
    }
    let result = if is(sub, "create") {
        xgroup_create(ctx, args)
    } else if is(sub, "destroy") {
        xgroup_destroy(ctx, args)
    } else if is(sub, "setid") {
        xgroup_setid(ctx, args)
    } else if is(sub, "createconsumer") || is(sub, "delconsumer") {
        xgroup_consumer(ctx, args, is(sub, "createconsumer"))
    } else {
        return crate::errors::unknown_subcommand("xgroup", sub);
    };
    result.unwrap_or_else(|err| err)
}

/// The stream at `key`, which XGROUP's subcommands other than CREATE … MKSTREAM need.
fn existing_stream<'a>(ctx: &'a mut Ctx<'_>, key: &[u8]) -> Result<&'a mut Stream, Frame> {
    let now = ctx.now_ms;
    typed::get::<Stream>(ctx.db(), key, now)?.ok_or_else(|| Frame::static_error(XGROUP_NEEDS_KEY))
}

fn no_such_group(key: &[u8], group: &[u8]) -> Frame {
    Frame::error(format!(
        "NOGROUP No such consumer group '{}' for key name '{}'",
        String::from_utf8_lossy(group),
        String::from_utf8_lossy(key)
    ))
}

/// ENTRIESREAD's value: a count, or -1 for "unknown".
fn entries_read(arg: &[u8]) -> Result<Option<u64>, Frame> {
    match int_arg(arg)? {
        n if n >= 0 => Ok(Some(n as u64)),
        -1 => Ok(None),
        _ => Err(Frame::static_error(
            "ERR value for ENTRIESREAD must be positive or -1",
        )),
    }
}

/// A group's position: an entry id, or `$` for the stream's last.
fn group_position(arg: &[u8], last_id: StreamId) -> Result<StreamId, Frame> {
    if arg == b"$" {
        Ok(last_id)
    } else {
        parse_id(arg)
    }
}

/// XGROUP CREATE key group id|$ [MKSTREAM] [ENTRIESREAD n].
fn xgroup_create(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Result<Frame, Frame> {
    if args.len() < 5 {
        return Err(wrong_arity("xgroup|create"));
    }
    let (key, group) = (&args[2], &args[3]);
    let mut mkstream = false;
    let mut read = None;
    let mut i = 5;
    while i < args.len() {
        if is(&args[i], "mkstream") {
            mkstream = true;
            i += 1;
        } else if is(&args[i], "entriesread") && i + 1 < args.len() {
            read = entries_read(&args[i + 1])?;
            i += 2;
        } else {
            return Err(Frame::static_error(SYNTAX));
        }
    }
    let now = ctx.now_ms;
    let stream = if mkstream {
        typed::get_or_create::<Stream>(ctx.db(), key, now)?
    } else {
        existing_stream(ctx, key)?
    };
    let last_delivered = group_position(&args[4], stream.last_id)?;
    if stream.groups.contains_key(&group[..]) {
        return Err(Frame::static_error(
            "BUSYGROUP Consumer Group name already exists",
        ));
    }
    stream.groups.insert(
        Bytes::copy_from_slice(group),
        Group {
            last_delivered,
            entries_read: read,
            ..Group::default()
        },
    );
    Ok(Frame::ok())
}

/// XGROUP DESTROY key group.
fn xgroup_destroy(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Result<Frame, Frame> {
    let stream = existing_stream(ctx, &args[2])?;
    if args.len() != 4 {
        return Err(wrong_arity("xgroup|destroy"));
    }
    let removed = stream.groups.shift_remove(&args[3][..]).is_some();
    if removed {
        // Its blocked readers are answered NOGROUP, as Redis 7.2 re-runs them.
        ctx.signal_ready(&args[2]);
    }
    Ok(Frame::Integer(i64::from(removed)))
}

/// XGROUP SETID key group id|$ [ENTRIESREAD n].
fn xgroup_setid(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Result<Frame, Frame> {
    if args.len() < 5 {
        return Err(wrong_arity("xgroup|setid"));
    }
    let (key, group) = (&args[2], &args[3]);
    let stream = existing_stream(ctx, key)?;
    let last_id = stream.last_id;
    let Some(g) = stream.groups.get_mut(&group[..]) else {
        return Err(no_such_group(key, group));
    };
    let id = group_position(&args[4], last_id)?;
    match &args[5..] {
        [] => {}
        // Without ENTRIESREAD the group's read counter is unknown again, as in Redis.
        [word, n] if is(word, "entriesread") => g.entries_read = entries_read(n)?,
        _ => return Err(Frame::static_error(SYNTAX)),
    }
    if args.len() == 5 {
        g.entries_read = None;
    }
    g.last_delivered = id;
    Ok(Frame::ok())
}

/// XGROUP CREATECONSUMER | DELCONSUMER key group consumer.
fn xgroup_consumer(ctx: &mut Ctx<'_>, args: &[Bytes], create: bool) -> Result<Frame, Frame> {
    let (key, group) = (&args[2], &args[3]);
    let now = ctx.now_ms;
    let stream = existing_stream(ctx, key)?;
    if args.len() != 5 {
        return Err(wrong_arity(if create {
            "xgroup|createconsumer"
        } else {
            "xgroup|delconsumer"
        }));
    }
    let Some(g) = stream.groups.get_mut(&group[..]) else {
        return Err(no_such_group(key, group));
    };
    let consumer = Bytes::copy_from_slice(&args[4]);
    if create {
        return Ok(Frame::Integer(i64::from(g.consumer(&consumer, now).1)));
    }
    let Some(removed) = g.consumers.shift_remove(&consumer) else {
        return Ok(Frame::Integer(0));
    };
    for id in &removed.pending {
        g.pending.remove(id);
    }
    ctx.notify(
        crate::keyspace::notify::class::STREAM,
        "xgroup-delconsumer",
        key,
    );
    Ok(Frame::Integer(removed.pending.len() as i64))
}

/// A parsed XREADGROUP.
#[derive(Clone, Debug)]
pub struct XreadGroup {
    pub group: Bytes,
    pub consumer: Bytes,
    pub count: usize,
    pub block_ms: Option<u64>,
    pub noack: bool,
    /// Each stream and what to read: `None` for `>` (new entries), or the consumer's own
    /// pending entries after an id.
    pub streams: Vec<(Bytes, Option<StreamId>)>,
}

pub fn parse_xreadgroup(args: &[Bytes]) -> Result<XreadGroup, Frame> {
    if !is(&args[1], "group") || args.len() < 4 {
        return Err(Frame::static_error(SYNTAX));
    }
    let mut read = XreadGroup {
        group: Bytes::copy_from_slice(&args[2]),
        consumer: Bytes::copy_from_slice(&args[3]),
        count: usize::MAX,
        block_ms: None,
        noack: false,
        streams: Vec::new(),
    };
    let mut i = 4;
    while i < args.len() {
        let a = &args[i];
        if is(a, "count") && i + 1 < args.len() {
            let n = int_arg(&args[i + 1])?;
            read.count = if n <= 0 { usize::MAX } else { n as usize };
            i += 2;
        } else if is(a, "block") && i + 1 < args.len() {
            let ms = int_arg(&args[i + 1])?;
            if ms < 0 {
                return Err(Frame::static_error("ERR timeout is negative"));
            }
            read.block_ms = Some(ms as u64);
            i += 2;
        } else if is(a, "noack") {
            read.noack = true;
            i += 1;
        } else if is(a, "streams") {
            i += 1;
            break;
        } else {
            return Err(Frame::static_error(SYNTAX));
        }
    }
    let rest = &args[i.min(args.len())..];
    if rest.is_empty() || !rest.len().is_multiple_of(2) {
        return Err(Frame::static_error(
            "ERR Unbalanced XREADGROUP list of streams: for each stream key an ID or '>' must be specified.",
        ));
    }
    let half = rest.len() / 2;
    for (key, id) in rest[..half].iter().zip(&rest[half..]) {
        let what = match &id[..] {
            b">" => None,
            b"$" => {
                return Err(Frame::static_error(
                    "ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.",
                ))
            }
            _ => Some(parse_id(id)?),
        };
        read.streams.push((key.clone(), what));
    }
    Ok(read)
}

/// Whether `group` of `stream` has `consumer` (one a command creates is notified).
fn has_consumer(stream: &Stream, group: &[u8], consumer: &[u8]) -> bool {
    stream
        .groups
        .get(group)
        .is_some_and(|g| g.consumers.contains_key(consumer))
}

/// XREADGROUP's keys: as XREAD's.
pub fn xreadgroup_keys(args: &[Bytes]) -> Vec<usize> {
    crate::families::streams::xread_keys(args)
}

/// Reads one stream for a group: `>` takes entries after the group's last delivered id
/// (pending for the consumer unless NOACK); an id reads the consumer's own pending entries
/// after it (a deleted one as `[id, nil]`). `Ok(None)`: nothing new for `>`.
pub fn read_group(
    stream: &mut Stream,
    read: &XreadGroup,
    what: Option<StreamId>,
    now_ms: u64,
) -> Result<Option<Frame>, String> {
    let shape = stream.shape();
    let Some(group) = stream.groups.get_mut(&read.group[..]) else {
        return Err("NOGROUP".into());
    };
    match what {
        None => {
            let Some(from) = group.last_delivered.next() else {
                return Ok(None);
            };
            let entries: Vec<(StreamId, crate::values::stream::Fields)> =
                stream_range(stream, from, read.count);
            let group = stream
                .groups
                .get_mut(&read.group[..])
                .expect("checked above");
            // Redis 7.2: the read makes its consumer and marks it seen, new entries or not;
            // it is active when it gets entries to acknowledge.
            let (consumer, _) = group.consumer(&read.consumer, now_ms);
            consumer.seen_ms = now_ms;
            if !entries.is_empty() && !read.noack {
                consumer.active_ms = Some(now_ms);
            }
            if entries.is_empty() {
                return Ok(None);
            }
            for (id, _) in &entries {
                group.last_delivered = *id;
                group.entries_read = match group.entries_read {
                    Some(n) if !shape.has_tombstones_from(*id) => Some(n + 1),
                    _ => shape.entries_read_at(*id),
                };
                if !read.noack {
                    group.assign(*id, &read.consumer, now_ms, 1);
                }
            }
            Ok(Some(entries_frame(
                entries.iter().map(|(id, f)| (*id, f)).collect(),
            )))
        }
        Some(after) => {
            let (consumer, _) = group.consumer(&read.consumer, now_ms);
            consumer.seen_ms = now_ms;
            let ids: Vec<StreamId> = consumer
                .pending
                .range(after.next().unwrap_or(StreamId::MAX)..)
                .take(read.count)
                .copied()
                .collect();
            let mut items = Vec::with_capacity(ids.len());
            for id in ids {
                let fields = stream.get(id).cloned();
                items.push(match fields {
                    Some(fields) => Frame::Array(vec![
                        Frame::Bulk(id.to_bytes()),
                        Frame::Array(fields.into_iter().map(Frame::Bulk).collect()),
                    ]),
                    None => Frame::Array(vec![Frame::Bulk(id.to_bytes()), Frame::Null]),
                });
            }
            Ok(Some(Frame::Array(items)))
        }
    }
}

fn stream_range(
    stream: &Stream,
    from: StreamId,
    count: usize,
) -> Vec<(StreamId, crate::values::stream::Fields)> {
    stream
        .range(from, StreamId::MAX, false, count)
        .into_iter()
        .map(|(id, f)| (id, f.clone()))
        .collect()
}

/// XREADGROUP's attempt, parsed: each stream read for the group's consumer.
pub fn read_for_group(ctx: &mut Ctx<'_>, read: &XreadGroup) -> Frame {
    let now = ctx.now_ms;
    let mut found = Vec::new();
    for (key, what) in &read.streams {
        let stream = match typed::get::<Stream>(ctx.db(), key, now) {
            Ok(Some(stream)) => stream,
            Ok(None) => return no_group(key, &read.group, "XREADGROUP with GROUP option"),
            Err(err) => return err,
        };
        let had = has_consumer(stream, &read.group, &read.consumer);
        let result = read_group(stream, read, *what, now);
        if !had && has_consumer(stream, &read.group, &read.consumer) {
            ctx.notify(
                crate::keyspace::notify::class::STREAM,
                "xgroup-createconsumer",
                key,
            );
        }
        match result {
            Ok(Some(entries)) => found.push((Frame::Bulk(key.clone()), entries)),
            Ok(None) => {}
            Err(_) => return no_group(key, &read.group, "XREADGROUP with GROUP option"),
        }
    }
    if found.is_empty() {
        Frame::NullArray
    } else {
        Frame::Keyed(found)
    }
}

pub fn xack(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let mut ids = Vec::with_capacity(args.len() - 3);
    for arg in &args[3..] {
        match parse_id(arg) {
            Ok(id) => ids.push(id),
            Err(err) => return err,
        }
    }
    let now = ctx.now_ms;
    match typed::get::<Stream>(ctx.db(), &args[1], now) {
        Ok(Some(stream)) => match stream.groups.get_mut(&args[2][..]) {
            Some(group) => {
                Frame::Integer(ids.into_iter().filter(|id| group.ack(*id)).count() as i64)
            }
            None => Frame::Integer(0),
        },
        Ok(None) => Frame::Integer(0),
        Err(err) => err,
    }
}

fn range_bound(arg: &[u8], start: bool) -> Result<StreamId, Frame> {
    match arg {
        b"-" => Ok(StreamId::MIN),
        b"+" => Ok(StreamId::MAX),
        _ => {
            let (text, exclusive) = match arg.strip_prefix(b"(") {
                Some(rest) => (rest, true),
                None => (arg, false),
            };
            let id = StreamId::parse(text, if start { 0 } else { u64::MAX })
                .ok_or_else(|| Frame::static_error(INVALID_ID))?;
            Ok(match (exclusive, start) {
                (false, _) => id,
                (true, true) => id.next().unwrap_or(StreamId::MAX),
                (true, false) => id.prev().unwrap_or(StreamId::MIN),
            })
        }
    }
}

pub fn xpending(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now_ms;
    let (key, group_name) = (&args[1], &args[2]);
    // Extended form's arguments, checked before the key is looked at.
    let mut min_idle = 0u64;
    let mut rest = &args[3..];
    if rest.first().is_some_and(|a| is(a, "idle")) {
        match rest.get(1).map(|a| int_arg(a)) {
            Some(Ok(n)) => min_idle = n.max(0) as u64,
            Some(Err(err)) => return err,
            None => return Frame::static_error(SYNTAX),
        }
        rest = &rest[2..];
    }
    let extended = match rest {
        [] if args.len() == 3 => None,
        [start, end, count] | [start, end, count, _] => {
            let (start, end) = match (range_bound(start, true), range_bound(end, false)) {
                (Ok(s), Ok(e)) => (s, e),
                (Err(err), _) | (_, Err(err)) => return err,
            };
            let count = match int_arg(count) {
                Ok(n) => n.max(0) as usize,
                Err(err) => return err,
            };
            Some((start, end, count, rest.get(3).cloned()))
        }
        _ => return Frame::static_error(SYNTAX),
    };
    let stream = match typed::get::<Stream>(ctx.db(), key, now) {
        Ok(Some(stream)) => stream,
        Ok(None) => return no_group(key, group_name, "XPENDING"),
        Err(err) => return err,
    };
    let Some(group) = stream.groups.get(&group_name[..]) else {
        return no_group(key, group_name, "XPENDING");
    };
    let Some((start, end, count, consumer)) = extended else {
        return pending_summary(group);
    };
    if start > end {
        return Frame::Array(Vec::new());
    }
    Frame::Array(
        group
            .pending
            .range(start..=end)
            .filter(|(_, p)| consumer.as_ref().is_none_or(|c| p.consumer == *c))
            .filter(|(_, p)| now.saturating_sub(p.delivered_ms) >= min_idle)
            .take(count)
            .map(|(id, p)| {
                Frame::Array(vec![
                    Frame::Bulk(id.to_bytes()),
                    Frame::Bulk(p.consumer.clone()),
                    Frame::Integer(now.saturating_sub(p.delivered_ms) as i64),
                    Frame::Integer(p.deliveries as i64),
                ])
            })
            .collect(),
    )
}

/// XPENDING key group's summary: how many, the lowest and highest id, and how many per
/// consumer.
fn pending_summary(group: &Group) -> Frame {
    if group.pending.is_empty() {
        return Frame::Array(vec![
            Frame::Integer(0),
            Frame::Null,
            Frame::Null,
            Frame::NullArray,
        ]);
    }
    let first = group.pending.keys().next().expect("non-empty");
    let last = group.pending.keys().next_back().expect("non-empty");
    let per_consumer: Vec<Frame> = group
        .consumers
        .iter()
        .filter(|(_, c)| !c.pending.is_empty())
        .map(|(name, c)| {
            Frame::Array(vec![
                Frame::Bulk(name.clone()),
                Frame::Bulk(Bytes::from(c.pending.len().to_string())),
            ])
        })
        .collect();
    Frame::Array(vec![
        Frame::Integer(group.pending.len() as i64),
        Frame::Bulk(first.to_bytes()),
        Frame::Bulk(last.to_bytes()),
        Frame::Array(per_consumer),
    ])
}

/// XSETID key last-id [ENTRIESADDED n] [MAXDELETEDID id]: sets a stream's bookkeeping (what
/// replication and restores use).
pub fn xsetid(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let last_id = match parse_id(&args[2]) {
        Ok(id) => id,
        Err(err) => return err,
    };
    let (mut entries_added, mut max_deleted) = (None, None);
    let mut i = 3;
    while i < args.len() {
        let Some(value) = args.get(i + 1) else {
            return Frame::static_error(SYNTAX);
        };
        if is(&args[i], "entriesadded") {
            match int_arg(value) {
                Ok(n) if n >= 0 => entries_added = Some(n as u64),
                Ok(_) => return Frame::static_error("ERR entries_added must be positive"),
                Err(err) => return err,
            }
        } else if is(&args[i], "maxdeletedid") {
            match parse_id(value) {
                Ok(id) => max_deleted = Some(id),
                Err(err) => return err,
            }
        } else {
            return Frame::static_error(SYNTAX);
        }
        i += 2;
    }
    let now = ctx.now_ms;
    let stream = match typed::get::<Stream>(ctx.db(), &args[1], now) {
        Ok(Some(stream)) => stream,
        Ok(None) => return Frame::static_error(NO_SUCH_KEY),
        Err(err) => return err,
    };
    if stream.last_entry_id().is_some_and(|top| last_id < top) {
        return Frame::static_error(
            "ERR The ID specified in XSETID is smaller than the target stream top item",
        );
    }
    if entries_added.is_some_and(|n| n < stream.len() as u64) {
        return Frame::static_error(
            "ERR The entries_added specified in XSETID is smaller than the target stream length",
        );
    }
    if max_deleted.is_some_and(|id| id > last_id) {
        return Frame::static_error(
            "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id",
        );
    }
    stream.last_id = last_id;
    if let Some(n) = entries_added {
        stream.entries_added = n;
    }
    if let Some(id) = max_deleted {
        stream.max_deleted_id = id;
    }
    Frame::ok()
}
