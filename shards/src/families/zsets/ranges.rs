//! Sorted-set ranges: by rank, score or lex, forward or reversed, with LIMIT (ZRANGE and its
//! legacy forms, ZRANGESTORE), counting (ZCOUNT, ZLEXCOUNT) and removing (ZREMRANGEBY*).

use super::*;

/// A score bound: `1.5`, `(1.5` (exclusive), `-inf`, `+inf`.
#[derive(Clone, Copy)]
pub(super) struct ScoreBound {
    value: f64,
    exclusive: bool,
}

pub(super) fn parse_score_bound(arg: &[u8]) -> Result<ScoreBound, Frame> {
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
pub(super) enum LexBound {
    Min,
    Max,
    Inclusive(Bytes),
    Exclusive(Bytes),
}

pub(super) fn parse_lex_bound(arg: &[u8]) -> Result<LexBound, Frame> {
    match arg.first() {
        Some(b'-') if arg.len() == 1 => Ok(LexBound::Min),
        Some(b'+') if arg.len() == 1 => Ok(LexBound::Max),
        Some(b'[') => Ok(LexBound::Inclusive(owned(&arg[1..]))),
        Some(b'(') => Ok(LexBound::Exclusive(owned(&arg[1..]))),
        _ => Err(Frame::static_error(NOT_LEX_RANGE)),
    }
}

/// The ranks `lo..hi` (ascending) whose scores lie between `min` and `max`.
pub(super) fn score_span(z: &ZSet, min: ScoreBound, max: ScoreBound) -> (usize, usize) {
    let lo = z.partition_point(|s, _| s < min.value || (min.exclusive && s == min.value));
    let hi = z.partition_point(|s, _| s < max.value || (!max.exclusive && s == max.value));
    (lo, hi.max(lo))
}

/// The ranks `lo..hi` whose members lie between `min` and `max` (members of equal score).
pub(super) fn lex_span(z: &ZSet, min: &LexBound, max: &LexBound) -> (usize, usize) {
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
pub(super) enum By {
    Rank,
    Score,
    Lex,
}

pub(super) struct RangeQuery {
    by: By,
    rev: bool,
    limit: Option<(i64, i64)>,
    with_scores: bool,
}

/// The ascending ranks a span selects after REV and LIMIT (offset, count) apply, and
/// whether to read them descending.
pub(super) fn apply_limit(
    lo: usize,
    hi: usize,
    rev: bool,
    limit: Option<(i64, i64)>,
) -> (usize, usize) {
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
pub(super) fn select(
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
pub(super) fn parse_range_options(
    args: &[Bytes],
    at: usize,
    store: bool,
) -> Result<RangeQuery, Frame> {
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

pub(super) fn run_range(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    start: &[u8],
    stop: &[u8],
    query: RangeQuery,
) -> Frame {
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

/// The older range commands: `WITHSCORES` and `LIMIT offset count` in any order.
pub(super) fn legacy_range(ctx: &mut Ctx<'_>, args: &[Bytes], by: By, rev: bool) -> Frame {
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

pub(super) fn remove_range(ctx: &mut Ctx<'_>, args: &[Bytes], by: By) -> Frame {
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
