//! RDB's primitives, shared by the value codec (`rdb`) and the stream codec (`rdb_stream`):
//! lengths and strings (with Redis's integer and LZF string encodings), and the compact
//! containers Redis embeds as strings: listpacks, ziplists and intsets. Every read checks its
//! bounds; a count is checked against the bytes left before anything is allocated for it.

use bytes::Bytes;

/// Why a payload was refused, as RESTORE words it.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// Too short, a version from the future, or a checksum that does not match.
    VersionOrChecksum,
    /// The value inside does not parse (or is an empty collection, or repeats a member).
    BadFormat,
    /// A stream or module value: not read yet.
    Unsupported(&'static str),
}

/// RDB's length encoding.
pub(crate) fn put_len(out: &mut Vec<u8>, len: u64) {
    if len < 1 << 6 {
        out.push(len as u8);
    } else if len < 1 << 14 {
        out.push(0x40 | (len >> 8) as u8);
        out.push(len as u8);
    } else if len <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&len.to_be_bytes());
    }
}

pub(crate) fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    put_len(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// A cursor over a payload; every read checks bounds.
pub(crate) struct Reader<'a> {
    pub(crate) data: &'a [u8],
    pub(crate) pos: usize,
}

pub(crate) type Read<T> = Result<T, Refused>;
pub(crate) const BAD: Refused = Refused::BadFormat;

impl<'a> Reader<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Reader { data, pos: 0 }
    }

    /// Whether every byte was read.
    pub(crate) fn at_end(&self) -> bool {
        self.pos == self.data.len()
    }

    pub(crate) fn take(&mut self, n: usize) -> Read<&'a [u8]> {
        let end = self.pos.checked_add(n).ok_or(BAD)?;
        let bytes = self.data.get(self.pos..end).ok_or(BAD)?;
        self.pos = end;
        Ok(bytes)
    }

    pub(crate) fn byte(&mut self) -> Read<u8> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn left(&self) -> usize {
        self.data.len() - self.pos
    }

    /// A length, or `Err(encoding)` for a special string encoding (11xxxxxx).
    pub(crate) fn len_or_encoding(&mut self) -> Read<Result<u64, u8>> {
        let first = self.byte()?;
        Ok(match first >> 6 {
            0 => Ok(u64::from(first & 0x3f)),
            1 => Ok(u64::from(first & 0x3f) << 8 | u64::from(self.byte()?)),
            2 => match first {
                0x80 => Ok(u64::from(u32::from_be_bytes(
                    self.take(4)?.try_into().expect("4"),
                ))),
                0x81 => Ok(u64::from_be_bytes(self.take(8)?.try_into().expect("8"))),
                _ => return Err(BAD),
            },
            _ => Err(first & 0x3f),
        })
    }

    pub(crate) fn len(&mut self) -> Read<usize> {
        match self.len_or_encoding()? {
            Ok(len) => usize::try_from(len).map_err(|_| BAD),
            Err(_) => Err(BAD),
        }
    }

    /// A count of items of at least `min_bytes` each: more than the bytes left could hold
    /// is a corrupt payload (and would otherwise allocate without bound).
    pub(crate) fn count(&mut self, min_bytes: usize) -> Read<usize> {
        let n = self.len()?;
        if n.saturating_mul(min_bytes) > self.left() {
            return Err(BAD);
        }
        Ok(n)
    }

    pub(crate) fn string(&mut self) -> Read<Bytes> {
        match self.len_or_encoding()? {
            Ok(len) => {
                let len = usize::try_from(len).map_err(|_| BAD)?;
                Ok(Bytes::copy_from_slice(self.take(len)?))
            }
            Err(0) => Ok(int_bytes(i64::from(self.byte()? as i8))),
            Err(1) => Ok(int_bytes(i64::from(i16::from_le_bytes(
                self.take(2)?.try_into().expect("2"),
            )))),
            Err(2) => Ok(int_bytes(i64::from(i32::from_le_bytes(
                self.take(4)?.try_into().expect("4"),
            )))),
            Err(3) => {
                let compressed = self.len()?;
                let plain = self.len()?;
                let data = self.take(compressed)?;
                lzf_decompress(data, plain).map(Bytes::from)
            }
            Err(_) => Err(BAD),
        }
    }
}

pub(crate) fn int_bytes(n: i64) -> Bytes {
    Bytes::from(n.to_string())
}

pub(crate) fn le_int(bytes: &[u8]) -> i64 {
    // Sign-extends a little-endian integer of 1 to 8 bytes.
    let mut buf = [0u8; 8];
    buf[..bytes.len()].copy_from_slice(bytes);
    let shift = 64 - 8 * bytes.len() as u32;
    (i64::from_le_bytes(buf) << shift) >> shift
}

/// The entries of a ziplist (Redis ≤ 6.2's compact encoding).
pub(crate) fn ziplist(blob: &[u8]) -> Read<Vec<Bytes>> {
    let mut r = Reader {
        data: blob,
        pos: 10,
    };
    if blob.len() < 11
        || u32::from_le_bytes(blob[..4].try_into().expect("4")) as usize != blob.len()
    {
        return Err(BAD);
    }
    let mut out = Vec::new();
    loop {
        let first = r.byte()?;
        if first == 0xff {
            break;
        }
        // The previous entry's length: one byte, or 0xfe and four.
        if first == 0xfe {
            r.take(4)?;
        }
        let enc = r.byte()?;
        let entry = match enc >> 6 {
            0 => Bytes::copy_from_slice(r.take(usize::from(enc & 0x3f))?),
            1 => {
                let len = usize::from(enc & 0x3f) << 8 | usize::from(r.byte()?);
                Bytes::copy_from_slice(r.take(len)?)
            }
            2 => {
                let len = u32::from_be_bytes(r.take(4)?.try_into().expect("4")) as usize;
                Bytes::copy_from_slice(r.take(len)?)
            }
            _ => int_bytes(match enc {
                0xc0 => le_int(r.take(2)?),
                0xd0 => le_int(r.take(4)?),
                0xe0 => le_int(r.take(8)?),
                0xf0 => le_int(r.take(3)?),
                0xfe => le_int(r.take(1)?),
                0xf1..=0xfd => i64::from(enc & 0x0f) - 1,
                _ => return Err(BAD),
            }),
        };
        out.push(entry);
    }
    if r.pos != blob.len() {
        return Err(BAD);
    }
    Ok(out)
}

/// The entries of a listpack (Redis 7's compact encoding).
pub(crate) fn listpack(blob: &[u8]) -> Read<Vec<Bytes>> {
    if blob.len() < 7 || u32::from_le_bytes(blob[..4].try_into().expect("4")) as usize != blob.len()
    {
        return Err(BAD);
    }
    let mut r = Reader { data: blob, pos: 6 };
    let mut out = Vec::new();
    loop {
        let start = r.pos;
        let enc = r.byte()?;
        if enc == 0xff {
            break;
        }
        let entry = if enc & 0x80 == 0 {
            int_bytes(i64::from(enc & 0x7f))
        } else if enc & 0xc0 == 0x80 {
            Bytes::copy_from_slice(r.take(usize::from(enc & 0x3f))?)
        } else if enc & 0xe0 == 0xc0 {
            let raw = u16::from(enc & 0x1f) << 8 | u16::from(r.byte()?);
            // 13-bit two's complement.
            int_bytes(i64::from(((raw << 3) as i16) >> 3))
        } else if enc & 0xf0 == 0xe0 {
            let len = usize::from(enc & 0x0f) << 8 | usize::from(r.byte()?);
            Bytes::copy_from_slice(r.take(len)?)
        } else {
            match enc {
                0xf0 => {
                    let len = u32::from_le_bytes(r.take(4)?.try_into().expect("4")) as usize;
                    Bytes::copy_from_slice(r.take(len)?)
                }
                0xf1 => int_bytes(le_int(r.take(2)?)),
                0xf2 => int_bytes(le_int(r.take(3)?)),
                0xf3 => int_bytes(le_int(r.take(4)?)),
                0xf4 => int_bytes(le_int(r.take(8)?)),
                _ => return Err(BAD),
            }
        };
        // The back-length: how many bytes the entry took, in 1 to 5 bytes.
        let size = r.pos - start;
        let backlen = backlen_size(size);
        r.take(backlen)?;
        out.push(entry);
    }
    if r.pos != blob.len() {
        return Err(BAD);
    }
    Ok(out)
}

/// How many bytes a listpack entry's back-length takes, for an entry of `size` bytes (Redis's
/// `lpEncodeBacklen`, whose bounds are one short of the powers of two).
pub(crate) fn backlen_size(size: usize) -> usize {
    match size {
        0..=127 => 1,
        128..=16_382 => 2,
        16_383..=2_097_150 => 3,
        2_097_151..=268_435_454 => 4,
        _ => 5,
    }
}

/// The members of an intset: a width (2, 4 or 8 bytes), a count, the sorted integers.
pub(crate) fn intset(blob: &[u8]) -> Read<Vec<Bytes>> {
    let mut r = Reader { data: blob, pos: 0 };
    let width = u32::from_le_bytes(r.take(4)?.try_into().expect("4")) as usize;
    let count = u32::from_le_bytes(r.take(4)?.try_into().expect("4")) as usize;
    if !matches!(width, 2 | 4 | 8) || count.saturating_mul(width) != r.left() {
        return Err(BAD);
    }
    (0..count)
        .map(|_| Ok(int_bytes(le_int(r.take(width)?))))
        .collect()
}

/// LZF decompression (the format Redis compresses strings with), to exactly `plain` bytes.
pub(crate) fn lzf_decompress(data: &[u8], plain: usize) -> Read<Vec<u8>> {
    let mut out: Vec<u8> = Vec::with_capacity(plain.min(data.len().saturating_mul(64)));
    let mut i = 0;
    while i < data.len() {
        let ctrl = usize::from(data[i]);
        i += 1;
        if ctrl < 32 {
            // A literal run of ctrl + 1 bytes.
            let run = data.get(i..i + ctrl + 1).ok_or(BAD)?;
            out.extend_from_slice(run);
            i += ctrl + 1;
        } else {
            // A back reference: length (3 bits, extended by a byte when 7) + 2, offset.
            let mut len = ctrl >> 5;
            if len == 7 {
                len += usize::from(*data.get(i).ok_or(BAD)?);
                i += 1;
            }
            let low = usize::from(*data.get(i).ok_or(BAD)?);
            i += 1;
            let back = ((ctrl & 0x1f) << 8) + low + 1;
            let from = out.len().checked_sub(back).ok_or(BAD)?;
            for k in 0..len + 2 {
                let b = out[from + k];
                out.push(b);
            }
        }
        if out.len() > plain {
            return Err(BAD);
        }
    }
    if out.len() != plain {
        return Err(BAD);
    }
    Ok(out)
}
