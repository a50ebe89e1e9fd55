//! Scripts that run too long (docs/SECURITY.md): past `busy-reply-threshold` other clients
//! get BUSY instead of hanging, SCRIPT KILL stops a script that has not written (no pcall
//! or coroutine can swallow it), and a script that has written is ended only by SHUTDOWN
//! NOSAVE. Before this work `while true do pcall(function() while true do end end) end`
//! hung every client of the server, SCRIPT KILL included.

mod common;

use std::time::{Duration, Instant};

use common::{Client, Server};
use wetask_protocol::Frame;

const BUSY: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";

fn is_error(frame: &Frame, prefix: &str) -> bool {
    matches!(frame, Frame::Error(text) if text.starts_with(prefix.as_bytes()))
}

/// Waits until a new connection's PING is answered BUSY.
fn wait_busy(server: &Server) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut c = server.client();
        let reply = c.cmd("PING");
        if is_error(&reply, "BUSY") {
            return;
        }
        assert!(Instant::now() < deadline, "never BUSY: {reply:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `script` (holding every shard: it declares no key) on its own connection.
fn start_script(server: &Server, script: &str) -> Client {
    let mut runner = server.client();
    runner
        .stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    runner.send(&[b"EVAL", script.as_bytes(), b"0"]);
    runner
}

const LOOPS: &[&str] = &[
    "while true do end",
    "while true do pcall(function() while true do end end) end",
    "local f = coroutine.wrap(function() while true do pcall(function() while true do end end) end end) f()",
    "local co = coroutine.create(function() while true do local ok = pcall(error, 'x') end end) coroutine.resume(co)",
];

#[test]
fn a_busy_script_gets_busy_replies_and_script_kill_stops_it() {
    for shards in ["1", "2", "4"] {
        let server = Server::start(&["--shards", shards, "--busy-reply-threshold", "200"]);
        for script in LOOPS {
            println!("{shards} shards: {script}");
            let mut runner = start_script(&server, script);
            wait_busy(&server);
            // Every connection gets BUSY, whichever shard it landed on: the script holds
            // them all.
            let mut others: Vec<Client> = (0..8).map(|_| server.client()).collect();
            for c in &mut others {
                assert_eq!(
                    c.cmd("PING"),
                    Frame::static_error(BUSY),
                    "{shards}: {script}"
                );
                assert_eq!(c.cmd("SET k v"), Frame::static_error(BUSY));
            }
            assert_eq!(
                others[0].cmd("SCRIPT KILL"),
                Frame::ok(),
                "{shards}: {script}"
            );
            let reply = runner.read().expect("the script's reply");
            assert!(
                is_error(&reply, "ERR Script killed by user with SCRIPT KILL..."),
                "{shards}: {script}: {reply:?}"
            );
            for c in &mut others {
                assert_eq!(c.cmd("PING"), Frame::Simple("PONG".into()));
            }
            assert_eq!(runner.cmd("SET k v"), Frame::ok());
            assert_eq!(
                others[1].cmd("SCRIPT KILL"),
                Frame::static_error("NOTBUSY No scripts in execution right now.")
            );
        }
        assert!(server.log_lines("panicked").is_empty());
    }
}

#[test]
fn a_script_that_wrote_is_unkillable_and_only_shutdown_nosave_ends_it() {
    for shards in ["1", "2"] {
        let mut server = Server::start(&["--shards", shards, "--busy-reply-threshold", "200"]);
        let _runner = start_script(
            &server,
            "redis.call('set', 'written', '1') while true do pcall(function() while true do end end) end",
        );
        wait_busy(&server);
        let mut c = server.client();
        let reply = c.cmd("SCRIPT KILL");
        assert!(is_error(&reply, "UNKILLABLE"), "{reply:?}");
        assert_eq!(c.cmd("SHUTDOWN"), Frame::static_error(BUSY));
        c.send(&[b"SHUTDOWN", b"NOSAVE"]);
        let status = server.wait();
        assert!(status.success(), "{status}");
    }
}

#[test]
fn busy_reply_threshold_is_configurable_and_scripts_under_it_are_untouched() {
    let server = Server::start(&["--shards", "2"]);
    let mut c = server.client();
    assert_eq!(
        c.cmd("CONFIG GET busy-reply-threshold"),
        Frame::Array(vec![
            common::bulk("busy-reply-threshold"),
            common::bulk("5000")
        ])
    );
    assert_eq!(c.cmd("CONFIG SET busy-reply-threshold 100"), Frame::ok());
    // A script that runs 300 ms but finishes is not disturbed by the hook's pauses.
    let reply = c.cmd_args(&[
        b"EVAL",
        b"local t0 = redis.call('time') local n = 0 \
          repeat n = n + 1 local t = redis.call('time') \
          until (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) > 300000 return 1",
        b"0",
    ]);
    assert_eq!(reply, common::int(1));
    let reply = c.cmd_args(&[
        b"EVAL",
        b"local f = coroutine.wrap(function() local ok, v = pcall(function() local n = 0 for i = 1, 20000000 do n = n + 1 end coroutine.yield(n) return n end) return v end) return {f(), f()}",
        b"0",
    ]);
    assert_eq!(
        reply,
        Frame::Array(vec![common::int(20_000_000), common::int(20_000_000)])
    );
    assert_eq!(
        c.cmd("SCRIPT KILL"),
        Frame::static_error("NOTBUSY No scripts in execution right now.")
    );
}

/// MULTI, EXEC and DISCARD while a script is busy, as Redis 7's multi.tcl has them
/// ("MULTI and script timeout", "EXEC and script timeout", "MULTI-EXEC body and script
/// timeout", "just EXEC and script timeout"): MULTI and DISCARD get through (allow-busy);
/// a command refused BUSY dooms the transaction; EXEC itself is refused with EXECABORT
/// … BUSY and ends it; nothing of the transaction runs.
#[test]
fn transactions_during_a_busy_script_follow_redis() {
    for shards in ["1", "2"] {
        let server = Server::start(&["--shards", shards, "--busy-reply-threshold", "100"]);
        let mut c = server.client();
        let mut admin = server.client();
        assert_eq!(c.cmd("SET xx 1"), Frame::ok());

        // MULTI before, a command refused during, EXEC during: EXECABORT … BUSY.
        assert_eq!(c.cmd("MULTI"), Frame::ok());
        assert_eq!(c.cmd("INCR xx"), Frame::simple("QUEUED"));
        let mut runner = start_script(&server, "while true do end");
        wait_busy(&server);
        assert_eq!(c.cmd("INCR xx"), Frame::static_error(BUSY));
        let exec = c.cmd("EXEC");
        assert!(
            is_error(&exec, "EXECABORT Transaction discarded because of: BUSY"),
            "{exec:?}"
        );
        // MULTI and DISCARD get through a busy script; the connection left MULTI above.
        assert_eq!(c.cmd("MULTI"), Frame::ok());
        assert_eq!(c.cmd("DISCARD"), Frame::ok());
        assert_eq!(admin.cmd("SCRIPT KILL"), Frame::ok());
        assert!(runner.read().is_some());
        assert_eq!(c.cmd("GET xx"), bulk_frame("1"), "{shards}: nothing ran");

        // A command refused during the script, EXEC after it: previous errors.
        assert_eq!(c.cmd("MULTI"), Frame::ok());
        assert_eq!(c.cmd("INCR xx"), Frame::simple("QUEUED"));
        let mut runner = start_script(&server, "while true do end");
        wait_busy(&server);
        assert_eq!(c.cmd("INCR xx"), Frame::static_error(BUSY));
        assert_eq!(admin.cmd("SCRIPT KILL"), Frame::ok());
        assert!(runner.read().is_some());
        let exec = c.cmd("EXEC");
        assert!(
            is_error(
                &exec,
                "EXECABORT Transaction discarded because of previous errors"
            ),
            "{exec:?}"
        );
        assert_eq!(c.cmd("GET xx"), bulk_frame("1"));
        assert_eq!(c.cmd("PING asdf"), bulk_frame("asdf"));
    }
}

fn bulk_frame(s: &str) -> Frame {
    Frame::Bulk(bytes::Bytes::copy_from_slice(s.as_bytes()))
}
