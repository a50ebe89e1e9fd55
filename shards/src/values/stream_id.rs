//! A stream entry's id (`ms-seq`): parsing, ordering, the next and previous ids. Its own
//! leaf, because both the stream (`stream`) and its radix nodes (`stream_nodes`) key on it.

use std::fmt;

use bytes::Bytes;

/// A stream entry id: milliseconds and a sequence number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId {
    pub ms: u64,
    pub seq: u64,
}

impl StreamId {
    pub const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    pub const MAX: StreamId = StreamId {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    /// The id right after this one, if there is one.
    pub fn next(self) -> Option<StreamId> {
        if self.seq < u64::MAX {
            Some(StreamId {
                ms: self.ms,
                seq: self.seq + 1,
            })
        } else if self.ms < u64::MAX {
            Some(StreamId {
                ms: self.ms + 1,
                seq: 0,
            })
        } else {
            None
        }
    }

    /// The id right before this one, if there is one.
    pub fn prev(self) -> Option<StreamId> {
        if self.seq > 0 {
            Some(StreamId {
                ms: self.ms,
                seq: self.seq - 1,
            })
        } else if self.ms > 0 {
            Some(StreamId {
                ms: self.ms - 1,
                seq: u64::MAX,
            })
        } else {
            None
        }
    }

    /// Parses `ms-seq`, or `ms` alone with `missing_seq` as its sequence.
    pub fn parse(text: &[u8], missing_seq: u64) -> Option<StreamId> {
        let text = std::str::from_utf8(text).ok()?;
        let (ms, seq) = match text.split_once('-') {
            Some((ms, seq)) => (ms, Some(seq)),
            None => (text, None),
        };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(ms) || seq.is_some_and(|s| !digits(s)) {
            return None;
        }
        Some(StreamId {
            ms: ms.parse().ok()?,
            seq: match seq {
                Some(seq) => seq.parse().ok()?,
                None => missing_seq,
            },
        })
    }

    pub fn to_bytes(self) -> Bytes {
        Bytes::from(self.to_string())
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}
