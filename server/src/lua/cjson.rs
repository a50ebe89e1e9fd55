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

// ---- decoding ----

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    ObjBegin,
    ObjEnd,
    ArrBegin,
    ArrEnd,
    Str,
    Number,
    Boolean,
    Null,
    Colon,
    Comma,
    End,
    Error,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::ObjBegin => "T_OBJ_BEGIN",
            Kind::ObjEnd => "T_OBJ_END",
            Kind::ArrBegin => "T_ARR_BEGIN",
            Kind::ArrEnd => "T_ARR_END",
            Kind::Str => "T_STRING",
            Kind::Number => "T_NUMBER",
            Kind::Boolean => "T_BOOLEAN",
            Kind::Null => "T_NULL",
            Kind::Colon => "T_COLON",
            Kind::Comma => "T_COMMA",
            Kind::End => "T_END",
            Kind::Error => "T_ERROR",
        }
    }
}

struct Token {
    kind: Kind,
    index: usize,
    text: Vec<u8>,
    number: f64,
    boolean: bool,
    error: &'static str,
}

struct Decoder<'a> {
    lua: &'a Lua,
    cfg: &'a Config,
    /// The input up to its first NUL byte (lua-cjson reads it as a C string).
    data: &'a [u8],
    at: usize,
    depth: i64,
}

impl<'a> Decoder<'a> {
    fn new(lua: &'a Lua, cfg: &'a Config, data: &'a [u8]) -> Decoder<'a> {
        Decoder {
            lua,
            cfg,
            data,
            at: 0,
            depth: 0,
        }
    }

    fn run(mut self) -> Result<Value, String> {
        if self.data.len() >= 2 && (self.data[0] == 0 || self.data[1] == 0) {
            return Err("JSON parser does not support UTF-16 or UTF-32".into());
        }
        if let Some(nul) = self.data.iter().position(|&b| b == 0) {
            self.data = &self.data[..nul];
        }
        let token = self.next();
        let value = self.value(token)?;
        let token = self.next();
        if token.kind != Kind::End {
            return Err(expected("the end", &token));
        }
        Ok(value)
    }

    fn peek(&self, offset: usize) -> u8 {
        self.data.get(self.at + offset).copied().unwrap_or(0)
    }

    fn token(&self, kind: Kind, index: usize) -> Token {
        Token {
            kind,
            index,
            text: Vec::new(),
            number: 0.0,
            boolean: false,
            error: "",
        }
    }

    fn error(&self, what: &'static str) -> Token {
        let mut t = self.token(Kind::Error, self.at);
        t.error = what;
        t
    }

    fn next(&mut self) -> Token {
        while matches!(self.peek(0), b' ' | b'\t' | b'\r' | b'\n') {
            self.at += 1;
        }
        let index = self.at;
        let single = match self.peek(0) {
            b'{' => Some(Kind::ObjBegin),
            b'}' => Some(Kind::ObjEnd),
            b'[' => Some(Kind::ArrBegin),
            b']' => Some(Kind::ArrEnd),
            b',' => Some(Kind::Comma),
            b':' => Some(Kind::Colon),
            0 => return self.token(Kind::End, index),
            _ => None,
        };
        if let Some(kind) = single {
            self.at += 1;
            return self.token(kind, index);
        }
        let rest = &self.data[self.at..];
        let ch = rest[0];
        if ch == b'"' {
            return self.string(index);
        }
        if ch == b'-' || ch.is_ascii_digit() {
            if !self.cfg.decode_invalid_numbers && invalid_number(rest) {
                return self.error("invalid number");
            }
            return self.number(index);
        }
        for (word, kind, value) in [
            (&b"true"[..], Kind::Boolean, true),
            (b"false", Kind::Boolean, false),
            (b"null", Kind::Null, false),
        ] {
            if rest.starts_with(word) {
                self.at += word.len();
                let mut t = self.token(kind, index);
                t.boolean = value;
                return t;
            }
        }
        if self.cfg.decode_invalid_numbers && invalid_number(rest) {
            return self.number(index);
        }
        self.error("invalid token")
    }

    fn number(&mut self, index: usize) -> Token {
        match strtod(&self.data[self.at..]) {
            Some((number, used)) => {
                self.at += used;
                let mut t = self.token(Kind::Number, index);
                t.number = number;
                t
            }
            None => self.error("invalid number"),
        }
    }

    fn string(&mut self, index: usize) -> Token {
        self.at += 1;
        let mut text = Vec::new();
        loop {
            let ch = self.peek(0);
            if ch == b'"' {
                break;
            }
            if ch == 0 {
                return self.error("unexpected end of string");
            }
            if ch == b'\\' {
                let translated = match self.peek(1) {
                    b'"' => b'"',
                    b'\\' => b'\\',
                    b'/' => b'/',
                    b'b' => 8,
                    b'f' => 12,
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'u' => {
                        if self.unicode_escape(&mut text).is_none() {
                            return self.error("invalid unicode escape code");
                        }
                        continue;
                    }
                    _ => return self.error("invalid escape code"),
                };
                self.at += 1;
                text.push(translated);
            } else {
                text.push(ch);
            }
            self.at += 1;
        }
        self.at += 1;
        let mut t = self.token(Kind::Str, index);
        t.text = text;
        t
    }

    /// `\uXXXX` (a surrogate pair as two), as UTF-8; `None` when malformed.
    fn unicode_escape(&mut self, out: &mut Vec<u8>) -> Option<()> {
        let hex4 = |d: &Decoder, at: usize| -> Option<u32> {
            let digits = d.data.get(at..at + 4)?;
            let text = std::str::from_utf8(digits).ok()?;
            if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            u32::from_str_radix(text, 16).ok()
        };
        let mut code = hex4(self, self.at + 2)?;
        let mut length = 6;
        if code & 0xF800 == 0xD800 {
            if code & 0x400 != 0 {
                return None;
            }
            if self.peek(6) != b'\\' || self.peek(7) != b'u' {
                return None;
            }
            let low = hex4(self, self.at + 8)?;
            if low & 0xFC00 != 0xDC00 {
                return None;
            }
            code = (((code & 0x3FF) << 10) | (low & 0x3FF)) + 0x10000;
            length = 12;
        }
        let mut buf = [0u8; 4];
        out.extend_from_slice(char::from_u32(code)?.encode_utf8(&mut buf).as_bytes());
        self.at += length;
        Some(())
    }

    fn value(&mut self, token: Token) -> Result<Value, String> {
        Ok(match token.kind {
            Kind::Str => Value::String(
                self.lua
                    .create_string(&token.text)
                    .map_err(|e| e.to_string())?,
            ),
            Kind::Number => Value::Number(token.number),
            Kind::Boolean => Value::Boolean(token.boolean),
            Kind::Null => Value::LightUserData(LightUserData(std::ptr::null_mut())),
            Kind::ObjBegin => self.object()?,
            Kind::ArrBegin => self.array()?,
            _ => return Err(expected("value", &token)),
        })
    }

    fn descend(&mut self) -> Result<(), String> {
        self.depth += 1;
        if self.depth > self.cfg.decode_max_depth {
            return Err(format!(
                "Found too many nested data structures ({}) at character {}",
                self.depth, self.at
            ));
        }
        Ok(())
    }

    fn new_table(&self) -> Result<Table, String> {
        self.lua.create_table().map_err(|e| e.to_string())
    }

    fn object(&mut self) -> Result<Value, String> {
        self.descend()?;
        let table = self.new_table()?;
        let mut token = self.next();
        if token.kind == Kind::ObjEnd {
            self.depth -= 1;
            return Ok(Value::Table(table));
        }
        loop {
            if token.kind != Kind::Str {
                return Err(expected("object key string", &token));
            }
            let key = self
                .lua
                .create_string(&token.text)
                .map_err(|e| e.to_string())?;
            token = self.next();
            if token.kind != Kind::Colon {
                return Err(expected("colon", &token));
            }
            token = self.next();
            let value = self.value(token)?;
            table.raw_set(key, value).map_err(|e| e.to_string())?;
            token = self.next();
            if token.kind == Kind::ObjEnd {
                self.depth -= 1;
                return Ok(Value::Table(table));
            }
            if token.kind != Kind::Comma {
                return Err(expected("comma or object end", &token));
            }
            token = self.next();
        }
    }

    fn array(&mut self) -> Result<Value, String> {
        self.descend()?;
        let table = self.new_table()?;
        let mut token = self.next();
        if token.kind == Kind::ArrEnd {
            self.depth -= 1;
            return Ok(Value::Table(table));
        }
        let mut i = 1;
        loop {
            let value = self.value(token)?;
            table.raw_set(i, value).map_err(|e| e.to_string())?;
            i += 1;
            token = self.next();
            if token.kind == Kind::ArrEnd {
                self.depth -= 1;
                return Ok(Value::Table(table));
            }
            if token.kind != Kind::Comma {
                return Err(expected("comma or array end", &token));
            }
            token = self.next();
        }
    }
}

fn expected(what: &str, token: &Token) -> String {
    let found = if token.kind == Kind::Error {
        token.error
    } else {
        token.kind.name()
    };
    format!(
        "Expected {what} but found {found} at character {}",
        token.index + 1
    )
}

/// lua-cjson's `json_is_invalid_number`: what strict JSON refuses but `strtod` reads (a
/// sign of `+`, hex, a leading zero, inf, nan).
fn invalid_number(text: &[u8]) -> bool {
    if text.first() == Some(&b'+') {
        return true;
    }
    let p = text.strip_prefix(b"-").unwrap_or(text);
    match p.first() {
        Some(b'0') => {
            let next = p.get(1).copied().unwrap_or(0);
            (next | 0x20) == b'x' || next.is_ascii_digit()
        }
        Some(&c) if c <= b'9' => false,
        _ => {
            let lower = |n: usize| p.get(..n).map(|s| s.to_ascii_lowercase());
            lower(3).is_some_and(|w| w == b"inf" || w == b"nan")
        }
    }
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
