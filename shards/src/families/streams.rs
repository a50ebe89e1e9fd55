//! The stream commands RQ, BullMQ and their kin use: XADD with NOMKSTREAM and MAXLEN/MINID
//! trimming, XRANGE, XREVRANGE, XLEN, XDEL, XTRIM, and XREAD's non-blocking attempt (the
//! server parks an XREAD … BLOCK that found nothing: `server/src/commands/blocking.rs`). Consumer
//! groups are not served yet (docs/COMPATIBILITY.md).

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::args::{int_arg, is};
use crate::ctx::Ctx;
use crate::errors::*;
use crate::keyspace::typed;
use crate::values::stream::{Fields, Stream, StreamId};

const INVALID_ID: &str = "ERR Invalid stream ID specified as stream command argument";

fn owned(arg: &[u8]) -> Bytes {
    Bytes::copy_from_slice(arg)
}

fn entry_frame(id: StreamId, fields: &Fields) -> Frame {
    Frame::Array(vec![
        Frame::Bulk(id.to_bytes()),
        Frame::Array(fields.iter().map(|f| Frame::Bulk(f.clone())).collect()),
    ])
}

pub fn entries_frame(entries: Vec<(StreamId, &Fields)>) -> Frame {
    Frame::Array(
        entries
            .into_iter()
            .map(|(id, f)| entry_frame(id, f))
            .collect(),
    )
}

/// How XADD or XTRIM trims.
#[derive(Clone, Copy)]
enum Trim {
    MaxLen(usize),
    MinId(StreamId),
}

struct TrimSpec {
    how: Trim,
    approximate: bool,
    limit: Option<usize>,
}

/// Parses `MAXLEN|MINID [=|~] threshold [LIMIT n]` at `args[*i]`, advancing `i`.
fn parse_trim(args: &[Bytes], i: &mut usize) -> Result<TrimSpec, Frame> {
    let maxlen = is(&args[*i], "maxlen");
    *i += 1;
    let mut approximate = false;
    if let Some(op) = args.get(*i) {
        if &op[..] == b"~" {
            approximate = true;
            *i += 1;
        } else if &op[..] == b"=" {
            *i += 1;
        }
    }
    let threshold = args.get(*i).ok_or_else(|| Frame::static_error(SYNTAX))?;
    *i += 1;
    let how = if maxlen {
        let n = int_arg(threshold)?;
        if n < 0 {
            return Err(Frame::static_error("ERR The MAXLEN argument must be >= 0."));
        }
        Trim::MaxLen(n as usize)
    } else {
        Trim::MinId(StreamId::parse(threshold, 0).ok_or_else(|| Frame::static_error(INVALID_ID))?)
    };
    let mut limit = None;
    if args.get(*i).is_some_and(|a| is(a, "limit")) {
        let n = args
            .get(*i + 1)
            .ok_or_else(|| Frame::static_error(SYNTAX))?;
        let n = int_arg(n)?;
        if n < 0 {
            return Err(Frame::static_error("ERR The LIMIT argument must be >= 0."));
        }
        if !approximate {
            return Err(Frame::static_error(
                "ERR syntax error, LIMIT cannot be used without the special ~ option",
            ));
        }
        limit = Some(n as usize);
        *i += 2;
    }
    Ok(TrimSpec {
        how,
        approximate,
        limit,
    })
}

/// Trims as Redis does: exactly, or with `~` only whole nodes as Redis packs them
/// (`stream_nodes`: 100 entries, or fewer when they fill 4 KB), at most LIMIT entries.
fn apply_trim(stream: &mut Stream, spec: &TrimSpec) -> usize {
    if !spec.approximate {
        return match spec.how {
            Trim::MaxLen(maxlen) => stream.trim_maxlen(maxlen, usize::MAX),
            Trim::MinId(min) => stream.trim_minid(min, usize::MAX),
        };
    }
    let limit = match spec.limit {
        Some(0) => usize::MAX,
        Some(n) => n,
        None => 100 * crate::values::stream_nodes::NODE_ENTRIES_MAX as usize,
    };
    let cut = match spec.how {
        Trim::MaxLen(maxlen) => crate::values::stream_nodes::Cut::MaxLen(maxlen),
        Trim::MinId(min) => crate::values::stream_nodes::Cut::MinId(min),
    };
    let whole_nodes = stream.nodes.whole_nodes(stream.len(), cut, limit);
    stream.trim_maxlen(stream.len() - whole_nodes, usize::MAX)
}

/// The id XADD was asked for: `*`, `ms-*` or a full id.
enum Wanted {
    Auto,
    AutoSeq(u64),
    Exact(StreamId),
}

impl Wanted {
    fn parse(arg: &[u8]) -> Result<Wanted, Frame> {
        if arg == b"*" {
            return Ok(Wanted::Auto);
        }
        if let Some(ms) = arg.strip_suffix(b"-*") {
            return match StreamId::parse(ms, 0) {
                Some(id) if !ms.contains(&b'-') => Ok(Wanted::AutoSeq(id.ms)),
                _ => Err(Frame::static_error(INVALID_ID)),
            };
        }
        StreamId::parse(arg, 0)
            .map(Wanted::Exact)
            .ok_or_else(|| Frame::static_error(INVALID_ID))
    }

    /// The id the new entry gets on `stream`; `None` when it would not be above its top.
    fn resolve(self, stream: &Stream, now_ms: u64) -> Option<StreamId> {
        let fresh = stream.entries_added == 0;
        match self {
            Wanted::Auto => stream.auto_id(now_ms),
            Wanted::AutoSeq(ms) if fresh || ms > stream.last_id.ms => Some(StreamId {
                ms,
                seq: u64::from(ms == 0),
            }),
            // The sequence of `ms` is used up: no id of `ms` is left (Redis 7.2 refuses it;
            // the next would be of another millisecond).
            Wanted::AutoSeq(ms) if ms == stream.last_id.ms => {
                (stream.last_id.seq < u64::MAX).then(|| stream.last_id.next())?
            }
            Wanted::AutoSeq(_) => None,
            Wanted::Exact(id) if fresh || id > stream.last_id => Some(id),
            Wanted::Exact(_) => None,
        }
    }
}

/// XADD's keyspace events: `xadd`, and `xtrim` when its trimming removed entries.
fn notify_added(ctx: &mut Ctx<'_>, key: &[u8], trimmed: bool) {
    ctx.notify(crate::keyspace::notify::class::STREAM, "xadd", key);
    if trimmed {
        ctx.notify(crate::keyspace::notify::class::STREAM, "xtrim", key);
    }
}

pub fn xadd(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let mut i = 2;
    let mut nomkstream = false;
    let mut trim = None;
    loop {
        let Some(a) = args.get(i) else {
            return wrong_arity("xadd");
        };
        if is(a, "nomkstream") {
            nomkstream = true;
            i += 1;
        } else if is(a, "maxlen") || is(a, "minid") {
            trim = match parse_trim(args, &mut i) {
                Ok(spec) => Some(spec),
                Err(err) => return err,
            };
        } else if is(a, "limit") {
            return Frame::static_error(
                "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy",
            );
        } else {
            break;
        }
    }
    let id_arg = &args[i];
    let fields = &args[i + 1..];
    if fields.is_empty() || !fields.len().is_multiple_of(2) {
        return wrong_arity("xadd");
    }
    let wanted = match Wanted::parse(id_arg) {
        Ok(wanted) => wanted,
        Err(err) => return err,
    };
    if let Wanted::Exact(StreamId { ms: 0, seq: 0 }) = wanted {
        return Frame::static_error("ERR The ID specified in XADD must be greater than 0-0");
    }
    let now = ctx.now_ms;
    let stream = if nomkstream {
        match typed::get::<Stream>(ctx.db(), &args[1], now) {
            Ok(Some(stream)) => stream,
            Ok(None) => return Frame::Null,
            Err(err) => return err,
        }
    } else {
        match typed::get_or_create::<Stream>(ctx.db(), &args[1], now) {
            Ok(stream) => stream,
            Err(err) => return err,
        }
    };
    let top_error =
        "ERR The ID specified in XADD is equal or smaller than the target stream top item";
    let fresh = stream.entries_added == 0;
    let id = wanted.resolve(stream, now);
    let Some(id) = id else {
        // Undo only the empty stream this XADD itself created.
        if fresh && stream.groups.is_empty() {
            typed::drop_if_empty::<Stream>(ctx.db(), &args[1], now);
        }
        return Frame::static_error(top_error);
    };
    stream.add(id, fields.iter().map(|f| owned(f)).collect());
    let trimmed = trim
        .as_ref()
        .is_some_and(|spec| apply_trim(stream, spec) > 0);
    notify_added(ctx, &args[1], trimmed);
    ctx.signal_ready(&args[1]);
    Frame::Bulk(id.to_bytes())
}

/// A range bound: `-`, `+`, an id (`ms` or `ms-seq`), or `(id` exclusive.
/// An exclusive bound past the last possible id (or before the first) is an error, as in
/// Redis.
fn parse_bound(arg: &[u8], start: bool) -> Result<StreamId, Frame> {
    match arg {
        b"-" => return Ok(StreamId::MIN),
        b"+" => return Ok(StreamId::MAX),
        _ => {}
    }
    let (text, exclusive) = match arg.strip_prefix(b"(") {
        Some(rest) => (rest, true),
        None => (arg, false),
    };
    let id = StreamId::parse(text, if start { 0 } else { u64::MAX })
        .ok_or_else(|| Frame::static_error(INVALID_ID))?;
    match (exclusive, start) {
        (false, _) => Ok(id),
        (true, true) => id
            .next()
            .ok_or_else(|| Frame::static_error("ERR invalid start ID for the interval")),
        (true, false) => id
            .prev()
            .ok_or_else(|| Frame::static_error("ERR invalid end ID for the interval")),
    }
}

fn range(ctx: &mut Ctx<'_>, args: &[Bytes], rev: bool) -> Frame {
    let (first, second) = (&args[2], &args[3]);
    let (start, end) = if rev {
        (second, first)
    } else {
        (first, second)
    };
    let start = match parse_bound(start, true) {
        Ok(id) => id,
        Err(err) => return err,
    };
    let end = match parse_bound(end, false) {
        Ok(id) => id,
        Err(err) => return err,
    };
    let count = match &args[4..] {
        [] => usize::MAX,
        [word, n] if is(word, "count") => match int_arg(n) {
            // Redis answers a COUNT of 0 (or less) with nil.
            Ok(n) if n <= 0 => return Frame::NullArray,
            Ok(n) => n as usize,
            Err(err) => return err,
        },
        _ => return Frame::static_error(SYNTAX),
    };
    let now = ctx.now_ms;
    match typed::get::<Stream>(ctx.db(), &args[1], now) {
        Ok(Some(stream)) => entries_frame(stream.range(start, end, rev, count)),
        Ok(None) => Frame::Array(Vec::new()),
        Err(err) => err,
    }
}

pub fn xrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    range(ctx, args, false)
}

pub fn xrevrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    range(ctx, args, true)
}

pub fn xlen(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now_ms;
    match typed::len::<Stream>(ctx.db(), &args[1], now) {
        Ok(n) => Frame::Integer(n as i64),
        Err(err) => err,
    }
}

pub fn xdel(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let mut ids = Vec::with_capacity(args.len() - 2);
    for arg in &args[2..] {
        match StreamId::parse(arg, 0) {
            Some(id) => ids.push(id),
            None => return Frame::static_error(INVALID_ID),
        }
    }
    let now = ctx.now_ms;
    match typed::get::<Stream>(ctx.db(), &args[1], now) {
        Ok(Some(stream)) => {
            Frame::Integer(ids.into_iter().filter(|id| stream.remove(*id)).count() as i64)
        }
        Ok(None) => Frame::Integer(0),
        Err(err) => err,
    }
}

pub fn xtrim(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    if !(is(&args[2], "maxlen") || is(&args[2], "minid")) {
        return Frame::static_error(SYNTAX);
    }
    let mut i = 2;
    let spec = match parse_trim(args, &mut i) {
        Ok(spec) => spec,
        Err(err) => return err,
    };
    if i != args.len() {
        return Frame::static_error(SYNTAX);
    }
    let now = ctx.now_ms;
    match typed::get::<Stream>(ctx.db(), &args[1], now) {
        Ok(Some(stream)) => Frame::Integer(apply_trim(stream, &spec) as i64),
        Ok(None) => Frame::Integer(0),
        Err(err) => err,
    }
}

/// A parsed XREAD.
pub struct Xread {
    pub count: usize,
    /// Milliseconds to block (0: for ever); `None` without BLOCK.
    pub block_ms: Option<u64>,
    /// Each stream and the id to read after; `None` is `$` (whatever is newest when the
    /// read parks).
    pub streams: Vec<(Bytes, Option<StreamId>)>,
}

pub fn parse_xread(args: &[Bytes]) -> Result<Xread, Frame> {
    let mut count = usize::MAX;
    let mut block_ms = None;
    let mut i = 1;
    while i < args.len() {
        let a = &args[i];
        if is(a, "count") && i + 1 < args.len() {
            let n = int_arg(&args[i + 1])?;
            count = if n <= 0 { usize::MAX } else { n as usize };
            i += 2;
        } else if is(a, "block") && i + 1 < args.len() {
            let ms = int_arg(&args[i + 1])?;
            if ms < 0 {
                return Err(Frame::static_error("ERR timeout is negative"));
            }
            block_ms = Some(ms as u64);
            i += 2;
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
            "ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.",
        ));
    }
    let half = rest.len() / 2;
    let mut streams = Vec::with_capacity(half);
    for (key, id) in rest[..half].iter().zip(&rest[half..]) {
        let after = match &id[..] {
            b"$" => None,
            b">" => {
                return Err(Frame::static_error(
                    "ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.",
                ))
            }
            b"+" => Some(StreamId::MAX),
            _ => Some(StreamId::parse(id, 0).ok_or_else(|| Frame::static_error(INVALID_ID))?),
        };
        streams.push((key.clone(), after));
    }
    Ok(Xread {
        count,
        block_ms,
        streams,
    })
}

/// XREAD's keys: the first half of what follows STREAMS.
pub fn xread_keys(args: &[Bytes]) -> Vec<usize> {
    let Some(at) = args.iter().position(|a| is(a, "streams")) else {
        return Vec::new();
    };
    let rest = args.len() - at - 1;
    if rest == 0 || !rest.is_multiple_of(2) {
        return Vec::new();
    }
    (at + 1..at + 1 + rest / 2).collect()
}

/// XREAD's attempt, parsed: up to `count` entries of every stream after its id (`None`, `$`,
/// has none yet).
pub fn read_after(ctx: &mut Ctx<'_>, streams: &[(Bytes, Option<StreamId>)], count: usize) -> Frame {
    let mut found = Vec::new();
    for (key, after) in streams {
        let now = ctx.now_ms;
        // Every key's type is checked, `$` ones too: Redis refuses a read of a string at once.
        let stream = match typed::get::<Stream>(ctx.db(), key, now) {
            Ok(Some(stream)) => stream,
            Ok(None) => continue,
            Err(err) => return err,
        };
        let Some(after) = after else {
            continue;
        };
        let Some(from) = after.next() else {
            continue;
        };
        let entries = stream.range(from, StreamId::MAX, false, count);
        if !entries.is_empty() {
            found.push((Frame::Bulk(key.clone()), entries_frame(entries)));
        }
    }
    if found.is_empty() {
        Frame::NullArray
    } else {
        Frame::Keyed(found)
    }
}
