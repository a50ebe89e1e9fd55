//! The sorted set family: ZADD with all its flags, ZRANGE in every mode (rank, BYSCORE, BYLEX,
//! REV, LIMIT) and the older ZRANGEBY*/ZREV* forms, ranks, counts, removals by range, pops
//! (and the attempt of the blocking ones), the union/intersection/difference family, random
//! members and ZSCAN. The value itself is `zset::ZSet`.
//!
//! Scores are replied as doubles (`Frame::Double`: a `%.17g` bulk string in RESP2, a double in
//! RESP3) and member/score lists as `Frame::Pairs`, so each protocol gets Redis 7's shape.
//!
//! Its rooms: `ranges` (ZRANGE and kin), `pops` (ZPOPMIN/MAX, ZMPOP), `combine`
//! (ZUNION/ZINTER/ZDIFF and their STORE forms, ZINTERCARD).

mod combine;
mod pops;
mod ranges;

pub use combine::*;
pub use pops::*;
pub use ranges::*;

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
