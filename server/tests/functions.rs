//! Redis 7 functions over the wire: FUNCTION LOAD on one connection, FCALL from connections
//! on every shard; a function that writes and then reaches undeclared keys on other shards
//! is atomic under concurrent callers (no half-written pair is ever seen, no call fails);
//! FCALL inside MULTI; libraries survive a SIGKILL.

mod common;

use common::*;
use wetask_protocol::Frame;

/// Sets KEYS[1] to ARGV[1], then the undeclared pair key ARGV[2] to the same value.
const PAIRS: &str = "#!lua name=pairs
redis.register_function('setpair', function(keys, args)
  redis.call('SET', keys[1], args[1])
  redis.call('SET', args[2], args[1])
  return redis.call('GET', args[2])
end)
redis.register_function{function_name='getpair', flags={'no-writes'}, callback=function(keys, args)
  return {redis.call('GET', keys[1]), redis.call('GET', args[1])}
end}
";

fn load(c: &mut Client) {
    assert_eq!(
        c.cmd_args(&[b"FUNCTION", b"LOAD", b"REPLACE", PAIRS.as_bytes()]),
        bulk("pairs")
    );
}

#[test]
fn functions_run_atomically_from_every_shard_under_concurrent_callers() {
    for shards in ["2", "4"] {
        let server = Server::start(&["--shards", shards]);
        load(&mut server.client());
        // Pairs whose keys live on different shards.
        let pairs: Vec<(String, String)> = (0..200)
            // (Suffixes of unequal lengths: CRC16 is linear, so `left{i}` and `right{i}`
            // differ in a slot's top bit for every i or for none.)
            .map(|i| (format!("left{i}"), format!("right{}", i * i)))
            .filter(|(a, b)| {
                let n = shards.parse().unwrap();
                wetask_shards::shard_of(a.as_bytes(), n) != wetask_shards::shard_of(b.as_bytes(), n)
            })
            .take(20)
            .collect();
        assert!(pairs.len() >= 5, "enough pairs across shards");
        let port = server.port;
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let pairs = pairs.clone();
                std::thread::spawn(move || {
                    let mut c = Client::connect(port);
                    for round in 0..25 {
                        for (a, b) in &pairs {
                            let value = format!("w{w}-{round}");
                            let reply = c.cmd_args(&[
                                b"FCALL",
                                b"setpair",
                                b"1",
                                a.as_bytes(),
                                value.as_bytes(),
                                b.as_bytes(),
                            ]);
                            assert_eq!(reply, bulk(&value), "a call failed");
                        }
                    }
                })
            })
            .collect();
        let mut reader = server.client();
        for _ in 0..200 {
            for (a, b) in &pairs {
                let reply =
                    reader.cmd_args(&[b"FCALL_RO", b"getpair", b"1", a.as_bytes(), b.as_bytes()]);
                let Frame::Array(values) = reply else {
                    panic!("getpair: {reply:?}")
                };
                assert_eq!(values[0], values[1], "half a pair seen: {a} {b}");
            }
        }
        for w in writers {
            w.join().expect("writer");
        }
    }
}

#[test]
fn fcall_in_a_transaction_and_read_only_rules() {
    each_server(|server| {
        let mut c = server.client();
        load(&mut c);
        assert_eq!(c.cmd("MULTI"), ok());
        assert_eq!(
            c.cmd("FCALL setpair 1 {t}a v {t}b"),
            Frame::Simple("QUEUED".into())
        );
        assert_eq!(
            c.cmd("FCALL_RO getpair 1 {t}a {t}b"),
            Frame::Simple("QUEUED".into())
        );
        assert_eq!(
            c.cmd("EXEC"),
            array(vec![bulk("v"), array(vec![bulk("v"), bulk("v")])])
        );
        assert_eq!(
            c.cmd("FCALL_RO setpair 1 x v y"),
            err("ERR Can not execute a script with write flag using *_ro command.")
        );
        // Every connection, wherever it lives, sees the library.
        for _ in 0..4 {
            let mut other = server.client();
            assert_eq!(
                other.cmd("FCALL getpair 1 {t}a {t}b"),
                array(vec![bulk("v"), bulk("v")])
            );
        }
        assert_eq!(c.cmd("FUNCTION DELETE pairs"), ok());
        assert_eq!(
            c.cmd("FCALL getpair 1 {t}a {t}b"),
            err("ERR Function not found")
        );
    });
}

#[test]
fn libraries_survive_a_crash() {
    let dir = temp_dir("functions");
    let dir_arg = dir.to_str().unwrap().to_string();
    let mut server = Server::start(&["--dir", &dir_arg, "--shards", "2"]);
    load(&mut server.client());
    server.child.kill().expect("SIGKILL");
    let _ = server.child.wait();
    let server = Server::start(&["--dir", &dir_arg, "--shards", "2"]);
    let mut c = server.client();
    assert_eq!(c.cmd("FCALL setpair 1 a 1 b"), bulk("1"));
    let Frame::Bulk(dump) = c.cmd("FUNCTION DUMP") else {
        panic!("FUNCTION DUMP")
    };
    assert_eq!(c.cmd("FUNCTION FLUSH"), ok());
    assert_eq!(c.cmd_args(&[b"FUNCTION", b"RESTORE", &dump]), ok());
    assert_eq!(
        c.cmd("FCALL getpair 1 a b"),
        array(vec![bulk("1"), bulk("1")])
    );
}
