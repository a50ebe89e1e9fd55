//! TASK.CRON on the engine: one task per tick whoever defines the schedule, made up after an
//! outage (bounded), carried through a snapshot, and kept when the schedule is defined again.

use bytes::Bytes;

use super::engine::*;
use super::model::*;

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn set(e: &mut Engine, name: &str, spec: &str, now: u64) -> Result<bool, String> {
    e.cron_set(
        name.as_bytes(),
        spec.as_bytes(),
        b"q",
        b("tick"),
        SubmitOptions::default(),
        now,
    )
}

/// The ids of every task in `q`, drained by fetching.
fn drain(e: &mut Engine, now: u64) -> Vec<Bytes> {
    let mut ids = Vec::new();
    loop {
        let got = e.fetch(&[b("q")], 1000, None, 1, now);
        if got.is_empty() {
            return ids;
        }
        for task in got {
            e.ack(&task.id, 1, None, now).unwrap();
            ids.push(task.id);
        }
    }
}

#[test]
fn one_task_per_tick_however_often_the_schedule_is_defined() {
    let mut e = Engine::new(600_000);
    assert_eq!(set(&mut e, "beat", "@every 100ms", 1_050), Ok(true));
    let mut now = 1_050;
    for step in 0..50 {
        now += 20;
        // Three clients keep defining it.
        if step % 3 == 0 {
            assert_eq!(set(&mut e, "beat", "@every 100ms", now), Ok(false));
        }
        e.advance(now);
    }
    // now = 2050: ticks at 1100, 1200, ..., 2000.
    let ids = drain(&mut e, now);
    let mut ticks: Vec<String> = ids
        .iter()
        .map(|id| {
            String::from_utf8_lossy(id)
                .rsplit(':')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    ticks.sort();
    let expected: Vec<String> = (11..=20).map(|t| (t * 100).to_string()).collect();
    assert_eq!(ticks, expected);
    let entry = e.crons().next().unwrap();
    assert_eq!(
        (entry.fired, entry.skipped, entry.last_fired_ms),
        (10, 0, Some(2000))
    );
    e.check_invariants();
}

#[test]
fn missed_ticks_are_made_up_but_only_the_last_hundred() {
    let mut e = Engine::new(600_000);
    set(&mut e, "beat", "@every 10ms", 0).unwrap();
    e.advance(55);
    assert_eq!(drain(&mut e, 55).len(), 5);
    // An outage of 10 s: 1000 ticks missed, the last 100 made up.
    e.advance(10_055);
    assert_eq!(drain(&mut e, 10_055).len(), CRON_CATCHUP_MAX as usize + 1);
    let entry = e.crons().next().unwrap();
    assert_eq!(entry.next_ms, Some(10_060));
    assert_eq!(entry.skipped, 899);
    e.check_invariants();
}

#[test]
fn a_snapshot_carries_schedules_and_their_place() {
    let mut e = Engine::new(600_000);
    set(&mut e, "beat", "@every 100ms", 0).unwrap();
    let options = SubmitOptions {
        priority: 4,
        retries: 1,
        ..SubmitOptions::default()
    };
    e.cron_set(b"daily", b"0 3 * * *", b"q", b("report"), options, 0)
        .unwrap();
    e.advance(250);
    let mut loaded = super::tests::reloaded(&e);
    loaded.check_invariants();
    let names: Vec<(Bytes, Option<u64>, u64)> = loaded
        .crons()
        .map(|c| (c.name.clone(), c.next_ms, c.fired))
        .collect();
    assert_eq!(
        names,
        vec![
            (b("beat"), Some(300), 2),
            (b("daily"), Some(3 * 3_600_000), 0)
        ]
    );
    assert_eq!(loaded.crons().nth(1).unwrap().options.priority, 4);
    loaded.advance(300);
    assert_eq!(
        drain(&mut loaded, 300).len(),
        3,
        "two from before, the 300 ms tick"
    );
}

#[test]
fn redefining_with_another_schedule_restarts_it_and_bad_ones_are_refused() {
    let mut e = Engine::new(600_000);
    set(&mut e, "c", "@every 1s", 0).unwrap();
    assert_eq!(e.crons().next().unwrap().next_ms, Some(1000));
    set(&mut e, "c", "@every 300ms", 100).unwrap();
    assert_eq!(e.crons().next().unwrap().next_ms, Some(300));
    assert!(set(&mut e, "c", "* * *", 100).is_err());
    assert!(set(&mut e, "bad", "@every 1ms", 100).is_err());
    assert!(e.cron_del(b"c").is_some());
    assert!(e.cron_del(b"c").is_none());
    e.advance(10_000);
    assert!(drain(&mut e, 10_000).is_empty());
    e.check_invariants();
}
