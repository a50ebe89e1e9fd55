//! Splitting an inline command line into arguments, with Redis's quoting rules
//! (`sdssplitargs`): double quotes take escapes, single quotes take only `\'`.

use bytes::Bytes;

use crate::ProtocolError;

/// Splits a line into words as Redis's `sdssplitargs` does (inline commands, the ACL file).
pub fn split_inline(line: &[u8]) -> Result<Vec<Bytes>, ProtocolError> {
    let mut args = Vec::new();
    let mut i = 0;
    while i < line.len() {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == line.len() {
            break;
        }
        let mut current = Vec::new();
        match line[i] {
            b'"' => i = double_quoted(line, i + 1, &mut current)?,
            b'\'' => i = single_quoted(line, i + 1, &mut current)?,
            _ => {
                while i < line.len() && !line[i].is_ascii_whitespace() {
                    current.push(line[i]);
                    i += 1;
                }
            }
        }
        args.push(Bytes::from(current));
    }
    Ok(args)
}

/// After a closing quote, the next byte must be a space or the end of the line.
fn after_quote(line: &[u8], i: usize) -> Result<usize, ProtocolError> {
    if i < line.len() && !line[i].is_ascii_whitespace() {
        return Err(ProtocolError::UnbalancedQuotes);
    }
    Ok(i)
}

fn double_quoted(line: &[u8], mut i: usize, out: &mut Vec<u8>) -> Result<usize, ProtocolError> {
    while i < line.len() {
        match line[i] {
            b'\\'
                if i + 3 < line.len()
                    && line[i + 1] == b'x'
                    && line[i + 2].is_ascii_hexdigit()
                    && line[i + 3].is_ascii_hexdigit() =>
            {
                let hex = std::str::from_utf8(&line[i + 2..i + 4]).unwrap_or("0");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(0));
                i += 4;
            }
            b'\\' if i + 1 < line.len() => {
                out.push(match line[i + 1] {
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'b' => 8,
                    b'a' => 7,
                    other => other,
                });
                i += 2;
            }
            b'"' => return after_quote(line, i + 1),
            other => {
                out.push(other);
                i += 1;
            }
        }
    }
    Err(ProtocolError::UnbalancedQuotes)
}

fn single_quoted(line: &[u8], mut i: usize, out: &mut Vec<u8>) -> Result<usize, ProtocolError> {
    while i < line.len() {
        match line[i] {
            b'\\' if i + 1 < line.len() && line[i + 1] == b'\'' => {
                out.push(b'\'');
                i += 2;
            }
            b'\'' => return after_quote(line, i + 1),
            other => {
                out.push(other);
                i += 1;
            }
        }
    }
    Err(ProtocolError::UnbalancedQuotes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_with_quotes_and_escapes() {
        let args = split_inline(br#"SET "a b\x41\n" 'it\'s'  plain"#).unwrap();
        assert_eq!(
            args,
            vec![
                Bytes::from("SET"),
                Bytes::from("a bA\n"),
                Bytes::from("it's"),
                Bytes::from("plain")
            ]
        );
        assert_eq!(split_inline(b"  ").unwrap().len(), 0);
    }

    #[test]
    fn rejects_unbalanced_quotes() {
        assert_eq!(
            split_inline(b"GET \"abc").unwrap_err(),
            ProtocolError::UnbalancedQuotes
        );
        assert_eq!(
            split_inline(b"GET 'a'b").unwrap_err(),
            ProtocolError::UnbalancedQuotes
        );
    }
}
