//! Lua values read as Lua 5.1's C API reads them, for the libraries Redis embeds (`cjson`,
//! `cmsgpack`, `bit`, `struct`) and the sandbox: a value's type name, a number written as
//! `%.14g` (`lua_number_text`, `format_g`), `lua_tolstring`, `lua_tonumber` with C's
//! `strtod`, a string argument; and what a library function answers (`ok`, `fail`). A leaf
//! of its own, so the libraries that share these do not import each other.

use mlua::{Lua, MultiValue, Value};

/// What a library function answers: `(true, results…)` or `(false, message)`.
pub type LibResult = mlua::Result<MultiValue>;

/// A library function's results.
pub fn ok(_lua: &Lua, values: Vec<Value>) -> LibResult {
    let mut all = Vec::with_capacity(values.len() + 1);
    all.push(Value::Boolean(true));
    all.extend(values);
    Ok(MultiValue::from_vec(all))
}

/// A library function's error, raised as a string at the script's line by the wrapper.
pub fn fail(lua: &Lua, message: &str) -> LibResult {
    Ok(MultiValue::from_vec(vec![
        Value::Boolean(false),
        Value::String(lua.create_string(message)?),
    ]))
}

pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Nil => "nil",
        Value::Boolean(_) => "boolean",
        Value::LightUserData(_) | Value::UserData(_) => "userdata",
        Value::Integer(_) | Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Table(_) => "table",
        Value::Function(_) => "function",
        Value::Thread(_) => "thread",
        _ => "userdata",
    }
}

/// How Lua 5.1 writes a number (`%.14g`), as `tostring` and string coercion do.
pub fn lua_number_text(n: f64) -> String {
    format_g(n, 14)
}

/// C's `%.<precision>g`.
pub fn format_g(n: f64, precision: usize) -> String {
    if n.is_nan() {
        return if n.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    if n.is_infinite() {
        return if n < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    let precision = precision.max(1);
    if n == 0.0 {
        return if n.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // The exponent after rounding to `precision` significant digits.
    let scientific = format!("{:.*e}", precision - 1, n);
    let (mantissa, exponent) = scientific.split_once('e').expect("an exponent");
    let exponent: i32 = exponent.parse().expect("an integer exponent");
    if exponent < -4 || exponent >= precision as i32 {
        let mantissa = trim_zeros(mantissa);
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    } else {
        let decimals = (precision as i32 - 1 - exponent).max(0) as usize;
        trim_zeros(&format!("{n:.decimals$}")).to_string()
    }
}

fn trim_zeros(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

/// Lua's `lua_tolstring`: a string's bytes, or a number as Lua writes it (`%.14g`, so
/// 1000000000000001 is "1e+15"); `None` for anything else.
pub fn lua_tolstring(value: &Value) -> Option<Vec<u8>> {
    match value {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        Value::Integer(n) => Some(lua_number_text(*n as f64).into_bytes()),
        Value::Number(n) => Some(lua_number_text(*n).into_bytes()),
        _ => None,
    }
}

/// `luaL_checklstring`: argument `i` (from 0) of `function` as a string, or Lua's error.
pub fn string_arg(args: &MultiValue, i: usize, function: &str) -> Result<Vec<u8>, String> {
    let value = args.get(i);
    value.and_then(lua_tolstring).ok_or_else(|| {
        format!(
            "bad argument #{} to '{function}' (string expected, got {})",
            i + 1,
            value.map_or("no value", type_name)
        )
    })
}

/// Lua's `lua_tonumber`: a number, or a string that reads as one whole (blanks around it
/// allowed, as Lua allows them); `None` otherwise.
pub fn lua_tonumber(value: &Value) -> Option<f64> {
    match value {
        Value::Integer(n) => Some(*n as f64),
        Value::Number(n) => Some(*n),
        Value::String(s) => s.to_str().ok().and_then(|t| {
            let t = t.trim();
            strtod(t.as_bytes())
                .filter(|(_, used)| *used == t.len())
                .map(|(n, _)| n)
        }),
        _ => None,
    }
}

/// C's `strtod` on the start of `text`: the number and the bytes it took; `None` when no
/// number starts there.
// Long: C's strtod in one scan (sign, hex, inf/nan, digits, point, exponent), as lua-cjson's tokenizer sees numbers.
pub fn strtod(text: &[u8]) -> Option<(f64, usize)> {
    let mut i = 0;
    let negative = match text.first() {
        Some(b'-') => {
            i = 1;
            true
        }
        Some(b'+') => {
            i = 1;
            false
        }
        _ => false,
    };
    let sign = if negative { -1.0 } else { 1.0 };
    let rest = &text[i..];
    let lower: Vec<u8> = rest.iter().take(8).map(u8::to_ascii_lowercase).collect();
    if lower.starts_with(b"infinity") {
        return Some((sign * f64::INFINITY, i + 8));
    }
    if lower.starts_with(b"inf") {
        return Some((sign * f64::INFINITY, i + 3));
    }
    if lower.starts_with(b"nan") {
        let mut used = i + 3;
        if text.get(used) == Some(&b'(') {
            if let Some(close) = text[used..].iter().position(|&b| b == b')') {
                let inner = &text[used + 1..used + close];
                if inner
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || *b == b'_')
                {
                    used += close + 1;
                }
            }
        }
        return Some((f64::NAN, used));
    }
    if lower.starts_with(b"0x") {
        if let Some((value, used)) = hex_float(&rest[2..]) {
            return Some((sign * value, i + 2 + used));
        }
    }
    let digits = |from: usize| {
        rest[from..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count()
    };
    let whole = digits(0);
    let mut end = whole;
    let mut fraction = 0;
    if rest.get(end) == Some(&b'.') {
        fraction = digits(end + 1);
        if whole + fraction > 0 {
            end += 1 + fraction;
        }
    }
    if whole + fraction == 0 {
        return None;
    }
    if matches!(rest.get(end), Some(b'e' | b'E')) {
        let mut e = end + 1;
        if matches!(rest.get(e), Some(b'+' | b'-')) {
            e += 1;
        }
        let exponent = digits(e);
        if exponent > 0 {
            end = e + exponent;
        }
    }
    let text = std::str::from_utf8(&rest[..end]).ok()?;
    let value: f64 = text.parse().ok()?;
    Some((sign * value, i + end))
}

/// A hex mantissa (after `0x`) with an optional binary exponent.
fn hex_float(text: &[u8]) -> Option<(f64, usize)> {
    let mut value = 0f64;
    let mut i = 0;
    let mut seen = false;
    while let Some(d) = text.get(i).and_then(|b| (*b as char).to_digit(16)) {
        value = value * 16.0 + d as f64;
        i += 1;
        seen = true;
    }
    let mut scale = 0i32;
    if text.get(i) == Some(&b'.') {
        let mut j = i + 1;
        while let Some(d) = text.get(j).and_then(|b| (*b as char).to_digit(16)) {
            value = value * 16.0 + d as f64;
            scale -= 4;
            j += 1;
            seen = true;
        }
        if seen {
            i = j;
        }
    }
    if !seen {
        return None;
    }
    if matches!(text.get(i), Some(b'p' | b'P')) {
        let mut e = i + 1;
        let negative = text.get(e) == Some(&b'-');
        if matches!(text.get(e), Some(b'+' | b'-')) {
            e += 1;
        }
        let count = text[e..].iter().take_while(|b| b.is_ascii_digit()).count();
        if count > 0 {
            let exponent: i32 = std::str::from_utf8(&text[e..e + count])
                .ok()?
                .parse()
                .unwrap_or(i32::MAX);
            scale = scale.saturating_add(if negative { -exponent } else { exponent });
            i = e + count;
        }
    }
    Some((value * 2f64.powi(scale), i))
}
