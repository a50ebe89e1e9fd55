//! HyperLogLog: PFADD, PFCOUNT and PFMERGE, with Redis's sketch (16384 six-bit registers
//! over MurmurHash64A, Ertl's estimator), so counts match Redis's to the unit, and Redis's
//! string format (the `HYLL` header), so a sketch moves between Redis and WeTask as a plain
//! string. WeTask reads both of Redis's encodings but writes the dense one only: a sketch
//! takes 12 KB from its first element (Redis starts sparse, a few bytes, and turns dense at
//! `hll-sparse-max-bytes`). The cached cardinality in the header is left invalid, so PFCOUNT
//! stays a read.

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::ctx::Ctx;
use crate::errors::WRONGTYPE;
use crate::families::strings::{read_string, store_keeping_ttl};

const P: u32 = 14;
const REGISTERS: usize = 1 << P;
const Q: u32 = 64 - P;
const HEADER: usize = 16;
const DENSE_BYTES: usize = HEADER + (REGISTERS * 6).div_ceil(8);
const DENSE: u8 = 0;
const SPARSE: u8 = 1;
/// 1 / (2 ln 2), Redis's `HLL_ALPHA_INF`.
#[allow(clippy::excessive_precision)]
const ALPHA_INF: f64 = 0.721347520444481703680;
const NOT_HLL: &str = "WRONGTYPE Key is not a valid HyperLogLog string value.";
const CORRUPT: &str = "INVALIDOBJ Corrupted HLL object detected";

/// Redis's MurmurHash64A, seed 0xadc83b19.
fn murmur64a(key: &[u8]) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h: u64 = 0xadc8_3b19 ^ (key.len() as u64).wrapping_mul(M);
    let mut chunks = key.chunks_exact(8);
    for chunk in &mut chunks {
        let mut k = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, &b) in tail.iter().enumerate() {
            h ^= u64::from(b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^ (h >> R)
}

/// The register an element falls in, and the length of its run of zeros plus one.
fn pattern(element: &[u8]) -> (usize, u8) {
    let hash = murmur64a(element);
    let index = (hash & (REGISTERS as u64 - 1)) as usize;
    let rest = (hash >> P) | (1 << Q);
    (index, rest.trailing_zeros() as u8 + 1)
}

/// A sketch's registers, unpacked.
struct Registers(Vec<u8>);

impl Registers {
    fn empty() -> Self {
        Registers(vec![0; REGISTERS])
    }

    /// Reads a Redis HLL string (dense or sparse); `Err` with Redis's reply otherwise.
    fn parse(bytes: &[u8]) -> Result<Self, Frame> {
        if bytes.len() < HEADER || &bytes[..4] != b"HYLL" || bytes[4] > SPARSE {
            return Err(Frame::static_error(NOT_HLL));
        }
        let body = &bytes[HEADER..];
        match bytes[4] {
            DENSE if bytes.len() == DENSE_BYTES => Ok(Registers(
                (0..REGISTERS).map(|r| dense_get(body, r)).collect(),
            )),
            DENSE => Err(Frame::static_error(NOT_HLL)),
            _ => sparse(body).ok_or_else(|| Frame::static_error(CORRUPT)),
        }
    }

    /// The dense Redis string for these registers (the cached count marked invalid).
    fn to_dense(&self) -> Vec<u8> {
        let mut out = vec![0u8; DENSE_BYTES];
        out[..4].copy_from_slice(b"HYLL");
        out[4] = DENSE;
        out[HEADER - 1] = 1 << 7;
        let body = &mut out[HEADER..];
        for (r, &value) in self.0.iter().enumerate() {
            dense_set(body, r, value);
        }
        out
    }

    /// Ertl's estimator, as Redis's `hllCount`.
    fn count(&self) -> u64 {
        let m = REGISTERS as f64;
        let mut histogram = [0u32; Q as usize + 2];
        for &r in &self.0 {
            histogram[r as usize] += 1;
        }
        let mut z = m * tau((m - f64::from(histogram[Q as usize + 1])) / m);
        for j in (1..=Q as usize).rev() {
            z += f64::from(histogram[j]);
            z *= 0.5;
        }
        z += m * sigma(f64::from(histogram[0]) / m);
        (ALPHA_INF * m * m / z).round() as u64
    }
}

fn dense_get(body: &[u8], r: usize) -> u8 {
    let (byte, shift) = (r * 6 / 8, (r * 6) & 7);
    let b0 = u32::from(body[byte]);
    let b1 = u32::from(body.get(byte + 1).copied().unwrap_or(0));
    (((b0 >> shift) | (b1 << (8 - shift))) & 63) as u8
}

fn dense_set(body: &mut [u8], r: usize, value: u8) {
    let (byte, shift) = (r * 6 / 8, (r * 6) & 7);
    let v = u32::from(value);
    body[byte] = ((u32::from(body[byte]) & !(63 << shift)) | (v << shift)) as u8;
    if let Some(next) = body.get_mut(byte + 1) {
        *next = ((u32::from(*next) & !(63 >> (8 - shift))) | (v >> (8 - shift))) as u8;
    }
}

/// Redis's sparse encoding: runs of zeros (`ZERO`, `XZERO`) and of one value (`VAL`).
fn sparse(body: &[u8]) -> Option<Registers> {
    let mut registers = Vec::with_capacity(REGISTERS);
    let mut at = 0;
    while at < body.len() {
        let op = body[at];
        let (value, run) = if op & 0xC0 == 0 {
            at += 1;
            (0, usize::from(op & 0x3F) + 1)
        } else if op & 0xC0 == 0x40 {
            let next = *body.get(at + 1)?;
            at += 2;
            (0, ((usize::from(op & 0x3F) << 8) | usize::from(next)) + 1)
        } else {
            at += 1;
            (((op >> 2) & 0x1F) + 1, usize::from(op & 0x3) + 1)
        };
        if registers.len() + run > REGISTERS {
            return None;
        }
        registers.extend(std::iter::repeat_n(value, run));
    }
    (registers.len() == REGISTERS).then_some(Registers(registers))
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let (mut y, mut z) = (1.0, x);
    loop {
        x *= x;
        let before = z;
        z += x * y;
        y += y;
        if before == z {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let (mut y, mut z) = (1.0, 1.0 - x);
    loop {
        x = x.sqrt();
        let before = z;
        y *= 0.5;
        z -= (1.0 - x).powi(2) * y;
        if before == z {
            return z / 3.0;
        }
    }
}

/// The sketch at `key`: `None` when missing, Redis's error when it is not one.
fn load(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<Registers>, Frame> {
    match read_string(ctx, key) {
        Ok(Some(bytes)) => Registers::parse(&bytes).map(Some),
        Ok(None) => Ok(None),
        Err(_) => Err(Frame::static_error(WRONGTYPE)),
    }
}

/// Stores `registers` at `key`, keeping its TTL (a sketch is changed in place in Redis).
fn store(ctx: &mut Ctx<'_>, key: &[u8], registers: &Registers) {
    store_keeping_ttl(ctx, key, Bytes::from(registers.to_dense()));
}

pub fn pfadd(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let (mut registers, mut changed) = match load(ctx, &args[1]) {
        Ok(Some(registers)) => (registers, false),
        Ok(None) => (Registers::empty(), true),
        Err(err) => return err,
    };
    for element in &args[2..] {
        let (index, run) = pattern(element);
        if run > registers.0[index] {
            registers.0[index] = run;
            changed = true;
        }
    }
    if changed {
        store(ctx, &args[1], &registers);
    }
    Frame::Integer(i64::from(changed))
}

/// The union of the sketches at `keys` (missing ones add nothing).
fn union(ctx: &mut Ctx<'_>, keys: &[Bytes]) -> Result<Registers, Frame> {
    let mut all = Registers::empty();
    for key in keys {
        if let Some(registers) = load(ctx, key)? {
            for (mine, theirs) in all.0.iter_mut().zip(registers.0) {
                *mine = (*mine).max(theirs);
            }
        }
    }
    Ok(all)
}

pub fn pfcount(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    match union(ctx, &args[1..]) {
        Ok(registers) => Frame::Integer(registers.count() as i64),
        Err(err) => err,
    }
}

pub fn pfmerge(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    match union(ctx, &args[1..]) {
        Ok(registers) => {
            store(ctx, &args[1], &registers);
            Frame::ok()
        }
        Err(err) => err,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sketches_round_trip_through_both_encodings() {
        let mut registers = Registers::empty();
        for i in 0..1000u32 {
            let (index, run) = pattern(&i.to_le_bytes());
            registers.0[index] = registers.0[index].max(run);
        }
        let dense = registers.to_dense();
        assert_eq!(dense.len(), 12304);
        let again = Registers::parse(&dense).expect("a sketch");
        assert_eq!(again.0, registers.0);
        let estimate = again.count();
        assert!((950..1050).contains(&estimate), "{estimate}");
        // Redis's empty sparse sketch: one XZERO of 16384.
        let mut empty = b"HYLL\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00".to_vec();
        empty.extend_from_slice(&[0x7F, 0xFF]);
        assert_eq!(Registers::parse(&empty).expect("sparse").count(), 0);
        assert!(Registers::parse(b"HYLLnope").is_err());
    }
}
