//! redis-rs (the Rust client, at the release Cargo.lock pins: the newest when added) against
//! the real server on 2 and 4 shards, with 20 random key names each, so a bug that depends on
//! where a name hashes cannot hide behind one lucky name: typed commands, pipelines (plain and
//! MULTI), a script through redis-rs's EVALSHA-then-EVAL, MGET/DEL across shards and SCAN.

mod common;

use std::collections::{HashMap, HashSet};

use common::Server;
use redis::Commands;

fn names(rng: &mut fastrand::Rng) -> Vec<String> {
    (0..20).map(|_| format!("rs{}", rng.u64(..))).collect()
}

#[test]
fn redis_rs_works_on_any_layout_with_random_names() {
    for shards in ["2", "4"] {
        let server = Server::start(&["--shards", shards]);
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", server.port)).unwrap();
        let mut c = client.get_connection().expect("connect");
        let mut rng = fastrand::Rng::new();
        let names = names(&mut rng);
        for (i, name) in names.iter().enumerate() {
            let _: () = c.set(name, i).unwrap();
            let got: usize = c.get(name).unwrap();
            assert_eq!(got, i, "{name} on {shards} shards");
            let n: i64 = c.incr(name, 10).unwrap();
            assert_eq!(n, i as i64 + 10);
            let hash = format!("{name}:h");
            let _: () = c.hset_multiple(&hash, &[("a", "1"), ("b", "2")]).unwrap();
            let all: HashMap<String, String> = c.hgetall(&hash).unwrap();
            assert_eq!(all.len(), 2);
            let list = format!("{name}:l");
            let _: () = c.rpush(&list, &["x", "y", "z"]).unwrap();
            let items: Vec<String> = c.lrange(&list, 0, -1).unwrap();
            assert_eq!(items, ["x", "y", "z"]);
            let zset = format!("{name}:z");
            let _: () = c.zadd_multiple(&zset, &[(2, "two"), (1, "one")]).unwrap();
            let ranked: Vec<(String, f64)> = c.zrange_withscores(&zset, 0, -1).unwrap();
            assert_eq!(ranked, [("one".to_string(), 1.0), ("two".to_string(), 2.0)]);
            let _: () = c.expire(name, 100).unwrap();
            let ttl: i64 = c.ttl(name).unwrap();
            assert!((1..=100).contains(&ttl), "{ttl}");
            // A MULTI pipeline over the name's keys and the next name's (often elsewhere).
            let other = &names[(i + 1) % names.len()];
            let (a, b): (i64, i64) = redis::pipe()
                .atomic()
                .incr(name, 1)
                .incr(format!("{other}:n"), 1)
                .query(&mut c)
                .unwrap();
            assert_eq!(a, i as i64 + 11);
            assert!(b >= 1);
        }
        // Plain pipelines and MGET across every name (all shards at once).
        let mut pipe = redis::pipe();
        for name in &names {
            pipe.get(name);
        }
        let values: Vec<i64> = pipe.query(&mut c).unwrap();
        let expected: Vec<i64> = (0..names.len() as i64).map(|i| i + 11).collect();
        assert_eq!(values, expected);
        let mget: Vec<i64> = c.mget(&names).unwrap();
        assert_eq!(mget, expected);
        // A script: redis-rs sends EVALSHA first and EVAL on NOSCRIPT.
        let script = redis::Script::new(
            "redis.call('set', KEYS[1], ARGV[1]) return redis.call('get', KEYS[1])",
        );
        for name in &names {
            let key = format!("{name}:s");
            let got: String = script.key(&key).arg("v").invoke(&mut c).unwrap();
            assert_eq!(got, "v");
        }
        // SCAN sees every name, across every shard, once.
        let scanned: HashSet<String> = c
            .scan_match::<_, String>("rs*")
            .unwrap()
            .map(|key| key.expect("a scanned key"))
            .collect();
        for name in &names {
            assert!(
                scanned.contains(name),
                "{name} missing from SCAN on {shards} shards"
            );
        }
        let removed: usize = c.del(&names).unwrap();
        assert_eq!(removed, names.len());
    }
}
