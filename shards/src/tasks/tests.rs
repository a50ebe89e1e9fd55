//! The engine's rules, one test each, and a model proptest of random interleavings. Kept
//! whole: the rules and the model check one engine together, and a test file is read one
//! test at a time.

use bytes::Bytes;
use proptest::prelude::*;

use super::engine::*;
use super::model::*;
use crate::slot::key_slot;

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn engine() -> Engine {
    Engine::new(RETENTION_MS_DEFAULT)
}

fn submit(e: &mut Engine, queue: &str, payload: &str, now: u64) -> Bytes {
    e.submit(queue.as_bytes(), b(payload), SubmitOptions::default(), now)
        .expect("submit")
        .0
}

/// The engine as a snapshot of it loads (with the default retention times).
pub(super) fn reloaded(e: &Engine) -> Engine {
    let mut parts = Vec::new();
    e.export(&mut |part| parts.push(Bytes::copy_from_slice(part)));
    let mut loaded = Engine::new(600_000);
    for part in parts {
        loaded.import_part(part).unwrap();
    }
    loaded.finish_import().unwrap();
    loaded
}

const W1: u64 = 1;
const W2: u64 = 2;

#[test]
fn a_callers_id_in_the_form_of_ours_is_never_reused() {
    let mut e = engine();
    let first = submit(&mut e, "q", "auto", 0);
    // The id the next automatic one would take: "{tag}" and the next hex number.
    let next = format!(
        "{}2",
        std::str::from_utf8(&first[..first.len() - 1]).unwrap()
    );
    let options = SubmitOptions {
        id: Some(b(&next)),
        ..SubmitOptions::default()
    };
    let (custom, _) = e.submit(b"q", b("custom"), options, 0).unwrap();
    assert_eq!(custom, b(&next));
    let auto = submit(&mut e, "q", "auto again", 0);
    assert_ne!(auto, custom);
    assert_eq!(&e.get(&custom).unwrap().payload[..], b"custom");
    assert_eq!(&e.get(&auto).unwrap().payload[..], b"auto again");
    assert_eq!(e.len(), 3);
}

/// Ids we make skip the ones callers took in our form, and go on in sequence otherwise (a
/// replayed journal makes the same ids); past the highest caller's number they need no
/// lookup. No id is made twice, and a snapshot carries the rule.
#[test]
fn callers_ids_in_our_form_keep_the_ids_we_make_clear() {
    let mut e = engine();
    let first = submit(&mut e, "q", "auto", 0);
    let tag = std::str::from_utf8(&first[..first.len() - 1])
        .unwrap()
        .to_owned();
    let mut ids = std::collections::HashSet::new();
    ids.insert(first);
    let far = SubmitOptions {
        id: Some(b(&format!("{tag}ff"))),
        ..SubmitOptions::default()
    };
    ids.insert(e.submit(b"q", b("custom"), far, 0).unwrap().0);
    let next = submit(&mut e, "q", "auto", 0);
    assert_eq!(
        next,
        b(&format!("{tag}2")),
        "the sequence goes on, not past ff"
    );
    ids.insert(next);
    for custom in [
        "fe",
        "0100",
        "fffffffffffffffe",
        "ffffffffffffffff",
        "x1",
        "7fffffff",
    ] {
        let options = SubmitOptions {
            id: Some(b(&format!("{tag}{custom}"))),
            ..SubmitOptions::default()
        };
        let (id, _) = e.submit(b"q", b("custom"), options, 0).unwrap();
        assert!(ids.insert(id), "{custom}");
        for _ in 0..300 {
            assert!(ids.insert(submit(&mut e, "q", "auto", 0)), "after {custom}");
        }
        let mut again = reloaded(&e);
        for _ in 0..300 {
            let id = submit(&mut again, "q", "auto", 0);
            assert!(!ids.contains(&id), "a restored engine made {id:?} again");
        }
    }
    assert_eq!(e.len(), ids.len());
    // A caller's id just ahead of the counter, then a restart: the restored engine skips it.
    let mut f = engine();
    submit(&mut f, "q", "auto", 0);
    let ahead = SubmitOptions {
        id: Some(b(&format!("{tag}3"))),
        ..SubmitOptions::default()
    };
    f.submit(b"q", b("custom"), ahead, 0).unwrap();
    let mut again = reloaded(&f);
    let made: Vec<Bytes> = (0..2).map(|_| submit(&mut again, "q", "auto", 0)).collect();
    assert_eq!(made, [b(&format!("{tag}2")), b(&format!("{tag}4"))]);
}

#[test]
fn ids_route_to_their_queue_slot() {
    let mut e = engine();
    let id = submit(&mut e, "emails", "x", 0);
    assert_eq!(key_slot(&id), key_slot(b"emails"));
    let custom = SubmitOptions {
        id: Some(b("job-7")),
        ..SubmitOptions::default()
    };
    let (id, _) = e.submit(b"emails", b("x"), custom.clone(), 0).unwrap();
    assert_eq!(key_slot(&id), key_slot(b"emails"));
    assert!(id.ends_with(b"job-7"));
    assert_eq!(
        e.submit(b"emails", b("x"), custom, 0),
        Err(TaskError::IdExists)
    );
}

#[test]
fn fetch_is_strict_queue_order_then_priority_then_fifo() {
    let mut e = engine();
    let low = submit(&mut e, "b", "low", 0);
    let high = e
        .submit(
            b"b",
            b("high"),
            SubmitOptions {
                priority: 5,
                ..Default::default()
            },
            0,
        )
        .unwrap()
        .0;
    let a1 = submit(&mut e, "a", "a1", 0);
    let a2 = submit(&mut e, "a", "a2", 0);
    let got: Vec<Bytes> = e
        .fetch(&[b("a"), b("b")], 10, None, W1, 0)
        .into_iter()
        .map(|l| l.id)
        .collect();
    assert_eq!(got, vec![a1, a2, high, low]);
    assert!(e.fetch(&[b("a"), b("b")], 10, None, W2, 0).is_empty());
}

#[test]
fn ack_finishes_and_keeps_the_result_for_the_retention_time() {
    let mut e = Engine::new(1000);
    let id = submit(&mut e, "q", "p", 0);
    let leased = e.fetch(&[b("q")], 1, None, W1, 0);
    assert_eq!(leased[0].attempt, 1);
    assert_eq!(
        e.ack(&id, W2, None, 1),
        Err(TaskError::NotLeased),
        "another client"
    );
    e.ack(&id, W1, Some(b("42")), 1).unwrap();
    assert!(e.get(&id).unwrap().state.is_done());
    assert_eq!(e.get(&id).unwrap().result().cloned(), Some(b("42")));
    assert_eq!(e.ack(&id, W1, None, 2), Err(TaskError::Finished));
    e.advance(1000);
    assert!(e.get(&id).is_some());
    e.advance(1001);
    assert!(e.get(&id).is_none(), "forgotten after the retention time");
    assert!(e.is_empty());
}

#[test]
fn an_expired_lease_requeues_at_the_head_counts_an_attempt_and_stales_the_old_ack() {
    let mut e = engine();
    let first = submit(&mut e, "q", "1", 0);
    let second = submit(&mut e, "q", "2", 0);
    e.fetch(&[b("q")], 1, Some(100), W1, 0);
    e.advance(100);
    assert_eq!(e.get(&first).unwrap().state, State::Queued);
    let again = e.fetch(&[b("q")], 1, None, W2, 100);
    assert_eq!(
        again[0].id, first,
        "back at the head, before the second task"
    );
    assert_eq!(again[0].attempt, 2);
    assert_eq!(e.ack(&first, W1, None, 101), Err(TaskError::NotLeased));
    assert_eq!(e.extend(&first, W1, 1000, 101), Err(TaskError::NotLeased));
    e.ack(&first, W2, None, 101).unwrap();
    assert_eq!(e.fetch(&[b("q")], 1, None, W1, 102)[0].id, second);
    assert_eq!(e.totals().leases_lost, 1);
}

#[test]
fn extend_moves_the_lease_expiry() {
    let mut e = engine();
    let id = submit(&mut e, "q", "p", 0);
    e.fetch(&[b("q")], 1, Some(100), W1, 0);
    assert_eq!(e.extend(&id, W1, 500, 50), Ok(550));
    e.advance(549);
    assert!(matches!(e.get(&id).unwrap().state, State::Leased { .. }));
    e.advance(550);
    assert_eq!(e.get(&id).unwrap().state, State::Queued);
}

#[test]
fn unlease_hands_back_undelivered_tasks_without_counting_an_attempt() {
    let mut e = engine();
    let first = submit(&mut e, "q", "1", 0);
    let second = submit(&mut e, "q", "2", 0);
    let ids: Vec<Bytes> = e
        .fetch(&[b("q")], 2, None, W1, 0)
        .into_iter()
        .map(|l| l.id)
        .collect();
    assert_eq!(
        e.unlease(&ids[1..], W2, 0),
        0,
        "only the holder can hand back"
    );
    assert_eq!(e.unlease(&ids[1..], W1, 0), 1);
    let again = e.fetch(&[b("q")], 1, None, W2, 0);
    assert_eq!((again[0].id.clone(), again[0].attempt), (second, 1));
    assert!(matches!(e.get(&first).unwrap().state, State::Leased { .. }));
    e.check_invariants();
}

#[test]
fn a_closed_connection_requeues_its_tasks_at_once() {
    let mut e = engine();
    let id = submit(&mut e, "q", "p", 0);
    e.fetch(&[b("q")], 1, None, W1, 0);
    assert_eq!(e.release_owner(W1, 5), 1);
    assert_eq!(e.get(&id).unwrap().state, State::Queued);
    assert_eq!(e.fetch(&[b("q")], 1, None, W2, 5)[0].attempt, 2);
}

#[test]
fn failures_retry_with_backoff_then_die_and_submit_the_fallback() {
    let mut e = engine();
    let options = SubmitOptions {
        retries: 1,
        backoff_base_ms: 100,
        fallback: Some(b("rescue")),
        ..SubmitOptions::default()
    };
    let (id, _) = e.submit(b"q", b("payload"), options, 0).unwrap();
    e.fetch(&[b("q")], 1, None, W1, 0);
    let outcome = e
        .fail(&id, W1, Some(b("boom")), Retry::Backoff, 10)
        .unwrap();
    let FailOutcome::RetryAt(at) = outcome else {
        panic!("{outcome:?}")
    };
    assert!(
        (85..=110).contains(&at),
        "backoff 100 ms less up to 25% jitter: {at}"
    );
    assert!(e.fetch(&[b("q")], 1, None, W1, at - 1).is_empty());
    assert_eq!(e.fetch(&[b("q")], 1, None, W1, at)[0].attempt, 2);
    assert_eq!(
        e.fail(&id, W1, Some(b("boom 2")), Retry::Backoff, at + 1),
        Ok(FailOutcome::Dead)
    );
    assert_eq!(e.dead(b"q"), vec![id.clone()]);
    let fallbacks = e.take_fallbacks();
    assert_eq!(fallbacks.len(), 1);
    let rescue = e.submit_fallback(fallbacks[0].clone(), at + 1).unwrap();
    let leased = e.fetch(&[b("rescue")], 1, None, W2, at + 1);
    assert_eq!(leased[0].id, rescue);
    assert_eq!(leased[0].payload, b("payload"));
    let origin = leased[0].origin.clone().unwrap();
    assert_eq!(
        (origin.id, origin.error, origin.attempts),
        (id, Some(b("boom 2")), 2)
    );
    let totals = e.totals();
    assert_eq!(
        (totals.failed, totals.retried, totals.dead, totals.fallbacks),
        (2, 1, 1, 1)
    );
}

#[test]
fn noretry_and_retryin() {
    let mut e = engine();
    let id = submit(&mut e, "q", "p", 0);
    e.fetch(&[b("q")], 1, None, W1, 0);
    assert_eq!(
        e.fail(&id, W1, None, Retry::In(5), 0),
        Ok(FailOutcome::RetryAt(5))
    );
    e.fetch(&[b("q")], 1, None, W1, 5);
    assert_eq!(
        e.fail(&id, W1, None, Retry::Never, 6),
        Ok(FailOutcome::Dead)
    );
    e.requeue(&id, 7).unwrap();
    assert!(e.dead(b"q").is_empty());
    let leased = e.fetch(&[b("q")], 1, None, W1, 7);
    assert_eq!(
        leased[0].attempt, 1,
        "a requeued dead task starts its attempts again"
    );
    assert_eq!(e.requeue(&id, 8), Err(TaskError::NotDead));
}

#[test]
fn delays_deadlines_and_cancel() {
    let mut e = engine();
    let delayed = e
        .submit(
            b"q",
            b("later"),
            SubmitOptions {
                due_ms: Some(100),
                ..Default::default()
            },
            0,
        )
        .unwrap()
        .0;
    assert!(e.fetch(&[b("q")], 1, None, W1, 99).is_empty());
    let doomed = e
        .submit(
            b"q",
            b("ttl"),
            SubmitOptions {
                deadline_ms: Some(50),
                ..Default::default()
            },
            0,
        )
        .unwrap()
        .0;
    e.advance(50);
    assert!(e.get(&doomed).unwrap().state.is_dead());
    assert_eq!(
        e.get(&doomed).unwrap().last_error().cloned(),
        Some(b("TTL expired"))
    );
    e.cancel(&delayed, 60).unwrap();
    assert_eq!(e.cancel(&delayed, 61), Err(TaskError::Finished));
    assert!(e.fetch(&[b("q")], 1, None, W1, 200).is_empty());
    assert_eq!(e.cancel(b"nope", 0), Err(TaskError::NoSuchTask));
}

#[test]
fn unique_returns_the_live_task_or_the_one_inside_its_window() {
    let mut e = engine();
    let unique = |window| SubmitOptions {
        unique: Some((b("user-1"), window)),
        ..SubmitOptions::default()
    };
    let (first, created) = e.submit(b"q", b("a"), unique(1000), 0).unwrap();
    assert!(created);
    assert_eq!(
        e.submit(b"q", b("b"), unique(1000), 10).unwrap(),
        (first.clone(), false)
    );
    e.fetch(&[b("q")], 1, None, W1, 10);
    e.ack(&first, W1, None, 20).unwrap();
    assert_eq!(
        e.submit(b"q", b("c"), unique(1000), 999).unwrap(),
        (first.clone(), false)
    );
    let (later, created) = e.submit(b"q", b("d"), unique(1000), 1000).unwrap();
    assert!(created && later != first);
    assert!(
        e.submit(b"other", b("e"), unique(1000), 1000).unwrap().1,
        "per queue"
    );
}

#[test]
fn pause_concurrency_and_rate_limits() {
    let mut e = engine();
    for i in 0..10 {
        submit(&mut e, "q", &i.to_string(), 0);
    }
    e.set_paused(b"q", true);
    assert!(e.fetch(&[b("q")], 5, None, W1, 0).is_empty());
    e.set_paused(b"q", false);
    e.set_limits(b"q", Some(2), None);
    assert_eq!(e.fetch(&[b("q")], 5, None, W1, 0).len(), 2);
    assert!(e.fetch(&[b("q")], 5, None, W2, 0).is_empty());
    e.set_limits(b"q", None, Some((3, 100)));
    assert_eq!(e.fetch(&[b("q")], 5, None, W1, 0).len(), 3);
    assert!(e.fetch(&[b("q")], 5, None, W1, 99).is_empty());
    assert_eq!(e.fetch(&[b("q")], 5, None, W1, 100).len(), 3);
    let stats = e.queue_stats(b"q", 100).unwrap();
    assert_eq!((stats.queued, stats.leased), (2, 8));
    assert_eq!(stats.oldest_age_ms, 100);
}

#[test]
fn the_in_flight_limit_holds_back_leases_and_is_reported() {
    let mut e = engine();
    e.set_in_flight_max(2);
    for i in 0..3 {
        submit(&mut e, "q", &i.to_string(), 0);
    }
    assert_eq!(e.fetch(&[b("q")], 5, None, W1, 0).len(), 2);
    assert!(e.fetch(&[b("q")], 5, None, W1, 0).is_empty());
    assert_eq!(e.in_flight_full(&[b("other"), b("q")]), Some(&b("q")));
    e.release_owner(W1, 1);
    assert_eq!(e.in_flight_full(&[b("q")]), None);
}

#[test]
fn limits_are_enforced() {
    let mut e = engine();
    let huge = Bytes::from(vec![0u8; PAYLOAD_BYTES_MAX + 1]);
    assert_eq!(
        e.submit(b"q", huge.clone(), SubmitOptions::default(), 0),
        Err(TaskError::TooLarge("payload"))
    );
    let long = vec![b'q'; NAME_BYTES_MAX + 1];
    assert_eq!(
        e.submit(&long, b("p"), SubmitOptions::default(), 0),
        Err(TaskError::TooLarge("queue name"))
    );
    let id = submit(&mut e, "q", "p", 0);
    e.fetch(&[b("q")], 1, None, W1, 0);
    assert_eq!(
        e.ack(&id, W1, Some(huge), 0),
        Err(TaskError::TooLarge("result"))
    );
}

/// One step of the model proptest.
#[derive(Clone, Debug)]
enum Op {
    Submit {
        queue: u8,
        retries: u32,
        delay: Option<u64>,
        group: Option<u8>,
    },
    GroupLimits {
        queue: u8,
        concurrency: Option<u32>,
        rate: Option<(u32, u64)>,
    },
    Fetch {
        worker: u64,
        queues: Vec<u8>,
        count: usize,
        lease: u64,
    },
    Ack {
        worker: u64,
        pick: usize,
    },
    Fail {
        worker: u64,
        pick: usize,
        never: bool,
    },
    Extend {
        worker: u64,
        pick: usize,
        ms: u64,
    },
    Cancel {
        pick: usize,
    },
    Requeue {
        pick: usize,
    },
    Disconnect {
        worker: u64,
    },
    Advance {
        ms: u64,
    },
    Snooze {
        worker: u64,
        pick: usize,
        ms: u64,
    },
    Quiet {
        worker: u64,
        on: bool,
    },
    Purge {
        queue: u8,
        state: u8,
    },
    Restart,
    /// A batch of `children` new tasks in queue q<queue>, with a held callback in q<9>.
    Batch {
        queue: u8,
        children: u8,
    },
}

/// The states TASK.PURGE takes (leased ones are refused before the engine).
const PURGEABLE: [Listed; 5] = [
    Listed::Queued,
    Listed::Scheduled,
    Listed::Dead,
    Listed::Done,
    Listed::Cancelled,
];

fn op() -> impl Strategy<Value = Op> {
    let worker = 1u64..4;
    prop_oneof![
        3 => (0u8..3, 0u32..3, proptest::option::weighted(0.2, 1u64..50), proptest::option::weighted(0.4, 0u8..3))
            .prop_map(|(queue, retries, delay, group)| Op::Submit { queue, retries, delay, group }),
        1 => (0u8..3, proptest::option::of(1u32..3), proptest::option::of((1u32..4, 1u64..30)))
            .prop_map(|(queue, concurrency, rate)| Op::GroupLimits { queue, concurrency, rate }),
        3 => (worker.clone(), proptest::collection::vec(0u8..3, 1..3), 1usize..4, 1u64..60)
            .prop_map(|(worker, queues, count, lease)| Op::Fetch { worker, queues, count, lease }),
        2 => (worker.clone(), any::<usize>()).prop_map(|(worker, pick)| Op::Ack { worker, pick }),
        1 => (worker.clone(), any::<usize>(), any::<bool>())
            .prop_map(|(worker, pick, never)| Op::Fail { worker, pick, never }),
        1 => (worker.clone(), any::<usize>(), 1u64..60)
            .prop_map(|(worker, pick, ms)| Op::Extend { worker, pick, ms }),
        1 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Requeue { pick }),
        1 => worker.clone().prop_map(|worker| Op::Disconnect { worker }),
        2 => (1u64..40).prop_map(|ms| Op::Advance { ms }),
        1 => (worker.clone(), any::<usize>(), 0u64..30)
            .prop_map(|(worker, pick, ms)| Op::Snooze { worker, pick, ms }),
        1 => (worker, any::<bool>()).prop_map(|(worker, on)| Op::Quiet { worker, on }),
        1 => (0u8..3, 0u8..5).prop_map(|(queue, state)| Op::Purge { queue, state }),
        1 => Just(Op::Restart),
        1 => (0u8..3, 1u8..5).prop_map(|(queue, children)| Op::Batch { queue, children }),
    ]
}

proptest! {
    /// Random interleavings of every operation against a simple model: no task is lost, none
    /// is leased to two workers at once, a quiet worker leases nothing, a snooze spends no
    /// attempt, and every task ends done, dead (failures, spent retries, lost-lease
    /// quarantine) or cancelled, counted once, unless purged first; and a batch's callback
    /// stays held until the last of its children ended, then is released once (every
    /// child's end heard twice).
    #[test]
    // Long: one randomized scenario against a model, its steps in one match so each reads beside the check that follows it.
    fn engine_keeps_every_task_and_leases_each_to_one_worker(ops in proptest::collection::vec(op(), 1..200)) {
        // Retention far beyond the test's clock: finished tasks stay inspectable.
        let mut e = Engine::new(u64::MAX / 4);
        let mut now = 0u64;
        let mut ids: Vec<Bytes> = Vec::new();
        // The model: which worker holds which task, per our own bookkeeping of replies.
        let mut held: std::collections::HashMap<Bytes, u64> = Default::default();
        let mut finished: std::collections::HashMap<Bytes, State> = Default::default();
        let mut requeued = 0u64;
        let mut submitted = 0u64;
        // Lives ended by a purge rather than a terminal state.
        let mut purged_live = 0u64;
        let mut quiet: std::collections::HashSet<u64> = Default::default();
        // (name, children, callback id, times fired)
        let mut batches: Vec<(String, Vec<Bytes>, Bytes, u32)> = Vec::new();
        // A batch counts a child's first end: one REQUEUEd after it may live again.
        let mut revived: std::collections::HashSet<Bytes> = Default::default();
        for op in ops {
            match op {
                Op::GroupLimits { queue, concurrency, rate } => {
                    e.set_group_limits(&[b'q', queue], concurrency, rate);
                }
                Op::Submit { queue, retries, delay, group } => {
                    let options = SubmitOptions {
                        retries,
                        backoff_base_ms: 5,
                        due_ms: delay.map(|d| now + d),
                        group: group.map(|g| Bytes::copy_from_slice(&[b'g', g])),
                        ..SubmitOptions::default()
                    };
                    let (id, created) = e.submit(&[b'q', queue], b("p"), options, now).unwrap();
                    prop_assert!(created);
                    ids.push(id);
                    submitted += 1;
                }
                Op::Fetch { worker, queues, count, lease } => {
                    let names: Vec<Bytes> = queues.iter().map(|q| Bytes::copy_from_slice(&[b'q', *q])).collect();
                    let before: std::collections::HashMap<Bytes, State> =
                        ids.iter().map(|id| (id.clone(), e.get(id).unwrap().state.clone())).collect();
                    let leased = e.fetch(&names, count, Some(lease), worker, now);
                    prop_assert!(leased.is_empty() || !quiet.contains(&worker), "a quiet worker leased");
                    for leased in leased {
                        let was = &before[&leased.id];
                        prop_assert!(!was.is_terminal(), "a finished task was leased");
                        prop_assert!(
                            !matches!(was, State::Leased { until_ms, .. } if *until_ms > now),
                            "a task leased to a live worker was leased again"
                        );
                        held.insert(leased.id.clone(), worker);
                    }
                }
                Op::Ack { worker, pick } if !ids.is_empty() => {
                    let id = ids[pick % ids.len()].clone();
                    let holds = matches!(e.get(&id).unwrap().state, State::Leased { owner, .. } if owner == worker);
                    let result = e.ack(&id, worker, None, now);
                    prop_assert_eq!(result.is_ok(), holds, "ack by holder succeeds, others fail");
                    if holds {
                        let first = finished.insert(id.clone(), State::Done { finished_ms: now }).is_none();
                        prop_assert!(first, "finished twice");
                        held.remove(&id);
                    }
                }
                Op::Fail { worker, pick, never } if !ids.is_empty() => {
                    let id = ids[pick % ids.len()].clone();
                    let holds = matches!(e.get(&id).unwrap().state, State::Leased { owner, .. } if owner == worker);
                    let retry = if never { Retry::Never } else { Retry::Backoff };
                    let result = e.fail(&id, worker, None, retry, now);
                    prop_assert_eq!(result.is_ok(), holds);
                    held.remove(&id);
                    if result == Ok(FailOutcome::Dead) {
                        let first = finished.insert(id.clone(), State::Dead { finished_ms: now }).is_none();
                        prop_assert!(first, "finished twice");
                    }
                }
                Op::Extend { worker, pick, ms } if !ids.is_empty() => {
                    let id = ids[pick % ids.len()].clone();
                    let holds = matches!(e.get(&id).unwrap().state, State::Leased { owner, until_ms } if owner == worker && until_ms > now);
                    prop_assert_eq!(e.extend(&id, worker, ms, now).is_ok(), holds);
                }
                Op::Cancel { pick } if !ids.is_empty() => {
                    let id = ids[pick % ids.len()].clone();
                    let live = !e.get(&id).unwrap().state.is_terminal();
                    prop_assert_eq!(e.cancel(&id, now).is_ok(), live);
                    if live {
                        let first = finished.insert(id.clone(), State::Cancelled { finished_ms: now }).is_none();
                        prop_assert!(first, "finished twice");
                        held.remove(&id);
                    }
                }
                Op::Requeue { pick } if !ids.is_empty() => {
                    let id = ids[pick % ids.len()].clone();
                    let dead = e.get(&id).unwrap().state.is_dead();
                    prop_assert_eq!(e.requeue(&id, now).is_ok(), dead);
                    if dead {
                        finished.remove(&id);
                        requeued += 1;
                        revived.insert(id.clone());
                    }
                }
                Op::Disconnect { worker } => {
                    e.release_owner(worker, now);
                    held.retain(|_, w| *w != worker);
                }
                Op::Advance { ms } => {
                    now += ms;
                    e.advance(now);
                }
                Op::Snooze { worker, pick, ms } if !ids.is_empty() => {
                    let id = ids[pick % ids.len()].clone();
                    let task = e.get(&id).unwrap();
                    let holds = matches!(task.state, State::Leased { owner, .. } if owner == worker);
                    let attempts = task.attempts;
                    let result = e.fail(&id, worker, None, Retry::Snooze(ms), now);
                    prop_assert_eq!(result.is_ok(), holds);
                    if holds {
                        prop_assert_eq!(result, Ok(FailOutcome::SnoozedUntil(now + ms)));
                        prop_assert_eq!(e.get(&id).unwrap().attempts, attempts - 1, "a snooze spends no attempt");
                        held.remove(&id);
                    }
                }
                Op::Quiet { worker, on } => {
                    e.set_quiet(worker, on);
                    if on {
                        quiet.insert(worker);
                    } else {
                        quiet.remove(&worker);
                    }
                }
                Op::Purge { queue, state } => {
                    let listed = PURGEABLE[state as usize];
                    let name = [b'q', queue];
                    // PURGE sees the states as of now: a task snoozed or delayed until now is
                    // queued by then (the model counted it as scheduled without this).
                    e.advance(now);
                    let before: Vec<(Bytes, bool)> = ids
                        .iter()
                        .filter(|id| {
                            let task = e.get(id).unwrap();
                            task.queue == name[..] && Listed::parse(task.state.name().as_bytes()) == Some(listed)
                        })
                        .map(|id| (id.clone(), e.get(id).unwrap().state.is_terminal()))
                        .collect();
                    prop_assert_eq!(e.purge(&name, listed, now), before.len());
                    for (id, terminal) in before {
                        prop_assert!(e.get(&id).is_none(), "a purged task is gone");
                        ids.retain(|known| *known != id);
                        finished.remove(&id);
                        if !terminal {
                            purged_live += 1;
                        }
                    }
                }
                Op::Restart => {
                    e.release_all(now);
                    held.clear();
                }
                Op::Batch { queue, children } => {
                    let name = format!("b{}", batches.len());
                    let callback = SubmitOptions { hold: true, ..SubmitOptions::default() };
                    let (cb, _) = e.submit(&[b'q', 9], b("callback"), callback, now).unwrap();
                    ids.push(cb.clone());
                    submitted += 1;
                    let mut kids = Vec::new();
                    for _ in 0..children {
                        let options = SubmitOptions {
                            batch: Some(b(&name)),
                            backoff_base_ms: 5,
                            ..SubmitOptions::default()
                        };
                        let (id, _) = e.submit(&[b'q', queue], b("child"), options, now).unwrap();
                        kids.push(id.clone());
                        ids.push(id);
                        submitted += 1;
                    }
                    prop_assert_eq!(e.batch_open(name.as_bytes(), kids.clone(), None, Some(cb.clone()), None, now), Ok(true));
                    batches.push((name, kids, cb, 0u32));
                }
                _ => {}
            }
            // The batches' home hears of its children's ends (here, the same engine); a note
            // heard twice counts once.
            let notes = e.take_batch_notes();
            for note in notes.iter().chain(notes.iter()) {
                for (id, release) in e.batch_note(note, now) {
                    let batch = batches.iter_mut().find(|b| b.2 == id).expect("a known callback");
                    prop_assert_eq!(release, Order::Release);
                    batch.3 += 1;
                    // (Unless a user cancelled or purged the callback meanwhile.)
                    let was_held = e.get(&id).is_some_and(|t| t.state == State::Held);
                    prop_assert_eq!(e.release_held(&id, now).unwrap_or(false), was_held);
                }
            }
            for (name, kids, cb, fired) in &batches {
                let all_ended = kids
                    .iter()
                    .all(|k| revived.contains(k) || e.get(k).is_none_or(|t| t.state.is_terminal()));
                let batch_fired = e.batch(name.as_bytes()).is_some_and(|b| b.fired_ms.is_some());
                prop_assert!(*fired <= 1, "a batch fired twice");
                if batch_fired {
                    prop_assert!(all_ended, "batch {} fired before its last child", name);
                } else {
                    let state = e.get(cb).map(|t| t.state.clone());
                    prop_assert!(
                        matches!(state, None | Some(State::Held | State::Cancelled { .. })),
                        "a callback ran early: {:?}", state
                    );
                }
            }
            e.check_invariants();
            // Deaths by lost leases happen inside the engine: learn them from its state.
            for id in &ids {
                let state = e.get(id).expect("no task is lost").state.clone();
                if state.is_terminal() {
                    let recorded = finished.entry(id.clone()).or_insert(state.clone());
                    prop_assert_eq!(&*recorded, &state, "a finished task changed state");
                }
            }
        }
        // Drain: keep fetching and acking (with time passing) until every task is finished.
        for round in 0..1000u64 {
            now += 100;
            for worker in 1..4 {
                e.release_owner(worker, now);
            }
            for note in e.take_batch_notes() {
                for (id, _) in e.batch_note(&note, now) {
                    let _ = e.release_held(&id, now);
                }
            }
            let names: Vec<Bytes> = [0u8, 1, 2, 9].iter().map(|q| Bytes::copy_from_slice(&[b'q', *q])).collect();
            for leased in e.fetch(&names, 100, Some(1000), 9, now) {
                e.ack(&leased.id, 9, None, now).unwrap();
            }
            if ids.iter().all(|id| e.get(id).unwrap().state.is_terminal()) {
                break;
            }
            prop_assert!(round < 999, "tasks never finished");
        }
        let totals = e.totals();
        let terminal = ids.iter().filter(|id| e.get(id).unwrap().state.is_terminal()).count() as u64;
        prop_assert_eq!(terminal, ids.len() as u64);
        // A requeued dead task lives again, so it reaches a terminal state once more.
        prop_assert_eq!(
            totals.acked + totals.dead + totals.cancelled,
            submitted + requeued - purged_live,
            "each life counted once (unless purged before it ended)"
        );
        prop_assert_eq!(totals.submitted, submitted);
    }
}
