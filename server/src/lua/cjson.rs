//! `cjson` as Redis embeds it (lua-cjson 2.1.0 with Redis's changes): `encode`, `decode`,
//! `null`, `new`, and the settings (`encode_sparse_array`, `encode_max_depth`,
//! `decode_max_depth`, `encode_number_precision`, `encode_keep_buffer`,
//! `encode_invalid_numbers`, `decode_invalid_numbers`), each module instance with its own.
//! Scripts can tell the details, so they are lua-cjson's: numbers written with `%.14g`, `/`
//! and DEL escaped, bytes above 127 passed through, arrays by their keys (holes as `null`,
//! an excessively sparse one refused), its tokenizer (numbers by `strtod`, so `0x10` and
//! `nan` decode by default), and its error texts ("Expected value but found T_END at
//! character 1").
//!
//! Failures come back as `(FAIL, message)`: `libs` wraps each function so that a script
//! sees a plain string error, raised where the script called it, as lua-cjson's
//! `luaL_error` does.
//!
//! Decoding is in `decode`; the module, its settings and encoding are here.

mod decode;

use decode::Decoder;

use std::cell::RefCell;
use std::rc::Rc;

use mlua::{LightUserData, Lua, MultiValue, Table, Value};

use super::coerce::{fail, format_g, ok, string_arg, strtod, type_name};

/// One module instance's settings (lua-cjson's defaults).
#[derive(Clone)]
struct Config {
    sparse_convert: bool,
    sparse_ratio: i64,
    sparse_safe: i64,
    encode_max_depth: i64,
    decode_max_depth: i64,
    /// 0 off, 1 on, 2 null.
    encode_invalid_numbers: usize,
    decode_invalid_numbers: bool,
    keep_buffer: bool,
    precision: i64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            sparse_convert: false,
            sparse_ratio: 2,
            sparse_safe: 10,
            encode_max_depth: 1000,
            decode_max_depth: 1000,
            encode_invalid_numbers: 0,
            decode_invalid_numbers: true,
            keep_buffer: true,
            precision: 14,
        }
    }
}

type Shared = Rc<RefCell<Config>>;

/// A new `cjson` table (the global one, or `cjson.new()`'s) with its own settings.
pub fn module(lua: &Lua) -> mlua::Result<Table> {
    let config: Shared = Rc::new(RefCell::new(Config::default()));
    let t = lua.create_table()?;
    t.set(
        "null",
        Value::LightUserData(LightUserData(std::ptr::null_mut())),
    )?;
    t.set("_NAME", "cjson")?;
    t.set("_VERSION", "2.1.0")?;
    let c = config.clone();
    t.set(
        "encode",
        lua.create_function(move |lua, args: MultiValue| {
            if args.len() != 1 {
                return fail(lua, "bad argument #1 to 'encode' (expected 1 argument)");
            }
            let mut out = Vec::new();
            match encode(&c.borrow(), &args[0], &mut out, 0) {
                Ok(()) => ok(lua, vec![Value::String(lua.create_string(&out)?)]),
                Err(message) => fail(lua, &message),
            }
        })?,
    )?;
    let c = config.clone();
    t.set(
        "decode",
        lua.create_function(move |lua, args: MultiValue| {
            if args.len() != 1 {
                return fail(lua, "bad argument #1 to 'decode' (expected 1 argument)");
            }
            let text = match string_arg(&args, 0, "decode") {
                Ok(text) => text,
                Err(e) => return fail(lua, &e),
            };
            let config = c.borrow().clone();
            match Decoder::new(lua, &config, &text).run() {
                Ok(value) => ok(lua, vec![value]),
                Err(message) => fail(lua, &message),
            }
        })?,
    )?;
    settings(lua, &t, &config)?;
    t.set(
        "new",
        lua.create_function(|lua, ()| ok(lua, vec![Value::Table(module(lua)?)]))?,
    )?;
    Ok(t)
}

/// The setting functions: each with no argument (or nil) answers the setting, else sets it.
// Long: one arm per lua-cjson setting function, each with its own checks; the table reads best whole.
fn settings(lua: &Lua, t: &Table, config: &Shared) -> mlua::Result<()> {
    let c = config.clone();
    t.set(
        "encode_sparse_array",
        lua.create_function(move |lua, args: MultiValue| {
            let mut cfg = c.borrow_mut();
            let convert = match bool_option(&args, 0, "encode_sparse_array", cfg.sparse_convert) {
                Ok(v) => v,
                Err(e) => return fail(lua, &e),
            };
            let ratio = int_option(
                &args,
                1,
                "encode_sparse_array",
                cfg.sparse_ratio,
                0,
                i32::MAX as i64,
            );
            let safe = int_option(
                &args,
                2,
                "encode_sparse_array",
                cfg.sparse_safe,
                0,
                i32::MAX as i64,
            );
            let (ratio, safe) = match (ratio, safe) {
                (Ok(r), Ok(s)) => (r, s),
                (Err(e), _) | (_, Err(e)) => return fail(lua, &e),
            };
            (cfg.sparse_convert, cfg.sparse_ratio, cfg.sparse_safe) = (convert, ratio, safe);
            ok(
                lua,
                vec![
                    Value::Boolean(convert),
                    Value::Number(ratio as f64),
                    Value::Number(safe as f64),
                ],
            )
        })?,
    )?;
    for (name, field) in [
        ("encode_max_depth", 0),
        ("decode_max_depth", 1),
        ("encode_number_precision", 2),
    ] {
        let c = config.clone();
        let max = if field == 2 { 14 } else { i32::MAX as i64 };
        t.set(
            name,
            lua.create_function(move |lua, args: MultiValue| {
                let mut cfg = c.borrow_mut();
                let slot = match field {
                    0 => &mut cfg.encode_max_depth,
                    1 => &mut cfg.decode_max_depth,
                    _ => &mut cfg.precision,
                };
                match int_option(&args, 0, name, *slot, 1, max) {
                    Ok(v) => {
                        *slot = v;
                        ok(lua, vec![Value::Number(v as f64)])
                    }
                    Err(e) => fail(lua, &e),
                }
            })?,
        )?;
    }
    for (name, field) in [("encode_keep_buffer", 0), ("decode_invalid_numbers", 1)] {
        let c = config.clone();
        t.set(
            name,
            lua.create_function(move |lua, args: MultiValue| {
                let mut cfg = c.borrow_mut();
                let slot = if field == 0 {
                    &mut cfg.keep_buffer
                } else {
                    &mut cfg.decode_invalid_numbers
                };
                match bool_option(&args, 0, name, *slot) {
                    Ok(v) => {
                        *slot = v;
                        ok(lua, vec![Value::Boolean(v)])
                    }
                    Err(e) => fail(lua, &e),
                }
            })?,
        )?;
    }
    let c = config.clone();
    t.set(
        "encode_invalid_numbers",
        lua.create_function(move |lua, args: MultiValue| {
            let mut cfg = c.borrow_mut();
            let options = ["off", "on", "null"];
            match enum_option(
                &args,
                0,
                "encode_invalid_numbers",
                cfg.encode_invalid_numbers,
                &options,
            ) {
                Ok(v) => {
                    cfg.encode_invalid_numbers = v;
                    let reply = if v <= 1 {
                        Value::Boolean(v == 1)
                    } else {
                        Value::String(lua.create_string(options[v])?)
                    };
                    ok(lua, vec![reply])
                }
                Err(e) => fail(lua, &e),
            }
        })?,
    )?;
    Ok(())
}

fn arg(args: &MultiValue, i: usize) -> Option<&Value> {
    args.get(i).filter(|v| !matches!(v, Value::Nil))
}

/// lua-cjson's `json_enum_option` with on/off: a boolean, or one of the words.
fn bool_option(args: &MultiValue, i: usize, name: &str, current: bool) -> Result<bool, String> {
    enum_option(args, i, name, usize::from(current), &["off", "on"]).map(|v| v == 1)
}

fn enum_option(
    args: &MultiValue,
    i: usize,
    name: &str,
    current: usize,
    options: &[&str],
) -> Result<usize, String> {
    match arg(args, i) {
        None => Ok(current),
        Some(Value::Boolean(b)) => Ok(usize::from(*b)),
        Some(Value::String(s)) => {
            let word = s.to_string_lossy();
            options.iter().position(|o| *o == word).ok_or_else(|| {
                format!(
                    "bad argument #{} to '{name}' (invalid option '{word}')",
                    i + 1
                )
            })
        }
        Some(other) => Err(format!(
            "bad argument #{} to '{name}' (string expected, got {})",
            i + 1,
            type_name(other)
        )),
    }
}

/// lua-cjson's `json_integer_option`: an integer within `min..=max`.
fn int_option(
    args: &MultiValue,
    i: usize,
    name: &str,
    current: i64,
    min: i64,
    max: i64,
) -> Result<i64, String> {
    let value = match arg(args, i) {
        None => return Ok(current),
        Some(Value::Integer(n)) => *n,
        Some(Value::Number(n)) => *n as i64,
        Some(Value::String(s)) => {
            match s.to_str().ok().and_then(|s| s.trim().parse::<f64>().ok()) {
                Some(n) => n as i64,
                None => {
                    return Err(format!(
                        "bad argument #{} to '{name}' (number expected, got string)",
                        i + 1
                    ))
                }
            }
        }
        Some(other) => {
            return Err(format!(
                "bad argument #{} to '{name}' (number expected, got {})",
                i + 1,
                type_name(other)
            ))
        }
    };
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(format!(
            "bad argument #{} to '{name}' (expected integer between {min} and {max})",
            i + 1
        ))
    }
}

// ---- encoding ----

fn escape(byte: u8) -> Option<&'static str> {
    const CONTROL: [&str; 32] = [
        "\\u0000", "\\u0001", "\\u0002", "\\u0003", "\\u0004", "\\u0005", "\\u0006", "\\u0007",
        "\\b", "\\t", "\\n", "\\u000b", "\\f", "\\r", "\\u000e", "\\u000f", "\\u0010", "\\u0011",
        "\\u0012", "\\u0013", "\\u0014", "\\u0015", "\\u0016", "\\u0017", "\\u0018", "\\u0019",
        "\\u001a", "\\u001b", "\\u001c", "\\u001d", "\\u001e", "\\u001f",
    ];
    match byte {
        0..=31 => Some(CONTROL[byte as usize]),
        b'"' => Some("\\\""),
        b'/' => Some("\\/"),
        b'\\' => Some("\\\\"),
        127 => Some("\\u007f"),
        _ => None,
    }
}

fn encode_string(bytes: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &b in bytes {
        match escape(b) {
            Some(e) => out.extend_from_slice(e.as_bytes()),
            None => out.push(b),
        }
    }
    out.push(b'"');
}

fn encode_number(cfg: &Config, n: f64, what: &str, out: &mut Vec<u8>) -> Result<(), String> {
    if !n.is_finite() {
        match cfg.encode_invalid_numbers {
            0 => return Err(format!("Cannot serialise {what}: must not be NaN or Inf")),
            2 => {
                out.extend_from_slice(b"null");
                return Ok(());
            }
            // lua-cjson writes "nan" itself: printf may say "-nan".
            _ if n.is_nan() => {
                out.extend_from_slice(b"nan");
                return Ok(());
            }
            _ => {}
        }
    }
    out.extend_from_slice(format_g(n, cfg.precision as usize).as_bytes());
    Ok(())
}

fn number_of(value: &Value) -> Option<f64> {
    match value {
        Value::Integer(n) => Some(*n as f64),
        Value::Number(n) => Some(*n),
        _ => None,
    }
}

/// lua-cjson's `lua_array_length`: the largest key when every key is an integer >= 1,
/// `None` for an object (or an excessively sparse array converted to one); an error for one
/// refused.
fn array_length(cfg: &Config, table: &Table) -> Result<Option<usize>, String> {
    let (mut max, mut items) = (0f64, 0f64);
    for pair in table.clone().pairs::<Value, Value>() {
        let (key, _) = pair.map_err(|e| e.to_string())?;
        match number_of(&key) {
            Some(k) if k != 0.0 && k.floor() == k && k >= 1.0 => {
                max = max.max(k);
                items += 1.0;
            }
            _ => return Ok(None),
        }
    }
    if cfg.sparse_ratio > 0 && max > items * cfg.sparse_ratio as f64 && max > cfg.sparse_safe as f64
    {
        if !cfg.sparse_convert {
            return Err("Cannot serialise table: excessively sparse array".into());
        }
        return Ok(None);
    }
    Ok(Some(max as usize))
}

fn encode(cfg: &Config, value: &Value, out: &mut Vec<u8>, depth: i64) -> Result<(), String> {
    match value {
        Value::String(s) => encode_string(&s.as_bytes(), out),
        Value::Integer(_) | Value::Number(_) => {
            encode_number(cfg, number_of(value).expect("a number"), "number", out)?
        }
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(p) if p.0.is_null() => out.extend_from_slice(b"null"),
        Value::Table(table) => {
            let depth = depth + 1;
            if depth > cfg.encode_max_depth {
                return Err(format!("Cannot serialise, excessive nesting ({depth})"));
            }
            match array_length(cfg, table)? {
                Some(len) if len > 0 => {
                    out.push(b'[');
                    for i in 1..=len {
                        if i > 1 {
                            out.push(b',');
                        }
                        let item: Value = table.raw_get(i).map_err(|e| e.to_string())?;
                        encode(cfg, &item, out, depth)?;
                    }
                    out.push(b']');
                }
                _ => encode_object(cfg, table, out, depth)?,
            }
        }
        other => {
            return Err(format!(
                "Cannot serialise {}: type not supported",
                type_name(other)
            ))
        }
    }
    Ok(())
}

fn encode_object(cfg: &Config, table: &Table, out: &mut Vec<u8>, depth: i64) -> Result<(), String> {
    out.push(b'{');
    let mut first = true;
    for pair in table.clone().pairs::<Value, Value>() {
        let (key, item) = pair.map_err(|e| e.to_string())?;
        if !first {
            out.push(b',');
        }
        first = false;
        match &key {
            Value::Integer(_) | Value::Number(_) => {
                out.push(b'"');
                encode_number(cfg, number_of(&key).expect("a number"), "number", out)?;
                out.extend_from_slice(b"\":");
            }
            Value::String(s) => {
                encode_string(&s.as_bytes(), out);
                out.push(b':');
            }
            other => {
                return Err(format!(
                    "Cannot serialise {}: table key must be a number or string",
                    type_name(other)
                ))
            }
        }
        encode(cfg, &item, out, depth)?;
    }
    out.push(b'}');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_c_does() {
        for (n, want) in [
            (1.0 / 3.0, "0.33333333333333"),
            (1e15, "1e+15"),
            (123456789012345.0, "1.2345678901234e+14"),
            (-0.0, "-0"),
            (12.5, "12.5"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (100.0, "100"),
        ] {
            assert_eq!(format_g(n, 14), want, "{n}");
        }
        assert_eq!(format_g(1.0 / 3.0, 3), "0.333");
    }

    #[test]
    fn strtod_takes_the_longest_number() {
        assert_eq!(strtod(b"12abc"), Some((12.0, 2)));
        assert_eq!(strtod(b"1e"), Some((1.0, 1)));
        assert_eq!(strtod(b"-1.5e+2]"), Some((-150.0, 7)));
        assert_eq!(strtod(b"0x10"), Some((16.0, 4)));
        assert_eq!(strtod(b"0x"), Some((0.0, 1)));
        assert_eq!(strtod(b"Infinity"), Some((f64::INFINITY, 8)));
        assert_eq!(strtod(b"."), None);
        assert_eq!(strtod(b"-"), None);
    }
}
