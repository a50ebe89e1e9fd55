//! Lua for EVAL: the sandbox scripts run in (`sandbox`: text only, read-only globals), the
//! libraries Redis scripts expect (`libs`: cjson, cmsgpack), and the watch
//! over scripts that run too long (`busy`: BUSY replies, SCRIPT KILL). Running a script
//! against the keyspace is `commands::scripting`'s.

pub mod busy;
pub mod libs;
pub mod sandbox;
