//! A worker must not starve when its queue lives on another shard (../shared/repro/
//! cross-shard-fetch.py): under pipelined key-value load from many connections, two
//! workers (`TASK.FETCH q COUNT 50 BLOCK 200 ACK <previous>`) drain equal backlogs in two
//! queues with random names, on 2 and 4 shards. Each must finish within 2× the other's
//! time, and no lease may be lost. Before the fix, the worker whose queue lived on another
//! shard acknowledged each task in its own mesh round trip and made 20× fewer fetches.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Client, Server};
use wetask_protocol::Frame;

const BACKLOG: usize = 10_000;

/// Pipelined SET/GET/DEL from `connections` connections until `stop`.
fn key_value_load(
    port: u16,
    connections: usize,
    stop: Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<u64>> {
    (0..connections)
        .map(|n| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(port);
                let mut done = 0u64;
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let mut pipeline = Vec::new();
                    for _ in 0..8 {
                        let key = format!("kv:{n}:{}", i % 1000);
                        i += 1;
                        let command = match i % 3 {
                            0 => format!(
                                "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$5\r\nvalue\r\n",
                                key.len()
                            ),
                            1 => format!("*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len()),
                            _ => format!("*2\r\n$3\r\nDEL\r\n${}\r\n{key}\r\n", key.len()),
                        };
                        pipeline.extend_from_slice(command.as_bytes());
                    }
                    c.raw(&pipeline);
                    for _ in 0..8 {
                        if let Err(e) = c.try_read() {
                            // WETASK_TEST_HOLD_ON_HANG=1 keeps the server up to inspect.
                            if std::env::var_os("WETASK_TEST_HOLD_ON_HANG").is_some() {
                                eprintln!("HANG: no key-value reply in 10 s ({e}); holding");
                                std::thread::sleep(Duration::from_secs(600));
                            }
                            panic!("no key-value reply in 10 s: {e}");
                        }
                    }
                    done += 8;
                }
                done
            })
        })
        .collect()
}

fn submit_backlog(port: u16, queue: &str) {
    let mut c = Client::connect(port);
    for _ in 0..BACKLOG / 100 {
        let mut pipeline = Vec::new();
        for i in 0..100 {
            let payload = format!("p{i}");
            pipeline.extend_from_slice(
                format!(
                    "*3\r\n$11\r\nTASK.SUBMIT\r\n${}\r\n{queue}\r\n${}\r\n{payload}\r\n",
                    queue.len(),
                    payload.len()
                )
                .as_bytes(),
            );
        }
        c.raw(&pipeline);
        for _ in 0..100 {
            assert!(matches!(c.read(), Some(Frame::Bulk(_))));
        }
    }
}

/// Drains `queue` as the repro's worker does; returns how long it took.
fn worker(port: u16, queue: String) -> Duration {
    let mut c = Client::connect(port);
    c.stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let started = Instant::now();
    let mut previous: Vec<Vec<u8>> = Vec::new();
    let mut acked = 0;
    while acked < BACKLOG {
        let mut args: Vec<Vec<u8>> = ["TASK.FETCH", &queue, "COUNT", "50", "BLOCK", "200"]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        if !previous.is_empty() {
            args.push(b"ACK".to_vec());
            args.extend(previous.iter().cloned());
        }
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        acked += previous.len();
        c.send(&refs);
        let reply = c.try_read().unwrap_or_else(|e| {
            if std::env::var_os("WETASK_TEST_HOLD_ON_HANG").is_some() {
                eprintln!("HANG: no FETCH reply in 60 s ({e}); holding");
                std::thread::sleep(Duration::from_secs(600));
            }
            panic!("{queue}: no FETCH reply in 60 s: {e}")
        });
        let Some(Frame::Array(tasks)) = reply else {
            panic!("{queue}: FETCH failed: {reply:?}")
        };
        previous = tasks
            .into_iter()
            .map(|task| match task {
                Frame::Array(fields) => fields[0].as_bytes().expect("an id").to_vec(),
                other => panic!("not a task: {other:?}"),
            })
            .collect();
        if previous.is_empty() && acked >= BACKLOG {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{queue}: starved"
        );
    }
    // A clean worker acknowledges its last batch before it goes.
    for id in &previous {
        assert_eq!(c.cmd_args(&[b"TASK.ACK", id]), Frame::ok());
    }
    started.elapsed()
}

#[test]
fn workers_keep_up_whichever_shard_their_queue_lives_on() {
    for shards in ["2", "4"] {
        let server = Server::start(&["--shards", shards]);
        let port = server.port;
        let tag = fastrand::u32(..);
        let queues = [format!("fair-a-{tag}"), format!("fair-b-{tag}")];
        for queue in &queues {
            submit_backlog(port, queue);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let load = key_value_load(port, 16, stop.clone());
        let workers: Vec<_> = queues
            .iter()
            .map(|q| {
                let q = q.clone();
                std::thread::spawn(move || worker(port, q))
            })
            .collect();
        let times: Vec<Duration> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        stop.store(true, Ordering::Relaxed);
        let kv: u64 = load.into_iter().map(|l| l.join().unwrap()).sum();
        let (fast, slow) = (times[0].min(times[1]), times[0].max(times[1]));
        println!(
            "{shards} shards, queues {queues:?}: {times:?}, {kv} key-value commands meanwhile"
        );
        assert!(
            slow <= fast * 2 + Duration::from_millis(500),
            "{shards} shards: one worker took {slow:?}, the other {fast:?}"
        );
        let mut c = server.client();
        assert_eq!(
            common::info_field(&mut c, "tasks", "tasks_leases_lost"),
            0,
            "{shards} shards: a lease was lost"
        );
        assert!(kv > 0);
    }
}
