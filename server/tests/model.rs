//! Random command sequences through the real server with two shards, each reply compared
//! with a reference model (a `BTreeMap` per database). Keys are spread so that most
//! multi-key commands, renames and copies cross shards.

mod common;

use std::collections::BTreeMap;

use common::*;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use wetask_protocol::Frame;

/// The model: per database, key -> (value, has_ttl).
#[derive(Default)]
struct Model {
    dbs: Vec<BTreeMap<String, (String, bool)>>,
    db: usize,
}

impl Model {
    fn new() -> Self {
        Model {
            dbs: (0..16).map(|_| BTreeMap::new()).collect(),
            db: 0,
        }
    }
    fn cur(&mut self) -> &mut BTreeMap<String, (String, bool)> {
        &mut self.dbs[self.db]
    }
}

#[derive(Debug, Clone)]
enum Op {
    Set(u8, u8),
    SetEx(u8, u8),
    Get(u8),
    MSet(Vec<(u8, u8)>),
    MGet(Vec<u8>),
    Del(Vec<u8>),
    Exists(Vec<u8>),
    Incr(u8),
    Append(u8, u8),
    Rename(u8, u8),
    RenameNx(u8, u8),
    Copy(u8, u8),
    MSetNx(Vec<(u8, u8)>),
    Ttl(u8),
    Persist(u8),
    Select(u8),
    DbSize,
}

fn key(k: u8) -> String {
    format!("key:{k}")
}

fn value(v: u8) -> String {
    format!("v{v}")
}

fn op() -> impl Strategy<Value = Op> {
    let k = || 0u8..12;
    let v = || 0u8..5;
    prop_oneof![
        (k(), v()).prop_map(|(a, b)| Op::Set(a, b)),
        (k(), v()).prop_map(|(a, b)| Op::SetEx(a, b)),
        k().prop_map(Op::Get),
        proptest::collection::vec((k(), v()), 1..5).prop_map(Op::MSet),
        proptest::collection::vec(k(), 1..6).prop_map(Op::MGet),
        proptest::collection::vec(k(), 1..5).prop_map(Op::Del),
        proptest::collection::vec(k(), 1..5).prop_map(Op::Exists),
        k().prop_map(Op::Incr),
        (k(), v()).prop_map(|(a, b)| Op::Append(a, b)),
        (k(), k()).prop_map(|(a, b)| Op::Rename(a, b)),
        (k(), k()).prop_map(|(a, b)| Op::RenameNx(a, b)),
        (k(), k()).prop_map(|(a, b)| Op::Copy(a, b)),
        proptest::collection::vec((k(), v()), 1..4).prop_map(Op::MSetNx),
        k().prop_map(Op::Ttl),
        k().prop_map(Op::Persist),
        (0u8..3).prop_map(Op::Select),
        Just(Op::DbSize),
    ]
}

fn command(op: &Op) -> String {
    let keys = |ks: &[u8]| ks.iter().map(|k| key(*k)).collect::<Vec<_>>().join(" ");
    let pairs = |ps: &[(u8, u8)]| {
        ps.iter()
            .map(|(k, v)| format!("{} {}", key(*k), value(*v)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    match op {
        Op::Set(k, v) => format!("SET {} {}", key(*k), value(*v)),
        Op::SetEx(k, v) => format!("SET {} {} EX 1000", key(*k), value(*v)),
        Op::Get(k) => format!("GET {}", key(*k)),
        Op::MSet(ps) => format!("MSET {}", pairs(ps)),
        Op::MGet(ks) => format!("MGET {}", keys(ks)),
        Op::Del(ks) => format!("DEL {}", keys(ks)),
        Op::Exists(ks) => format!("EXISTS {}", keys(ks)),
        Op::Incr(k) => format!("INCR {}", key(*k)),
        Op::Append(k, v) => format!("APPEND {} {}", key(*k), value(*v)),
        Op::Rename(a, b) => format!("RENAME {} {}", key(*a), key(*b)),
        Op::RenameNx(a, b) => format!("RENAMENX {} {}", key(*a), key(*b)),
        Op::Copy(a, b) => format!("COPY {} {}", key(*a), key(*b)),
        Op::MSetNx(ps) => format!("MSETNX {}", pairs(ps)),
        Op::Ttl(k) => format!("TTL {}", key(*k)),
        Op::Persist(k) => format!("PERSIST {}", key(*k)),
        Op::Select(db) => format!("SELECT {db}"),
        Op::DbSize => "DBSIZE".to_string(),
    }
}

/// What the model expects. TTL replies are checked by class (-2, -1, positive).
fn expect(m: &mut Model, op: &Op) -> Frame {
    match op {
        Op::Set(k, v) => {
            m.cur().insert(key(*k), (value(*v), false));
            ok()
        }
        Op::SetEx(k, v) => {
            m.cur().insert(key(*k), (value(*v), true));
            ok()
        }
        Op::Get(k) => m.cur().get(&key(*k)).map_or(Frame::Null, |(v, _)| bulk(v)),
        Op::MSet(ps) => {
            for (k, v) in ps {
                m.cur().insert(key(*k), (value(*v), false));
            }
            ok()
        }
        Op::MGet(ks) => array(
            ks.iter()
                .map(|k| m.cur().get(&key(*k)).map_or(Frame::Null, |(v, _)| bulk(v)))
                .collect(),
        ),
        Op::Del(ks) => int(ks
            .iter()
            .filter(|k| m.cur().remove(&key(**k)).is_some())
            .count() as i64),
        Op::Exists(ks) => int(ks
            .iter()
            .filter(|k| m.cur().contains_key(&key(**k)))
            .count() as i64),
        Op::Incr(k) => {
            let entry = m.cur().entry(key(*k)).or_insert(("0".into(), false));
            match entry.0.parse::<i64>() {
                Ok(n) => {
                    entry.0 = (n + 1).to_string();
                    int(n + 1)
                }
                Err(_) => err("ERR value is not an integer or out of range"),
            }
        }
        Op::Append(k, v) => {
            let entry = m.cur().entry(key(*k)).or_insert((String::new(), false));
            entry.0.push_str(&value(*v));
            int(entry.0.len() as i64)
        }
        Op::Rename(a, b) | Op::RenameNx(a, b) => {
            let nx = matches!(op, Op::RenameNx(..));
            let Some(entry) = m.cur().get(&key(*a)).cloned() else {
                return err("ERR no such key");
            };
            if a == b {
                return if nx { int(0) } else { ok() };
            }
            if nx && m.cur().contains_key(&key(*b)) {
                return int(0);
            }
            m.cur().remove(&key(*a));
            m.cur().insert(key(*b), entry);
            if nx {
                int(1)
            } else {
                ok()
            }
        }
        Op::Copy(a, b) => {
            if a == b {
                return err("ERR source and destination objects are the same");
            }
            let Some(entry) = m.cur().get(&key(*a)).cloned() else {
                return int(0);
            };
            if m.cur().contains_key(&key(*b)) {
                return int(0);
            }
            m.cur().insert(key(*b), entry);
            int(1)
        }
        Op::MSetNx(ps) => {
            if ps.iter().any(|(k, _)| m.cur().contains_key(&key(*k))) {
                return int(0);
            }
            for (k, v) in ps {
                m.cur().insert(key(*k), (value(*v), false));
            }
            int(1)
        }
        Op::Ttl(k) => int(match m.cur().get(&key(*k)) {
            None => -2,
            Some((_, false)) => -1,
            Some((_, true)) => 1000,
        }),
        Op::Persist(k) => match m.cur().get_mut(&key(*k)) {
            Some((_, ttl)) if *ttl => {
                *ttl = false;
                int(1)
            }
            _ => int(0),
        },
        Op::Select(db) => {
            m.db = usize::from(*db);
            ok()
        }
        Op::DbSize => int(m.cur().len() as i64),
    }
}

fn check(c: &mut Client, ops: &[Op]) -> Result<(), TestCaseError> {
    prop_assert_eq!(c.cmd("SELECT 0"), ok());
    prop_assert_eq!(c.cmd("FLUSHALL"), ok());
    let mut model = Model::new();
    for op in ops {
        let expected = expect(&mut model, op);
        let got = c.cmd(&command(op));
        match (&expected, &got) {
            (Frame::Integer(1000), Frame::Integer(ttl)) => prop_assert!((990..=1000).contains(ttl)),
            _ => prop_assert_eq!(&got, &expected, "{}", command(op)),
        }
    }
    // Pipelined: the whole sequence again in one write, replies in order.
    prop_assert_eq!(c.cmd("SELECT 0"), ok());
    prop_assert_eq!(c.cmd("FLUSHALL"), ok());
    let mut model = Model::new();
    let wire: String = ops
        .iter()
        .map(|op| format!("{}\r\n", command(op)))
        .collect();
    c.raw(wire.as_bytes());
    for op in ops {
        let expected = expect(&mut model, op);
        let got = c.read().expect("reply");
        match (&expected, &got) {
            (Frame::Integer(1000), Frame::Integer(ttl)) => prop_assert!((990..=1000).contains(ttl)),
            _ => prop_assert_eq!(&got, &expected, "pipelined {}", command(op)),
        }
    }
    Ok(())
}

#[test]
fn two_shard_server_matches_model() {
    let server = Server::start(&["--shards", "2"]);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 48,
        ..ProptestConfig::default()
    });
    let result = runner.run(&proptest::collection::vec(op(), 1..60), |ops| {
        let mut c = server.client();
        check(&mut c, &ops)
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}
