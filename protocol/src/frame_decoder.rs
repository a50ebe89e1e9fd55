//! The general RESP2/RESP3 frame decoder, for reading replies and pushes.
//!
//! Iterative: aggregates under construction sit on an explicit stack bounded by
//! [`crate::NESTING_DEPTH_MAX`], so hostile nesting cannot overflow the thread's stack.
//! Resumable: finished leaves are split off the buffer at once and partial lines are never
//! rescanned. Attributes (`|`) are decoded and dropped, as most clients do.

use bytes::{Buf, Bytes, BytesMut};

use crate::line::{line_end, parse_i64, parse_length, terminator_len};
use crate::{Frame, Limits, ProtocolError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AggregateKind {
    Array,
    Map,
    Set,
    Push,
    Attribute,
}

#[derive(Debug)]
struct Pending {
    kind: AggregateKind,
    remaining: usize,
    items: Vec<Frame>,
}

#[derive(Debug, Clone, Copy)]
enum BulkKind {
    Bulk,
    Error,
    Verbatim,
}

#[derive(Debug, Default)]
pub struct FrameDecoder {
    limits: Limits,
    stack: Vec<Pending>,
    body: Option<(BulkKind, usize)>,
    scanned: usize,
}

impl FrameDecoder {
    pub fn new(limits: Limits) -> Self {
        FrameDecoder {
            limits,
            ..FrameDecoder::default()
        }
    }

    /// Decodes the next whole frame from the front of `buf`. `Ok(None)` means "need more".
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, ProtocolError> {
        loop {
            let leaf = match self.body {
                Some((kind, len)) => {
                    if buf.len() < len + 2 {
                        return Ok(None);
                    }
                    if &buf[len..len + 2] != b"\r\n" {
                        return Err(ProtocolError::Malformed("bulk string not terminated"));
                    }
                    let bytes = buf.split_to(len).freeze();
                    buf.advance(2);
                    self.body = None;
                    bulk_frame(kind, bytes)?
                }
                None => match self.line(buf)? {
                    None => return Ok(None),
                    Some(Step::Leaf(frame)) => frame,
                    Some(Step::Continue) => continue,
                },
            };
            if let Some(done) = self.attach(leaf) {
                return Ok(Some(done));
            }
        }
    }

    /// Adds a finished frame to the aggregate on top of the stack, closing every aggregate it
    /// completes. Returns the top-level frame once it is whole.
    fn attach(&mut self, mut frame: Frame) -> Option<Frame> {
        loop {
            let Some(top) = self.stack.last_mut() else {
                return Some(frame);
            };
            top.items.push(frame);
            top.remaining -= 1;
            if top.remaining > 0 {
                return None;
            }
            let done = self.stack.pop().expect("top exists");
            // An attribute finishes as None: it is dropped, it is not an element.
            frame = finish(done)?;
        }
    }

    fn line(&mut self, buf: &mut BytesMut) -> Result<Option<Step>, ProtocolError> {
        if buf.is_empty() {
            return Ok(None);
        }
        let Some(end) = line_end(buf, &mut self.scanned)? else {
            return Ok(None);
        };
        let kind = buf[0];
        if end == 0 {
            return Err(ProtocolError::UnknownType(kind));
        }
        let content = Bytes::copy_from_slice(&buf[1..end]);
        buf.advance(end + terminator_len(buf, end));
        let step = match kind {
            b'+' => Step::Leaf(Frame::Simple(content)),
            b'-' => Step::Leaf(Frame::Error(content)),
            b':' => Step::Leaf(Frame::Integer(
                parse_i64(&content).ok_or(ProtocolError::Malformed("invalid integer"))?,
            )),
            b'(' => Step::Leaf(Frame::BigNumber(content)),
            b'_' => Step::Leaf(Frame::Null),
            b'#' => Step::Leaf(Frame::Boolean(match &content[..] {
                b"t" => true,
                b"f" => false,
                _ => return Err(ProtocolError::Malformed("invalid boolean")),
            })),
            b',' => Step::Leaf(Frame::Double(parse_double(&content)?)),
            b'$' | b'!' | b'=' => self.bulk_header(kind, &content)?,
            b'*' | b'%' | b'~' | b'>' | b'|' => self.aggregate_header(kind, &content)?,
            other => return Err(ProtocolError::UnknownType(other)),
        };
        Ok(Some(step))
    }

    fn bulk_header(&mut self, kind: u8, digits: &[u8]) -> Result<Step, ProtocolError> {
        let len = parse_length(digits, ProtocolError::InvalidBulkLength)?;
        if len == -1 {
            return Ok(Step::Leaf(Frame::Null));
        }
        if len as usize > self.limits.bulk_bytes_max {
            return Err(ProtocolError::InvalidBulkLength);
        }
        let kind = match kind {
            b'$' => BulkKind::Bulk,
            b'!' => BulkKind::Error,
            _ => BulkKind::Verbatim,
        };
        self.body = Some((kind, len as usize));
        Ok(Step::Continue)
    }

    fn aggregate_header(&mut self, kind: u8, digits: &[u8]) -> Result<Step, ProtocolError> {
        let count = parse_length(digits, ProtocolError::InvalidMultibulkLength)?;
        if count == -1 {
            return Ok(Step::Leaf(Frame::NullArray));
        }
        let count = count as usize;
        if count > self.limits.array_len_max {
            return Err(ProtocolError::InvalidMultibulkLength);
        }
        let kind = match kind {
            b'*' => AggregateKind::Array,
            b'%' => AggregateKind::Map,
            b'~' => AggregateKind::Set,
            b'>' => AggregateKind::Push,
            _ => AggregateKind::Attribute,
        };
        let elements = match kind {
            AggregateKind::Map | AggregateKind::Attribute => count * 2,
            _ => count,
        };
        let pending = Pending {
            kind,
            remaining: elements,
            items: Vec::new(),
        };
        if elements == 0 {
            return Ok(match finish(pending) {
                Some(frame) => Step::Leaf(frame),
                None => Step::Continue,
            });
        }
        if self.stack.len() >= self.limits.nesting_depth_max {
            return Err(ProtocolError::TooDeep);
        }
        self.stack.push(Pending {
            items: Vec::with_capacity(elements.min(1024)),
            ..pending
        });
        Ok(Step::Continue)
    }
}

enum Step {
    Leaf(Frame),
    Continue,
}

fn bulk_frame(kind: BulkKind, bytes: Bytes) -> Result<Frame, ProtocolError> {
    Ok(match kind {
        BulkKind::Bulk => Frame::Bulk(bytes),
        BulkKind::Error => Frame::BulkError(bytes),
        BulkKind::Verbatim => {
            if bytes.len() < 4 || bytes[3] != b':' {
                return Err(ProtocolError::Malformed("invalid verbatim string"));
            }
            Frame::Verbatim([bytes[0], bytes[1], bytes[2]], bytes.slice(4..))
        }
    })
}

fn finish(pending: Pending) -> Option<Frame> {
    let items = pending.items;
    Some(match pending.kind {
        AggregateKind::Array => Frame::Array(items),
        AggregateKind::Set => Frame::Set(items),
        AggregateKind::Push => Frame::Push(items),
        AggregateKind::Attribute => return None,
        AggregateKind::Map => {
            let mut pairs = Vec::with_capacity(items.len() / 2);
            let mut iter = items.into_iter();
            while let (Some(key), Some(value)) = (iter.next(), iter.next()) {
                pairs.push((key, value));
            }
            Frame::Map(pairs)
        }
    })
}

fn parse_double(text: &[u8]) -> Result<f64, ProtocolError> {
    let text = std::str::from_utf8(text).map_err(|_| ProtocolError::Malformed("invalid double"))?;
    match text {
        "inf" | "+inf" => Ok(f64::INFINITY),
        "-inf" => Ok(f64::NEG_INFINITY),
        "nan" => Ok(f64::NAN),
        _ => text
            .parse()
            .map_err(|_| ProtocolError::Malformed("invalid double")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{encode, Protocol};
    use proptest::prelude::*;

    fn decode_one(input: &[u8]) -> Result<Option<Frame>, ProtocolError> {
        FrameDecoder::default().decode(&mut BytesMut::from(input))
    }

    #[test]
    fn decodes_resp3_types() {
        let frame = decode_one(b"%1\r\n+k\r\n~2\r\n#t\r\n,1.5\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            frame,
            Frame::Map(vec![(
                Frame::Simple("k".into()),
                Frame::Set(vec![Frame::Boolean(true), Frame::Double(1.5)])
            )])
        );
        let with_attribute = decode_one(b"|1\r\n+a\r\n:1\r\n:7\r\n").unwrap().unwrap();
        assert_eq!(with_attribute, Frame::Integer(7));
    }

    #[test]
    fn refuses_deep_nesting_without_recursion() {
        let deep = b"*1\r\n".repeat(100_000);
        assert_eq!(decode_one(&deep).unwrap_err(), ProtocolError::TooDeep);
    }

    fn leaf() -> impl Strategy<Value = Frame> {
        prop_oneof![
            "[a-zA-Z0-9 ]{0,12}".prop_map(|s| Frame::Simple(Bytes::from(s))),
            "ERR [a-z ]{0,12}".prop_map(|s| Frame::Error(Bytes::from(s))),
            any::<i64>().prop_map(Frame::Integer),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(|v| Frame::Bulk(v.into())),
            Just(Frame::Null),
            any::<bool>().prop_map(Frame::Boolean),
            (-1.0e12f64..1.0e12).prop_map(Frame::Double),
            "[0-9]{1,30}".prop_map(|s| Frame::BigNumber(Bytes::from(s))),
            "[a-z]{0,10}".prop_map(|s| Frame::Verbatim(*b"txt", Bytes::from(s))),
            "[a-z]{0,10}".prop_map(|s| Frame::BulkError(Bytes::from(s))),
        ]
    }

    fn frame() -> impl Strategy<Value = Frame> {
        leaf().prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Frame::Array),
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Frame::Set),
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Frame::Push),
                proptest::collection::vec((inner.clone(), inner), 0..4).prop_map(Frame::Map),
            ]
        })
    }

    proptest! {
        #[test]
        fn resp3_round_trips_in_any_split(frames in proptest::collection::vec(frame(), 1..5),
                                          chunk in 1usize..17) {
            let mut wire = Vec::new();
            for f in &frames {
                encode(&mut wire, f, Protocol::Resp3);
            }
            let mut decoder = FrameDecoder::default();
            let mut buf = BytesMut::new();
            let mut decoded = Vec::new();
            for piece in wire.chunks(chunk) {
                buf.extend_from_slice(piece);
                while let Some(f) = decoder.decode(&mut buf).unwrap() {
                    decoded.push(f);
                }
            }
            prop_assert_eq!(decoded, frames);
            prop_assert!(buf.is_empty());
        }

        #[test]
        fn commands_round_trip_in_any_split(
            commands in proptest::collection::vec(
                proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..20), 1..6),
                1..6),
            chunk in 1usize..23) {
            let mut wire = Vec::new();
            for args in &commands {
                let frame = Frame::Array(
                    args.iter().map(|a| Frame::Bulk(Bytes::from(a.clone()))).collect());
                encode(&mut wire, &frame, Protocol::Resp2);
            }
            let mut decoder = crate::CommandDecoder::default();
            let mut buf = BytesMut::new();
            let mut decoded = Vec::new();
            for piece in wire.chunks(chunk) {
                buf.extend_from_slice(piece);
                while let Some(args) = decoder.decode(&mut buf).unwrap() {
                    decoded.push(args.iter().map(|b| b.to_vec()).collect::<Vec<_>>());
                }
            }
            prop_assert_eq!(decoded, commands);
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut buf = BytesMut::from(&bytes[..]);
            let mut decoder = FrameDecoder::default();
            while let Ok(Some(_)) = decoder.decode(&mut buf) {}
            let mut buf = BytesMut::from(&bytes[..]);
            let mut decoder = crate::CommandDecoder::default();
            while let Ok(Some(_)) = decoder.decode(&mut buf) {}
        }
    }
}
