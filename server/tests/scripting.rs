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
    // Written first: the write is undone and the script runs again holding every shard, so
    // the client sees one success and the key was incremented once.
    let write_then_read = "redis.call('incr', KEYS[1]) return redis.call('get', ARGV[1])";
    assert_eq!(
        eval(&mut c, write_then_read, &[&declared], &[&elsewhere]),
        bulk("there")
    );
    assert_eq!(
        c.cmd(&format!("GET {declared}")),
        bulk("1"),
        "incremented once"
    );
    // What the undone run did is gone before the real one starts: a key it created does
    // not exist, a TTL its SET cleared is back (the script reports what it found first).
    let (fresh, timed) = (key_on("f:", 0), key_on("t:", 0));
    c.cmd(&format!("SET {timed} old EX 1000"));
    let body = "local existed = redis.call('exists', KEYS[1]) \
        local ttl = redis.call('ttl', KEYS[2]) \
        redis.call('set', KEYS[1], 'x') redis.call('set', KEYS[2], 'new') \
        return {existed, ttl > 900 and 1 or 0, redis.call('get', ARGV[1])}";
    let reply = eval(&mut c, body, &[&fresh, &timed], &[&elsewhere]);
    assert_eq!(reply, array(vec![int(0), int(1), bulk("there")]));
    assert_eq!(c.cmd(&format!("GET {timed}")), bulk("new"));
    // A task command cannot be undone: that run fails, and its writes stay (as in Redis).
    let queue = key_on("q:", 0);
    let submit_then_read = "redis.call('incr', KEYS[1]) redis.call('task.submit', KEYS[2], 'p') \
        return redis.call('get', ARGV[1])";
    let reply = eval(
        &mut c,
        submit_then_read,
        &[&declared, &queue],
        &[&elsewhere],
    );
    let Frame::Error(text) = reply else {
        panic!("{reply:?}")
    };
    let text = String::from_utf8_lossy(&text);
    assert!(
        text.starts_with("ERR Script attempted to access key") && text.contains("cannot be undone"),
        "{text}"
    );
    assert_eq!(c.cmd(&format!("GET {declared}")), bulk("2"));
    // ... and every later run holds every shard.
    assert_eq!(
        eval(
            &mut c,
            submit_then_read,
            &[&declared, &queue],
            &[&elsewhere]
        ),
        bulk("there")
    );
    assert_eq!(c.cmd(&format!("GET {declared}")), bulk("3"));
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

/// Scripts that write a declared key and then reach an undeclared one wherever it hashes, many
/// clients at once, on 2 and 4 shards with random names: each such run is undone and run
/// again holding every shard, so no client ever sees an error and no one, not even a script
/// that reads every pair at once, ever sees one half of a pair's update.
#[test]
fn scripts_that_reach_other_shards_after_writing_are_never_half_applied() {
    const PAIRS: usize = 20;
    const WRITERS: usize = 4;
    const RUNS: usize = 40;
    for shards in ["2", "4"] {
        let server = Server::start(&["--shards", shards]);
        let mut rng = fastrand::Rng::new();
        let pairs: Vec<(String, String)> = (0..PAIRS)
            .map(|_| (format!("a{}", rng.u64(..)), format!("b{}", rng.u64(..))))
            .collect();
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (pairs, port) = (pairs.clone(), server.port);
                std::thread::spawn(move || {
                    let mut c = Client::connect(port);
                    let mut rng = fastrand::Rng::new();
                    let mut done = vec![0i64; PAIRS];
                    for run in 0..RUNS {
                        let p = rng.usize(..PAIRS);
                        let (a, b) = &pairs[p];
                        // A new body each time: a script the server has not yet learned to
                        // run holding every shard.
                        let body = format!(
                            "-- writer {w} run {run}\n\
                             redis.call('incr', KEYS[1]) redis.call('incr', ARGV[1]) \
                             return redis.call('get', KEYS[1])"
                        );
                        let reply = eval(&mut c, &body, &[a], &[b]);
                        assert!(matches!(reply, Frame::Bulk(_)), "{reply:?}");
                        done[p] += 1;
                    }
                    done
                })
            })
            .collect();
        let mut c = server.client();
        let keys: Vec<&str> = pairs
            .iter()
            .flat_map(|(a, b)| [a.as_str(), b.as_str()])
            .collect();
        // Declares no key: holds every shard, so it sees all pairs at one instant.
        let uneven = "local n = 0 for i = 1, #ARGV, 2 do \
            if redis.call('get', ARGV[i]) ~= redis.call('get', ARGV[i + 1]) then n = n + 1 end \
            end return n";
        while writers.iter().any(|w| !w.is_finished()) {
            assert_eq!(eval(&mut c, uneven, &[], &keys), int(0), "{shards} shards");
        }
        let mut expected = vec![0i64; PAIRS];
        for w in writers {
            for (p, n) in w.join().expect("writer").into_iter().enumerate() {
                expected[p] += n;
            }
        }
        for ((a, b), n) in pairs.iter().zip(expected) {
            let want = if n == 0 {
                Frame::Null
            } else {
                bulk(&n.to_string())
            };
            assert_eq!(c.cmd(&format!("GET {a}")), want, "{a} on {shards} shards");
            assert_eq!(c.cmd(&format!("GET {b}")), want, "{b} on {shards} shards");
        }
    }
}

/// COPY … DB and MOVE from a script, whatever shard the connection landed on: the key in
/// the other database lives on its owner afterwards (a borrowed key copied or moved there
/// used to stay behind on the script's shard, invisible to everyone else).
#[test]
fn a_script_copies_and_moves_keys_between_databases_on_their_owner() {
    let server = Server::start(&["--shards", "2"]);
    for shard in 0..2 {
        let copied = key_on(&format!("cp{shard}:"), shard);
        // Several connections, so some land on the other shard than the key.
        for round in 0..4 {
            let mut c = server.client();
            c.cmd(&format!("SET {copied} c{round}"));
            let body = "return {redis.call('copy', KEYS[1], KEYS[1], 'db', 4, 'replace'), \
                redis.call('move', KEYS[1], 3)}";
            assert_eq!(
                eval(&mut c, body, &[&copied], &[]),
                array(vec![int(1), int(1)])
            );
            assert_eq!(c.cmd(&format!("EXISTS {copied}")), int(0));
            for db in ["4", "3"] {
                assert_eq!(c.cmd(&format!("SELECT {db}")), ok());
                assert_eq!(
                    c.cmd(&format!("GETDEL {copied}")),
                    bulk(&format!("c{round}"))
                );
            }
            assert_eq!(c.cmd("SELECT 0"), ok());
        }
    }
}
