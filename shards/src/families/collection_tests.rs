//! Tests of the collection families (lists, hashes, sets) driven as argument lists against one
//! shard, with Redis's replies and error texts, plus a proptest of random list commands
//! against a `VecDeque` model.

use std::collections::VecDeque;

use bytes::Bytes;
use proptest::prelude::*;
use wetask_protocol::Frame;

use crate::Shard;

fn run(shard: &mut Shard, line: &str) -> Frame {
    let args: Vec<Bytes> = line
        .split(' ')
        .map(|s| Bytes::copy_from_slice(s.as_bytes()))
        .collect();
    shard.execute_args(0, &args)
}

fn bulk(s: &str) -> Frame {
    Frame::Bulk(Bytes::copy_from_slice(s.as_bytes()))
}

fn bulks(items: &[&str]) -> Frame {
    Frame::Array(items.iter().map(|s| bulk(s)).collect())
}

fn int(n: i64) -> Frame {
    Frame::Integer(n)
}

fn err(s: &str) -> Frame {
    Frame::error(s)
}

fn shard() -> Shard {
    let mut shard = Shard::new(0);
    shard.set_clock(1_000);
    shard
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

#[test]
fn list_pushes_pops_and_ranges() {
    let mut s = shard();
    assert_eq!(run(&mut s, "RPUSH l a b c"), int(3));
    assert_eq!(run(&mut s, "LPUSH l z"), int(4));
    assert_eq!(run(&mut s, "LRANGE l 0 -1"), bulks(&["z", "a", "b", "c"]));
    assert_eq!(run(&mut s, "LRANGE l -2 100"), bulks(&["b", "c"]));
    assert_eq!(run(&mut s, "LRANGE l 3 1"), bulks(&[]));
    assert_eq!(run(&mut s, "LPUSHX nope a"), int(0));
    assert_eq!(run(&mut s, "RPUSHX l d"), int(5));
    assert_eq!(run(&mut s, "LLEN l"), int(5));
    assert_eq!(run(&mut s, "LINDEX l -1"), bulk("d"));
    assert_eq!(run(&mut s, "LINDEX l 9"), Frame::Null);
    assert_eq!(run(&mut s, "LPOP l"), bulk("z"));
    assert_eq!(run(&mut s, "RPOP l 2"), bulks(&["d", "c"]));
    assert_eq!(run(&mut s, "LPOP l 0"), bulks(&[]));
    assert_eq!(run(&mut s, "LPOP nope 2"), Frame::NullArray);
    assert_eq!(run(&mut s, "LPOP nope"), Frame::Null);
    assert_eq!(
        run(&mut s, "LPOP l -1"),
        err("ERR value is out of range, must be positive")
    );
    assert_eq!(
        run(&mut s, "LPOP l 1 2"),
        err("ERR wrong number of arguments for 'lpop' command")
    );
    assert_eq!(run(&mut s, "LPOP l 5"), bulks(&["a", "b"]));
    assert_eq!(
        run(&mut s, "EXISTS l"),
        int(0),
        "an emptied list is deleted"
    );
    assert_eq!(run(&mut s, "LLEN l"), int(0));
}

#[test]
fn list_edits() {
    let mut s = shard();
    run(&mut s, "RPUSH l a b a c a");
    assert_eq!(run(&mut s, "LSET l 1 B"), Frame::ok());
    assert_eq!(run(&mut s, "LSET l 9 x"), err("ERR index out of range"));
    assert_eq!(run(&mut s, "LSET nope 0 x"), err("ERR no such key"));
    assert_eq!(run(&mut s, "LINSERT l BEFORE B x"), int(6));
    assert_eq!(run(&mut s, "LINSERT l after c y"), int(7));
    assert_eq!(run(&mut s, "LINSERT l AFTER zz y"), int(-1));
    assert_eq!(run(&mut s, "LINSERT nope AFTER a y"), int(0));
    assert_eq!(run(&mut s, "LINSERT l MIDDLE a y"), err("ERR syntax error"));
    assert_eq!(
        run(&mut s, "LRANGE l 0 -1"),
        bulks(&["a", "x", "B", "a", "c", "y", "a"])
    );
    assert_eq!(run(&mut s, "LPOS l a"), int(0));
    assert_eq!(run(&mut s, "LPOS l a RANK 2"), int(3));
    assert_eq!(run(&mut s, "LPOS l a RANK -1"), int(6));
    assert_eq!(
        run(&mut s, "LPOS l a COUNT 0"),
        Frame::Array(vec![int(0), int(3), int(6)])
    );
    assert_eq!(
        run(&mut s, "LPOS l a COUNT 2 RANK -1"),
        Frame::Array(vec![int(6), int(3)])
    );
    assert_eq!(
        run(&mut s, "LPOS l a MAXLEN 2 COUNT 0"),
        Frame::Array(vec![int(0)])
    );
    assert_eq!(run(&mut s, "LPOS l zz"), Frame::Null);
    assert!(
        matches!(run(&mut s, "LPOS l a RANK 0"), Frame::Error(e) if e.starts_with(b"ERR RANK can't be zero"))
    );
    assert_eq!(
        run(&mut s, "LPOS l a COUNT -1"),
        err("ERR COUNT can't be negative")
    );
    assert_eq!(
        run(&mut s, "LPOS l a MAXLEN -1"),
        err("ERR MAXLEN can't be negative")
    );
    assert_eq!(run(&mut s, "LPOS l a BOGUS 1"), err("ERR syntax error"));
    assert_eq!(run(&mut s, "LREM l -1 a"), int(1));
    assert_eq!(
        run(&mut s, "LRANGE l 0 -1"),
        bulks(&["a", "x", "B", "a", "c", "y"])
    );
    assert_eq!(run(&mut s, "LREM l 0 a"), int(2));
    assert_eq!(run(&mut s, "LTRIM l 1 -2"), Frame::ok());
    assert_eq!(run(&mut s, "LRANGE l 0 -1"), bulks(&["B", "c"]));
    assert_eq!(run(&mut s, "LTRIM l 5 10"), Frame::ok());
    assert_eq!(run(&mut s, "EXISTS l"), int(0));
    assert_eq!(
        run(&mut s, "LTRIM l x 1"),
        err("ERR value is not an integer or out of range")
    );
}

#[test]
fn list_moves_and_multi_pops() {
    let mut s = shard();
    run(&mut s, "RPUSH src a b c");
    assert_eq!(run(&mut s, "LMOVE src dst LEFT RIGHT"), bulk("a"));
    assert_eq!(run(&mut s, "RPOPLPUSH src dst"), bulk("c"));
    assert_eq!(run(&mut s, "LRANGE dst 0 -1"), bulks(&["c", "a"]));
    assert_eq!(run(&mut s, "LMOVE src src RIGHT LEFT"), bulk("b"));
    assert_eq!(run(&mut s, "LMOVE nope dst LEFT LEFT"), Frame::Null);
    assert_eq!(
        run(&mut s, "LMOVE src dst UP LEFT"),
        err("ERR syntax error")
    );
    run(&mut s, "SET str x");
    assert_eq!(run(&mut s, "LMOVE src str LEFT LEFT"), err(WRONGTYPE));
    assert_eq!(
        run(&mut s, "LRANGE src 0 -1"),
        bulks(&["b"]),
        "nothing moved"
    );
    assert_eq!(
        run(&mut s, "LMPOP 3 nope src dst RIGHT COUNT 5"),
        Frame::Array(vec![bulk("src"), bulks(&["b"])])
    );
    assert_eq!(
        run(&mut s, "LMPOP 2 src dst LEFT"),
        Frame::Array(vec![bulk("dst"), bulks(&["c"])])
    );
    assert_eq!(run(&mut s, "LMPOP 1 nope LEFT"), Frame::NullArray);
    assert_eq!(
        run(&mut s, "LMPOP 0 a LEFT"),
        err("ERR numkeys should be greater than 0")
    );
    assert_eq!(run(&mut s, "LMPOP 5 a LEFT"), err("ERR syntax error"));
    assert_eq!(run(&mut s, "LMPOP 1 a MIDDLE"), err("ERR syntax error"));
    assert_eq!(
        run(&mut s, "LMPOP 1 a LEFT COUNT 0"),
        err("ERR count should be greater than 0")
    );
    assert_eq!(
        run(&mut s, "LMPOP 1 a LEFT COUNT 1 COUNT 1"),
        err("ERR syntax error")
    );
    assert_eq!(run(&mut s, "LPUSH str a"), err(WRONGTYPE));
    assert_eq!(run(&mut s, "GET dst"), err(WRONGTYPE));
    assert_eq!(
        run(&mut s, "TYPE dst"),
        Frame::Simple(Bytes::from_static(b"list"))
    );
}

#[test]
fn blocking_pops_answer_at_once_or_nil() {
    let mut s = shard();
    run(&mut s, "RPUSH b x y");
    assert_eq!(
        run(&mut s, "BLPOP a b 0"),
        Frame::Array(vec![bulk("b"), bulk("x")])
    );
    assert_eq!(run(&mut s, "BRPOP a 0.5"), Frame::NullArray);
    assert_eq!(
        run(&mut s, "BLPOP a x"),
        err("ERR timeout is not a float or out of range")
    );
    assert_eq!(run(&mut s, "BLPOP a -1"), err("ERR timeout is negative"));
    assert_eq!(run(&mut s, "BLMOVE b c RIGHT LEFT 0"), bulk("y"));
    assert_eq!(run(&mut s, "BLMOVE b c RIGHT LEFT 0"), Frame::Null);
    assert_eq!(
        run(&mut s, "BLMPOP 0 1 c LEFT"),
        Frame::Array(vec![bulk("c"), bulks(&["y"])])
    );
}

#[test]
fn hashes() {
    let mut s = shard();
    assert_eq!(run(&mut s, "HSET h a 1 b 2"), int(2));
    assert_eq!(run(&mut s, "HSET h a 3 c 4"), int(1));
    assert_eq!(
        run(&mut s, "HSET h a"),
        err("ERR wrong number of arguments for 'hset' command")
    );
    assert_eq!(run(&mut s, "HMSET h d 5"), Frame::ok());
    assert_eq!(run(&mut s, "HSETNX h a 9"), int(0));
    assert_eq!(run(&mut s, "HSETNX h e 6"), int(1));
    assert_eq!(run(&mut s, "HGET h a"), bulk("3"));
    assert_eq!(run(&mut s, "HGET h zz"), Frame::Null);
    assert_eq!(run(&mut s, "HGET nope a"), Frame::Null);
    assert_eq!(
        run(&mut s, "HMGET h a zz b"),
        Frame::Array(vec![bulk("3"), Frame::Null, bulk("2")])
    );
    assert_eq!(run(&mut s, "HLEN h"), int(5));
    assert_eq!(run(&mut s, "HSTRLEN h a"), int(1));
    assert_eq!(run(&mut s, "HEXISTS h a"), int(1));
    assert_eq!(run(&mut s, "HEXISTS h zz"), int(0));
    assert_eq!(run(&mut s, "HKEYS h"), bulks(&["a", "b", "c", "d", "e"]));
    assert_eq!(run(&mut s, "HVALS h"), bulks(&["3", "2", "4", "5", "6"]));
    assert!(matches!(run(&mut s, "HGETALL h"), Frame::Map(pairs) if pairs.len() == 5));
    assert_eq!(run(&mut s, "HINCRBY h a 10"), int(13));
    assert_eq!(run(&mut s, "HINCRBY h new -2"), int(-2));
    assert_eq!(run(&mut s, "HINCRBYFLOAT h f 1.5"), bulk("1.5"));
    assert_eq!(run(&mut s, "HINCRBYFLOAT h f 1.5"), bulk("3"));
    run(&mut s, "HSET h txt hello");
    assert_eq!(
        run(&mut s, "HINCRBY h txt 1"),
        err("ERR hash value is not an integer")
    );
    assert_eq!(
        run(&mut s, "HINCRBYFLOAT h txt 1"),
        err("ERR hash value is not a float")
    );
    run(&mut s, "HSET h big 9223372036854775807");
    assert_eq!(
        run(&mut s, "HINCRBY h big 1"),
        err("ERR increment or decrement would overflow")
    );
    assert_eq!(run(&mut s, "HDEL h a b zz"), int(2));
    assert_eq!(run(&mut s, "HGET h a"), Frame::Null);
    run(&mut s, "SET str x");
    assert_eq!(run(&mut s, "HGET str a"), err(WRONGTYPE));
    assert_eq!(run(&mut s, "HSET str a b"), err(WRONGTYPE));
    assert_eq!(
        run(&mut s, "TYPE h"),
        Frame::Simple(Bytes::from_static(b"hash"))
    );
    run(&mut s, "HSET small only 1");
    assert_eq!(run(&mut s, "HDEL small only"), int(1));
    assert_eq!(
        run(&mut s, "EXISTS small"),
        int(0),
        "an emptied hash is deleted"
    );
}

#[test]
fn hash_random_fields_and_scan() {
    let mut s = shard();
    for i in 0..50 {
        run(&mut s, &format!("HSET h f{i} v{i}"));
    }
    let Frame::Bulk(field) = run(&mut s, "HRANDFIELD h") else {
        panic!("one field")
    };
    assert!(field.starts_with(b"f"));
    let Frame::Array(distinct) = run(&mut s, "HRANDFIELD h 20") else {
        panic!()
    };
    let set: std::collections::HashSet<String> =
        distinct.iter().map(|f| format!("{f:?}")).collect();
    assert_eq!((distinct.len(), set.len()), (20, 20));
    let Frame::Pairs(all) = run(&mut s, "HRANDFIELD h 500 WITHVALUES") else {
        panic!()
    };
    assert_eq!(all.len(), 50, "at most every field, with its value");
    let Frame::Array(repeats) = run(&mut s, "HRANDFIELD h -200") else {
        panic!()
    };
    assert_eq!(repeats.len(), 200);
    assert_eq!(run(&mut s, "HRANDFIELD nope 3"), bulks(&[]));
    assert_eq!(run(&mut s, "HRANDFIELD h 1 BOGUS"), err("ERR syntax error"));
    // A full HSCAN sees every field once, even when fields are removed midway.
    let mut cursor = "0".to_string();
    let mut seen = std::collections::HashSet::new();
    loop {
        let Frame::Array(reply) = run(&mut s, &format!("HSCAN h {cursor} COUNT 7")) else {
            panic!()
        };
        let Frame::Bulk(next) = &reply[0] else {
            panic!()
        };
        let Frame::Array(items) = &reply[1] else {
            panic!()
        };
        for pair in items.chunks(2) {
            seen.insert(format!("{:?}", pair[0]));
        }
        run(&mut s, "HDEL h f0");
        cursor = String::from_utf8(next.to_vec()).unwrap();
        if cursor == "0" {
            break;
        }
    }
    assert!(seen.len() >= 49);
    let Frame::Array(reply) = run(&mut s, "HSCAN h 0 MATCH f1* COUNT 1000") else {
        panic!()
    };
    let Frame::Array(items) = &reply[1] else {
        panic!()
    };
    assert_eq!(items.len(), 2 * 11);
    assert_eq!(run(&mut s, "HSCAN h abc"), err("ERR invalid cursor"));
    assert_eq!(run(&mut s, "HSCAN h 0 COUNT 0"), err("ERR syntax error"));
}

fn sorted(frame: Frame) -> Vec<Frame> {
    let (Frame::Array(mut items) | Frame::Set(mut items)) = frame else {
        panic!("not an array: {frame:?}")
    };
    items.sort_by_key(|f| format!("{f:?}"));
    items
}

#[test]
// Long: a walk through the set family, one command after the other; splitting it would only cut the story.
fn sets() {
    let mut s = shard();
    assert_eq!(run(&mut s, "SADD s a b c"), int(3));
    assert_eq!(run(&mut s, "SADD s c d"), int(1));
    assert_eq!(run(&mut s, "SCARD s"), int(4));
    assert_eq!(run(&mut s, "SISMEMBER s a"), int(1));
    assert_eq!(
        run(&mut s, "SMISMEMBER s a zz"),
        Frame::Array(vec![int(1), int(0)])
    );
    assert_eq!(run(&mut s, "SREM s a zz"), int(1));
    assert_eq!(
        sorted(run(&mut s, "SMEMBERS s")),
        vec![bulk("b"), bulk("c"), bulk("d")]
    );
    run(&mut s, "SADD t c d e");
    assert_eq!(
        sorted(run(&mut s, "SINTER s t")),
        vec![bulk("c"), bulk("d")]
    );
    assert_eq!(sorted(run(&mut s, "SINTER s t nope")), Vec::<Frame>::new());
    assert_eq!(sorted(run(&mut s, "SDIFF s t")), vec![bulk("b")]);
    assert_eq!(sorted(run(&mut s, "SUNION s t nope")).len(), 4);
    assert_eq!(run(&mut s, "SINTERSTORE out s t"), int(2));
    assert_eq!(
        sorted(run(&mut s, "SMEMBERS out")),
        vec![bulk("c"), bulk("d")]
    );
    assert_eq!(run(&mut s, "SDIFFSTORE out s s"), int(0));
    assert_eq!(
        run(&mut s, "EXISTS out"),
        int(0),
        "an empty result deletes the destination"
    );
    assert_eq!(run(&mut s, "SUNIONSTORE out s t"), int(4));
    assert_eq!(run(&mut s, "SINTERCARD 2 s t"), int(2));
    assert_eq!(run(&mut s, "SINTERCARD 2 s t LIMIT 1"), int(1));
    assert_eq!(
        run(&mut s, "SINTERCARD 0 s"),
        err("ERR numkeys should be greater than 0")
    );
    assert_eq!(
        run(&mut s, "SINTERCARD 3 s t"),
        err("ERR Number of keys can't be greater than number of args")
    );
    assert_eq!(
        run(&mut s, "SINTERCARD 1 s LIMIT -1"),
        err("ERR LIMIT can't be negative")
    );
    assert_eq!(run(&mut s, "SMOVE s t b"), int(1));
    assert_eq!(run(&mut s, "SMOVE s t zz"), int(0));
    assert_eq!(run(&mut s, "SMOVE nope t b"), int(0));
    run(&mut s, "SET str x");
    assert_eq!(run(&mut s, "SMOVE s str c"), err(WRONGTYPE));
    assert_eq!(run(&mut s, "SINTER s str"), err(WRONGTYPE));
    assert_eq!(run(&mut s, "SADD str a"), err(WRONGTYPE));
    assert_eq!(
        run(&mut s, "TYPE s"),
        Frame::Simple(Bytes::from_static(b"set"))
    );
    let Frame::Bulk(popped) = run(&mut s, "SPOP s") else {
        panic!()
    };
    assert!(popped == "c" || popped == "d");
    assert_eq!(run(&mut s, "SPOP s 5").items_len(), 1);
    assert_eq!(run(&mut s, "EXISTS s"), int(0));
    assert_eq!(run(&mut s, "SPOP s"), Frame::Null);
    assert_eq!(
        run(&mut s, "SPOP s -1"),
        err("ERR value is out of range, must be positive")
    );
    assert_eq!(run(&mut s, "SRANDMEMBER t 2").items_len(), 2);
    assert_eq!(run(&mut s, "SRANDMEMBER t -7").items_len(), 7);
    assert_eq!(run(&mut s, "SRANDMEMBER t 100").items_len(), 4);
    assert_eq!(run(&mut s, "SRANDMEMBER nope"), Frame::Null);
    let Frame::Array(reply) = run(&mut s, "SSCAN t 0 COUNT 100") else {
        panic!()
    };
    assert_eq!(reply[0], bulk("0"));
    assert_eq!(reply[1].items_len(), 4);
}

trait Len {
    fn items_len(&self) -> usize;
}

impl Len for Frame {
    fn items_len(&self) -> usize {
        match self {
            Frame::Array(items) | Frame::Set(items) => items.len(),
            other => panic!("not an array: {other:?}"),
        }
    }
}

#[derive(Clone, Debug)]
enum ListOp {
    Push(bool, u8),
    Pop(bool, u8),
    Range(i8, i8),
    Trim(i8, i8),
    Rem(i8, u8),
    Set(i8, u8),
    Insert(bool, u8, u8),
    Move(bool, bool),
}

fn list_op() -> impl Strategy<Value = ListOp> {
    prop_oneof![
        (any::<bool>(), 0u8..4).prop_map(|(l, v)| ListOp::Push(l, v)),
        (any::<bool>(), 0u8..4).prop_map(|(l, n)| ListOp::Pop(l, n)),
        (-6i8..6, -6i8..6).prop_map(|(a, b)| ListOp::Range(a, b)),
        (-6i8..6, -6i8..6).prop_map(|(a, b)| ListOp::Trim(a, b)),
        (-3i8..3, 0u8..4).prop_map(|(c, v)| ListOp::Rem(c, v)),
        (-6i8..6, 0u8..4).prop_map(|(i, v)| ListOp::Set(i, v)),
        (any::<bool>(), 0u8..4, 0u8..4).prop_map(|(a, p, v)| ListOp::Insert(a, p, v)),
        (any::<bool>(), any::<bool>()).prop_map(|(a, b)| ListOp::Move(a, b)),
    ]
}

fn model_range(list: &VecDeque<String>, start: i64, stop: i64) -> Vec<String> {
    match crate::keyspace::typed::index_range(start, stop, list.len()) {
        Some((a, b)) => list.range(a..=b).cloned().collect(),
        None => Vec::new(),
    }
}

proptest! {
    /// Random list commands on one key (and a second for moves) agree with a VecDeque model,
    /// and a list emptied by any command no longer exists.
    #[test]
    // Long: one randomized run against VecDeque, an arm per list command; apart, the arms would hide which model step each checks.
    fn lists_match_a_deque_model(ops in proptest::collection::vec(list_op(), 1..80)) {
        let mut s = shard();
        let mut model: VecDeque<String> = VecDeque::new();
        let mut other: VecDeque<String> = VecDeque::new();
        for op in ops {
            let (line, expected) = match &op {
                ListOp::Push(left, v) => {
                    let v = format!("v{v}");
                    if *left { model.push_front(v.clone()) } else { model.push_back(v.clone()) }
                    (format!("{} l {v}", if *left { "LPUSH" } else { "RPUSH" }), int(model.len() as i64))
                }
                ListOp::Pop(left, n) => {
                    let existed = !model.is_empty();
                    let popped: Vec<String> = (0..*n).filter_map(|_| if *left { model.pop_front() } else { model.pop_back() }).collect();
                    let expected = if existed { bulks(&popped.iter().map(String::as_str).collect::<Vec<_>>()) } else { Frame::NullArray };
                    (format!("{} l {n}", if *left { "LPOP" } else { "RPOP" }), expected)
                }
                ListOp::Range(a, b) => {
                    let got = model_range(&model, *a as i64, *b as i64);
                    (format!("LRANGE l {a} {b}"), bulks(&got.iter().map(String::as_str).collect::<Vec<_>>()))
                }
                ListOp::Trim(a, b) => {
                    model = model_range(&model, *a as i64, *b as i64).into();
                    (format!("LTRIM l {a} {b}"), Frame::ok())
                }
                ListOp::Rem(count, v) => {
                    let v = format!("v{v}");
                    let limit = if *count == 0 { usize::MAX } else { count.unsigned_abs() as usize };
                    let mut removed = 0;
                    if *count >= 0 {
                        let mut i = 0;
                        while i < model.len() && removed < limit {
                            if model[i] == v { model.remove(i); removed += 1 } else { i += 1 }
                        }
                    } else {
                        let mut i = model.len();
                        while i > 0 && removed < limit {
                            i -= 1;
                            if model[i] == v { model.remove(i); removed += 1 }
                        }
                    }
                    (format!("LREM l {count} {v}"), int(removed as i64))
                }
                ListOp::Set(i, v) => {
                    let v = format!("v{v}");
                    let pos = if *i < 0 { model.len() as i64 + *i as i64 } else { *i as i64 };
                    let expected = if model.is_empty() {
                        err("ERR no such key")
                    } else if (0..model.len() as i64).contains(&pos) {
                        model[pos as usize] = v.clone();
                        Frame::ok()
                    } else {
                        err("ERR index out of range")
                    };
                    (format!("LSET l {i} {v}"), expected)
                }
                ListOp::Insert(after, p, v) => {
                    let (p, v) = (format!("v{p}"), format!("w{v}"));
                    let expected = if model.is_empty() {
                        int(0)
                    } else {
                        match model.iter().position(|x| *x == p) {
                            Some(i) => { model.insert(i + usize::from(*after), v.clone()); int(model.len() as i64) }
                            None => int(-1),
                        }
                    };
                    (format!("LINSERT l {} {p} {v}", if *after { "AFTER" } else { "BEFORE" }), expected)
                }
                ListOp::Move(from_left, to_left) => {
                    let value = if *from_left { model.pop_front() } else { model.pop_back() };
                    let expected = match value {
                        Some(v) => {
                            if *to_left { other.push_front(v.clone()) } else { other.push_back(v.clone()) }
                            bulk(&v)
                        }
                        None => Frame::Null,
                    };
                    let end = |left: bool| if left { "LEFT" } else { "RIGHT" };
                    (format!("LMOVE l o {} {}", end(*from_left), end(*to_left)), expected)
                }
            };
            prop_assert_eq!(run(&mut s, &line), expected, "{}", line);
            prop_assert_eq!(run(&mut s, "EXISTS l"), int(i64::from(!model.is_empty())));
            prop_assert_eq!(run(&mut s, "LLEN o"), int(other.len() as i64));
        }
        let all = model.iter().map(String::as_str).collect::<Vec<_>>();
        prop_assert_eq!(run(&mut s, "LRANGE l 0 -1"), bulks(&all));
    }
}

fn dbl(v: f64) -> Frame {
    Frame::Double(v)
}

fn pairs(items: &[(&str, f64)]) -> Frame {
    Frame::Pairs(items.iter().map(|(m, s)| (bulk(m), dbl(*s))).collect())
}

#[test]
// Long: a walk through ZADD, ranks and ranges on one sorted set, step by step.
fn sorted_set_adds_ranks_and_ranges() {
    let mut s = shard();
    assert_eq!(run(&mut s, "ZADD z 1 a 2 b 3 c"), int(3));
    assert_eq!(run(&mut s, "ZADD z XX CH 5 a 9 zz"), int(1));
    assert_eq!(run(&mut s, "EXISTS zz"), int(0));
    assert_eq!(run(&mut s, "ZADD z GT 1 a"), int(0));
    assert_eq!(run(&mut s, "ZADD z INCR 1 a"), dbl(6.0));
    assert_eq!(run(&mut s, "ZADD z NX INCR 1 a"), Frame::Null);
    assert_eq!(
        run(&mut s, "ZADD z NX XX 1 a"),
        err("ERR XX and NX options at the same time are not compatible")
    );
    assert_eq!(
        run(&mut s, "ZADD z abc a"),
        err("ERR value is not a valid float")
    );
    assert_eq!(run(&mut s, "ZADD z 1 a 2"), err("ERR syntax error"));
    assert_eq!(run(&mut s, "ZADD nope XX 1 a"), int(0));
    assert_eq!(run(&mut s, "EXISTS nope"), int(0), "XX never creates");
    assert_eq!(
        run(&mut s, "ZRANGE z 0 -1 WITHSCORES"),
        pairs(&[("b", 2.0), ("c", 3.0), ("a", 6.0)])
    );
    assert_eq!(run(&mut s, "ZRANGE z 0 0 REV"), bulks(&["a"]));
    assert_eq!(run(&mut s, "ZRANGE z (2 +inf BYSCORE"), bulks(&["c", "a"]));
    assert_eq!(
        run(&mut s, "ZRANGE z +inf -inf BYSCORE REV LIMIT 1 1"),
        bulks(&["c"])
    );
    assert_eq!(
        run(&mut s, "ZRANGEBYSCORE z -inf 3 WITHSCORES LIMIT 1 5"),
        pairs(&[("c", 3.0)])
    );
    assert_eq!(run(&mut s, "ZREVRANGEBYSCORE z 10 (3"), bulks(&["a"]));
    assert_eq!(
        run(&mut s, "ZRANGE z x 1 BYSCORE"),
        err("ERR min or max is not a float")
    );
    assert_eq!(run(&mut s, "ZRANK z a"), int(2));
    assert_eq!(run(&mut s, "ZREVRANK z a"), int(0));
    assert_eq!(run(&mut s, "ZRANK z nope"), Frame::Null);
    assert_eq!(run(&mut s, "ZCOUNT z (2 6"), int(2));
    assert_eq!(run(&mut s, "ZSCORE z b"), dbl(2.0));
    assert_eq!(run(&mut s, "ZINCRBY z 0.5 b"), dbl(2.5));
    assert_eq!(
        run(&mut s, "ZMSCORE z b nope"),
        Frame::Array(vec![dbl(2.5), Frame::Null])
    );
    assert_eq!(run(&mut s, "ZADD lex 0 a 0 b 0 c 0 d"), int(4));
    assert_eq!(run(&mut s, "ZRANGEBYLEX lex (a [c"), bulks(&["b", "c"]));
    assert_eq!(
        run(&mut s, "ZREVRANGEBYLEX lex + - LIMIT 0 2"),
        bulks(&["d", "c"])
    );
    assert_eq!(run(&mut s, "ZLEXCOUNT lex - +"), int(4));
    assert_eq!(
        run(&mut s, "ZRANGEBYLEX lex a c"),
        err("ERR min or max not valid string range item")
    );
    assert_eq!(run(&mut s, "ZREMRANGEBYLEX lex - [b"), int(2));
    assert_eq!(run(&mut s, "ZREMRANGEBYRANK lex 0 -1"), int(2));
    assert_eq!(run(&mut s, "EXISTS lex"), int(0));
    assert_eq!(run(&mut s, "ZREM z a nope"), int(1));
    assert_eq!(run(&mut s, "ZCARD z"), int(2));
    assert_eq!(
        run(&mut s, "TYPE z"),
        Frame::Simple(Bytes::from_static(b"zset"))
    );
    run(&mut s, "SET str x");
    assert_eq!(run(&mut s, "ZADD str 1 a"), err(WRONGTYPE));
}

#[test]
fn sorted_set_pops_and_combinations() {
    let mut s = shard();
    run(&mut s, "ZADD z 1 a 2 b 3 c 4 d");
    assert_eq!(
        run(&mut s, "ZPOPMIN z"),
        Frame::Array(vec![bulk("a"), dbl(1.0)])
    );
    assert_eq!(run(&mut s, "ZPOPMAX z 2"), pairs(&[("d", 4.0), ("c", 3.0)]));
    assert_eq!(run(&mut s, "ZPOPMIN nope"), bulks(&[]));
    assert_eq!(
        run(&mut s, "BZPOPMIN nope z 0"),
        Frame::Array(vec![bulk("z"), bulk("b"), dbl(2.0)])
    );
    assert_eq!(run(&mut s, "BZPOPMAX z 0"), Frame::NullArray);
    run(&mut s, "ZADD z 5 e 6 f");
    assert_eq!(
        run(&mut s, "ZMPOP 2 nope z MAX COUNT 5"),
        Frame::Array(vec![
            bulk("z"),
            Frame::Array(vec![
                Frame::Array(vec![bulk("f"), dbl(6.0)]),
                Frame::Array(vec![bulk("e"), dbl(5.0)]),
            ])
        ])
    );
    run(&mut s, "ZADD a 1 x 2 y");
    run(&mut s, "ZADD b 10 y 20 w");
    run(&mut s, "SADD plain y");
    assert_eq!(run(&mut s, "ZUNIONSTORE u 2 a b WEIGHTS 2 1"), int(3));
    assert_eq!(
        run(&mut s, "ZRANGE u 0 -1 WITHSCORES"),
        pairs(&[("x", 2.0), ("y", 14.0), ("w", 20.0)])
    );
    assert_eq!(
        run(&mut s, "ZINTERSTORE i 3 a b plain AGGREGATE MAX"),
        int(1)
    );
    assert_eq!(run(&mut s, "ZSCORE i y"), dbl(10.0));
    assert_eq!(run(&mut s, "ZDIFF 2 a b WITHSCORES"), pairs(&[("x", 1.0)]));
    assert_eq!(
        run(&mut s, "ZINTERSTORE i 0 a"),
        err("ERR at least 1 input key is needed for 'zinterstore' command")
    );
    assert_eq!(run(&mut s, "ZUNION 3 a b"), err("ERR syntax error"));
    assert_eq!(run(&mut s, "ZINTERSTORE i 2 a nope"), int(0));
    assert_eq!(run(&mut s, "EXISTS i"), int(0));
}
