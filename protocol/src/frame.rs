//! The RESP value model shared by replies and the general decoder.

use bytes::Bytes;

/// Which protocol a connection speaks; `HELLO 2|3` switches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Protocol {
    #[default]
    Resp2,
    Resp3,
}

/// One RESP2 or RESP3 value. RESP3-only variants are downgraded by the encoder when the
/// connection speaks RESP2 (maps become flat arrays, doubles bulk strings, and so on).
#[derive(Clone, Debug, PartialEq)]
pub enum Frame {
    Simple(Bytes),
    Error(Bytes),
    Integer(i64),
    Bulk(Bytes),
    /// The null bulk string (`$-1` in RESP2, `_` in RESP3).
    Null,
    /// The null array (`*-1` in RESP2, `_` in RESP3), e.g. a timed-out BLPOP.
    NullArray,
    Array(Vec<Frame>),
    Double(f64),
    /// A double already written out (Redis's "human" form of a long double, as GEOPOS
    /// replies coordinates): `,text` in RESP3, a bulk string in RESP2. Never decoded.
    DoubleText(Bytes),
    Boolean(bool),
    BigNumber(Bytes),
    /// A verbatim string: three bytes of format (`txt`, `mkd`) and the text.
    Verbatim([u8; 3], Bytes),
    BulkError(Bytes),
    Map(Vec<(Frame, Frame)>),
    /// Pairs such as member and score: an array of 2-element arrays in RESP3, one flat array
    /// in RESP2 (ZRANGE … WITHSCORES, HRANDFIELD … WITHVALUES). Never decoded.
    Pairs(Vec<(Frame, Frame)>),
    Set(Vec<Frame>),
    Push(Vec<Frame>),
    /// A map in RESP3, an array of `[key, value]` arrays in RESP2 (XREAD's streams). Never
    /// decoded.
    Keyed(Vec<(Frame, Frame)>),
    /// Several replies to one command, sent one after another (SUBSCRIBE a b: one
    /// confirmation per channel). Never decoded.
    Several(Vec<Frame>),
    /// The reply was already encoded into the connection's output buffer by a local fast
    /// path (a GET copying straight from the stored value); encoding it writes nothing.
    Written,
}

impl Frame {
    /// The `+OK` reply.
    pub fn ok() -> Frame {
        Frame::Simple(Bytes::from_static(b"OK"))
    }

    pub fn simple(text: &'static str) -> Frame {
        Frame::Simple(Bytes::from_static(text.as_bytes()))
    }

    /// An error reply; `text` is the whole line, starting with its code (`ERR`, `WRONGTYPE`).
    pub fn error(text: impl Into<String>) -> Frame {
        Frame::Error(Bytes::from(text.into()))
    }

    /// A HELP reply: one simple string per line.
    pub fn lines(lines: &[&'static str]) -> Frame {
        Frame::Array(
            lines
                .iter()
                .map(|l| Frame::Simple(Bytes::from_static(l.as_bytes())))
                .collect(),
        )
    }

    pub fn static_error(text: &'static str) -> Frame {
        Frame::Error(Bytes::from_static(text.as_bytes()))
    }

    pub fn bulk(bytes: impl Into<Bytes>) -> Frame {
        Frame::Bulk(bytes.into())
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Frame::Error(_) | Frame::BulkError(_))
    }

    /// The bytes of a bulk or simple string, for clients reading replies.
    pub fn as_bytes(&self) -> Option<&Bytes> {
        match self {
            Frame::Bulk(b) | Frame::Simple(b) | Frame::Verbatim(_, b) => Some(b),
            _ => None,
        }
    }
}
