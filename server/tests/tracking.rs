//! Client-side caching over the wire (CLIENT TRACKING): invalidations reach readers
//! wherever their connection, the key and the writer live; REDIRECT to a RESP2 subscriber;
//! BCAST prefixes; NOLOOP; OPTIN/OPTOUT with CLIENT CACHING; flushes, expiry, MULTI and
//! cross-shard reads; the errors and introspection replies.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::*;
use wetask_protocol::Frame;

/// A RESP3 connection that tracks keys with `options` (e.g. "", "NOLOOP", "OPTIN").
fn tracker(server: &Server, options: &str) -> Client {
    let mut c = server.client();
    assert!(matches!(c.cmd("HELLO 3"), Frame::Map(_)));
    let line = format!("CLIENT TRACKING ON {options}");
    assert_eq!(c.cmd(line.trim()), ok());
    c
}

/// The keys of one invalidation push (`None`: every key, after a flush).
fn invalidated(frame: &Frame) -> Option<Option<Vec<String>>> {
    let Frame::Push(items) = frame else {
        return None;
    };
    if items.first() != Some(&bulk("invalidate")) {
        return None;
    }
    Some(match &items[1] {
        Frame::Null => None,
        Frame::Array(keys) => Some(
            keys.iter()
                .map(|k| String::from_utf8(k.as_bytes().unwrap().to_vec()).unwrap())
                .collect(),
        ),
        other => panic!("invalidate with {other:?}"),
    })
}

/// Reads pushes until every key in `want` was invalidated (10 s at most); any other key
/// invalidated on the way fails.
fn expect_invalidations(c: &mut Client, want: &[&str]) {
    let mut missing: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !missing.is_empty() {
        assert!(Instant::now() < deadline, "never invalidated: {missing:?}");
        let frame = c.read().expect("connection open");
        match invalidated(&frame) {
            Some(Some(keys)) => keys.iter().for_each(|k| {
                assert!(
                    want.contains(&k.as_str()),
                    "{k} invalidated, not in {want:?}"
                );
                missing.remove(k);
            }),
            other => panic!("expected an invalidation, got {frame:?} ({other:?})"),
        }
    }
}

/// Sends PING and returns every push that came before its PONG (what was already owed).
fn pushes_before_pong(c: &mut Client) -> Vec<Frame> {
    c.send(&[b"PING"]);
    let mut pushes = Vec::new();
    loop {
        let frame = c.read().expect("connection open");
        if frame == Frame::Simple(bytes::Bytes::from_static(b"PONG")) {
            return pushes;
        }
        pushes.push(frame);
    }
}

/// Sends a command and returns its reply and the pushes that came ahead of it.
fn cmd_with_pushes(c: &mut Client, line: &str) -> (Frame, Vec<Frame>) {
    let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
    c.send(&args);
    let mut pushes = Vec::new();
    loop {
        match c.read().expect("connection open") {
            push @ Frame::Push(_) => pushes.push(push),
            reply => return (reply, pushes),
        }
    }
}

/// One key on each shard of two (the same names serve one shard).
fn keys_on_both(prefix: &str) -> [String; 2] {
    [key_on(prefix, 0), key_on(prefix, 1)]
}

#[test]
fn a_write_anywhere_invalidates_every_reader_once() {
    each_server(|server| {
        let keys = keys_on_both("inv");
        let mut writer = server.client();
        // Several readers, so that with two shards both hold some.
        let mut readers: Vec<Client> = (0..6).map(|_| tracker(server, "")).collect();
        for key in &keys {
            assert_eq!(writer.cmd(&format!("SET {key} v1")), ok());
        }
        for reader in readers.iter_mut() {
            for key in &keys {
                assert_eq!(reader.cmd(&format!("GET {key}")), bulk("v1"));
            }
        }
        for key in &keys {
            assert_eq!(writer.cmd(&format!("SET {key} v2")), ok());
        }
        for reader in readers.iter_mut() {
            expect_invalidations(reader, &[&keys[0], &keys[1]]);
        }
        // Told once: a second write, with no read in between, owes nothing.
        for key in &keys {
            assert_eq!(writer.cmd(&format!("SET {key} v3")), ok());
        }
        // Read again: tracked again, and a pipelined write of both keys invalidates both.
        for reader in readers.iter_mut() {
            for key in &keys {
                assert_eq!(reader.cmd(&format!("GET {key}")), bulk("v3"));
            }
        }
        writer.send(&[b"DEL", keys[0].as_bytes()]);
        writer.send(&[b"INCR", keys[1].as_bytes()]);
        assert_eq!(writer.read().unwrap(), int(1));
        assert!(writer.read().unwrap().is_error(), "INCR of a non-number");
        for reader in readers.iter_mut() {
            expect_invalidations(reader, &[&keys[0], &keys[1]]);
            assert_eq!(pushes_before_pong(reader), Vec::<Frame>::new());
        }
        let mut info = server.client();
        assert_eq!(info_field(&mut info, "clients", "tracking_clients"), 6);
        drop(readers);
        // Gone readers' entries are dropped lazily: the next write of the key finds them.
        let deadline = Instant::now() + Duration::from_secs(10);
        while info_field(&mut info, "clients", "tracking_clients") != 0 {
            assert!(Instant::now() < deadline, "closed trackers still counted");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(writer.cmd(&format!("SET {} x", keys[0])), ok());
    });
}

#[test]
fn the_writers_own_read_is_invalidated_unless_noloop() {
    each_server(|server| {
        let keys = keys_on_both("loop");
        for options in ["", "NOLOOP"] {
            let mut c = tracker(server, options);
            for key in &keys {
                c.cmd(&format!("SET {key} a"));
                assert_eq!(c.cmd(&format!("GET {key}")), bulk("a"));
            }
            // Its own write: the invalidation comes with the reply (RESP3 lets a push come
            // before it), or not at all.
            let mut pushes = Vec::new();
            for key in &keys {
                let (reply, ahead) = cmd_with_pushes(&mut c, &format!("SET {key} b"));
                assert_eq!(reply, ok());
                pushes.extend(ahead);
            }
            pushes.extend(pushes_before_pong(&mut c));
            if options == "NOLOOP" {
                assert_eq!(pushes, Vec::<Frame>::new());
                // Another client's write still counts.
                for key in &keys {
                    assert_eq!(c.cmd(&format!("GET {key}")), bulk("b"));
                }
                let mut other = server.client();
                for key in &keys {
                    other.cmd(&format!("SET {key} c"));
                }
                expect_invalidations(&mut c, &[&keys[0], &keys[1]]);
            } else {
                let keys_told: BTreeSet<String> = pushes
                    .iter()
                    .flat_map(|p| invalidated(p).flatten().unwrap_or_default())
                    .collect();
                assert_eq!(keys_told, keys.iter().cloned().collect());
            }
        }
    });
}

#[test]
fn redirect_sends_invalidations_to_a_resp2_subscriber() {
    each_server(|server| {
        let keys = keys_on_both("redir");
        let mut writer = server.client();
        // Pairs, so that targets and trackers sit on either shard.
        for _ in 0..4 {
            for key in &keys {
                writer.cmd(&format!("SET {key} v"));
            }
            let mut target = server.client();
            let Frame::Integer(id) = target.cmd("CLIENT ID") else {
                panic!("CLIENT ID")
            };
            target.send(&[b"SUBSCRIBE", b"__redis__:invalidate"]);
            assert_eq!(
                target.read().unwrap(),
                array(vec![
                    bulk("subscribe"),
                    bulk("__redis__:invalidate"),
                    int(1)
                ])
            );
            let mut c = server.client();
            assert_eq!(c.cmd(&format!("CLIENT TRACKING ON REDIRECT {id}")), ok());
            assert_eq!(c.cmd("CLIENT GETREDIR"), int(id));
            for key in &keys {
                assert_eq!(c.cmd(&format!("GET {key}")), bulk("v"));
            }
            for key in &keys {
                writer.cmd(&format!("SET {key} v"));
            }
            let mut told = BTreeSet::new();
            while told.len() < 2 {
                let frame = target.read().unwrap();
                let Frame::Array(items) = &frame else {
                    panic!("{frame:?}")
                };
                assert_eq!(items[..2], [bulk("message"), bulk("__redis__:invalidate")]);
                let Frame::Array(named) = &items[2] else {
                    panic!("{frame:?}")
                };
                told.extend(
                    named
                        .iter()
                        .map(|k| String::from_utf8(k.as_bytes().unwrap().to_vec()).unwrap()),
                );
            }
            assert_eq!(told, keys.iter().cloned().collect());
            // A flush: one message with a null, to the target.
            writer.cmd("FLUSHDB");
            assert_eq!(
                target.read().unwrap(),
                array(vec![
                    bulk("message"),
                    bulk("__redis__:invalidate"),
                    Frame::Null
                ])
            );
        }
    });
}

#[test]
fn broadcast_mode_tells_of_every_write_under_its_prefixes() {
    each_server(|server| {
        let mut c = tracker(server, "BCAST PREFIX user: PREFIX cfg");
        let mut writer = server.client();
        let users = keys_on_both("user:");
        writer.cmd(&format!("SET {} 1", users[0]));
        writer.cmd("SET order:1 1");
        writer.cmd(&format!("HSET {} f v", users[1]));
        writer.cmd("SET cfg 1");
        expect_invalidations(&mut c, &[&users[0], &users[1], "cfg"]);
        writer.cmd("SET order:2 1");
        assert_eq!(pushes_before_pong(&mut c), Vec::<Frame>::new());
        assert_eq!(
            c.cmd("CLIENT TRACKINGINFO"),
            Frame::Map(vec![
                (bulk("flags"), array(vec![bulk("on"), bulk("bcast")])),
                (bulk("redirect"), int(0)),
                (bulk("prefixes"), array(vec![bulk("cfg"), bulk("user:")])),
            ])
        );
        let mut info = server.client();
        assert_eq!(info_field(&mut info, "stats", "tracking_total_prefixes"), 2);
        assert_eq!(c.cmd("CLIENT TRACKING OFF"), ok());
        writer.cmd(&format!("SET {} 2", users[0]));
        assert_eq!(pushes_before_pong(&mut c), Vec::<Frame>::new());
    });
}

#[test]
fn optin_tracks_after_caching_yes_and_optout_skips_after_caching_no() {
    each_server(|server| {
        let keys = keys_on_both("opt");
        let mut writer = server.client();
        for key in &keys {
            writer.cmd(&format!("SET {key} v"));
        }
        let mut optin = tracker(server, "OPTIN");
        let mut optout = tracker(server, "OPTOUT");
        // OPTIN: a plain read is not tracked; the one after CACHING yes is (a CLIENT
        // command in between keeps the flag, as in Redis).
        assert_eq!(optin.cmd(&format!("GET {}", keys[0])), bulk("v"));
        assert_eq!(optin.cmd("CLIENT CACHING yes"), ok());
        assert_eq!(
            field_flags(&optin.cmd("CLIENT TRACKINGINFO")),
            ["on", "optin", "caching-yes"]
        );
        assert_eq!(optin.cmd(&format!("GET {}", keys[1])), bulk("v"));
        assert_eq!(
            field_flags(&optin.cmd("CLIENT TRACKINGINFO")),
            ["on", "optin"]
        );
        // OPTOUT: reads are tracked except the one after CACHING no.
        assert_eq!(optout.cmd("CLIENT CACHING no"), ok());
        assert_eq!(optout.cmd(&format!("GET {}", keys[0])), bulk("v"));
        assert_eq!(optout.cmd(&format!("GET {}", keys[1])), bulk("v"));
        for key in &keys {
            writer.cmd(&format!("SET {key} w"));
        }
        expect_invalidations(&mut optin, &[&keys[1]]);
        expect_invalidations(&mut optout, &[&keys[1]]);
        assert_eq!(pushes_before_pong(&mut optin), Vec::<Frame>::new());
        assert_eq!(pushes_before_pong(&mut optout), Vec::<Frame>::new());
        // OPTIN in a transaction: CACHING yes before MULTI covers every queued read.
        assert_eq!(optin.cmd("CLIENT CACHING yes"), ok());
        assert_eq!(optin.cmd("MULTI"), ok());
        for key in &keys {
            assert_eq!(
                optin.cmd(&format!("GET {key}")),
                Frame::Simple("QUEUED".into())
            );
        }
        assert!(matches!(optin.cmd("EXEC"), Frame::Array(_)));
        for key in &keys {
            writer.cmd(&format!("SET {key} x"));
        }
        expect_invalidations(&mut optin, &[&keys[0], &keys[1]]);
        // OPTOUT in a transaction: CACHING no before MULTI leaves every queued read out; a
        // later plain read is tracked, and is the only key told of.
        assert_eq!(optout.cmd("CLIENT CACHING no"), ok());
        assert_eq!(optout.cmd("MULTI"), ok());
        for key in &keys {
            optout.cmd(&format!("GET {key}"));
        }
        assert!(matches!(optout.cmd("EXEC"), Frame::Array(_)));
        assert_eq!(optout.cmd(&format!("GET {}", keys[0])), bulk("x"));
        for key in &keys {
            writer.cmd(&format!("SET {key} y"));
        }
        expect_invalidations(&mut optout, &[&keys[0]]);
        writer.cmd(&format!("SET {} z", keys[0]));
        assert_eq!(pushes_before_pong(&mut optout), Vec::<Frame>::new());
    });
}

fn field_flags(info: &Frame) -> Vec<String> {
    let Frame::Map(pairs) = info else {
        panic!("{info:?}")
    };
    let flags = &pairs.iter().find(|(k, _)| *k == bulk("flags")).unwrap().1;
    strings(flags)
}

fn strings(frame: &Frame) -> Vec<String> {
    let Frame::Array(items) = frame else {
        panic!("{frame:?}")
    };
    items
        .iter()
        .map(|f| String::from_utf8(f.as_bytes().unwrap().to_vec()).unwrap())
        .collect()
}

#[test]
fn flushes_expiry_and_cross_shard_reads_invalidate() {
    each_server(|server| {
        let keys = keys_on_both("fx");
        let mut writer = server.client();
        let mut readers: Vec<Client> = (0..4).map(|_| tracker(server, "")).collect();
        // A flush tells every tracking client once, with a null, whatever it read.
        writer.cmd("FLUSHALL");
        for reader in readers.iter_mut() {
            let frame = reader.read().unwrap();
            assert_eq!(invalidated(&frame), Some(None), "{frame:?}");
            assert_eq!(pushes_before_pong(reader), Vec::<Frame>::new());
        }
        // An expiry invalidates (lazily or by the active cycle).
        for key in &keys {
            writer.cmd(&format!("SET {key} v PX 50"));
        }
        for reader in readers.iter_mut() {
            for key in &keys {
                reader.cmd(&format!("GET {key}"));
            }
        }
        for reader in readers.iter_mut() {
            expect_invalidations(reader, &[&keys[0], &keys[1]]);
        }
        // Reads of keys on several shards (MGET split, SUNION across shards) are tracked
        // on each key's owner.
        for key in &keys {
            writer.cmd(&format!("SADD {key} m"));
        }
        for reader in readers.iter_mut() {
            assert!(matches!(
                reader.cmd(&format!("SUNION {} {}", keys[0], keys[1])),
                Frame::Set(_) | Frame::Array(_)
            ));
        }
        for key in &keys {
            writer.cmd(&format!("SADD {key} n"));
        }
        for reader in readers.iter_mut() {
            expect_invalidations(reader, &[&keys[0], &keys[1]]);
            reader.cmd(&format!("MGET {} {}", keys[0], keys[1]));
        }
        writer.cmd(&format!("DEL {} {}", keys[0], keys[1]));
        for reader in readers.iter_mut() {
            expect_invalidations(reader, &[&keys[0], &keys[1]]);
        }
    });
}

#[test]
fn tracking_errors_and_introspection_read_as_redis() {
    let server = Server::start(&["--shards", "2"]);
    let mut c = server.client();
    for (line, error) in [
        ("CLIENT TRACKING ON PREFIX a", "ERR PREFIX option requires BCAST mode to be enabled"),
        ("CLIENT TRACKING ON OPTIN OPTOUT", "ERR You can't specify both OPTIN mode and OPTOUT mode"),
        ("CLIENT TRACKING ON BCAST OPTIN", "ERR OPTIN and OPTOUT are not compatible with BCAST"),
        ("CLIENT TRACKING ON REDIRECT 999999", "ERR The client ID you want redirect to does not exist"),
        ("CLIENT TRACKING ON FOO", "ERR syntax error"),
        ("CLIENT TRACKING MAYBE", "ERR syntax error"),
        ("CLIENT TRACKING ON BCAST PREFIX a PREFIX ab", "ERR Prefix 'a' overlaps with another provided prefix 'ab'. Prefixes for a single client must not overlap."),
        ("CLIENT CACHING yes", "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled"),
    ] {
        assert_eq!(c.cmd(line), err(error), "{line}");
    }
    assert_eq!(c.cmd("CLIENT GETREDIR"), int(-1));
    assert_eq!(c.cmd("CLIENT TRACKING ON"), ok());
    for (line, error) in [
        ("CLIENT CACHING yes", "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode."),
        ("CLIENT TRACKING ON BCAST", "ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode."),
    ] {
        assert_eq!(c.cmd(line), err(error), "{line}");
    }
    let list = match c.cmd("CLIENT INFO") {
        Frame::Verbatim(_, text) | Frame::Bulk(text) => text,
        other => panic!("CLIENT INFO: {other:?}"),
    };
    assert!(String::from_utf8_lossy(&list).contains(" flags=t "));
    // A redirect to a client on the other shard is found, and one that leaves is reported.
    let mut targets: Vec<Client> = (0..4).map(|_| server.client()).collect();
    for target in targets.iter_mut() {
        let Frame::Integer(id) = target.cmd("CLIENT ID") else {
            panic!()
        };
        assert_eq!(c.cmd(&format!("CLIENT TRACKING ON REDIRECT {id}")), ok());
        assert_eq!(c.cmd("CLIENT GETREDIR"), int(id));
    }
    assert_eq!(c.cmd("CLIENT TRACKING OFF"), ok());
    assert_eq!(
        c.cmd("CLIENT TRACKINGINFO"),
        array(vec![
            bulk("flags"),
            array(vec![bulk("off")]),
            bulk("redirect"),
            int(-1),
            bulk("prefixes"),
            array(vec![])
        ])
    );
    assert_eq!(c.cmd("RESET"), Frame::Simple("RESET".into()));
}
