//! The set family: membership, random members, moves, the SINTER/SUNION/SDIFF family (and
//! their STORE forms), SINTERCARD and SSCAN. A set is an insertion-ordered hash set
//! (`keyspace::Set`), so SPOP, SRANDMEMBER and SSCAN step by position. The multi-key commands
//! run on one shard; when their keys span shards the server's coordinator gathers them there
//! first (`server/src/routing/cross.rs`).

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::args::{int_arg, is};
use crate::ctx::Ctx;
use crate::errors::*;
use crate::families::hashes::random_picks;
use crate::keyspace::typed::{
    self, parse_scan, random_index, scan_matches, scan_positions, scan_reply,
};
use crate::keyspace::{Entry, Set};

fn owned(arg: &[u8]) -> Bytes {
    Bytes::copy_from_slice(arg)
}

fn members(set: &Set) -> Frame {
    Frame::Set(set.iter().map(|m| Frame::Bulk(m.clone())).collect())
}

fn read(ctx: &mut Ctx<'_>, key: &[u8], missing: Frame, f: impl FnOnce(&mut Set) -> Frame) -> Frame {
    let now = ctx.now_ms;
    match typed::get::<Set>(ctx.db(), key, now) {
        Ok(Some(set)) => f(set),
        Ok(None) => missing,
        Err(err) => err,
    }
}

pub fn sadd(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now_ms;
    match typed::get_or_create::<Set>(ctx.db(), &args[1], now) {
        Ok(set) => Frame::Integer(args[2..].iter().filter(|m| set.insert(owned(m))).count() as i64),
        Err(err) => err,
    }
}

pub fn srem(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now_ms;
    let reply = read(ctx, &args[1], Frame::Integer(0), |set| {
        Frame::Integer(args[2..].iter().filter(|m| set.swap_remove(&m[..])).count() as i64)
    });
    typed::drop_if_empty::<Set>(ctx.db(), &args[1], now);
    reply
}

pub fn smembers(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    read(ctx, &args[1], Frame::Set(Vec::new()), |set| members(set))
}

pub fn sismember(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    read(ctx, &args[1], Frame::Integer(0), |set| {
        Frame::Integer(i64::from(set.contains(&args[2][..])))
    })
}

pub fn smismember(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let asked = &args[2..];
    read(
        ctx,
        &args[1],
        Frame::Array(asked.iter().map(|_| Frame::Integer(0)).collect()),
        |set| {
            Frame::Array(
                asked
                    .iter()
                    .map(|m| Frame::Integer(i64::from(set.contains(&m[..]))))
                    .collect(),
            )
        },
    )
}

pub fn scard(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    read(ctx, &args[1], Frame::Integer(0), |set| {
        Frame::Integer(set.len() as i64)
    })
}

pub fn spop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    if args.len() > 3 {
        return Frame::static_error(SYNTAX);
    }
    let count = match args.get(2).map(|a| int_arg(a)) {
        None => None,
        Some(Ok(n)) if n >= 0 => Some(n as usize),
        Some(_) => return Frame::static_error(MUST_BE_POSITIVE),
    };
    let now = ctx.now_ms;
    let mut popped: Vec<Bytes> = Vec::new();
    let reply = match count {
        None => read(ctx, &args[1], Frame::Null, |set| {
            let i = random_index(set.len());
            let member = set.swap_remove_index(i).expect("non-empty");
            popped.push(member.clone());
            Frame::Bulk(member)
        }),
        Some(count) => read(ctx, &args[1], Frame::Set(Vec::new()), |set| {
            let mut out = Vec::with_capacity(count.min(set.len()));
            while out.len() < count && !set.is_empty() {
                let i = random_index(set.len());
                let member = set.swap_remove_index(i).expect("in range");
                popped.push(member.clone());
                out.push(Frame::Bulk(member));
            }
            Frame::Set(out)
        }),
    };
    typed::drop_if_empty::<Set>(ctx.db(), &args[1], now);
    // The journal logs what was taken, not the draw: SREM of the members in the order they
    // were removed (SREM swaps the same way, so the positions left match).
    let mut rewrite = Vec::with_capacity(popped.len() + 2);
    if !popped.is_empty() {
        rewrite.push(Bytes::from_static(b"srem"));
        rewrite.push(args[1].clone());
        rewrite.extend(popped);
    }
    ctx.rewrite = Some(rewrite);
    reply
}

pub fn srandmember(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let count = match crate::families::hashes::random_count_args(args, None) {
        Ok((count, _)) => count,
        Err(err) => return err,
    };
    match count {
        None => read(ctx, &args[1], Frame::Null, |set| {
            Frame::Bulk(set[random_index(set.len())].clone())
        }),
        Some(count) => read(
            ctx,
            &args[1],
            Frame::Array(Vec::new()),
            |set| match random_picks(set.len(), count, 1) {
                Ok(picks) => Frame::Array(
                    picks
                        .into_iter()
                        .map(|i| Frame::Bulk(set[i].clone()))
                        .collect(),
                ),
                Err(err) => err,
            },
        ),
    }
}

pub fn smove(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let (src, dst, member) = (&args[1], &args[2], &args[3]);
    let now = ctx.now_ms;
    let present = match typed::get::<Set>(ctx.db(), src, now) {
        Ok(Some(set)) => set.contains(&member[..]),
        Ok(None) => return Frame::Integer(0),
        Err(err) => return err,
    };
    if let Err(err) = typed::check::<Set>(ctx.db(), dst, now) {
        return err;
    }
    if !present {
        return Frame::Integer(0);
    }
    if src == dst {
        return Frame::Integer(1);
    }
    if let Ok(Some(set)) = typed::get::<Set>(ctx.db(), src, now) {
        set.swap_remove(&member[..]);
    }
    typed::drop_if_empty::<Set>(ctx.db(), src, now);
    match typed::get_or_create::<Set>(ctx.db(), dst, now) {
        Ok(set) => {
            set.insert(owned(member));
            Frame::Integer(1)
        }
        Err(err) => err,
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Inter,
    Union,
    Diff,
}

/// The sets at `keys` (a missing key is an empty set); WRONGTYPE if any holds another type.
fn load(ctx: &mut Ctx<'_>, keys: &[Bytes]) -> Result<Vec<Option<Set>>, Frame> {
    let now = ctx.now_ms;
    keys.iter()
        .map(|k| typed::get::<Set>(ctx.db(), k, now).map(|s| s.cloned()))
        .collect()
}

fn combine(sets: Vec<Option<Set>>, op: Op) -> Set {
    let mut sets = sets.into_iter();
    let first = sets.next().flatten().unwrap_or_default();
    let rest: Vec<Option<Set>> = sets.collect();
    match op {
        Op::Union => {
            let mut out = first;
            for set in rest.into_iter().flatten() {
                out.extend(set);
            }
            out
        }
        Op::Inter => {
            if rest.iter().any(Option::is_none) {
                return Set::default();
            }
            let rest: Vec<Set> = rest.into_iter().flatten().collect();
            first
                .into_iter()
                .filter(|m| rest.iter().all(|s| s.contains(m)))
                .collect()
        }
        Op::Diff => {
            let rest: Vec<Set> = rest.into_iter().flatten().collect();
            first
                .into_iter()
                .filter(|m| !rest.iter().any(|s| s.contains(m)))
                .collect()
        }
    }
}

fn compute(ctx: &mut Ctx<'_>, args: &[Bytes], op: Op) -> Frame {
    match load(ctx, &args[1..]) {
        Ok(sets) => members(&combine(sets, op)),
        Err(err) => err,
    }
}

fn store(ctx: &mut Ctx<'_>, args: &[Bytes], op: Op) -> Frame {
    let result = match load(ctx, &args[2..]) {
        Ok(sets) => combine(sets, op),
        Err(err) => return err,
    };
    let len = result.len() as i64;
    if result.is_empty() {
        ctx.db().remove(&args[1]);
    } else {
        ctx.db()
            .insert(&args[1], Entry::new(typed::Collection::into_value(result)));
    }
    Frame::Integer(len)
}

pub fn sinter(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    compute(ctx, args, Op::Inter)
}

pub fn sunion(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    compute(ctx, args, Op::Union)
}

pub fn sdiff(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    compute(ctx, args, Op::Diff)
}

pub fn sinterstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    store(ctx, args, Op::Inter)
}

pub fn sunionstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    store(ctx, args, Op::Union)
}

pub fn sdiffstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    store(ctx, args, Op::Diff)
}

/// Key positions of SINTERCARD (`numkeys` at 1).
pub fn sintercard_keys(args: &[Bytes]) -> Vec<usize> {
    crate::families::lists::mpop_keys(args, 1)
}

pub fn sintercard(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let numkeys = match int_arg(&args[1]) {
        Ok(n) if n > 0 => n as usize,
        _ => return Frame::static_error("ERR numkeys should be greater than 0"),
    };
    if numkeys > args.len() - 2 {
        return Frame::static_error("ERR Number of keys can't be greater than number of args");
    }
    let mut limit = 0usize;
    let mut i = 2 + numkeys;
    while i < args.len() {
        if is(&args[i], "limit") && i + 1 < args.len() {
            limit = match int_arg(&args[i + 1]) {
                Ok(n) if n >= 0 => n as usize,
                Ok(_) => return Frame::static_error("ERR LIMIT can't be negative"),
                Err(err) => return err,
            };
            i += 2;
        } else {
            return Frame::static_error(SYNTAX);
        }
    }
    match load(ctx, &args[2..2 + numkeys]) {
        Ok(sets) => {
            let count = combine(sets, Op::Inter).len();
            let count = if limit > 0 { count.min(limit) } else { count };
            Frame::Integer(count as i64)
        }
        Err(err) => err,
    }
}

pub fn sscan(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let scan = match parse_scan(args) {
        Ok(scan) => scan,
        Err(err) => return err,
    };
    read(ctx, &args[1], scan_reply(0, Vec::new()), |set| {
        let mut items = Vec::new();
        let cursor = scan_positions(set.len(), &scan, |i| {
            if scan_matches(&scan, &set[i]) {
                items.push(Frame::Bulk(set[i].clone()));
            }
        });
        scan_reply(cursor, items)
    })
}
