//! The primitive encodings of journal payloads: LEB128 varints, length-prefixed bytes and
//! little-endian doubles, and a reader that answers every malformed input with an error
//! (never a panic): a payload passed its checksum, but a file from another version or a bug
//! must still not crash the start.

use bytes::Bytes;

/// Why a payload could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub &'static str);

pub type Decoded<T> = Result<T, DecodeError>;

pub fn put_u64(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_u64(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

pub fn put_f64(out: &mut Vec<u8>, v: f64) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub fn put_opt_bytes(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => out.push(0),
        Some(b) => {
            out.push(1);
            put_bytes(out, b);
        }
    }
}

pub fn put_opt_u64(out: &mut Vec<u8>, v: Option<u64>) {
    match v {
        None => out.push(0),
        Some(v) => {
            out.push(1);
            put_u64(out, v);
        }
    }
}

/// Reads a payload front to back. Byte strings are cut from the payload's `Bytes` without
/// copying.
pub struct Reader {
    buf: Bytes,
    at: usize,
}

impl Reader {
    pub fn new(buf: Bytes) -> Self {
        Reader { buf, at: 0 }
    }

    /// Where the reader is, to come back to with [`Reader::rewind`].
    pub fn position(&self) -> usize {
        self.at
    }

    pub fn rewind(&mut self, at: usize) {
        self.at = at;
    }

    /// A length-prefixed byte string as its range in [`Reader::buf`]: read without
    /// taking a reference to the buffer (a `Bytes` slice costs two atomic operations).
    pub fn range(&mut self) -> Decoded<std::ops::Range<usize>> {
        let n = self.count()?;
        let range = self.at..self.at + n;
        self.at += n;
        Ok(range)
    }

    pub fn buf(&self) -> &[u8] {
        &self.buf
    }

    pub fn is_done(&self) -> bool {
        self.at >= self.buf.len()
    }

    pub fn u8(&mut self) -> Decoded<u8> {
        let b = *self.buf.get(self.at).ok_or(DecodeError("truncated"))?;
        self.at += 1;
        Ok(b)
    }

    pub fn u64(&mut self) -> Decoded<u64> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DecodeError("varint too long"))
    }

    /// A count or length, checked against the bytes left (each item takes at least one).
    pub fn count(&mut self) -> Decoded<usize> {
        let n = self.u64()?;
        if n > (self.buf.len() - self.at) as u64 {
            return Err(DecodeError("length past the end"));
        }
        Ok(n as usize)
    }

    pub fn u32(&mut self) -> Decoded<u32> {
        u32::try_from(self.u64()?).map_err(|_| DecodeError("number out of range"))
    }

    /// A length-prefixed byte string, copied: what a decoded value, key, payload or name
    /// keeps for good must not hold on to the whole record or snapshot part it came from
    /// (a slice would keep a 1 MiB part alive for one surviving list element).
    pub fn bytes(&mut self) -> Decoded<Bytes> {
        let range = self.range()?;
        Ok(Bytes::copy_from_slice(&self.buf[range]))
    }

    /// A length-prefixed byte string as a slice of the buffer, for what is used and
    /// dropped while the record is replayed (a command's arguments).
    pub fn shared(&mut self) -> Decoded<Bytes> {
        let range = self.range()?;
        Ok(self.buf.slice(range))
    }

    pub fn f64(&mut self) -> Decoded<f64> {
        let end = self.at + 8;
        let raw = self.buf.get(self.at..end).ok_or(DecodeError("truncated"))?;
        self.at = end;
        Ok(f64::from_le_bytes(raw.try_into().expect("8 bytes")))
    }

    pub fn flag(&mut self) -> Decoded<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError("bad flag")),
        }
    }

    pub fn opt_bytes(&mut self) -> Decoded<Option<Bytes>> {
        Ok(if self.flag()? {
            Some(self.bytes()?)
        } else {
            None
        })
    }

    pub fn opt_u64(&mut self) -> Decoded<Option<u64>> {
        Ok(if self.flag()? {
            Some(self.u64()?)
        } else {
            None
        })
    }

    /// A list of byte strings, each copied (see [`Reader::bytes`]).
    pub fn bytes_list(&mut self) -> Decoded<Vec<Bytes>> {
        let n = self.count()?;
        (0..n).map(|_| self.bytes()).collect()
    }

    /// A list of byte strings as slices of the buffer (see [`Reader::shared`]).
    pub fn shared_list(&mut self) -> Decoded<Vec<Bytes>> {
        let n = self.count()?;
        (0..n).map(|_| self.shared()).collect()
    }
}

pub fn put_bytes_list<B: AsRef<[u8]>>(out: &mut Vec<u8>, list: &[B]) {
    put_u64(out, list.len() as u64);
    for b in list {
        put_bytes(out, b.as_ref());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varints_and_bytes_round_trip(v in any::<u64>(), b in proptest::collection::vec(any::<u8>(), 0..64), f in any::<f64>()) {
            let mut out = Vec::new();
            put_u64(&mut out, v);
            put_bytes(&mut out, &b);
            put_f64(&mut out, f);
            put_opt_u64(&mut out, Some(v));
            let mut r = Reader::new(Bytes::from(out));
            prop_assert_eq!(r.u64().unwrap(), v);
            prop_assert_eq!(&r.bytes().unwrap()[..], &b[..]);
            prop_assert_eq!(r.f64().unwrap().to_bits(), f.to_bits());
            prop_assert_eq!(r.opt_u64().unwrap(), Some(v));
            prop_assert!(r.is_done());
        }

        #[test]
        fn any_bytes_decode_without_panic(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut r = Reader::new(Bytes::from(b));
            while !r.is_done() {
                if r.bytes().is_err() { break; }
            }
        }
    }
}
