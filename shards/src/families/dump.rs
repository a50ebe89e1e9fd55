//! DUMP and RESTORE: a key's value in Redis's serialization (`rdb`), and a key made from
//! one, with Redis 7's options (REPLACE, ABSTTL, IDLETIME, FREQ), replies and errors.

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::args::{is, parse_i64};
use crate::ctx::Ctx;
use crate::errors::{NOT_INTEGER, SYNTAX};
use crate::keyspace::{Entry, NO_EXPIRY};
use crate::persist::rdb::{self, Refused};

/// DUMP key: the value's payload, or nil.
pub fn dump(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now_ms;
    let Some(entry) = ctx.db().get(&args[1], now).map(|e| e.to_entry()) else {
        return Frame::Null;
    };
    match rdb::dump(&entry.value) {
        Ok(payload) => Frame::Bulk(Bytes::from(payload)),
        Err(refused) => refusal(refused, "DUMP"),
    }
}

fn refusal(refused: Refused, command: &str) -> Frame {
    match refused {
        Refused::VersionOrChecksum => {
            Frame::static_error("ERR DUMP payload version or checksum are wrong")
        }
        Refused::BadFormat => Frame::static_error("ERR Bad data format"),
        Refused::Unsupported(what) => Frame::error(format!(
            "ERR {command} of a {what} value is not supported yet"
        )),
    }
}

/// RESTORE's options after the payload.
#[derive(Default)]
struct Options {
    replace: bool,
    absttl: bool,
    idletime: Option<i64>,
    freq: Option<i64>,
}

/// Redis's parse, in its order: IDLETIME and FREQ exclude each other (the second is a
/// syntax error).
fn options(args: &[Bytes]) -> Result<Options, Frame> {
    let mut o = Options::default();
    let mut j = 4;
    while j < args.len() {
        let more = j + 1 < args.len();
        if is(&args[j], "replace") {
            o.replace = true;
        } else if is(&args[j], "absttl") {
            o.absttl = true;
        } else if is(&args[j], "idletime") && more && o.freq.is_none() {
            let idle = parse_i64(&args[j + 1]).ok_or(Frame::static_error(NOT_INTEGER))?;
            if idle < 0 {
                return Err(Frame::static_error(
                    "ERR Invalid IDLETIME value, must be >= 0",
                ));
            }
            o.idletime = Some(idle);
            j += 1;
        } else if is(&args[j], "freq") && more && o.idletime.is_none() {
            let freq = parse_i64(&args[j + 1]).ok_or(Frame::static_error(NOT_INTEGER))?;
            if !(0..=255).contains(&freq) {
                return Err(Frame::static_error(
                    "ERR Invalid FREQ value, must be >= 0 and <= 255",
                ));
            }
            o.freq = Some(freq);
            j += 1;
        } else {
            return Err(Frame::static_error(SYNTAX));
        }
        j += 1;
    }
    Ok(o)
}

/// RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f]. A TTL already past
/// makes no key (and REPLACE then deletes the old one), as in Redis.
pub fn restore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let o = match options(args) {
        Ok(o) => o,
        Err(err) => return err,
    };
    let key = &args[1];
    let now = ctx.now_ms;
    if !o.replace && ctx.db().contains(key, now) {
        return Frame::static_error("BUSYKEY Target key name already exists.");
    }
    let ttl = match parse_i64(&args[2]) {
        None => return Frame::static_error(NOT_INTEGER),
        Some(ttl) if ttl < 0 => return Frame::static_error("ERR Invalid TTL value, must be >= 0"),
        Some(ttl) => ttl as u64,
    };
    let value = match rdb::restore(&args[3]) {
        Ok(value) => value,
        Err(refused) => return refusal(refused, "RESTORE"),
    };
    if o.replace {
        ctx.db().remove(key);
    }
    let expire_at_ms = match ttl {
        0 => NO_EXPIRY,
        ttl if o.absttl => ttl,
        ttl => now.saturating_add(ttl),
    };
    if expire_at_ms != NO_EXPIRY && expire_at_ms <= now {
        return Frame::ok();
    }
    ctx.db().insert(
        key,
        Entry {
            value,
            expire_at_ms,
        },
    );
    ctx.signal_ready(key);
    Frame::ok()
}
