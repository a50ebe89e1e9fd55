//! Union, intersection and difference of sorted sets (with WEIGHTS and AGGREGATE), their
//! STORE forms, ZINTERCARD, and the key positions of the numkeys forms.

use super::*;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum SetOp {
    Union,
    Inter,
    Diff,
}

#[derive(Clone, Copy)]
pub(super) enum Aggregate {
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

pub(super) struct Combine {
    keys: Vec<Bytes>,
    weights: Vec<f64>,
    aggregate: Aggregate,
    with_scores: bool,
}

/// Parses `numkeys key… [WEIGHTS w…] [AGGREGATE SUM|MIN|MAX] [WITHSCORES]` from `args[at]`.
pub(super) fn parse_combine(
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
pub(super) fn load_scored(
    ctx: &mut Ctx<'_>,
    key: &[u8],
) -> Result<Option<Vec<(Bytes, f64)>>, Frame> {
    let now = ctx.now_ms;
    if let Ok(found) = typed::get::<ZSet>(ctx.db(), key, now) {
        return Ok(found.map(|z| z.members().map(|(m, s)| (m.clone(), s)).collect()));
    }
    match typed::get::<Set>(ctx.db(), key, now) {
        Ok(found) => Ok(found.map(|s| s.iter().map(|m| (m.clone(), 1.0)).collect())),
        Err(err) => Err(err),
    }
}

// Long: union, intersection and difference share one pass over the inputs (weights, aggregate, missing keys); split, the three would repeat it.
pub(super) fn combine(
    ctx: &mut Ctx<'_>,
    spec: &Combine,
    op: SetOp,
) -> Result<Vec<(Bytes, f64)>, Frame> {
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

pub(super) fn combine_reply(ctx: &mut Ctx<'_>, args: &[Bytes], op: SetOp, name: &str) -> Frame {
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

pub(super) fn combine_store(ctx: &mut Ctx<'_>, args: &[Bytes], op: SetOp, name: &str) -> Frame {
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
