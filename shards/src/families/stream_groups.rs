//! Stream consumer groups: XGROUP (CREATE, SETID, DESTROY, CREATECONSUMER, DELCONSUMER),
//! XREADGROUP's attempt (the server parks one with BLOCK, as XREAD), XACK, XPENDING, XCLAIM,
//! XAUTOCLAIM and XINFO (STREAM, GROUPS, CONSUMERS). Each group keeps its pending entries
//! list: an entry read with `>` stays pending for its consumer until XACK, and XCLAIM or
//! XAUTOCLAIM hands an idle one to another consumer: the at-least-once worker pattern.

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

/// XCLAIM key group consumer min-idle-time id… [IDLE ms] [TIME ms] [RETRYCOUNT n] [FORCE]
/// [JUSTID] [LASTID id].
pub fn xclaim(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    notifying_new_consumer(ctx, args, claim_named)
}

pub fn xautoclaim(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    notifying_new_consumer(ctx, args, autoclaim)
}

/// Runs a claim (`key group consumer …`), notifying `xgroup-createconsumer` when it made
/// its consumer, as Redis does.
fn notifying_new_consumer(ctx: &mut Ctx<'_>, args: &[Bytes], claim: Handler) -> Frame {
    if ctx.notes.is_none() {
        return claim(ctx, args);
    }
    let now = ctx.now_ms;
    let exists = |ctx: &mut Ctx<'_>| match typed::get::<Stream>(ctx.db(), &args[1], now) {
        Ok(Some(stream)) => has_consumer(stream, &args[2], &args[3]),
        _ => false,
    };
    let had = exists(ctx);
    let reply = claim(ctx, args);
    if !had && exists(ctx) {
        ctx.notify(
            crate::keyspace::notify::class::STREAM,
            "xgroup-createconsumer",
            &args[1],
        );
    }
    reply
}

/// XCLAIM proper.
fn claim_named(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now_ms;
    let min_idle = match int_arg(&args[4]) {
        Ok(n) => n.max(0) as u64,
        Err(_) => return Frame::static_error("ERR Invalid min-idle-time argument for XCLAIM"),
    };
    let mut ids = Vec::new();
    let mut i = 5;
    while i < args.len() {
        match StreamId::parse(&args[i], 0) {
            Some(id) => ids.push(id),
            None => break,
        }
        i += 1;
    }
    let options = match ClaimOptions::parse(&args[i..], now) {
        Ok(options) => options,
        Err(err) => return err,
    };
    let ClaimOptions {
        delivered_ms,
        retry_count,
        force,
        justid,
        last_id,
    } = options;
    let (key, group_name, consumer) = (&args[1], &args[2], Bytes::copy_from_slice(&args[3]));
    let stream = match typed::get::<Stream>(ctx.db(), key, now) {
        Ok(Some(stream)) => stream,
        Ok(None) => return no_group(key, group_name, "XCLAIM"),
        Err(err) => return err,
    };
    let exists: Vec<bool> = ids.iter().map(|id| stream.get(*id).is_some()).collect();
    let Some(group) = stream.groups.get_mut(&group_name[..]) else {
        return no_group(key, group_name, "XCLAIM");
    };
    if let Some(last) = last_id {
        if last > group.last_delivered {
            group.last_delivered = last;
        }
    }
    let mut claimed = Vec::new();
    for (id, exists) in ids.into_iter().zip(exists) {
        let pending = group.pending.get(&id).cloned();
        let deliveries = match pending {
            None if force && exists => 0,
            None => continue,
            Some(_) if !exists => {
                // Deleted from the stream meanwhile: dropped from the pending list.
                group.ack(id);
                continue;
            }
            Some(p) => {
                if now.saturating_sub(p.delivered_ms) < min_idle {
                    continue;
                }
                p.deliveries
            }
        };
        let deliveries = retry_count.unwrap_or(if justid { deliveries } else { deliveries + 1 });
        group.assign(id, &consumer, delivered_ms, deliveries);
        claimed.push(id);
    }
    note_claim(group, &consumer, now, !claimed.is_empty());
    claimed_reply(stream, claimed, justid)
}

/// A claim (XCLAIM, XAUTOCLAIM) makes its consumer (Redis 7.2: whether or not it claimed
/// anything) and marks it seen; active too when it claimed something.
fn note_claim(group: &mut Group, consumer: &Bytes, now: u64, claimed: bool) {
    let (c, _) = group.consumer(consumer, now);
    c.seen_ms = now;
    if claimed {
        c.active_ms = Some(now);
    }
}

/// XCLAIM's options after its ids.
struct ClaimOptions {
    /// The delivery time the claimed entries get (IDLE, TIME; now by default).
    delivered_ms: u64,
    retry_count: Option<u64>,
    force: bool,
    justid: bool,
    last_id: Option<StreamId>,
}

impl ClaimOptions {
    fn parse(args: &[Bytes], now: u64) -> Result<Self, Frame> {
        let mut options = ClaimOptions {
            delivered_ms: now,
            retry_count: None,
            force: false,
            justid: false,
            last_id: None,
        };
        let mut i = 0;
        while i < args.len() {
            let a = &args[i];
            if is(a, "force") {
                options.force = true;
            } else if is(a, "justid") {
                options.justid = true;
            } else if is(a, "idle") || is(a, "time") || is(a, "retrycount") || is(a, "lastid") {
                let value = args.get(i + 1).ok_or_else(|| Frame::static_error(SYNTAX))?;
                if is(a, "lastid") {
                    options.last_id = Some(parse_id(value)?);
                } else {
                    let n = int_arg(value)
                        .map_err(|_| {
                            Frame::static_error("ERR Invalid IDLE option argument for XCLAIM")
                        })?
                        .max(0) as u64;
                    if is(a, "idle") {
                        options.delivered_ms = now.saturating_sub(n);
                    } else if is(a, "time") {
                        options.delivered_ms = n;
                    } else {
                        options.retry_count = Some(n);
                    }
                }
                i += 1;
            } else {
                return Err(Frame::error(format!(
                    "ERR Unrecognized XCLAIM option '{}'",
                    String::from_utf8_lossy(a)
                )));
            }
            i += 1;
        }
        Ok(options)
    }
}

/// XCLAIM's and XAUTOCLAIM's claimed entries: ids with JUSTID, else `[id, fields]` for
/// each that still exists.
fn claimed_reply(stream: &Stream, claimed: Vec<StreamId>, justid: bool) -> Frame {
    if justid {
        return Frame::Array(
            claimed
                .into_iter()
                .map(|id| Frame::Bulk(id.to_bytes()))
                .collect(),
        );
    }
    Frame::Array(
        claimed
            .into_iter()
            .filter_map(|id| {
                stream.get(id).map(|fields| {
                    Frame::Array(vec![
                        Frame::Bulk(id.to_bytes()),
                        Frame::Array(fields.iter().map(|f| Frame::Bulk(f.clone())).collect()),
                    ])
                })
            })
            .collect(),
    )
}

/// XAUTOCLAIM's `[COUNT n] [JUSTID]`: (count, justid).
fn autoclaim_options(args: &[Bytes]) -> Result<(usize, bool), Frame> {
    let mut count = 100usize;
    let mut justid = false;
    let mut i = 0;
    while i < args.len() {
        if is(&args[i], "count") && i + 1 < args.len() {
            match int_arg(&args[i + 1]) {
                Ok(n) if (1..=i64::MAX / 10).contains(&n) => count = n as usize,
                _ => return Err(Frame::static_error("ERR COUNT must be > 0")),
            }
            i += 2;
        } else if is(&args[i], "justid") {
            justid = true;
            i += 1;
        } else {
            return Err(Frame::static_error(SYNTAX));
        }
    }
    Ok((count, justid))
}

/// One XAUTOCLAIM's terms.
struct Claim<'a> {
    consumer: &'a Bytes,
    min_idle: u64,
    count: usize,
    justid: bool,
    now: u64,
}

impl Claim<'_> {
    /// Claims the idle entries of `window` (pending entries in id order, with whether each
    /// still exists) until `count` are claimed or found deleted. Returns the claimed ids,
    /// the deleted ones (dropped from the PEL) and how many entries were looked at.
    fn window(
        &self,
        group: &mut Group,
        window: &[(StreamId, crate::values::stream::Pending, bool)],
    ) -> (Vec<StreamId>, Vec<StreamId>, usize) {
        let mut claimed = Vec::new();
        let mut deleted = Vec::new();
        let mut remaining = self.count;
        let mut examined = 0;
        for (id, p, live) in window {
            if remaining == 0 {
                break;
            }
            examined += 1;
            if !live {
                group.ack(*id);
                deleted.push(*id);
                remaining -= 1;
                continue;
            }
            if self.now.saturating_sub(p.delivered_ms) < self.min_idle {
                continue;
            }
            let deliveries = p.deliveries + u64::from(!self.justid);
            group.assign(*id, self.consumer, self.now, deliveries);
            claimed.push(*id);
            remaining -= 1;
        }
        (claimed, deleted, examined)
    }
}

/// XAUTOCLAIM key group consumer min-idle-time start [COUNT n] [JUSTID], proper.
fn autoclaim(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now_ms;
    let min_idle = match int_arg(&args[4]) {
        Ok(n) => n.max(0) as u64,
        Err(_) => return Frame::static_error("ERR Invalid min-idle-time argument for XAUTOCLAIM"),
    };
    let start = match range_bound(&args[5], true) {
        Ok(id) => id,
        Err(err) => return err,
    };
    let (count, justid) = match autoclaim_options(&args[6..]) {
        Ok(options) => options,
        Err(err) => return err,
    };
    let (key, group_name, consumer) = (&args[1], &args[2], Bytes::copy_from_slice(&args[3]));
    let stream = match typed::get::<Stream>(ctx.db(), key, now) {
        Ok(Some(stream)) => stream,
        Ok(None) => return no_group(key, group_name, "XAUTOCLAIM"),
        Err(err) => return err,
    };
    // As Redis: at most COUNT×10 pending entries are looked at, COUNT of them claimed (or
    // found deleted), so one call costs O(COUNT) whatever the size of the PEL; the cursor is
    // the first entry not looked at.
    let attempts = count.saturating_mul(10);
    let window: Vec<(StreamId, crate::values::stream::Pending, bool)> = {
        let Some(group) = stream.groups.get(&group_name[..]) else {
            return no_group(key, group_name, "XAUTOCLAIM");
        };
        group
            .pending
            .range(start..)
            .take(attempts.saturating_add(1))
            .map(|(id, p)| (*id, p.clone(), stream.get(*id).is_some()))
            .collect()
    };
    let group = stream
        .groups
        .get_mut(&group_name[..])
        .expect("checked above");
    let claim = Claim {
        consumer: &consumer,
        min_idle,
        count,
        justid,
        now,
    };
    let (claimed, deleted, examined) = claim.window(group, &window[..window.len().min(attempts)]);
    let next = window.get(examined).map_or(StreamId::MIN, |(id, _, _)| *id);
    note_claim(group, &consumer, now, !claimed.is_empty());
    Frame::Array(vec![
        Frame::Bulk(next.to_bytes()),
        claimed_reply(stream, claimed, justid),
        Frame::Array(
            deleted
                .into_iter()
                .map(|id| Frame::Bulk(id.to_bytes()))
                .collect(),
        ),
    ])
}

fn field(name: &'static str, value: Frame) -> [Frame; 2] {
    [Frame::Bulk(Bytes::from_static(name.as_bytes())), value]
}

/// XINFO STREAM key | GROUPS key | CONSUMERS key group | HELP.
pub fn xinfo(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let sub = &args[1];
    if is(sub, "help") {
        return Frame::Array(
            [
                "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "CONSUMERS <key> <groupname>",
                "GROUPS <key>",
                "STREAM <key> [FULL [COUNT <count>]",
            ]
            .iter()
            .map(|l| Frame::Simple(Bytes::from_static(l.as_bytes())))
            .collect(),
        );
    }
    if args.len() < 3 {
        return wrong_arity("xinfo");
    }
    let now = ctx.now_ms;
    let key = &args[2];
    let stream = match typed::get::<Stream>(ctx.db(), key, now) {
        Ok(Some(stream)) => stream,
        Ok(None) => return Frame::static_error(NO_SUCH_KEY),
        Err(err) => return err,
    };
    if is(sub, "stream") {
        return match full_count(&args[3..]) {
            Ok(None) => xinfo_stream(stream),
            Ok(Some(count)) => xinfo_stream_full(stream, count),
            Err(FullError::Syntax) => crate::errors::subcommand_syntax("xinfo", sub),
            Err(FullError::Frame(err)) => err,
        };
    }
    if is(sub, "groups") && args.len() == 3 {
        let shape = stream.shape();
        return Frame::Array(
            by_name(&stream.groups)
                .map(|(name, g)| xinfo_group(&shape, name, g))
                .collect(),
        );
    }
    if is(sub, "consumers") && args.len() == 4 {
        let Some(group) = stream.groups.get(&args[3][..]) else {
            return no_such_group(key, &args[3]);
        };
        return Frame::Array(
            by_name(&group.consumers)
                .map(|(name, c)| {
                    // 7.2: `inactive` is the time since it last read or claimed something
                    // (-1 if never), `idle` since it last tried.
                    let inactive = c
                        .active_ms
                        .map_or(-1, |active| now.saturating_sub(active) as i64);
                    info_map(vec![
                        field("name", Frame::Bulk(name.clone())),
                        field("pending", Frame::Integer(c.pending.len() as i64)),
                        field("idle", Frame::Integer(now.saturating_sub(c.seen_ms) as i64)),
                        field("inactive", Frame::Integer(inactive)),
                    ])
                })
                .collect(),
        );
    }
    crate::errors::unknown_subcommand("xinfo", sub)
}

/// Groups or consumers in Redis's order: by name, bytewise (its radix tree's order).
fn by_name<V>(map: &indexmap::IndexMap<Bytes, V>) -> impl Iterator<Item = (&Bytes, &V)> {
    let mut all: Vec<(&Bytes, &V)> = map.iter().collect();
    all.sort_by(|a, b| a.0.cmp(b.0));
    all.into_iter()
}

enum FullError {
    Syntax,
    Frame(Frame),
}

/// XINFO STREAM's options: nothing (`None`), FULL (COUNT 10), FULL COUNT n (0: all; below
/// 0: 10, as Redis reads it).
fn full_count(options: &[Bytes]) -> Result<Option<usize>, FullError> {
    match options {
        [] => Ok(None),
        [full] if is(full, "full") => Ok(Some(10)),
        [full, word, n] if is(full, "full") && is(word, "count") => {
            match int_arg(n).map_err(FullError::Frame)? {
                n if n < 0 => Ok(Some(10)),
                0 => Ok(Some(usize::MAX)),
                n => Ok(Some(n as usize)),
            }
        }
        _ => Err(FullError::Syntax),
    }
}

/// XINFO STREAM key FULL [COUNT n]: the stream's bookkeeping, its first `count` entries,
/// and every group with its pending entries and consumers (at most `count` pending each),
/// as Redis 7.2 answers it.
fn xinfo_stream_full(stream: &Stream, count: usize) -> Frame {
    let shape = stream.shape();
    let entries: Vec<Frame> = stream
        .range(StreamId::MIN, StreamId::MAX, false, count)
        .into_iter()
        .map(|(id, fields)| {
            Frame::Array(vec![
                Frame::Bulk(id.to_bytes()),
                Frame::Array(fields.iter().map(|f| Frame::Bulk(f.clone())).collect()),
            ])
        })
        .collect();
    let groups: Vec<Frame> = by_name(&stream.groups)
        .map(|(name, g)| full_group(&shape, name, g, count))
        .collect();
    let mut fields = stream_fields(stream);
    fields.push(field("entries", Frame::Array(entries)));
    fields.push(field("groups", Frame::Array(groups)));
    info_map(fields)
}

fn full_group(
    shape: &crate::values::stream::Shape,
    name: &Bytes,
    g: &Group,
    count: usize,
) -> Frame {
    let pending: Vec<Frame> = g
        .pending
        .iter()
        .take(count)
        .map(|(id, p)| {
            Frame::Array(vec![
                Frame::Bulk(id.to_bytes()),
                Frame::Bulk(p.consumer.clone()),
                Frame::Integer(p.delivered_ms as i64),
                Frame::Integer(p.deliveries as i64),
            ])
        })
        .collect();
    let consumers: Vec<Frame> = by_name(&g.consumers)
        .map(|(name, c)| {
            let owned: Vec<Frame> = c
                .pending
                .iter()
                .take(count)
                .filter_map(|id| g.pending.get(id).map(|p| (id, p)))
                .map(|(id, p)| {
                    Frame::Array(vec![
                        Frame::Bulk(id.to_bytes()),
                        Frame::Integer(p.delivered_ms as i64),
                        Frame::Integer(p.deliveries as i64),
                    ])
                })
                .collect();
            info_map(vec![
                field("name", Frame::Bulk(name.clone())),
                field("seen-time", Frame::Integer(c.seen_ms as i64)),
                field(
                    "active-time",
                    Frame::Integer(c.active_ms.map_or(-1, |t| t as i64)),
                ),
                field("pel-count", Frame::Integer(c.pending.len() as i64)),
                field("pending", Frame::Array(owned)),
            ])
        })
        .collect();
    info_map(vec![
        field("name", Frame::Bulk(name.clone())),
        field(
            "last-delivered-id",
            Frame::Bulk(g.last_delivered.to_bytes()),
        ),
        field(
            "entries-read",
            g.entries_read
                .map_or(Frame::Null, |n| Frame::Integer(n as i64)),
        ),
        field("lag", group_lag(shape, g)),
        field("pel-count", Frame::Integer(g.pending.len() as i64)),
        field("pending", Frame::Array(pending)),
        field("consumers", Frame::Array(consumers)),
    ])
}

fn info_map(fields: Vec<[Frame; 2]>) -> Frame {
    Frame::Map(fields.into_iter().map(|[k, v]| (k, v)).collect())
}

/// XINFO STREAM key: the stream's bookkeeping and its first and last entries.
fn xinfo_stream(stream: &Stream) -> Frame {
    let entry = |id: Option<StreamId>| match id {
        Some(id) => {
            let fields = stream.get(id).expect("an existing entry");
            Frame::Array(vec![
                Frame::Bulk(id.to_bytes()),
                Frame::Array(fields.iter().map(|f| Frame::Bulk(f.clone())).collect()),
            ])
        }
        None => Frame::Null,
    };
    let mut fields = stream_fields(stream);
    fields.push(field("groups", Frame::Integer(stream.groups.len() as i64)));
    fields.push(field("first-entry", entry(stream.first_id())));
    fields.push(field("last-entry", entry(stream.last_entry_id())));
    info_map(fields)
}

/// The bookkeeping XINFO STREAM starts with, FULL or not. `radix-tree-keys` counts the
/// nodes Redis would pack the entries in (`stream_nodes`); `radix-tree-nodes` is an
/// estimate (one more: Redis's tree for one node has two).
fn stream_fields(stream: &Stream) -> Vec<[Frame; 2]> {
    let tree_keys = stream.nodes.len() as i64;
    vec![
        field("length", Frame::Integer(stream.len() as i64)),
        field("radix-tree-keys", Frame::Integer(tree_keys)),
        field("radix-tree-nodes", Frame::Integer(tree_keys + 1)),
        field("last-generated-id", Frame::Bulk(stream.last_id.to_bytes())),
        field(
            "max-deleted-entry-id",
            Frame::Bulk(stream.max_deleted_id.to_bytes()),
        ),
        field("entries-added", Frame::Integer(stream.entries_added as i64)),
        field(
            "recorded-first-entry-id",
            Frame::Bulk(stream.first_id().unwrap_or_default().to_bytes()),
        ),
    ]
}

/// A group's lag as Redis counts it: exact while nothing was deleted after the group's
/// last delivered entry, else estimated, else unknown (nil). Signed: ENTRIESREAD may say
/// more than the stream ever had.
fn group_lag(shape: &crate::values::stream::Shape, g: &Group) -> Frame {
    if shape.entries_added == 0 {
        return Frame::Integer(0);
    }
    let read = match g.entries_read {
        Some(n) if !shape.has_tombstones_from(g.last_delivered) => Some(n),
        _ => shape.entries_read_at(g.last_delivered),
    };
    read.map_or(Frame::Null, |n| {
        Frame::Integer(shape.entries_added as i64 - n as i64)
    })
}

/// One group of XINFO GROUPS (which changes nothing: an estimate is not remembered).
fn xinfo_group(shape: &crate::values::stream::Shape, name: &Bytes, g: &Group) -> Frame {
    let lag = group_lag(shape, g);
    info_map(vec![
        field("name", Frame::Bulk(name.clone())),
        field("consumers", Frame::Integer(g.consumers.len() as i64)),
        field("pending", Frame::Integer(g.pending.len() as i64)),
        field(
            "last-delivered-id",
            Frame::Bulk(g.last_delivered.to_bytes()),
        ),
        field(
            "entries-read",
            g.entries_read
                .map_or(Frame::Null, |n| Frame::Integer(n as i64)),
        ),
        field("lag", lag),
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
