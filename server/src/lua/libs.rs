//! The libraries Redis embeds in its Lua and that real scripts call: `cjson` (its own module,
//! `cjson.rs`), `cmsgpack` (here: lua-cmsgpack 0.4.0's `pack`, `unpack`, `unpack_one`,
//! `unpack_limit`), and `bit` and `struct` (`bitstruct.rs`). BullMQ's scripts, for one, decode
//! their options with `cmsgpack.unpack` and store job data with `cjson.encode`.
//!
//! Each library function is written in Rust and answers `(true, results…)` or
//! `(false, message)` ([`ok`], [`fail`]); [`install`] puts a small Lua wrapper around every
//! one that returns the results or raises the message as a plain string error at the
//! script's line, which is what the C libraries' `luaL_error` does. (An mlua error would
//! reach the script as a userdata with a Rust backtrace, not the string scripts match on.)

use mlua::{Function, Lua, MultiValue, Table, Value};

use super::coerce::{fail, lua_tonumber, ok, string_arg, type_name, LibResult};

/// Wraps every function of a library table: results pass through, a failure is raised.
/// `error`'s level 3 skips `finish` and the wrapper's tail call, reaching the caller.
/// `cjson.new()` makes a fresh module, wrapped the same way.
const WRAP: &str = r#"
local error_, type_, pairs_ = error, type, pairs
local function finish(okay, ...)
    if okay then return ... end
    error_((...), 3)
end
local function wrap(f)
    return function(...) return finish(f(...)) end
end
local wrap_table
wrap_table = function(t)
    local out = {}
    for k, v in pairs_(t) do
        if type_(v) == 'function' then out[k] = wrap(v) else out[k] = v end
    end
    if t.new then
        local new = t.new
        out.new = function() local _, m = new() return wrap_table(m) end
    end
    return out
end
return function(libraries)
    for name, t in pairs_(libraries) do rawset(_G, name, wrap_table(t)) end
end
"#;

/// Installs `cjson`, `cmsgpack`, `bit` and `struct` as globals.
pub fn install(lua: &Lua) -> mlua::Result<()> {
    let libraries = lua.create_table()?;
    libraries.set("cjson", super::cjson::module(lua)?)?;
    libraries.set("cmsgpack", cmsgpack(lua)?)?;
    libraries.set("bit", super::bitstruct::bit(lua)?)?;
    libraries.set("struct", super::bitstruct::structs(lua)?)?;
    let install: Function = lua.load(WRAP).set_name("=libs").eval()?;
    install.call::<()>(libraries)
}

/// lua-cmsgpack nests tables this deep; a deeper one packs as nil (it survives cycles so).
const PACK_NESTING_MAX: usize = 16;
/// Deepest nesting `unpack` accepts (lua-cmsgpack's bound is the C stack's).
const UNPACK_DEPTH_MAX: usize = 1000;

const MISSING_BYTES: &str = "Missing bytes in input.";
const BAD_FORMAT: &str = "Bad data format in input.";

/// The `cmsgpack` table.
fn cmsgpack(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.set("_NAME", "cmsgpack")?;
    t.set("_VERSION", "lua-cmsgpack 0.4.0")?;
    t.set("_COPYRIGHT", "Copyright (C) 2012, Salvatore Sanfilippo")?;
    t.set("_DESCRIPTION", "MessagePack C implementation for Lua")?;
    t.set(
        "pack",
        lua.create_function(|lua, args: MultiValue| {
            if args.is_empty() {
                return fail(
                    lua,
                    "bad argument #0 to 'pack' (MessagePack pack needs input.)",
                );
            }
            let mut out = Vec::new();
            for value in args.iter() {
                pack(value, &mut out, 0)?;
            }
            ok(lua, vec![Value::String(lua.create_string(&out)?)])
        })?,
    )?;
    t.set(
        "unpack",
        lua.create_function(|lua, args: MultiValue| unpack_call(lua, &args, "unpack", 0, 0))?,
    )?;
    t.set(
        "unpack_one",
        lua.create_function(|lua, args: MultiValue| {
            match integer_arg(&args, 1, "unpack_one", Some(0)) {
                Ok(offset) => unpack_call(lua, &args, "unpack_one", 1, offset),
                Err(e) => fail(lua, &e),
            }
        })?,
    )?;
    t.set(
        "unpack_limit",
        lua.create_function(|lua, args: MultiValue| {
            let limit = integer_arg(&args, 1, "unpack_limit", None);
            let offset = integer_arg(&args, 2, "unpack_limit", Some(0));
            match (limit, offset) {
                (Ok(limit), Ok(offset)) => unpack_call(lua, &args, "unpack_limit", limit, offset),
                (Err(e), _) | (_, Err(e)) => fail(lua, &e),
            }
        })?,
    )?;
    Ok(t)
}

/// `luaL_checkinteger` (`default` None) or `luaL_optinteger`: a number (or numeric string),
/// truncated.
fn integer_arg(
    args: &MultiValue,
    i: usize,
    function: &str,
    default: Option<i64>,
) -> Result<i64, String> {
    let value = args.get(i).unwrap_or(&Value::Nil);
    if let (Value::Nil, Some(default)) = (value, default) {
        return Ok(default);
    }
    let number = lua_tonumber(value);
    let got = if i >= args.len() {
        "no value"
    } else {
        type_name(value)
    };
    number.map(|n| n as i64).ok_or_else(|| {
        format!(
            "bad argument #{} to '{function}' (number expected, got {got})",
            i + 1
        )
    })
}

/// lua-cmsgpack's `mp_unpack_full`: decodes up to `limit` values from `offset` (0 and 0:
/// all of them, without the offset result); otherwise the next offset (-1 at the end)
/// comes first.
fn unpack_call(lua: &Lua, args: &MultiValue, function: &str, limit: i64, offset: i64) -> LibResult {
    let bytes = match string_arg(args, 0, function) {
        Ok(bytes) => bytes,
        Err(e) => return fail(lua, &e),
    };
    let len = bytes.len();
    if offset < 0 || limit < 0 {
        return fail(
            lua,
            &format!(
                "Invalid request to unpack with offset of {} and limit of {}.",
                offset as i32, len as i32
            ),
        );
    }
    if offset as u64 > len as u64 {
        return fail(
            lua,
            &format!(
                "Start offset {} greater than input length {}.",
                offset as i32, len as i32
            ),
        );
    }
    let decode_all = limit == 0 && offset == 0;
    let limit = if decode_all { i64::MAX } else { limit };
    let mut reader = Reader {
        bytes: &bytes,
        at: offset as usize,
    };
    let mut values = Vec::new();
    while reader.at < len && (values.len() as i64) < limit {
        match reader.value(lua, 0)? {
            Ok(value) => values.push(value),
            Err(message) => return fail(lua, message),
        }
    }
    if !decode_all {
        let next = if reader.at == len {
            -1
        } else {
            reader.at as i64
        };
        values.insert(0, Value::Number(next as f64));
    }
    ok(lua, values)
}

/// A decoding failure's message, or a Lua error (out of memory).
type Decoded = mlua::Result<Result<Value, &'static str>>;

/// A msgpack decoder over one string, as lua-cmsgpack's: no bin or ext types (they are
/// "bad data format"), a uint 64 beyond i64 wraps negative, map keys may not be nil or NaN.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

/// Returns early with a decoding failure.
macro_rules! need {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(message) => return Ok(Err(message)),
        }
    };
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], &'static str> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len())
            .ok_or(MISSING_BYTES)?;
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn uint(&mut self, n: usize) -> Result<u64, &'static str> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    fn int(&mut self, n: usize) -> Result<i64, &'static str> {
        let raw = self.uint(n)?;
        let shift = 64 - 8 * n as u32;
        Ok(((raw << shift) as i64) >> shift)
    }

    fn string(&mut self, lua: &Lua, len: usize) -> Decoded {
        let bytes = need!(self.take(len));
        Ok(Ok(Value::String(lua.create_string(bytes)?)))
    }

    fn array(&mut self, lua: &Lua, len: usize, depth: usize) -> Decoded {
        let table = lua.create_table()?;
        for i in 1..=len {
            let item = need!(self.value(lua, depth + 1)?);
            table.raw_set(i, item)?;
        }
        Ok(Ok(Value::Table(table)))
    }

    fn map(&mut self, lua: &Lua, len: usize, depth: usize) -> Decoded {
        let table = lua.create_table()?;
        for _ in 0..len {
            let key = need!(self.value(lua, depth + 1)?);
            let item = need!(self.value(lua, depth + 1)?);
            match key {
                Value::Nil => return Ok(Err("table index is nil")),
                Value::Number(n) if n.is_nan() => return Ok(Err("table index is NaN")),
                key => table.raw_set(key, item)?,
            }
        }
        Ok(Ok(Value::Table(table)))
    }

    fn number(n: f64) -> Decoded {
        Ok(Ok(Value::Number(n)))
    }

    // Long: one arm per MessagePack type tag, as the format's table lists them.
    fn value(&mut self, lua: &Lua, depth: usize) -> Decoded {
        if depth > UNPACK_DEPTH_MAX {
            return Ok(Err("stack overflow (too many nested values in input)"));
        }
        let tag = need!(self.take(1))[0];
        match tag {
            0x00..=0x7f => Self::number(f64::from(tag)),
            0x80..=0x8f => self.map(lua, usize::from(tag & 0x0f), depth),
            0x90..=0x9f => self.array(lua, usize::from(tag & 0x0f), depth),
            0xa0..=0xbf => self.string(lua, usize::from(tag & 0x1f)),
            0xc0 => Ok(Ok(Value::Nil)),
            0xc2 => Ok(Ok(Value::Boolean(false))),
            0xc3 => Ok(Ok(Value::Boolean(true))),
            0xca => Self::number(f64::from(f32::from_bits(need!(self.uint(4)) as u32))),
            0xcb => Self::number(f64::from_bits(need!(self.uint(8)))),
            0xcc => Self::number(need!(self.uint(1)) as f64),
            0xcd => Self::number(need!(self.uint(2)) as f64),
            0xce => Self::number(need!(self.uint(4)) as f64),
            0xcf => Self::number(need!(self.uint(8)) as i64 as f64),
            0xd0 => Self::number(need!(self.int(1)) as f64),
            0xd1 => Self::number(need!(self.int(2)) as f64),
            0xd2 => Self::number(need!(self.int(4)) as f64),
            0xd3 => Self::number(need!(self.int(8)) as f64),
            0xd9 => {
                let len = need!(self.uint(1)) as usize;
                self.string(lua, len)
            }
            0xda => {
                let len = need!(self.uint(2)) as usize;
                self.string(lua, len)
            }
            0xdb => {
                let len = need!(self.uint(4)) as usize;
                self.string(lua, len)
            }
            0xdc => {
                let len = need!(self.uint(2)) as usize;
                self.array(lua, len, depth)
            }
            0xdd => {
                let len = need!(self.uint(4)) as usize;
                self.array(lua, len, depth)
            }
            0xde => {
                let len = need!(self.uint(2)) as usize;
                self.map(lua, len, depth)
            }
            0xdf => {
                let len = need!(self.uint(4)) as usize;
                self.map(lua, len, depth)
            }
            0xe0..=0xff => Self::number(f64::from(tag as i8)),
            // bin, ext and the unused 0xc1: lua-cmsgpack reads none of them.
            _ => Ok(Err(BAD_FORMAT)),
        }
    }
}

fn pack_len(out: &mut Vec<u8>, len: usize, fix: Option<(u8, usize)>, tags: [u8; 3]) {
    match fix {
        Some((base, max)) if len <= max => out.push(base | len as u8),
        _ if len <= u8::MAX as usize && tags[0] != 0 => out.extend([tags[0], len as u8]),
        _ if len <= u16::MAX as usize => {
            out.push(tags[1]);
            out.extend((len as u16).to_be_bytes());
        }
        _ => {
            out.push(tags[2]);
            out.extend((len as u32).to_be_bytes());
        }
    }
}

/// An integer in its smallest msgpack form, as lua-cmsgpack writes it.
fn pack_int(n: i64, out: &mut Vec<u8>) {
    match n {
        0..=0x7f => out.push(n as u8),
        -32..=-1 => out.push(n as i8 as u8),
        0x80..=0xff => out.extend([0xcc, n as u8]),
        0x100..=0xffff => {
            out.push(0xcd);
            out.extend((n as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(0xce);
            out.extend((n as u32).to_be_bytes());
        }
        -0x80..=-33 => out.extend([0xd0, n as i8 as u8]),
        -0x8000..=-0x81 => {
            out.push(0xd1);
            out.extend((n as i16).to_be_bytes());
        }
        -0x8000_0000..=-0x8001 => {
            out.push(0xd2);
            out.extend((n as i32).to_be_bytes());
        }
        n if n > 0 => {
            out.push(0xcf);
            out.extend((n as u64).to_be_bytes());
        }
        n => {
            out.push(0xd3);
            out.extend(n.to_be_bytes());
        }
    }
}

/// A number as lua-cmsgpack packs it: an integer when an i64 holds it exactly, else a
/// float when an f32 does, else a double.
fn pack_number(n: f64, out: &mut Vec<u8>) {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if (-TWO_63..TWO_63).contains(&n) && (n as i64) as f64 == n {
        pack_int(n as i64, out);
    } else if f64::from(n as f32) == n {
        out.push(0xca);
        out.extend((n as f32).to_bits().to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend(n.to_bits().to_be_bytes());
    }
}

/// Whether a table's keys are exactly 1..n (lua-cmsgpack's `table_is_an_array`: an empty
/// table is one), and n.
fn array_len(table: &Table) -> mlua::Result<Option<usize>> {
    let mut count = 0usize;
    let mut max = 0usize;
    for pair in table.clone().pairs::<Value, Value>() {
        let (key, _) = pair?;
        let n = match key {
            Value::Integer(n) => n as f64,
            Value::Number(n) => n,
            _ => return Ok(None),
        };
        if n <= 0.0 || n > f64::from(i32::MAX) || n.fract() != 0.0 {
            return Ok(None);
        }
        max = max.max(n as usize);
        count += 1;
    }
    Ok((count == max).then_some(count))
}

fn pack(value: &Value, out: &mut Vec<u8>, level: usize) -> mlua::Result<()> {
    match value {
        Value::String(s) => {
            let bytes = s.as_bytes();
            pack_len(out, bytes.len(), Some((0xa0, 31)), [0xd9, 0xda, 0xdb]);
            out.extend_from_slice(&bytes);
        }
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(n) => pack_int(*n, out),
        Value::Number(n) => pack_number(*n, out),
        Value::Table(table) if level < PACK_NESTING_MAX => match array_len(table)? {
            Some(len) => {
                pack_len(out, len, Some((0x90, 15)), [0, 0xdc, 0xdd]);
                for i in 1..=len {
                    pack(&table.raw_get::<Value>(i)?, out, level + 1)?;
                }
            }
            None => {
                let pairs: Vec<(Value, Value)> = table
                    .clone()
                    .pairs::<Value, Value>()
                    .collect::<mlua::Result<_>>()?;
                pack_len(out, pairs.len(), Some((0x80, 15)), [0, 0xde, 0xdf]);
                for (k, v) in &pairs {
                    pack(k, out, level + 1)?;
                    pack(v, out, level + 1)?;
                }
            }
        },
        // nil, functions, userdata (cjson.null too) and too-deep tables pack as nil.
        _ => out.push(0xc0),
    }
    Ok(())
}
