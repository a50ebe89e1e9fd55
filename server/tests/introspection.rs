//! OBJECT, MEMORY and ROLE over the wire, on two shards, for what the differential test
//! against redis-server (tests/python/test_differential.py) cannot compare: sizes, the
//! eviction policies' access data. (MOVE from a script: tests/scripting.rs.)

mod common;

use common::*;
use wetask_protocol::Frame;

#[test]
fn memory_usage_grows_with_the_value_and_object_reads_the_policy_data() {
    let server = Server::start(&["--shards", "2"]);
    let mut c = server.client();
    c.cmd("SET small v");
    c.cmd(&format!("SET large {}", "x".repeat(10_000)));
    for i in 0..1000 {
        c.cmd(&format!("RPUSH list element-{i}"));
    }
    let usage = |c: &mut Client, key: &str| match c.cmd(&format!("MEMORY USAGE {key}")) {
        Frame::Integer(n) => n,
        other => panic!("{key}: {other:?}"),
    };
    let (small, large, list) = (
        usage(&mut c, "small"),
        usage(&mut c, "large"),
        usage(&mut c, "list"),
    );
    assert!(small > 0 && small < 200, "{small}");
    assert!(large > 10_000 && large < 11_000, "{large}");
    assert!(list > 10_000, "1000 elements of 11+ bytes: {list}");
    assert_eq!(c.cmd("MEMORY USAGE nokey"), Frame::Null);
    assert!(matches!(c.cmd("MEMORY MALLOC-STATS"), Frame::Bulk(_)));
    assert!(matches!(c.cmd("MEMORY DOCTOR"), Frame::Bulk(_)));
    // FREQ needs an LFU policy, IDLETIME refuses one (Redis's texts).
    assert!(
        matches!(c.cmd("OBJECT FREQ small"), Frame::Error(e) if e.starts_with(b"ERR An LFU maxmemory policy is not selected"))
    );
    assert_eq!(c.cmd("CONFIG SET maxmemory-policy allkeys-lfu"), ok());
    c.cmd("SET hot 1");
    for _ in 0..20 {
        c.cmd("GET hot");
    }
    let Frame::Integer(freq) = c.cmd("OBJECT FREQ hot") else {
        panic!("no FREQ")
    };
    assert!(freq > 0, "{freq}");
    assert!(
        matches!(c.cmd("OBJECT IDLETIME hot"), Frame::Error(e) if e.starts_with(b"ERR An LFU maxmemory policy is selected"))
    );
    assert_eq!(c.cmd("CONFIG SET maxmemory-policy allkeys-lru"), ok());
    c.cmd("SET fresh 1");
    assert_eq!(c.cmd("OBJECT IDLETIME fresh"), int(0));
    assert_eq!(
        c.cmd("ROLE"),
        array(vec![bulk("master"), int(0), array(vec![])])
    );
}
