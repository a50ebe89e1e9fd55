//! Argument parsing shared by every command family: strict integers and floats with Redis's
//! rules, and case-insensitive option matching.

use wetask_protocol::Frame;

use crate::errors::{NOT_FLOAT, NOT_INTEGER};

pub use wetask_protocol::parse_i64;

pub fn int_arg(bytes: &[u8]) -> Result<i64, Frame> {
    parse_i64(bytes).ok_or_else(|| Frame::static_error(NOT_INTEGER))
}

/// Parses a float like Redis's `string2ld`: no spaces, no NaN, `inf` allowed.
pub fn parse_f64(bytes: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(bytes).ok()?;
    if text.is_empty()
        || text.starts_with(char::is_whitespace)
        || text.ends_with(char::is_whitespace)
    {
        return None;
    }
    let value: f64 = match text.to_ascii_lowercase().as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => f64::INFINITY,
        "-inf" | "-infinity" => f64::NEG_INFINITY,
        _ => text.parse().ok()?,
    };
    if value.is_nan() {
        return None;
    }
    Some(value)
}

pub fn float_arg(bytes: &[u8]) -> Result<f64, Frame> {
    parse_f64(bytes).ok_or_else(|| Frame::static_error(NOT_FLOAT))
}

/// Case-insensitive comparison of an argument with an ASCII option name.
pub fn is(arg: &[u8], option: &str) -> bool {
    arg.eq_ignore_ascii_case(option.as_bytes())
}

/// The value `table` pairs with `arg`, its names compared as [`is`] does.
pub fn keyword<T: Copy>(arg: &[u8], table: &[(&str, T)]) -> Option<T> {
    table
        .iter()
        .find(|(name, _)| is(arg, name))
        .map(|&(_, value)| value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keyword_is_found_whatever_its_case_and_nothing_else_is() {
        let table = [("normal", 1), ("slave", 2), ("replica", 2)];
        assert_eq!(keyword(b"NoRmAl", &table), Some(1));
        assert_eq!(keyword(b"slave", &table), Some(2));
        assert_eq!(keyword(b"normals", &table), None);
        assert_eq!(keyword(b"", &table), None);
    }

    #[test]
    fn integers_follow_string2ll() {
        assert_eq!(parse_i64(b"-0"), None);
        assert_eq!(parse_i64(b"007"), None);
        assert_eq!(parse_i64(b"10"), Some(10));
        assert_eq!(parse_i64(b"1 "), None);
    }

    #[test]
    fn floats_follow_redis() {
        assert_eq!(parse_f64(b"1.5"), Some(1.5));
        assert_eq!(parse_f64(b"5.0e3"), Some(5000.0));
        assert_eq!(parse_f64(b" 1"), None);
        assert_eq!(parse_f64(b"nan"), None);
    }
}
