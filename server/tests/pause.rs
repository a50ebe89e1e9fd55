//! CLIENT PAUSE and UNPAUSE over the wire: a WRITE pause holds writes (and PUBLISH, EVAL,
//! an EXEC with a write) from clients on every shard while reads go on; UNPAUSE lets them
//! run, in order; an ALL pause holds everything until its time-out.

mod common;

use std::time::{Duration, Instant};

use common::*;
use wetask_protocol::Frame;

#[test]
fn a_write_pause_holds_writes_on_every_shard_until_unpause() {
    each_server(|server| {
        let mut admin = server.client();
        let keys = [key_on("pw", 0), key_on("pw", 1)];
        assert_eq!(admin.cmd(&format!("SET {} before", keys[0])), ok());
        assert_eq!(admin.cmd("CLIENT PAUSE 100000 WRITE"), ok());
        // Writers on either shard, each with a write (or something that may write) in flight.
        let mut writers: Vec<Client> = (0..4).map(|_| server.client()).collect();
        let held: [Vec<Vec<u8>>; 4] = [
            vec![
                b"SET".to_vec(),
                keys[0].clone().into_bytes(),
                b"during".to_vec(),
            ],
            vec![b"INCR".to_vec(), keys[1].clone().into_bytes()],
            vec![b"PUBLISH".to_vec(), b"chan".to_vec(), b"msg".to_vec()],
            vec![b"EVAL".to_vec(), b"return 1".to_vec(), b"0".to_vec()],
        ];
        for (writer, command) in writers.iter_mut().zip(&held) {
            let args: Vec<&[u8]> = command.iter().map(Vec::as_slice).collect();
            writer.send(&args);
        }
        wait_blocked(server, 4);
        // Reads are not held, on any connection.
        let mut reader = server.client();
        assert_eq!(reader.cmd(&format!("GET {}", keys[0])), bulk("before"));
        assert_eq!(reader.cmd("PING"), Frame::Simple("PONG".into()));
        // A transaction with a write waits at EXEC; one of reads does not.
        assert_eq!(reader.cmd("MULTI"), ok());
        assert_eq!(
            reader.cmd(&format!("GET {}", keys[1])),
            Frame::Simple("QUEUED".into())
        );
        assert_eq!(reader.cmd("EXEC"), array(vec![Frame::Null]));
        assert_eq!(admin.cmd("CLIENT UNPAUSE"), ok());
        assert_eq!(writers[0].read().unwrap(), ok());
        assert_eq!(writers[1].read().unwrap(), int(1));
        assert_eq!(writers[2].read().unwrap(), int(0));
        assert_eq!(writers[3].read().unwrap(), int(1));
        assert_eq!(reader.cmd(&format!("GET {}", keys[0])), bulk("during"));
        let mut info = server.client();
        assert_eq!(info_field(&mut info, "clients", "blocked_clients"), 0);
    });
}

#[test]
fn an_all_pause_holds_every_command_until_its_time_out() {
    let server = Server::start(&["--shards", "2"]);
    let mut admin = server.client();
    let mut clients: Vec<Client> = (0..4).map(|_| server.client()).collect();
    let started = Instant::now();
    assert_eq!(admin.cmd("CLIENT PAUSE 300"), ok());
    for c in clients.iter_mut() {
        c.send(&[b"GET", b"k"]);
    }
    for c in clients.iter_mut() {
        assert_eq!(c.read().unwrap(), Frame::Null);
        assert!(
            started.elapsed() >= Duration::from_millis(300),
            "answered during the pause"
        );
    }
    // Checks that refuse a command still answer at once.
    assert_eq!(admin.cmd("CLIENT PAUSE 100000 ALL"), ok());
    let asked = Instant::now();
    assert!(admin.cmd("GET").is_error());
    assert!(admin.cmd("NOSUCHCOMMAND").is_error());
    assert!(asked.elapsed() < Duration::from_secs(10));
}

/// CLIENT UNBLOCK: a blocked pop (and a blocked stream read) on any shard ends at once, as a
/// time-out (nil) or with UNBLOCKED; a client that is not blocked, or absent, counts 0.
#[test]
fn client_unblock_ends_blocked_commands_on_every_shard() {
    each_server(|server| {
        let mut admin = server.client();
        for (i, reason) in ["TIMEOUT", "ERROR", "", "TIMEOUT"].iter().enumerate() {
            let mut blocked = server.client();
            let Frame::Integer(id) = blocked.cmd("CLIENT ID") else {
                panic!("CLIENT ID")
            };
            let key = key_on("ub", i % 2);
            if i == 3 {
                blocked.send(&[b"XREAD", b"BLOCK", b"0", b"STREAMS", key.as_bytes(), b"$"]);
            } else {
                blocked.send(&[b"BLPOP", key.as_bytes(), b"0"]);
            }
            wait_blocked(server, 1);
            let line = format!("CLIENT UNBLOCK {id} {reason}");
            assert_eq!(admin.cmd(line.trim()), int(1));
            let reply = blocked.read().unwrap();
            if *reason == "ERROR" {
                assert_eq!(reply, err("UNBLOCKED client unblocked via CLIENT UNBLOCK"));
            } else {
                assert!(matches!(reply, Frame::Null | Frame::NullArray), "{reply:?}");
            }
            assert_eq!(blocked.cmd("PING"), Frame::Simple("PONG".into()));
            assert_eq!(admin.cmd(&format!("CLIENT UNBLOCK {id}")), int(0));
        }
        assert_eq!(admin.cmd("CLIENT UNBLOCK 999999"), int(0));
        assert_eq!(
            admin.cmd("CLIENT UNBLOCK 1 FOO"),
            err("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR")
        );
    });
}
