//! The string family: GET, SET and its options, counters, ranges and the multi-key forms.
//! Each handler runs on the shard owning its key(s); the server has already routed it and
//! checked its arity. Values are copied out of the read buffer before they are stored.

use bytes::{Bytes, BytesMut};
use wetask_protocol::Frame;

use crate::args::{int_arg, is, parse_i64};
use crate::ctx::Ctx;
use crate::errors::*;
use crate::keyspace::node::ValueRef;
use crate::keyspace::{Value, NO_EXPIRY};
use crate::values::long_double::{self, LongDouble};

/// Largest string a command may build (Redis's `proto-max-bulk-len` default).
pub const STRING_BYTES_MAX: usize = 512 * 1024 * 1024;

/// The string at `key`: `Ok(None)` when missing, WRONGTYPE when it holds another type.
pub(crate) fn read_string(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<Bytes>, Frame> {
    let now = ctx.now_ms;
    match ctx.db().get(key, now) {
        None => Ok(None),
        Some(entry) => match entry.str_shared() {
            Some(value) => Ok(Some(value)),
            None => Err(Frame::static_error(WRONGTYPE)),
        },
    }
}

fn reply_of(result: Result<Option<Bytes>, Frame>) -> Frame {
    match result {
        Ok(Some(value)) => Frame::Bulk(value),
        Ok(None) => Frame::Null,
        Err(err) => err,
    }
}

pub fn get(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now_ms;
    let Some(entry) = ctx.dbs[ctx.db].get(&args[1], now) else {
        return Frame::Null;
    };
    match (ctx.out.as_deref_mut(), entry.value()) {
        // A long string is stored as shared `Bytes`: the reply references it (a vectored
        // send, no copy); a short one is copied from the node.
        (Some(out), ValueRef::Typed(Value::Str(shared))) => {
            wetask_protocol::encode_bulk_shared(out, shared);
            Frame::Written
        }
        (Some(out), ValueRef::Inline(value)) => {
            wetask_protocol::encode_bulk(out, value);
            Frame::Written
        }
        (Some(_), ValueRef::Typed(_)) => Frame::static_error(WRONGTYPE),
        (None, _) => entry
            .str_shared()
            .map_or_else(|| Frame::static_error(WRONGTYPE), Frame::Bulk),
    }
}

/// How a command sets a key's expiry.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ttl {
    Clear,
    Keep,
    At(u64),
}

/// Converts an EX/PX/EXAT/PXAT argument to absolute unix ms, with Redis's checks.
fn expire_at(
    arg: &[u8],
    unit_ms: i64,
    relative: bool,
    now_ms: u64,
    cmd: &str,
) -> Result<u64, Frame> {
    let value = int_arg(arg)?;
    if value <= 0 || value > i64::MAX / unit_ms {
        return Err(invalid_expire(cmd));
    }
    let ms = value * unit_ms;
    let at = if relative {
        ms.checked_add(now_ms as i64)
    } else {
        Some(ms)
    };
    match at {
        Some(at) if at > 0 => Ok(at as u64),
        _ => Err(invalid_expire(cmd)),
    }
}

/// Parses an expiry option at `args[i]` (EX, PX, EXAT, PXAT) if it is one.
fn expiry_option(args: &[Bytes], i: usize, now_ms: u64, cmd: &str) -> Option<Result<u64, Frame>> {
    let (unit, relative) = match &args[i] {
        a if is(a, "ex") => (1000, true),
        a if is(a, "px") => (1, true),
        a if is(a, "exat") => (1000, false),
        a if is(a, "pxat") => (1, false),
        _ => return None,
    };
    match args.get(i + 1) {
        Some(value) => Some(expire_at(value, unit, relative, now_ms, cmd)),
        None => Some(Err(Frame::static_error(SYNTAX))),
    }
}

struct SetOptions {
    nx: bool,
    xx: bool,
    get: bool,
    ttl: Ttl,
}

fn parse_set_options(args: &[Bytes], now_ms: u64) -> Result<SetOptions, Frame> {
    let mut opts = SetOptions {
        nx: false,
        xx: false,
        get: false,
        ttl: Ttl::Clear,
    };
    let mut expiry_seen = false;
    let mut pending_expiry: Option<Result<u64, Frame>> = None;
    let mut i = 3;
    while i < args.len() {
        let arg = &args[i];
        if is(arg, "nx") && !opts.xx {
            opts.nx = true;
        } else if is(arg, "xx") && !opts.nx {
            opts.xx = true;
        } else if is(arg, "get") {
            opts.get = true;
        } else if is(arg, "keepttl") && !expiry_seen {
            expiry_seen = true;
            opts.ttl = Ttl::Keep;
        } else if let Some(parsed) = expiry_option(args, i, now_ms, "set") {
            if expiry_seen || i + 1 >= args.len() {
                return Err(Frame::static_error(SYNTAX));
            }
            expiry_seen = true;
            pending_expiry = Some(parsed);
            i += 1;
        } else {
            return Err(Frame::static_error(SYNTAX));
        }
        i += 1;
    }
    // Syntax is checked over all options before the expiry value, as Redis does.
    if let Some(parsed) = pending_expiry {
        opts.ttl = Ttl::At(parsed?);
    }
    Ok(opts)
}

pub fn set(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let opts = match parse_set_options(args, ctx.now_ms) {
        Ok(opts) => opts,
        Err(err) => return err,
    };
    let key = &args[1];
    // The old value is read only when GET must return it (a non-string is then an error).
    let old = match opts.get {
        true => match read_string(ctx, key) {
            Ok(old) => old,
            Err(err) => return err,
        },
        false => None,
    };
    let now = ctx.now_ms;
    let blocked = (opts.nx || opts.xx) && {
        let exists = old.is_some() || ctx.db().contains(key, now);
        (opts.nx && exists) || (opts.xx && !exists)
    };
    if !blocked {
        let expire_at_ms = match opts.ttl {
            Ttl::Clear => NO_EXPIRY,
            Ttl::At(at) => at,
            Ttl::Keep => ctx.db().get(key, now).map_or(NO_EXPIRY, |e| e.expire_at_ms),
        };
        ctx.db().set_str(key, &args[2], expire_at_ms);
    }
    match (opts.get, blocked) {
        (true, _) => reply_of(Ok(old)),
        (false, true) => Frame::Null,
        (false, false) => Frame::ok(),
    }
}

pub fn setnx(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now_ms;
    if ctx.db().contains(&args[1], now) {
        return Frame::Integer(0);
    }
    ctx.db().set_str(&args[1], &args[2], NO_EXPIRY);
    Frame::Integer(1)
}

fn set_with_ttl(ctx: &mut Ctx<'_>, args: &[Bytes], unit_ms: i64, cmd: &str) -> Frame {
    match expire_at(&args[2], unit_ms, true, ctx.now_ms, cmd) {
        Ok(at) => {
            ctx.db().set_str(&args[1], &args[3], at);
            Frame::ok()
        }
        Err(err) => err,
    }
}

pub fn setex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    set_with_ttl(ctx, args, 1000, "setex")
}

pub fn psetex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    set_with_ttl(ctx, args, 1, "psetex")
}

/// MGET over keys that all live on this shard. A non-string key reads as nil.
pub fn mget(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let values = args[1..]
        .iter()
        .map(|key| match read_string(ctx, key) {
            Ok(Some(value)) => Frame::Bulk(value),
            _ => Frame::Null,
        })
        .collect();
    Frame::Array(values)
}

pub fn mset(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    if args.len().is_multiple_of(2) {
        return wrong_arity("mset");
    }
    for pair in args[1..].chunks(2) {
        ctx.db().set_str(&pair[0], &pair[1], NO_EXPIRY);
    }
    Frame::ok()
}

pub fn msetnx(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    if args.len().is_multiple_of(2) {
        return wrong_arity("msetnx");
    }
    let now = ctx.now_ms;
    if args[1..]
        .chunks(2)
        .any(|pair| ctx.db().contains(&pair[0], now))
    {
        return Frame::Integer(0);
    }
    for pair in args[1..].chunks(2) {
        ctx.db().set_str(&pair[0], &pair[1], NO_EXPIRY);
    }
    Frame::Integer(1)
}

pub fn getset(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let old = match read_string(ctx, &args[1]) {
        Ok(old) => old,
        Err(err) => return err,
    };
    ctx.db().set_str(&args[1], &args[2], NO_EXPIRY);
    reply_of(Ok(old))
}

pub fn getdel(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let old = read_string(ctx, &args[1]);
    if let Ok(Some(_)) = old {
        ctx.db().remove(&args[1]);
    }
    reply_of(old)
}

pub fn getex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now_ms;
    let mut ttl = Ttl::Keep;
    let mut i = 2;
    while i < args.len() {
        if is(&args[i], "persist") && ttl == Ttl::Keep {
            ttl = Ttl::Clear;
        } else if let Some(parsed) = expiry_option(args, i, now, "getex") {
            if ttl != Ttl::Keep || i + 1 >= args.len() {
                return Frame::static_error(SYNTAX);
            }
            match parsed {
                Ok(at) => ttl = Ttl::At(at),
                Err(err) => return err,
            }
            i += 1;
        } else {
            return Frame::static_error(SYNTAX);
        }
        i += 1;
    }
    let value = read_string(ctx, &args[1]);
    if let Ok(Some(_)) = value {
        match ttl {
            Ttl::Keep => {}
            Ttl::Clear => ctx.db().set_expiry(&args[1], NO_EXPIRY),
            Ttl::At(at) if at <= now => {
                ctx.db().remove(&args[1]);
            }
            Ttl::At(at) => ctx.db().set_expiry(&args[1], at),
        }
    }
    reply_of(value)
}

/// Replaces the string at `key`, keeping its TTL (APPEND, SETRANGE, counters).
pub(crate) fn store_keeping_ttl(ctx: &mut Ctx<'_>, key: &[u8], value: Bytes) {
    let now = ctx.now_ms;
    match ctx.db().get(key, now) {
        Some(mut entry) => entry.set_str(&value),
        None => ctx.db().set_str(key, &value, NO_EXPIRY),
    }
}

/// The length of the string at `key` (`None` when missing), read in place.
pub(crate) fn string_len(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<usize>, Frame> {
    let now = ctx.now_ms;
    match ctx.db().get(key, now) {
        None => Ok(None),
        Some(entry) => match entry.str_bytes() {
            Some(bytes) => Ok(Some(bytes.len())),
            None => Err(Frame::static_error(WRONGTYPE)),
        },
    }
}

/// Changes the string at `key` in place (APPEND, SETRANGE) and returns its new length,
/// keeping its TTL. A long string's buffer is taken out of its node, changed with amortised
/// growth (doubling, as Redis's SDS preallocation) and put back, so N appends copy O(N)
/// bytes in all, not O(N²); a short (inline) or missing string is rebuilt. The caller has
/// checked the type.
pub(crate) fn edit_string(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    edit: impl FnOnce(&mut BytesMut),
) -> usize {
    let now = ctx.now_ms;
    if let Some(mut entry) = ctx.db().get(key, now) {
        if let Some(Value::Str(stored)) = entry.typed_mut() {
            let mut buffer = std::mem::take(stored)
                .try_into_mut()
                .unwrap_or_else(|shared| BytesMut::from(&shared[..]));
            edit(&mut buffer);
            let len = buffer.len();
            *stored = buffer.freeze();
            return len;
        }
        let mut buffer = BytesMut::from(entry.str_bytes().unwrap_or_default());
        edit(&mut buffer);
        entry.set_str(&buffer);
        return buffer.len();
    }
    let mut buffer = BytesMut::new();
    edit(&mut buffer);
    ctx.db().set_str(key, &buffer, NO_EXPIRY);
    buffer.len()
}

pub fn append(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let old_len = match string_len(ctx, &args[1]) {
        Ok(len) => len.unwrap_or(0),
        Err(err) => return err,
    };
    if old_len + args[2].len() > STRING_BYTES_MAX {
        return Frame::static_error(STRING_TOO_LONG);
    }
    let len = edit_string(ctx, &args[1], |value| value.extend_from_slice(&args[2]));
    Frame::Integer(len as i64)
}

pub fn strlen(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    match read_string(ctx, &args[1]) {
        Ok(value) => Frame::Integer(value.map_or(0, |v| v.len()) as i64),
        Err(err) => err,
    }
}

fn incr_by(ctx: &mut Ctx<'_>, key: &[u8], delta: i64) -> Frame {
    let current = match read_string(ctx, key) {
        Ok(None) => 0,
        Ok(Some(value)) => match parse_i64(&value) {
            Some(n) => n,
            None => return Frame::static_error(NOT_INTEGER),
        },
        Err(err) => return err,
    };
    let Some(next) = current.checked_add(delta) else {
        return Frame::static_error(OVERFLOW);
    };
    let text = itoa::Buffer::new().format(next).as_bytes().to_vec();
    store_keeping_ttl(ctx, key, Bytes::from(text));
    Frame::Integer(next)
}

pub fn incr(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    incr_by(ctx, &args[1], 1)
}

pub fn decr(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    incr_by(ctx, &args[1], -1)
}

pub fn incrby(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    match int_arg(&args[2]) {
        Ok(delta) => incr_by(ctx, &args[1], delta),
        Err(err) => err,
    }
}

pub fn decrby(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    match int_arg(&args[2]) {
        Ok(i64::MIN) => Frame::static_error("ERR decrement would overflow"),
        Ok(delta) => incr_by(ctx, &args[1], -delta),
        Err(err) => err,
    }
}

/// INCRBYFLOAT: Redis adds in `long double` and writes 17 decimals, which
/// [`crate::values::long_double`] reproduces (so 0.1 three times is "0.3", as in Redis).
pub fn incrbyfloat(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    // Redis's order: the key's type, its value, then the increment.
    let current = match read_string(ctx, &args[1]) {
        Ok(None) => LongDouble::ZERO,
        Ok(Some(value)) => match long_double::parse(&value) {
            Some(n) => n,
            None => return Frame::static_error(NOT_FLOAT),
        },
        Err(err) => return err,
    };
    let Some(delta) = long_double::parse(&args[2]) else {
        return Frame::static_error(NOT_FLOAT);
    };
    let next = match current.plus(delta) {
        Some(next) if next.is_finite() => next,
        _ => return Frame::static_error(NAN_OR_INFINITY),
    };
    let text = Bytes::from(next.human());
    store_keeping_ttl(ctx, &args[1], text.clone());
    Frame::Bulk(text)
}

pub fn getrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let (start, end) = match (int_arg(&args[2]), int_arg(&args[3])) {
        (Ok(s), Ok(e)) => (s, e),
        (Err(err), _) | (_, Err(err)) => return err,
    };
    let value = match read_string(ctx, &args[1]) {
        Ok(value) => value.unwrap_or_default(),
        Err(err) => return err,
    };
    let len = value.len() as i64;
    if len == 0 || (start < 0 && end < 0 && start > end) {
        return Frame::Bulk(Bytes::new());
    }
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let end = if end < 0 {
        (len + end).max(0)
    } else {
        end.min(len - 1)
    };
    if start > end || start >= len {
        return Frame::Bulk(Bytes::new());
    }
    Frame::Bulk(value.slice(start as usize..=end as usize))
}

pub fn setrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let offset = match int_arg(&args[2]) {
        Ok(offset) if offset >= 0 => offset as usize,
        Ok(_) => return Frame::static_error(OFFSET_RANGE),
        Err(err) => return err,
    };
    let patch = &args[3];
    let old_len = match string_len(ctx, &args[1]) {
        Ok(len) => len,
        Err(err) => return err,
    };
    if patch.is_empty() {
        return Frame::Integer(old_len.unwrap_or(0) as i64);
    }
    if offset.saturating_add(patch.len()) > STRING_BYTES_MAX {
        return Frame::static_error(STRING_TOO_LONG);
    }
    let len = edit_string(ctx, &args[1], |value| {
        if value.len() < offset + patch.len() {
            value.resize(offset + patch.len(), 0);
        }
        value[offset..offset + patch.len()].copy_from_slice(patch);
    });
    Frame::Integer(len as i64)
}
