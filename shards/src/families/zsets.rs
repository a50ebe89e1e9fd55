//! The sorted set family: ZADD with all its flags, ZRANGE in every mode (rank, BYSCORE, BYLEX,
//! REV, LIMIT) and the older ZRANGEBY*/ZREV* forms, ranks, counts, removals by range, pops
//! (and the attempt of the blocking ones), the union/intersection/difference family, random
//! members and ZSCAN. The value itself is `zset::ZSet`.
//!
//! Scores are replied as doubles (`Frame::Double`: a `%.17g` bulk string in RESP2, a double in
//! RESP3) and member/score lists as `Frame::Pairs`, so each protocol gets Redis 7's shape.

use bytes::Bytes;
use wetask_protocol::{format_double, Frame};

use crate::args::{int_arg, is, parse_f64};
use crate::ctx::Ctx;
use crate::errors::*;
use crate::families::hashes::random_picks;
use crate::keyspace::typed::{
    self, index_range, parse_scan, scan_matches, scan_positions, scan_reply, Collection,
};
use crate::keyspace::{Entry, Set};
use crate::values::sorted_set::ZSet;

const NOT_FLOAT_RANGE: &str = "ERR min or max is not a float";
const NOT_LEX_RANGE: &str = "ERR min or max not valid string range item";

fn owned(arg: &[u8]) -> Bytes {
    Bytes::copy_from_slice(arg)
}

fn score_arg(arg: &[u8]) -> Result<f64, Frame> {
    parse_f64(arg).ok_or_else(|| Frame::static_error(NOT_FLOAT))
}

fn read(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    missing: Frame,
    f: impl FnOnce(&mut ZSet) -> Frame,
) -> Frame {
    let now = ctx.now_ms;
    match typed::get::<ZSet>(ctx.db(), key, now) {
        Ok(Some(z)) => f(z),
        Ok(None) => missing,
        Err(err) => err,
    }
}

fn scored(items: Vec<(Bytes, f64)>, with_scores: bool) -> Frame {
    if with_scores {
        Frame::Pairs(
            items
                .into_iter()
                .map(|(m, s)| (Frame::Bulk(m), Frame::Double(s)))
                .collect(),
        )
    } else {
        Frame::Array(items.into_iter().map(|(m, _)| Frame::Bulk(m)).collect())
    }
}

// ---- ZADD and friends ----

#[derive(Default)]
struct AddFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    ch: bool,
    incr: bool,
}

impl AddFlags {
    /// ZADD's flags from `args[2]` on; returns them and where the score-member pairs start.
    fn parse(args: &[Bytes]) -> (AddFlags, usize) {
        let mut flags = AddFlags::default();
        let mut i = 2;
        while let Some(a) = args.get(i) {
            match () {
                _ if is(a, "nx") => flags.nx = true,
                _ if is(a, "xx") => flags.xx = true,
                _ if is(a, "gt") => flags.gt = true,
                _ if is(a, "lt") => flags.lt = true,
                _ if is(a, "ch") => flags.ch = true,
                _ if is(a, "incr") => flags.incr = true,
                _ => break,
            }
            i += 1;
        }
        (flags, i)
    }

    /// Redis's refusals of flag combinations, for `pairs` score-member arguments.
    fn check(&self, pairs: usize) -> Result<(), Frame> {
        if pairs == 0 || !pairs.is_multiple_of(2) {
            return Err(Frame::static_error(SYNTAX));
        }
        if self.nx && self.xx {
            return Err(Frame::static_error(
                "ERR XX and NX options at the same time are not compatible",
            ));
        }
        if [self.gt, self.lt, self.nx].iter().filter(|&&on| on).count() > 1 {
            return Err(Frame::static_error(
                "ERR GT, LT, and/or NX options at the same time are not compatible",
            ));
        }
        if self.incr && pairs > 2 {
            return Err(Frame::static_error(
                "ERR INCR option supports a single increment-element pair",
            ));
        }
        Ok(())
    }
}

impl AddFlags {
    /// Adds or updates the members as the flags say; returns (added, changed, the last new
    /// score for INCR). INCR to NaN stops with Redis's error.
    fn apply(
        &self,
        z: &mut ZSet,
        parsed: Vec<(f64, &Bytes)>,
    ) -> Result<(i64, i64, Option<f64>), Frame> {
        let (mut added, mut changed) = (0, 0);
        let mut incr_result = None;
        for (score, member) in parsed {
            let current = z.score(member);
            let mut next = score;
            if self.incr {
                next = current.unwrap_or(0.0) + score;
                if next.is_nan() {
                    return Err(Frame::static_error(
                        "ERR resulting score is not a number (NaN)",
                    ));
                }
            }
            match current {
                None if self.xx => continue,
                None => {
                    z.insert(owned(member), next);
                    added += 1;
                }
                Some(_) if self.nx => continue,
                Some(old) => {
                    if (self.gt && next <= old) || (self.lt && next >= old) {
                        continue;
                    }
                    if next != old {
                        z.insert(owned(member), next);
                        changed += 1;
                    }
                }
            }
            incr_result = Some(next);
        }
        Ok((added, changed, incr_result))
    }
}

pub fn zadd(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let (flags, first_pair) = AddFlags::parse(args);
    let pairs = &args[first_pair..];
    if let Err(err) = flags.check(pairs.len()) {
        return err;
    }
    let mut parsed = Vec::with_capacity(pairs.len() / 2);
    for pair in pairs.chunks(2) {
        match score_arg(&pair[0]) {
            Ok(score) => parsed.push((score, &pair[1])),
            Err(err) => return err,
        }
    }
    let now = ctx.now_ms;
    if flags.xx {
        // XX never creates the key.
        match typed::get::<ZSet>(ctx.db(), &args[1], now) {
            Ok(Some(_)) => {}
            Ok(None) => {
                return if flags.incr {
                    Frame::Null
                } else {
                    Frame::Integer(0)
                }
            }
            Err(err) => return err,
        }
    }
    let z = match typed::get_or_create::<ZSet>(ctx.db(), &args[1], now) {
        Ok(z) => z,
        Err(err) => return err,
    };
    let (added, changed, incr_result) = match flags.apply(z, parsed) {
        Ok(counts) => counts,
        Err(nan) => {
            typed::drop_if_empty::<ZSet>(ctx.db(), &args[1], now);
            return nan;
        }
    };
    typed::drop_if_empty::<ZSet>(ctx.db(), &args[1], now);
    if added > 0 {
        ctx.signal_ready(&args[1]);
    }
    if added + changed > 0 {
        let event = if flags.incr { "zincr" } else { "zadd" };
        ctx.notify(crate::keyspace::notify::class::ZSET, event, &args[1]);
    }
    if flags.incr {
        return incr_result.map_or(Frame::Null, Frame::Double);
    }
    Frame::Integer(if flags.ch { added + changed } else { added })
}

pub fn zincrby(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let by = match score_arg(&args[2]) {
        Ok(by) => by,
        Err(err) => return err,
    };
    let now = ctx.now_ms;
    let z = match typed::get_or_create::<ZSet>(ctx.db(), &args[1], now) {
        Ok(z) => z,
        Err(err) => return err,
    };
    let next = z.score(&args[3]).unwrap_or(0.0) + by;
    if next.is_nan() {
        typed::drop_if_empty::<ZSet>(ctx.db(), &args[1], now);
        return Frame::static_error("ERR resulting score is not a number (NaN)");
    }
    let fresh = z.insert(owned(&args[3]), next).is_none();
    if fresh {
        ctx.signal_ready(&args[1]);
    }
    Frame::Double(next)
}

pub fn zrem(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now_ms;
    let reply = read(ctx, &args[1], Frame::Integer(0), |z| {
        Frame::Integer(args[2..].iter().filter(|m| z.remove(m).is_some()).count() as i64)
    });
    typed::drop_if_empty::<ZSet>(ctx.db(), &args[1], now);
    reply
}

pub fn zcard(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    read(ctx, &args[1], Frame::Integer(0), |z| {
        Frame::Integer(z.len() as i64)
    })
}

pub fn zscore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    read(ctx, &args[1], Frame::Null, |z| {
        z.score(&args[2]).map_or(Frame::Null, Frame::Double)
    })
}

pub fn zmscore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let asked = &args[2..];
    read(
        ctx,
        &args[1],
        Frame::Array(asked.iter().map(|_| Frame::Null).collect()),
        |z| {
            Frame::Array(
                asked
                    .iter()
                    .map(|m| z.score(m).map_or(Frame::Null, Frame::Double))
                    .collect(),
            )
        },
    )
}

/// ZRANK/ZREVRANK key member [WITHSCORE] (WITHSCORE: Redis 7.2, `[rank, score]`).
fn rank(ctx: &mut Ctx<'_>, args: &[Bytes], rev: bool) -> Frame {
    let name = if rev { "zrevrank" } else { "zrank" };
    if args.len() > 4 {
        return wrong_arity(name);
    }
    let with_score = match args.get(3) {
        None => false,
        Some(arg) if is(arg, "withscore") => true,
        Some(_) => return Frame::static_error(SYNTAX),
    };
    let missing = if with_score {
        Frame::NullArray
    } else {
        Frame::Null
    };
    read(ctx, &args[1], missing.clone(), |z| match z.rank(&args[2]) {
        Some(r) => {
            let rank = Frame::Integer(if rev { z.len() - 1 - r } else { r } as i64);
            match z.score(&args[2]) {
                Some(score) if with_score => Frame::Array(vec![rank, Frame::Double(score)]),
                _ => rank,
            }
        }
        None => missing,
    })
}

pub fn zrank(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    rank(ctx, args, false)
}

pub fn zrevrank(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    rank(ctx, args, true)
}

// ---- ranges ----

/// A score bound: `1.5`, `(1.5` (exclusive), `-inf`, `+inf`.
#[derive(Clone, Copy)]
struct ScoreBound {
    value: f64,
    exclusive: bool,
}

fn parse_score_bound(arg: &[u8]) -> Result<ScoreBound, Frame> {
    let (text, exclusive) = match arg.strip_prefix(b"(") {
        Some(rest) => (rest, true),
        None => (arg, false),
    };
    parse_f64(text)
        .map(|value| ScoreBound { value, exclusive })
        .ok_or_else(|| Frame::static_error(NOT_FLOAT_RANGE))
}

/// A lex bound: `[a`, `(a`, `-`, `+`.
#[derive(Clone)]
enum LexBound {
    Min,
    Max,
    Inclusive(Bytes),
    Exclusive(Bytes),
}

fn parse_lex_bound(arg: &[u8]) -> Result<LexBound, Frame> {
    match arg.first() {
        Some(b'-') if arg.len() == 1 => Ok(LexBound::Min),
        Some(b'+') if arg.len() == 1 => Ok(LexBound::Max),
        Some(b'[') => Ok(LexBound::Inclusive(owned(&arg[1..]))),
        Some(b'(') => Ok(LexBound::Exclusive(owned(&arg[1..]))),
        _ => Err(Frame::static_error(NOT_LEX_RANGE)),
    }
}

/// The ranks `lo..hi` (ascending) whose scores lie between `min` and `max`.
fn score_span(z: &ZSet, min: ScoreBound, max: ScoreBound) -> (usize, usize) {
    let lo = z.partition_point(|s, _| s < min.value || (min.exclusive && s == min.value));
    let hi = z.partition_point(|s, _| s < max.value || (!max.exclusive && s == max.value));
    (lo, hi.max(lo))
}

/// The ranks `lo..hi` whose members lie between `min` and `max` (members of equal score).
fn lex_span(z: &ZSet, min: &LexBound, max: &LexBound) -> (usize, usize) {
    let lo = z.partition_point(|_, m| match min {
        LexBound::Min => false,
        LexBound::Max => true,
        LexBound::Inclusive(x) => m < x,
        LexBound::Exclusive(x) => m <= x,
    });
    let hi = z.partition_point(|_, m| match max {
        LexBound::Min => false,
        LexBound::Max => true,
        LexBound::Inclusive(x) => m <= x,
        LexBound::Exclusive(x) => m < x,
    });
    (lo, hi.max(lo))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum By {
    Rank,
    Score,
    Lex,
}

struct RangeQuery {
    by: By,
    rev: bool,
    limit: Option<(i64, i64)>,
    with_scores: bool,
}

/// The ascending ranks a span selects after REV and LIMIT (offset, count) apply, and
/// whether to read them descending.
fn apply_limit(lo: usize, hi: usize, rev: bool, limit: Option<(i64, i64)>) -> (usize, usize) {
    let Some((offset, count)) = limit else {
        return (lo, hi);
    };
    if offset < 0 {
        return (0, 0);
    }
    let offset = offset as usize;
    let len = hi - lo;
    if offset >= len {
        return (0, 0);
    }
    let take = if count < 0 {
        len - offset
    } else {
        (count as usize).min(len - offset)
    };
    if rev {
        (hi - offset - take, hi - offset)
    } else {
        (lo + offset, lo + offset + take)
    }
}

/// Selects the pairs of a range query; `start`/`stop` are the two bound arguments as
/// given (for REV by score or lex, max comes first).
fn select(
    z: &ZSet,
    start: &[u8],
    stop: &[u8],
    query: &RangeQuery,
) -> Result<Vec<(Bytes, f64)>, Frame> {
    let (lo, hi) = match query.by {
        By::Rank => {
            let (a, b) = (int_arg(start)?, int_arg(stop)?);
            let len = z.len();
            match index_range(a, b, len) {
                Some((a, b)) if query.rev => (len - 1 - b, len - a),
                Some((a, b)) => (a, b + 1),
                None => (0, 0),
            }
        }
        By::Score => {
            let (min, max) = if query.rev {
                (stop, start)
            } else {
                (start, stop)
            };
            score_span(z, parse_score_bound(min)?, parse_score_bound(max)?)
        }
        By::Lex => {
            let (min, max) = if query.rev {
                (stop, start)
            } else {
                (start, stop)
            };
            lex_span(z, &parse_lex_bound(min)?, &parse_lex_bound(max)?)
        }
    };
    let (from, to) = apply_limit(lo, hi, query.rev, query.limit);
    Ok(z.range(from, to, query.rev))
}

/// Parses ZRANGE's options from `args[at..]`.
fn parse_range_options(args: &[Bytes], at: usize, store: bool) -> Result<RangeQuery, Frame> {
    let mut query = RangeQuery {
        by: By::Rank,
        rev: false,
        limit: None,
        with_scores: false,
    };
    let mut i = at;
    while i < args.len() {
        let a = &args[i];
        if is(a, "byscore") {
            query.by = By::Score;
        } else if is(a, "bylex") {
            query.by = By::Lex;
        } else if is(a, "rev") {
            query.rev = true;
        } else if is(a, "withscores") && !store {
            query.with_scores = true;
        } else if is(a, "limit") && i + 2 < args.len() {
            query.limit = Some((int_arg(&args[i + 1])?, int_arg(&args[i + 2])?));
            i += 2;
        } else {
            return Err(Frame::static_error(SYNTAX));
        }
        i += 1;
    }
    if query.limit.is_some() && query.by == By::Rank {
        return Err(Frame::static_error(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if query.with_scores && query.by == By::Lex {
        return Err(Frame::static_error(
            "ERR syntax error, WITHSCORES not supported in combination with BYLEX",
        ));
    }
    Ok(query)
}

fn run_range(ctx: &mut Ctx<'_>, key: &[u8], start: &[u8], stop: &[u8], query: RangeQuery) -> Frame {
    // Bounds are checked even when the key is missing, as Redis does.
    if let Err(err) = select(&ZSet::default(), start, stop, &query) {
        return err;
    }
    read(ctx, key, Frame::Array(Vec::new()), |z| {
        match select(z, start, stop, &query) {
            Ok(items) => scored(items, query.with_scores),
            Err(err) => err,
        }
    })
}

pub fn zrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    match parse_range_options(args, 4, false) {
        Ok(query) => run_range(ctx, &args[1], &args[2], &args[3], query),
        Err(err) => err,
    }
}

pub fn zrangestore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let query = match parse_range_options(args, 5, true) {
        Ok(query) => query,
        Err(err) => return err,
    };
    if let Err(err) = select(&ZSet::default(), &args[3], &args[4], &query) {
        return err;
    }
    let now = ctx.now_ms;
    let items = match typed::get::<ZSet>(ctx.db(), &args[2], now) {
        Ok(Some(z)) => match select(z, &args[3], &args[4], &query) {
            Ok(items) => items,
            Err(err) => return err,
        },
        Ok(None) => Vec::new(),
        Err(err) => return err,
    };
    store_zset(ctx, &args[1], items.into_iter())
}

/// Replaces `key` with a sorted set of `items` (deleting it when there are none); replies
/// the new size.
pub(crate) fn store_zset(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    items: impl Iterator<Item = (Bytes, f64)>,
) -> Frame {
    let mut z = ZSet::default();
    for (m, s) in items {
        z.insert(m, s);
    }
    let len = z.len() as i64;
    if z.is_empty() {
        ctx.db().remove(key);
    } else {
        // Blocked clients learn of a new sorted set from the command's run
        // (`Shard::signal_written`): an overwrite serves none of them, as in Redis.
        ctx.db().insert(key, Entry::new(z.into_value()));
    }
    Frame::Integer(len)
}

/// The older range commands: `WITHSCORES` and `LIMIT offset count` in any order.
fn legacy_range(ctx: &mut Ctx<'_>, args: &[Bytes], by: By, rev: bool) -> Frame {
    let mut query = RangeQuery {
        by,
        rev,
        limit: None,
        with_scores: false,
    };
    let mut i = 4;
    while i < args.len() {
        if is(&args[i], "withscores") && by != By::Lex {
            query.with_scores = true;
        } else if is(&args[i], "limit") && by != By::Rank && i + 2 < args.len() {
            query.limit = match (int_arg(&args[i + 1]), int_arg(&args[i + 2])) {
                (Ok(offset), Ok(count)) => Some((offset, count)),
                (Err(err), _) | (_, Err(err)) => return err,
            };
            i += 2;
        } else {
            return Frame::static_error(SYNTAX);
        }
        i += 1;
    }
    run_range(ctx, &args[1], &args[2], &args[3], query)
}

pub fn zrevrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    legacy_range(ctx, args, By::Rank, true)
}

pub fn zrangebyscore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    legacy_range(ctx, args, By::Score, false)
}

pub fn zrevrangebyscore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    legacy_range(ctx, args, By::Score, true)
}

pub fn zrangebylex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    legacy_range(ctx, args, By::Lex, false)
}

pub fn zrevrangebylex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    legacy_range(ctx, args, By::Lex, true)
}

pub fn zcount(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let (min, max) = match (parse_score_bound(&args[2]), parse_score_bound(&args[3])) {
        (Ok(min), Ok(max)) => (min, max),
        (Err(err), _) | (_, Err(err)) => return err,
    };
    read(ctx, &args[1], Frame::Integer(0), |z| {
        let (lo, hi) = score_span(z, min, max);
        Frame::Integer((hi - lo) as i64)
    })
}

pub fn zlexcount(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let (min, max) = match (parse_lex_bound(&args[2]), parse_lex_bound(&args[3])) {
        (Ok(min), Ok(max)) => (min, max),
        (Err(err), _) | (_, Err(err)) => return err,
    };
    read(ctx, &args[1], Frame::Integer(0), |z| {
        let (lo, hi) = lex_span(z, &min, &max);
        Frame::Integer((hi - lo) as i64)
    })
}

fn remove_range(ctx: &mut Ctx<'_>, args: &[Bytes], by: By) -> Frame {
    let query = RangeQuery {
        by,
        rev: false,
        limit: None,
        with_scores: false,
    };
    if let Err(err) = select(&ZSet::default(), &args[2], &args[3], &query) {
        return err;
    }
    let now = ctx.now_ms;
    let reply = read(ctx, &args[1], Frame::Integer(0), |z| {
        match select(z, &args[2], &args[3], &query) {
            Ok(items) => {
                for (m, _) in &items {
                    z.remove(m);
                }
                Frame::Integer(items.len() as i64)
            }
            Err(err) => err,
        }
    });
    typed::drop_if_empty::<ZSet>(ctx.db(), &args[1], now);
    reply
}

pub fn zremrangebyrank(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    remove_range(ctx, args, By::Rank)
}

pub fn zremrangebyscore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    remove_range(ctx, args, By::Score)
}

pub fn zremrangebylex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    remove_range(ctx, args, By::Lex)
}

// ---- pops ----

/// Pops up to `count` of the lowest (or, with `max`, highest) scored members of `key`;
/// `Ok(None)` when the key is missing.
pub fn pop_many(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    max: bool,
    count: usize,
) -> Result<Option<Vec<(Bytes, f64)>>, Frame> {
    let now = ctx.now_ms;
    let Some(z) = typed::get::<ZSet>(ctx.db(), key, now)? else {
        return Ok(None);
    };
    let len = z.len();
    let take = count.min(len);
    let items = if max {
        z.range(len - take, len, true)
    } else {
        z.range(0, take, false)
    };
    for (m, _) in &items {
        z.remove(m);
    }
    typed::drop_if_empty::<ZSet>(ctx.db(), key, now);
    Ok(Some(items))
}

fn pop(ctx: &mut Ctx<'_>, args: &[Bytes], max: bool) -> Frame {
    if args.len() > 3 {
        return Frame::static_error(SYNTAX);
    }
    let count = match args.get(2).map(|a| int_arg(a)) {
        None => None,
        Some(Ok(n)) if n >= 0 => Some(n as usize),
        Some(_) => return Frame::static_error(MUST_BE_POSITIVE),
    };
    match pop_many(ctx, &args[1], max, count.unwrap_or(1)) {
        Err(err) => err,
        Ok(None) => Frame::Array(Vec::new()),
        Ok(Some(items)) if count.is_some() => scored(items, true),
        Ok(Some(items)) => Frame::Array(
            items
                .into_iter()
                .flat_map(|(m, s)| [Frame::Bulk(m), Frame::Double(s)])
                .collect(),
        ),
    }
}

pub fn zpopmin(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    pop(ctx, args, false)
}

pub fn zpopmax(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    pop(ctx, args, true)
}

/// A parsed ZMPOP/BZMPOP.
pub struct Zmpop {
    pub keys: Vec<Bytes>,
    pub max: bool,
    pub count: usize,
}

/// Parses ZMPOP's `numkeys key… MIN|MAX [COUNT n]` starting at `args[at]`.
pub fn parse_zmpop(args: &[Bytes], at: usize) -> Result<Zmpop, Frame> {
    let parse_max = |word: &[u8]| {
        if is(word, "max") {
            Some(true)
        } else if is(word, "min") {
            Some(false)
        } else {
            None
        }
    };
    let (keys, max, count) = crate::families::lists::parse_multi_pop(args, at, parse_max)?;
    Ok(Zmpop { keys, max, count })
}

/// The first non-empty key of `keys`, in order, gives its lowest (with `max`, highest)
/// scored members; nil when all are empty. With `count` (ZMPOP, BZMPOP) up to that many, as
/// `[key, [[member, score], …]]`; without it (BZPOPMIN, BZPOPMAX) one, as
/// `[key, member, score]`.
pub fn pop_first(ctx: &mut Ctx<'_>, keys: &[Bytes], max: bool, count: Option<usize>) -> Frame {
    for key in keys {
        match pop_many(ctx, key, max, count.unwrap_or(1)) {
            Err(err) => return err,
            Ok(Some(mut items)) if !items.is_empty() => {
                let key = Frame::Bulk(key.clone());
                if count.is_none() {
                    let (m, s) = items.pop().expect("one");
                    return Frame::Array(vec![key, Frame::Bulk(m), Frame::Double(s)]);
                }
                let pairs = items
                    .into_iter()
                    .map(|(m, s)| Frame::Array(vec![Frame::Bulk(m), Frame::Double(s)]))
                    .collect();
                return Frame::Array(vec![key, Frame::Array(pairs)]);
            }
            Ok(_) => {}
        }
    }
    Frame::NullArray
}

pub fn zmpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    match parse_zmpop(args, 1) {
        Ok(zmpop) => pop_first(ctx, &zmpop.keys, zmpop.max, Some(zmpop.count)),
        Err(err) => err,
    }
}

// ---- union, intersection, difference ----

#[derive(Clone, Copy, PartialEq, Eq)]
enum SetOp {
    Union,
    Inter,
    Diff,
}

#[derive(Clone, Copy)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

impl Aggregate {
    fn apply(self, a: f64, b: f64) -> f64 {
        match self {
            // inf + -inf is NaN; Redis makes it 0.
            Aggregate::Sum => {
                let sum = a + b;
                if sum.is_nan() {
                    0.0
                } else {
                    sum
                }
            }
            Aggregate::Min => a.min(b),
            Aggregate::Max => a.max(b),
        }
    }
}

struct Combine {
    keys: Vec<Bytes>,
    weights: Vec<f64>,
    aggregate: Aggregate,
    with_scores: bool,
}

/// Parses `numkeys key… [WEIGHTS w…] [AGGREGATE SUM|MIN|MAX] [WITHSCORES]` from `args[at]`.
fn parse_combine(
    args: &[Bytes],
    at: usize,
    op: SetOp,
    store: bool,
    name: &str,
) -> Result<Combine, Frame> {
    let numkeys = int_arg(&args[at])?;
    if numkeys <= 0 {
        return Err(Frame::error(format!(
            "ERR at least 1 input key is needed for '{name}' command"
        )));
    }
    let numkeys = numkeys as usize;
    if numkeys > args.len() - at - 1 {
        return Err(Frame::static_error(SYNTAX));
    }
    let keys = args[at + 1..at + 1 + numkeys].to_vec();
    let mut combine = Combine {
        weights: vec![1.0; numkeys],
        keys,
        aggregate: Aggregate::Sum,
        with_scores: false,
    };
    let mut i = at + 1 + numkeys;
    while i < args.len() {
        let a = &args[i];
        if is(a, "weights") && op != SetOp::Diff && i + numkeys < args.len() {
            for (n, w) in args[i + 1..i + 1 + numkeys].iter().enumerate() {
                combine.weights[n] = parse_f64(w)
                    .ok_or_else(|| Frame::static_error("ERR weight value is not a float"))?;
            }
            i += numkeys;
        } else if is(a, "aggregate") && op != SetOp::Diff && i + 1 < args.len() {
            let how = &args[i + 1];
            combine.aggregate = if is(how, "sum") {
                Aggregate::Sum
            } else if is(how, "min") {
                Aggregate::Min
            } else if is(how, "max") {
                Aggregate::Max
            } else {
                return Err(Frame::static_error(SYNTAX));
            };
            i += 1;
        } else if is(a, "withscores") && !store {
            combine.with_scores = true;
        } else {
            return Err(Frame::static_error(SYNTAX));
        }
        i += 1;
    }
    Ok(combine)
}

/// The members and scores at `key`: a sorted set, or a set (every score 1); empty when missing.
fn load_scored(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<Vec<(Bytes, f64)>>, Frame> {
    let now = ctx.now_ms;
    if let Ok(found) = typed::get::<ZSet>(ctx.db(), key, now) {
        return Ok(found.map(|z| z.members().map(|(m, s)| (m.clone(), s)).collect()));
    }
    match typed::get::<Set>(ctx.db(), key, now) {
        Ok(found) => Ok(found.map(|s| s.iter().map(|m| (m.clone(), 1.0)).collect())),
        Err(err) => Err(err),
    }
}

fn combine(ctx: &mut Ctx<'_>, spec: &Combine, op: SetOp) -> Result<Vec<(Bytes, f64)>, Frame> {
    let mut inputs = Vec::with_capacity(spec.keys.len());
    for key in &spec.keys {
        inputs.push(load_scored(ctx, key)?);
    }
    let weigh = |score: f64, w: f64| {
        let v = score * w;
        if v.is_nan() {
            0.0
        } else {
            v
        }
    };
    let mut result: indexmap::IndexMap<Bytes, f64, crate::keyspace::Hasher> = Default::default();
    match op {
        SetOp::Union => {
            for (input, &w) in inputs.iter().zip(&spec.weights) {
                for (m, s) in input.iter().flatten() {
                    let v = weigh(*s, w);
                    result
                        .entry(m.clone())
                        .and_modify(|acc| *acc = spec.aggregate.apply(*acc, v))
                        .or_insert(v);
                }
            }
        }
        SetOp::Inter => {
            if inputs.iter().any(Option::is_none) {
                return Ok(Vec::new());
            }
            let maps: Vec<std::collections::HashMap<&Bytes, f64>> = inputs
                .iter()
                .map(|i| i.iter().flatten().map(|(m, s)| (m, *s)).collect())
                .collect();
            for (m, s) in inputs[0].iter().flatten() {
                let mut acc = weigh(*s, spec.weights[0]);
                let mut everywhere = true;
                for (n, map) in maps.iter().enumerate().skip(1) {
                    match map.get(m) {
                        Some(&other) => {
                            acc = spec.aggregate.apply(acc, weigh(other, spec.weights[n]))
                        }
                        None => {
                            everywhere = false;
                            break;
                        }
                    }
                }
                if everywhere {
                    result.insert(m.clone(), acc);
                }
            }
        }
        SetOp::Diff => {
            let others: std::collections::HashSet<&Bytes> = inputs[1..]
                .iter()
                .flat_map(|i| i.iter().flatten().map(|(m, _)| m))
                .collect();
            for (m, s) in inputs[0].iter().flatten() {
                if !others.contains(m) {
                    result.insert(m.clone(), *s);
                }
            }
        }
    }
    Ok(result.into_iter().collect())
}

fn combine_reply(ctx: &mut Ctx<'_>, args: &[Bytes], op: SetOp, name: &str) -> Frame {
    let spec = match parse_combine(args, 1, op, false, name) {
        Ok(spec) => spec,
        Err(err) => return err,
    };
    match combine(ctx, &spec, op) {
        Ok(items) => {
            let mut z = ZSet::default();
            for (m, s) in items {
                z.insert(m, s);
            }
            scored(z.range(0, usize::MAX, false), spec.with_scores)
        }
        Err(err) => err,
    }
}

fn combine_store(ctx: &mut Ctx<'_>, args: &[Bytes], op: SetOp, name: &str) -> Frame {
    let spec = match parse_combine(args, 2, op, true, name) {
        Ok(spec) => spec,
        Err(err) => return err,
    };
    match combine(ctx, &spec, op) {
        Ok(items) => store_zset(ctx, &args[1], items.into_iter()),
        Err(err) => err,
    }
}

pub fn zunion(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    combine_reply(ctx, args, SetOp::Union, "zunion")
}

pub fn zinter(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    combine_reply(ctx, args, SetOp::Inter, "zinter")
}

pub fn zdiff(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    combine_reply(ctx, args, SetOp::Diff, "zdiff")
}

pub fn zunionstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    combine_store(ctx, args, SetOp::Union, "zunionstore")
}

pub fn zinterstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    combine_store(ctx, args, SetOp::Inter, "zinterstore")
}

pub fn zdiffstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    combine_store(ctx, args, SetOp::Diff, "zdiffstore")
}

pub fn zintercard(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let numkeys = match int_arg(&args[1]) {
        Ok(n) if n > 0 => n as usize,
        Ok(_) => {
            return Frame::static_error(
                "ERR at least 1 input key is needed for 'zintercard' command",
            )
        }
        Err(err) => return err,
    };
    if numkeys > args.len() - 2 {
        return Frame::static_error(SYNTAX);
    }
    let limit = match &args[2 + numkeys..] {
        [] => 0,
        [word, n] if is(word, "limit") => match int_arg(n) {
            Ok(n) if n >= 0 => n as usize,
            Ok(_) => return Frame::static_error("ERR LIMIT can't be negative"),
            Err(err) => return err,
        },
        _ => return Frame::static_error(SYNTAX),
    };
    let spec = Combine {
        keys: args[2..2 + numkeys].to_vec(),
        weights: vec![1.0; numkeys],
        aggregate: Aggregate::Sum,
        with_scores: false,
    };
    match combine(ctx, &spec, SetOp::Inter) {
        Ok(items) if limit > 0 => Frame::Integer(items.len().min(limit) as i64),
        Ok(items) => Frame::Integer(items.len() as i64),
        Err(err) => err,
    }
}

/// Keys of ZUNION/ZINTER/ZDIFF (`numkeys` at 1) and of ZMPOP.
pub fn numkeys_at_1(args: &[Bytes]) -> Vec<usize> {
    crate::families::lists::mpop_keys(args, 1)
}

/// Keys of BZMPOP (`numkeys` at 2).
pub fn numkeys_at_2(args: &[Bytes]) -> Vec<usize> {
    crate::families::lists::mpop_keys(args, 2)
}

/// Keys of the STORE forms: the destination, then `numkeys` sources after the count.
pub fn store_keys(args: &[Bytes]) -> Vec<usize> {
    let mut keys = vec![1];
    keys.extend(crate::families::lists::mpop_keys(args, 2));
    keys
}

// ---- random members and scan ----

pub fn zrandmember(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let (count, with_scores) =
        match crate::families::hashes::random_count_args(args, Some("withscores")) {
            Ok(parsed) => parsed,
            Err(err) => return err,
        };
    let Some(count) = count else {
        return read(ctx, &args[1], Frame::Null, |z| {
            let i = typed::random_index(z.len());
            Frame::Bulk(z.at_position(i).expect("non-empty").0.clone())
        });
    };
    read(ctx, &args[1], Frame::Array(Vec::new()), |z| {
        let picks = match random_picks(z.len(), count, 1 + usize::from(with_scores)) {
            Ok(picks) => picks,
            Err(err) => return err,
        };
        let items = picks
            .into_iter()
            .map(|i| {
                let (m, s) = z.at_position(i).expect("in range");
                (m.clone(), s)
            })
            .collect();
        scored(items, with_scores)
    })
}

pub fn zscan(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let scan = match parse_scan(args) {
        Ok(scan) => scan,
        Err(err) => return err,
    };
    read(ctx, &args[1], scan_reply(0, Vec::new()), |z| {
        let mut items = Vec::new();
        let cursor = scan_positions(z.len(), &scan, |i| {
            let (m, s) = z.at_position(i).expect("in range");
            if scan_matches(&scan, m) {
                items.push(Frame::Bulk(m.clone()));
                items.push(Frame::Bulk(Bytes::from(format_double(s))));
            }
        });
        scan_reply(cursor, items)
    })
}
