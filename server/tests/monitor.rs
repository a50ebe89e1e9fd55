//! MONITOR over the wire: monitors on every shard see the commands of clients on every shard,
//! pipelined ones too, in Redis's line format, with a transaction as MULTI, its commands,
//! EXEC; administrative commands are not shown and AUTH's password is redacted.

mod common;

use std::time::{Duration, Instant};

use common::*;
use wetask_protocol::Frame;

/// The next MONITOR line's `[db addr] "args"…` part, checking the timestamp before it.
fn next_line(monitor: &mut Client) -> String {
    let frame = monitor.read().expect("monitor open");
    let Frame::Simple(line) = frame else {
        panic!("not a monitor line: {frame:?}")
    };
    let line = String::from_utf8(line.to_vec()).unwrap();
    let (stamp, rest) = line.split_once(' ').expect("a timestamp");
    let (secs, micros) = stamp.split_once('.').expect("seconds.micros");
    assert!(secs.parse::<u64>().unwrap() > 1_700_000_000, "{line}");
    assert_eq!(micros.len(), 6, "{line}");
    rest.to_string()
}

/// Lines until one names `last` (10 s at most), without the client address.
fn lines_until(monitor: &mut Client, last: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    loop {
        assert!(Instant::now() < deadline, "no {last} in {seen:?}");
        let line = next_line(monitor);
        let (db, rest) = line.split_once(' ').expect("[db addr]");
        let (_, args) = rest.split_once("] ").expect("addr]");
        let shown = format!("{db} {args}");
        let done = shown.contains(last);
        seen.push(shown);
        if done {
            return seen;
        }
    }
}

#[test]
fn monitors_on_every_shard_see_every_shards_commands() {
    each_server(|server| {
        let mut monitors: Vec<Client> = (0..4).map(|_| server.client()).collect();
        for m in monitors.iter_mut() {
            assert_eq!(m.cmd("MONITOR"), ok());
        }
        let mut clients: Vec<Client> = (0..4).map(|_| server.client()).collect();
        for (i, c) in clients.iter_mut().enumerate() {
            let key = key_on("mon", i % 2);
            assert_eq!(c.cmd_args(&[b"SET", key.as_bytes(), b"a \"q\"\n"]), ok());
            // A pipeline of two.
            c.send(&[b"GET", key.as_bytes()]);
            c.send(&[b"DEL", key.as_bytes()]);
            c.read().unwrap();
            assert_eq!(c.read().unwrap(), int(1));
            for m in monitors.iter_mut() {
                let lines = lines_until(m, &format!("\"DEL\" \"{key}\""));
                let tail = &lines[lines.len() - 3..];
                assert_eq!(
                    tail,
                    [
                        format!("[0 \"SET\" \"{key}\" \"a \\\"q\\\"\\n\""),
                        format!("[0 \"GET\" \"{key}\""),
                        format!("[0 \"DEL\" \"{key}\""),
                    ]
                );
            }
        }
        let c = &mut clients[0];
        assert_eq!(c.cmd("SELECT 2"), ok());
        assert_eq!(c.cmd("MULTI"), ok());
        assert_eq!(c.cmd("INCR n"), Frame::Simple("QUEUED".into()));
        assert!(matches!(c.cmd("EXEC"), Frame::Array(_)));
        assert!(!c.cmd("CONFIG GET maxmemory").is_error());
        assert!(c.cmd("AUTH secret").is_error());
        assert_eq!(c.cmd("PING"), Frame::Simple("PONG".into()));
        for m in monitors.iter_mut() {
            let lines = lines_until(m, "\"PING\"");
            let tail = &lines[lines.len() - 6..];
            assert_eq!(
                tail,
                [
                    "[0 \"SELECT\" \"2\"",
                    "[2 \"MULTI\"",
                    "[2 \"INCR\" \"n\"",
                    "[2 \"EXEC\"",
                    "[2 \"AUTH\" \"(redacted)\"",
                    "[2 \"PING\"",
                ]
            );
        }
    });
}
