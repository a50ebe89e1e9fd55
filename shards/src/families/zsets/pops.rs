//! Sorted-set pops: ZPOPMIN, ZPOPMAX, ZMPOP, and the first-non-empty-key attempt the
//! blocking forms share (`pop_first`).

use super::*;

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

pub(super) fn pop(ctx: &mut Ctx<'_>, args: &[Bytes], max: bool) -> Frame {
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
