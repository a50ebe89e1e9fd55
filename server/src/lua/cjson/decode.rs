//! `cjson.decode`: lua-cjson's tokenizer (numbers read by `strtod`, so `0x10` and `nan`
//! decode unless `decode_invalid_numbers` is off) and its parser, with its depth limit and
//! its error texts ("Expected value but found T_END at character 1").

use super::*;

#[derive(Clone, Copy, PartialEq, Debug)]
pub(super) enum Kind {
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

pub(super) struct Token {
    kind: Kind,
    index: usize,
    text: Vec<u8>,
    number: f64,
    boolean: bool,
    error: &'static str,
}

pub(super) struct Decoder<'a> {
    lua: &'a Lua,
    cfg: &'a Config,
    /// The input up to its first NUL byte (lua-cjson reads it as a C string).
    data: &'a [u8],
    at: usize,
    depth: i64,
}

impl<'a> Decoder<'a> {
    pub(super) fn new(lua: &'a Lua, cfg: &'a Config, data: &'a [u8]) -> Decoder<'a> {
        Decoder {
            lua,
            cfg,
            data,
            at: 0,
            depth: 0,
        }
    }

    pub(super) fn run(mut self) -> Result<Value, String> {
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

pub(super) fn expected(what: &str, token: &Token) -> String {
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
pub(super) fn invalid_number(text: &[u8]) -> bool {
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
