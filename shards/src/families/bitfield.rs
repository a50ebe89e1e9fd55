//! BITFIELD and BITFIELD_RO: integers of 1 to 64 bits (`i64` … `i1`, `u63` … `u1`) at any
//! bit offset of a string, read, set and incremented with Redis 7.0's overflow rules (WRAP,
//! SAT, FAIL), replies and error texts. Every subcommand is parsed before any runs; a write
//! first grows the string to the farthest bit the command writes.

use bytes::{Bytes, BytesMut};
use wetask_protocol::Frame;

use crate::args::{int_arg, is};
use crate::ctx::Ctx;
use crate::errors::SYNTAX;
use crate::families::bitmaps::{
    bit_offset, with_room, BITFIELD_OVERFLOW, BITFIELD_RO_GET, BITFIELD_TYPE,
};
use crate::families::strings::read_string;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Overflow {
    Wrap,
    Sat,
    Fail,
}

#[derive(Clone, Copy, Debug)]
enum Action {
    Get,
    Set(i64),
    IncrBy(i64),
}

#[derive(Clone, Copy, Debug)]
struct Field {
    signed: bool,
    bits: u32,
    offset: u64,
    action: Action,
    overflow: Overflow,
}

/// `i<bits>` (1 to 64) or `u<bits>` (1 to 63).
fn field_type(arg: &[u8]) -> Result<(bool, u32), Frame> {
    let signed = match arg.first() {
        Some(b'i' | b'I') => true,
        Some(b'u' | b'U') => false,
        _ => return Err(Frame::static_error(BITFIELD_TYPE)),
    };
    let bits = std::str::from_utf8(&arg[1..])
        .ok()
        .and_then(|t| t.parse::<u32>().ok())
        .filter(|&b| b >= 1 && (b <= 63 || (signed && b == 64)));
    bits.map(|b| (signed, b))
        .ok_or_else(|| Frame::static_error(BITFIELD_TYPE))
}

/// Every subcommand, in order; the first bad one is the error.
fn parse(args: &[Bytes]) -> Result<Vec<Field>, Frame> {
    let mut fields = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut at = 2;
    while at < args.len() {
        let left = args.len() - at - 1;
        let sub = &args[at];
        if is(sub, "overflow") && left >= 1 {
            overflow = match &args[at + 1] {
                a if is(a, "wrap") => Overflow::Wrap,
                a if is(a, "sat") => Overflow::Sat,
                a if is(a, "fail") => Overflow::Fail,
                _ => return Err(Frame::static_error(BITFIELD_OVERFLOW)),
            };
            at += 2;
            continue;
        }
        let get = is(sub, "get") && left >= 2;
        let write = (is(sub, "set") || is(sub, "incrby")) && left >= 3;
        if !get && !write {
            return Err(Frame::static_error(SYNTAX));
        }
        let (signed, bits) = field_type(&args[at + 1])?;
        let offset = bit_offset(&args[at + 2], Some(u64::from(bits)))?;
        let action = if get {
            Action::Get
        } else {
            let n = int_arg(&args[at + 3])?;
            if is(sub, "set") {
                Action::Set(n)
            } else {
                Action::IncrBy(n)
            }
        };
        fields.push(Field {
            signed,
            bits,
            offset,
            action,
            overflow,
        });
        at += if get { 3 } else { 4 };
    }
    Ok(fields)
}

fn get_unsigned(bytes: &[u8], offset: u64, bits: u32) -> u64 {
    (0..u64::from(bits)).fold(0, |v, i| {
        let at = offset + i;
        let bit = bytes
            .get((at >> 3) as usize)
            .map_or(0, |b| (b >> (7 - (at & 7))) & 1);
        (v << 1) | u64::from(bit)
    })
}

fn get_signed(bytes: &[u8], offset: u64, bits: u32) -> i64 {
    let v = get_unsigned(bytes, offset, bits);
    if bits < 64 && v & (1 << (bits - 1)) != 0 {
        (v | (u64::MAX << bits)) as i64
    } else {
        v as i64
    }
}

fn put(bytes: &mut [u8], offset: u64, bits: u32, value: u64) {
    for i in 0..u64::from(bits) {
        let at = offset + i;
        let mask = 1 << (7 - (at & 7));
        let byte = &mut bytes[(at >> 3) as usize];
        if (value >> (u64::from(bits) - 1 - i)) & 1 == 1 {
            *byte |= mask;
        } else {
            *byte &= !mask;
        }
    }
}

/// `value + incr` for a signed field of `bits`: `None` when it overflows under FAIL, the
/// wrapped or saturated result otherwise (Redis's `checkSignedBitfieldOverflow`).
fn signed_sum(value: i64, incr: i64, bits: u32, overflow: Overflow) -> Option<i64> {
    let max = if bits == 64 {
        i64::MAX
    } else {
        (1i64 << (bits - 1)) - 1
    };
    let min = -max - 1;
    let max_incr = (max as u64).wrapping_sub(value as u64) as i64;
    let min_incr = min.wrapping_sub(value);
    let wrapped = || {
        let mut c = (value as u64).wrapping_add(incr as u64);
        if bits < 64 {
            let mask = u64::MAX << bits;
            if c & (1 << (bits - 1)) != 0 {
                c |= mask;
            } else {
                c &= !mask;
            }
        }
        c as i64
    };
    let above = value > max
        || (bits != 64 && incr > max_incr)
        || (value >= 0 && incr > 0 && incr > max_incr);
    let below = value < min
        || (bits != 64 && incr < min_incr)
        || (value < 0 && incr < 0 && incr < min_incr);
    match (above, below, overflow) {
        (false, false, _) => Some(value.wrapping_add(incr)),
        (_, _, Overflow::Fail) => None,
        (_, _, Overflow::Wrap) => Some(wrapped()),
        (true, _, Overflow::Sat) => Some(max),
        (false, true, Overflow::Sat) => Some(min),
    }
}

/// The same for an unsigned field (Redis's `checkUnsignedBitfieldOverflow`).
fn unsigned_sum(value: u64, incr: i64, bits: u32, overflow: Overflow) -> Option<u64> {
    let max = (1u64 << bits) - 1;
    let max_incr = max.wrapping_sub(value) as i64;
    let min_incr = (value as i64).wrapping_neg();
    let above = value > max || (incr > 0 && incr > max_incr);
    let below = !above && incr < 0 && incr < min_incr;
    match (above, below, overflow) {
        (false, false, _) => Some(value.wrapping_add(incr as u64)),
        (_, _, Overflow::Fail) => None,
        (_, _, Overflow::Wrap) => Some(value.wrapping_add(incr as u64) & max),
        (true, _, Overflow::Sat) => Some(max),
        (false, true, Overflow::Sat) => Some(0),
    }
}

/// Runs one SET or INCRBY on the (grown) string: its reply.
fn write(bytes: &mut BytesMut, f: &Field) -> Frame {
    let (new, reply) = match (f.signed, f.action) {
        (true, Action::Set(n)) => {
            let old = get_signed(bytes, f.offset, f.bits);
            (signed_sum(n, 0, f.bits, f.overflow).map(|v| v as u64), old)
        }
        (true, Action::IncrBy(n)) => {
            let old = get_signed(bytes, f.offset, f.bits);
            let new = signed_sum(old, n, f.bits, f.overflow);
            (new.map(|v| v as u64), new.unwrap_or(0))
        }
        (false, Action::Set(n)) => {
            let old = get_unsigned(bytes, f.offset, f.bits) as i64;
            (unsigned_sum(n as u64, 0, f.bits, f.overflow), old)
        }
        (false, Action::IncrBy(n)) => {
            let old = get_unsigned(bytes, f.offset, f.bits);
            let new = unsigned_sum(old, n, f.bits, f.overflow);
            (new, new.unwrap_or(0) as i64)
        }
        (_, Action::Get) => unreachable!("GETs are read, not written"),
    };
    match new {
        Some(value) => {
            put(bytes, f.offset, f.bits, value);
            Frame::Integer(reply)
        }
        // FAIL: nothing written, a null reply.
        None => Frame::Null,
    }
}

fn read(bytes: &[u8], f: &Field) -> Frame {
    Frame::Integer(match f.signed {
        true => get_signed(bytes, f.offset, f.bits),
        false => get_unsigned(bytes, f.offset, f.bits) as i64,
    })
}

fn run(ctx: &mut Ctx<'_>, args: &[Bytes], read_only: bool) -> Frame {
    let fields = match parse(args) {
        Ok(fields) => fields,
        Err(err) => return err,
    };
    let farthest = fields
        .iter()
        .filter(|f| !matches!(f.action, Action::Get))
        .map(|f| f.offset + u64::from(f.bits) - 1)
        .max();
    let Some(farthest) = farthest else {
        let value = match read_string(ctx, &args[1]) {
            Ok(value) => value.unwrap_or_default(),
            Err(err) => return err,
        };
        return Frame::Array(fields.iter().map(|f| read(&value, f)).collect());
    };
    if read_only {
        return Frame::static_error(BITFIELD_RO_GET);
    }
    let replies = with_room(ctx, &args[1], farthest, |bytes| {
        fields
            .iter()
            .map(|f| match f.action {
                Action::Get => read(bytes, f),
                _ => write(bytes, f),
            })
            .collect()
    });
    match replies {
        Ok(replies) => Frame::Array(replies),
        Err(err) => err,
    }
}

pub fn bitfield(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    run(ctx, args, false)
}

pub fn bitfield_ro(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    run(ctx, args, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_rules_follow_redis() {
        assert_eq!(signed_sum(127, 1, 8, Overflow::Wrap), Some(-128));
        assert_eq!(signed_sum(127, 1, 8, Overflow::Sat), Some(127));
        assert_eq!(signed_sum(127, 1, 8, Overflow::Fail), None);
        assert_eq!(signed_sum(-128, -1, 8, Overflow::Sat), Some(-128));
        assert_eq!(signed_sum(i64::MAX, 1, 64, Overflow::Wrap), Some(i64::MIN));
        assert_eq!(unsigned_sum(255, 1, 8, Overflow::Wrap), Some(0));
        assert_eq!(unsigned_sum(0, -1, 8, Overflow::Sat), Some(0));
        assert_eq!(unsigned_sum(0, -1, 8, Overflow::Wrap), Some(255));
        assert_eq!(unsigned_sum(300, 0, 8, Overflow::Wrap), Some(44));
        let mut bytes = BytesMut::from(&[0u8; 4][..]);
        put(&mut bytes, 3, 12, 0xABC);
        assert_eq!(get_unsigned(&bytes, 3, 12), 0xABC);
        assert_eq!(get_signed(&bytes, 3, 12), 0xABC - 4096);
    }
}
