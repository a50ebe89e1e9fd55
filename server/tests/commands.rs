//! End-to-end command tests against the real binary: routing across shards, connection
//! commands, RESP3, auth, and shutdown. Each scenario runs on the io_uring path with one and
//! two shards, and on the glommio fallback.

mod common;

use common::*;
use wetask_protocol::Frame;

#[test]
fn strings_and_keys_across_shards() {
    each_server(|server| {
        let mut c = server.client();
        assert_eq!(c.cmd("FLUSHALL"), ok());
        // Enough keys that both shards own some.
        let mut mset = vec!["MSET".to_string()];
        for i in 0..50 {
            mset.push(format!("key:{i}"));
            mset.push(format!("value:{i}"));
        }
        assert_eq!(c.cmd(&mset.join(" ")), ok());
        assert_eq!(c.cmd("DBSIZE"), int(50));
        let mget = c.cmd("MGET key:0 nope key:49 key:7");
        assert_eq!(
            mget,
            array(vec![
                bulk("value:0"),
                Frame::Null,
                bulk("value:49"),
                bulk("value:7")
            ])
        );
        assert_eq!(c.cmd("EXISTS key:1 key:2 nope key:1"), int(3));
        assert_eq!(c.cmd("DEL key:1 key:2 nope"), int(2));
        assert_eq!(c.cmd("KEYS key:4*").clone(), c.cmd("KEYS key:4*"));
        assert_eq!(sorted_strings(c.cmd("KEYS key:4?")).len(), 10);
        // RENAME, COPY and MSETNX whose keys sit on different shards: no CROSSSLOT.
        for i in 0..10 {
            let from = format!("key:{}", 10 + i);
            let to = format!("moved:{i}");
            assert_eq!(c.cmd(&format!("RENAME {from} {to}")), ok());
            assert_eq!(
                c.cmd(&format!("GET {to}")),
                bulk(&format!("value:{}", 10 + i))
            );
            assert_eq!(c.cmd(&format!("EXISTS {from}")), int(0));
            assert_eq!(c.cmd(&format!("COPY {to} copy:{i}")), int(1));
            assert_eq!(c.cmd(&format!("COPY {to} copy:{i}")), int(0));
            assert_eq!(c.cmd(&format!("RENAMENX copy:{i} {to}")), int(0));
        }
        assert_eq!(c.cmd("RENAME missing other"), err("ERR no such key"));
        assert_eq!(c.cmd("MSETNX a:1 x a:2 y a:3 z"), int(1));
        assert_eq!(c.cmd("MSETNX a:4 x a:2 y"), int(0));
        assert_eq!(c.cmd("EXISTS a:4"), int(0));
        assert_eq!(c.cmd("SET counter 10"), ok());
        assert_eq!(c.cmd("INCRBY counter 5"), int(15));
        assert_eq!(c.cmd("PEXPIRE counter 100000"), int(1));
        let Frame::Integer(ttl) = c.cmd("TTL counter") else {
            panic!()
        };
        assert!((99..=100).contains(&ttl), "ttl {ttl}");
        assert_eq!(c.cmd("TYPE counter"), Frame::simple("string"));
        assert_eq!(c.cmd("SET short v PX 30"), ok());
        std::thread::sleep(std::time::Duration::from_millis(60));
        assert_eq!(c.cmd("GET short"), Frame::Null);
    });
}

/// An idle shard sleeps in its own ring; a peer's request must wake it through its doorbell
/// at once, not at its next cron tick (up to 100 ms later). 200 cross-shard MGETs, each sent
/// after a pause that lets both shards fall asleep: about 1 ms each here, 50 ms on average
/// without the doorbell.
#[test]
fn an_idle_shard_is_woken_by_its_peer_at_once() {
    let server = Server::start(&["--shards", "2"]);
    let mut c = server.client();
    let (a, b) = (key_on("idle-a", 0), key_on("idle-b", 1));
    c.cmd_args(&[b"MSET", a.as_bytes(), b"1", b.as_bytes(), b"2"]);
    let rings_before = info_field(&mut c, "stats", "net_doorbell_rings");
    let mut waited = std::time::Duration::ZERO;
    for _ in 0..200 {
        std::thread::sleep(std::time::Duration::from_millis(3));
        let started = std::time::Instant::now();
        let reply = c.cmd_args(&[b"MGET", a.as_bytes(), b.as_bytes()]);
        waited += started.elapsed();
        assert_eq!(reply, array(vec![bulk("1"), bulk("2")]));
    }
    let rings = info_field(&mut c, "stats", "net_doorbell_rings") - rings_before;
    assert!(
        waited < std::time::Duration::from_secs(5),
        "200 cross-shard round trips to idle shards took {waited:?}"
    );
    // Each MGET finds the other shard asleep, and its reply finds this one asleep: both
    // ring. Some may find a shard still awake; most must ring.
    assert!(
        rings >= 100,
        "only {rings} doorbell rings for 200 cross-shard requests"
    );
}

#[test]
fn scan_visits_every_key_once_per_shard_walk() {
    each_server(|server| {
        let mut c = server.client();
        c.cmd("FLUSHALL");
        for i in 0..300 {
            c.cmd(&format!("SET scan:{i} v"));
        }
        c.cmd("SET other x");
        let mut seen = std::collections::HashSet::new();
        let mut cursor = "0".to_string();
        let mut rounds = 0;
        loop {
            let reply = c.cmd(&format!("SCAN {cursor} MATCH scan:* COUNT 25"));
            let Frame::Array(parts) = reply else {
                panic!("{reply:?}")
            };
            cursor = String::from_utf8(parts[0].as_bytes().unwrap().to_vec()).unwrap();
            for key in sorted_strings(parts[1].clone()) {
                seen.insert(key);
            }
            rounds += 1;
            if cursor == "0" {
                break;
            }
            assert!(rounds < 1000, "SCAN never finished");
        }
        assert_eq!(seen.len(), 300);
        assert!(!seen.contains("other"));
        assert_eq!(c.cmd("SCAN abc"), err("ERR invalid cursor"));
        assert_eq!(c.cmd("SCAN 0 COUNT 0"), err("ERR syntax error"));
        assert!(c.cmd("RANDOMKEY").as_bytes().is_some());
    });
}

#[test]
fn pipelines_mixing_shards_keep_reply_order() {
    each_server(|server| {
        let mut c = server.client();
        let mut wire = Vec::new();
        for i in 0..200 {
            wire.extend_from_slice(format!("SET p:{i} {i}\r\nGET p:{i}\r\n").as_bytes());
            if i % 50 == 0 {
                wire.extend_from_slice(b"SELECT 1\r\nSET p:x one\r\nSELECT 0\r\nPING\r\n");
            }
        }
        wire.extend_from_slice(b"GET p:x\r\n");
        c.raw(&wire);
        for i in 0..200 {
            assert_eq!(c.read().unwrap(), ok());
            assert_eq!(c.read().unwrap(), bulk(&i.to_string()));
            if i % 50 == 0 {
                assert_eq!(c.read().unwrap(), ok());
                assert_eq!(c.read().unwrap(), ok());
                assert_eq!(c.read().unwrap(), ok());
                assert_eq!(c.read().unwrap(), Frame::simple("PONG"));
            }
        }
        assert_eq!(
            c.read().unwrap(),
            Frame::Null,
            "db 0 must not see db 1's key"
        );
    });
}

/// A pipeline's replies may wait for a batch that runs on the other shard and send as one
/// write, but only when nothing in the batch can wait for long: replies before a blocking
/// command still arrive while it blocks, whichever shard the connection lives on.
#[test]
fn replies_before_a_blocking_command_leave_while_it_blocks() {
    let server = Server::start(&["--shards", "2"]);
    // With two shards, slots 0-8191 are shard 0's and the rest shard 1's: tag a hashes to
    // slot 15495, tag b to 3300, so one of them is always on the other shard.
    let (low, high) = ("{a}", "{b}");
    let mut c = server.client();
    for first in [low, high] {
        let other = if first == low { high } else { low };
        let mut blocked = server.client();
        blocked.raw(
            format!(
                "PING\r\nSET {first}:k 1\r\nGET {other}:absent\r\nGET {first}:k\r\n\
                 BLPOP {other}:list 0\r\n"
            )
            .as_bytes(),
        );
        assert_eq!(blocked.read().unwrap(), Frame::simple("PONG"));
        assert_eq!(blocked.read().unwrap(), ok());
        assert_eq!(blocked.read().unwrap(), Frame::Null);
        assert_eq!(blocked.read().unwrap(), bulk("1"));
        assert_eq!(c.cmd(&format!("RPUSH {other}:list x")), int(1));
        assert_eq!(
            blocked.read().unwrap(),
            Frame::Array(vec![bulk(&format!("{other}:list")), bulk("x")])
        );
    }
}

/// Each command of a pipeline is admitted as a lone one would be, also when its key lives on
/// another shard: a full `noeviction` server refuses every pipelined SET with OOM, and after
/// a RESP2 SUBSCRIBE in the same pipeline every GET is refused.
#[test]
fn every_pipelined_command_is_admitted_on_its_own_across_shards() {
    let server = Server::start(&["--shards", "2"]);
    let mut c = server.client();
    assert_eq!(c.cmd("CONFIG SET maxmemory-policy noeviction"), ok());
    assert_eq!(c.cmd("CONFIG SET maxmemory 1"), ok());
    let keys: Vec<String> = (0..40).map(|i| format!("admit:{i}")).collect();
    let wire: String = keys.iter().map(|k| format!("SET {k} v\r\n")).collect();
    c.raw(wire.as_bytes());
    for key in &keys {
        assert_eq!(
            c.read().unwrap(),
            err("OOM command not allowed when used memory > 'maxmemory'."),
            "{key}"
        );
    }
    assert_eq!(c.cmd("CONFIG SET maxmemory 0"), ok());
    assert_eq!(c.cmd("DBSIZE"), int(0), "no refused SET was stored");

    let mut subscriber = server.client();
    let wire: String = std::iter::once("SUBSCRIBE news\r\n".to_string())
        .chain(keys.iter().map(|k| format!("GET {k}\r\n")))
        .collect();
    subscriber.raw(wire.as_bytes());
    assert!(matches!(subscriber.read().unwrap(), Frame::Array(_)));
    for key in &keys {
        assert_eq!(
            subscriber.read().unwrap(),
            err("ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"),
            "{key}"
        );
    }
}

#[test]
fn connection_commands() {
    each_server(|server| {
        let mut c = server.client();
        assert_eq!(c.cmd("PING"), Frame::simple("PONG"));
        assert_eq!(c.cmd("PING hi"), bulk("hi"));
        assert_eq!(c.cmd("ECHO hello"), bulk("hello"));
        assert_eq!(c.cmd("SELECT 16"), err("ERR DB index is out of range"));
        assert_eq!(
            c.cmd("SELECT x"),
            err("ERR value is not an integer or out of range")
        );
        assert_eq!(c.cmd("CLIENT SETNAME worker-1"), ok());
        assert_eq!(c.cmd("CLIENT GETNAME"), bulk("worker-1"));
        assert_eq!(
            c.cmd_args(&[b"CLIENT", b"SETNAME", b"has space"]),
            err("ERR Client names cannot contain spaces, newlines or special characters.")
        );
        let Frame::Integer(id) = c.cmd("CLIENT ID") else {
            panic!()
        };
        let mut other = server.client();
        other.cmd("CLIENT SETNAME victim");
        let list = c.cmd("CLIENT LIST");
        let text = String::from_utf8(list.as_bytes().unwrap().to_vec()).unwrap();
        assert!(text.contains(&format!("id={id} ")), "{text}");
        assert!(text.contains("name=victim"), "{text}");
        let Frame::Integer(other_id) = other.cmd("CLIENT ID") else {
            panic!()
        };
        assert_eq!(c.cmd(&format!("CLIENT KILL ID {other_id}")), int(1));
        assert!(other.closed());
        assert_eq!(c.cmd("CLIENT SETINFO LIB-NAME tests"), ok());
        assert_eq!(
            c.cmd("CLIENT NOPE"),
            err("ERR unknown subcommand 'NOPE'. Try CLIENT HELP.")
        );
        assert_eq!(
            c.cmd("NOSUCH a b"),
            err("ERR unknown command 'NOSUCH', with args beginning with: 'a' 'b' ")
        );
        assert_eq!(
            c.cmd("GET"),
            err("ERR wrong number of arguments for 'get' command")
        );
        let Frame::Integer(count) = c.cmd("COMMAND COUNT") else {
            panic!()
        };
        assert_eq!(count as usize, wetask_shards::COMMANDS.len());
        let Frame::Array(info) = c.cmd("COMMAND INFO get nosuch") else {
            panic!()
        };
        assert_eq!(info[1], Frame::NullArray);
        let Frame::Array(get) = &info[0] else {
            panic!()
        };
        assert_eq!(get[1], int(2));
        let config = c.cmd("CONFIG GET maxclients");
        assert_eq!(config, array(vec![bulk("maxclients"), bulk("10000")]));
        assert_eq!(c.cmd("CONFIG GET nothing-like-this"), array(vec![]));
        let Frame::Array(time) = c.cmd("TIME") else {
            panic!()
        };
        assert_eq!(time.len(), 2);
        c.cmd("SET k v");
        let info = c.cmd("INFO");
        let text = String::from_utf8(info.as_bytes().unwrap().to_vec()).unwrap();
        assert!(text.contains("redis_version:"), "{text}");
        assert!(text.contains("connected_clients:"), "{text}");
        assert!(text.contains("db0:keys="), "{text}");
        let stats = c.cmd("INFO commandstats");
        let text = String::from_utf8(stats.as_bytes().unwrap().to_vec()).unwrap();
        assert!(text.contains("cmdstat_set:calls="), "{text}");
        assert_eq!(c.cmd("QUIT"), ok());
        assert!(c.closed());
    });
}

#[test]
fn hello_switches_to_resp3() {
    let server = Server::start(&["--shards", "2"]);
    let mut c = server.client();
    let reply = c.cmd("HELLO 3");
    let Frame::Map(pairs) = reply else {
        panic!("{reply:?}")
    };
    assert!(pairs.contains(&(bulk("proto"), int(3))));
    assert_eq!(c.cmd("GET missing"), Frame::Null);
    c.raw(b"GET missing\r\n");
    assert_eq!(c.read(), Some(Frame::Null));
    assert_eq!(
        c.cmd("HELLO 4"),
        err("NOPROTO unsupported protocol version")
    );
    let Frame::Map(_) = c.cmd("CONFIG GET port") else {
        panic!("RESP3 CONFIG GET is a map")
    };
    assert_eq!(c.cmd("HELLO 2").clone(), c.cmd("HELLO 2"));
    let Frame::Array(_) = c.cmd("CONFIG GET port") else {
        panic!("RESP2 CONFIG GET is flat")
    };
}

#[test]
fn requirepass_gates_commands() {
    let server = Server::start(&["--shards", "2", "--requirepass", "s3cret"]);
    let mut c = server.client();
    assert_eq!(c.cmd("GET k"), err("NOAUTH Authentication required."));
    assert_eq!(
        c.cmd("AUTH wrong"),
        err("WRONGPASS invalid username-password pair or user is disabled.")
    );
    assert_eq!(c.cmd("AUTH s3cret"), ok());
    assert_eq!(c.cmd("SET k v"), ok());
    let mut d = server.client();
    let Frame::Map(_) = d.cmd("HELLO 3 AUTH default s3cret SETNAME n") else {
        panic!()
    };
    assert_eq!(d.cmd("GET k"), bulk("v"));
    assert_eq!(d.cmd("CLIENT GETNAME"), bulk("n"));
    assert_eq!(d.cmd("RESET"), Frame::simple("RESET"));
    assert_eq!(d.cmd("GET k"), err("NOAUTH Authentication required."));
}

#[test]
fn shutdown_and_sigterm_exit_cleanly() {
    let server = Server::start(&["--shards", "2"]);
    let mut c = server.client();
    c.cmd("SET k v");
    assert!(server.terminate().success());

    let mut server = Server::start(&["--shards", "2"]);
    let mut c = server.client();
    c.send(&[b"SHUTDOWN"]);
    assert!(c.closed(), "SHUTDOWN closes without a reply");
    assert!(server.wait().success());
}

/// Two-shard start-up and shutdown, many times: glommio's mesh builder once corrupted the
/// heap here in about one start in fifteen (it aborted with "unaligned tcache chunk").
#[test]
fn two_shard_servers_start_and_stop_cleanly_every_time() {
    for round in 0..20 {
        let server = Server::start(&["--shards", "2"]);
        let mut clients: Vec<_> = (0..3).map(|_| server.client()).collect();
        for (i, c) in clients.iter_mut().enumerate() {
            assert_eq!(c.cmd(&format!("SET k{i} v")), ok());
            assert_eq!(c.cmd(&format!("GET k{i}")), bulk("v"));
        }
        let status = server.terminate();
        assert!(status.success(), "round {round}: {status:?}");
    }
}

#[test]
fn config_file_and_maxclients() {
    let dir = std::env::temp_dir().join(format!("wetask-conf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("wetask.conf");
    std::fs::write(&path, "# test\nmaxclients 2\nshards 1\n").unwrap();
    let server = Server::start(&["--config", path.to_str().unwrap()]);
    let mut a = server.client();
    let mut b = server.client();
    assert_eq!(a.cmd("PING"), Frame::simple("PONG"));
    assert_eq!(b.cmd("PING"), Frame::simple("PONG"));
    let mut c = server.client();
    assert_eq!(c.read(), Some(err("ERR max number of clients reached")));
    drop(b);
    std::thread::sleep(std::time::Duration::from_millis(100));
    let mut d = server.client();
    assert_eq!(d.cmd("PING"), Frame::simple("PONG"));
    assert_eq!(
        a.cmd("CONFIG GET shards"),
        array(vec![bulk("shards"), bulk("1")])
    );
}

/// Two keys owned by different shards of a two-shard server.
fn keys_on_two_shards(prefix: &str) -> (String, String) {
    let mut first = None;
    for i in 0.. {
        let key = format!("{prefix}{i}");
        match first {
            None => first = Some((key.clone(), wetask_shards::shard_of(key.as_bytes(), 2))),
            Some((ref a, shard)) if wetask_shards::shard_of(key.as_bytes(), 2) != shard => {
                return (a.clone(), key)
            }
            _ => {}
        }
    }
    unreachable!()
}

/// Two MSETNX racing each round on keys of different shards: exactly one may win, and both
/// keys must hold the winner's value. Without cross-shard locking the check-then-set steps
/// interleave and both can win, leaving the keys mixed.
#[test]
fn cross_shard_msetnx_is_atomic() {
    let server = Server::start(&["--shards", "2"]);
    let (k1, k2) = keys_on_two_shards("atomic:");
    let rounds = 300;
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(3));
    let racers: Vec<_> = ["A", "B"]
        .into_iter()
        .map(|name| {
            let (port, barrier) = (server.port, barrier.clone());
            let command = format!("MSETNX {k1} {name} {k2} {name}");
            std::thread::spawn(move || {
                let mut c = Client::connect(port);
                let mut wins = Vec::new();
                for _ in 0..rounds {
                    barrier.wait();
                    // A lost reply must fail the test, not leave the others waiting at the
                    // barrier for ever: keep meeting them, and report it at the end.
                    let args: Vec<&[u8]> = command.split(' ').map(str::as_bytes).collect();
                    c.send(&args);
                    wins.push(c.try_read());
                    barrier.wait();
                    barrier.wait();
                }
                wins.into_iter()
                    .map(|reply| match reply {
                        Ok(Some(frame)) => frame == int(1),
                        other => panic!("MSETNX got no reply: {other:?}"),
                    })
                    .collect::<Vec<bool>>()
            })
        })
        .collect();
    let mut referee = server.client();
    let mut values = Vec::new();
    for _ in 0..rounds {
        barrier.wait();
        barrier.wait();
        values.push((
            referee.cmd(&format!("GET {k1}")),
            referee.cmd(&format!("GET {k2}")),
        ));
        assert_eq!(referee.cmd(&format!("DEL {k1} {k2}")), int(2));
        barrier.wait();
    }
    let wins: Vec<Vec<bool>> = racers.into_iter().map(|h| h.join().unwrap()).collect();
    for (round, (v1, v2)) in values.iter().enumerate() {
        let winners: Vec<&str> = ["A", "B"]
            .iter()
            .zip(&wins)
            .filter(|(_, w)| w[round])
            .map(|(name, _)| *name)
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        assert_eq!(
            (v1, v2),
            (&bulk(winners[0]), &bulk(winners[0])),
            "round {round}"
        );
    }
}

/// A token renamed around a ring of keys spread over both shards by concurrent clients is
/// never lost or duplicated.
#[test]
fn cross_shard_renames_conserve_the_value() {
    let server = Server::start(&["--shards", "2"]);
    let keys: Vec<String> = (0..6).map(|i| format!("ring:{i}")).collect();
    let mut c = server.client();
    assert_eq!(c.cmd("SET ring:0 token"), ok());
    let movers: Vec<_> = (0..3)
        .map(|_| {
            let (port, keys) = (server.port, keys.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(port);
                for step in 0..300 {
                    let from = &keys[step % keys.len()];
                    let to = &keys[(step + 1) % keys.len()];
                    let reply = c.cmd(&format!("RENAME {from} {to}"));
                    assert!(
                        reply == ok() || reply == err("ERR no such key"),
                        "{reply:?}"
                    );
                }
            })
        })
        .collect();
    for mover in movers {
        mover.join().unwrap();
    }
    let present: Vec<&String> = keys
        .iter()
        .filter(|k| c.cmd(&format!("EXISTS {k}")) == int(1))
        .collect();
    assert_eq!(present.len(), 1, "{present:?}");
    assert_eq!(c.cmd(&format!("GET {}", present[0])), bulk("token"));
}

/// Large values go out by reference in vectored sends, mixed with copied small replies. A
/// pipeline of GETs whose replies far exceed the socket buffer (so sends are partial and
/// span many iovecs), read only after it is all written, must come back byte-exact and in
/// order, for local and cross-shard keys.
#[test]
fn large_values_come_back_exact_through_vectored_sends() {
    each_server(|server| {
        let mut c = server.client();
        let sizes = [
            5usize,
            16 * 1024,
            16 * 1024 - 1,
            70_000,
            300_000,
            1 << 20,
            1,
            40_000,
        ];
        let value = |i: usize| -> Vec<u8> {
            (0..sizes[i % sizes.len()])
                .map(|j| b'a' + ((i * 7 + j) % 26) as u8)
                .collect()
        };
        for i in 0..16 {
            let key = format!("big:{i}");
            assert_eq!(c.cmd_args(&[b"SET", key.as_bytes(), &value(i)]), ok());
        }
        let mut wire = Vec::new();
        let order: Vec<usize> = (0..60).map(|n| (n * 5) % 16).collect();
        for &i in &order {
            wire.extend_from_slice(format!("GET big:{i}\r\nPING\r\n").as_bytes());
        }
        c.raw(&wire);
        for &i in &order {
            let Some(Frame::Bulk(got)) = c.read() else {
                panic!("GET big:{i}: not a bulk reply");
            };
            assert!(
                got[..] == value(i)[..],
                "GET big:{i}: {} bytes, wrong content",
                got.len()
            );
            assert_eq!(c.read(), Some(Frame::simple("PONG")));
        }
    });
}

/// SORT's BY and GET patterns read keys on any shard: the list on one, its weights and
/// data on the other, STORE into a third place; and with a hash tag, all on one shard.
#[test]
fn sort_patterns_read_keys_on_another_shard() {
    for shards in ["2", "4"] {
        let server = Server::start(&["--shards", shards]);
        let mut c = server.client();
        let list = "{s}list";
        let count = shards.parse().unwrap();
        let home = wetask_shards::shard_of(list.as_bytes(), count);
        // Elements whose weight keys live on other shards than the list's.
        let away: Vec<usize> = (0..)
            .filter(|i| wetask_shards::shard_of(format!("w_{i}").as_bytes(), count) != home)
            .take(3)
            .collect();
        for (weight, element) in away.iter().enumerate() {
            c.cmd(&format!("RPUSH {list} {element}"));
            c.cmd(&format!("SET w_{element} {}", 10 - weight));
            c.cmd(&format!("SET d_{element} data{element}"));
        }
        let by_weight: Vec<Frame> = away
            .iter()
            .rev()
            .map(|e| bulk(&format!("data{e}")))
            .collect();
        assert_eq!(
            c.cmd(&format!("SORT {list} BY w_* GET d_*")),
            array(by_weight.clone())
        );
        assert_eq!(
            c.cmd(&format!("SORT {list} BY w_* GET d_* STORE out")),
            int(away.len() as i64)
        );
        assert_eq!(c.cmd("LRANGE out 0 -1"), array(by_weight));
        // With the pattern's keys on the list's shard (a hash tag), it sorts there.
        c.cmd(&format!("SET {{s}}w_{} 5", away[0]));
        assert_eq!(
            c.cmd(&format!(
                "SORT {list} BY {{s}}w_* GET {{s}}w_* LIMIT 0 1 DESC"
            )),
            array(vec![bulk("5")])
        );
    }
}

/// CLIENT REPLY OFF / SKIP / ON, in one pipeline, with keys on both shards (so some of the
/// dropped replies come from a cross-shard batch, some from commands run inline): exactly
/// the replies Redis would send arrive, in order.
#[test]
fn client_reply_off_skip_and_on_drop_exactly_the_replies_redis_drops() {
    let server = Server::start(&["--shards", "2"]);
    let mut c = server.client();
    let (here, there) = (key_on("r:", 0), key_on("r:", 1));
    let pipeline: Vec<Vec<&[u8]>> = vec![
        vec![b"CLIENT", b"REPLY", b"OFF"],
        vec![b"SET", here.as_bytes(), b"1"],
        vec![b"SET", there.as_bytes(), b"2"],
        vec![b"GET", there.as_bytes()],
        vec![b"CLIENT", b"REPLY", b"SKIP"],
        vec![b"CLIENT", b"REPLY", b"ON"],
        vec![b"GET", here.as_bytes()],
        vec![b"CLIENT", b"REPLY", b"SKIP"],
        vec![b"GET", there.as_bytes()],
        vec![b"GET", there.as_bytes()],
        vec![b"CLIENT", b"REPLY", b"MAYBE"],
        vec![b"PING"],
    ];
    for args in &pipeline {
        c.send(args);
    }
    let replies: Vec<Frame> = (0..5).map(|_| c.read().expect("a reply")).collect();
    assert_eq!(
        replies,
        vec![
            ok(),
            bulk("1"),
            bulk("2"),
            err("ERR syntax error"),
            Frame::Simple("PONG".into()),
        ]
    );
    assert_eq!(
        c.cmd("CLIENT REPLY"),
        err("ERR wrong number of arguments for 'client|reply' command")
    );
}

/// SWAPDB on two shards: every shard's halves trade places, a WATCH on either database
/// aborts its EXEC, and a client blocked on a key of the database that receives a list is
/// served from it.
#[test]
fn swapdb_swaps_every_shard_wakes_blocked_clients_and_aborts_watchers() {
    let server = Server::start(&["--shards", "2"]);
    let mut c = server.client();
    let (here, there) = (key_on("sw:", 0), key_on("sw:", 1));
    c.cmd(&format!("SET {here} a"));
    c.cmd(&format!("SET {there} b"));
    c.cmd(&format!("RPUSH {there}:list x"));
    // A client blocked in db 1 on the list that db 0 holds.
    let port = server.port;
    let list = format!("{there}:list");
    let blocked = std::thread::spawn(move || {
        let mut b = Client::connect(port);
        assert_eq!(b.cmd("SELECT 1"), ok());
        b.cmd(&format!("BLPOP {list} 10"))
    });
    wait_blocked(&server, 1);
    let mut watcher = server.client();
    assert_eq!(watcher.cmd(&format!("WATCH {here}")), ok());
    assert_eq!(c.cmd("SWAPDB 0 1"), ok());
    assert_eq!(
        blocked.join().unwrap(),
        array(vec![bulk(&format!("{there}:list")), bulk("x")])
    );
    assert_eq!(watcher.cmd("MULTI"), ok());
    assert_eq!(
        watcher.cmd(&format!("SET {here} lost")),
        Frame::Simple("QUEUED".into())
    );
    assert_eq!(
        watcher.cmd("EXEC"),
        Frame::NullArray,
        "the watched key's database changed"
    );
    assert_eq!(c.cmd("DBSIZE"), int(0));
    assert_eq!(c.cmd("SELECT 1"), ok());
    assert_eq!(
        c.cmd(&format!("MGET {here} {there}")),
        array(vec![bulk("a"), bulk("b")])
    );
}
