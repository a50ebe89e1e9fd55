//! Protocol errors. Each one closes the connection after its `-ERR Protocol error: ...` reply,
//! as Redis does.

use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProtocolError {
    InvalidMultibulkLength,
    InvalidBulkLength,
    /// A client that has not authenticated sent more arguments than it may (Redis: 10).
    UnauthenticatedMultibulkLength,
    /// A client that has not authenticated sent a longer argument than it may (16 KiB).
    UnauthenticatedBulkLength,
    TooBigInline,
    TooBigCountString,
    UnbalancedQuotes,
    /// A request array element was not a bulk string: the byte seen.
    ExpectedBulk(u8),
    /// A reply frame started with a byte that is no RESP type.
    UnknownType(u8),
    /// A header or scalar that does not parse (`:abc`, `#x`, a bulk without its CRLF).
    Malformed(&'static str),
    TooDeep,
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Protocol error: ")?;
        match self {
            ProtocolError::InvalidMultibulkLength => f.write_str("invalid multibulk length"),
            ProtocolError::InvalidBulkLength => f.write_str("invalid bulk length"),
            ProtocolError::UnauthenticatedMultibulkLength => {
                f.write_str("unauthenticated multibulk length")
            }
            ProtocolError::UnauthenticatedBulkLength => f.write_str("unauthenticated bulk length"),
            ProtocolError::TooBigInline => f.write_str("too big inline request"),
            ProtocolError::TooBigCountString => f.write_str("too big count string"),
            ProtocolError::UnbalancedQuotes => f.write_str("unbalanced quotes in request"),
            ProtocolError::ExpectedBulk(b) => {
                write!(f, "expected '$', got '{}'", char::from(*b).escape_default())
            }
            ProtocolError::UnknownType(b) => {
                write!(f, "unknown type byte '{}'", char::from(*b).escape_default())
            }
            ProtocolError::Malformed(what) => f.write_str(what),
            ProtocolError::TooDeep => f.write_str("nesting too deep"),
        }
    }
}

impl std::error::Error for ProtocolError {}

impl ProtocolError {
    /// The full error reply line, without the leading `-` and trailing CRLF.
    pub fn reply_text(&self) -> String {
        format!("ERR {self}")
    }
}
