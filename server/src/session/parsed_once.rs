//! The acceptance test that a request is parsed once (`wetask_shards::request`): a real
//! two-shard server runs in this process, a client sends a blocking TASK.FETCH over queues
//! on both shards, blocking BLMPOPs, a SORT whose BY pattern reaches both shards and an
//! EVAL, and the shards crate's parse counter (its
//! `parse-count` feature, on for this crate's tests) must move by exactly one per command,
//! whichever shard the connection lands on and whether the command leases, pops, or waits
//! and times out. Movable-key commands (ZUNIONSTORE, LMPOP) run their row's key finder
//! once, even while WATCH, CLIENT TRACKING and a blocked client read their keys on the shard
//! side.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use wetask_protocol::{Frame, FrameDecoder, Limits};
use wetask_shards::parse_count::parse_counts;
use wetask_shards::spec::FormKind;

struct Client {
    stream: TcpStream,
    decoder: FrameDecoder,
    buffer: BytesMut,
}

impl Client {
    fn connect(port: u16) -> Client {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) {
                stream
                    .set_read_timeout(Some(Duration::from_secs(30)))
                    .expect("timeout");
                let mut client = Client {
                    stream,
                    decoder: FrameDecoder::new(Limits::default()),
                    buffer: BytesMut::new(),
                };
                if client.call(&["PING"]) == Frame::simple("PONG") {
                    return client;
                }
            }
            assert!(Instant::now() < deadline, "the server never answered PING");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn call(&mut self, args: &[&str]) -> Frame {
        let mut request = Vec::new();
        wetask_protocol::encode_command(&mut request, args);
        self.stream.write_all(&request).expect("send");
        loop {
            if let Some(frame) = self.decoder.decode(&mut self.buffer).expect("a reply") {
                return frame;
            }
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk).expect("read");
            assert!(n > 0, "the server closed the connection");
            self.buffer.extend_from_slice(&chunk[..n]);
        }
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("address").port()
}

/// Names `prefix0`, `prefix1`, … until one lives on shard `shard` of two.
fn name_on(shard: usize, prefix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|name| wetask_shards::shard_of(name.as_bytes(), 2) == shard)
        .expect("some name")
}

/// Runs `command` and returns its reply and how many parses of `kind` it cost.
fn parses(client: &mut Client, kind: FormKind, command: &[&str]) -> (Frame, usize) {
    let before = parse_counts::get(kind);
    let reply = client.call(command);
    (reply, parse_counts::get(kind) - before)
}

/// Runs `command` and returns its reply and how many times a movable-key row's key finder
/// ran for it.
fn finder_runs(client: &mut Client, command: &[&str]) -> (Frame, usize) {
    let before = parse_counts::key_finder_runs();
    let reply = client.call(command);
    (reply, parse_counts::key_finder_runs() - before)
}

/// Movable-key commands while everything that reads a command's keys on the shard side is
/// on (a WATCH on both shards, a tracking client, a blocked client on both shards): the key
/// finder runs once, when the request is prepared; the shard reads the positions it found,
/// locally, on the keys' one other owner, across shards and inside MULTI.
// Long: the setup (a watcher, a tracker, a blocked client), then one case per route.
fn key_finders_run_once(client: &mut Client, port: u16) {
    let mut tracker = Client::connect(port);
    assert_eq!(tracker.call(&["CLIENT", "TRACKING", "ON"]), Frame::ok());
    let mut blocked = Client::connect(port);
    let (w0, w1) = (name_on(0, "waiting"), name_on(1, "waiting"));
    let blpop = format!(
        "*4\r\n$5\r\nBLPOP\r\n${}\r\n{w0}\r\n${}\r\n{w1}\r\n$2\r\n30\r\n",
        w0.len(),
        w1.len()
    );
    blocked.stream.write_all(blpop.as_bytes()).expect("send");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !matches!(client.call(&["INFO", "clients"]), Frame::Bulk(info) if std::str::from_utf8(&info).unwrap_or("").contains("blocked_clients:1"))
    {
        assert!(Instant::now() < deadline, "the BLPOP never blocked");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (watched0, watched1) = (name_on(0, "watched"), name_on(1, "watched"));
    assert_eq!(client.call(&["WATCH", &watched0, &watched1]), Frame::ok());

    for shard in [0, 1] {
        // Every key on one shard: run here, or on that shard with the parse.
        let tag = name_on(shard, "tag");
        let (dst, a, b) = (
            format!("{{{tag}}}dst"),
            format!("{{{tag}}}a"),
            format!("{{{tag}}}b"),
        );
        assert_eq!(client.call(&["ZADD", &a, "1", "x"]), Frame::Integer(1));
        let (reply, runs) = finder_runs(client, &["ZUNIONSTORE", &dst, "2", &a, &b]);
        assert_eq!(reply, Frame::Integer(1));
        assert_eq!(
            runs, 1,
            "a ZUNIONSTORE on shard {shard} found its keys {runs} times"
        );
        let (reply, runs) = finder_runs(client, &["ZRANGE", &dst, "0", "-1"]);
        assert_eq!(reply, Frame::Array(vec![Frame::Bulk("x".into())]));
        assert_eq!(runs, 0, "a fixed-key ZRANGE ran a key finder");
    }
    // Keys on both shards: one cross-shard operation.
    let (dst, a) = (name_on(0, "union"), name_on(1, "union"));
    assert_eq!(client.call(&["ZADD", &a, "1", "y"]), Frame::Integer(1));
    let (reply, runs) = finder_runs(client, &["ZUNIONSTORE", &dst, "1", &a]);
    assert_eq!(reply, Frame::Integer(1));
    assert_eq!(
        runs, 1,
        "a ZUNIONSTORE across shards found its keys {runs} times"
    );
    // Inside MULTI: found when queued, read at EXEC.
    assert_eq!(client.call(&["MULTI"]), Frame::ok());
    let (_, queued) = finder_runs(client, &["LMPOP", "1", &a, "LEFT"]);
    let (_, queued_too) = finder_runs(client, &["ZUNIONSTORE", &dst, "1", &a]);
    let (reply, at_exec) = finder_runs(client, &["EXEC"]);
    assert!(
        matches!(&reply, Frame::Array(replies) if replies.len() == 2),
        "{reply:?}"
    );
    assert_eq!(
        (queued, queued_too, at_exec),
        (1, 1, 0),
        "MULTI found its keys again"
    );

    // The BLPOP is let go.
    assert_eq!(client.call(&["RPUSH", &w1, "go"]), Frame::Integer(1));
    let mut reply = None;
    while reply.is_none() {
        let mut chunk = [0u8; 256];
        let n = blocked.stream.read(&mut chunk).expect("read");
        assert!(n > 0, "the server closed the connection");
        blocked.buffer.extend_from_slice(&chunk[..n]);
        reply = blocked
            .decoder
            .decode(&mut blocked.buffer)
            .expect("a reply");
    }
    assert!(matches!(reply, Some(Frame::Array(_))), "{reply:?}");
}

#[test]
// Long: one scenario against one server: start, the counted commands, shutdown.
fn a_blocking_fetch_over_two_shards_and_a_blmpop_are_each_parsed_once() {
    let dir = std::env::temp_dir().join(format!("wetask-parsed-once-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a data directory");
    let port = free_port();
    let args = [
        "wetask",
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--shards",
        "2",
        "--appendonly",
        "no",
        "--save",
        "",
        "--dir",
        dir.to_str().expect("utf-8"),
    ];
    let config = <crate::config::Config as clap::Parser>::try_parse_from(args).expect("config");
    let server = std::thread::spawn(move || crate::runtime::run(config));
    let mut client = Client::connect(port);
    let (q0, q1) = (name_on(0, "queue"), name_on(1, "queue"));

    // Nothing queued: it parks on both shards and times out.
    let fetch = ["TASK.FETCH", &q0, &q1, "BLOCK", "100"];
    let (reply, count) = parses(&mut client, FormKind::Fetch, &fetch);
    assert_eq!(reply, Frame::Array(Vec::new()));
    assert_eq!(count, 1, "a fetch that waited was parsed {count} times");
    // A task on the second queue's shard: leased at once.
    let id = client.call(&["TASK.SUBMIT", &q1, "payload"]);
    assert!(matches!(id, Frame::Bulk(_)), "{id:?}");
    let (reply, count) = parses(&mut client, FormKind::Fetch, &fetch);
    assert!(
        matches!(&reply, Frame::Array(tasks) if tasks.len() == 1),
        "{reply:?}"
    );
    assert_eq!(count, 1, "a fetch that leased was parsed {count} times");

    // BLMPOP over keys on both shards: waits and times out, then finds an element.
    let (k0, k1) = (name_on(0, "list"), name_on(1, "list"));
    let blmpop = ["BLMPOP", "0.1", "2", &k0, &k1, "LEFT", "COUNT", "2"];
    let (reply, count) = parses(&mut client, FormKind::Blocking, &blmpop);
    assert_eq!(reply, Frame::NullArray);
    assert_eq!(count, 1, "a BLMPOP that waited was parsed {count} times");
    assert_eq!(
        client.call(&["RPUSH", &k1, "a", "b", "c"]),
        Frame::Integer(3)
    );
    let (reply, count) = parses(&mut client, FormKind::Blocking, &blmpop);
    assert!(
        matches!(&reply, Frame::Array(parts) if parts.len() == 2),
        "{reply:?}"
    );
    assert_eq!(count, 1, "a BLMPOP that popped was parsed {count} times");
    // Keys on one shard, whichever: the attempt runs there from the parsed form.
    let blmpop_one = ["BLMPOP", "0", "1", &k1, "RIGHT"];
    let (reply, count) = parses(&mut client, FormKind::Blocking, &blmpop_one);
    assert!(
        matches!(&reply, Frame::Array(parts) if parts.len() == 2),
        "{reply:?}"
    );
    assert_eq!(count, 1, "a BLMPOP on one shard was parsed {count} times");

    // SORT BY a pattern that names keys on both shards: a cross-shard operation that
    // borrows them, its options parsed once.
    let list = name_on(0, "sorted");
    assert_eq!(
        client.call(&["RPUSH", &list, "a", "b", "c"]),
        Frame::Integer(3)
    );
    for (element, weight) in [("a", "3"), ("b", "1"), ("c", "2")] {
        assert_eq!(
            client.call(&["SET", &format!("weight_{element}"), weight]),
            Frame::ok()
        );
    }
    let (reply, count) = parses(
        &mut client,
        FormKind::Sort,
        &["SORT", &list, "BY", "weight_*"],
    );
    let bulk = |s: &'static str| Frame::Bulk(bytes::Bytes::from_static(s.as_bytes()));
    assert_eq!(reply, Frame::Array(vec![bulk("b"), bulk("c"), bulk("a")]));
    assert_eq!(count, 1, "a SORT across shards was parsed {count} times");
    // EVAL's numkeys.
    let eval = ["EVAL", "return redis.call('LLEN', KEYS[1])", "1", &list];
    let (reply, count) = parses(&mut client, FormKind::Script, &eval);
    assert_eq!(reply, Frame::Integer(3));
    assert_eq!(count, 1, "an EVAL was parsed {count} times");

    key_finders_run_once(&mut client, port);

    client
        .stream
        .write_all(b"*2\r\n$8\r\nSHUTDOWN\r\n$6\r\nNOSAVE\r\n")
        .expect("shutdown");
    let ended = server.join().expect("the server thread");
    assert!(ended.is_ok(), "{ended:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
