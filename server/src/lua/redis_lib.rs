//! The `redis` table's helpers that do not touch the keyspace, as Redis 7.2 has them:
//! `error_reply`, `status_reply`, `sha1hex`, `log`, `setresp`, `set_repl`,
//! `replicate_commands`, `acl_check_cmd`, `breakpoint`, `debug`, and the constants
//! (`LOG_*`, `REPL_*`, `REDIS_VERSION`, `REDIS_VERSION_NUM`). `call` and `pcall` are
//! `commands::scripting`'s.
//!
//! Their misuse raises what Redis raises: an error reply ([`super::raise`]) such as
//! "ERR Invalid debug level.", which `pcall` turns into its text.

use mlua::{Lua, MultiValue, Table, Value};
use wetask_shards::lookup;

use super::coerce::{lua_tolstring, lua_tonumber};
use super::raise;

/// The RESP version a running script's `redis.call` replies come in (`redis.setresp`),
/// kept in the Lua state's app data; each run starts at 2.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ScriptResp(pub u8);

/// The RESP version the running script asked for.
pub fn script_resp(lua: &Lua) -> u8 {
    lua.app_data_ref::<ScriptResp>().map_or(2, |r| r.0)
}

/// Redis's `REDIS_VERSION_NUM` for a version text: `0x00MMmmpp`.
pub fn version_num(version: &str) -> i64 {
    let mut parts = version
        .split('.')
        .map(|p| p.parse::<i64>().unwrap_or(0).clamp(0, 255));
    let (major, minor, patch) = (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    );
    (major << 16) | (minor << 8) | patch
}

/// `lua_tonumber`, else 0.
fn number_of(value: &Value) -> f64 {
    lua_tonumber(value).unwrap_or(0.0)
}

/// An error table, as Redis's `luaPushErrorBuff` makes it: "-CODE msg" keeps its code,
/// anything else gets "ERR".
fn error_table(lua: &Lua, text: &[u8]) -> mlua::Result<Table> {
    let (code, message): (&[u8], &[u8]) = match text.strip_prefix(b"-") {
        Some(rest) => match rest.iter().position(|&b| b == b' ') {
            Some(space) => (&rest[..space], &rest[space + 1..]),
            None => (b"ERR", rest),
        },
        None => (b"ERR", text),
    };
    let mut message = message;
    while let [rest @ .., b'\r' | b'\n'] = message {
        message = rest;
    }
    while let [b'\r' | b'\n', rest @ ..] = message {
        message = rest;
    }
    let mut full = code.to_vec();
    full.push(b' ');
    full.extend_from_slice(message);
    let table = lua.create_table()?;
    table.set("err", lua.create_string(&full)?)?;
    Ok(table)
}

// Long: one registration per helper and constant; the table reads best whole.
/// Adds the helpers and constants to the `redis` table.
pub fn install(lua: &Lua, redis: &Table, announce_version: &str) -> mlua::Result<()> {
    let wrong_args = "wrong number or type of arguments";
    redis.set(
        "error_reply",
        lua.create_function(move |lua, args: MultiValue| match args.front() {
            Some(Value::String(s)) if args.len() == 1 => {
                let mut text = s.as_bytes().to_vec();
                if text.first() != Some(&b'-') {
                    text.insert(0, b'-');
                }
                error_table(lua, &text)
            }
            _ => error_table(lua, wrong_args.as_bytes()),
        })?,
    )?;
    redis.set(
        "status_reply",
        lua.create_function(move |lua, args: MultiValue| match args.front() {
            Some(Value::String(s)) if args.len() == 1 => {
                let table = lua.create_table()?;
                table.set("ok", s.clone())?;
                Ok(table)
            }
            _ => error_table(lua, wrong_args.as_bytes()),
        })?,
    )?;
    redis.set(
        "sha1hex",
        lua.create_function(|lua, args: MultiValue| {
            if args.len() != 1 {
                return Err(raise(lua, "ERR wrong number of arguments"));
            }
            let text = args.front().and_then(lua_tolstring).unwrap_or_default();
            Ok(super::sha1_hex(&text))
        })?,
    )?;
    redis.set(
        "setresp",
        lua.create_function(|lua, args: MultiValue| {
            if args.len() != 1 {
                return Err(raise(lua, "ERR redis.setresp() requires one argument."));
            }
            let version = number_of(&args[0]) as i64;
            if version != 2 && version != 3 {
                return Err(raise(lua, "ERR RESP version must be 2 or 3."));
            }
            lua.set_app_data(ScriptResp(version as u8));
            Ok(())
        })?,
    )?;
    // Replication knobs: WeTask has no replicas and journals a script's effects, so every
    // setting behaves as REPL_ALL; invalid flags are refused as in Redis.
    redis.set(
        "set_repl",
        lua.create_function(|lua, args: MultiValue| {
            if args.len() != 1 {
                return Err(raise(lua, "ERR redis.set_repl() requires one argument."));
            }
            let flags = number_of(&args[0]) as i64 as i32;
            if flags & !3 != 0 {
                return Err(raise(
                    lua,
                    "ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.",
                ));
            }
            Ok(())
        })?,
    )?;
    redis.set("replicate_commands", lua.create_function(|_, ()| Ok(true))?)?;
    // No ACL users: every known command is allowed.
    redis.set(
        "acl_check_cmd",
        lua.create_function(|lua, args: MultiValue| {
            let mut argv = Vec::with_capacity(args.len());
            for value in args.iter() {
                match value {
                    Value::String(_) | Value::Integer(_) | Value::Number(_) => {
                        argv.push(lua_tolstring(value).unwrap_or_default());
                    }
                    _ => {
                        return Err(raise(
                            lua,
                            "ERR Lua redis lib command arguments must be strings or integers",
                        ))
                    }
                }
            }
            if argv.is_empty() {
                return Err(raise(
                    lua,
                    "ERR Please specify at least one argument for this redis lib call",
                ));
            }
            let known = lookup(&argv[0]).is_some_and(|spec| {
                !spec.has(wetask_shards::table::flag::CONTAINER)
                    || argv.len() < 2
                    || wetask_shards::table::info::subcommand(spec.name, &argv[1]).is_some()
            });
            if !known {
                return Err(raise(
                    lua,
                    "ERR Invalid command passed to redis.acl_check_cmd()",
                ));
            }
            Ok(true)
        })?,
    )?;
    // The Lua debugger (SCRIPT DEBUG) is not offered: outside it Redis's breakpoint answers
    // false and debug does nothing.
    redis.set(
        "breakpoint",
        lua.create_function(|_, _: MultiValue| Ok(false))?,
    )?;
    redis.set("debug", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
    install_log(lua, redis)?;
    install_version(redis, announce_version)?;
    for (name, value) in [
        ("REPL_NONE", 0),
        ("REPL_AOF", 1),
        ("REPL_SLAVE", 2),
        ("REPL_REPLICA", 2),
        ("REPL_ALL", 3),
    ] {
        redis.set(name, value)?;
    }
    Ok(())
}

/// `redis.log` and its levels (also offered while a function library loads).
pub fn install_log(lua: &Lua, redis: &Table) -> mlua::Result<()> {
    redis.set(
        "log",
        lua.create_function(|lua, args: MultiValue| {
            if args.len() < 2 {
                return Err(raise(
                    lua,
                    "ERR redis.log() requires two arguments or more.",
                ));
            }
            let Some(level) = lua_tonumber(&args[0]) else {
                return Err(raise(
                    lua,
                    "ERR First argument must be a number (log level).",
                ));
            };
            let level = level as i64;
            if !(0..=3).contains(&level) {
                return Err(raise(lua, "ERR Invalid debug level."));
            }
            let text: Vec<String> = args
                .iter()
                .skip(1)
                .filter_map(lua_tolstring)
                .map(|t| String::from_utf8_lossy(&t).into_owned())
                .collect();
            let text = text.join(" ");
            match level {
                0 | 1 => tracing::debug!(target: "script", "{text}"),
                2 => tracing::info!(target: "script", "{text}"),
                _ => tracing::warn!(target: "script", "{text}"),
            }
            Ok(())
        })?,
    )?;
    for (name, value) in [
        ("LOG_DEBUG", 0),
        ("LOG_VERBOSE", 1),
        ("LOG_NOTICE", 2),
        ("LOG_WARNING", 3),
    ] {
        redis.set(name, value)?;
    }
    Ok(())
}

/// `redis.REDIS_VERSION` and `redis.REDIS_VERSION_NUM` (also offered while a library loads).
pub fn install_version(redis: &Table, announce_version: &str) -> mlua::Result<()> {
    redis.set("REDIS_VERSION", announce_version)?;
    redis.set("REDIS_VERSION_NUM", version_num(announce_version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_numbers_are_redis_s() {
        assert_eq!(version_num("7.2.0"), 0x070200);
        assert_eq!(version_num("7.0.15"), 0x07000f);
        assert_eq!(version_num("6.2"), 0x060200);
    }

    #[test]
    fn error_tables_take_redis_s_code_rule() {
        let lua = Lua::new();
        let err = |text: &str| -> String {
            error_table(&lua, text.as_bytes())
                .unwrap()
                .get::<String>("err")
                .unwrap()
        };
        assert_eq!(err("-MYERR went wrong"), "MYERR went wrong");
        assert_eq!(err("-bad"), "ERR bad");
        assert_eq!(err("plain words"), "ERR plain words");
        assert_eq!(err("-WRONGTYPE x\r\n"), "WRONGTYPE x");
    }
}
