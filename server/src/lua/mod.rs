//! Lua for EVAL: the sandbox scripts run in (`sandbox`: text only, read-only globals), the
//! libraries Redis scripts expect (`libs`: cjson, cmsgpack), and the watch
//! over scripts that run too long (`busy`: BUSY replies, SCRIPT KILL). Running a script
//! against the keyspace is `commands::scripting`'s.

pub mod busy;
pub mod library;
pub mod libs;
pub mod sandbox;

/// A Lua array of strings (KEYS, ARGV, a function's keys and args).
pub fn string_table(lua: &mlua::Lua, items: &[bytes::Bytes]) -> mlua::Result<mlua::Table> {
    let table = lua.create_table()?;
    for (i, item) in items.iter().enumerate() {
        table.raw_set(i + 1, lua.create_string(item)?)?;
    }
    Ok(table)
}
