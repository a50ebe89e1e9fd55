//! Error reply texts, word for word as Redis sends them: clients match on these strings.

use wetask_protocol::Frame;

pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
pub const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
pub const NOT_FLOAT: &str = "ERR value is not a valid float";
pub const SYNTAX: &str = "ERR syntax error";
pub const OVERFLOW: &str = "ERR increment or decrement would overflow";
pub const NAN_OR_INFINITY: &str = "ERR increment would produce NaN or Infinity";
pub const NO_SUCH_KEY: &str = "ERR no such key";
pub const OFFSET_RANGE: &str = "ERR offset is out of range";
pub const STRING_TOO_LONG: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";
pub const DB_INDEX_RANGE: &str = "ERR DB index is out of range";
pub const MUST_BE_POSITIVE: &str = "ERR value is out of range, must be positive";
pub const INDEX_RANGE: &str = "ERR index out of range";
pub const LPOS_RANK_ZERO: &str = "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list";
/// Redis 7.2 (#12167) takes RANK in -LONG_MAX..=LONG_MAX.
pub const LPOS_RANK_RANGE: &str =
    "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807";
pub const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";
pub const SAME_OBJECT: &str = "ERR source and destination objects are the same";

pub fn wrong_arity(name: &str) -> Frame {
    Frame::error(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

pub fn invalid_expire(name: &str) -> Frame {
    Frame::error(format!("ERR invalid expire time in '{name}' command"))
}

/// `ERR unknown command 'x', with args beginning with: 'a' 'b' ` (Redis 7's text).
pub fn unknown_command(args: &[bytes::Bytes]) -> Frame {
    let mut text = format!(
        "ERR unknown command '{}', with args beginning with: ",
        shown(&args[0])
    );
    for arg in &args[1..] {
        text.push_str(&format!("'{}' ", shown(arg)));
    }
    Frame::error(text)
}

/// `ERR unknown subcommand 'x'. Try CONFIG HELP.`
pub fn unknown_subcommand(command: &str, sub: &[u8]) -> Frame {
    Frame::error(format!(
        "ERR unknown subcommand '{}'. Try {} HELP.",
        shown(sub),
        command.to_ascii_uppercase()
    ))
}

/// Redis's reply to a known subcommand given the wrong number of arguments, where it has no
/// arity of its own to report (`addReplySubcommandSyntaxError`).
pub fn subcommand_syntax(command: &str, sub: &[u8]) -> Frame {
    Frame::error(format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try {} HELP.",
        shown(sub),
        command.to_ascii_uppercase()
    ))
}

/// An argument as Redis echoes it in errors: at most 128 bytes, lossy UTF-8.
fn shown(arg: &[u8]) -> String {
    String::from_utf8_lossy(&arg[..arg.len().min(128)]).into_owned()
}

/// The reply to a command whose handler panicked (a bug, contained: see `contain`).
pub fn internal_error(name: &str) -> Frame {
    Frame::error(format!(
        "ERR internal error while running '{name}' (a bug: logged on the server; the shard goes on)"
    ))
}
