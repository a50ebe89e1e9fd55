//! TASK.CRON through the real server: three clients define the same schedule and define it
//! again after each of 5 restarts (SIGKILL under `appendfsync always`, and graceful ones),
//! and the queue holds exactly one task per tick of the schedule, none missing, none twice,
//! on 1 and 2 shards; plus the command's replies and errors.

mod common;

use std::time::{Duration, Instant};

use common::*;
use wetask_protocol::Frame;

const EVERY_MS: u64 = 500;

fn define(server: &Server, queue: &str) {
    for _ in 0..3 {
        let mut c = server.client();
        let every = format!("@every {EVERY_MS}ms");
        let reply = c.cmd_args(&[
            b"TASK.CRON",
            b"SET",
            b"heartbeat",
            every.as_bytes(),
            queue.as_bytes(),
            b"beat",
            b"RETRIES",
            b"1",
        ]);
        assert!(matches!(reply, Frame::Integer(_)), "{reply:?}");
    }
}

/// The ticks (unix ms) of every task in `queue`, from their ids `…cron:heartbeat:<tick>`.
fn ticks(c: &mut Client, queue: &str) -> Vec<u64> {
    let Frame::Array(page) = c.cmd(&format!("TASK.LIST {queue} queued 0 COUNT 1000")) else {
        panic!("a page")
    };
    assert_eq!(page[0], bulk("0"), "one page holds them all");
    let Frame::Array(ids) = &page[1] else {
        panic!("ids")
    };
    let mut ticks: Vec<u64> = ids
        .iter()
        .map(|id| match id {
            Frame::Bulk(id) => {
                let id = String::from_utf8_lossy(id).into_owned();
                id.rsplit(':')
                    .next()
                    .unwrap()
                    .parse()
                    .expect("a tick in the id")
            }
            other => panic!("an id, got {other:?}"),
        })
        .collect();
    ticks.sort_unstable();
    ticks
}

#[test]
fn one_task_per_tick_across_restarts_and_redefinitions() {
    for shards in ["1", "2"] {
        let dir = temp_dir("cron");
        let queue = format!("cron-q-{shards}");
        let args = |fsync: &'static str| {
            vec![
                "--dir".to_string(),
                dir.to_str().unwrap().to_string(),
                "--shards".to_string(),
                shards.to_string(),
                "--appendfsync".to_string(),
                fsync.to_string(),
            ]
        };
        let start = |fsync| {
            let a = args(fsync);
            let refs: Vec<&str> = a.iter().map(String::as_str).collect();
            Server::start(&refs)
        };
        let mut server = start("always");
        define(&server, &queue);
        let began = Instant::now();
        for round in 0..5 {
            std::thread::sleep(Duration::from_millis(700 + 300 * round));
            if round % 2 == 0 {
                server.child.kill().expect("SIGKILL");
                server.wait();
            } else {
                server.terminate();
            }
            // Down for a moment: the ticks meanwhile are made up at the restart.
            std::thread::sleep(Duration::from_millis(600));
            server = start("always");
            define(&server, &queue);
        }
        std::thread::sleep(Duration::from_millis(1200));
        let mut c = server.client();
        let Frame::Array(crons) = c.cmd("TASK.CRON LIST") else {
            panic!("a list")
        };
        assert_eq!(crons.len(), 1, "one schedule, however often it was defined");
        let seen = ticks(&mut c, &queue);
        println!(
            "{shards} shards: {} ticks over {:?} with 5 restarts",
            seen.len(),
            began.elapsed()
        );
        assert!(seen.len() >= 15, "{seen:?}");
        for pair in seen.windows(2) {
            assert_eq!(
                pair[1] - pair[0],
                EVERY_MS,
                "a tick missing or twice: {seen:?}"
            );
        }
        assert!(seen.iter().all(|t| t % EVERY_MS == 0));
    }
}

#[test]
fn cron_replies_and_errors() {
    each_server(|server| {
        let mut c = server.client();
        let Frame::Integer(next) = c.cmd_args(&[
            b"TASK.CRON",
            b"SET",
            b"nightly",
            b"0 3 * * *",
            b"reports",
            b"go",
        ]) else {
            panic!("the next tick")
        };
        assert_eq!(next as u64 % 86_400_000, 3 * 3_600_000);
        assert!(c
            .cmd_args(&[b"TASK.CRON", b"SET", b"bad", b"* * *", b"q", b"p"])
            .is_error());
        for bad in [
            &["@every 1ms", "q", "p"][..],
            &["@every 1s", "q", "p", "ID", "x"],
            &["@every 1s", "q", "p", "DELAY", "5"],
            &["@every 1s", "q", "p", "BOGUS"],
        ] {
            let mut line: Vec<&[u8]> = vec![b"TASK.CRON", b"SET", b"bad"];
            line.extend(bad.iter().map(|w| w.as_bytes()));
            assert!(c.cmd_args(&line).is_error(), "{bad:?}");
        }
        assert!(c.cmd("TASK.CRON NOPE").is_error());
        // Moving a schedule to a queue on another shard leaves no copy behind.
        c.cmd_args(&[b"TASK.CRON", b"SET", b"moving", b"@every 1h", b"{a}q", b"p"]);
        c.cmd_args(&[b"TASK.CRON", b"SET", b"moving", b"@every 1h", b"{b}q", b"p"]);
        let Frame::Array(all) = c.cmd("TASK.CRON LIST") else {
            panic!("a list")
        };
        assert_eq!(all.len(), 2, "{all:?}");
        assert_eq!(c.cmd("TASK.CRON DEL moving"), int(1));
        assert_eq!(c.cmd("TASK.CRON DEL moving"), int(0));
        assert_eq!(c.cmd("TASK.CRON DEL nightly"), int(1));
        assert_eq!(c.cmd("TASK.CRON LIST"), array(vec![]));
    });
}
