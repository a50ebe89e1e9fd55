//! Lua for EVAL: the sandbox scripts run in (`sandbox`: text only, read-only globals), the
//! libraries Redis scripts expect (`libs`: cjson, cmsgpack, bit, struct), and the watch
//! over scripts that run too long (`busy`: BUSY replies, SCRIPT KILL). Running a script
//! against the keyspace is `commands::scripting`'s.

pub mod bitstruct;
pub mod busy;
pub mod cjson;
pub mod coerce;
pub mod library;
pub mod libs;
pub mod redis_lib;
pub mod sandbox;

/// A Lua array of strings (KEYS, ARGV, a function's keys and args).
pub fn string_table(lua: &mlua::Lua, items: &[bytes::Bytes]) -> mlua::Result<mlua::Table> {
    let table = lua.create_table()?;
    for (i, item) in items.iter().enumerate() {
        table.raw_set(i + 1, lua.create_string(item)?)?;
    }
    Ok(table)
}

/// An error reply a script raises: a failed `redis.call`, a misused `redis.*` function, or
/// an error table (`error({err = …})`); with the line of the script it arose on, for Redis's
/// "script: …, on @user_script:LINE." suffix. `pcall` turns it into its text, as Redis's
/// `pcall` turns an error table into its `err` field.
#[derive(Debug)]
pub struct ReplyError(pub String, pub Option<u32>);

impl std::fmt::Display for ReplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ReplyError {}

/// The error under mlua's callback wrappers: what the Lua code or the Rust function raised.
pub fn root_cause(error: &mlua::Error) -> &mlua::Error {
    let mut cause = error;
    while let mlua::Error::CallbackError { cause: inner, .. } = cause {
        cause = inner;
    }
    cause
}

/// A [`ReplyError`] raised where the script is now.
pub fn raise(lua: &mlua::Lua, text: impl Into<String>) -> mlua::Error {
    mlua::Error::external(ReplyError(text.into(), calling_line(lua)))
}

/// The line of the script that called into Rust, as Redis's error suffix names it: the
/// nearest frame of the user's chunk (none after a `return redis.call(…)`, a tail call
/// here). Looked up only for a call that fails: the stack walk costs a `lua_getinfo` a frame.
pub fn calling_line(lua: &mlua::Lua) -> Option<u32> {
    (1..8).find_map(|level| {
        let frame = lua.inspect_stack(level)?;
        let user = frame
            .source()
            .source
            .is_some_and(|s| s.starts_with("@user_"));
        user.then(|| u32::try_from(frame.curr_line()).ok())
            .flatten()
    })
}

/// The SHA1 of a script body, lower-case hex, as EVALSHA names it (and `redis.sha1hex`).
pub fn sha1_hex(body: &[u8]) -> String {
    sha1_smol::Sha1::from(body).digest().to_string()
}
