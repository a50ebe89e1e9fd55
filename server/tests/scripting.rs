//! EVAL over the wire with keys on both shards: atomic scripts, the undeclared-key rule and
//! its `--lua-whole-server` escape, EVALSHA/SCRIPT, and a runaway script being stopped.

mod common;

use std::time::{Duration, Instant};

use common::*;
use wetask_protocol::Frame;

fn eval(c: &mut Client, script: &str, keys: &[&str], argv: &[&str]) -> Frame {
    let numkeys = keys.len().to_string();
    let mut args: Vec<&[u8]> = vec![b"EVAL", script.as_bytes(), numkeys.as_bytes()];
    args.extend(keys.iter().map(|k| k.as_bytes()));
    args.extend(argv.iter().map(|a| a.as_bytes()));
    c.cmd_args(&args)
}

const TRANSFER: &str = "local from = tonumber(redis.call('get', KEYS[1]) or '0') \
    local n = tonumber(ARGV[1]) \
    if from < n then return redis.error_reply('ERR insufficient') end \
    redis.call('decrby', KEYS[1], n) \
    return redis.call('incrby', KEYS[2], n)";

#[test]
fn scripts_run_atomically_over_keys_on_both_shards() {
    for args in [
        &["--shards", "2"][..],
        &["--shards", "1"][..],
        &["--shards", "2", "--io", "glommio"][..],
    ] {
        let server = Server::start(args);
        let (a, b) = (key_on("acct:a", 0), key_on("acct:b", 1));
        let mut c = server.client();
        c.cmd(&format!("SET {a} 1000"));
        c.cmd(&format!("SET {b} 0"));
        assert_eq!(eval(&mut c, TRANSFER, &[&a, &b], &["10"]), int(10));
        assert_eq!(
            eval(&mut c, TRANSFER, &[&a, &b], &["5000"]),
            err("ERR insufficient")
        );
        // Writers move money between the accounts while a reader sums them: the total never
        // changes, so no script is ever seen half done.
        let writers: Vec<_> = (0..2)
            .map(|w| {
                let (a, b, port) = (a.clone(), b.clone(), server.port);
                std::thread::spawn(move || {
                    let mut c = Client::connect(port);
                    for i in 0..200 {
                        let (from, to) = if (i + w) % 2 == 0 { (&a, &b) } else { (&b, &a) };
                        let reply = eval(&mut c, TRANSFER, &[from, to], &["1"]);
                        assert!(
                            matches!(reply, Frame::Integer(_) | Frame::Error(_)),
                            "{reply:?}"
                        );
                    }
                })
            })
            .collect();
        let sum =
            "return tonumber(redis.call('get', KEYS[1])) + tonumber(redis.call('get', KEYS[2]))";
        while writers.iter().any(|w| !w.is_finished()) {
            assert_eq!(eval(&mut c, sum, &[&a, &b], &[]), int(1000));
        }
        for w in writers {
            w.join().unwrap();
        }
        assert_eq!(eval(&mut c, sum, &[&a, &b], &[]), int(1000));
    }
}

#[test]
fn undeclared_keys_need_a_shared_shard_or_whole_server_mode() {
    let server = Server::start(&["--shards", "2"]);
    let mut c = server.client();
    let (declared, elsewhere) = (key_on("d:", 0), key_on("u:", 1));
    c.cmd(&format!("SET {elsewhere} there"));
    // Read before any write: the script is simply run again holding every shard.
    let read = "return redis.call('get', ARGV[1])";
    assert_eq!(
        eval(&mut c, read, &[&declared], &[&elsewhere]),
        bulk("there")
    );
    // Written first: that run fails (nothing can be undone) ...
    let write_then_read = "redis.call('incr', KEYS[1]) return redis.call('get', ARGV[1])";
    let reply = eval(&mut c, write_then_read, &[&declared], &[&elsewhere]);
    let Frame::Error(text) = reply else {
        panic!("{reply:?}")
    };
    let text = String::from_utf8_lossy(&text);
    assert!(
        text.starts_with("ERR Script attempted to access key"),
        "{text}"
    );
    assert_eq!(
        c.cmd(&format!("GET {declared}")),
        bulk("1"),
        "its write stays, as in Redis"
    );
    // ... and every later run holds every shard.
    assert_eq!(
        eval(&mut c, write_then_read, &[&declared], &[&elsewhere]),
        bulk("there")
    );
    assert_eq!(c.cmd(&format!("GET {declared}")), bulk("2"));
    // Keys with one hash tag share a shard: the undeclared one is reachable.
    let set = "redis.call('set', ARGV[1], 'v') return redis.call('get', ARGV[1])";
    assert_eq!(eval(&mut c, set, &["{q}:meta"], &["{q}:job:1"]), bulk("v"));
    assert_eq!(c.cmd("GET {q}:job:1"), bulk("v"));
    // A script that declares no key may use any (it holds every shard).
    assert_eq!(eval(&mut c, set, &[], &[&elsewhere]), bulk("v"));
    drop(server);

    let server = Server::start(&["--shards", "2", "--lua-whole-server"]);
    let mut c = server.client();
    let build = "for i = 1, 20 do redis.call('rpush', 'job:' .. i, i) end \
        local total = 0 for i = 1, 20 do total = total + redis.call('llen', 'job:' .. i) end \
        return total";
    assert_eq!(eval(&mut c, build, &[], &[]), int(20));
    assert_eq!(c.cmd("LRANGE job:7 0 -1"), array(vec![bulk("7")]));
    assert_eq!(
        eval(&mut c, "return redis.call('dbsize')", &[], &[]),
        int(20)
    );
}

#[test]
fn evalsha_script_cache_and_runaway_scripts() {
    let server = Server::start(&["--shards", "2"]);
    let mut c = server.client();
    let Frame::Bulk(sha) = c.cmd_args(&[b"SCRIPT", b"LOAD", b"return ARGV[1]"]) else {
        panic!("no sha")
    };
    let sha = String::from_utf8(sha.to_vec()).unwrap();
    // Any connection, on any shard, can run it by its SHA.
    for _ in 0..4 {
        let mut other = server.client();
        assert_eq!(other.cmd(&format!("EVALSHA {sha} 0 hi")), bulk("hi"));
    }
    assert_eq!(
        c.cmd(&format!("SCRIPT EXISTS {sha} 0000")),
        array(vec![int(1), int(0)])
    );
    assert_eq!(c.cmd("SCRIPT FLUSH"), ok());
    assert_eq!(
        c.cmd(&format!("EVALSHA {sha} 0 hi")),
        err("NOSCRIPT No matching script. Please use EVAL.")
    );
    // A runaway script is no longer cut off after 5 s: past busy-reply-threshold others get
    // BUSY and SCRIPT KILL stops it (tests/script_busy.rs).
    assert_eq!(c.cmd("CONFIG SET busy-reply-threshold 100"), ok());
    c.send(&[b"EVAL", b"while true do end", b"0"]);
    let started = Instant::now();
    let mut other = common::Client::connect(c.stream.peer_addr().unwrap().port());
    loop {
        match other.cmd("SCRIPT KILL") {
            Frame::Simple(_) => break,
            reply => assert!(
                started.elapsed() < Duration::from_secs(20),
                "never killable: {reply:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let reply = c.read().expect("the script's reply");
    assert!(
        matches!(&reply, Frame::Error(e) if e.starts_with(b"ERR Script killed")),
        "{reply:?}"
    );
    assert_eq!(
        c.cmd("PING"),
        Frame::Simple("PONG".into()),
        "the server goes on"
    );
}
