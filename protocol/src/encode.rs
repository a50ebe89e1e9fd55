//! The reply encoder. Writes straight into the connection's output buffer; RESP3-only types
//! are downgraded for RESP2 connections the way Redis does it.

use crate::{Frame, Protocol};

pub fn encode_simple(out: &mut Vec<u8>, text: &[u8]) {
    out.push(b'+');
    push_line(out, text);
}

/// The longest error or status line sent: past it the text is cut (with `...`). An error
/// may quote a client's argument, which can be up to `proto-max-bulk-len` long.
pub const LINE_REPLY_BYTES_MAX: usize = 4096;

pub fn encode_error(out: &mut Vec<u8>, text: &[u8]) {
    out.push(b'-');
    push_line(out, text);
}

/// Appends a one-line reply's text and its CRLF. A CR or LF inside (a client's argument
/// quoted in an error, a script's status reply) becomes a space, as Redis does, so no
/// reply can forge the frames after it; an over-long text is cut.
fn push_line(out: &mut Vec<u8>, text: &[u8]) {
    let cut = text.len() > LINE_REPLY_BYTES_MAX;
    let text = &text[..text.len().min(LINE_REPLY_BYTES_MAX)];
    let start = out.len();
    out.extend_from_slice(text);
    // Most lines are short constants (OK, QUEUED, PONG): a plain scan beats memchr's setup.
    let has_newline = if text.len() <= 32 {
        text.iter().any(|&b| b == b'\r' || b == b'\n')
    } else {
        memchr::memchr2(b'\r', b'\n', text).is_some()
    };
    if has_newline {
        for byte in &mut out[start..] {
            if *byte == b'\r' || *byte == b'\n' {
                *byte = b' ';
            }
        }
    }
    if cut {
        out.extend_from_slice(b"...");
    }
    out.extend_from_slice(b"\r\n");
}

pub fn encode_integer(out: &mut Vec<u8>, value: i64) {
    out.push(b':');
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
    out.extend_from_slice(b"\r\n");
}

pub fn encode_bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    header(out, b'$', bytes.len());
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// A command as a client sends it: an array of bulk strings (what a server reads with
/// `CommandDecoder`). For a node talking to another: MIGRATE, the cluster bus.
pub fn encode_command<A: AsRef<[u8]>>(out: &mut Vec<u8>, args: &[A]) {
    header(out, b'*', args.len());
    for arg in args {
        encode_bulk(out, arg.as_ref());
    }
}

pub fn encode_null(out: &mut Vec<u8>, protocol: Protocol) {
    match protocol {
        Protocol::Resp2 => out.extend_from_slice(b"$-1\r\n"),
        Protocol::Resp3 => out.extend_from_slice(b"_\r\n"),
    }
}

pub(crate) fn header(out: &mut Vec<u8>, kind: u8, len: usize) {
    out.push(kind);
    out.extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Formats a double the way Redis's RESP3 `,` replies and RESP2 bulk doubles do.
/// Formats a double as Redis 7.0 replies it (C's `%.17g`): 17 significant digits, trailing
/// zeros dropped, an exponent below 1e-4 or from 1e17 up; `inf`, `-inf`, `nan`.
pub fn format_double(value: f64) -> String {
    if value.is_nan() {
        return "nan".to_string();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // `{:.16e}` rounds to 17 significant digits, as %.17g does, and says the exponent.
    let scientific = format!("{value:.16e}");
    let (mantissa, exponent) = scientific.split_once('e').expect("an exponent");
    let exponent: i32 = exponent.parse().expect("a number");
    if !(-4..17).contains(&exponent) {
        let mantissa = trim_fraction(mantissa);
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exponent.abs());
    }
    let decimals = (16 - exponent).max(0) as usize;
    trim_fraction(&format!("{value:.decimals$}")).to_string()
}

fn trim_fraction(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

/// Appends `frame` to `out` in the given protocol.
pub fn encode(out: &mut Vec<u8>, frame: &Frame, protocol: Protocol) {
    let resp3 = protocol == Protocol::Resp3;
    match frame {
        Frame::Simple(text) => encode_simple(out, text),
        Frame::Error(text) => encode_error(out, text),
        Frame::Integer(value) => encode_integer(out, *value),
        Frame::Bulk(bytes) => encode_bulk(out, bytes),
        Frame::Null => encode_null(out, protocol),
        Frame::NullArray if resp3 => out.extend_from_slice(b"_\r\n"),
        Frame::NullArray => out.extend_from_slice(b"*-1\r\n"),
        Frame::Array(items) => encode_items(out, b'*', items, protocol),
        Frame::Set(items) => encode_items(out, if resp3 { b'~' } else { b'*' }, items, protocol),
        Frame::Push(items) => encode_items(out, if resp3 { b'>' } else { b'*' }, items, protocol),
        Frame::Keyed(pairs) => {
            if resp3 {
                header(out, b'%', pairs.len());
            } else {
                header(out, b'*', pairs.len());
            }
            for (key, value) in pairs {
                if !resp3 {
                    header(out, b'*', 2);
                }
                encode(out, key, protocol);
                encode(out, value, protocol);
            }
        }
        Frame::Pairs(pairs) => {
            // RESP3: an array of [a, b] arrays; RESP2: one flat array.
            header(out, b'*', if resp3 { pairs.len() } else { pairs.len() * 2 });
            for (a, b) in pairs {
                if resp3 {
                    header(out, b'*', 2);
                }
                encode(out, a, protocol);
                encode(out, b, protocol);
            }
        }
        Frame::Map(pairs) => {
            if resp3 {
                header(out, b'%', pairs.len());
            } else {
                header(out, b'*', pairs.len() * 2);
            }
            for (key, value) in pairs {
                encode(out, key, protocol);
                encode(out, value, protocol);
            }
        }
        Frame::Double(value) => {
            let text = format_double(*value);
            if resp3 {
                out.push(b',');
                out.extend_from_slice(text.as_bytes());
                out.extend_from_slice(b"\r\n");
            } else {
                encode_bulk(out, text.as_bytes());
            }
        }
        Frame::DoubleText(text) if resp3 => {
            out.push(b',');
            out.extend_from_slice(text);
            out.extend_from_slice(b"\r\n");
        }
        Frame::DoubleText(text) => encode_bulk(out, text),
        Frame::Boolean(value) if resp3 => {
            out.extend_from_slice(if *value { b"#t\r\n" } else { b"#f\r\n" })
        }
        Frame::Boolean(value) => encode_integer(out, i64::from(*value)),
        Frame::BigNumber(digits) if resp3 => {
            out.push(b'(');
            out.extend_from_slice(digits);
            out.extend_from_slice(b"\r\n");
        }
        Frame::BigNumber(digits) => encode_bulk(out, digits),
        Frame::Verbatim(format, text) if resp3 => {
            header(out, b'=', text.len() + 4);
            out.extend_from_slice(format);
            out.push(b':');
            out.extend_from_slice(text);
            out.extend_from_slice(b"\r\n");
        }
        Frame::Verbatim(_, text) => encode_bulk(out, text),
        Frame::BulkError(text) if resp3 => {
            header(out, b'!', text.len());
            out.extend_from_slice(text);
            out.extend_from_slice(b"\r\n");
        }
        Frame::BulkError(text) => encode_error(out, text),
        Frame::Written => {}
        Frame::Several(frames) => {
            for frame in frames {
                encode(out, frame, protocol);
            }
        }
    }
}

fn encode_items(out: &mut Vec<u8>, kind: u8, items: &[Frame], protocol: Protocol) {
    header(out, kind, items.len());
    for item in items {
        encode(out, item, protocol);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn enc(frame: Frame, protocol: Protocol) -> Vec<u8> {
        let mut out = Vec::new();
        encode(&mut out, &frame, protocol);
        out
    }

    #[test]
    fn a_command_is_an_array_of_bulks() {
        let mut out = Vec::new();
        encode_command(&mut out, &[b"SET".as_slice(), b"k", b""]);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
        let mut decoder = crate::CommandDecoder::new(crate::Limits::default());
        let mut buf = bytes::BytesMut::from(&out[..]);
        let args = decoder.decode(&mut buf).unwrap().unwrap();
        assert_eq!(
            args,
            vec![Bytes::from("SET"), Bytes::from("k"), Bytes::new()]
        );
    }

    #[test]
    fn downgrades_resp3_types_for_resp2() {
        let map = Frame::Map(vec![(Frame::bulk("a"), Frame::Integer(1))]);
        assert_eq!(
            enc(map.clone(), Protocol::Resp2),
            b"*2\r\n$1\r\na\r\n:1\r\n"
        );
        assert_eq!(enc(map, Protocol::Resp3), b"%1\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(enc(Frame::Null, Protocol::Resp2), b"$-1\r\n");
        assert_eq!(enc(Frame::NullArray, Protocol::Resp2), b"*-1\r\n");
        assert_eq!(enc(Frame::Null, Protocol::Resp3), b"_\r\n");
        assert_eq!(enc(Frame::Double(1.5), Protocol::Resp2), b"$3\r\n1.5\r\n");
        for (value, text) in [
            (1.1, "1.1000000000000001"),
            (1e21, "1e+21"),
            (1.5e-7, "1.4999999999999999e-07"),
            (3.0, "3"),
            (-2.5, "-2.5"),
            (0.0001, "0.0001"),
            (1.2000000000000002, "1.2000000000000002"),
            (123456789.0, "123456789"),
            (1e16, "10000000000000000"),
            (1e17, "1e+17"),
        ] {
            assert_eq!(format_double(value), text, "{value}");
        }
        let pairs = Frame::Pairs(vec![(Frame::bulk("m"), Frame::Double(2.0))]);
        assert_eq!(
            enc(pairs.clone(), Protocol::Resp2),
            b"*2\r\n$1\r\nm\r\n$1\r\n2\r\n"
        );
        assert_eq!(
            enc(pairs, Protocol::Resp3),
            b"*1\r\n*2\r\n$1\r\nm\r\n,2\r\n"
        );
        assert_eq!(enc(Frame::Double(1.5), Protocol::Resp3), b",1.5\r\n");
        assert_eq!(enc(Frame::Boolean(true), Protocol::Resp2), b":1\r\n");
        assert_eq!(enc(Frame::Boolean(false), Protocol::Resp3), b"#f\r\n");
        let verbatim = Frame::Verbatim(*b"txt", Bytes::from_static(b"hi"));
        assert_eq!(enc(verbatim.clone(), Protocol::Resp3), b"=6\r\ntxt:hi\r\n");
        assert_eq!(enc(verbatim, Protocol::Resp2), b"$2\r\nhi\r\n");
    }
}

#[cfg(test)]
mod line_tests {
    use super::*;

    #[test]
    fn one_line_replies_cannot_forge_frames_and_stay_short() {
        let mut out = Vec::new();
        encode_error(&mut out, b"ERR bad\r\n+OK");
        assert_eq!(out, b"-ERR bad  +OK\r\n");
        out.clear();
        encode_simple(&mut out, b"a\nb");
        assert_eq!(out, b"+a b\r\n");
        out.clear();
        encode_error(&mut out, &vec![b'x'; LINE_REPLY_BYTES_MAX * 2]);
        assert_eq!(out.len(), 1 + LINE_REPLY_BYTES_MAX + 3 + 2);
        assert!(out.ends_with(b"...\r\n"));
    }
}
