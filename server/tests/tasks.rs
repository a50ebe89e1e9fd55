//! TASK.* through the real server: the worker cycle, leases that expire or die with their
//! connection, retries into the dead set and a fallback queue on another shard, and errors.
//! Queues `{a}…` and `{b}…` live on different shards when there are two.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use wetask_protocol::Frame;

fn servers() -> Vec<Server> {
    vec![
        Server::start(&["--shards", "1"]),
        Server::start(&["--shards", "2"]),
        Server::start(&["--shards", "2", "--io", "glommio"]),
    ]
}

fn id_of(frame: Frame) -> Bytes {
    match frame {
        Frame::Bulk(id) => id,
        other => panic!("expected an id, got {other:?}"),
    }
}

/// FETCH's reply as (id, queue, payload, attempt, rest).
fn tasks_of(frame: Frame) -> Vec<(Bytes, Bytes, Bytes, i64, Vec<Frame>)> {
    let Frame::Array(items) = frame else {
        panic!("expected an array, got {frame:?}")
    };
    items
        .into_iter()
        .map(|item| {
            let Frame::Array(mut fields) = item else {
                panic!("expected a task array")
            };
            let rest = fields.split_off(4);
            let mut it = fields.into_iter();
            let (
                Some(Frame::Bulk(id)),
                Some(Frame::Bulk(queue)),
                Some(Frame::Bulk(payload)),
                Some(Frame::Integer(attempt)),
            ) = (it.next(), it.next(), it.next(), it.next())
            else {
                panic!("malformed task")
            };
            (id, queue, payload, attempt, rest)
        })
        .collect()
}

#[test]
fn worker_cycle_in_queue_order_with_fused_acks() {
    for server in servers() {
        let mut producer = server.client();
        let mut worker = server.client();
        let b1 = id_of(producer.cmd("TASK.SUBMIT {b}jobs one"));
        let a1 = id_of(producer.cmd("TASK.SUBMIT {a}jobs two"));
        let a2 = id_of(producer.cmd("TASK.SUBMIT {a}jobs three PRIORITY 9"));
        let got = tasks_of(worker.cmd("TASK.FETCH {a}jobs {b}jobs COUNT 10"));
        let ids: Vec<Bytes> = got.iter().map(|t| t.0.clone()).collect();
        assert_eq!(
            ids,
            vec![a2.clone(), a1.clone(), b1.clone()],
            "queue order, then priority"
        );
        assert_eq!(got[0].2, Bytes::from_static(b"three"));
        assert_eq!(got[0].3, 1);
        // One command per task: the next fetch acknowledges the previous ones.
        let mut line = b"TASK.FETCH {a}jobs {b}jobs ACK ".to_vec();
        line.extend_from_slice(&a2);
        line.push(b' ');
        line.extend_from_slice(&b1);
        let args: Vec<&[u8]> = line.split(|&c| c == b' ').collect();
        assert_eq!(worker.cmd_args(&args), Frame::Array(vec![]));
        assert_eq!(worker.cmd_args(&[b"TASK.ACK", &a1, b"RESULT", b"42"]), ok());
        let info = producer.cmd_args(&[b"TASK.GET", &a1]);
        assert_eq!(field(&info, "state"), bulk("done"));
        assert_eq!(field(&info, "result"), bulk("42"));
        assert_eq!(
            field(&producer.cmd_args(&[b"TASK.GET", &b1]), "state"),
            bulk("done")
        );
        let stats = producer.cmd("TASK.STATS {a}jobs");
        assert_eq!(field(&stats, "acked"), Frame::Integer(2));
        assert_eq!(field(&stats, "queued"), Frame::Integer(0));
        let Frame::Array(mut queues) = producer.cmd("TASK.QUEUES") else {
            panic!()
        };
        queues.sort_by_key(|q| format!("{q:?}"));
        assert_eq!(queues, vec![bulk("{a}jobs"), bulk("{b}jobs")]);
        let Frame::Bulk(info) = producer.cmd("INFO tasks") else {
            panic!("INFO replies a bulk string in RESP2")
        };
        let info = String::from_utf8_lossy(&info).to_string();
        assert!(
            info.contains("tasks_submitted:3\r\ntasks_acked:3\r\n"),
            "{info}"
        );
        assert!(
            info.contains("queue:{a}jobs:queued=0,scheduled=0,leased=0,dead=0"),
            "{info}"
        );
    }
}

#[test]
fn expired_leases_are_redelivered_and_stale_acks_refused() {
    for server in servers() {
        let mut producer = server.client();
        let mut slow = server.client();
        let mut fast = server.client();
        let id = id_of(producer.cmd("TASK.SUBMIT {b}q work"));
        let first = tasks_of(slow.cmd("TASK.FETCH {b}q LEASE 50"));
        assert_eq!(first[0].0, id);
        std::thread::sleep(Duration::from_millis(120));
        let second = tasks_of(fast.cmd("TASK.FETCH {b}q"));
        assert_eq!(
            (second[0].0.clone(), second[0].3),
            (id.clone(), 2),
            "redelivered, attempt 2"
        );
        let stale = slow.cmd_args(&[b"TASK.ACK", &id]);
        assert!(
            matches!(&stale, Frame::Error(e) if e.starts_with(b"ERR task is not leased")),
            "{stale:?}"
        );
        assert!(matches!(
            slow.cmd_args(&[b"TASK.EXTEND", &id, b"1000"]),
            Frame::Error(_)
        ));
        assert_eq!(fast.cmd_args(&[b"TASK.ACK", &id]), ok());
    }
}

#[test]
fn a_dead_workers_tasks_are_redelivered_at_once() {
    for server in servers() {
        let mut producer = server.client();
        let id = id_of(producer.cmd("TASK.SUBMIT {a}q work LEASE 60000"));
        let mut doomed = server.client();
        assert_eq!(tasks_of(doomed.cmd("TASK.FETCH {a}q"))[0].0, id);
        let mut other = server.client();
        drop(doomed);
        let start = Instant::now();
        let redelivered = loop {
            let got = tasks_of(other.cmd("TASK.FETCH {a}q"));
            if let Some(task) = got.into_iter().next() {
                break task;
            }
            assert!(start.elapsed() < Duration::from_secs(2), "not redelivered");
            std::thread::sleep(Duration::from_millis(1));
        };
        println!("redelivered after {:?}", start.elapsed());
        assert!(start.elapsed() < Duration::from_millis(500));
        assert_eq!((redelivered.0, redelivered.3), (id, 2));
    }
}

#[test]
fn failures_retry_then_die_into_a_fallback_on_another_shard() {
    for server in servers() {
        let mut c = server.client();
        let id = id_of(c.cmd("TASK.SUBMIT {a}q payload RETRIES 1 BACKOFF 10 FALLBACK {b}rescue"));
        tasks_of(c.cmd("TASK.FETCH {a}q"));
        let Frame::Array(outcome) = c.cmd_args(&[b"TASK.FAIL", &id, b"ERROR", b"boom"]) else {
            panic!()
        };
        assert_eq!(outcome[0], bulk("retry"));
        std::thread::sleep(Duration::from_millis(30));
        let again = tasks_of(c.cmd("TASK.FETCH {a}q"));
        assert_eq!(again[0].3, 2);
        let Frame::Array(outcome) = c.cmd_args(&[b"TASK.FAIL", &id, b"ERROR", b"boom 2"]) else {
            panic!()
        };
        assert_eq!(outcome, vec![bulk("dead")]);
        assert_eq!(
            c.cmd("TASK.DEAD {a}q"),
            Frame::Array(vec![Frame::Bulk(id.clone())])
        );
        let start = Instant::now();
        let rescue = loop {
            if let Some(task) = tasks_of(c.cmd("TASK.FETCH {b}rescue")).into_iter().next() {
                break task;
            }
            assert!(start.elapsed() < Duration::from_secs(2), "no fallback task");
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(rescue.2, Bytes::from_static(b"payload"));
        assert_eq!(
            rescue.4,
            vec![
                Frame::Bulk(id.clone()),
                bulk("{a}q"),
                bulk("boom 2"),
                Frame::Integer(2)
            ]
        );
        assert_eq!(c.cmd_args(&[b"TASK.REQUEUE", &id]), Frame::Integer(1));
        assert_eq!(tasks_of(c.cmd("TASK.FETCH {a}q"))[0].3, 1);
    }
}

#[test]
fn task_errors_are_clear_and_harmless() {
    for server in servers() {
        let mut c = server.client();
        assert_eq!(c.cmd("TASK.ACK {a}nope"), err("ERR no such task"));
        assert_eq!(c.cmd("TASK.GET {a}nope"), Frame::Null);
        assert_eq!(c.cmd("TASK.SUBMIT q p BOGUS 1"), err("ERR syntax error"));
        assert_eq!(
            c.cmd("TASK.SUBMIT q p RETRIES -1"),
            err("ERR RETRIES must be zero or positive")
        );
        assert_eq!(
            c.cmd("TASK.SUBMIT q p DELAY x"),
            err("ERR value is not an integer or out of range")
        );
        assert_eq!(
            c.cmd("TASK.SUBMIT q"),
            err("ERR wrong number of arguments for 'task.submit' command")
        );
        assert_eq!(
            c.cmd("TASK.FETCH q COUNT 0"),
            err("ERR COUNT must be 1..1000")
        );
        assert_eq!(c.cmd("TASK.FETCH q ACK"), err("ERR syntax error"));
        assert_eq!(c.cmd("TASK.FETCH q ACK {a}nope"), err("ERR no such task"));
        let id = id_of(c.cmd("TASK.SUBMIT q p"));
        assert_eq!(
            c.cmd_args(&[b"TASK.ACK", &id]),
            err("ERR task is not leased to this client (the lease expired or moved)")
        );
        assert_eq!(c.cmd_args(&[b"TASK.CANCEL", &id]), ok());
        assert_eq!(
            c.cmd_args(&[b"TASK.CANCEL", &id]),
            err("ERR task already finished")
        );
        assert_eq!(c.cmd("TASK.FETCH q"), Frame::Array(vec![]));
        assert_eq!(c.cmd("PING"), Frame::simple("PONG"));
    }
}

#[test]
fn a_blocked_fetch_wakes_on_whichever_queue_gets_work() {
    for server in servers() {
        let port = server.port;
        let waiter = std::thread::spawn(move || {
            let mut worker = Client::connect(port);
            let start = Instant::now();
            let got = tasks_of(worker.cmd("TASK.FETCH {a}q {b}q BLOCK 5000"));
            (got, start.elapsed())
        });
        std::thread::sleep(Duration::from_millis(100));
        let mut producer = server.client();
        let id = id_of(producer.cmd("TASK.SUBMIT {b}q wake-up"));
        let (got, waited) = waiter.join().unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, id);
        assert!(waited < Duration::from_secs(2), "woke after {waited:?}");
        // Nothing else was leased on the way: the other shard let go.
        let stats = producer.cmd("TASK.STATS {a}q");
        assert_eq!(field(&stats, "leased"), Frame::Integer(0));
    }
}

#[test]
fn a_blocked_fetch_times_out_empty() {
    for server in servers() {
        let mut worker = server.client();
        let start = Instant::now();
        assert_eq!(
            worker.cmd("TASK.FETCH {a}q {b}q BLOCK 150"),
            Frame::Array(vec![])
        );
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(150), "{waited:?}");
        assert!(waited < Duration::from_secs(2), "{waited:?}");
        assert_eq!(worker.cmd("PING"), Frame::simple("PONG"));
    }
}

/// A blocked fetch holds its connection: what the client sends while it waits runs after
/// the fetch's reply, in order (on one shard the fetch parks with no task: `Reply::Direct`).
/// The fused ACK counts, and an idle `timeout` spares the waiting client.
#[test]
fn commands_sent_during_a_blocked_fetch_run_after_its_reply() {
    for (n, server) in servers().into_iter().enumerate() {
        let mut producer = server.client();
        assert_eq!(producer.cmd("CONFIG SET timeout 1"), ok());
        let first = id_of(producer.cmd("TASK.SUBMIT {a}q first"));
        let mut worker = server.client();
        let got = tasks_of(worker.cmd("TASK.FETCH {a}q BLOCK 5000"));
        assert_eq!(got[0].0, first);
        let ack: &[u8] = &first;
        worker.send(&[b"TASK.FETCH", b"{a}q", b"BLOCK", b"5000", b"ACK", ack]);
        wait_blocked(&server, 1);
        worker.send(&[b"PING"]);
        worker.send(&[b"ECHO", b"after"]);
        // Past the idle timeout: a blocked client is not idle (the producer is).
        std::thread::sleep(Duration::from_millis(1500));
        let mut producer = server.client();
        let second = id_of(producer.cmd("TASK.SUBMIT {a}q second"));
        let got = tasks_of(worker.read().expect("the fetch's reply"));
        assert_eq!(got.len(), 1, "server #{n}");
        assert_eq!(got[0].0, second, "server #{n}");
        assert_eq!(worker.read(), Some(Frame::simple("PONG")), "server #{n}");
        assert_eq!(worker.read(), Some(bulk("after")), "server #{n}");
        let stats = producer.cmd("TASK.STATS {a}q");
        assert_eq!(field(&stats, "acked"), Frame::Integer(1), "server #{n}");
        assert_eq!(field(&stats, "leased"), Frame::Integer(1), "server #{n}");
        // Nothing is left parked, and the connection goes on.
        worker.send(&[b"TASK.FETCH", b"{a}q", b"BLOCK", b"100"]);
        assert_eq!(worker.read(), Some(Frame::Array(vec![])), "server #{n}");
        assert_eq!(worker.cmd("PING"), Frame::simple("PONG"));
    }
}

#[test]
fn a_worker_that_disconnects_while_blocked_takes_nothing_with_it() {
    for (n, server) in servers().into_iter().enumerate() {
        println!("server #{n}");
        let mut blocked = server.client();
        blocked.send(&[b"TASK.FETCH", b"{a}q", b"{b}q", b"BLOCK", b"0"]);
        std::thread::sleep(Duration::from_millis(50));
        drop(blocked);
        std::thread::sleep(Duration::from_millis(50));
        let mut producer = server.client();
        let id = id_of(producer.cmd("TASK.SUBMIT {a}q after"));
        let start = Instant::now();
        let task = loop {
            if let Some(task) = tasks_of(producer.cmd("TASK.FETCH {a}q")).into_iter().next() {
                break task;
            }
            assert!(
                start.elapsed() < Duration::from_secs(2),
                "the task was never offered"
            );
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(task.0, id);
        // Every path notices the hang-up while the fetch is blocked: the task was never
        // leased to the departed client, so this is its first attempt.
        assert_eq!(task.3, 1, "server #{n}: attempt {}", task.3);
    }
}

/// Many blocked workers over queues on both shards, a producer feeding both: every task is
/// delivered exactly once and acknowledged.
#[test]
fn blocked_workers_share_the_work_without_duplicates() {
    for server in servers() {
        let port = server.port;
        let workers: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(move || {
                    let mut c = Client::connect(port);
                    let mut seen = Vec::new();
                    let mut previous: Vec<Bytes> = Vec::new();
                    loop {
                        let mut args: Vec<&[u8]> = vec![
                            b"TASK.FETCH",
                            b"{a}q",
                            b"{b}q",
                            b"COUNT",
                            b"3",
                            b"BLOCK",
                            b"300",
                        ];
                        if !previous.is_empty() {
                            args.push(b"ACK");
                            args.extend(previous.iter().map(|id| &id[..]));
                        }
                        let got = tasks_of(c.cmd_args(&args));
                        if got.is_empty() {
                            return seen;
                        }
                        previous = got.iter().map(|t| t.0.clone()).collect();
                        seen.extend(previous.iter().cloned());
                    }
                })
            })
            .collect();
        let mut producer = server.client();
        let mut submitted = Vec::new();
        for i in 0..200 {
            let queue = if i % 2 == 0 { "{a}q" } else { "{b}q" };
            submitted.push(id_of(producer.cmd(&format!("TASK.SUBMIT {queue} t{i}"))));
            if i % 50 == 0 {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let mut seen: Vec<Bytes> = workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect();
        seen.sort();
        let unique = seen.len();
        seen.dedup();
        assert_eq!(unique, seen.len(), "a task was delivered twice");
        submitted.sort();
        assert_eq!(seen, submitted, "every task delivered");
        for queue in ["{a}q", "{b}q"] {
            let stats = producer.cmd(&format!("TASK.STATS {queue}"));
            assert_eq!(field(&stats, "acked"), Frame::Integer(100), "{queue}");
            assert_eq!(field(&stats, "leased"), Frame::Integer(0), "{queue}");
        }
    }
}

#[test]
fn wait_returns_when_the_task_finishes() {
    for server in servers() {
        let mut producer = server.client();
        for queue in ["{a}w", "{b}w"] {
            let id = id_of(producer.cmd(&format!("TASK.SUBMIT {queue} job")));
            let port = server.port;
            let waited_id = id.clone();
            let waiter = std::thread::spawn(move || {
                let mut c = Client::connect(port);
                c.cmd_args(&[b"TASK.WAIT", &waited_id, b"TIMEOUT", b"5000"])
            });
            std::thread::sleep(Duration::from_millis(50));
            let mut worker = server.client();
            let got = tasks_of(worker.cmd(&format!("TASK.FETCH {queue}")));
            assert_eq!(
                worker.cmd_args(&[b"TASK.ACK", &got[0].0, b"RESULT", b"ok!"]),
                ok()
            );
            let finished = waiter.join().unwrap();
            assert_eq!(field(&finished, "state"), bulk("done"));
            assert_eq!(field(&finished, "result"), bulk("ok!"));
            // Already finished: at once.
            assert_eq!(
                field(&producer.cmd_args(&[b"TASK.WAIT", &id]), "state"),
                bulk("done")
            );
        }
        let pending = id_of(producer.cmd("TASK.SUBMIT {a}w later"));
        let start = Instant::now();
        assert_eq!(
            producer.cmd_args(&[b"TASK.WAIT", &pending, b"TIMEOUT", b"100"]),
            Frame::Null
        );
        assert!(start.elapsed() >= Duration::from_millis(100));
        assert_eq!(producer.cmd("TASK.WAIT {a}nope"), err("ERR no such task"));
        assert_eq!(producer.cmd("TASK.WAIT {b}nope"), err("ERR no such task"));
        assert_eq!(
            producer.cmd_args(&[b"TASK.WAIT", &pending, b"TIMEOUT"]),
            err("ERR syntax error")
        );
    }
}

/// Every SUBMIT, FETCH, FAIL, LIMIT and admin option over the wire, on every server kind.
#[test]
fn every_option_over_the_wire() {
    for server in servers() {
        let mut c = server.client();
        let now_ms = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64
        };
        // ID (gets the queue's tag), PRIORITY, DELAY, AT.
        let custom = id_of(c.cmd("TASK.SUBMIT {a}o one ID mine PRIORITY -1"));
        assert!(custom.ends_with(b"mine"));
        assert_eq!(
            c.cmd("TASK.SUBMIT {a}o dup ID mine"),
            err("ERR task id already exists")
        );
        let high = id_of(c.cmd("TASK.SUBMIT {a}o two PRIORITY 5"));
        let delayed = id_of(c.cmd("TASK.SUBMIT {a}o later DELAY 150"));
        let at = now_ms() + 150;
        let timed = id_of(c.cmd(&format!("TASK.SUBMIT {{a}}o at AT {at}")));
        let got: Vec<Bytes> = tasks_of(c.cmd("TASK.FETCH {a}o COUNT 10"))
            .into_iter()
            .map(|t| t.0)
            .collect();
        assert_eq!(
            got,
            vec![high.clone(), custom.clone()],
            "priority first; delayed ones wait"
        );
        assert_eq!(
            field(&c.cmd_args(&[b"TASK.GET", &delayed]), "state"),
            bulk("scheduled")
        );
        std::thread::sleep(Duration::from_millis(200));
        let got: Vec<Bytes> = tasks_of(c.cmd("TASK.FETCH {a}o COUNT 10"))
            .into_iter()
            .map(|t| t.0)
            .collect();
        assert_eq!(got, vec![delayed.clone(), timed.clone()]);
        // LEASE on submit, EXTEND.
        let leased = id_of(c.cmd("TASK.SUBMIT {b}o p LEASE 300"));
        tasks_of(c.cmd("TASK.FETCH {b}o"));
        let until = c.cmd_args(&[b"TASK.EXTEND", &leased, b"60000"]);
        assert!(
            matches!(until, Frame::Integer(ms) if ms as u64 > now_ms() + 50_000),
            "{until:?}"
        );
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(
            c.cmd_args(&[b"TASK.ACK", &leased]),
            ok(),
            "the extension kept the lease"
        );
        // TTL: dies when not finished in time.
        let doomed = id_of(c.cmd("TASK.SUBMIT {b}o p TTL 50"));
        std::thread::sleep(Duration::from_millis(120));
        let info = c.cmd_args(&[b"TASK.GET", &doomed]);
        assert_eq!(field(&info, "state"), bulk("dead"));
        assert_eq!(field(&info, "error"), bulk("TTL expired"));
        // UNIQUE … FOR.
        let first = id_of(c.cmd("TASK.SUBMIT {b}u p UNIQUE k FOR 100000"));
        assert_eq!(id_of(c.cmd("TASK.SUBMIT {b}u q UNIQUE k")), first);
        // FAIL … RETRYIN and NORETRY.
        let flaky = id_of(c.cmd("TASK.SUBMIT {a}f p"));
        tasks_of(c.cmd("TASK.FETCH {a}f"));
        let Frame::Array(outcome) = c.cmd_args(&[b"TASK.FAIL", &flaky, b"RETRYIN", b"0"]) else {
            panic!()
        };
        assert_eq!(outcome[0], bulk("retry"));
        tasks_of(c.cmd("TASK.FETCH {a}f"));
        assert_eq!(
            c.cmd_args(&[b"TASK.FAIL", &flaky, b"NORETRY"]),
            Frame::Array(vec![bulk("dead")])
        );
        assert_eq!(
            c.cmd_args(&[b"TASK.FAIL", &flaky, b"NORETRY"]),
            err("ERR task already finished")
        );
        // REQUEUE by queue, CANCEL of a queued task.
        assert_eq!(c.cmd("TASK.REQUEUE {a}f"), Frame::Integer(1));
        assert_eq!(c.cmd_args(&[b"TASK.CANCEL", &flaky]), ok());
        // PAUSE / RESUME.
        c.cmd("TASK.SUBMIT {b}p p");
        assert_eq!(c.cmd("TASK.PAUSE {b}p"), ok());
        assert_eq!(c.cmd("TASK.FETCH {b}p"), Frame::Array(vec![]));
        assert_eq!(
            field(&c.cmd("TASK.STATS {b}p"), "paused"),
            Frame::Integer(1)
        );
        assert_eq!(c.cmd("TASK.RESUME {b}p"), ok());
        assert_eq!(tasks_of(c.cmd("TASK.FETCH {b}p")).len(), 1);
        // LIMIT CONCURRENCY and RATE.
        for i in 0..6 {
            c.cmd(&format!("TASK.SUBMIT {{a}}l t{i}"));
        }
        let limits = c.cmd("TASK.LIMIT {a}l CONCURRENCY 2");
        assert_eq!(field(&limits, "concurrency"), Frame::Integer(2));
        assert_eq!(tasks_of(c.cmd("TASK.FETCH {a}l COUNT 5")).len(), 2);
        let limits = c.cmd("TASK.LIMIT {a}l CONCURRENCY NONE RATE 1 PER 100000");
        assert_eq!(field(&limits, "concurrency"), Frame::Null);
        assert_eq!(field(&limits, "rate"), Frame::Integer(1));
        assert_eq!(tasks_of(c.cmd("TASK.FETCH {a}l COUNT 5")).len(), 1);
        assert_eq!(tasks_of(c.cmd("TASK.FETCH {a}l COUNT 5")).len(), 0);
        assert_eq!(
            c.cmd("TASK.LIMIT {a}l RATE 0 PER 5"),
            err("ERR RATE must be positive")
        );
        assert_eq!(c.cmd("TASK.LIMIT {a}l BOGUS"), err("ERR syntax error"));
        assert_eq!(
            field(&c.cmd("TASK.LIMIT {a}l RATE NONE"), "rate"),
            Frame::Null
        );
        assert_eq!(tasks_of(c.cmd("TASK.FETCH {a}l COUNT 5")).len(), 3);
    }
}

/// Blocked task commands are answered when what they wait for ends badly too: a TASK.WAIT
/// when its task is cancelled or dies, a blocked TASK.FETCH when its paused queue resumes
/// with work in it; each exactly once, with the queue on this shard and on another.
#[test]
fn blocked_task_commands_are_answered_when_their_task_fails() {
    for server in servers() {
        let mut producer = server.client();
        for queue in ["{a}f", "{b}f"] {
            let wait_for = |id: &Bytes| {
                let (port, id) = (server.port, id.clone());
                std::thread::spawn(move || {
                    let mut c = Client::connect(port);
                    c.cmd_args(&[b"TASK.WAIT", &id, b"TIMEOUT", b"10000"])
                })
            };
            let cancelled = id_of(producer.cmd(&format!("TASK.SUBMIT {queue} job DELAY 60000")));
            let waiter = wait_for(&cancelled);
            wait_blocked(&server, 1);
            assert_eq!(producer.cmd_args(&[b"TASK.CANCEL", &cancelled]), ok());
            assert_eq!(field(&waiter.join().unwrap(), "state"), bulk("cancelled"));

            let dying = id_of(producer.cmd(&format!("TASK.SUBMIT {queue} job RETRIES 0")));
            let waiter = wait_for(&dying);
            wait_blocked(&server, 1);
            let mut worker = server.client();
            let got = tasks_of(worker.cmd(&format!("TASK.FETCH {queue}")));
            assert_eq!(got[0].0, dying);
            assert_eq!(
                worker.cmd_args(&[b"TASK.FAIL", &dying, b"ERROR", b"boom"]),
                array(vec![bulk("dead")])
            );
            assert_eq!(field(&waiter.join().unwrap(), "state"), bulk("dead"));

            assert_eq!(producer.cmd(&format!("TASK.PAUSE {queue}")), ok());
            let mut fetcher = server.client();
            fetcher.send(&[b"TASK.FETCH", queue.as_bytes(), b"BLOCK", b"10000"]);
            wait_blocked(&server, 1);
            let queued = id_of(producer.cmd(&format!("TASK.SUBMIT {queue} after-pause")));
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(producer.cmd(&format!("TASK.RESUME {queue}")), ok());
            let got = tasks_of(fetcher.read().expect("the fetch is answered"));
            assert_eq!(got.len(), 1);
            assert_eq!(got[0].0, queued);
            assert_eq!(fetcher.cmd_args(&[b"TASK.ACK", &queued]), ok());
        }
    }
}
