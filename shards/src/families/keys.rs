//! The generic key family: deletion, existence, expiry, type, renaming and copying, plus the
//! per-shard halves of KEYS, DBSIZE and FLUSH*. Multi-key forms here see only the keys that
//! live on this shard; the server splits and merges across shards.

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::args::{int_arg, is};
use crate::ctx::Ctx;
use crate::errors::*;
use crate::keyspace::NO_EXPIRY;

pub fn del(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now_ms;
    let removed = args[1..]
        .iter()
        .filter(|k| ctx.db().delete_live(k, now))
        .count();
    Frame::Integer(removed as i64)
}

/// EXISTS and TOUCH: a key named twice counts twice, as in Redis.
pub fn exists(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now_ms;
    let found = args[1..]
        .iter()
        .filter(|k| ctx.db().contains(k, now))
        .count();
    Frame::Integer(found as i64)
}

#[derive(Default)]
struct ExpireFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

fn expire_flags(args: &[Bytes]) -> Result<ExpireFlags, Frame> {
    let mut flags = ExpireFlags::default();
    for arg in args {
        match arg {
            a if is(a, "nx") => flags.nx = true,
            a if is(a, "xx") => flags.xx = true,
            a if is(a, "gt") => flags.gt = true,
            a if is(a, "lt") => flags.lt = true,
            other => {
                return Err(Frame::error(format!(
                    "ERR Unsupported option {}",
                    String::from_utf8_lossy(other)
                )))
            }
        }
    }
    if flags.nx && (flags.xx || flags.gt || flags.lt) {
        return Err(Frame::static_error(
            "ERR NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if flags.gt && flags.lt {
        return Err(Frame::static_error(
            "ERR GT and LT options at the same time are not compatible",
        ));
    }
    Ok(flags)
}

fn expire_generic(
    ctx: &mut Ctx<'_>,
    args: &[Bytes],
    unit_ms: i64,
    relative: bool,
    cmd: &str,
) -> Frame {
    let when = match int_arg(&args[2]) {
        Ok(when) => when,
        Err(err) => return err,
    };
    let flags = match expire_flags(&args[3..]) {
        Ok(flags) => flags,
        Err(err) => return err,
    };
    let base = if relative { ctx.now_ms as i64 } else { 0 };
    let Some(at) = when
        .checked_mul(unit_ms)
        .and_then(|ms| ms.checked_add(base))
    else {
        return invalid_expire(cmd);
    };
    let now = ctx.now_ms;
    let Some(entry) = ctx.db().get(&args[1], now) else {
        return Frame::Integer(0);
    };
    let current = entry.expire_at_ms;
    let has_ttl = current != NO_EXPIRY;
    let refused = (flags.nx && has_ttl)
        || (flags.xx && !has_ttl)
        || (flags.gt && (!has_ttl || at <= current as i64))
        || (flags.lt && has_ttl && at >= current as i64);
    if refused {
        return Frame::Integer(0);
    }
    if at <= now as i64 {
        ctx.db().remove(&args[1]);
    } else {
        ctx.db().set_expiry(&args[1], at as u64);
    }
    Frame::Integer(1)
}

pub fn expire(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    expire_generic(ctx, args, 1000, true, "expire")
}

pub fn pexpire(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    expire_generic(ctx, args, 1, true, "pexpire")
}

pub fn expireat(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    expire_generic(ctx, args, 1000, false, "expireat")
}

pub fn pexpireat(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    expire_generic(ctx, args, 1, false, "pexpireat")
}

/// -2 for a missing key, -1 for no TTL, else `f(expire_at_ms, now_ms)`.
fn ttl_query(ctx: &mut Ctx<'_>, key: &[u8], f: impl Fn(u64, u64) -> i64) -> Frame {
    let now = ctx.now_ms;
    Frame::Integer(match ctx.db().get(key, now) {
        None => -2,
        Some(entry) if entry.expire_at_ms == NO_EXPIRY => -1,
        Some(entry) => f(entry.expire_at_ms, now),
    })
}

pub fn ttl(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    ttl_query(ctx, &args[1], |at, now| ((at - now) as i64 + 500) / 1000)
}

pub fn pttl(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    ttl_query(ctx, &args[1], |at, now| (at - now) as i64)
}

pub fn expiretime(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    ttl_query(ctx, &args[1], |at, _| at as i64 / 1000)
}

pub fn pexpiretime(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    ttl_query(ctx, &args[1], |at, _| at as i64)
}

pub fn persist(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now_ms;
    match ctx.db().get(&args[1], now) {
        Some(entry) if entry.expire_at_ms != NO_EXPIRY => {
            ctx.db().set_expiry(&args[1], NO_EXPIRY);
            Frame::Integer(1)
        }
        _ => Frame::Integer(0),
    }
}

pub fn type_of(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now_ms;
    let name = ctx
        .db()
        .get(&args[1], now)
        .map_or("none", |e| e.type_name());
    Frame::simple(name)
}

pub fn keys(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now_ms;
    Frame::Array(
        ctx.db()
            .keys(&args[1], now)
            .into_iter()
            .map(Frame::Bulk)
            .collect(),
    )
}

fn rename_generic(ctx: &mut Ctx<'_>, args: &[Bytes], nx: bool) -> Frame {
    let now = ctx.now_ms;
    let (from, to) = (&args[1], &args[2]);
    if !ctx.db().contains(from, now) {
        return Frame::static_error(NO_SUCH_KEY);
    }
    if from == to {
        return if nx { Frame::Integer(0) } else { Frame::ok() };
    }
    if nx && ctx.db().contains(to, now) {
        return Frame::Integer(0);
    }
    let entry = ctx.db().remove(from).expect("checked above");
    ctx.db().insert(to, entry);
    ctx.signal_ready(to);
    if nx {
        Frame::Integer(1)
    } else {
        Frame::ok()
    }
}

pub fn rename(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    rename_generic(ctx, args, false)
}

pub fn renamenx(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    rename_generic(ctx, args, true)
}

/// COPY's options: the destination database and REPLACE.
pub struct CopyOptions {
    pub db: Option<usize>,
    pub replace: bool,
}

pub fn copy_options(args: &[Bytes]) -> Result<CopyOptions, Frame> {
    let mut opts = CopyOptions {
        db: None,
        replace: false,
    };
    let mut i = 3;
    while i < args.len() {
        if is(&args[i], "replace") {
            opts.replace = true;
        } else if is(&args[i], "db") && i + 1 < args.len() {
            opts.db = Some(crate::keyspace::db_index(&args[i + 1])?);
            i += 1;
        } else {
            return Err(Frame::static_error(SYNTAX));
        }
        i += 1;
    }
    Ok(opts)
}

pub fn copy(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let opts = match copy_options(args) {
        Ok(opts) => opts,
        Err(err) => return err,
    };
    let now = ctx.now_ms;
    let target_db = opts.db.unwrap_or(ctx.db);
    let (from, to) = (&args[1], &args[2]);
    if target_db == ctx.db && from == to {
        return Frame::static_error(SAME_OBJECT);
    }
    let Some(entry) = ctx.db().get(from, now).map(|e| e.to_entry()) else {
        return Frame::Integer(0);
    };
    let target = &mut ctx.dbs[target_db];
    if !opts.replace && target.contains(to, now) {
        return Frame::Integer(0);
    }
    let type_name = entry.value.type_name();
    target.insert(to, entry);
    ctx.blocked.signal_value(target_db, to, type_name);
    ctx.blocked.signal_gone(target_db, to);
    Frame::Integer(1)
}

/// MOVE key db: the key and its TTL go to another database of this shard (a key's shard
/// does not depend on its database), unless the target already holds the name.
pub fn move_key(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let target_db = match crate::keyspace::db_index(&args[2]) {
        Ok(db) => db,
        Err(err) => return err,
    };
    if target_db == ctx.db {
        return Frame::static_error(SAME_OBJECT);
    }
    let now = ctx.now_ms;
    let key = &args[1];
    if !ctx.db().contains(key, now) || ctx.dbs[target_db].contains(key, now) {
        return Frame::Integer(0);
    }
    let Some(entry) = ctx.db().remove_live(key, now) else {
        return Frame::Integer(0);
    };
    let type_name = entry.value.type_name();
    ctx.dbs[target_db].insert(key, entry);
    ctx.blocked.signal_value(target_db, key, type_name);
    ctx.blocked.signal_gone(ctx.db, key);
    Frame::Integer(1)
}

/// SWAPDB a b, this shard's half: the two databases trade contents (the server runs it on
/// every shard); clients blocked on keys of either are then looked at again.
pub fn swapdb(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    // Both must be integers (first, then second) before either is checked for range.
    let Some(a) = crate::args::parse_i64(&args[1]) else {
        return Frame::static_error("ERR invalid first DB index");
    };
    let Some(b) = crate::args::parse_i64(&args[2]) else {
        return Frame::static_error("ERR invalid second DB index");
    };
    let range = 0..crate::ctx::DATABASES as i64;
    if !range.contains(&a) || !range.contains(&b) {
        return Frame::static_error(DB_INDEX_RANGE);
    }
    let (a, b) = (a as usize, b as usize);
    if a != b {
        ctx.dbs.swap(a, b);
        ctx.blocked.signal_db(a);
        ctx.blocked.signal_db(b);
    }
    Frame::ok()
}

pub fn dbsize(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> Frame {
    Frame::Integer(ctx.db().len() as i64)
}

fn flush_mode_ok(args: &[Bytes]) -> bool {
    args.len() == 1 || (args.len() == 2 && (is(&args[1], "async") || is(&args[1], "sync")))
}

pub fn flushdb(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    if !flush_mode_ok(args) {
        return Frame::static_error(SYNTAX);
    }
    ctx.db().clear();
    Frame::ok()
}

pub fn flushall(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    if !flush_mode_ok(args) {
        return Frame::static_error(SYNTAX);
    }
    ctx.dbs.iter_mut().for_each(|db| db.clear());
    Frame::ok()
}
