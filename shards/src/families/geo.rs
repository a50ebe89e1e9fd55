//! The GEO family: GEOADD, GEOPOS, GEODIST, GEOHASH, GEOSEARCH, GEOSEARCHSTORE and the
//! older GEORADIUS, GEORADIUSBYMEMBER and their `_RO` forms. Positions are members of a
//! sorted set scored by their 52-bit geohash (`geohash`), as in Redis, so a GEO key is a
//! sorted set to every other command. Replies, option rules and error texts are Redis
//! 7.0's; a search looks in the same cells in the same order, so even unsorted replies
//! come in Redis's order.

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::args::{int_arg, is, parse_f64};
use crate::ctx::Ctx;
use crate::errors::*;
use crate::keyspace::typed;
use crate::values::geohash::{self, Shape};
use crate::values::sorted_set::ZSet;

const UNIT: &str = "ERR unsupported unit provided. please use M, KM, FT, MI";
const NOT_MEMBER: &str = "ERR could not decode requested zset member";

/// Metres per `unit`.
fn unit(arg: &[u8]) -> Result<f64, Frame> {
    [("m", 1.0), ("km", 1000.0), ("ft", 0.3048), ("mi", 1609.34)]
        .into_iter()
        .find(|(name, _)| is(arg, name))
        .map(|(_, metres)| metres)
        .ok_or_else(|| Frame::static_error(UNIT))
}

fn float(arg: &[u8], error: &'static str) -> Result<f64, Frame> {
    parse_f64(arg).ok_or_else(|| Frame::static_error(error))
}

/// A longitude and a latitude argument, in range.
fn long_lat(args: &[Bytes]) -> Result<(f64, f64), Frame> {
    let long = float(&args[0], NOT_FLOAT)?;
    let lat = float(&args[1], NOT_FLOAT)?;
    if !(geohash::LONG_MIN..=geohash::LONG_MAX).contains(&long)
        || !(geohash::LAT_MIN..=geohash::LAT_MAX).contains(&lat)
    {
        return Err(Frame::error(format!(
            "ERR invalid longitude,latitude pair {long:.6},{lat:.6}"
        )));
    }
    Ok((long, lat))
}

/// The sorted set at `key` (`None` when missing), or WRONGTYPE.
fn zset<'a>(ctx: &'a mut Ctx<'_>, key: &[u8]) -> Result<Option<&'a mut ZSet>, Frame> {
    let now = ctx.now_ms;
    typed::get::<ZSet>(ctx.db(), key, now)
}

pub fn geoadd(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let mut first = 2;
    let (mut nx, mut xx) = (false, false);
    while first < args.len() {
        match &args[first] {
            a if is(a, "nx") => nx = true,
            a if is(a, "xx") => xx = true,
            a if is(a, "ch") => {}
            _ => break,
        }
        first += 1;
    }
    if !(args.len() - first).is_multiple_of(3) || (nx && xx) {
        return Frame::static_error(SYNTAX);
    }
    let mut zadd: Vec<Bytes> = vec![Bytes::from_static(b"zadd")];
    zadd.extend_from_slice(&args[1..first]);
    for triple in args[first..].chunks(3) {
        let (long, lat) = match long_lat(triple) {
            Ok(position) => position,
            Err(err) => return err,
        };
        let score = geohash::score(long, lat) as u64;
        zadd.push(Bytes::from(score.to_string()));
        zadd.push(triple[2].clone());
    }
    crate::families::zsets::zadd(ctx, &zadd)
}

fn coordinates(score: f64) -> Frame {
    let (long, lat) = geohash::position(score);
    Frame::Array(vec![
        Frame::DoubleText(Bytes::from(geohash::human(long))),
        Frame::DoubleText(Bytes::from(geohash::human(lat))),
    ])
}

/// One reply per member named after the key: `found` of its score, `missing` without one.
fn per_member(ctx: &mut Ctx<'_>, args: &[Bytes], found: fn(f64) -> Frame, missing: Frame) -> Frame {
    let z = match zset(ctx, &args[1]) {
        Ok(z) => z,
        Err(err) => return err,
    };
    Frame::Array(
        args[2..]
            .iter()
            .map(|m| {
                z.as_ref()
                    .and_then(|z| z.score(m))
                    .map_or(missing.clone(), found)
            })
            .collect(),
    )
}

pub fn geopos(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    per_member(ctx, args, coordinates, Frame::NullArray)
}

pub fn geohash_command(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let hash = |score| Frame::Bulk(Bytes::from(geohash::standard_geohash(score)));
    per_member(ctx, args, hash, Frame::Null)
}

pub fn geodist(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let metres = match args.len() {
        4 => 1.0,
        5 => match unit(&args[4]) {
            Ok(m) => m,
            Err(err) => return err,
        },
        _ => return Frame::static_error(SYNTAX),
    };
    let z = match zset(ctx, &args[1]) {
        Ok(Some(z)) => z,
        Ok(None) => return Frame::Null,
        Err(err) => return err,
    };
    let (Some(a), Some(b)) = (z.score(&args[2]), z.score(&args[3])) else {
        return Frame::Null;
    };
    let ((l1, a1), (l2, a2)) = (geohash::position(a), geohash::position(b));
    Frame::Bulk(Bytes::from(geohash::fixed4(
        geohash::distance(l1, a1, l2, a2) / metres,
    )))
}

#[derive(Clone, Copy, PartialEq)]
enum Variant {
    Radius,
    RadiusByMember,
    RadiusReadOnly,
    RadiusByMemberReadOnly,
    Search,
    SearchStore,
}

impl Variant {
    fn search(self) -> bool {
        matches!(self, Variant::Search | Variant::SearchStore)
    }

    fn no_store(self) -> bool {
        matches!(
            self,
            Variant::RadiusReadOnly | Variant::RadiusByMemberReadOnly
        )
    }

    fn by_member(self) -> bool {
        matches!(
            self,
            Variant::RadiusByMember | Variant::RadiusByMemberReadOnly
        )
    }
}

#[derive(Default)]
struct Query {
    center: Option<(f64, f64)>,
    radius: Option<f64>,
    box_size: Option<(f64, f64)>,
    metres: f64,
    with_dist: bool,
    with_hash: bool,
    with_coord: bool,
    any: bool,
    /// 1: ascending, 2: descending.
    sort: u8,
    count: usize,
    store: Option<Bytes>,
    store_dist: bool,
    from_member: bool,
    from_lonlat: bool,
}

/// A radius and unit (`need numeric radius` when the number is not one).
fn distance_arg(args: &[Bytes]) -> Result<(f64, f64), Frame> {
    let radius = float(&args[0], "ERR need numeric radius")?;
    if radius < 0.0 {
        return Err(Frame::static_error("ERR radius cannot be negative"));
    }
    Ok((radius, unit(&args[1])?))
}

fn box_arg(args: &[Bytes]) -> Result<((f64, f64), f64), Frame> {
    let width = float(&args[0], "ERR need numeric width")?;
    let height = float(&args[1], "ERR need numeric height")?;
    if width < 0.0 || height < 0.0 {
        return Err(Frame::static_error(
            "ERR height or width cannot be negative",
        ));
    }
    Ok(((width, height), unit(&args[2])?))
}

/// Parses a search's arguments after the fixed ones, as Redis's `georadiusGeneric` does
/// (in order: the first error wins). `z` resolves FROMMEMBER.
fn parse(
    variant: Variant,
    args: &[Bytes],
    base: usize,
    z: Option<&ZSet>,
    q: &mut Query,
) -> Result<(), Frame> {
    let mut i = base;
    let left = |i: usize| args.len() - i - 1;
    while i < args.len() {
        let a = &args[i];
        if is(a, "withdist") {
            q.with_dist = true;
        } else if is(a, "withhash") {
            q.with_hash = true;
        } else if is(a, "withcoord") {
            q.with_coord = true;
        } else if is(a, "any") {
            q.any = true;
        } else if is(a, "asc") {
            q.sort = 1;
        } else if is(a, "desc") {
            q.sort = 2;
        } else if is(a, "count") && left(i) >= 1 {
            let n = int_arg(&args[i + 1])?;
            if n <= 0 {
                return Err(Frame::static_error("ERR COUNT must be > 0"));
            }
            q.count = n as usize;
            i += 1;
        } else if (is(a, "store") || is(a, "storedist"))
            && left(i) >= 1
            && !variant.no_store()
            && !variant.search()
        {
            q.store = Some(args[i + 1].clone());
            q.store_dist = is(a, "storedist");
            i += 1;
        } else if is(a, "storedist") && variant == Variant::SearchStore {
            q.store_dist = true;
        } else if is(a, "frommember") && left(i) >= 1 && variant.search() && !q.from_lonlat {
            q.from_member = true;
            if let Some(z) = z {
                let score = z
                    .score(&args[i + 1])
                    .ok_or_else(|| Frame::static_error(NOT_MEMBER))?;
                q.center = Some(geohash::position(score));
            }
            i += 1;
        } else if is(a, "fromlonlat") && left(i) >= 2 && variant.search() && !q.from_member {
            q.center = Some(long_lat(&args[i + 1..i + 3])?);
            q.from_lonlat = true;
            i += 2;
        } else if is(a, "byradius") && left(i) >= 2 && variant.search() && q.box_size.is_none() {
            let (radius, metres) = distance_arg(&args[i + 1..i + 3])?;
            (q.radius, q.metres) = (Some(radius), metres);
            i += 2;
        } else if is(a, "bybox") && left(i) >= 3 && variant.search() && q.radius.is_none() {
            let (size, metres) = box_arg(&args[i + 1..i + 4])?;
            (q.box_size, q.metres) = (Some(size), metres);
            i += 3;
        } else {
            return Err(Frame::static_error(SYNTAX));
        }
        i += 1;
    }
    Ok(())
}

fn check(variant: Variant, name: &str, q: &Query) -> Result<(), Frame> {
    if q.store.is_some() && (q.with_dist || q.with_hash || q.with_coord) {
        let what = if variant == Variant::SearchStore {
            "GEOSEARCHSTORE"
        } else {
            "STORE option in GEORADIUS"
        };
        return Err(Frame::error(format!(
            "ERR {what} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"
        )));
    }
    if variant.search() && !q.from_lonlat && !q.from_member {
        return Err(Frame::error(format!(
            "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}"
        )));
    }
    if variant.search() && q.radius.is_none() && q.box_size.is_none() {
        return Err(Frame::error(format!(
            "ERR exactly one of BYRADIUS and BYBOX can be specified for {name}"
        )));
    }
    if q.any && q.count == 0 {
        return Err(Frame::static_error(
            "ERR the ANY argument requires COUNT argument",
        ));
    }
    Ok(())
}

struct Found {
    member: Bytes,
    score: f64,
    dist: f64,
}

/// The members inside the shape, cell by cell in Redis's order (stopping at `limit`).
fn find(z: &ZSet, shape: &Shape, limit: usize) -> Vec<Found> {
    let mut found = Vec::new();
    for cell in shape.cells() {
        if limit > 0 && found.len() >= limit {
            break;
        }
        let (min, max) = cell.scores();
        let from = z.partition_point(|s, _| s < min);
        let to = z.partition_point(|s, _| s < max);
        for (member, score) in z.range(from, to, false) {
            let (long, lat) = geohash::position(score);
            if let Some(dist) = shape.contains(long, lat) {
                found.push(Found {
                    member,
                    score,
                    dist,
                });
            }
            if limit > 0 && found.len() >= limit {
                break;
            }
        }
    }
    found
}

/// The arguments before the options: GEORADIUS's centre and radius, GEORADIUSBYMEMBER's
/// member (resolved when the key exists) and radius, GEOSEARCHSTORE's destination. Returns
/// where the options start.
fn fixed_arguments(
    variant: Variant,
    args: &[Bytes],
    z: Option<&ZSet>,
    q: &mut Query,
) -> Result<usize, Frame> {
    Ok(match variant {
        Variant::Radius | Variant::RadiusReadOnly => {
            q.center = Some(long_lat(&args[2..4])?);
            let (radius, metres) = distance_arg(&args[4..6])?;
            (q.radius, q.metres) = (Some(radius), metres);
            6
        }
        _ if variant.by_member() => {
            if let Some(z) = z {
                let score = z
                    .score(&args[2])
                    .ok_or_else(|| Frame::static_error(NOT_MEMBER))?;
                q.center = Some(geohash::position(score));
                let (radius, metres) = distance_arg(&args[3..5])?;
                (q.radius, q.metres) = (Some(radius), metres);
            }
            5
        }
        Variant::SearchStore => {
            q.store = Some(args[1].clone());
            3
        }
        _ => 2,
    })
}

/// What the search finds, sorted and cut as asked, distances in the query's unit.
fn results(z: &ZSet, q: &mut Query) -> Vec<Found> {
    let (long, lat) = q.center.expect("checked");
    let shape = Shape {
        long,
        lat,
        radius: q.radius.map(|r| r * q.metres),
        box_size: q
            .box_size
            .map_or((0.0, 0.0), |(w, h)| (w * q.metres, h * q.metres)),
    };
    // COUNT without an order means the closest ones (ANY: the first found).
    if q.count > 0 && q.sort == 0 && !q.any {
        q.sort = 1;
    }
    let mut found = find(z, &shape, if q.any { q.count } else { 0 });
    match q.sort {
        1 => found.sort_by(|a, b| a.dist.total_cmp(&b.dist)),
        2 => found.sort_by(|a, b| b.dist.total_cmp(&a.dist)),
        _ => {}
    }
    if q.count > 0 {
        found.truncate(q.count);
    }
    for f in &mut found {
        f.dist /= q.metres;
    }
    found
}

fn search(ctx: &mut Ctx<'_>, args: &[Bytes], variant: Variant) -> Frame {
    let source = if variant == Variant::SearchStore {
        2
    } else {
        1
    };
    let name = String::from_utf8_lossy(&args[0]).into_owned();
    let mut q = Query::default();
    let found = {
        let z = match zset(ctx, &args[source]) {
            Ok(z) => z.map(|z| &*z),
            Err(err) => return err,
        };
        let parsed = fixed_arguments(variant, args, z, &mut q)
            .and_then(|base| parse(variant, args, base, z, &mut q))
            .and_then(|()| check(variant, &name, &q));
        if let Err(err) = parsed {
            return err;
        }
        z.map(|z| results(z, &mut q))
    };
    match (q.store.take(), found) {
        (Some(dest), Some(found)) => {
            let items = found
                .into_iter()
                .map(|f| (f.member, if q.store_dist { f.dist } else { f.score }));
            crate::families::zsets::store_zset(ctx, &dest, items)
        }
        // No source: the destination is deleted, as an empty result would leave it.
        (Some(dest), None) => {
            ctx.db().remove(&dest);
            Frame::Integer(0)
        }
        (None, found) => Frame::Array(
            found
                .unwrap_or_default()
                .into_iter()
                .map(|f| reply_item(&q, f))
                .collect(),
        ),
    }
}

fn reply_item(q: &Query, f: Found) -> Frame {
    if !(q.with_dist || q.with_hash || q.with_coord) {
        return Frame::Bulk(f.member);
    }
    let mut item = vec![Frame::Bulk(f.member)];
    if q.with_dist {
        item.push(Frame::Bulk(Bytes::from(geohash::fixed4(f.dist))));
    }
    if q.with_hash {
        item.push(Frame::Integer(f.score as i64));
    }
    if q.with_coord {
        item.push(coordinates(f.score));
    }
    Frame::Array(item)
}

/// GEORADIUS and GEORADIUSBYMEMBER's keys: the source, and the STORE or STOREDIST key
/// (looked for from the fifth argument on, as Redis does).
pub fn radius_keys(args: &[Bytes]) -> Vec<usize> {
    let mut keys = vec![1];
    let mut i = 5;
    while i < args.len() {
        if (is(&args[i], "store") || is(&args[i], "storedist")) && i + 1 < args.len() {
            keys.push(i + 1);
            i += 1;
        }
        i += 1;
    }
    keys
}

pub fn georadius(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    search(ctx, args, Variant::Radius)
}

pub fn georadius_ro(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    search(ctx, args, Variant::RadiusReadOnly)
}

pub fn georadiusbymember(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    search(ctx, args, Variant::RadiusByMember)
}

pub fn georadiusbymember_ro(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    search(ctx, args, Variant::RadiusByMemberReadOnly)
}

pub fn geosearch(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    search(ctx, args, Variant::Search)
}

pub fn geosearchstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    search(ctx, args, Variant::SearchStore)
}
