//! The command-level fuzzer: random commands from the command table with random and
//! edge-case arguments (huge, negative, `i64::MIN`, empty, NaN, `inf`, option words in the
//! wrong places) against the real server on 2 and 4 shards. It checks that every command
//! gets a reply (no hang), that no reply is a contained panic, that every shard still
//! answers a command routed to it afterwards, and that the log has no panic.
//!
//! Bounded in the suite (`WETASK_FUZZ_SECS`, default 6 s per server); run longer on demand:
//! `WETASK_FUZZ_SECS=600 cargo test -p wetask-server --test fuzz_commands -- --nocapture`.
//! `WETASK_FUZZ_SEED` replays a run (the seed is printed).

mod common;

use std::time::{Duration, Instant};

use common::{Client, Server};
use wetask_protocol::Frame;
use wetask_shards::table::{flag, Route, COMMANDS};

/// Commands the fuzzer leaves out, and why: they end or reconfigure the server or the
/// connection in ways that are tested elsewhere (SHUTDOWN, CONFIG SET requirepass, CLIENT
/// KILL and PAUSE), or reply more than once per command (the subscribe family, MONITOR), or
/// wait by design (TASK.WAIT, WAIT, and WAITAOF, whose `numreplicas` > 0 waits out its
/// time-out as Redis's does with no replicas), or make the server a replica that refuses
/// writes (REPLICAOF and SLAVEOF: tests/python/test_replication.py).
const SKIPPED: &[&str] = &[
    "shutdown",
    "config",
    "client",
    "monitor",
    "wait",
    "waitaof",
    "subscribe",
    "psubscribe",
    "ssubscribe",
    "unsubscribe",
    "punsubscribe",
    "sunsubscribe",
    "task.wait",
    "auth",
    "replicaof",
    "slaveof",
];

const KEYS: &[&str] = &[
    "k0", "k1", "k2", "{t}a", "{t}b", "q", "s", "z", "h", "l", "x",
];

const EDGES: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "3",
    "5",
    "10",
    "100",
    "-100",
    "1000000",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775806",
    "-9223372036854775807",
    "4611686018427387904",
    "-4611686018427387904",
    "4000000000000000000",
    "-4000000000000000000",
    "18446744073709551615",
    "18446744073709551616",
    "4294967296",
    "2147483648",
    "-2147483649",
    "536870912",
    "1.5",
    "-0.0",
    "0.1",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "+inf",
    "1e308",
    "-1e308",
    "1e-320",
    "0x10",
    "",
    " ",
    "(1",
    "(-inf",
    "(+inf",
    "[a",
    "(a",
    "-",
    "+",
    "*",
    "$",
    ">",
    "~",
    "=",
    "0-0",
    "0-1",
    "1-0",
    "1-*",
    "18446744073709551615-18446744073709551615",
    "18446744073709551615-18446744073709551614",
    "0-18446744073709551615",
    "-1-1",
    "a",
    "b",
    "f",
    "v",
    "\u{0}",
    "*ab?[c-]\\",
    "[",
    "[^",
];

const WORDS: &[&str] = &[
    "COUNT",
    "LIMIT",
    "WITHSCORES",
    "WITHVALUES",
    "BY",
    "REV",
    "BYSCORE",
    "BYLEX",
    "MATCH",
    "TYPE",
    "STREAMS",
    "EX",
    "PX",
    "EXAT",
    "PXAT",
    "NX",
    "XX",
    "GT",
    "LT",
    "CH",
    "INCR",
    "KEEPTTL",
    "GET",
    "IDLE",
    "TIME",
    "RETRYCOUNT",
    "FORCE",
    "JUSTID",
    "MAXLEN",
    "MINID",
    "NOMKSTREAM",
    "LEFT",
    "RIGHT",
    "BEFORE",
    "AFTER",
    "RANK",
    "MAXLEN",
    "AGGREGATE",
    "SUM",
    "MIN",
    "MAX",
    "WEIGHTS",
    "REPLACE",
    "DB",
    "PRIORITY",
    "DELAY",
    "AT",
    "RETRIES",
    "BACKOFF",
    "LEASE",
    "TTL",
    "FALLBACK",
    "UNIQUE",
    "FOR",
    "RESULT",
    "ERROR",
    "RETRYIN",
    "NORETRY",
    "ACK",
    "CONCURRENCY",
    "RATE",
    "PER",
    "ENTRIESREAD",
    "MKSTREAM",
    "CREATE",
    "SETID",
    "DESTROY",
    "CREATECONSUMER",
    "DELCONSUMER",
    "GROUPS",
    "CONSUMERS",
    "STREAM",
    "FULL",
    "LOAD",
    "EXISTS",
    "FLUSH",
    "HELP",
    "ASYNC",
    "SYNC",
    "CHANNELS",
    "NUMSUB",
    "NUMPAT",
    "SHARDCHANNELS",
    "INFO",
    "DOCS",
    "GETKEYS",
    "LIST",
];

/// Small Lua bodies, good and bad, for EVAL.
const SCRIPTS: &[&str] = &[
    "return 1",
    "return redis.call('get', KEYS[1])",
    "return redis.call('incr', KEYS[1])",
    "return redis.pcall('lpush', KEYS[1], ARGV[1])",
    "return {1, 2, {3, 'x'}, redis.status_reply('OK')}",
    "return redis.error_reply('boom')",
    "return cjson.encode({a = ARGV[1]})",
    "return cmsgpack.unpack(ARGV[1])",
    "error('x')",
    "return string.rep('x', tonumber(ARGV[1]) or 1)",
    "local t = {} for i = 1, 1000 do t[i] = i end return #t",
    "return redis.call(ARGV[1] or 'ping')",
    "return",
    "syntax error here",
];

struct Fuzz {
    rng: fastrand::Rng,
}

impl Fuzz {
    fn pick<'a>(&mut self, items: &'a [&'a str]) -> &'a str {
        items[self.rng.usize(..items.len())]
    }

    fn arg(&mut self) -> Vec<u8> {
        match self.rng.u32(..100) {
            0..=29 => self.pick(KEYS).into(),
            30..=64 => self.pick(EDGES).into(),
            65..=84 => self.pick(WORDS).into(),
            85..=89 => self.pick(SCRIPTS).into(),
            90..=91 => vec![b'x'; self.rng.usize(1000..200_000)],
            92 => vec![b'9'; self.rng.usize(20..400)],
            93 => (0..self.rng.usize(1..64))
                .map(|_| self.rng.u8(..))
                .collect(),
            _ => self.rng.i64(..).to_string().into(),
        }
    }

    fn command(&mut self, names: &[&'static wetask_shards::CommandSpec]) -> Vec<Vec<u8>> {
        let spec = names[self.rng.usize(..names.len())];
        let mut argc = if spec.arity >= 0 {
            spec.arity as usize
        } else {
            (-spec.arity) as usize + self.rng.usize(..6)
        };
        // Now and then the wrong number of arguments.
        if self.rng.u32(..20) == 0 {
            argc = self.rng.usize(1..8);
        }
        let mut args = vec![spec.name.as_bytes().to_vec()];
        if spec.name == "eval" || spec.name == "eval_ro" {
            args.push(self.pick(SCRIPTS).into());
            let keys = self.rng.usize(..3);
            args.push(keys.to_string().into());
            for _ in 0..keys {
                args.push(self.pick(KEYS).into());
            }
        }
        while args.len() < argc.max(1) {
            args.push(self.arg());
        }
        if ["setbit", "bitfield"].contains(&spec.name) {
            cap_bit_offsets(&mut args);
        }
        if self.rng.bool() {
            args[0] = args[0].to_ascii_uppercase();
        }
        args
    }
}

/// SETBIT and BITFIELD grow a string to any valid bit offset, up to 512 MB, as Redis does:
/// a few such writes would fill the CI machine's memory (and the journal's snapshots), so
/// valid offsets past 1 MB of bits become 1 MB here. Offsets past the limit stay: their
/// error is what the fuzzer checks.
fn cap_bit_offsets(args: &mut [Vec<u8>]) {
    const CAP: u64 = 1 << 23;
    for arg in args.iter_mut().skip(2) {
        let offset = std::str::from_utf8(arg)
            .ok()
            .and_then(|a| a.parse::<u64>().ok());
        if offset.is_some_and(|n| (CAP..1 << 32).contains(&n)) {
            *arg = CAP.to_string().into_bytes();
        }
    }
}

fn is_internal_error(frame: &Frame) -> bool {
    matches!(frame, Frame::Error(text) if text.starts_with(b"ERR internal error"))
}

/// A key that hashes to `shard` of `count`.
fn key_on(shard: usize, count: usize) -> String {
    (0..)
        .map(|i| format!("probe{i}"))
        .find(|k| wetask_shards::shard_of(k.as_bytes(), count) == shard)
        .expect("some key hashes there")
}

fn fuzz_server(shards: usize, seconds: u64, seed: u64) {
    let mut server = Server::start(&["--shards", &shards.to_string()]);
    let names: Vec<&'static wetask_shards::CommandSpec> = COMMANDS
        .iter()
        .filter(|s| !SKIPPED.contains(&s.name) && !s.has(flag::BLOCKING))
        .collect();
    let mut fuzz = Fuzz {
        rng: fastrand::Rng::with_seed(seed),
    };
    let mut clients: Vec<Client> = (0..3).map(|_| server.client()).collect();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut sent = 0u64;
    let mut errors = 0u64;
    let mut last: Vec<String> = Vec::new();
    while Instant::now() < deadline {
        let c = fuzz.rng.usize(..clients.len());
        let mut args = fuzz.command(&names);
        // Nothing may wait: a BLOCK or TIMEOUT word would make a read or fetch wait.
        args.retain(|a| !a.eq_ignore_ascii_case(b"block") && !a.eq_ignore_ascii_case(b"timeout"));
        let shown: Vec<String> = args
            .iter()
            .map(|a| {
                let text = String::from_utf8_lossy(&a[..a.len().min(40)]).into_owned();
                if a.len() > 40 {
                    format!("{text}…({} bytes)", a.len())
                } else {
                    text
                }
            })
            .collect();
        last.push(shown.join(" "));
        if last.len() > 20 {
            last.remove(0);
        }
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        clients[c].send(&refs);
        sent += 1;
        let reply = clients[c].try_read().unwrap_or_else(|e| {
            let state = clients[c].server_pid.map(|pid| clients[c].diagnose(pid));
            panic!(
                "seed {seed}: no reply ({e}) to the last of:\n{}\n{}",
                last.join("\n"),
                state.unwrap_or_default()
            )
        });
        match reply {
            Some(frame) => {
                assert!(
                    !is_internal_error(&frame),
                    "seed {seed}: a command panicked: {frame:?}\nlast commands:\n{}",
                    last.join("\n")
                );
                errors += u64::from(frame.is_error());
            }
            // QUIT, or a limit that closes the connection: reconnect.
            None => {
                if let Ok(Some(status)) = server.child.try_wait() {
                    panic!(
                        "seed {seed}: the server died ({status}):\n{}\nlast commands:\n{}",
                        server.log_lines("panic").join("\n"),
                        last.join("\n")
                    );
                }
                clients[c] = server.client();
            }
        }
    }
    println!("{shards} shards, seed {seed}: {sent} commands, {errors} error replies");
    // Every shard still answers a command routed to it, and so does every connection kind.
    let mut probe = server.client();
    for shard in 0..shards {
        let key = key_on(shard, shards);
        assert_eq!(
            probe.cmd(&format!("SET {key} alive")),
            Frame::ok(),
            "shard {shard}"
        );
        assert_eq!(
            probe.cmd(&format!("GET {key}")),
            common::bulk("alive"),
            "shard {shard}"
        );
    }
    assert_eq!(probe.cmd("PING"), Frame::Simple("PONG".into()));
    let panics = server.log_lines("panicked");
    assert!(
        panics.is_empty(),
        "seed {seed}: the log has panics:\n{}",
        panics.join("\n")
    );
    assert!(
        server.child.id() > 0 && server.log_lines("panic outside").is_empty(),
        "the server aborted"
    );
}

#[test]
fn random_commands_never_panic_hang_or_kill_a_shard() {
    let seconds: u64 = std::env::var("WETASK_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let seed: u64 = std::env::var("WETASK_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    // Route::Server commands are fuzzed too; this only checks the table has some of each.
    assert!(COMMANDS.iter().any(|s| s.route == Route::Server));
    for shards in [2, 4] {
        fuzz_server(shards, seconds, seed.wrapping_add(shards as u64));
    }
}
