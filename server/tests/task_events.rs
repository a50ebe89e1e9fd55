//! TASK.EVENTS, TASK.PROGRESS, TASK.LOG and TASK.LOGS through the real server: a consumer
//! that drops its connection and resumes from its cursor, again and again, while producers
//! and workers run, sees every state change of every task exactly once and in order.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use wetask_protocol::Frame;

/// Tasks per run: 20,000, or `$WETASK_EVENTS_TASKS` for a run at the scale (1 M, with
/// `cargo test --release`).
fn task_count() -> usize {
    std::env::var("WETASK_EVENTS_TASKS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000)
}

fn produce(port: u16, queue: String) {
    let mut c = Client::connect(port);
    for batch in 0..task_count() / 100 {
        for n in 0..100 {
            let payload = format!("p{}", batch * 100 + n);
            c.send(&[b"TASK.SUBMIT", queue.as_bytes(), payload.as_bytes()]);
        }
        for _ in 0..100 {
            assert!(matches!(c.read(), Some(Frame::Bulk(_))));
        }
    }
}

fn work(port: u16, queue: String) {
    let mut c = Client::connect(port);
    let mut done = 0;
    let mut acks: Vec<Bytes> = Vec::new();
    while done < task_count() {
        let mut line: Vec<&[u8]> = vec![
            b"TASK.FETCH",
            queue.as_bytes(),
            b"COUNT",
            b"100",
            b"BLOCK",
            b"5000",
        ];
        if !acks.is_empty() {
            line.push(b"ACK");
            line.extend(acks.iter().map(|a| &a[..]));
        }
        let reply = c.cmd_args(&line);
        done += acks.len();
        acks.clear();
        let Frame::Array(tasks) = reply else {
            panic!("fetch: {reply:?}")
        };
        for task in tasks {
            let Frame::Array(fields) = task else { panic!() };
            let Frame::Bulk(id) = &fields[0] else {
                panic!()
            };
            acks.push(id.clone());
        }
        if done + acks.len() >= task_count() && !acks.is_empty() {
            for id in acks.drain(..) {
                assert_eq!(c.cmd_args(&[b"TASK.ACK", &id]), ok());
                done += 1;
            }
        }
    }
}

#[test]
fn a_consumer_resuming_from_its_cursor_sees_every_change_once() {
    for shards in ["1", "2"] {
        let server = Server::start(&["--shards", shards]);
        let queue = format!("events-{shards}");
        let port = server.port;
        let producer = {
            let q = queue.clone();
            std::thread::spawn(move || produce(port, q))
        };
        let worker = {
            let q = queue.clone();
            std::thread::spawn(move || work(port, q))
        };
        let mut seen: HashMap<Bytes, Vec<String>> = HashMap::new();
        let mut cursor = 0u64;
        let mut expected_seq = None;
        let mut reconnects = 0;
        let deadline = Instant::now() + Duration::from_secs(120 + task_count() as u64 / 2_000);
        let mut c = server.client();
        let mut since_reconnect = 0;
        let mut done = 0;
        while done < task_count() {
            assert!(Instant::now() < deadline, "events stopped coming");
            let from = cursor.to_string();
            let reply = c.cmd_args(&[
                b"TASK.EVENTS",
                queue.as_bytes(),
                b"FROM",
                from.as_bytes(),
                b"COUNT",
                b"10000",
                b"BLOCK",
                b"2000",
            ]);
            let Frame::Array(page) = reply else {
                panic!("events: {reply:?}")
            };
            let (Frame::Integer(next), Frame::Array(rows)) = (&page[0], &page[1]) else {
                panic!("a page: {page:?}")
            };
            for row in rows {
                let Frame::Array(fields) = row else { panic!() };
                let (Frame::Integer(seq), Frame::Bulk(id), Frame::Bulk(state)) =
                    (&fields[0], &fields[2], &fields[3])
                else {
                    panic!("an event: {fields:?}")
                };
                let seq = *seq as u64;
                assert_eq!(seq, expected_seq.unwrap_or(seq), "no gap, no repeat");
                expected_seq = Some(seq + 1);
                if &state[..] == b"done" {
                    done += 1;
                }
                seen.entry(id.clone())
                    .or_default()
                    .push(String::from_utf8_lossy(state).into_owned());
            }
            cursor = *next as u64;
            since_reconnect += rows.len();
            // The consumer "restarts": a new connection, resuming from its cursor.
            if since_reconnect >= 5_000 {
                c = server.client();
                reconnects += 1;
                since_reconnect = 0;
            }
        }
        producer.join().unwrap();
        worker.join().unwrap();
        assert_eq!(seen.len(), task_count());
        for (id, states) in &seen {
            assert_eq!(states, &["queued", "leased", "done"], "task {id:?}");
        }
        println!(
            "{shards} shards: {} events of {} tasks, {reconnects} consumer restarts",
            cursor - 1,
            task_count()
        );
        assert!(reconnects >= 5);
    }
}

#[test]
fn progress_logs_and_a_blocked_events_read() {
    each_server(|server| {
        let mut c = server.client();
        let queue = key_on("prog", 1);
        let Frame::Bulk(id) = c.cmd(&format!("TASK.SUBMIT {queue} work")) else {
            panic!()
        };
        // A blocked read wakes on the next event.
        let port = server.port;
        let q = queue.clone();
        let waiter = std::thread::spawn(move || {
            let mut w = Client::connect(port);
            w.cmd(&format!("TASK.EVENTS {q} FROM 2 BLOCK 10000"))
        });
        wait_blocked(server, 1);
        assert!(
            c.cmd_args(&[b"TASK.PROGRESS", &id, b"10%"]).is_error(),
            "not leased yet"
        );
        c.cmd(&format!("TASK.FETCH {queue}"));
        let Frame::Array(page) = waiter.join().unwrap() else {
            panic!()
        };
        let Frame::Array(rows) = &page[1] else {
            panic!()
        };
        let Frame::Array(first) = &rows[0] else {
            panic!()
        };
        assert_eq!((&first[0], &first[3]), (&int(2), &bulk("leased")));
        assert_eq!(c.cmd_args(&[b"TASK.PROGRESS", &id, b"10%"]), ok());
        assert_eq!(c.cmd_args(&[b"TASK.LOG", &id, b"step one"]), ok());
        assert_eq!(c.cmd_args(&[b"TASK.LOG", &id, b"step two"]), ok());
        let mut other = server.client();
        assert!(other.cmd_args(&[b"TASK.LOG", &id, b"not mine"]).is_error());
        assert_eq!(
            c.cmd_args(&[b"TASK.LOGS", &id]),
            array(vec![bulk("step one"), bulk("step two")])
        );
        let Frame::Array(task) = c.cmd_args(&[b"TASK.GET", &id]) else {
            panic!()
        };
        let progress = task.chunks(2).find(|p| p[0] == bulk("progress")).unwrap()[1].clone();
        assert_eq!(progress, bulk("10%"));
        let Frame::Array(page) = c.cmd(&format!("TASK.EVENTS {queue} FROM 3")) else {
            panic!()
        };
        let Frame::Array(rows) = &page[1] else {
            panic!()
        };
        let Frame::Array(ev) = &rows[0] else { panic!() };
        assert_eq!((&ev[3], &ev[5]), (&bulk("progress"), &bulk("10%")));
        // A timed-out block: an empty page, the cursor unchanged.
        assert_eq!(
            c.cmd(&format!("TASK.EVENTS {queue} FROM 99 BLOCK 100")),
            array(vec![int(99), array(vec![])])
        );
        assert!(c.cmd(&format!("TASK.EVENTS {queue} COUNT 0")).is_error());
        assert!(c.cmd(&format!("TASK.EVENTS {queue} FROM -1")).is_error());
        assert!(c.cmd_args(&[b"TASK.LOGS", b"nosuch"]).is_error());
    });
}
