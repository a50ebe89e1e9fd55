//! Hardening probes (docs/SECURITY.md): what an attacker or a careless client sends must get
//! an error reply, never a dead shard, a hung server, a sandbox escape or unbounded memory.
//! Each test names the probe it answers; each failed on the main before the hardening work.

mod common;

use common::{bulk, err, int, key_on, ok, Server};
use wetask_protocol::Frame;

fn error_text(frame: &Frame) -> String {
    match frame {
        Frame::Error(text) => String::from_utf8_lossy(text).into_owned(),
        other => panic!("expected an error, got {other:?}"),
    }
}

fn array_len(frame: &Frame) -> usize {
    match frame {
        Frame::Array(items) => items.len(),
        other => panic!("expected an array, got {other:?}"),
    }
}

/// `SRANDMEMBER s -4000000000000000000` panicked a shard thread (capacity overflow), and
/// that shard's keys never answered again.
#[test]
fn huge_negative_random_counts_reply_an_error_and_the_shard_goes_on() {
    let server = Server::start(&["--shards", "2"]);
    let mut c = server.client();
    for shard in 0..2 {
        let s = key_on("set", shard);
        let h = key_on("hash", shard);
        let z = key_on("zset", shard);
        assert_eq!(c.cmd(&format!("SADD {s} a")), int(1));
        assert_eq!(c.cmd(&format!("HSET {h} f v")), int(1));
        assert_eq!(c.cmd(&format!("ZADD {z} 1 m")), int(1));
        for probe in [
            format!("SRANDMEMBER {s} -4000000000000000000"),
            format!("HRANDFIELD {h} -4000000000000000000"),
            format!("HRANDFIELD {h} -4000000000000000000 WITHVALUES"),
            format!("ZRANDMEMBER {z} -4000000000000000000"),
            format!("ZRANDMEMBER {z} -4000000000000000000 WITHSCORES"),
            format!("SRANDMEMBER {s} -9223372036854775808"),
            format!("SRANDMEMBER {s} -100000000"),
        ] {
            let reply = c.cmd(&probe);
            assert!(
                error_text(&reply).starts_with("ERR value is out of range"),
                "{probe}: {reply:?}"
            );
        }
        // Repeating picks of a sane size still work, and the shard answers.
        assert_eq!(array_len(&c.cmd(&format!("SRANDMEMBER {s} -5"))), 5);
        assert_eq!(
            array_len(&c.cmd(&format!("HRANDFIELD {h} -3 WITHVALUES"))),
            6
        );
        assert_eq!(array_len(&c.cmd(&format!("ZRANDMEMBER {z} -4"))), 4);
        assert_eq!(c.cmd(&format!("SCARD {s}")), int(1));
    }
    assert!(server.log_lines("panicked").is_empty());
}

/// MSET with an odd number of arguments over two shards tripped an assertion in the split.
#[test]
fn split_commands_with_a_broken_pair_reply_an_arity_error() {
    let server = Server::start(&["--shards", "2"]);
    let mut c = server.client();
    let (a, b) = (key_on("a", 0), key_on("b", 1));
    assert_eq!(
        c.cmd(&format!("MSET {a} 1 {b}")),
        err("ERR wrong number of arguments for 'mset' command")
    );
    assert_eq!(c.cmd(&format!("MSET {a} 1 {b} 2")), ok());
    assert_eq!(c.cmd(&format!("GET {b}")), bulk("2"));
}

/// An error or status text cannot break the framing: CR and LF become spaces, and a
/// client's huge argument quoted in an error is cut.
#[test]
fn one_line_replies_cannot_forge_frames() {
    let server = Server::start(&["--shards", "1"]);
    let mut c = server.client();
    assert_eq!(
        c.cmd_args(&[b"EVAL", b"return redis.status_reply('a\\r\\n+b')", b"0"]),
        Frame::Simple("a  +b".into())
    );
    let huge = vec![b'x'; 200_000];
    let reply = c.cmd_args(&[b"SET", b"k", b"v", &huge]);
    assert!(
        error_text(&reply).len() < 5000,
        "{} bytes",
        error_text(&reply).len()
    );
    assert_eq!(c.cmd("PING"), Frame::Simple("PONG".into()));
}

/// `loadstring(string.dump(f))` ran Lua bytecode, which Lua 5.1 does not verify.
#[test]
fn lua_loads_source_text_only() {
    let server = Server::start(&["--shards", "2"]);
    let mut c = server.client();
    let reply = c.cmd_args(&[
        b"EVAL",
        b"return loadstring(string.dump(function() return 42 end))()",
        b"0",
    ]);
    assert!(
        error_text(&reply).contains("attempt to call a nil value"),
        "{reply:?}"
    );
    let reply = c.cmd_args(&[
        b"EVAL",
        b"local f, e = loadstring(string.dump(function() return 42 end)) return e",
        b"0",
    ]);
    assert_eq!(reply, bulk("bytecode loading disabled"));
    let reply = c.cmd_args(&[
        b"EVAL",
        b"local s = string.dump(function() return 42 end) local done = false \
          local f, e = load(function() if done then return nil end done = true return s end) \
          return e",
        b"0",
    ]);
    assert_eq!(reply, bulk("bytecode loading disabled"));
    // A binary chunk as EVAL's body is refused too.
    let mut body = b"\x1bLua".to_vec();
    body.extend_from_slice(&[0x51, 0, 1, 4, 8, 4, 8, 0]);
    let reply = c.cmd_args(&[b"EVAL", &body, b"0"]);
    assert!(
        error_text(&reply).starts_with("ERR Error compiling script"),
        "{reply:?}"
    );
    // Source text still loads, and what it loads runs in the read-only environment.
    assert_eq!(
        c.cmd_args(&[b"EVAL", b"return loadstring('return 7')()", b"0"]),
        int(7)
    );
    let reply = c.cmd_args(&[b"EVAL", b"return loadstring('x = 1')()", b"0"]);
    assert!(error_text(&reply).contains("Attempt to modify a readonly table"));
}

/// `redis.call = function() … end` changed redis.call for every later script on the shard.
#[test]
fn lua_globals_and_libraries_are_read_only() {
    let server = Server::start(&["--shards", "2"]);
    let mut c = server.client();
    for (script, wanted) in [
        (
            "redis.call = function() return 'x' end return 1",
            "ERR user_script:1: Attempt to modify a readonly table",
        ),
        (
            "rawset(redis, 'call', function() return 'x' end) return 1",
            "ERR Attempt to modify a readonly table",
        ),
        (
            "a = 5",
            "ERR user_script:1: Attempt to modify a readonly table",
        ),
        (
            "string.rep = nil return 1",
            "ERR user_script:1: Attempt to modify a readonly table",
        ),
        (
            "getmetatable('').__index = {} return 1",
            "ERR user_script:1: Attempt to modify a readonly table",
        ),
        (
            "setmetatable(_G, {}) return 1",
            "ERR Attempt to modify a readonly table",
        ),
        (
            "cjson.encode = nil return 1",
            "ERR user_script:1: Attempt to modify a readonly table",
        ),
        (
            "table.insert(redis, 1) return 1",
            "ERR Attempt to modify a readonly table",
        ),
        (
            "return setfenv",
            "ERR user_script:1: Script attempted to access nonexistent global variable 'setfenv'",
        ),
        (
            "return nosuch",
            "ERR user_script:1: Script attempted to access nonexistent global variable 'nosuch'",
        ),
    ] {
        let reply = c.cmd_args(&[b"EVAL", script.as_bytes(), b"0"]);
        assert!(
            error_text(&reply).starts_with(wanted),
            "{script}: {reply:?}"
        );
    }
    // Nothing leaked into later scripts, on either shard.
    for shard in 0..2 {
        let key = key_on("k", shard);
        assert_eq!(
            c.cmd_args(&[
                b"EVAL",
                b"return redis.call('set', KEYS[1], 'v')",
                b"1",
                key.as_bytes()
            ]),
            ok()
        );
        assert_eq!(
            c.cmd_args(&[b"EVAL", b"return ('ab'):rep(2)", b"1", key.as_bytes()]),
            bulk("abab")
        );
    }
    // Local variables and tables of the script's own are free to change.
    assert_eq!(
        c.cmd_args(&[
            b"EVAL",
            b"local t = {} rawset(t, 'a', 1) setmetatable(t, {}) table.insert(t, 2) return t.a + t[1]",
            b"0"
        ]),
        int(3)
    );
}

fn info_field(c: &mut common::Client, section: &str, field: &str) -> u64 {
    let Frame::Bulk(text) = c.cmd(&format!("INFO {section}")) else {
        panic!("INFO failed")
    };
    String::from_utf8_lossy(&text)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")).map(str::to_string))
        .unwrap_or_else(|| panic!("no {field} in INFO {section}"))
        .trim()
        .parse()
        .unwrap()
}

/// SCRIPT FLUSH forgot the bodies but every shard kept its compiled functions for ever.
#[test]
fn script_flush_frees_compiled_scripts_on_every_shard() {
    let server = Server::start(&["--shards", "2"]);
    let mut c = server.client();
    let padding = "x".repeat(4000);
    for i in 0..300 {
        let body = format!("local s = '{padding}{i}' return 1");
        assert_eq!(c.cmd_args(&[b"EVAL", body.as_bytes(), b"0"]), int(1));
    }
    let before = info_field(&mut c, "memory", "used_memory_lua");
    assert!(before > 1_000_000, "used_memory_lua {before}");
    assert_eq!(
        info_field(&mut c, "memory", "number_of_cached_scripts"),
        300
    );
    assert_eq!(c.cmd("SCRIPT FLUSH"), ok());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let after = info_field(&mut c, "memory", "used_memory_lua");
        if after < before / 10 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "used_memory_lua {before} -> {after}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(info_field(&mut c, "memory", "number_of_cached_scripts"), 0);
    assert_eq!(c.cmd_args(&[b"EVAL", b"return 2", b"0"]), int(2));
}

/// A script could allocate without bound (`string.rep` of 512 MiB).
#[test]
fn a_script_cannot_pass_the_lua_memory_limit() {
    let server = Server::start(&["--shards", "1", "--lua-memory-limit", "33554432"]);
    let mut c = server.client();
    let reply = c.cmd_args(&[b"EVAL", b"return string.rep('x', 100000000)", b"0"]);
    assert!(
        error_text(&reply).contains("not enough memory"),
        "{reply:?}"
    );
    let reply = c.cmd_args(&[
        b"EVAL",
        b"local t = {} for i = 1, 10000000 do t[i] = i end return #t",
        b"0",
    ]);
    assert!(
        error_text(&reply).contains("not enough memory"),
        "{reply:?}"
    );
    // The state is usable afterwards.
    assert_eq!(
        c.cmd_args(&[b"EVAL", b"return #string.rep('x', 1000)", b"0"]),
        int(1000)
    );
}
