//! Shared helpers for CRLF-terminated header lines.

use crate::{ProtocolError, LINE_BYTES_MAX};

/// Finds the `\r\n` ending the line that starts at 0, searching from `scanned` so that a
/// line arriving in pieces is never rescanned. Returns the index of `\r`, or the new scan
/// position when the line is not complete yet.
pub(crate) fn find_crlf(buf: &[u8], scanned: usize) -> Result<usize, usize> {
    let from = scanned.saturating_sub(1);
    match memchr::memchr(b'\n', &buf[from..]) {
        Some(offset) => {
            let newline = from + offset;
            if newline > 0 && buf[newline - 1] == b'\r' {
                Ok(newline - 1)
            } else {
                // A bare '\n' inside a header: treat it as the end, like Redis's inline path.
                Ok(newline)
            }
        }
        None => Err(buf.len()),
    }
}

/// Length of the terminator at `end` (2 for CRLF, 1 for a bare LF).
pub(crate) fn terminator_len(buf: &[u8], end: usize) -> usize {
    if buf[end] == b'\r' {
        2
    } else {
        1
    }
}

/// Parses a signed 64-bit integer exactly as Redis's `string2ll`: optional `-`, no `+`, no
/// spaces, no leading zeros (so `-0` and `01` are refused). Shared by the decoders and every
/// command argument.
pub fn parse_i64(bytes: &[u8]) -> Option<i64> {
    if bytes.is_empty() || bytes.len() > 20 {
        return None;
    }
    let (negative, digits) = match bytes[0] {
        b'-' => (true, &bytes[1..]),
        _ => (false, bytes),
    };
    if digits.is_empty() || (digits[0] == b'0' && (digits.len() > 1 || negative)) {
        return None;
    }
    let mut value: i64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        let digit = i64::from(b - b'0');
        value = if negative {
            value.checked_mul(10)?.checked_sub(digit)?
        } else {
            value.checked_mul(10)?.checked_add(digit)?
        };
    }
    Some(value)
}

/// Finds the end of the header line at the front of `buf`, resuming the search where the
/// last call stopped (`scanned`). `Ok(None)` means incomplete; a line longer than
/// [`LINE_BYTES_MAX`] is an error.
pub(crate) fn line_end(buf: &[u8], scanned: &mut usize) -> Result<Option<usize>, ProtocolError> {
    match find_crlf(buf, (*scanned).max(1)) {
        Ok(end) => {
            *scanned = 0;
            Ok(Some(end))
        }
        Err(seen) if seen > LINE_BYTES_MAX => Err(ProtocolError::TooBigCountString),
        Err(seen) => {
            *scanned = seen;
            Ok(None)
        }
    }
}

/// Parses a length header (`*n` or `$n`) into -1 or a non-negative count, or fails with `err`.
pub(crate) fn parse_length(digits: &[u8], err: ProtocolError) -> Result<i64, ProtocolError> {
    match parse_i64(digits) {
        Some(n) if n >= -1 => Ok(n),
        _ => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_integers_like_redis() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"9223372036854775808"), None);
        assert_eq!(parse_i64(b"01"), None);
        assert_eq!(parse_i64(b"-0"), None);
        assert_eq!(parse_i64(b"+1"), None);
        assert_eq!(parse_i64(b" 1"), None);
        assert_eq!(parse_i64(b"-"), None);
        assert_eq!(parse_i64(b""), None);
    }

    #[test]
    fn finds_crlf_incrementally() {
        assert_eq!(find_crlf(b"*12", 0), Err(3));
        assert_eq!(find_crlf(b"*12\r", 3), Err(4));
        assert_eq!(find_crlf(b"*12\r\n", 4), Ok(3));
    }
}
