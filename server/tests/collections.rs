//! Lists, hashes and sets over the wire: multi-key commands whose keys live on different
//! shards, and blocking pops that wake on whichever shard gets data first.

mod common;

use std::time::{Duration, Instant};

use common::*;
use wetask_protocol::Frame;

fn strings(items: &[&str]) -> Frame {
    array(items.iter().map(|s| bulk(s)).collect())
}

#[test]
fn multi_key_commands_span_shards() {
    each_server(|server| {
        let mut c = server.client();
        let (a, b) = (key_on("list:a", 0), key_on("list:b", 1));
        assert_eq!(c.cmd(&format!("RPUSH {a} 1 2 3")), int(3));
        assert_eq!(c.cmd(&format!("LMOVE {a} {b} LEFT RIGHT")), bulk("1"));
        assert_eq!(c.cmd(&format!("RPOPLPUSH {a} {b}")), bulk("3"));
        assert_eq!(c.cmd(&format!("LRANGE {b} 0 -1")), strings(&["3", "1"]));
        assert_eq!(c.cmd(&format!("LMOVE {a} {b} LEFT LEFT")), bulk("2"));
        assert_eq!(
            c.cmd(&format!("EXISTS {a}")),
            int(0),
            "emptied on its owner"
        );
        assert_eq!(
            c.cmd(&format!("LMPOP 2 {a} {b} RIGHT COUNT 2")),
            array(vec![bulk(&b), strings(&["1", "3"])])
        );
        let (s, t, out) = (key_on("set:s", 0), key_on("set:t", 1), key_on("set:o", 1));
        c.cmd(&format!("SADD {s} x y z"));
        c.cmd(&format!("SADD {t} y z w"));
        assert_eq!(
            sorted_strings(c.cmd(&format!("SINTER {s} {t}"))),
            ["y", "z"]
        );
        assert_eq!(c.cmd(&format!("SINTERSTORE {out} {s} {t}")), int(2));
        assert_eq!(c.cmd(&format!("SCARD {out}")), int(2));
        assert_eq!(c.cmd(&format!("SINTERCARD 2 {s} {t}")), int(2));
        assert_eq!(c.cmd(&format!("SMOVE {s} {t} x")), int(1));
        assert_eq!(c.cmd(&format!("SISMEMBER {t} x")), int(1));
        assert_eq!(c.cmd(&format!("SUNIONSTORE {s} {s} {t}")), int(4));
        c.cmd(&format!("SET {out} str"));
        assert_eq!(
            c.cmd(&format!("SMOVE {s} {out} x")),
            err("WRONGTYPE Operation against a key holding the wrong kind of value")
        );
        assert_eq!(c.cmd(&format!("SCARD {s}")), int(4), "nothing moved");
        let h = key_on("hash:", 1);
        assert_eq!(c.cmd(&format!("HSET {h} f v g w")), int(2));
        assert_eq!(c.cmd(&format!("HGET {h} g")), bulk("w"));
        assert_eq!(c.cmd(&format!("TYPE {h}")), Frame::Simple("hash".into()));
    });
}

#[test]
fn blocking_pops_wake_on_any_shard() {
    each_server(|server| {
        let (a, b) = (key_on("q:a", 0), key_on("q:b", 1));
        let mut waiter = server.client();
        let mut pusher = server.client();
        // Nothing there: the pop blocks until another client pushes, on either shard.
        waiter.send(&[b"BLPOP", a.as_bytes(), b.as_bytes(), b"5"]);
        std::thread::sleep(Duration::from_millis(50));
        let started = Instant::now();
        assert_eq!(pusher.cmd(&format!("RPUSH {b} job1")), int(1));
        assert_eq!(waiter.read().unwrap(), strings(&[&b, "job1"]));
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(
            pusher.cmd(&format!("EXISTS {b}")),
            int(0),
            "taken, not copied"
        );
        // Data already there: answered at once, first non-empty key in order.
        pusher.cmd(&format!("RPUSH {b} x"));
        pusher.cmd(&format!("RPUSH {a} y"));
        assert_eq!(waiter.cmd(&format!("BRPOP {b} {a} 1")), strings(&[&b, "x"]));
        assert_eq!(waiter.cmd(&format!("BRPOP {a} 1")), strings(&[&a, "y"]));
        // Time-out: a nil array after about the timeout.
        let started = Instant::now();
        assert_eq!(waiter.cmd(&format!("BLPOP {a} {b} 0.2")), Frame::NullArray);
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(190), "{waited:?}");
        assert!(waited < Duration::from_secs(2), "{waited:?}");
        // Errors come before any blocking.
        assert_eq!(
            waiter.cmd(&format!("BLPOP {a} abc")),
            err("ERR timeout is not a float or out of range")
        );
        assert_eq!(
            waiter.cmd(&format!("BLPOP {a} -1")),
            err("ERR timeout is negative")
        );
        pusher.cmd("SET plain v");
        assert_eq!(
            waiter.cmd("BLPOP plain 1"),
            err("WRONGTYPE Operation against a key holding the wrong kind of value")
        );
    });
}

#[test]
fn blocked_clients_are_served_in_order_and_each_element_once() {
    each_server(|server| {
        let key = key_on("fifo:", 1);
        let mut waiters: Vec<Client> = (0..3).map(|_| server.client()).collect();
        for (i, w) in waiters.iter_mut().enumerate() {
            w.send(&[b"BLPOP", key.as_bytes(), b"5"]);
            // In order: each is parked before the next asks.
            wait_blocked(server, i + 1);
        }
        let mut pusher = server.client();
        assert_eq!(pusher.cmd(&format!("RPUSH {key} e1 e2 e3 e4")), int(4));
        for (i, w) in waiters.iter_mut().enumerate() {
            assert_eq!(w.read().unwrap(), strings(&[&key, &format!("e{}", i + 1)]));
        }
        assert_eq!(pusher.cmd(&format!("LRANGE {key} 0 -1")), strings(&["e4"]));
    });
}

#[test]
fn blocking_moves_and_multi_pops() {
    each_server(|server| {
        let (src, dst) = (key_on("src:", 0), key_on("dst:", 1));
        let mut waiter = server.client();
        let mut pusher = server.client();
        waiter.send(&[
            b"BLMOVE",
            src.as_bytes(),
            dst.as_bytes(),
            b"RIGHT",
            b"LEFT",
            b"5",
        ]);
        std::thread::sleep(Duration::from_millis(50));
        pusher.cmd(&format!("RPUSH {src} a b"));
        assert_eq!(waiter.read().unwrap(), bulk("b"));
        assert_eq!(pusher.cmd(&format!("LRANGE {dst} 0 -1")), strings(&["b"]));
        assert_eq!(pusher.cmd(&format!("LRANGE {src} 0 -1")), strings(&["a"]));
        assert_eq!(waiter.cmd(&format!("BRPOPLPUSH {src} {dst} 1")), bulk("a"));
        assert_eq!(
            waiter.cmd(&format!("BRPOPLPUSH {src} {dst} 0.1")),
            Frame::Null
        );
        // BLMPOP takes up to COUNT from the first key that gets data.
        let other = key_on("mp:", 0);
        waiter.send(&[
            b"BLMPOP",
            b"5",
            b"2",
            other.as_bytes(),
            src.as_bytes(),
            b"LEFT",
            b"COUNT",
            b"2",
        ]);
        std::thread::sleep(Duration::from_millis(50));
        pusher.cmd(&format!("RPUSH {src} 1 2 3"));
        assert_eq!(
            waiter.read().unwrap(),
            array(vec![bulk(&src), strings(&["1", "2"])])
        );
        assert_eq!(pusher.cmd(&format!("LRANGE {src} 0 -1")), strings(&["3"]));
    });
}

#[test]
fn a_disconnected_waiter_takes_nothing() {
    for args in [
        &["--shards", "2"][..],
        &["--shards", "1"][..],
        &["--shards", "2", "--io", "glommio"][..],
    ] {
        let server = Server::start(args);
        let (a, b) = (key_on("dq:a", 0), key_on("dq:b", 1));
        let mut gone = server.client();
        gone.send(&[b"BLPOP", a.as_bytes(), b.as_bytes(), b"0"]);
        wait_blocked(&server, 1);
        drop(gone);
        std::thread::sleep(Duration::from_millis(100));
        let mut pusher = server.client();
        pusher.cmd(&format!("RPUSH {a} kept"));
        pusher.cmd(&format!("RPUSH {b} kept"));
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(pusher.cmd(&format!("LLEN {a}")), int(1));
        assert_eq!(pusher.cmd(&format!("LLEN {b}")), int(1));
    }
}

#[test]
fn many_waiters_on_two_shards_get_every_element_exactly_once() {
    each_server(|server| {
        let (a, b) = (key_on("many:a", 0), key_on("many:b", 1));
        let mut waiters: Vec<Client> = (0..8).map(|_| server.client()).collect();
        for w in waiters.iter_mut() {
            w.send(&[b"BLPOP", a.as_bytes(), b.as_bytes(), b"5"]);
        }
        std::thread::sleep(Duration::from_millis(100));
        let mut pusher = server.client();
        // Both shards get data at once: each waiter must get one element, none lost or doubled.
        let mut pipeline = Vec::new();
        for i in 0..8 {
            let key = if i % 2 == 0 { &a } else { &b };
            pipeline.extend_from_slice(
                format!(
                    "*3\r\n$5\r\nRPUSH\r\n${}\r\n{key}\r\n$2\r\ne{i}\r\n",
                    key.len()
                )
                .as_bytes(),
            );
        }
        pusher.raw(&pipeline);
        for _ in 0..8 {
            pusher.read().unwrap();
        }
        let mut got: Vec<String> = waiters
            .iter_mut()
            .map(|w| match w.read().unwrap() {
                Frame::Array(parts) => match &parts[1] {
                    Frame::Bulk(v) => String::from_utf8(v.to_vec()).unwrap(),
                    other => panic!("{other:?}"),
                },
                other => panic!("{other:?}"),
            })
            .collect();
        got.sort();
        let mut expected: Vec<String> = (0..8).map(|i| format!("e{i}")).collect();
        expected.sort();
        assert_eq!(got, expected);
        assert_eq!(pusher.cmd(&format!("EXISTS {a} {b}")), int(0));
    });
}

#[test]
fn blocking_sorted_set_pops() {
    each_server(|server| {
        let (a, b) = (key_on("zq:a", 0), key_on("zq:b", 1));
        let mut waiter = server.client();
        let mut pusher = server.client();
        waiter.send(&[b"BZPOPMIN", a.as_bytes(), b.as_bytes(), b"5"]);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(pusher.cmd(&format!("ZADD {b} 3 x 1 y")), int(2));
        assert_eq!(waiter.read().unwrap(), strings(&[&b, "y", "1"]));
        assert_eq!(pusher.cmd(&format!("ZRANGE {b} 0 -1")), strings(&["x"]));
        waiter.send(&[b"BZMPOP", b"5", b"1", a.as_bytes(), b"MAX", b"COUNT", b"2"]);
        std::thread::sleep(Duration::from_millis(50));
        pusher.cmd(&format!("ZADD {a} 1 p 2 q 3 r"));
        assert_eq!(
            waiter.read().unwrap(),
            array(vec![
                bulk(&a),
                array(vec![strings(&["r", "3"]), strings(&["q", "2"])])
            ])
        );
        assert_eq!(
            waiter.cmd(&format!("BZPOPMAX {b} 0.1")),
            strings(&[&b, "x", "3"])
        );
        assert_eq!(waiter.cmd(&format!("BZPOPMAX {b} 0.1")), Frame::NullArray);
    });
}

#[test]
fn xread_block_wakes_every_reader_on_new_entries() {
    each_server(|server| {
        let (s, t) = (key_on("stream:s", 0), key_on("stream:t", 1));
        let mut writer = server.client();
        writer.cmd(&format!("XADD {s} 1-1 old 1"));
        let mut readers: Vec<Client> = (0..3).map(|_| server.client()).collect();
        for r in readers.iter_mut() {
            r.send(&[
                b"XREAD",
                b"BLOCK",
                b"5000",
                b"STREAMS",
                s.as_bytes(),
                t.as_bytes(),
                b"$",
                b"$",
            ]);
        }
        // `$` means the newest entry when each read parks: all must be parked first.
        wait_blocked(server, 3);
        assert_eq!(writer.cmd(&format!("XADD {t} 5-1 f v")), bulk("5-1"));
        let expected = array(vec![array(vec![
            bulk(&t),
            array(vec![array(vec![bulk("5-1"), strings(&["f", "v"])])]),
        ])]);
        for r in readers.iter_mut() {
            assert_eq!(r.read().unwrap(), expected, "every reader gets the entry");
        }
        // Reading after a given id answers at once; BLOCK times out with nil.
        let mut r = server.client();
        assert_eq!(
            r.cmd(&format!("XREAD COUNT 10 STREAMS {s} 0")),
            array(vec![array(vec![
                bulk(&s),
                array(vec![array(vec![bulk("1-1"), strings(&["old", "1"])])]),
            ])])
        );
        let started = Instant::now();
        assert_eq!(
            r.cmd(&format!("XREAD BLOCK 200 STREAMS {s} $")),
            Frame::NullArray
        );
        assert!(started.elapsed() >= Duration::from_millis(190));
        assert_eq!(
            writer.cmd(&format!("XLEN {t}")),
            int(1),
            "reading consumes nothing"
        );
    });
}

#[test]
fn consumer_groups_share_out_entries_and_recover_unacked_ones() {
    each_server(|server| {
        let s = key_on("jobs:", 1);
        let mut admin = server.client();
        assert_eq!(
            admin.cmd(&format!("XGROUP CREATE {s} workers $ MKSTREAM")),
            ok()
        );
        let mut w1 = server.client();
        let mut w2 = server.client();
        for (w, name) in [(&mut w1, "w1"), (&mut w2, "w2")] {
            w.send(&[
                b"XREADGROUP",
                b"GROUP",
                b"workers",
                name.as_bytes(),
                b"COUNT",
                b"1",
                b"BLOCK",
                b"5000",
                b"STREAMS",
                s.as_bytes(),
                b">",
            ]);
        }
        std::thread::sleep(Duration::from_millis(100));
        admin.cmd(&format!("XADD {s} 1-1 job a"));
        admin.cmd(&format!("XADD {s} 2-1 job b"));
        // Each blocked consumer gets a different entry: a group read consumes.
        let got: Vec<String> = [&mut w1, &mut w2]
            .into_iter()
            .map(|w| match w.read().unwrap() {
                Frame::Array(streams) => format!("{:?}", streams[0]),
                other => panic!("{other:?}"),
            })
            .collect();
        assert!(got[0].contains("1-1") != got[1].contains("1-1"), "{got:?}");
        let Frame::Array(pending) = admin.cmd(&format!("XPENDING {s} workers")) else {
            panic!("XPENDING failed")
        };
        assert_eq!(pending[0], int(2), "both entries pending until acked");
        // w2 dies without acking; w1 acks its own and claims w2's.
        drop(w2);
        let mine = if got[0].contains("1-1") { "1-1" } else { "2-1" };
        let theirs = if mine == "1-1" { "2-1" } else { "1-1" };
        assert_eq!(w1.cmd(&format!("XACK {s} workers {mine}")), int(1));
        assert_eq!(
            w1.cmd(&format!("XAUTOCLAIM {s} workers w1 0 0 JUSTID")),
            array(vec![bulk("0-0"), array(vec![bulk(theirs)]), array(vec![])])
        );
        assert_eq!(w1.cmd(&format!("XACK {s} workers {theirs}")), int(1));
        assert_eq!(
            admin.cmd(&format!("XPENDING {s} workers")),
            array(vec![int(0), Frame::Null, Frame::Null, Frame::NullArray])
        );
    });
}

/// A blocked BRPOPLPUSH/BLMOVE whose destination is not a list is answered WRONGTYPE when
/// its source gets data, and the element stays, for the next waiter: the destination on
/// the source's shard (it was never answered) and on another one, on 1, 2 and 4 shards.
#[test]
fn a_blocked_move_into_a_key_of_another_type_is_answered_wrongtype() {
    for shards in ["1", "2", "4"] {
        let server = Server::start(&["--shards", shards]);
        for (src, dst) in [
            ("blist{t}".to_string(), "target{t}".to_string()),
            (key_on("src:", 0), key_on("dst:", 1)),
        ] {
            let mut pusher = server.client();
            pusher.cmd(&format!("DEL {src} {dst} next"));
            pusher.cmd(&format!("SET {dst} string"));
            let mut failing = server.client();
            failing.send(&[b"BRPOPLPUSH", src.as_bytes(), dst.as_bytes(), b"0"]);
            wait_blocked(&server, 1);
            let mut next = server.client();
            next.send(&[b"BLMOVE", src.as_bytes(), b"next", b"RIGHT", b"LEFT", b"0"]);
            wait_blocked(&server, 2);
            pusher.cmd(&format!("RPUSH {src} a b"));
            let wrong = failing.read().expect("the failing move is answered");
            assert!(
                matches!(&wrong, Frame::Error(e) if e.starts_with(b"WRONGTYPE")),
                "{shards} shards, {src} -> {dst}: {wrong:?}"
            );
            assert_eq!(next.read().unwrap(), bulk("b"), "{shards} shards");
            assert_eq!(pusher.cmd(&format!("LRANGE {src} 0 -1")), strings(&["a"]));
            assert_eq!(pusher.cmd(&format!("GET {dst}")), bulk("string"));
        }
    }
}
