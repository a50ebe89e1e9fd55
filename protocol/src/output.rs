//! `Output`: a connection's queued reply bytes, with large values referenced instead of
//! copied. A bulk payload of `SPLICE_BYTES_MIN` or more (a long string stored as shared
//! `Bytes`) is kept as a reference to the stored bytes and goes out in the same vectored send
//! as the bytes around it, so a GET of a 1 MiB value copies nothing in user space.
//!
//! `Output` dereferences to its byte vector, so every encoder that writes into a `Vec<u8>`
//! writes into it unchanged; only `splice` (and `encode_output`) add references. The inherent
//! `len`, `is_empty` and `clear` count and clear the spliced payloads too.

use std::ops::{Deref, DerefMut};

use bytes::Bytes;

use crate::encode::{encode, header};
use crate::{Frame, Protocol};

/// The smallest payload worth referencing rather than copying: below it, a copy costs less
/// than an extra iovec and the bookkeeping.
pub const SPLICE_BYTES_MIN: usize = 16 * 1024;

/// A position in an [`Output`] (see [`Output::mark`]).
#[derive(Clone, Copy, Debug)]
pub struct OutputMark {
    bytes: usize,
    spliced: usize,
}

#[derive(Default, Debug)]
pub struct Output {
    bytes: Vec<u8>,
    /// Referenced payloads: each goes right after `bytes[..offset]`, offsets non-decreasing.
    spliced: Vec<(usize, Bytes)>,
    spliced_bytes: usize,
}

impl Deref for Output {
    type Target = Vec<u8>;

    fn deref(&self) -> &Vec<u8> {
        &self.bytes
    }
}

impl DerefMut for Output {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.bytes
    }
}

impl Output {
    /// An empty output with room for `bytes` of replies (no growth steps for a small batch).
    pub fn with_capacity(bytes: usize) -> Output {
        Output {
            bytes: Vec::with_capacity(bytes),
            ..Output::default()
        }
    }

    /// Appends `payload`: referenced when it is large, copied otherwise.
    pub fn splice(&mut self, payload: &Bytes) {
        if payload.len() < SPLICE_BYTES_MIN {
            self.bytes.extend_from_slice(payload);
        } else {
            self.spliced_bytes += payload.len();
            self.spliced.push((self.bytes.len(), payload.clone()));
        }
    }

    /// Every queued byte, copied or referenced.
    pub fn len(&self) -> usize {
        self.bytes.len() + self.spliced_bytes
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn clear(&mut self) {
        self.bytes.clear();
        self.spliced.clear();
        self.spliced_bytes = 0;
    }

    /// Where the output ends now, to [`Output::rewind`] to (a reply that failed half-way).
    pub fn mark(&self) -> OutputMark {
        OutputMark {
            bytes: self.bytes.len(),
            spliced: self.spliced.len(),
        }
    }

    /// Drops everything queued after `mark`.
    pub fn rewind(&mut self, mark: OutputMark) {
        self.bytes.truncate(mark.bytes);
        for (_, payload) in self.spliced.drain(mark.spliced.min(self.spliced.len())..) {
            self.spliced_bytes -= payload.len();
        }
    }

    /// True when some payload is referenced (the send must be vectored).
    pub fn has_spliced(&self) -> bool {
        !self.spliced.is_empty()
    }

    /// Moves `other`'s output after this one's, leaving `other` empty with room to reuse:
    /// when this one is empty the two trade places, and nothing is copied.
    pub fn take_from(&mut self, other: &mut Output) {
        if self.is_empty() && !other.is_empty() {
            std::mem::swap(self, other);
            other.clear();
        } else {
            self.copy_from(other);
        }
    }

    /// Moves `other`'s contents to the end of this output.
    pub fn append(&mut self, mut other: Output) {
        self.copy_from(&mut other);
    }

    /// Copies `other`'s bytes after this output's and moves its references; empties it.
    fn copy_from(&mut self, other: &mut Output) {
        let base = self.bytes.len();
        self.bytes.extend_from_slice(&other.bytes);
        self.spliced_bytes += other.spliced_bytes;
        self.spliced.extend(
            other
                .spliced
                .drain(..)
                .map(|(offset, payload)| (base + offset, payload)),
        );
        other.clear();
    }

    /// Calls `f` with each contiguous piece of the output in order, after skipping its first
    /// `skip` bytes (the part already sent), until `f` returns false.
    pub fn for_each_slice<'a>(&'a self, skip: usize, mut f: impl FnMut(&'a [u8]) -> bool) {
        let mut skip = skip;
        let mut emit = |piece: &'a [u8]| -> bool {
            if skip >= piece.len() {
                skip -= piece.len();
                return true;
            }
            let rest = &piece[skip..];
            skip = 0;
            rest.is_empty() || f(rest)
        };
        let mut from = 0;
        for (offset, payload) in &self.spliced {
            if !emit(&self.bytes[from..*offset]) || !emit(payload) {
                return;
            }
            from = *offset;
        }
        emit(&self.bytes[from..]);
    }
}

/// Appends a bulk string reply whose payload is referenced when large.
pub fn encode_bulk_shared(out: &mut Output, payload: &Bytes) {
    header(out, b'$', payload.len());
    out.splice(payload);
    out.extend_from_slice(b"\r\n");
}

/// Like [`encode`], but a top-level bulk reply's payload is referenced when large.
pub fn encode_output(out: &mut Output, frame: &Frame, protocol: Protocol) {
    match frame {
        Frame::Bulk(payload) if payload.len() >= SPLICE_BYTES_MIN => {
            encode_bulk_shared(out, payload)
        }
        frame => encode(out, frame, protocol),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flatten(out: &Output, skip: usize) -> Vec<u8> {
        let mut all = Vec::new();
        out.for_each_slice(skip, |piece| {
            all.extend_from_slice(piece);
            true
        });
        all
    }

    #[test]
    fn take_from_moves_everything_in_order_and_leaves_the_other_empty() {
        let big = Bytes::from(vec![b'y'; SPLICE_BYTES_MIN]);
        let batch = || {
            let mut out = Output::with_capacity(64);
            out.extend_from_slice(b":1\r\n");
            encode_bulk_shared(&mut out, &big);
            out
        };
        let expected_batch = flatten(&batch(), 0);

        // Into an empty output: the two trade places.
        let mut empty = Output::default();
        let mut other = batch();
        empty.take_from(&mut other);
        assert_eq!(flatten(&empty, 0), expected_batch);
        assert!(other.is_empty() && other.spliced.is_empty());

        // Behind replies already there: copied after them, references moved.
        let mut held = Output::default();
        held.extend_from_slice(b"+OK\r\n");
        let mut other = batch();
        held.take_from(&mut other);
        assert_eq!(
            flatten(&held, 0),
            [b"+OK\r\n".as_slice(), &expected_batch].concat()
        );
        assert_eq!(held.len(), 5 + expected_batch.len());
        assert!(other.is_empty() && other.spliced.is_empty());
        assert!(other.capacity() >= 64, "the emptied one keeps its room");
    }

    #[test]
    fn large_payloads_are_referenced_and_read_back_in_order() {
        let big = Bytes::from(vec![b'x'; SPLICE_BYTES_MIN]);
        let small = Bytes::from_static(b"tiny");
        let mut out = Output::default();
        out.extend_from_slice(b"+OK\r\n");
        encode_bulk_shared(&mut out, &big);
        encode_bulk_shared(&mut out, &small);
        encode_output(&mut out, &Frame::Bulk(big.clone()), Protocol::Resp2);
        assert_eq!(
            out.spliced.len(),
            2,
            "only the large payloads are referenced"
        );

        let mut plain = Vec::new();
        plain.extend_from_slice(b"+OK\r\n");
        for payload in [&big, &small, &big] {
            crate::encode_bulk(&mut plain, payload);
        }
        assert_eq!(out.len(), plain.len());
        for skip in [
            0,
            1,
            5,
            9,
            10,
            5 + 8 + SPLICE_BYTES_MIN,
            plain.len() - 1,
            plain.len(),
        ] {
            assert_eq!(flatten(&out, skip), plain[skip..], "skip {skip}");
        }
    }

    #[test]
    fn append_shifts_offsets_and_clear_empties() {
        let big = Bytes::from(vec![b'y'; SPLICE_BYTES_MIN * 2]);
        let mut a = Output::default();
        a.extend_from_slice(b"head");
        let mut b = Output::default();
        b.extend_from_slice(b"mid");
        encode_bulk_shared(&mut b, &big);
        a.append(b);
        let mut plain = b"headmid".to_vec();
        crate::encode_bulk(&mut plain, &big);
        assert_eq!(flatten(&a, 0), plain);
        assert!(a.has_spliced());
        a.clear();
        assert!(a.is_empty() && !a.has_spliced());
    }

    #[test]
    fn for_each_slice_stops_when_asked() {
        let big = Bytes::from(vec![b'z'; SPLICE_BYTES_MIN]);
        let mut out = Output::default();
        out.extend_from_slice(b"a");
        encode_bulk_shared(&mut out, &big);
        let mut pieces = 0;
        out.for_each_slice(0, |_| {
            pieces += 1;
            pieces < 2
        });
        assert_eq!(pieces, 2);
    }
}
