//! Bitmaps: SETBIT, GETBIT, BITCOUNT, BITPOS and BITOP (BITFIELD is `bitfield`), on string
//! values as Redis 7.0 treats them (bit 0 is the most significant bit of the first byte; a
//! missing key reads as zeros; writes grow the string with zero bytes), with Redis's replies
//! and error texts. BITOP over keys of several shards runs where the server's cross-shard
//! path borrows them (`table`: keys 2 to the last).

use bytes::{Bytes, BytesMut};
use wetask_protocol::Frame;

use crate::args::{int_arg, is};
use crate::ctx::Ctx;
use crate::errors::*;
use crate::families::strings::{edit_string, read_string, string_len, STRING_BYTES_MAX};
use crate::keyspace::NO_EXPIRY;

const BIT_OFFSET: &str = "ERR bit offset is not an integer or out of range";
const BIT_VALUE: &str = "ERR bit is not an integer or out of range";
const BITPOS_BIT: &str = "ERR The bit argument must be 1 or 0.";
const BITOP_NOT_ONE: &str = "ERR BITOP NOT must be called with a single source key.";
pub(crate) const BITFIELD_TYPE: &str = "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.";
pub(crate) const BITFIELD_OVERFLOW: &str = "ERR Invalid OVERFLOW type specified";
pub(crate) const BITFIELD_RO_GET: &str = "ERR BITFIELD_RO only supports the GET subcommand";

/// The bit at `offset` (0 past the end).
fn bit(bytes: &[u8], offset: u64) -> u8 {
    bytes
        .get((offset >> 3) as usize)
        .map_or(0, |b| (b >> (7 - (offset & 7))) & 1)
}

fn set_bit(bytes: &mut [u8], offset: u64, on: bool) {
    let byte = &mut bytes[(offset >> 3) as usize];
    let mask = 1 << (7 - (offset & 7));
    if on {
        *byte |= mask;
    } else {
        *byte &= !mask;
    }
}

/// A bit offset argument: an integer, or `#n` (n times `width`, BITFIELD's form), below
/// the largest string's bit count.
pub(crate) fn bit_offset(arg: &[u8], hash_width: Option<u64>) -> Result<u64, Frame> {
    let (text, times) = match (hash_width, arg.strip_prefix(b"#")) {
        (Some(width), Some(rest)) if !rest.is_empty() => (rest, width),
        _ => (arg, 1),
    };
    let n = std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.parse::<i64>().ok())
        .and_then(|n| n.checked_mul(times as i64))
        .filter(|&n| n >= 0 && ((n as u64) >> 3) < STRING_BYTES_MAX as u64);
    n.map(|n| n as u64)
        .ok_or_else(|| Frame::static_error(BIT_OFFSET))
}

/// The string at `key` for a write that touches bits up to `max_bit`: created or grown
/// with zero bytes to reach it. WRONGTYPE when the key holds another type.
pub(crate) fn with_room<R>(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    max_bit: u64,
    edit: impl FnOnce(&mut BytesMut) -> R,
) -> Result<R, Frame> {
    string_len(ctx, key)?;
    let needed = (max_bit >> 3) as usize + 1;
    let mut result = None;
    edit_string(ctx, key, |value| {
        if value.len() < needed {
            value.resize(needed, 0);
        }
        result = Some(edit(value));
    });
    Ok(result.expect("edit ran"))
}

pub fn setbit(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let offset = match bit_offset(&args[2], None) {
        Ok(offset) => offset,
        Err(err) => return err,
    };
    let on = match int_arg(&args[3]) {
        Ok(v @ (0 | 1)) => v == 1,
        _ => return Frame::static_error(BIT_VALUE),
    };
    match with_room(ctx, &args[1], offset, |value| {
        let old = bit(value, offset);
        set_bit(value, offset, on);
        old
    }) {
        Ok(old) => Frame::Integer(i64::from(old)),
        Err(err) => err,
    }
}

pub fn getbit(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let offset = match bit_offset(&args[2], None) {
        Ok(offset) => offset,
        Err(err) => return err,
    };
    match read_string(ctx, &args[1]) {
        Ok(value) => Frame::Integer(i64::from(bit(&value.unwrap_or_default(), offset))),
        Err(err) => err,
    }
}

/// A BITCOUNT/BITPOS range in bits, inclusive, over a string of `len` bytes: `start` and
/// `end` as given (negative from the end), in bytes unless `in_bits`. `None`: empty.
fn bit_range(len: u64, start: i64, end: i64, in_bits: bool) -> Option<(u64, u64)> {
    let total = if in_bits { len * 8 } else { len } as i64;
    if start < 0 && end < 0 && start > end {
        return None;
    }
    let start = if start < 0 { total + start } else { start }.max(0);
    let end = if end < 0 { total + end } else { end }
        .max(0)
        .min(total - 1);
    if start > end {
        return None;
    }
    Some(if in_bits {
        (start as u64, end as u64)
    } else {
        (start as u64 * 8, end as u64 * 8 + 7)
    })
}

/// `BYTE` or `BIT` (any case).
fn unit(arg: &[u8]) -> Result<bool, Frame> {
    if is(arg, "bit") {
        Ok(true)
    } else if is(arg, "byte") {
        Ok(false)
    } else {
        Err(Frame::static_error(SYNTAX))
    }
}

/// Set bits in `from..=to`.
fn count_ones(bytes: &[u8], from: u64, to: u64) -> u64 {
    let (first, last) = ((from >> 3) as usize, (to >> 3) as usize);
    let mut count: u64 = bytes[first..=last]
        .iter()
        .map(|b| u64::from(b.count_ones()))
        .sum();
    // The edges' bits outside the range.
    if from & 7 != 0 {
        count -= u64::from((bytes[first] >> (8 - (from & 7))).count_ones());
    }
    let tail = 7 - (to & 7);
    count -= u64::from((bytes[last] & ((1u16 << tail) - 1) as u8).count_ones());
    count
}

pub fn bitcount(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let value = match read_string(ctx, &args[1]) {
        Ok(Some(value)) => value,
        Ok(None) => return Frame::Integer(0),
        Err(err) => return err,
    };
    let range = match args.len() {
        2 => bit_range(value.len() as u64, 0, -1, false),
        4 | 5 => {
            let (start, end) = match (int_arg(&args[2]), int_arg(&args[3])) {
                (Ok(s), Ok(e)) => (s, e),
                (Err(err), _) | (_, Err(err)) => return err,
            };
            let in_bits = match args.get(4).map(|a| unit(a)).transpose() {
                Ok(in_bits) => in_bits.unwrap_or(false),
                Err(err) => return err,
            };
            bit_range(value.len() as u64, start, end, in_bits)
        }
        _ => return Frame::static_error(SYNTAX),
    };
    Frame::Integer(range.map_or(0, |(from, to)| count_ones(&value, from, to)) as i64)
}

/// The first bit equal to `want` in `from..=to`.
fn first_bit(bytes: &[u8], from: u64, to: u64, want: u8) -> Option<u64> {
    let skip = if want == 1 { 0x00 } else { 0xFF };
    let mut at = from;
    while at <= to {
        if at & 7 == 0 && at + 7 <= to && bytes[(at >> 3) as usize] == skip {
            at += 8;
            continue;
        }
        if bit(bytes, at) == want {
            return Some(at);
        }
        at += 1;
    }
    None
}

pub fn bitpos(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let want = match int_arg(&args[2]) {
        Ok(b @ (0 | 1)) => b as u8,
        Ok(_) => return Frame::static_error(BITPOS_BIT),
        Err(err) => return err,
    };
    let value = match read_string(ctx, &args[1]) {
        // A missing key is an endless run of zeros.
        Ok(None) => return Frame::Integer(if want == 1 { -1 } else { 0 }),
        Ok(Some(value)) => value,
        Err(err) => return err,
    };
    if args.len() > 6 {
        return Frame::static_error(SYNTAX);
    }
    let start = match args.get(3).map(|a| int_arg(a)).transpose() {
        Ok(start) => start.unwrap_or(0),
        Err(err) => return err,
    };
    let in_bits = match args.get(5).map(|a| unit(a)).transpose() {
        Ok(in_bits) => in_bits.unwrap_or(false),
        Err(err) => return err,
    };
    let end = match args.get(4).map(|a| int_arg(a)).transpose() {
        Ok(end) => end,
        Err(err) => return err,
    };
    let Some((from, to)) = bit_range(value.len() as u64, start, end.unwrap_or(-1), in_bits) else {
        return Frame::Integer(-1);
    };
    match first_bit(&value, from, to, want) {
        Some(at) => Frame::Integer(at as i64),
        // No clear bit in the string: the zeros past its end count, unless an end was given.
        None if want == 0 && end.is_none() => Frame::Integer(to as i64 + 1),
        None => Frame::Integer(-1),
    }
}

pub fn bitop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    #[derive(Clone, Copy, PartialEq)]
    enum Op {
        And,
        Or,
        Xor,
        Not,
    }
    let op = match &args[1] {
        a if is(a, "and") => Op::And,
        a if is(a, "or") => Op::Or,
        a if is(a, "xor") => Op::Xor,
        a if is(a, "not") => Op::Not,
        _ => return Frame::static_error(SYNTAX),
    };
    if op == Op::Not && args.len() != 4 {
        return Frame::static_error(BITOP_NOT_ONE);
    }
    let mut sources = Vec::with_capacity(args.len() - 3);
    for key in &args[3..] {
        match read_string(ctx, key) {
            Ok(value) => sources.push(value.unwrap_or_default()),
            Err(err) => return err,
        }
    }
    let longest = sources.iter().map(Bytes::len).max().unwrap_or(0);
    let byte = |source: &Bytes, i: usize| source.get(i).copied().unwrap_or(0);
    let result: Vec<u8> = (0..longest)
        .map(|i| {
            let first = byte(&sources[0], i);
            sources[1..].iter().fold(
                if op == Op::Not { !first } else { first },
                |acc, s| match op {
                    Op::And => acc & byte(s, i),
                    Op::Or => acc | byte(s, i),
                    Op::Xor => acc ^ byte(s, i),
                    Op::Not => acc,
                },
            )
        })
        .collect();
    let dest = &args[2];
    if result.is_empty() {
        ctx.db().remove(dest);
    } else {
        // Replaces whatever the key held, TTL included (as SET does).
        ctx.db().remove(dest);
        ctx.db().set_str(dest, &result, NO_EXPIRY);
    }
    Frame::Integer(longest as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counting_edges_in_bits() {
        let bytes = [0b1111_0000u8, 0b0000_1111];
        assert_eq!(count_ones(&bytes, 0, 15), 8);
        assert_eq!(count_ones(&bytes, 2, 13), 4);
        assert_eq!(count_ones(&bytes, 4, 11), 0);
        assert_eq!(count_ones(&bytes, 3, 3), 1);
        assert_eq!(first_bit(&bytes, 4, 15, 1), Some(12));
        assert_eq!(first_bit(&[0xFF, 0xFF], 0, 15, 0), None);
        assert_eq!(bit_range(2, -1, -2, false), None);
        assert_eq!(bit_range(2, 0, -1, true), Some((0, 15)));
    }
}
