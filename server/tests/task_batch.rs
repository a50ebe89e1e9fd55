//! TASK.BATCH through the real server: children on every shard, callbacks held until the
//! last child ends, ON-SUCCESS cancelled when a child failed, the command sent twice making
//! nothing twice, and rounds of batches with workers and the server killed at random
//! moments (SIGKILL under `appendfsync always`): each round's callback runs once, after its
//! last child, never early.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use wetask_protocol::Frame;

fn batch_line(id: &str, queues: &[String], children: usize, extra: &[&str]) -> Vec<Vec<u8>> {
    let mut line: Vec<Vec<u8>> = vec![b"TASK.BATCH".to_vec(), id.as_bytes().to_vec()];
    line.extend(extra.iter().map(|w| w.as_bytes().to_vec()));
    line.push(b"CHILDREN".to_vec());
    for n in 0..children {
        line.push(queues[n % queues.len()].as_bytes().to_vec());
        line.push(format!("child {n}").into_bytes());
    }
    line
}

fn send(c: &mut Client, line: &[Vec<u8>]) -> Frame {
    let args: Vec<&[u8]> = line.iter().map(Vec::as_slice).collect();
    c.cmd_args(&args)
}

/// Fetches from `queues` and handles each task with `act` until `done` says so.
fn work(c: &mut Client, queues: &str, mut act: impl FnMut(&mut Client, &Bytes, &Bytes) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "work never finished");
        let Frame::Array(tasks) = c.cmd(&format!("TASK.FETCH {queues} COUNT 50 BLOCK 200")) else {
            panic!("fetch")
        };
        for task in tasks {
            let Frame::Array(f) = task else { panic!() };
            let (Frame::Bulk(id), Frame::Bulk(payload)) = (&f[0], &f[2]) else {
                panic!()
            };
            if act(c, id, payload) {
                return;
            }
        }
    }
}

#[test]
fn callbacks_wait_for_the_last_child_on_every_shard() {
    for shards in ["1", "2", "4"] {
        let server = Server::start(&["--shards", shards]);
        let mut c = server.client();
        let queues: Vec<String> = (0..6).map(|n| format!("kids{n}")).collect();
        let line = batch_line(
            "b1",
            &queues,
            60,
            &[
                "ON-SUCCESS",
                "cb",
                "all-good",
                "ON-COMPLETE",
                "cb",
                "finished",
            ],
        );
        let Frame::Array(children) = send(&mut c, &line) else {
            panic!("child ids")
        };
        assert_eq!(children.len(), 60);
        // Sent again: nothing twice.
        assert_eq!(send(&mut c, &line), Frame::Array(children.clone()));
        let other = batch_line("b1", &queues, 3, &[]);
        assert!(
            send(&mut c, &other).is_error(),
            "another batch with the same id"
        );
        assert_eq!(field(&c.cmd("TASK.STATS kids0"), "queued"), int(10));
        // The callbacks are held: nothing to fetch.
        assert_eq!(c.cmd("TASK.FETCH cb"), array(vec![]));
        let all = queues.join(" ");
        let mut left = 60;
        work(&mut c, &all, |c, id, _| {
            assert_eq!(c.cmd_args(&[b"TASK.ACK", id]), ok());
            left -= 1;
            if left > 0 {
                assert_eq!(
                    c.cmd("TASK.FETCH cb"),
                    array(vec![]),
                    "a callback ran early"
                );
            }
            left == 0
        });
        let mut got = Vec::new();
        work(&mut c, "cb", |c, id, payload| {
            c.cmd_args(&[b"TASK.ACK", id]);
            got.push(payload.clone());
            got.len() == 2
        });
        got.sort();
        assert_eq!(got, vec![Bytes::from("all-good"), Bytes::from("finished")]);
        let info = c.cmd("TASK.BATCHINFO b1");
        assert_eq!(
            (field(&info, "total"), field(&info, "succeeded")),
            (int(60), int(60))
        );
        // A child that dies: ON-COMPLETE runs, ON-SUCCESS is cancelled.
        let line = batch_line(
            "b2",
            &queues,
            12,
            &["ON-SUCCESS", "cb", "good", "ON-COMPLETE", "cb", "over"],
        );
        send(&mut c, &line);
        let mut first = true;
        let mut left = 12;
        work(&mut c, &all, |c, id, _| {
            if first {
                c.cmd_args(&[b"TASK.FAIL", id, b"NORETRY"]);
                first = false;
            } else {
                c.cmd_args(&[b"TASK.ACK", id]);
            }
            left -= 1;
            left == 0
        });
        work(&mut c, "cb", |c, id, payload| {
            c.cmd_args(&[b"TASK.ACK", id]);
            assert_eq!(payload, &Bytes::from("over"));
            true
        });
        let info = c.cmd("TASK.BATCHINFO b2");
        assert_eq!(field(&info, "failed"), int(1));
        let Frame::Bulk(good) = field(&info, "on_success") else {
            panic!()
        };
        assert_eq!(
            field(&c.cmd_args(&[b"TASK.GET", &good]), "state"),
            bulk("cancelled")
        );
        assert_eq!(c.cmd("TASK.BATCHINFO nosuch"), Frame::Null);
        assert!(c.cmd("TASK.BATCH b3 CHILDREN q").is_error());
        assert!(c.cmd("TASK.BATCH b3 ON-SUCCESS q p").is_error());
    }
}

#[test]
fn each_round_fires_once_after_its_last_child_through_kills() {
    let dir = temp_dir("batches");
    let args = |d: &std::path::Path| {
        vec![
            "--dir".to_string(),
            d.to_str().unwrap().to_string(),
            "--shards".to_string(),
            "2".to_string(),
            "--appendfsync".to_string(),
            "always".to_string(),
        ]
    };
    let start = || {
        let a = args(&dir);
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        Server::start(&refs)
    };
    // $WETASK_BATCH_ROUNDS and $WETASK_BATCH_CHILDREN for the 100 x 10,000 (with
    // `cargo test --release`).
    let knob = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(default)
    };
    let rounds = knob("WETASK_BATCH_ROUNDS", 8);
    let children = knob("WETASK_BATCH_CHILDREN", 300);
    let queues: Vec<String> = (0..4).map(|n| format!("rq{n}")).collect();
    let mut server = start();
    let mut fired: Vec<usize> = vec![0; rounds];
    for round in 0..rounds {
        let mut c = server.client();
        let id = format!("round{round}");
        let cb_payload = format!("cb {round}");
        let line = batch_line(&id, &queues, children, &["ON-COMPLETE", "rcb", &cb_payload]);
        send(&mut c, &line);
        // Work the round, failing 1% once; the server is killed once mid-round.
        // Somewhere in the round, a different place each time.
        let kill_after = (50 + round * 37) % (children - 10) + 5;
        let mut handled = 0;
        let all = queues.join(" ");
        let deadline = Instant::now() + Duration::from_secs(120 + children as u64 / 100);
        loop {
            assert!(Instant::now() < deadline, "round {round} never completed");
            if handled == kill_after {
                server.child.kill().expect("SIGKILL");
                server.wait();
                server = start();
                c = server.client();
                handled += 1;
            }
            let info = c.cmd(&format!("TASK.BATCHINFO {id}"));
            let Frame::Array(tasks) = c.cmd(&format!("TASK.FETCH {all} rcb COUNT 20 BLOCK 200"))
            else {
                panic!("fetch")
            };
            let mut callback_seen = false;
            for task in tasks {
                let Frame::Array(f) = task else { panic!() };
                let (Frame::Bulk(tid), Frame::Bulk(payload), Frame::Integer(attempt)) =
                    (&f[0], &f[2], &f[3])
                else {
                    panic!()
                };
                if payload.starts_with(b"cb ") {
                    let n: usize = std::str::from_utf8(&payload[3..]).unwrap().parse().unwrap();
                    let info = c.cmd(&format!("TASK.BATCHINFO round{n}"));
                    assert_eq!(
                        field(&info, "ended"),
                        int(children as i64),
                        "round {n}'s callback ran early"
                    );
                    fired[n] += 1;
                    c.cmd_args(&[b"TASK.ACK", tid]);
                    callback_seen = n == round || callback_seen;
                    continue;
                }
                handled += 1;
                // 1% fail once (the retry comes back after 1 s).
                if handled % 100 == 7 && *attempt == 1 {
                    c.cmd_args(&[b"TASK.FAIL", tid, b"RETRYIN", b"10"]);
                } else {
                    c.cmd_args(&[b"TASK.ACK", tid]);
                }
            }
            let _ = info;
            if callback_seen {
                break;
            }
        }
    }
    assert_eq!(fired, vec![1; rounds], "each round's callback once");
}

fn flow_line(id: &str, rule: &str, children: usize) -> Vec<Vec<u8>> {
    let mut line: Vec<Vec<u8>> = [
        "TASK.FLOW",
        id,
        "PARENT",
        "parents",
        "sum",
        "ON-FAIL",
        rule,
        "CHILDREN",
    ]
    .iter()
    .map(|w| w.as_bytes().to_vec())
    .collect();
    for n in 0..children {
        line.push(format!("parts{}", n % 5).into_bytes());
        line.push(n.to_string().into_bytes());
    }
    line
}

#[test]
fn a_flows_parent_runs_after_its_children_and_reads_their_results() {
    for shards in ["1", "2", "4"] {
        let server = Server::start(&["--shards", shards]);
        let mut c = server.client();
        let parts = "parts0 parts1 parts2 parts3 parts4";
        // All children done: the parent runs and reads their results.
        send(&mut c, &flow_line("f1", "FAIL", 10));
        assert_eq!(
            c.cmd("TASK.FETCH parents"),
            array(vec![]),
            "held until the children end"
        );
        let mut left = 10;
        work(&mut c, parts, |c, id, payload| {
            let doubled = (std::str::from_utf8(payload)
                .unwrap()
                .parse::<u64>()
                .unwrap()
                * 2)
            .to_string();
            c.cmd_args(&[b"TASK.ACK", id, b"RESULT", doubled.as_bytes()]);
            left -= 1;
            left == 0
        });
        work(&mut c, "parents", |c, id, payload| {
            assert_eq!(payload, &Bytes::from("sum"));
            let Frame::Array(rows) = c.cmd("TASK.RESULTS f1") else {
                panic!()
            };
            let total: u64 = rows
                .iter()
                .map(|row| {
                    let Frame::Array(f) = row else { panic!() };
                    assert_eq!(f[1], bulk("done"));
                    let Frame::Bulk(r) = &f[2] else {
                        panic!("a result")
                    };
                    std::str::from_utf8(r).unwrap().parse::<u64>().unwrap()
                })
                .sum();
            assert_eq!(total, 90, "2 * (0 + 1 + ... + 9)");
            c.cmd_args(&[b"TASK.ACK", id]);
            true
        });
        // A child dies: FAIL kills the parent, IGNORE runs it with the error to read.
        for (flow, rule) in [("f2", "FAIL"), ("f3", "IGNORE")] {
            send(&mut c, &flow_line(flow, rule, 4));
            let mut left = 4;
            work(&mut c, parts, |c, id, payload| {
                if payload == &Bytes::from("2") {
                    c.cmd_args(&[b"TASK.FAIL", id, b"ERROR", b"no disk", b"NORETRY"]);
                } else {
                    c.cmd_args(&[b"TASK.ACK", id]);
                }
                left -= 1;
                left == 0
            });
            let info = c.cmd(&format!("TASK.BATCHINFO {flow}"));
            let Frame::Bulk(parent) = field(&info, "on_complete") else {
                panic!()
            };
            let deadline = Instant::now() + Duration::from_secs(10);
            let state = loop {
                let state = field(&c.cmd_args(&[b"TASK.GET", &parent]), "state");
                if state != bulk("held") {
                    break state;
                }
                assert!(Instant::now() < deadline, "the parent stayed held");
                std::thread::sleep(Duration::from_millis(5));
            };
            if rule == "FAIL" {
                assert_eq!(state, bulk("dead"));
                let Frame::Bulk(error) = field(&c.cmd_args(&[b"TASK.GET", &parent]), "error")
                else {
                    panic!()
                };
                assert!(error.starts_with(b"a child failed: "), "{error:?}");
            } else {
                assert_eq!(state, bulk("queued"));
                let Frame::Array(rows) = c.cmd(&format!("TASK.RESULTS {flow}")) else {
                    panic!()
                };
                let failed: Vec<&Frame> = rows
                    .iter()
                    .filter(|r| matches!(r, Frame::Array(f) if f[1] == bulk("failed")))
                    .collect();
                assert_eq!(failed.len(), 1);
                let Frame::Array(f) = failed[0] else { panic!() };
                assert_eq!(f[2], bulk("no disk"));
                work(&mut c, "parents", |c, id, _| {
                    c.cmd_args(&[b"TASK.ACK", id]);
                    true
                });
            }
        }
        assert!(
            c.cmd("TASK.FLOW f9 ON-FAIL FAIL CHILDREN q p").is_error(),
            "no parent"
        );
        assert!(c
            .cmd("TASK.FLOW f9 PARENT q p ON-FAIL MAYBE CHILDREN q p")
            .is_error());
    }
}
