//! MIGRATE between two standalone servers, as Redis users run it outside a cluster: keys on
//! either shard move with their TTLs, COPY and REPLACE, a busy or missing key, and a target
//! that accepts and never answers, which holds the migrating connection only, never the
//! shard (the exchange runs on a thread of its own: `shard::offload`).

mod common;

use std::time::{Duration, Instant};

use common::*;
use wetask_protocol::Frame;

fn migrate(c: &mut Client, port: u16, options: &[&str], keys: &[&str]) -> Frame {
    let port = port.to_string();
    let mut args: Vec<&[u8]> = vec![
        b"MIGRATE",
        b"127.0.0.1",
        port.as_bytes(),
        b"",
        b"0",
        b"5000",
    ];
    args.extend(options.iter().map(|o| o.as_bytes()));
    args.push(b"KEYS");
    args.extend(keys.iter().map(|k| k.as_bytes()));
    c.cmd_args(&args)
}

#[test]
fn keys_on_every_shard_move_with_their_ttls_and_options() {
    let (source, target) = (
        Server::start(&["--shards", "2"]),
        Server::start(&["--shards", "2"]),
    );
    let (mut a, mut b) = (source.client(), target.client());
    let keys: Vec<String> = (0..6).map(|i| key_on(&format!("m{i}-"), i % 2)).collect();
    for key in &keys {
        assert_eq!(a.cmd(&format!("SET {key} v-{key} PX 600000")), ok());
    }
    let list = key_on("list-", 1);
    assert_eq!(a.cmd(&format!("RPUSH {list} x y")), int(2));
    let mut names: Vec<&str> = keys.iter().map(String::as_str).collect();
    names.push(&list);
    assert_eq!(migrate(&mut a, target.port, &[], &names), ok());
    for key in &keys {
        assert_eq!(
            a.cmd(&format!("EXISTS {key}")),
            int(0),
            "{key} left the source"
        );
        assert_eq!(b.cmd(&format!("GET {key}")), bulk(&format!("v-{key}")));
        let Frame::Integer(ttl) = b.cmd(&format!("PTTL {key}")) else {
            panic!("a TTL")
        };
        assert!((1..=600000).contains(&ttl), "{key} kept its TTL: {ttl}");
    }
    assert_eq!(
        b.cmd(&format!("LRANGE {list} 0 -1")),
        array(vec![bulk("x"), bulk("y")])
    );

    // A key the target has already: BUSYKEY, and the source keeps it; REPLACE overwrites.
    let key = &keys[0];
    assert_eq!(a.cmd(&format!("SET {key} newer")), ok());
    let Frame::Error(busy) = migrate(&mut a, target.port, &[], &[key]) else {
        panic!("BUSYKEY")
    };
    assert!(
        String::from_utf8_lossy(&busy).contains("BUSYKEY"),
        "{busy:?}"
    );
    assert_eq!(a.cmd(&format!("GET {key}")), bulk("newer"));
    assert_eq!(
        migrate(&mut a, target.port, &["COPY", "REPLACE"], &[key]),
        ok()
    );
    assert_eq!(
        a.cmd(&format!("GET {key}")),
        bulk("newer"),
        "COPY keeps the source's"
    );
    assert_eq!(b.cmd(&format!("GET {key}")), bulk("newer"));
    // Nothing to move.
    assert_eq!(
        migrate(&mut a, target.port, &[], &["never-set"]),
        Frame::Simple("NOKEY".into())
    );
}

#[test]
fn a_silent_target_holds_the_migrating_connection_only() {
    let server = Server::start(&["--shards", "1"]);
    // Accepts, reads, never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let silent_port = silent.local_addr().unwrap().port();
    let holder = std::thread::spawn(move || {
        let (stream, _) = silent.accept().expect("MIGRATE connects");
        std::thread::sleep(Duration::from_secs(2));
        drop(stream);
    });
    let (mut migrating, mut other) = (server.client(), server.client());
    assert_eq!(migrating.cmd("SET kept 1"), ok());
    let start = Instant::now();
    let port = silent_port.to_string();
    migrating.send(&[
        b"MIGRATE",
        b"127.0.0.1",
        port.as_bytes(),
        b"kept",
        b"0",
        b"1500",
    ]);
    // The shard serves its other clients meanwhile.
    for i in 0..20 {
        assert_eq!(other.cmd(&format!("SET other{i} {i}")), ok());
    }
    assert!(
        start.elapsed() < Duration::from_millis(1400),
        "other clients waited for the MIGRATE: {:?}",
        start.elapsed()
    );
    let Some(Frame::Error(text)) = migrating.read() else {
        panic!("an error")
    };
    assert!(
        String::from_utf8_lossy(&text).starts_with("IOERR"),
        "{text:?}"
    );
    assert!(
        start.elapsed() >= Duration::from_millis(1400),
        "the time-out was waited out"
    );
    assert_eq!(migrating.cmd("GET kept"), bulk("1"), "the key stays");
    holder.join().unwrap();
}
