//! Replies and Lua values, both ways, as Redis converts them (RESP2 and RESP3, nesting
//! bounded), and a script's errors as Redis words them (the chunk, the line, the SHA).

use super::*;

/// A reply as Lua sees it: Redis's RESP2-to-Lua rules, or its RESP3 ones once the script
/// called `redis.setresp(3)` (`resp`): null as nil, booleans as booleans, and maps, sets,
/// doubles, big numbers and verbatim strings as tables named for their type.
// Long: one arm per reply type, as Redis converts each (RESP2 and RESP3); the table reads best whole.
pub(super) fn frame_to_lua(
    lua: &Lua,
    frame: &Frame,
    depth: usize,
    resp: u8,
) -> mlua::Result<Value> {
    if depth > NESTING_MAX {
        return Err(mlua::Error::runtime("reply nested too deeply"));
    }
    let list = |items: &mut dyn Iterator<Item = &Frame>| -> mlua::Result<Value> {
        let table = lua.create_table()?;
        for (i, item) in items.enumerate() {
            table.raw_set(i + 1, frame_to_lua(lua, item, depth + 1, resp)?)?;
        }
        Ok(Value::Table(table))
    };
    let pairs = |pairs: &[(Frame, Frame)]| -> mlua::Result<Value> {
        let table = lua.create_table()?;
        for (i, (k, v)) in pairs.iter().enumerate() {
            let pair = lua.create_table()?;
            pair.raw_set(1, frame_to_lua(lua, k, depth + 1, resp)?)?;
            pair.raw_set(2, frame_to_lua(lua, v, depth + 1, resp)?)?;
            table.raw_set(i + 1, pair)?;
        }
        Ok(Value::Table(table))
    };
    let named = |name: &str, value: Value| -> mlua::Result<Value> {
        let table = lua.create_table()?;
        table.raw_set(name, value)?;
        Ok(Value::Table(table))
    };
    if resp == 3 {
        match frame {
            Frame::Null | Frame::NullArray => return Ok(Value::Nil),
            Frame::Boolean(b) => return Ok(Value::Boolean(*b)),
            Frame::Double(d) => return named("double", Value::Number(*d)),
            Frame::DoubleText(text) => {
                let d = std::str::from_utf8(text)
                    .ok()
                    .and_then(|t| t.parse::<f64>().ok())
                    .unwrap_or(0.0);
                return named("double", Value::Number(d));
            }
            Frame::BigNumber(b) => {
                return named("big_number", Value::String(lua.create_string(b)?))
            }
            Frame::Verbatim(format, text) => {
                let inner = lua.create_table()?;
                inner.raw_set("string", lua.create_string(text)?)?;
                inner.raw_set("format", lua.create_string(format)?)?;
                return named("verbatim_string", Value::Table(inner));
            }
            Frame::Map(items) | Frame::Keyed(items) => {
                let map = lua.create_table()?;
                for (k, v) in items {
                    let key = frame_to_lua(lua, k, depth + 1, resp)?;
                    if !matches!(key, Value::Nil) {
                        map.raw_set(key, frame_to_lua(lua, v, depth + 1, resp)?)?;
                    }
                }
                return named("map", Value::Table(map));
            }
            Frame::Set(items) => {
                let set = lua.create_table()?;
                for item in items {
                    let member = frame_to_lua(lua, item, depth + 1, resp)?;
                    if !matches!(member, Value::Nil) {
                        set.raw_set(member, true)?;
                    }
                }
                return named("set", Value::Table(set));
            }
            Frame::Pairs(items) => return pairs(items),
            _ => {}
        }
    }
    Ok(match frame {
        Frame::Integer(n) => Value::Integer(*n),
        Frame::Bulk(b) | Frame::BigNumber(b) | Frame::DoubleText(b) | Frame::Verbatim(_, b) => {
            Value::String(lua.create_string(b)?)
        }
        Frame::Double(d) => Value::String(lua.create_string(format_double(*d))?),
        Frame::Null | Frame::NullArray => Value::Boolean(false),
        Frame::Boolean(b) => Value::Integer(i64::from(*b)),
        Frame::Simple(text) => named("ok", Value::String(lua.create_string(text)?))?,
        Frame::Error(text) | Frame::BulkError(text) => {
            // Redis marks a command's error so that returning it does not count it twice.
            let table = lua.create_table()?;
            table.raw_set("err", lua.create_string(text)?)?;
            table.raw_set("ignore_error_stats_update", true)?;
            Value::Table(table)
        }
        Frame::Array(items) | Frame::Set(items) | Frame::Push(items) | Frame::Several(items) => {
            list(&mut items.iter())?
        }
        Frame::Map(items) | Frame::Pairs(items) => {
            list(&mut items.iter().flat_map(|(k, v)| [k, v]))?
        }
        Frame::Keyed(items) => pairs(items)?,
        Frame::Written => Value::Nil,
    })
}

/// A status or error text as Redis replies it from a script: line breaks become spaces.
pub(super) fn one_line(text: &[u8]) -> Bytes {
    text.iter()
        .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b })
        .collect()
}

/// A script's result as a reply (Redis's Lua-to-RESP rules): `{err=…}`, `{ok=…}`,
/// `{double=…}`, `{big_number=…}`, `{verbatim_string={format=…, string=…}}`, `{map=…}`,
/// `{set=…}`, else an array up to the first nil. Booleans follow the script's
/// `redis.setresp` (`resp`): 1 and nil under 2, booleans under 3.
pub(super) fn lua_to_frame(value: &Value, depth: usize, resp: u8) -> Frame {
    if depth > NESTING_MAX {
        return Frame::static_error("ERR reached lua stack limit");
    }
    match value {
        Value::Nil => Frame::Null,
        Value::Boolean(b) if resp == 3 => Frame::Boolean(*b),
        Value::Boolean(false) => Frame::Null,
        Value::Boolean(true) => Frame::Integer(1),
        Value::Integer(n) => Frame::Integer(*n),
        Value::Number(n) => Frame::Integer(*n as i64),
        Value::String(s) => Frame::Bulk(Bytes::copy_from_slice(&s.as_bytes())),
        Value::Table(table) => table_to_frame(table, depth, resp),
        _ => Frame::Null,
    }
}

pub(super) fn table_to_frame(table: &mlua::Table, depth: usize, resp: u8) -> Frame {
    let field = |name: &str| table.raw_get::<Value>(name).unwrap_or(Value::Nil);
    if let Value::String(_) = field("err") {
        // Redis reads the text through metamethods, as its error extraction does.
        let text = match table.get::<Value>("err") {
            Ok(Value::String(err)) => err.as_bytes().to_vec(),
            _ => Vec::new(),
        };
        return Frame::Error(one_line(&text));
    }
    if let Value::String(ok) = field("ok") {
        return Frame::Simple(one_line(&ok.as_bytes()));
    }
    match field("double") {
        Value::Number(n) => return Frame::Double(n),
        Value::Integer(n) => return Frame::Double(n as f64),
        _ => {}
    }
    if let Value::String(big) = field("big_number") {
        return Frame::BigNumber(one_line(&big.as_bytes()));
    }
    if let Value::Table(verbatim) = field("verbatim_string") {
        if let (Ok(Value::String(format)), Ok(Value::String(text))) = (
            verbatim.raw_get::<Value>("format"),
            verbatim.raw_get::<Value>("string"),
        ) {
            let format = format.as_bytes();
            let mut tag = *b"txt";
            if format.len() == 3 {
                tag.copy_from_slice(&format);
            }
            return Frame::Verbatim(tag, Bytes::copy_from_slice(&text.as_bytes()));
        }
    }
    if let Value::Table(map) = field("map") {
        let mut items = Vec::new();
        for pair in map.pairs::<Value, Value>() {
            let Ok((k, v)) = pair else { break };
            items.push((
                lua_to_frame(&k, depth + 1, resp),
                lua_to_frame(&v, depth + 1, resp),
            ));
        }
        return Frame::Map(items);
    }
    if let Value::Table(set) = field("set") {
        let mut items = Vec::new();
        for pair in set.pairs::<Value, Value>() {
            let Ok((k, _)) = pair else { break };
            items.push(lua_to_frame(&k, depth + 1, resp));
        }
        return Frame::Set(items);
    }
    let mut items = Vec::new();
    for i in 1.. {
        match table.raw_get::<Value>(i) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(item) => items.push(lua_to_frame(&item, depth + 1, resp)),
        }
    }
    Frame::Array(items)
}

/// The line a Lua error message points at (`user_script:LINE:`), for Redis's error suffix.
pub(super) fn error_line(message: &str, chunk: &str) -> Option<u32> {
    let at = message.find(chunk)? + chunk.len() + 1;
    let digits: String = message[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// A script failure as Redis 7 words it.
pub(super) fn script_error(
    error: &mlua::Error,
    sha: &str,
    chunk: &str,
    raised: Option<&crate::lua::sandbox::RaisedTable>,
) -> Frame {
    let (text, line) = match crate::lua::root_cause(error) {
        mlua::Error::ExternalError(e) => match e.downcast_ref::<crate::lua::ReplyError>() {
            Some(call) => (
                call.0.clone(),
                call.1.or_else(|| error_line(&error.to_string(), chunk)),
            ),
            None => (format!("ERR {e}"), None),
        },
        mlua::Error::RuntimeError(message)
            if raised.and_then(|t| t.reply_for(message)).is_some() =>
        {
            raised
                .and_then(|t| t.reply_for(message))
                .expect("matched above")
        }
        mlua::Error::RuntimeError(message) => {
            let first = message.lines().next().unwrap_or_default();
            let line = error_line(first, chunk);
            match first.find(&format!("{chunk}:")) {
                Some(at) => (format!("ERR {}", &first[at..]), line),
                None => (format!("ERR {first}"), line),
            }
        }
        other => (
            format!(
                "ERR {}",
                other.to_string().lines().next().unwrap_or_default()
            ),
            None,
        ),
    };
    Frame::error(format!(
        "{text} script: {sha}, on @{chunk}:{}.",
        line.unwrap_or(1)
    ))
}
