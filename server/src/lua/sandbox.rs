//! The Lua sandbox scripts run in, as Redis 7's: source text only, and read-only globals,
//! libraries and string metatable.
//!
//! Redis gets there by patching its Lua (read-only tables enforced in C, bytecode refused in
//! the parser). We keep the stock Lua 5.1 that mlua builds and get the same behaviour from
//! the outside, once per Lua state, before any script runs ([`seal`]):
//!
//! - Every library table (`redis`, `string`, `table`, `math`, `cjson`, `cmsgpack`, `bit`,
//!   `struct`, `coroutine`) is replaced by an empty proxy whose metatable reads through to the real
//!   table and refuses writes; the metatable itself is hidden (`__metatable`), and the only
//!   raw writers (`rawset`, `setmetatable`, `table.insert/remove/sort`) refuse a protected
//!   table. `getmetatable('')` returns a read-only view of the string metatable. `pairs`,
//!   `ipairs`, `next` and `rawget` read a proxy's real table, so scripts can walk them.
//! - Scripts run with a read-only environment (`ENV`): reading a global that does not
//!   exist is an error, as in Redis, and so is writing one. `setfenv` and `getfenv`, which
//!   could reach the real globals, are removed (Redis 7 has neither).
//! - Chunks compile from text only: EVAL's body (mlua's text mode), and `loadstring` and
//!   `load` refuse a chunk that starts with Lua's binary signature (Lua 5.1 does not verify
//!   bytecode, so loading it is a memory-safety escape). What they load runs in `ENV` too.
//!
//! The real tables stay reachable only from this prelude's upvalues and from Rust.

use mlua::{Lua, Table, Value};

use super::{calling_line, ReplyError};

/// The prelude that seals a fresh state; it returns the scripts' environment.
const PRELUDE: &str = r#"
local error_text, note_table = ...
local G = _G
local rawset_, setmetatable_, getmetatable_, loadstring_, load_, setfenv_, error_, type_, tostring_ =
    rawset, setmetatable, getmetatable, loadstring, load, setfenv, error, type, tostring
local protected = setmetatable_({}, {__mode = 'k'})
-- Each proxy's real table (and ENV's: the globals), for the functions that walk a table.
local REAL = setmetatable_({}, {__mode = 'k'})
local READONLY = 'Attempt to modify a readonly table'
local function readonly() error_(READONLY, 2) end
local function guard(t) if protected[t] then error_(READONLY, 0) end end
local function proxy(real)
    local p = setmetatable_({}, {__index = real, __newindex = readonly, __metatable = false})
    protected[p] = true
    REAL[p] = real
    return p
end
local ENV = setmetatable_({}, {__index = G, __newindex = readonly, __metatable = false})
protected[ENV] = true
REAL[ENV] = G
local function binary(s) return type_(s) == 'string' and s:byte(1) == 27 end

G.rawset = function(t, k, v) guard(t) return rawset_(t, k, v) end
-- pairs, ipairs, next and rawget see a proxy's real table, so scripts walk `redis`, `cjson`
-- or `_G` as in Redis (whose read-only tables are the tables themselves).
local pairs_, ipairs_, next_, rawget_ = pairs, ipairs, next, rawget
G.next = function(t, k) return next_(REAL[t] or t, k) end
local next__ = G.next
G.pairs = function(t)
    local real = REAL[t]
    if real == nil then return pairs_(t) end
    return next__, t, nil
end
G.ipairs = function(t) return ipairs_(REAL[t] or t) end
G.rawget = function(t, k) return rawget_(REAL[t] or t, k) end
G.setmetatable = function(t, mt) guard(t) return setmetatable_(t, mt) end
for _, name in ipairs({'insert', 'remove', 'sort'}) do
    local f = table[name]
    table[name] = function(t, ...) guard(t) return f(t, ...) end
end
G.loadstring = function(s, name)
    if binary(s) then return nil, 'bytecode loading disabled' end
    local f, err = loadstring_(s, name)
    if f then setfenv_(f, ENV) end
    return f, err
end
G.load = function(reader, name)
    if type_(reader) ~= 'function' then
        error_("bad argument #1 to 'load' (function expected, got " .. type_(reader) .. ")", 2)
    end
    local first = true
    local function read()
        local piece = reader()
        if first and type_(piece) == 'string' and #piece > 0 then
            first = false
            if binary(piece) then error_('bytecode loading disabled', 0) end
        end
        return piece
    end
    local f, err = load_(read, name)
    if f then setfenv_(f, ENV) end
    return f, err
end
-- pcall and xpcall run the protected function in a coroutine, and pass any yield from it on
-- to their own caller (coxpcall's scheme): a busy script's hook can then yield the script
-- even from inside a pcall, so its own shard still answers BUSY (lua/busy.rs).
-- TRANSPARENT (weak keys) maps each such coroutine to the thread that ran the pcall (the
-- script's own thread maps to true): only chains of them are yielded by the hook, never a
-- coroutine the script made itself.
local co_create, co_resume, co_status, co_yield, co_running =
    coroutine.create, coroutine.resume, coroutine.status, coroutine.yield, coroutine.running
local select__, unpack_ = select, unpack
local TRANSPARENT = setmetatable_({}, {__mode = 'k'})
-- The hook marks each thread it pauses in PAUSED; a thread that passes a pause on to its
-- resumer yields PAUSE. A pause always goes up to the script's own thread, and from it to
-- the server, never to the script's code.
local PAUSED = setmetatable_({}, {__mode = 'k'})
local PAUSE = {}
local function pack(...) return {n = select__('#', ...), ...} end
local function adopt(co)
    local current = co_running()
    if current and TRANSPARENT[current] then TRANSPARENT[co] = current else TRANSPARENT[co] = nil end
end
local function paused(co, r)
    if co_status(co) ~= 'suspended' then return false end
    if PAUSED[co] then PAUSED[co] = nil return true end
    return r.n == 2 and r[2] == PAUSE
end
local function protected_call(f, ...)
    local co = co_create(function(...) return f(...) end)
    adopt(co)
    local r = pack(co_resume(co, ...))
    while co_status(co) == 'suspended' do
        if paused(co, r) then
            co_yield(PAUSE)
            r = pack(co_resume(co))
        else
            r = pack(co_resume(co, co_yield(unpack_(r, 2, r.n))))
        end
    end
    return r
end
-- What a script's error handler sees, as in Redis: an error reply (a failed redis.call, a
-- misused redis.* function) as Redis's error table, any other Rust error as its message.
local function as_lua(e)
    if type_(e) ~= 'userdata' then return e end
    local text, reply = error_text(e)
    if reply then return {err = text} end
    return text
end
-- What pcall answers (Redis's own pcall): an error table's `err` text instead of the table.
local function caught(e)
    e = as_lua(e)
    if type_(e) == 'table' then
        local text = e.err
        if type_(text) == 'string' or type_(text) == 'number' then return text end
    end
    return e
end
G.pcall = function(f, ...)
    local r = protected_call(f, ...)
    if r[1] then return unpack_(r, 1, r.n) end
    return false, caught(r[2])
end
G.xpcall = function(f, handler)
    local r = protected_call(f)
    if r[1] then return unpack_(r, 1, r.n) end
    return false, handler(as_lua(r[2]))
end
-- An error table raised by the script is noted (its reply text and line), so that when it
-- ends the script the reply is the table's `err`, as Redis answers.
G.error = function(e, level)
    if type_(e) == 'table' then note_table(e) end
    if type_(level) == 'number' and level > 0 then level = level + 1 end
    if level == nil then level = 2 end
    error_(e, level)
end
-- A coroutine the script resumes is paused by the hook too; the pause passes through this
-- resume to its caller, never reaching the script.
local function resume(co, ...)
    adopt(co)
    local r = pack(co_resume(co, ...))
    while paused(co, r) do
        co_yield(PAUSE)
        r = pack(co_resume(co))
    end
    return unpack_(r, 1, r.n)
end
coroutine.resume = resume
coroutine.wrap = function(f)
    local co = co_create(f)
    return function(...)
        local r = pack(resume(co, ...))
        if r[1] then return unpack_(r, 2, r.n) end
        error_(r[2], 0)
    end
end
local string_meta = getmetatable_('')
string_meta.__metatable = proxy(string_meta)
for _, name in ipairs({'redis', 'string', 'table', 'math', 'cjson', 'cmsgpack', 'bit', 'struct', 'coroutine'}) do
    if G[name] ~= nil then rawset_(G, name, proxy(G[name])) end
end
rawset_(G, 'setfenv', nil)
rawset_(G, 'getfenv', nil)
rawset_(G, '_G', ENV)
setmetatable_(G, {
    __index = function(_, key)
        error_("Script attempted to access nonexistent global variable '" .. tostring_(key) .. "'", 2)
    end,
    __metatable = false,
})
return ENV, TRANSPARENT, PAUSED
"#;

/// Seals a state whose globals and libraries are all installed; returns the environment
/// scripts run in, the table of threads a busy script's hook may yield (the script's own
/// thread goes in at each run; its `pcall`s and resumes add theirs), and the table the hook
/// marks the threads it pauses in. Globals the server sets per
/// run (`KEYS`, `ARGV`) go into the real globals table with `raw_set`.
pub fn seal(lua: &Lua) -> mlua::Result<(Table, Table, Table)> {
    let error_text = lua.create_function(|lua, error: Value| {
        let Value::Error(error) = error else {
            return Ok((error, false));
        };
        let (text, reply) = match super::root_cause(&error) {
            mlua::Error::ExternalError(e) => match e.downcast_ref::<ReplyError>() {
                Some(reply) => (reply.0.clone(), true),
                None => (e.to_string(), false),
            },
            mlua::Error::RuntimeError(message) => (message.clone(), false),
            other => (first_line(&other.to_string()).to_string(), false),
        };
        Ok((Value::String(lua.create_string(text)?), reply))
    })?;
    let note_table = lua.create_function(|lua, table: Table| {
        let text = match table.get::<Value>("err")? {
            Value::String(s) => Some(s.to_string_lossy()),
            Value::Integer(n) => Some(n.to_string()),
            Value::Number(n) => Some(super::coerce::lua_number_text(n)),
            _ => None,
        };
        lua.set_app_data(RaisedTable {
            address: table.to_pointer() as usize,
            text,
            line: calling_line(lua),
        });
        Ok(())
    })?;
    lua.load(PRELUDE)
        .set_name("=sandbox")
        .call((error_text, note_table))
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// The error table a script raised last (`error({err = …})`): its address (what mlua's
/// error names it by), its `err` text and the script's line.
pub struct RaisedTable {
    address: usize,
    text: Option<String>,
    line: Option<u32>,
}

impl RaisedTable {
    /// The reply text and line when `message` (a script's failure) is this table.
    pub fn reply_for(&self, message: &str) -> Option<(String, Option<u32>)> {
        let text = self.text.as_ref()?;
        message
            .contains(&format!("{:#x}", self.address))
            .then(|| (text.clone(), self.line))
    }
}
