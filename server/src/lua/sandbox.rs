//! The Lua sandbox scripts run in, as Redis 7's: source text only, and read-only globals,
//! libraries and string metatable.
//!
//! Redis gets there by patching its Lua (read-only tables enforced in C, bytecode refused in
//! the parser). We keep the stock Lua 5.1 that mlua builds and get the same behaviour from
//! the outside, once per Lua state, before any script runs ([`seal`]):
//!
//! - Every library table (`redis`, `string`, `table`, `math`, `cjson`, `cmsgpack`,
//!   `coroutine`) is replaced by an empty proxy whose metatable reads through to the real
//!   table and refuses writes; the metatable itself is hidden (`__metatable`), and the only
//!   raw writers (`rawset`, `setmetatable`, `table.insert/remove/sort`) refuse a protected
//!   table. `getmetatable('')` returns a read-only view of the string metatable.
//! - Scripts run with a read-only environment (`ENV`): reading a global that does not
//!   exist is an error, as in Redis, and so is writing one. `setfenv` and `getfenv`, which
//!   could reach the real globals, are removed (Redis 7 has neither).
//! - Chunks compile from text only: EVAL's body (mlua's text mode), and `loadstring` and
//!   `load` refuse a chunk that starts with Lua's binary signature (Lua 5.1 does not verify
//!   bytecode, so loading it is a memory-safety escape). What they load runs in `ENV` too.
//!
//! The real tables stay reachable only from this prelude's upvalues and from Rust.

use mlua::{Lua, Table};

/// The prelude that seals a fresh state; it returns the scripts' environment.
const PRELUDE: &str = r#"
local G = _G
local rawset_, setmetatable_, getmetatable_, loadstring_, load_, setfenv_, error_, type_, tostring_ =
    rawset, setmetatable, getmetatable, loadstring, load, setfenv, error, type, tostring
local protected = setmetatable_({}, {__mode = 'k'})
local READONLY = 'Attempt to modify a readonly table'
local function readonly() error_(READONLY, 2) end
local function guard(t) if protected[t] then error_(READONLY, 0) end end
local function proxy(real)
    local p = setmetatable_({}, {__index = real, __newindex = readonly, __metatable = false})
    protected[p] = true
    return p
end
local ENV = setmetatable_({}, {__index = G, __newindex = readonly, __metatable = false})
protected[ENV] = true
local function binary(s) return type_(s) == 'string' and s:byte(1) == 27 end

G.rawset = function(t, k, v) guard(t) return rawset_(t, k, v) end
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
G.pcall = function(f, ...)
    local r = protected_call(f, ...)
    return unpack_(r, 1, r.n)
end
G.xpcall = function(f, handler)
    local r = protected_call(f)
    if r[1] then return unpack_(r, 1, r.n) end
    return false, handler(r[2])
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
for _, name in ipairs({'redis', 'string', 'table', 'math', 'cjson', 'cmsgpack', 'coroutine'}) do
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
    lua.load(PRELUDE).set_name("=sandbox").eval()
}
