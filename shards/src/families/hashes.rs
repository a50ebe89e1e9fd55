//! The hash family: field reads and writes, counters, random fields and HSCAN. A hash is an
//! insertion-ordered map (`keyspace::Hash`), so HRANDFIELD and HSCAN step by position.

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::args::{int_arg, parse_i64};
use crate::ctx::Ctx;
use crate::errors::*;
use crate::keyspace::typed::{
    self, parse_scan, random_index, scan_matches, scan_positions, scan_reply,
};
use crate::keyspace::Hash;
use crate::values::long_double::{self, LongDouble};

fn owned(arg: &[u8]) -> Bytes {
    Bytes::copy_from_slice(arg)
}

/// Runs `f` on the hash at `args[1]`, or replies `missing` when there is none.
fn read(
    ctx: &mut Ctx<'_>,
    args: &[Bytes],
    missing: Frame,
    f: impl FnOnce(&mut Hash) -> Frame,
) -> Frame {
    let now = ctx.now_ms;
    match typed::get::<Hash>(ctx.db(), &args[1], now) {
        Ok(Some(hash)) => f(hash),
        Ok(None) => missing,
        Err(err) => err,
    }
}

fn set_pairs(ctx: &mut Ctx<'_>, args: &[Bytes], name: &str) -> Result<i64, Frame> {
    if args.len() < 4 || !args.len().is_multiple_of(2) {
        return Err(wrong_arity(name));
    }
    let now = ctx.now_ms;
    let hash = typed::get_or_create::<Hash>(ctx.db(), &args[1], now)?;
    let mut added = 0;
    for pair in args[2..].chunks(2) {
        if hash.insert(owned(&pair[0]), owned(&pair[1])).is_none() {
            added += 1;
        }
    }
    Ok(added)
}

pub fn hset(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    set_pairs(ctx, args, "hset").map_or_else(|e| e, Frame::Integer)
}

pub fn hmset(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    set_pairs(ctx, args, "hmset").map_or_else(|e| e, |_| Frame::ok())
}

pub fn hsetnx(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now_ms;
    match typed::get_or_create::<Hash>(ctx.db(), &args[1], now) {
        Ok(hash) if hash.contains_key(&args[2][..]) => Frame::Integer(0),
        Ok(hash) => {
            hash.insert(owned(&args[2]), owned(&args[3]));
            Frame::Integer(1)
        }
        Err(err) => err,
    }
}

pub fn hget(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    read(ctx, args, Frame::Null, |hash| {
        hash.get(&args[2][..])
            .map_or(Frame::Null, |v| Frame::Bulk(v.clone()))
    })
}

pub fn hmget(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let fields = &args[2..];
    read(
        ctx,
        args,
        Frame::Array(fields.iter().map(|_| Frame::Null).collect()),
        |hash| {
            Frame::Array(
                fields
                    .iter()
                    .map(|f| {
                        hash.get(&f[..])
                            .map_or(Frame::Null, |v| Frame::Bulk(v.clone()))
                    })
                    .collect(),
            )
        },
    )
}

pub fn hdel(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now_ms;
    let removed = read(ctx, args, Frame::Integer(0), |hash| {
        let n = args[2..]
            .iter()
            .filter(|f| hash.swap_remove(&f[..]).is_some())
            .count();
        Frame::Integer(n as i64)
    });
    typed::drop_if_empty::<Hash>(ctx.db(), &args[1], now);
    removed
}

pub fn hlen(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    read(ctx, args, Frame::Integer(0), |hash| {
        Frame::Integer(hash.len() as i64)
    })
}

pub fn hstrlen(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    read(ctx, args, Frame::Integer(0), |hash| {
        Frame::Integer(hash.get(&args[2][..]).map_or(0, |v| v.len() as i64))
    })
}

pub fn hexists(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    read(ctx, args, Frame::Integer(0), |hash| {
        Frame::Integer(i64::from(hash.contains_key(&args[2][..])))
    })
}

pub fn hkeys(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    read(ctx, args, Frame::Array(Vec::new()), |hash| {
        Frame::Array(hash.keys().map(|k| Frame::Bulk(k.clone())).collect())
    })
}

pub fn hvals(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    read(ctx, args, Frame::Array(Vec::new()), |hash| {
        Frame::Array(hash.values().map(|v| Frame::Bulk(v.clone())).collect())
    })
}

pub fn hgetall(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    read(ctx, args, Frame::Map(Vec::new()), |hash| {
        Frame::Map(
            hash.iter()
                .map(|(k, v)| (Frame::Bulk(k.clone()), Frame::Bulk(v.clone())))
                .collect(),
        )
    })
}

pub fn hincrby(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let by = match int_arg(&args[3]) {
        Ok(by) => by,
        Err(err) => return err,
    };
    let now = ctx.now_ms;
    let hash = match typed::get_or_create::<Hash>(ctx.db(), &args[1], now) {
        Ok(hash) => hash,
        Err(err) => return err,
    };
    let current = match hash.get(&args[2][..]) {
        None => 0,
        Some(v) => match parse_i64(v) {
            Some(n) => n,
            None => return Frame::static_error("ERR hash value is not an integer"),
        },
    };
    let Some(next) = current.checked_add(by) else {
        return Frame::static_error(OVERFLOW);
    };
    hash.insert(owned(&args[2]), Bytes::from(next.to_string()));
    Frame::Integer(next)
}

/// HINCRBYFLOAT: in `long double`, as INCRBYFLOAT ([`crate::values::long_double`]).
pub fn hincrbyfloat(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let by = match long_double::parse(&args[3]) {
        Some(by) if by.is_finite() => by,
        Some(_) => return Frame::static_error("ERR value is NaN or Infinity"),
        None => return Frame::static_error(NOT_FLOAT),
    };
    let now = ctx.now_ms;
    let hash = match typed::get_or_create::<Hash>(ctx.db(), &args[1], now) {
        Ok(hash) => hash,
        Err(err) => return err,
    };
    let current = match hash.get(&args[2][..]) {
        None => LongDouble::ZERO,
        Some(v) => match long_double::parse(v) {
            Some(n) => n,
            None => return Frame::static_error("ERR hash value is not a float"),
        },
    };
    let next = match current.plus(by) {
        Some(next) if next.is_finite() => next,
        _ => return Frame::static_error(NAN_OR_INFINITY),
    };
    let text = Bytes::from(next.human());
    hash.insert(owned(&args[2]), text.clone());
    Frame::Bulk(text)
}

pub fn hrandfield(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let (count, with_values) = match random_count_args(args, Some("withvalues")) {
        Ok(parsed) => parsed,
        Err(err) => return err,
    };
    let Some(count) = count else {
        return read(ctx, args, Frame::Null, |hash| {
            let (k, _) = hash.get_index(random_index(hash.len())).expect("non-empty");
            Frame::Bulk(k.clone())
        });
    };
    read(ctx, args, Frame::Array(Vec::new()), |hash| {
        let picks = match random_picks(hash.len(), count, 1 + usize::from(with_values)) {
            Ok(picks) => picks,
            Err(err) => return err,
        };
        let field = |i: usize| hash.get_index(i).expect("in range");
        if with_values {
            Frame::Pairs(
                picks
                    .into_iter()
                    .map(|i| {
                        (
                            Frame::Bulk(field(i).0.clone()),
                            Frame::Bulk(field(i).1.clone()),
                        )
                    })
                    .collect(),
            )
        } else {
            Frame::Array(
                picks
                    .into_iter()
                    .map(|i| Frame::Bulk(field(i).0.clone()))
                    .collect(),
            )
        }
    })
}

/// The `[count [FLAG]]` of HRANDFIELD (WITHVALUES), SRANDMEMBER (no flag) and ZRANDMEMBER
/// (WITHSCORES), from `args[2..]`: the count (`None` when absent) and whether the flag was
/// given, with Redis's errors.
pub fn random_count_args(args: &[Bytes], flag: Option<&str>) -> Result<(Option<i64>, bool), Frame> {
    if args.len() > 3 + usize::from(flag.is_some()) {
        return Err(Frame::static_error(SYNTAX));
    }
    let count = match args.get(2).map(|a| int_arg(a)) {
        None => None,
        Some(Ok(n)) if n > -(i64::MAX / 2) => Some(n),
        Some(Ok(_)) => return Err(Frame::static_error("ERR value is out of range")),
        Some(Err(err)) => return Err(err),
    };
    let flagged = match (args.get(3), flag) {
        (None, _) => false,
        (Some(arg), Some(flag)) if crate::args::is(arg, flag) => true,
        _ => return Err(Frame::static_error(SYNTAX)),
    };
    Ok((count, flagged))
}

/// The most memory one random-count reply (HRANDFIELD, SRANDMEMBER, ZRANDMEMBER with a
/// negative count, which repeats members) may take while it is built: past it the command
/// replies an error instead of allocating. Redis has no such bound (it streams the reply
/// into an unlimited output buffer); a count of -4e18 there exhausts memory.
pub const RANDOM_REPLY_BYTES_MAX: usize = 256 * 1024 * 1024;

/// Positions for a random pick of `count` from `len`: distinct when `count` is positive
/// (at most `len`), possibly repeated when negative (exactly `-count`), as Redis's
/// HRANDFIELD and SRANDMEMBER. `frames_per_pick` is how many reply frames one pick becomes
/// (2 WITHVALUES/WITHSCORES): a repeating pick whose reply would pass
/// [`RANDOM_REPLY_BYTES_MAX`] is refused before anything is allocated.
pub fn random_picks(len: usize, count: i64, frames_per_pick: usize) -> Result<Vec<usize>, Frame> {
    if count < 0 {
        let per_pick = std::mem::size_of::<Frame>() * frames_per_pick.max(1);
        let most = (RANDOM_REPLY_BYTES_MAX / per_pick) as u64;
        if count.unsigned_abs() > most {
            return Err(Frame::error(format!(
                "ERR value is out of range: a reply of {} random elements would pass the {} MiB reply limit (at most {most})",
                count.unsigned_abs(),
                RANDOM_REPLY_BYTES_MAX >> 20
            )));
        }
        return Ok((0..count.unsigned_abs())
            .map(|_| random_index(len))
            .collect());
    }
    let count = (count as usize).min(len);
    if count * 2 >= len {
        // Most of them: shuffle all positions and keep a prefix.
        let mut all: Vec<usize> = (0..len).collect();
        for i in (1..len).rev() {
            all.swap(i, random_index(i + 1));
        }
        all.truncate(count);
        return Ok(all);
    }
    let mut chosen = std::collections::HashSet::with_capacity(count);
    while chosen.len() < count {
        chosen.insert(random_index(len));
    }
    Ok(chosen.into_iter().collect())
}

pub fn hscan(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let scan = match parse_scan(args) {
        Ok(scan) => scan,
        Err(err) => return err,
    };
    read(ctx, args, scan_reply(0, Vec::new()), |hash| {
        let mut items = Vec::new();
        let cursor = scan_positions(hash.len(), &scan, |i| {
            let (k, v) = hash.get_index(i).expect("in range");
            if scan_matches(&scan, k) {
                items.push(Frame::Bulk(k.clone()));
                items.push(Frame::Bulk(v.clone()));
            }
        });
        scan_reply(cursor, items)
    })
}
