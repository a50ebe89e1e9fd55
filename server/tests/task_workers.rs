//! Task engine v2 through the real server: worker identities (leases owned by a worker, any of
//! its connections acknowledging them, GRACE after a dropped connection, heartbeats, QUIET,
//! TASK.WORKERS), the lost-lease quarantine, SNOOZE, and TASK.LIST / PURGE / DELQUEUE. Queue
//! and worker names are random per run, on 1, 2 and 4 shards, so no lucky name hides a bug
//! that depends on where names hash.

mod common;

use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use wetask_protocol::Frame;

/// A name no other run uses: `prefix` and a random number.
fn random_name(prefix: &str) -> String {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(Instant::now().elapsed().as_nanos() as u64);
    format!("{prefix}-{:x}", h.finish() & 0xffff_ffff)
}

fn id_of(frame: Frame) -> Bytes {
    match frame {
        Frame::Bulk(id) => id,
        other => panic!("expected an id, got {other:?}"),
    }
}

/// FETCH's reply as (id, attempt) pairs.
fn leased(frame: Frame) -> Vec<(Bytes, i64)> {
    let Frame::Array(items) = frame else {
        panic!("expected an array, got {frame:?}")
    };
    items
        .into_iter()
        .map(|item| match item {
            Frame::Array(fields) => match (&fields[0], &fields[3]) {
                (Frame::Bulk(id), Frame::Integer(attempt)) => (id.clone(), *attempt),
                _ => panic!("malformed task {fields:?}"),
            },
            other => panic!("expected a task, got {other:?}"),
        })
        .collect()
}

fn get(c: &mut Client, id: &Bytes) -> Frame {
    c.cmd_args(&[b"TASK.GET", id])
}

fn each_layout(scenario: fn(&Server)) {
    for shards in ["1", "2", "4"] {
        let server = Server::start(&["--shards", shards]);
        println!("{shards} shards, port {}", server.port);
        scenario(&server);
    }
}

#[test]
fn a_workers_leases_are_acknowledged_from_any_of_its_connections() {
    each_layout(|server| {
        for round in 0..20 {
            let queue = random_name("q");
            let worker = random_name("w");
            println!("round {round}: queue {queue}, worker {worker}");
            let mut conns: Vec<Client> = (0..4).map(|_| server.client()).collect();
            for c in &mut conns {
                assert_eq!(c.cmd(&format!("TASK.WORKER {worker}")), ok());
            }
            let mut producer = server.client();
            let ids: Vec<Bytes> = (0..8)
                .map(|n| id_of(producer.cmd(&format!("TASK.SUBMIT {queue} job{n}"))))
                .collect();
            for (n, id) in ids.iter().enumerate() {
                let got = leased(conns[n % 4].cmd(&format!("TASK.FETCH {queue}")));
                assert_eq!(got, vec![(id.clone(), 1)]);
                // Another connection of the same worker acknowledges it.
                assert_eq!(conns[(n + 1) % 4].cmd_args(&[b"TASK.ACK", id]), ok());
            }
            // A connection without the identity may not.
            let id = id_of(producer.cmd(&format!("TASK.SUBMIT {queue} last")));
            leased(conns[0].cmd(&format!("TASK.FETCH {queue}")));
            assert!(producer.cmd_args(&[b"TASK.ACK", &id]).is_error());
            // ACKs riding on a FETCH from yet another connection of the worker.
            let fused = conns[3].cmd_args(&[b"TASK.FETCH", queue.as_bytes(), b"ACK", &id]);
            assert_eq!(fused, array(vec![]));
            assert_eq!(field(&get(&mut producer, &id), "state"), bulk("done"));
        }
    });
}

#[test]
fn a_dropped_connection_that_comes_back_within_grace_keeps_its_leases() {
    each_layout(|server| {
        let queue = random_name("q");
        let worker = random_name("w");
        let mut producer = server.client();
        let id = id_of(producer.cmd(&format!("TASK.SUBMIT {queue} work")));
        let mut first = server.client();
        assert_eq!(first.cmd(&format!("TASK.WORKER {worker} GRACE 5000")), ok());
        assert_eq!(leased(first.cmd(&format!("TASK.FETCH {queue}"))).len(), 1);
        drop(first);
        let mut back = server.client();
        // Nobody else gets it meanwhile.
        let mut other = server.client();
        assert_eq!(
            other.cmd(&format!("TASK.FETCH {queue} BLOCK 300")),
            array(vec![])
        );
        assert_eq!(back.cmd(&format!("TASK.WORKER {worker}")), ok());
        assert_eq!(back.cmd_args(&[b"TASK.ACK", &id]), ok());
        let task = get(&mut producer, &id);
        assert_eq!(field(&task, "attempts"), int(1), "no attempt spent");
        assert_eq!(field(&task, "lost_leases"), int(0));
    });
}

#[test]
fn grace_runs_out_and_the_leases_go_to_another_worker() {
    each_layout(|server| {
        let queue = random_name("q");
        let mut producer = server.client();
        let id = id_of(producer.cmd(&format!("TASK.SUBMIT {queue} work")));
        let mut first = server.client();
        first.cmd(&format!("TASK.WORKER {} GRACE 300", random_name("w")));
        leased(first.cmd(&format!("TASK.FETCH {queue}")));
        let mut other = server.client();
        drop(first);
        let start = Instant::now();
        let got = leased(other.cmd(&format!("TASK.FETCH {queue} BLOCK 10000")));
        let waited = start.elapsed();
        assert_eq!(got, vec![(id, 2)]);
        assert!(
            waited >= Duration::from_millis(250) && waited < Duration::from_secs(5),
            "released after {waited:?}, GRACE 300"
        );
        // Default GRACE 0: at once, as a plain connection's.
        let id = id_of(producer.cmd(&format!("TASK.SUBMIT {queue} again")));
        let mut plain = server.client();
        plain.cmd(&format!("TASK.WORKER {}", random_name("w")));
        leased(plain.cmd(&format!("TASK.FETCH {queue}")));
        drop(plain);
        let start = Instant::now();
        let got = leased(other.cmd(&format!("TASK.FETCH {queue} BLOCK 10000")));
        assert_eq!(got, vec![(id, 2)]);
        assert!(start.elapsed() < Duration::from_secs(2));
    });
}

#[test]
fn a_silent_worker_loses_its_leases_when_its_heartbeat_stops() {
    each_layout(|server| {
        let queue = random_name("q");
        let worker = random_name("w");
        let mut producer = server.client();
        let id = id_of(producer.cmd(&format!("TASK.SUBMIT {queue} work LEASE 60000")));
        let mut silent = server.client();
        silent.cmd(&format!("TASK.WORKER {worker} HEARTBEAT 200"));
        leased(silent.cmd(&format!("TASK.FETCH {queue}")));
        let mut other = server.client();
        let got = leased(other.cmd(&format!("TASK.FETCH {queue} BLOCK 10000")));
        assert_eq!(
            got,
            vec![(id.clone(), 2)],
            "released though its connection is open"
        );
        let workers = producer.cmd("TASK.WORKERS");
        let Frame::Array(rows) = workers else {
            panic!("expected rows")
        };
        let row = rows
            .iter()
            .find(|r| field(r, "name") == bulk(&worker))
            .expect("listed");
        assert_eq!(field(row, "status"), bulk("released"));
        assert_eq!(field(row, "connections"), int(1));
        // Its lease is gone; any command is a sign of life and makes it present again.
        assert!(silent.cmd_args(&[b"TASK.ACK", &id]).is_error());
        // The beat travels to the worker's home shard on its own: wait for it to land.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let Frame::Array(rows) = producer.cmd("TASK.WORKERS") else {
                panic!("expected rows")
            };
            let row = rows
                .iter()
                .find(|r| field(r, "name") == bulk(&worker))
                .unwrap();
            if field(row, "status") == bulk("present") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "still {:?}",
                field(row, "status")
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    });
}

#[test]
fn quiet_stops_a_workers_fetches_and_workers_lists_its_leases() {
    each_layout(|server| {
        let queues: Vec<String> = (0..3).map(|_| random_name("q")).collect();
        let worker = random_name("w");
        let mut producer = server.client();
        for q in &queues {
            producer.cmd(&format!("TASK.SUBMIT {q} a"));
            producer.cmd(&format!("TASK.SUBMIT {q} b"));
        }
        let mut w = server.client();
        w.cmd(&format!("TASK.WORKER {worker} GRACE 1000 HEARTBEAT 60000"));
        let all = queues.join(" ");
        assert_eq!(leased(w.cmd(&format!("TASK.FETCH {all} COUNT 3"))).len(), 3);
        let Frame::Array(rows) = producer.cmd("TASK.WORKERS") else {
            panic!("expected rows")
        };
        let row = rows
            .iter()
            .find(|r| field(r, "name") == bulk(&worker))
            .unwrap();
        assert_eq!(field(row, "leases"), int(3));
        assert_eq!(field(row, "grace"), int(1000));
        assert_eq!(field(row, "heartbeat"), int(60000));
        assert_eq!(field(row, "quiet"), int(0));
        assert_eq!(producer.cmd(&format!("TASK.QUIET {worker}")), ok());
        assert_eq!(w.cmd(&format!("TASK.FETCH {all} BLOCK 200")), array(vec![]));
        let mut other = server.client();
        assert_eq!(
            leased(other.cmd(&format!("TASK.FETCH {all} COUNT 10"))).len(),
            3
        );
        assert_eq!(
            producer.cmd("TASK.QUIET nobody-at-all"),
            err("ERR no such worker")
        );
        assert!(w
            .cmd(&format!("TASK.WORKER {}", random_name("other")))
            .is_error());
        assert!(w.cmd(&format!("TASK.WORKER {worker} GRACE -1")).is_error());
        assert!(w
            .cmd(&format!("TASK.WORKER {worker} HEARTBEAT 0"))
            .is_error());
        assert!(w.cmd(&format!("TASK.WORKER {worker} BOGUS 1")).is_error());
    });
}

#[test]
fn a_task_that_kills_its_worker_three_times_goes_dead() {
    each_layout(|server| {
        let queue = random_name("q");
        let mut producer = server.client();
        let id = id_of(producer.cmd(&format!("TASK.SUBMIT {queue} poison RETRIES 10 BACKOFF 50")));
        for kill in 1..=3 {
            let mut victim = server.client();
            let got = leased(victim.cmd(&format!("TASK.FETCH {queue} BLOCK 10000")));
            assert_eq!(got, vec![(id.clone(), kill)]);
            drop(victim);
        }
        let mut fourth = server.client();
        assert_eq!(
            fourth.cmd(&format!("TASK.FETCH {queue} BLOCK 1000")),
            array(vec![]),
            "no fourth worker receives it"
        );
        let task = get(&mut producer, &id);
        assert_eq!(field(&task, "state"), bulk("dead"));
        assert_eq!(field(&task, "lost_leases"), int(3));
        let Frame::Bulk(error) = field(&task, "error") else {
            panic!("an error is kept")
        };
        assert!(error.starts_with(b"lease lost 3 times"), "{error:?}");
        assert_eq!(
            producer.cmd(&format!("TASK.DEAD {queue}")),
            array(vec![Frame::Bulk(id)])
        );
    });
}

#[test]
fn snooze_list_purge_and_delqueue_over_the_wire() {
    each_layout(|server| {
        let queue = random_name("q");
        let mut c = server.client();
        let ids: Vec<Bytes> = (0..5)
            .map(|n| id_of(c.cmd(&format!("TASK.SUBMIT {queue} p{n} RETRIES 0"))))
            .collect();
        // SNOOZE: back later, no attempt spent, no failure counted.
        let got = leased(c.cmd(&format!("TASK.FETCH {queue}")));
        let Frame::Array(reply) = c.cmd_args(&[b"TASK.FAIL", &got[0].0, b"SNOOZE", b"60000"])
        else {
            panic!("expected an array")
        };
        assert_eq!(reply[0], bulk("snoozed"));
        let task = get(&mut c, &ids[0]);
        assert_eq!(field(&task, "state"), bulk("scheduled"));
        assert_eq!(field(&task, "attempts"), int(0));
        assert_eq!(
            field(&c.cmd(&format!("TASK.STATS {queue}")), "failed"),
            int(0)
        );
        // LIST pages: queued in lease order, two per page.
        let mut listed = Vec::new();
        let mut cursor = Bytes::from_static(b"0");
        loop {
            let Frame::Array(page) = c.cmd_args(&[
                b"TASK.LIST",
                queue.as_bytes(),
                b"queued",
                &cursor,
                b"COUNT",
                b"2",
            ]) else {
                panic!("expected a page")
            };
            let Frame::Bulk(next) = &page[0] else {
                panic!("a cursor")
            };
            let Frame::Array(page_ids) = &page[1] else {
                panic!("ids")
            };
            listed.extend(page_ids.iter().map(|f| match f {
                Frame::Bulk(id) => id.clone(),
                _ => panic!("an id"),
            }));
            if &next[..] == b"0" {
                break;
            }
            cursor = next.clone();
        }
        assert_eq!(listed, ids[1..].to_vec());
        assert_eq!(
            c.cmd(&format!("TASK.LIST {queue} scheduled")),
            array(vec![bulk("0"), array(vec![Frame::Bulk(ids[0].clone())])])
        );
        assert!(c.cmd(&format!("TASK.LIST {queue} sleeping")).is_error());
        assert_eq!(
            c.cmd(&format!("TASK.LIST {queue} queued junk")),
            err("ERR invalid cursor")
        );
        assert!(c
            .cmd(&format!("TASK.LIST {queue} queued 0 COUNT 0"))
            .is_error());
        // PURGE and DELQUEUE.
        assert_eq!(c.cmd(&format!("TASK.PURGE {queue} scheduled")), int(1));
        assert!(c.cmd(&format!("TASK.PURGE {queue} leased")).is_error());
        leased(c.cmd(&format!("TASK.FETCH {queue}")));
        assert!(
            c.cmd(&format!("TASK.DELQUEUE {queue}")).is_error(),
            "a task is leased"
        );
        assert_eq!(c.cmd(&format!("TASK.DELQUEUE {queue} FORCE")), int(4));
        assert_eq!(get(&mut c, &ids[2]), Frame::Null);
        let Frame::Array(names) = c.cmd("TASK.QUEUES") else {
            panic!("names")
        };
        assert!(!names.contains(&bulk(&queue)));
        assert_eq!(c.cmd(&format!("TASK.DELQUEUE {queue}")), int(0));
    });
}

#[test]
fn groups_take_turns_and_keep_their_limits_over_the_wire() {
    each_layout(|server| {
        let queue = random_name("q");
        let (a, b) = (random_name("tenant"), random_name("tenant"));
        let mut c = server.client();
        for _ in 0..20 {
            for _ in 0..100 {
                c.send(&[
                    b"TASK.SUBMIT",
                    queue.as_bytes(),
                    b"flood",
                    b"GROUP",
                    a.as_bytes(),
                ]);
            }
            for _ in 0..100 {
                assert!(matches!(c.read(), Some(Frame::Bulk(_))));
            }
        }
        let lone = id_of(c.cmd(&format!("TASK.SUBMIT {queue} mine GROUP {b}")));
        let mut worker = server.client();
        let first: Vec<Bytes> = leased(worker.cmd(&format!("TASK.FETCH {queue} COUNT 2")))
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert!(
            first.contains(&lone),
            "B's task waits one turn at most: {first:?}"
        );
        let limits = c.cmd(&format!("TASK.LIMIT {queue} GROUP CONCURRENCY 3"));
        assert_eq!(field(&limits, "concurrency"), int(3));
        assert_eq!(
            field(&c.cmd(&format!("TASK.LIMIT {queue}")), "concurrency"),
            Frame::Null
        );
        // A already holds 1; 2 more at most.
        assert_eq!(
            leased(worker.cmd(&format!("TASK.FETCH {queue} COUNT 10"))).len(),
            2
        );
        assert_eq!(
            field(&c.cmd(&format!("TASK.STATS {queue}")), "groups"),
            int(2)
        );
    });
}
