//! The libraries Redis embeds in its Lua and that real scripts call: `cjson` (encode, decode,
//! null) and `cmsgpack` (unpack, pack). BullMQ's scripts, for one, decode their options with
//! `cmsgpack.unpack` and store job data with `cjson.encode`.
//!
//! They follow lua-cjson and lua-cmsgpack where scripts can tell: an empty table encodes as
//! `{}`, a table whose keys are exactly 1..n as an array, integers without a fraction, JSON
//! `null` decodes to `cjson.null`; msgpack maps and arrays become tables, and several packed
//! values unpack to several results.

use mlua::{LightUserData, Lua, MultiValue, Table, Value};

/// Deepest nesting either codec accepts (lua-cjson's default is 1000; ours is the reply
/// nesting bound's order).
const DEPTH_MAX: usize = 128;

pub fn install(lua: &Lua) -> mlua::Result<()> {
    let cjson = lua.create_table()?;
    cjson.set(
        "null",
        Value::LightUserData(LightUserData(std::ptr::null_mut())),
    )?;
    cjson.set(
        "encode",
        lua.create_function(|_, value: Value| {
            let mut out = String::new();
            encode_json(&value, &mut out, 0)?;
            Ok(out)
        })?,
    )?;
    cjson.set(
        "decode",
        lua.create_function(|lua, text: mlua::String| {
            let parsed: serde_json::Value =
                serde_json::from_slice(&text.as_bytes()).map_err(|e| {
                    mlua::Error::runtime(format!("Expected value but found invalid token: {e}"))
                })?;
            json_to_lua(lua, &parsed, 0)
        })?,
    )?;
    lua.globals().set("cjson", cjson)?;

    let cmsgpack = lua.create_table()?;
    cmsgpack.set(
        "unpack",
        lua.create_function(|lua, data: mlua::String| {
            let bytes = data.as_bytes();
            let mut reader = Reader {
                bytes: &bytes,
                at: 0,
            };
            let mut values = Vec::new();
            while reader.at < bytes.len() {
                values.push(reader.value(lua, 0)?);
            }
            Ok(MultiValue::from_vec(values))
        })?,
    )?;
    cmsgpack.set(
        "pack",
        lua.create_function(|lua, values: MultiValue| {
            let mut out = Vec::new();
            for value in values.iter() {
                pack(value, &mut out, 0)?;
            }
            lua.create_string(&out)
        })?,
    )?;
    lua.globals().set("cmsgpack", cmsgpack)?;
    Ok(())
}

fn too_deep() -> mlua::Error {
    mlua::Error::runtime("Cannot serialise, excessive nesting")
}

/// A table's length when its keys are exactly 1..n (an array); `None` otherwise.
fn array_len(table: &Table) -> mlua::Result<Option<usize>> {
    let mut count = 0usize;
    let mut max = 0usize;
    for pair in table.clone().pairs::<Value, Value>() {
        let (key, _) = pair?;
        match key {
            Value::Integer(n) if n >= 1 => max = max.max(n as usize),
            Value::Number(n) if n >= 1.0 && n.fract() == 0.0 => max = max.max(n as usize),
            _ => return Ok(None),
        }
        count += 1;
    }
    Ok((count > 0 && count == max).then_some(count))
}

fn encode_number(n: f64, out: &mut String) -> mlua::Result<()> {
    if !n.is_finite() {
        return Err(mlua::Error::runtime(
            "Cannot serialise number: must not be NaN or Inf",
        ));
    }
    if n.fract() == 0.0 && n.abs() < 1e15 {
        out.push_str(&(n as i64).to_string());
    } else {
        out.push_str(&format!("{n}"));
    }
    Ok(())
}

fn encode_json(value: &Value, out: &mut String, depth: usize) -> mlua::Result<()> {
    if depth > DEPTH_MAX {
        return Err(too_deep());
    }
    match value {
        Value::Nil => out.push_str("null"),
        Value::LightUserData(p) if p.0.is_null() => out.push_str("null"),
        Value::Boolean(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Integer(n) => out.push_str(&n.to_string()),
        Value::Number(n) => encode_number(*n, out)?,
        Value::String(s) => {
            let text = s.to_string_lossy();
            out.push_str(&serde_json::to_string(&text).expect("a string serialises"));
        }
        Value::Table(table) => match array_len(table)? {
            Some(len) => {
                out.push('[');
                for i in 1..=len {
                    if i > 1 {
                        out.push(',');
                    }
                    encode_json(&table.raw_get::<Value>(i)?, out, depth + 1)?;
                }
                out.push(']');
            }
            None => {
                out.push('{');
                let mut first = true;
                for pair in table.clone().pairs::<Value, Value>() {
                    let (key, item) = pair?;
                    let key = match key {
                        Value::String(s) => s.to_string_lossy(),
                        Value::Integer(n) => n.to_string(),
                        Value::Number(n) => {
                            let mut text = String::new();
                            encode_number(n, &mut text)?;
                            text
                        }
                        _ => {
                            return Err(mlua::Error::runtime(
                                "Cannot serialise table: table key must be a number or string",
                            ))
                        }
                    };
                    if !first {
                        out.push(',');
                    }
                    first = false;
                    out.push_str(&serde_json::to_string(&key).expect("a string serialises"));
                    out.push(':');
                    encode_json(&item, out, depth + 1)?;
                }
                out.push('}');
            }
        },
        other => {
            return Err(mlua::Error::runtime(format!(
                "Cannot serialise {}: type not supported",
                other.type_name()
            )))
        }
    }
    Ok(())
}

fn json_to_lua(lua: &Lua, value: &serde_json::Value, depth: usize) -> mlua::Result<Value> {
    if depth > DEPTH_MAX {
        return Err(mlua::Error::runtime(
            "Found too many nested data structures",
        ));
    }
    Ok(match value {
        serde_json::Value::Null => Value::LightUserData(LightUserData(std::ptr::null_mut())),
        serde_json::Value::Bool(b) => Value::Boolean(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Integer(i),
            None => Value::Number(n.as_f64().unwrap_or(0.0)),
        },
        serde_json::Value::String(s) => Value::String(lua.create_string(s)?),
        serde_json::Value::Array(items) => {
            let table = lua.create_table()?;
            for (i, item) in items.iter().enumerate() {
                table.raw_set(i + 1, json_to_lua(lua, item, depth + 1)?)?;
            }
            Value::Table(table)
        }
        serde_json::Value::Object(map) => {
            let table = lua.create_table()?;
            for (key, item) in map {
                table.raw_set(key.as_str(), json_to_lua(lua, item, depth + 1)?)?;
            }
            Value::Table(table)
        }
    })
}

/// A msgpack decoder over one string.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> mlua::Result<&[u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| mlua::Error::runtime("Missing bytes in input."))?;
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn uint(&mut self, n: usize) -> mlua::Result<u64> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    fn int(&mut self, n: usize) -> mlua::Result<i64> {
        let raw = self.uint(n)?;
        let shift = 64 - 8 * n as u32;
        Ok(((raw << shift) as i64) >> shift)
    }

    fn string(&mut self, lua: &Lua, len: usize) -> mlua::Result<Value> {
        let bytes = self.take(len)?.to_vec();
        Ok(Value::String(lua.create_string(&bytes)?))
    }

    fn array(&mut self, lua: &Lua, len: usize, depth: usize) -> mlua::Result<Value> {
        let table = lua.create_table()?;
        for i in 1..=len {
            let item = self.value(lua, depth + 1)?;
            table.raw_set(i, item)?;
        }
        Ok(Value::Table(table))
    }

    fn map(&mut self, lua: &Lua, len: usize, depth: usize) -> mlua::Result<Value> {
        let table = lua.create_table()?;
        for _ in 0..len {
            let key = self.value(lua, depth + 1)?;
            let item = self.value(lua, depth + 1)?;
            if !matches!(key, Value::Nil) {
                table.raw_set(key, item)?;
            }
        }
        Ok(Value::Table(table))
    }

    // Long: one arm per MessagePack type tag, as the format's table lists them.
    fn value(&mut self, lua: &Lua, depth: usize) -> mlua::Result<Value> {
        if depth > DEPTH_MAX {
            return Err(mlua::Error::runtime("Too deep nesting in input."));
        }
        let tag = self.take(1)?[0];
        Ok(match tag {
            0x00..=0x7f => Value::Integer(i64::from(tag)),
            0x80..=0x8f => return self.map(lua, usize::from(tag & 0x0f), depth),
            0x90..=0x9f => return self.array(lua, usize::from(tag & 0x0f), depth),
            0xa0..=0xbf => return self.string(lua, usize::from(tag & 0x1f)),
            0xc0 => Value::Nil,
            0xc2 => Value::Boolean(false),
            0xc3 => Value::Boolean(true),
            0xc4 | 0xd9 => {
                let len = self.uint(1)? as usize;
                return self.string(lua, len);
            }
            0xc5 | 0xda => {
                let len = self.uint(2)? as usize;
                return self.string(lua, len);
            }
            0xc6 | 0xdb => {
                let len = self.uint(4)? as usize;
                return self.string(lua, len);
            }
            0xc7..=0xc9 => {
                // ext 8/16/32: skipped (lua-cmsgpack has no type for them).
                let len = self.uint(1 << (tag - 0xc7))? as usize;
                self.take(1 + len)?;
                Value::Nil
            }
            0xca => Value::Number(f64::from(f32::from_bits(self.uint(4)? as u32))),
            0xcb => Value::Number(f64::from_bits(self.uint(8)?)),
            0xcc => Value::Integer(self.uint(1)? as i64),
            0xcd => Value::Integer(self.uint(2)? as i64),
            0xce => Value::Integer(self.uint(4)? as i64),
            0xcf => {
                let n = self.uint(8)?;
                match i64::try_from(n) {
                    Ok(n) => Value::Integer(n),
                    Err(_) => Value::Number(n as f64),
                }
            }
            0xd0 => Value::Integer(self.int(1)?),
            0xd1 => Value::Integer(self.int(2)?),
            0xd2 => Value::Integer(self.int(4)?),
            0xd3 => Value::Integer(self.int(8)?),
            0xd4..=0xd8 => {
                // fixext 1/2/4/8/16: skipped.
                self.take(1 + (1 << (tag - 0xd4)))?;
                Value::Nil
            }
            0xdc => {
                let len = self.uint(2)? as usize;
                return self.array(lua, len, depth);
            }
            0xdd => {
                let len = self.uint(4)? as usize;
                return self.array(lua, len, depth);
            }
            0xde => {
                let len = self.uint(2)? as usize;
                return self.map(lua, len, depth);
            }
            0xdf => {
                let len = self.uint(4)? as usize;
                return self.map(lua, len, depth);
            }
            0xe0..=0xff => Value::Integer(i64::from(tag as i8)),
            0xc1 => return Err(mlua::Error::runtime("Invalid msgpack type 0xc1.")),
        })
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

fn pack(value: &Value, out: &mut Vec<u8>, depth: usize) -> mlua::Result<()> {
    if depth > DEPTH_MAX {
        return Err(too_deep());
    }
    match value {
        Value::Nil => out.push(0xc0),
        Value::LightUserData(p) if p.0.is_null() => out.push(0xc0),
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(n) => pack_int(*n, out),
        Value::Number(n) if n.fract() == 0.0 && n.abs() < 9.0e15 => pack_int(*n as i64, out),
        // A float that survives as f32 is packed as one, as lua-cmsgpack does.
        Value::Number(n) if f64::from(*n as f32) == *n => {
            out.push(0xca);
            out.extend((*n as f32).to_bits().to_be_bytes());
        }
        Value::Number(n) => {
            out.push(0xcb);
            out.extend(n.to_bits().to_be_bytes());
        }
        Value::String(s) => {
            let bytes = s.as_bytes();
            pack_len(out, bytes.len(), Some((0xa0, 31)), [0xd9, 0xda, 0xdb]);
            out.extend_from_slice(&bytes);
        }
        Value::Table(table) => match array_len(table)? {
            Some(len) => {
                pack_len(out, len, Some((0x90, 15)), [0, 0xdc, 0xdd]);
                for i in 1..=len {
                    pack(&table.raw_get::<Value>(i)?, out, depth + 1)?;
                }
            }
            None => {
                let pairs: Vec<(Value, Value)> = table
                    .clone()
                    .pairs::<Value, Value>()
                    .collect::<mlua::Result<_>>()?;
                pack_len(out, pairs.len(), Some((0x80, 15)), [0, 0xde, 0xdf]);
                for (k, v) in &pairs {
                    pack(k, out, depth + 1)?;
                    pack(v, out, depth + 1)?;
                }
            }
        },
        other => {
            return Err(mlua::Error::runtime(format!(
                "cannot pack a {}",
                other.type_name()
            )))
        }
    }
    Ok(())
}
