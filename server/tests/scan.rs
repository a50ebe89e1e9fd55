//! SCAN over every shard: COUNT is work spread across shards, so a small keyspace is one
//! call with cursor 0, as in Redis; and Redis's guarantee holds while keys come and go: a
//! key present from the first call to the last is returned at least once.

mod common;

use std::collections::HashSet;

use common::*;
use wetask_protocol::Frame;

/// One SCAN call: (next cursor, keys).
fn scan_once(c: &mut Client, cursor: u64, extra: &[&str]) -> (u64, Vec<String>) {
    let mut args: Vec<String> = vec!["SCAN".into(), cursor.to_string()];
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    let Frame::Array(parts) = c.cmd_args(&refs) else {
        panic!("SCAN did not answer an array")
    };
    let Frame::Bulk(next) = &parts[0] else {
        panic!("no cursor")
    };
    let keys = sorted_strings(parts[1].clone());
    (String::from_utf8_lossy(next).parse().unwrap(), keys)
}

#[test]
fn a_small_keyspace_is_one_call_on_any_shard_count() {
    for shards in ["1", "2", "4"] {
        let server = Server::start(&["--shards", shards]);
        let mut c = server.client();
        c.cmd("MSET k1 1 k2 2 k3 3 k4 4 k5 5");
        c.cmd("RPUSH list a");
        let (cursor, keys) = scan_once(&mut c, 0, &[]);
        assert_eq!(cursor, 0, "{shards} shards");
        assert_eq!(
            keys,
            ["k1", "k2", "k3", "k4", "k5", "list"],
            "{shards} shards"
        );
        let (cursor, keys) = scan_once(&mut c, 0, &["TYPE", "list"]);
        assert_eq!(
            (cursor, keys),
            (0, vec!["list".to_string()]),
            "{shards} shards"
        );
        let (cursor, keys) = scan_once(&mut c, 0, &["MATCH", "k[12]", "COUNT", "100"]);
        assert_eq!((cursor, keys.len()), (0, 2), "{shards} shards");
        // COUNT bounds the work of one call: the cursor goes on where it stopped.
        let mut seen = HashSet::new();
        let mut cursor = 0;
        let mut calls = 0;
        loop {
            let (next, keys) = scan_once(&mut c, cursor, &["COUNT", "2"]);
            assert!(keys.len() <= 2 + 1, "{shards} shards: {keys:?}");
            seen.extend(keys);
            calls += 1;
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        assert_eq!(seen.len(), 6, "{shards} shards");
        assert!(calls >= 3, "{shards} shards: {calls} calls");
    }
}

#[test]
fn keys_present_throughout_a_scan_are_all_returned() {
    for shards in ["1", "2", "4"] {
        let server = Server::start(&["--shards", shards]);
        let mut c = server.client();
        let mut rng = fastrand::Rng::with_seed(7);
        let stable: Vec<String> = (0..400).map(|i| format!("stable:{i}")).collect();
        for chunk in stable.chunks(100) {
            let mut args = vec!["MSET".to_string()];
            for key in chunk {
                args.push(key.clone());
                args.push("v".into());
            }
            let refs: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            assert_eq!(c.cmd_args(&refs), ok());
        }
        let mut seen = HashSet::new();
        let mut cursor = 0;
        let mut churn = 0;
        for _ in 0..10_000 {
            let (next, keys) = scan_once(&mut c, cursor, &["COUNT", "7"]);
            seen.extend(keys);
            // Between calls, keys come and go (the stable ones stay).
            for _ in 0..5 {
                churn += 1;
                let key = format!("churn:{}", rng.u32(..200));
                if rng.bool() {
                    c.cmd(&format!("SET {key} {churn}"));
                } else {
                    c.cmd(&format!("DEL {key}"));
                }
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        assert_eq!(cursor, 0, "{shards} shards: the scan never ended");
        let missing: Vec<&String> = stable.iter().filter(|k| !seen.contains(*k)).collect();
        assert!(missing.is_empty(), "{shards} shards: missed {missing:?}");
    }
}
