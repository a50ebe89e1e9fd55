//! The list family: pushes and pops at both ends, ranges, positional edits, moves between
//! lists, and the non-blocking attempt of each blocking pop (BLPOP …). The server parks a
//! blocking pop that found nothing (`server/src/commands/blocking.rs`); here it is the same pop that
//! answers nil, which is also what it does inside MULTI or a script.
//!
//! Every push signals its key as ready (`Ctx::signal_ready`), so parked pops are served,
//! oldest first, after the command that pushed.

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::args::{float_arg, int_arg, is};
use crate::ctx::Ctx;
use crate::errors::*;
use crate::keyspace::typed::{self, index_range};
use crate::keyspace::List;

/// Which end of a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    Left,
    Right,
}

impl End {
    pub fn parse(arg: &[u8]) -> Option<End> {
        if is(arg, "left") {
            Some(End::Left)
        } else if is(arg, "right") {
            Some(End::Right)
        } else {
            None
        }
    }

    pub fn name(self) -> &'static [u8] {
        match self {
            End::Left => b"LEFT",
            End::Right => b"RIGHT",
        }
    }
}

fn pop_end(list: &mut List, end: End) -> Option<Bytes> {
    match end {
        End::Left => list.pop_front(),
        End::Right => list.pop_back(),
    }
}

fn push_end(list: &mut List, end: End, value: Bytes) {
    match end {
        End::Left => list.push_front(value),
        End::Right => list.push_back(value),
    }
}

fn owned(arg: &[u8]) -> Bytes {
    Bytes::copy_from_slice(arg)
}

fn push(ctx: &mut Ctx<'_>, args: &[Bytes], end: End, only_existing: bool) -> Frame {
    let now = ctx.now_ms;
    let key = &args[1];
    let list = if only_existing {
        match typed::get::<List>(ctx.db(), key, now) {
            Ok(Some(list)) => list,
            Ok(None) => return Frame::Integer(0),
            Err(err) => return err,
        }
    } else {
        match typed::get_or_create::<List>(ctx.db(), key, now) {
            Ok(list) => list,
            Err(err) => return err,
        }
    };
    for value in &args[2..] {
        push_end(list, end, owned(value));
    }
    let len = list.len() as i64;
    ctx.signal_ready(key);
    Frame::Integer(len)
}

pub fn lpush(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    push(ctx, args, End::Left, false)
}

pub fn rpush(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    push(ctx, args, End::Right, false)
}

pub fn lpushx(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    push(ctx, args, End::Left, true)
}

pub fn rpushx(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    push(ctx, args, End::Right, true)
}

/// Pops up to `count` elements from one end; the key goes when the list empties.
/// `Ok(None)` when the key is missing.
pub fn pop_many(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    end: End,
    count: usize,
) -> Result<Option<Vec<Bytes>>, Frame> {
    let now = ctx.now_ms;
    let Some(list) = typed::get::<List>(ctx.db(), key, now)? else {
        return Ok(None);
    };
    let take = count.min(list.len());
    let popped: Vec<Bytes> = (0..take).filter_map(|_| pop_end(list, end)).collect();
    typed::drop_if_empty::<List>(ctx.db(), key, now);
    Ok(Some(popped))
}

fn pop(ctx: &mut Ctx<'_>, args: &[Bytes], end: End) -> Frame {
    if args.len() > 3 {
        return wrong_arity(if end == End::Left { "lpop" } else { "rpop" });
    }
    let count = match args.get(2) {
        None => None,
        Some(arg) => match int_arg(arg) {
            Ok(n) if n >= 0 => Some(n as usize),
            _ => return Frame::static_error(MUST_BE_POSITIVE),
        },
    };
    match (pop_many(ctx, &args[1], end, count.unwrap_or(1)), count) {
        (Err(err), _) => err,
        (Ok(None), None) => Frame::Null,
        (Ok(None), Some(_)) => Frame::NullArray,
        (Ok(Some(mut popped)), None) => popped.pop().map_or(Frame::Null, Frame::Bulk),
        (Ok(Some(popped)), Some(_)) => Frame::Array(popped.into_iter().map(Frame::Bulk).collect()),
    }
}

pub fn lpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    pop(ctx, args, End::Left)
}

pub fn rpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    pop(ctx, args, End::Right)
}

pub fn llen(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now_ms;
    match typed::len::<List>(ctx.db(), &args[1], now) {
        Ok(len) => Frame::Integer(len as i64),
        Err(err) => err,
    }
}

pub fn lrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let (start, stop) = match (int_arg(&args[2]), int_arg(&args[3])) {
        (Ok(start), Ok(stop)) => (start, stop),
        (Err(err), _) | (_, Err(err)) => return err,
    };
    let now = ctx.now_ms;
    let list = match typed::get::<List>(ctx.db(), &args[1], now) {
        Ok(Some(list)) => list,
        Ok(None) => return Frame::Array(Vec::new()),
        Err(err) => return err,
    };
    match index_range(start, stop, list.len()) {
        Some((from, to)) => Frame::Array(
            list.range(from..=to)
                .map(|v| Frame::Bulk(v.clone()))
                .collect(),
        ),
        None => Frame::Array(Vec::new()),
    }
}

/// A Redis list index (negative from the end) as a position, if inside the list.
fn position(index: i64, len: usize) -> Option<usize> {
    let pos = if index < 0 { len as i64 + index } else { index };
    (0..len as i64).contains(&pos).then_some(pos as usize)
}

pub fn lindex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let index = match int_arg(&args[2]) {
        Ok(index) => index,
        Err(err) => return err,
    };
    let now = ctx.now_ms;
    match typed::get::<List>(ctx.db(), &args[1], now) {
        Ok(Some(list)) => {
            position(index, list.len()).map_or(Frame::Null, |pos| Frame::Bulk(list[pos].clone()))
        }
        Ok(None) => Frame::Null,
        Err(err) => err,
    }
}

pub fn lset(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let index = match int_arg(&args[2]) {
        Ok(index) => index,
        Err(err) => return err,
    };
    let now = ctx.now_ms;
    match typed::get::<List>(ctx.db(), &args[1], now) {
        Ok(Some(list)) => match position(index, list.len()) {
            Some(pos) => {
                list[pos] = owned(&args[3]);
                Frame::ok()
            }
            None => Frame::static_error(INDEX_RANGE),
        },
        Ok(None) => Frame::static_error(NO_SUCH_KEY),
        Err(err) => err,
    }
}

pub fn linsert(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let after = if is(&args[2], "after") {
        true
    } else if is(&args[2], "before") {
        false
    } else {
        return Frame::static_error(SYNTAX);
    };
    let now = ctx.now_ms;
    let list = match typed::get::<List>(ctx.db(), &args[1], now) {
        Ok(Some(list)) => list,
        Ok(None) => return Frame::Integer(0),
        Err(err) => return err,
    };
    let Some(pos) = list.iter().position(|v| v[..] == args[3][..]) else {
        return Frame::Integer(-1);
    };
    list.insert(pos + usize::from(after), owned(&args[4]));
    let len = list.len() as i64;
    ctx.signal_ready(&args[1]);
    Frame::Integer(len)
}

pub fn lrem(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let count = match int_arg(&args[2]) {
        Ok(count) => count,
        Err(err) => return err,
    };
    let now = ctx.now_ms;
    let list = match typed::get::<List>(ctx.db(), &args[1], now) {
        Ok(Some(list)) => list,
        Ok(None) => return Frame::Integer(0),
        Err(err) => return err,
    };
    let target = &args[3][..];
    let limit = if count == 0 {
        usize::MAX
    } else {
        count.unsigned_abs() as usize
    };
    let mut removed = 0;
    if count >= 0 {
        let mut i = 0;
        while i < list.len() && removed < limit {
            if list[i][..] == *target {
                list.remove(i);
                removed += 1;
            } else {
                i += 1;
            }
        }
    } else {
        let mut i = list.len();
        while i > 0 && removed < limit {
            i -= 1;
            if list[i][..] == *target {
                list.remove(i);
                removed += 1;
            }
        }
    }
    typed::drop_if_empty::<List>(ctx.db(), &args[1], now);
    Frame::Integer(removed as i64)
}

pub fn ltrim(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let (start, stop) = match (int_arg(&args[2]), int_arg(&args[3])) {
        (Ok(start), Ok(stop)) => (start, stop),
        (Err(err), _) | (_, Err(err)) => return err,
    };
    let now = ctx.now_ms;
    let list = match typed::get::<List>(ctx.db(), &args[1], now) {
        Ok(Some(list)) => list,
        Ok(None) => return Frame::ok(),
        Err(err) => return err,
    };
    match index_range(start, stop, list.len()) {
        Some((from, to)) => {
            list.truncate(to + 1);
            list.drain(..from);
        }
        None => list.clear(),
    }
    typed::drop_if_empty::<List>(ctx.db(), &args[1], now);
    Frame::ok()
}

/// LPOS's `RANK`, `COUNT` and `MAXLEN`.
struct LposOptions {
    rank: i64,
    count: Option<usize>,
    maxlen: usize,
}

impl LposOptions {
    fn parse(args: &[Bytes]) -> Result<LposOptions, Frame> {
        let mut options = LposOptions {
            rank: 1,
            count: None,
            maxlen: 0,
        };
        let mut i = 0;
        while i < args.len() {
            let value = args.get(i + 1).ok_or_else(|| Frame::static_error(SYNTAX))?;
            let n = int_arg(value)?;
            if is(&args[i], "rank") {
                if n == i64::MIN {
                    return Err(Frame::static_error(LPOS_RANK_RANGE));
                }
                if n == 0 {
                    return Err(Frame::static_error(LPOS_RANK_ZERO));
                }
                options.rank = n;
            } else if is(&args[i], "count") {
                if n < 0 {
                    return Err(Frame::static_error("ERR COUNT can't be negative"));
                }
                options.count = Some(n as usize);
            } else if is(&args[i], "maxlen") {
                if n < 0 {
                    return Err(Frame::static_error("ERR MAXLEN can't be negative"));
                }
                options.maxlen = n as usize;
            } else {
                return Err(Frame::static_error(SYNTAX));
            }
            i += 2;
        }
        Ok(options)
    }
}

pub fn lpos(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let LposOptions {
        rank,
        count,
        maxlen,
    } = match LposOptions::parse(&args[3..]) {
        Ok(options) => options,
        Err(err) => return err,
    };
    let now = ctx.now_ms;
    let list = match typed::get::<List>(ctx.db(), &args[1], now) {
        Ok(Some(list)) => list,
        Ok(None) => {
            return if count.is_some() {
                Frame::Array(Vec::new())
            } else {
                Frame::Null
            }
        }
        Err(err) => return err,
    };
    let wanted = match count {
        Some(0) => usize::MAX,
        Some(n) => n,
        None => 1,
    };
    let scan_max = if maxlen == 0 { list.len() } else { maxlen };
    let target = &args[2][..];
    let mut skip = rank.unsigned_abs() - 1;
    let mut found = Vec::new();
    let positions: Box<dyn Iterator<Item = usize>> = if rank > 0 {
        Box::new(0..list.len())
    } else {
        Box::new((0..list.len()).rev())
    };
    for pos in positions.take(scan_max) {
        if list[pos][..] != *target {
            continue;
        }
        if skip > 0 {
            skip -= 1;
            continue;
        }
        found.push(Frame::Integer(pos as i64));
        if found.len() >= wanted {
            break;
        }
    }
    match count {
        Some(_) => Frame::Array(found),
        None => found.pop().unwrap_or(Frame::Null),
    }
}

/// Moves one element from `src`'s `from` end to `dst`'s `to` end, atomically on this
/// shard. `Ok(None)` when `src` is missing. `dst` is type-checked before anything moves.
pub fn move_one(
    ctx: &mut Ctx<'_>,
    src: &[u8],
    dst: &[u8],
    from: End,
    to: End,
) -> Result<Option<Bytes>, Frame> {
    let now = ctx.now_ms;
    if typed::get::<List>(ctx.db(), src, now)?.is_none() {
        return Ok(None);
    }
    typed::check::<List>(ctx.db(), dst, now)?;
    let list = typed::get::<List>(ctx.db(), src, now)?.expect("checked above");
    let value = pop_end(list, from).expect("a stored list is never empty");
    typed::drop_if_empty::<List>(ctx.db(), src, now);
    let target = typed::get_or_create::<List>(ctx.db(), dst, now)?;
    push_end(target, to, value.clone());
    ctx.signal_ready(dst);
    Ok(Some(value))
}

/// True when `key` holds a (non-empty) list: what a blocked pop or move waits for.
pub fn holds_list(ctx: &mut Ctx<'_>, key: &[u8]) -> bool {
    let now = ctx.now_ms;
    matches!(typed::get::<List>(ctx.db(), key, now), Ok(Some(_)))
}

/// The two ends of an LMOVE/BLMOVE.
pub fn parse_ends(from: &[u8], to: &[u8]) -> Result<(End, End), Frame> {
    match (End::parse(from), End::parse(to)) {
        (Some(from), Some(to)) => Ok((from, to)),
        _ => Err(Frame::static_error(SYNTAX)),
    }
}

pub fn lmove(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    match parse_ends(&args[3], &args[4]) {
        Ok((from, to)) => move_attempt(ctx, &args[1], &args[2], from, to),
        Err(err) => err,
    }
}

pub fn rpoplpush(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    move_attempt(ctx, &args[1], &args[2], End::Right, End::Left)
}

/// LMOVE's move with its ends parsed (RPOPLPUSH's too, and the attempt of BLMOVE and
/// BRPOPLPUSH): the element moved, or nil when `src` is missing.
pub fn move_attempt(ctx: &mut Ctx<'_>, src: &[u8], dst: &[u8], from: End, to: End) -> Frame {
    match move_one(ctx, src, dst, from, to) {
        Ok(Some(value)) => Frame::Bulk(value),
        Ok(None) => Frame::Null,
        Err(err) => err,
    }
}

/// A blocking command's timeout in milliseconds (0 waits for ever), with Redis's errors.
pub fn parse_timeout(arg: &[u8]) -> Result<u64, Frame> {
    let seconds = float_arg(arg)
        .map_err(|_| Frame::static_error("ERR timeout is not a float or out of range"))?;
    if seconds < 0.0 {
        return Err(Frame::static_error("ERR timeout is negative"));
    }
    let ms = seconds * 1000.0;
    if !ms.is_finite() || ms > (i64::MAX / 2) as f64 {
        return Err(Frame::static_error("ERR timeout is out of range"));
    }
    Ok(ms.ceil() as u64)
}

/// A parsed LMPOP/BLMPOP: its keys, end and count.
pub struct Mpop {
    pub keys: Vec<Bytes>,
    pub end: End,
    pub count: usize,
}

/// Parses `numkeys key… WHERE [COUNT n]` from `args[at]`: LMPOP's and ZMPOP's shape (and
/// their blocking forms'), `parse_where` reading the WHERE word (LEFT|RIGHT, MIN|MAX).
/// Returns the keys, the WHERE and the count (1 without COUNT).
pub fn parse_multi_pop<W>(
    args: &[Bytes],
    at: usize,
    parse_where: impl Fn(&[u8]) -> Option<W>,
) -> Result<(Vec<Bytes>, W, usize), Frame> {
    let numkeys = match int_arg(&args[at]) {
        Ok(n) if n > 0 => n as usize,
        _ => return Err(Frame::static_error("ERR numkeys should be greater than 0")),
    };
    let where_at = at + 1 + numkeys;
    if numkeys > args.len() || where_at >= args.len() {
        return Err(Frame::static_error(SYNTAX));
    }
    let place = parse_where(&args[where_at]).ok_or_else(|| Frame::static_error(SYNTAX))?;
    let mut count = 1;
    let mut i = where_at + 1;
    let mut seen_count = false;
    while i < args.len() {
        if is(&args[i], "count") && !seen_count && i + 1 < args.len() {
            count = match int_arg(&args[i + 1]) {
                Ok(n) if n > 0 => n as usize,
                _ => return Err(Frame::static_error("ERR count should be greater than 0")),
            };
            seen_count = true;
            i += 2;
        } else {
            return Err(Frame::static_error(SYNTAX));
        }
    }
    Ok((args[at + 1..where_at].to_vec(), place, count))
}

/// Parses LMPOP's `numkeys key… LEFT|RIGHT [COUNT n]` starting at `args[at]`.
pub fn parse_mpop(args: &[Bytes], at: usize) -> Result<Mpop, Frame> {
    let (keys, end, count) = parse_multi_pop(args, at, End::parse)?;
    Ok(Mpop { keys, end, count })
}

/// Key positions of LMPOP (`numkeys` at 1) and BLMPOP (`numkeys` at 2).
pub fn mpop_keys(args: &[Bytes], at: usize) -> Vec<usize> {
    match args.get(at).and_then(|n| crate::args::parse_i64(n)) {
        Some(n) if n > 0 && (n as usize) < args.len().saturating_sub(at) => {
            (at + 1..at + 1 + n as usize).collect()
        }
        _ => Vec::new(),
    }
}

/// The first non-empty key of `keys`, in order, gives its elements; nil when all are
/// empty. With `count` (LMPOP, BLMPOP) up to that many, as `[key, [elements]]`; without it
/// (BLPOP, BRPOP) one, as `[key, element]`.
pub fn pop_first(ctx: &mut Ctx<'_>, keys: &[Bytes], end: End, count: Option<usize>) -> Frame {
    for key in keys {
        match pop_many(ctx, key, end, count.unwrap_or(1)) {
            Err(err) => return err,
            Ok(Some(mut popped)) if !popped.is_empty() => {
                let popped = match count {
                    Some(_) => Frame::Array(popped.into_iter().map(Frame::Bulk).collect()),
                    None => Frame::Bulk(popped.pop().expect("one element")),
                };
                return Frame::Array(vec![Frame::Bulk(key.clone()), popped]);
            }
            Ok(_) => {}
        }
    }
    Frame::NullArray
}

pub fn lmpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    match parse_mpop(args, 1) {
        Ok(mpop) => pop_first(ctx, &mpop.keys, mpop.end, Some(mpop.count)),
        Err(err) => err,
    }
}
