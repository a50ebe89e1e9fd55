//! Function libraries (FUNCTION LOAD): the process-wide registry of loaded libraries and the
//! functions each registers, Redis 7's metadata line (`#!lua name=<lib>`), and the check
//! that loads a library's code in a Lua state of its own, where `redis.register_function`
//! is all there is (as in Redis, a library cannot touch keys while it loads). Running a
//! function against the keyspace is `commands::functions`'.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use mlua::{Lua, LuaOptions, StdLib, Value};

/// Most libraries one server keeps.
pub const LIBRARIES_MAX: usize = 10_000;
/// How long a library's code may run while it loads (Redis's `LOAD_TIMEOUT_MS`).
pub const LOAD_TIMEOUT_MS: u64 = 500;

/// The flags a function may declare, as Redis names them.
pub const FLAGS: &[&str] = &[
    "no-writes",
    "allow-oom",
    "allow-stale",
    "no-cluster",
    "allow-cross-slot-keys",
];

#[derive(Clone, Debug, PartialEq)]
pub struct FunctionInfo {
    pub name: String,
    pub description: Option<String>,
    pub flags: Vec<String>,
}

impl FunctionInfo {
    pub fn no_writes(&self) -> bool {
        self.flags.iter().any(|f| f == "no-writes")
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Library {
    pub name: String,
    /// The whole code as loaded, metadata line included (FUNCTION LIST WITHCODE, DUMP).
    pub code: Bytes,
    pub functions: Vec<FunctionInfo>,
}

/// Every loaded library, and which library each function name belongs to. Function names
/// are case-insensitive across libraries (FCALL myfunc finds MyFunc), as in Redis; library
/// names are not.
#[derive(Default)]
pub struct Registry {
    libraries: BTreeMap<String, Library>,
    /// Lower-cased function name -> its library.
    owners: HashMap<String, String>,
    /// Bumped on every change: shards rebuild their function tables when it moves.
    pub epoch: u64,
}

impl Registry {
    pub fn libraries(&self) -> impl Iterator<Item = &Library> {
        self.libraries.values()
    }

    /// The function `name` and its library.
    pub fn function(&self, name: &str) -> Option<(&Library, &FunctionInfo)> {
        let library = self
            .libraries
            .get(self.owners.get(&name.to_ascii_lowercase())?)?;
        let function = library
            .functions
            .iter()
            .find(|f| f.name.eq_ignore_ascii_case(name))?;
        Some((library, function))
    }

    /// Whether a library of this name is loaded.
    pub fn contains(&self, library: &str) -> bool {
        self.libraries.contains_key(library)
    }

    pub fn function_count(&self) -> usize {
        self.owners.len()
    }

    /// Adds `library` (replacing one of its name when `replace`), with Redis's checks.
    pub fn add(&mut self, library: Library, replace: bool) -> Result<(), String> {
        if self.libraries.contains_key(&library.name) && !replace {
            return Err(format!("ERR Library '{}' already exists", library.name));
        }
        for function in &library.functions {
            if let Some(owner) = self.owners.get(&function.name.to_ascii_lowercase()) {
                if *owner != library.name {
                    return Err(format!("ERR Function {} already exists", function.name));
                }
            }
        }
        if !self.libraries.contains_key(&library.name) && self.libraries.len() >= LIBRARIES_MAX {
            return Err(format!("ERR too many libraries (at most {LIBRARIES_MAX})"));
        }
        self.remove(&library.name);
        for function in &library.functions {
            self.owners
                .insert(function.name.to_ascii_lowercase(), library.name.clone());
        }
        self.libraries.insert(library.name.clone(), library);
        self.epoch += 1;
        Ok(())
    }

    pub fn remove(&mut self, name: &str) -> Option<Library> {
        let library = self.libraries.remove(name)?;
        for function in &library.functions {
            self.owners.remove(&function.name.to_ascii_lowercase());
        }
        self.epoch += 1;
        Some(library)
    }

    pub fn clear(&mut self) {
        self.libraries.clear();
        self.owners.clear();
        self.epoch += 1;
    }

    /// Takes `other`'s libraries in place of these (a replica's copy of its primary's); the
    /// epoch moves on, so shards rebuild their tables.
    pub fn replace_with(&mut self, other: Registry) {
        let epoch = self.epoch + 1;
        *self = other;
        self.epoch = epoch;
    }
}

/// Redis's name rule for libraries and functions.
fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The library name in `code`'s metadata line (`#!lua name=<lib>`), with Redis's errors.
pub fn library_name(code: &[u8]) -> Result<String, String> {
    if !code.starts_with(b"#!") {
        return Err("ERR Missing library metadata".into());
    }
    let Some(end) = code.iter().position(|&b| b == b'\n') else {
        return Err("ERR Invalid library metadata".into());
    };
    let line = String::from_utf8_lossy(&code[..end]);
    let mut parts = line.split_whitespace();
    let engine = parts
        .next()
        .map(|e| &e[2..])
        .unwrap_or_default()
        .to_string();
    let mut name = None;
    for part in parts {
        if part.len() >= 5 && part[..5].eq_ignore_ascii_case("name=") {
            if name.is_some() {
                return Err(
                    "ERR Invalid metadata value, name argument was given multiple times".into(),
                );
            }
            name = Some(part[5..].to_string());
            continue;
        }
        return Err(format!("ERR Invalid metadata value given: {part}"));
    }
    let Some(name) = name else {
        return Err("ERR Library name was not given".into());
    };
    if !valid_name(&name) {
        return Err("ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long".into());
    }
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(format!("ERR Engine '{engine}' not found"));
    }
    Ok(name)
}

/// Loads `code` in a Lua state of its own and returns the library with the functions it
/// registered, or the error FUNCTION LOAD answers.
/// `limited`: the code may run [`LOAD_TIMEOUT_MS`] (FUNCTION LOAD, RESTORE); not at start,
/// where Redis 7.2 loads saved libraries without a limit.
pub fn load(code: &Bytes, announce_version: &str, limited: bool) -> Result<Library, String> {
    let name = library_name(code)?;
    let lua = Lua::new_with(
        StdLib::TABLE | StdLib::STRING | StdLib::MATH,
        LuaOptions::new(),
    )
    .map_err(|e| format!("ERR cannot start Lua: {e}"))?;
    lua.set_memory_limit(64 * 1024 * 1024)
        .map_err(|e| format!("ERR {e}"))?;
    let registered = std::rc::Rc::new(std::cell::RefCell::new(Vec::<FunctionInfo>::new()));
    let env = load_environment(&lua, registered.clone(), announce_version)
        .map_err(|e| format!("ERR {e}"))?;
    let body = &code[code.iter().position(|&b| b == b'\n').unwrap_or(0)..];
    let chunk = lua
        .load(body)
        .set_name("@user_function")
        .set_mode(mlua::ChunkMode::Text)
        .set_environment(env)
        .into_function()
        .map_err(|e| format!("ERR Error compiling function: {}", first_line(&e)))?;
    let started = std::time::Instant::now();
    if limited {
        lua.set_hook(
            mlua::HookTriggers::new().every_nth_instruction(10_000),
            move |lua, _| {
                if started.elapsed().as_millis() as u64 > LOAD_TIMEOUT_MS {
                    Err(super::raise(lua, "ERR FUNCTION LOAD timeout"))
                } else {
                    Ok(mlua::VmState::Continue)
                }
            },
        );
    }
    chunk.call::<()>(()).map_err(|e| load_error(&e))?;
    let functions = registered.borrow().clone();
    if functions.is_empty() {
        return Err("ERR No functions registered".into());
    }
    Ok(Library {
        name,
        code: code.clone(),
        functions,
    })
}

/// What a library's code sees while it loads, as in Redis: a `redis` table with
/// `register_function`, `log` and its levels and the version constants, and nothing else:
/// any other global (`math`, `pairs`, `error` …) "does not exist", and none may be set.
fn load_environment(
    lua: &Lua,
    registered: std::rc::Rc<std::cell::RefCell<Vec<FunctionInfo>>>,
    announce_version: &str,
) -> mlua::Result<mlua::Table> {
    let redis = lua.create_table()?;
    install_registrar(lua, &redis, registered, None)?;
    super::redis_lib::install_log(lua, &redis)?;
    super::redis_lib::install_version(&redis, announce_version)?;
    let guards: mlua::Function = lua
        .load(
            r#"
local redis, error, tostring = ...
local function missing(_, k)
    error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
end
local function readonly() error("Attempt to modify a readonly table", 2) end
setmetatable(redis, {__index = missing, __newindex = readonly, __metatable = false})
return setmetatable({redis = redis}, {__index = missing, __newindex = readonly, __metatable = false})
"#,
        )
        .set_name("=function_load")
        .into_function()?;
    let globals = lua.globals();
    guards.call((
        redis,
        globals.get::<mlua::Function>("error")?,
        globals.get::<mlua::Function>("tostring")?,
    ))
}

/// A Lua error's first line, from its chunk name (`user_function:…`) when it has one.
fn first_line(error: &mlua::Error) -> String {
    let text = error.to_string();
    let first = text.lines().next().unwrap_or_default();
    first
        .find("user_function:")
        .map_or(first, |at| &first[at..])
        .to_string()
}

/// A failure while a library's code runs, as FUNCTION LOAD reports it: "Error registering
/// functions: " and the error's text ("ERR " and a Lua error's message, or an error reply).
fn load_error(error: &mlua::Error) -> String {
    let cause = super::root_cause(error);
    if let mlua::Error::ExternalError(e) = cause {
        if let Some(reply) = e.downcast_ref::<super::ReplyError>() {
            return format!("ERR Error registering functions: {}", reply.0);
        }
    }
    let first = first_line(cause);
    let detail = first.strip_prefix("runtime error: ").unwrap_or(&first);
    let detail = detail.strip_prefix("ERR ").unwrap_or(detail);
    format!("ERR Error registering functions: ERR {detail}")
}

/// A place for registered callbacks: (function name, its Lua function).
pub type Callbacks = std::rc::Rc<std::cell::RefCell<Vec<(String, mlua::Function)>>>;

/// Sets `redis.register_function` on `redis`. Registered names and flags go to
/// `registered`; the callbacks to `callbacks` when given.
pub fn install_registrar(
    lua: &Lua,
    redis: &mlua::Table,
    registered: std::rc::Rc<std::cell::RefCell<Vec<FunctionInfo>>>,
    callbacks: Option<Callbacks>,
) -> mlua::Result<()> {
    let register = lua.create_function(move |_, args: mlua::MultiValue| {
        let (info, callback) = registration(args)?;
        let mut list = registered.borrow_mut();
        if list.iter().any(|f| f.name == info.name) {
            return Err(mlua::Error::runtime(
                "Function already exists in the library",
            ));
        }
        if let Some(callbacks) = &callbacks {
            callbacks.borrow_mut().push((info.name.clone(), callback));
        }
        list.push(info);
        Ok(())
    })?;
    redis.raw_set("register_function", register)
}

/// `redis.register_function(name, fn)` or `redis.register_function{function_name=…,
/// callback=…, flags={…}, description=…}`, checked as Redis checks it.
fn registration(args: mlua::MultiValue) -> mlua::Result<(FunctionInfo, mlua::Function)> {
    let err = |m: &str| Err(mlua::Error::runtime(m.to_string()));
    let args: Vec<Value> = args.into_iter().collect();
    let (name, callback, flags, description) = match args.as_slice() {
        [Value::Table(t)] => {
            let mut name = None;
            let mut callback = None;
            let mut flags = Vec::new();
            let mut description = None;
            for pair in t.pairs::<String, Value>() {
                let (key, value) = pair?;
                match (key.as_str(), value) {
                    ("function_name", Value::String(s)) => name = Some(s.to_str()?.to_string()),
                    ("function_name", _) => {
                        return err("function_name argument given to redis.register_function must be a string")
                    }
                    ("callback", Value::Function(f)) => callback = Some(f),
                    ("callback", _) => {
                        return err("callback argument given to redis.register_function must be a function")
                    }
                    ("description", Value::String(s)) => {
                        description = Some(s.to_str()?.to_string())
                    }
                    ("description", _) => {
                        return err("description argument given to redis.register_function must be a string")
                    }
                    ("flags", Value::Table(list)) => {
                        for flag in list.sequence_values::<String>() {
                            let flag = flag?;
                            if !FLAGS.contains(&flag.as_str()) {
                                return err("unknown flag given");
                            }
                            flags.push(flag);
                        }
                    }
                    ("flags", _) => return err("flags argument to redis.register_function must be a table representing function flags"),
                    _ => return err("unknown argument given to redis.register_function"),
                }
            }
            let Some(name) = name else {
                return err("redis.register_function must get a function name argument");
            };
            let Some(callback) = callback else {
                return err("redis.register_function must get a callback argument");
            };
            (name, callback, flags, description)
        }
        [_] => return err("calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments)."),
        [Value::String(name), Value::Function(f)] => {
            (name.to_str()?.to_string(), f.clone(), Vec::new(), None)
        }
        [Value::String(_), _] => {
            return err("second argument to redis.register_function must be a function")
        }
        [_, _] => return err("first argument to redis.register_function must be a string"),
        _ => return err("wrong number of arguments to redis.register_function"),
    };
    if !valid_name(&name) {
        // (Redis 7.2's text says "Library" here too.)
        return err("Library names can only contain letters, numbers, or underscores(_) and must be at least one character long");
    }
    Ok((
        FunctionInfo {
            name,
            description,
            flags,
        },
        callback,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(text: &str) -> Bytes {
        Bytes::copy_from_slice(text.as_bytes())
    }

    fn load_code(code: &Bytes) -> Result<Library, String> {
        load(code, "7.2.0", true)
    }

    #[test]
    fn metadata_is_checked_as_redis_checks_it() {
        assert_eq!(library_name(b"#!lua name=mylib\nx"), Ok("mylib".into()));
        assert_eq!(
            library_name(b"return 1"),
            Err("ERR Missing library metadata".into())
        );
        assert_eq!(
            library_name(b"#!lua name=a"),
            Err("ERR Invalid library metadata".into())
        );
        assert_eq!(
            library_name(b"#!lua\n"),
            Err("ERR Library name was not given".into())
        );
        assert_eq!(
            library_name(b"#!lua name=a foo=b\n"),
            Err("ERR Invalid metadata value given: foo=b".into())
        );
        assert_eq!(
            library_name(b"#!js name=a\n"),
            Err("ERR Engine 'js' not found".into())
        );
    }

    #[test]
    fn loading_collects_functions_and_their_flags() {
        let lib = load_code(&code(
            "#!lua name=lib\nredis.register_function('a', function() return 1 end)\nredis.register_function{function_name='b', callback=function() end, flags={'no-writes'}, description='B'}",
        ))
        .unwrap();
        assert_eq!(lib.name, "lib");
        assert_eq!(lib.functions.len(), 2);
        assert!(lib.functions[1].no_writes());
        assert_eq!(lib.functions[1].description.as_deref(), Some("B"));
        assert_eq!(
            load_code(&code("#!lua name=empty\nlocal x = 1")),
            Err("ERR No functions registered".into())
        );
        assert!(load_code(&code("#!lua name=bad\nredis.call('set','a','b')")).is_err());
        assert!(load_code(&code("#!lua name=spin\nwhile true do end")).is_err());
        let mut registry = Registry::default();
        registry.add(lib.clone(), false).unwrap();
        assert_eq!(
            registry.add(lib.clone(), false),
            Err("ERR Library 'lib' already exists".into())
        );
        let mut other = lib.clone();
        other.name = "other".into();
        assert_eq!(
            registry.add(other, false),
            Err("ERR Function a already exists".into())
        );
        assert!(registry.function("b").is_some());
        registry.add(lib, true).unwrap();
        assert_eq!(registry.function_count(), 2);
    }
}
