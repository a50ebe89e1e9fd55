//! The request decoder: multibulk (`*N\r\n$len\r\n...`) and inline commands, as argument lists.
//!
//! It keeps its place between reads: a header line arriving in pieces is searched only from
//! where the last search stopped, finished arguments are split off the buffer as zero-copy
//! [`Bytes`], and a bulk body is waited for by length without looking at it.

use bytes::{Buf, Bytes, BytesMut};

use crate::inline::split_inline;
use crate::line::{line_end, parse_i64, parse_length, terminator_len};
use crate::{Limits, ProtocolError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Between commands.
    Start,
    /// Inside a multibulk, `remaining` arguments still to come. The first `skip` bytes of
    /// the buffer are header lines already read but not yet split off: they leave with the
    /// next argument, so a header costs no buffer operation of its own.
    Headers { remaining: usize, skip: usize },
    /// A `$len` header was read; waiting for `len` bytes and CRLF after `skip` bytes.
    Body {
        len: usize,
        remaining: usize,
        skip: usize,
    },
}

#[derive(Debug)]
pub struct CommandDecoder {
    /// The configured limits, for an authenticated client.
    configured: Limits,
    /// The limits in force now: `configured`, or the tight pre-AUTH ones. Kept as one
    /// struct so the per-argument checks do not branch on who the client is.
    limits: Limits,
    /// The client has not authenticated: tight limits apply (`set_unauthenticated`).
    unauthenticated: bool,
    state: State,
    args: Vec<Bytes>,
    scanned: usize,
}

impl Default for CommandDecoder {
    fn default() -> Self {
        CommandDecoder::new(Limits::default())
    }
}

impl CommandDecoder {
    pub fn new(limits: Limits) -> Self {
        CommandDecoder {
            configured: limits,
            limits,
            unauthenticated: false,
            state: State::Start,
            args: Vec::new(),
            scanned: 0,
        }
    }

    /// Bytes still missing before the bulk being read is complete, so the caller can size
    /// its read buffer once for a large value.
    pub fn bytes_wanted(&self, buffered: usize) -> usize {
        match self.state {
            State::Body { len, skip, .. } => (skip + len + 2).saturating_sub(buffered),
            _ => 0,
        }
    }

    /// Applies (or lifts) the tight limits for a client that has not authenticated: at most
    /// `UNAUTHENTICATED_ARGS_MAX` arguments of `UNAUTHENTICATED_BULK_BYTES_MAX` bytes each,
    /// as Redis, so a stranger cannot make the server buffer 512 MiB before AUTH. Call
    /// between commands.
    pub fn set_unauthenticated(&mut self, on: bool) {
        self.unauthenticated = on;
        self.limits = if on {
            Limits {
                array_len_max: crate::limits::UNAUTHENTICATED_ARGS_MAX,
                bulk_bytes_max: crate::limits::UNAUTHENTICATED_BULK_BYTES_MAX,
                inline_bytes_max: crate::limits::UNAUTHENTICATED_BULK_BYTES_MAX,
                ..self.configured
            }
        } else {
            self.configured
        };
    }

    /// True when no command is partly decoded.
    pub fn is_idle(&self) -> bool {
        self.state == State::Start && self.scanned == 0
    }

    /// Decodes the next whole command from the front of `buf`, consuming its bytes. Returns
    /// `Ok(None)` when more bytes are needed. After an error the connection must be closed.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        let mut args = Vec::new();
        Ok(self.decode_into(buf, &mut args)?.then_some(args))
    }

    /// Like [`CommandDecoder::decode`], but hands the arguments over in `args` (cleared
    /// first) and keeps the vector it had: a caller that reuses `args` and clears it after
    /// each command decodes with no allocation per command.
    pub fn decode_into(
        &mut self,
        buf: &mut BytesMut,
        args: &mut Vec<Bytes>,
    ) -> Result<bool, ProtocolError> {
        loop {
            match self.state {
                State::Start => {
                    if buf.is_empty() {
                        return Ok(false);
                    }
                    if buf[0] == b'*' {
                        let Some((count, header_len)) = self.header(buf, 0)? else {
                            return Ok(false);
                        };
                        // `*0` and any negative count are empty requests: Redis skips them.
                        if count > self.limits.array_len_max as i64 {
                            return Err(if self.unauthenticated {
                                ProtocolError::UnauthenticatedMultibulkLength
                            } else {
                                ProtocolError::InvalidMultibulkLength
                            });
                        }
                        if count > 0 {
                            let count = count as usize;
                            self.args.clear();
                            self.args.reserve(count.min(64));
                            self.state = State::Headers {
                                remaining: count,
                                skip: header_len,
                            };
                        } else {
                            buf.advance(header_len);
                        }
                    } else {
                        match self.inline(buf)? {
                            None => return Ok(false),
                            Some(words) if words.is_empty() => continue,
                            Some(words) => {
                                *args = words;
                                return Ok(true);
                            }
                        }
                    }
                }
                State::Headers { remaining: 0, .. } => {
                    self.state = State::Start;
                    args.clear();
                    std::mem::swap(&mut self.args, args);
                    return Ok(true);
                }
                State::Headers { remaining, skip } => {
                    if buf.len() <= skip {
                        return Ok(false);
                    }
                    if buf[skip] != b'$' {
                        return Err(ProtocolError::ExpectedBulk(buf[skip]));
                    }
                    let Some((len, header_len)) = self.header(buf, skip)? else {
                        return Ok(false);
                    };
                    if len < 0 {
                        return Err(ProtocolError::InvalidBulkLength);
                    }
                    if len as usize > self.limits.bulk_bytes_max {
                        return Err(if self.unauthenticated {
                            ProtocolError::UnauthenticatedBulkLength
                        } else {
                            ProtocolError::InvalidBulkLength
                        });
                    }
                    self.state = State::Body {
                        len: len as usize,
                        remaining,
                        skip: skip + header_len,
                    };
                }
                State::Body {
                    len,
                    remaining,
                    skip,
                } => {
                    let end = skip + len;
                    if buf.len() < end + 2 {
                        return Ok(false);
                    }
                    if &buf[end..end + 2] != b"\r\n" {
                        return Err(ProtocolError::Malformed("bulk string not terminated"));
                    }
                    // One split takes the pending headers, the body and its CRLF; the
                    // argument is then narrowed to the body, which only moves its pointers
                    // (advancing the shared read buffer per header cost ~25% of decoding).
                    let mut arg = buf.split_to(end + 2);
                    arg.truncate(end);
                    let mut arg = arg.freeze();
                    arg.advance(skip);
                    self.args.push(arg);
                    self.state = State::Headers {
                        remaining: remaining - 1,
                        skip: 0,
                    };
                }
            }
        }
    }

    /// Reads the `*n` or `$n` header line starting at `from`, without consuming it: returns
    /// its value and its length with the terminator. `None` when incomplete.
    fn header(&mut self, buf: &[u8], from: usize) -> Result<Option<(i64, usize)>, ProtocolError> {
        let buf = &buf[from..];
        let kind = buf[0];
        let Some(end) = line_end(buf, &mut self.scanned)? else {
            return Ok(None);
        };
        let err = if kind == b'*' {
            ProtocolError::InvalidMultibulkLength
        } else {
            ProtocolError::InvalidBulkLength
        };
        let digits = &buf[1..end];
        let value = if kind == b'*' {
            parse_i64(digits).ok_or(err)?
        } else {
            parse_length(digits, err)?
        };
        Ok(Some((value, end + terminator_len(buf, end))))
    }

    fn inline(&mut self, buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        let from = self.scanned;
        let Some(offset) = memchr::memchr(b'\n', &buf[from..]) else {
            if buf.len() > self.limits.inline_bytes_max {
                return Err(ProtocolError::TooBigInline);
            }
            self.scanned = buf.len();
            return Ok(None);
        };
        let newline = from + offset;
        if newline > self.limits.inline_bytes_max {
            return Err(ProtocolError::TooBigInline);
        }
        let line = buf.split_to(newline + 1);
        self.scanned = 0;
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        let words = split_inline(text)?;
        if self.unauthenticated && words.len() > crate::limits::UNAUTHENTICATED_ARGS_MAX {
            return Err(ProtocolError::UnauthenticatedMultibulkLength);
        }
        Ok(Some(words))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(input: &[u8]) -> Result<Vec<Vec<Bytes>>, ProtocolError> {
        let mut decoder = CommandDecoder::default();
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(args) = decoder.decode(&mut buf)? {
            out.push(args);
        }
        Ok(out)
    }

    #[test]
    fn decodes_pipelined_multibulk_and_inline() {
        let cmds =
            decode_all(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\n\r\n*1\r\n$4\r\nPING\r\n").unwrap();
        assert_eq!(cmds.len(), 3);
        assert_eq!(cmds[0], vec![Bytes::from("GET"), Bytes::from("k")]);
        assert_eq!(cmds[1], vec![Bytes::from("PING")]);
    }

    #[test]
    fn resumes_byte_by_byte() {
        let input = b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n";
        let mut decoder = CommandDecoder::default();
        let mut buf = BytesMut::new();
        let mut got = None;
        for (i, &b) in input.iter().enumerate() {
            buf.extend_from_slice(&[b]);
            let r = decoder.decode(&mut buf).unwrap();
            if i + 1 < input.len() {
                assert!(r.is_none(), "complete too early at {i}");
            } else {
                got = r;
            }
        }
        assert_eq!(got.unwrap()[2], Bytes::from("value"));
        assert!(decoder.is_idle());
    }

    #[test]
    fn rejects_bad_lengths_with_redis_texts() {
        let err = |input: &[u8]| decode_all(input).unwrap_err().to_string();
        assert_eq!(
            decode_all(b"*-5\r\n*0\r\nPING\r\n").unwrap(),
            vec![vec![Bytes::from("PING")]]
        );
        assert_eq!(
            err(b"*99999999999\r\n"),
            "Protocol error: invalid multibulk length"
        );
        assert_eq!(err(b"*1\r\n$-3\r\n"), "Protocol error: invalid bulk length");
        assert_eq!(
            err(b"*1\r\n$999999999999\r\n"),
            "Protocol error: invalid bulk length"
        );
        assert_eq!(
            err(b"*1\r\n*1\r\n"),
            "Protocol error: expected '$', got '*'"
        );
        assert_eq!(err(b"*x\r\n"), "Protocol error: invalid multibulk length");
        assert_eq!(
            err(b"*1\r\n$1\r\nab\r\n"),
            "Protocol error: bulk string not terminated"
        );
    }

    #[test]
    fn bounds_unterminated_inline_and_headers() {
        let long = vec![b'a'; INLINE_LIMIT_PLUS_ONE];
        assert_eq!(decode_all(&long).unwrap_err(), ProtocolError::TooBigInline);
        let mut header = b"*1".to_vec();
        header.extend(std::iter::repeat_n(b'1', crate::LINE_BYTES_MAX + 1));
        assert_eq!(
            decode_all(&header).unwrap_err(),
            ProtocolError::TooBigCountString
        );
    }
    const INLINE_LIMIT_PLUS_ONE: usize = crate::INLINE_BYTES_MAX + 1;

    #[test]
    fn arguments_are_views_of_the_read_buffer() {
        let mut buf = BytesMut::from(&b"*1\r\n$5\r\nhello\r\n"[..]);
        let start = buf.as_ptr() as usize;
        let args = CommandDecoder::default().decode(&mut buf).unwrap().unwrap();
        assert_eq!(args[0].as_ptr() as usize, start + 8);
    }

    #[test]
    fn unauthenticated_clients_get_tight_limits_until_lifted() {
        let mut decoder = CommandDecoder::default();
        decoder.set_unauthenticated(true);
        let mut buf = BytesMut::from(&b"*11\r\n"[..]);
        assert_eq!(
            decoder.decode(&mut buf).unwrap_err(),
            ProtocolError::UnauthenticatedMultibulkLength
        );
        let mut decoder = CommandDecoder::default();
        decoder.set_unauthenticated(true);
        let mut buf = BytesMut::from(&b"*2\r\n$4\r\nAUTH\r\n$16385\r\n"[..]);
        assert_eq!(
            decoder.decode(&mut buf).unwrap_err(),
            ProtocolError::UnauthenticatedBulkLength
        );
        let mut decoder = CommandDecoder::default();
        decoder.set_unauthenticated(true);
        let mut buf = BytesMut::from(&b"a b c d e f g h i j k\r\n"[..]);
        assert_eq!(
            decoder.decode(&mut buf).unwrap_err(),
            ProtocolError::UnauthenticatedMultibulkLength
        );
        let mut decoder = CommandDecoder::default();
        decoder.set_unauthenticated(true);
        let mut buf = BytesMut::from(&b"*2\r\n$4\r\nAUTH\r\n$6\r\nsecret\r\n"[..]);
        assert_eq!(decoder.decode(&mut buf).unwrap().unwrap().len(), 2);
        decoder.set_unauthenticated(false);
        let mut big = b"*12\r\n".to_vec();
        for _ in 0..12 {
            big.extend_from_slice(b"$20000\r\n");
            big.extend_from_slice(&[b'x'; 20000]);
            big.extend_from_slice(b"\r\n");
        }
        let mut buf = BytesMut::from(&big[..]);
        assert_eq!(decoder.decode(&mut buf).unwrap().unwrap().len(), 12);
    }
}
