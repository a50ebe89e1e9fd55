//! The cross-shard replay rule (`cross_commit`), checked on the pure shard: parts are
//! marked in the journal, held back until their operation is known to have committed, and a
//! part left open at the end is replayed or rolled back whole.

use bytes::Bytes;
use proptest::prelude::*;

use crate::persist::journal::ops::{self, Op};
use crate::persist::journal::record;
use crate::shard::cross_commit::{token, Replay};
use crate::shard::durable_tests::keyspace;
use crate::Shard;

fn run(shard: &mut Shard, line: &str) {
    let args: Vec<Bytes> = line
        .split(' ')
        .map(|w| Bytes::copy_from_slice(w.as_bytes()))
        .collect();
    let spec = crate::lookup(&args[0]).expect("in the table");
    shard.execute(0, 0, spec, &args);
}

fn journaling() -> Shard {
    let mut shard = Shard::new(0);
    shard.set_journaling(true);
    shard.set_clock(1_000);
    shard
}

/// The operations of a journal file, in order.
fn ops_of(file: &[u8]) -> Vec<Op> {
    let (records, end) = record::read_all(file);
    assert_eq!(end, record::Next::End);
    records
        .into_iter()
        .flat_map(|p| ops::read_ops(Bytes::copy_from_slice(p)).expect("decodes"))
        .collect()
}

/// Replays `ops` into a fresh shard; returns it and what was left open.
fn replay(ops: Vec<Op>) -> (Shard, Option<crate::shard::cross_commit::OpenPart>) {
    let mut shard = Shard::new(0);
    let mut replay = Replay::default();
    for op in ops {
        replay.op(&mut shard, op).expect("replays");
    }
    (shard, replay.finish())
}

fn has(shard: &mut Shard, key: &str) -> bool {
    shard.clone_entry(0, key.as_bytes()).is_some()
}

const T: u64 = 1 << 48 | 7;

#[test]
fn a_part_and_its_end_are_marked_and_an_idle_tag_writes_nothing() {
    let mut shard = journaling();
    shard.set_cross_tag(Some(T));
    let mut file = Vec::new();
    assert!(!shard.take_journal(&mut file), "a tag alone is no record");
    assert!(!shard.wrote_part(T));
    run(&mut shard, "set a 1");
    assert!(shard.wrote_part(T));
    shard.set_cross_tag(None);
    run(&mut shard, "set b 1");
    assert!(shard.take_journal(&mut file));
    let ops = ops_of(&file);
    assert_eq!(ops.len(), 4, "{ops:?}");
    assert_eq!(ops[0], Op::Part { token: T });
    assert!(matches!(ops[1], Op::Cmd { .. }));
    assert_eq!(ops[2], Op::PartEnd);
    assert!(matches!(ops[3], Op::Cmd { .. }));
}

#[test]
fn what_the_shard_did_after_a_part_commits_it() {
    let mut shard = journaling();
    shard.set_cross_tag(Some(T));
    run(&mut shard, "set a 1");
    shard.set_cross_tag(None);
    run(&mut shard, "set b 1");
    let mut file = Vec::new();
    shard.take_journal(&mut file);
    let (mut copy, open) = replay(ops_of(&file));
    assert!(open.is_none());
    assert!(has(&mut copy, "a") && has(&mut copy, "b"));
}

#[test]
fn a_part_at_the_end_is_held_back_then_rolled_back_or_replayed() {
    for committed in [false, true] {
        let mut shard = journaling();
        run(&mut shard, "set before 1");
        shard.set_cross_tag(Some(T));
        run(&mut shard, "set a 1");
        run(&mut shard, "rpush l x y");
        let mut file = Vec::new();
        shard.take_journal(&mut file);
        let (mut copy, open) = replay(ops_of(&file));
        assert!(has(&mut copy, "before"));
        assert!(!has(&mut copy, "a"), "held back until resolved");
        let open = open.expect("left open");
        assert_eq!(
            (open.token, open.coordinator(), open.operations()),
            (T, 1, 2)
        );
        assert!(open.committed(Some(T)) && !open.committed(Some(T + 1)) && !open.committed(None));
        open.resolve(&mut copy, committed).expect("resolves");
        assert_eq!(has(&mut copy, "a"), committed);
        assert_eq!(has(&mut copy, "l"), committed);
        // The outcome is journaled first, so the next load decides the same.
        copy.finish_replay(2_000, true);
        run(&mut copy, "set after 1");
        let mut more = Vec::new();
        copy.take_journal(&mut more);
        let outcome = ops_of(&more).remove(0);
        let expected = if committed {
            Op::PartEnd
        } else {
            Op::Abort { token: T }
        };
        assert_eq!(outcome, expected);
        let mut whole = file.clone();
        whole.extend_from_slice(&more);
        let (mut again, open) = replay(ops_of(&whole));
        assert!(open.is_none());
        assert_eq!(has(&mut again, "a"), committed);
        assert!(has(&mut again, "after") && has(&mut again, "before"));
    }
}

#[test]
fn the_coordinators_commit_ends_its_own_part() {
    let mut shard = journaling();
    shard.set_cross_tag(Some(T));
    run(&mut shard, "set a 1");
    shard.log_cross_commit(T, &[0, 1]);
    let mut file = Vec::new();
    shard.take_journal(&mut file);
    let (mut copy, open) = replay(ops_of(&file));
    assert!(open.is_none());
    assert!(has(&mut copy, "a"));
    assert_eq!(copy.last_commit_with(1), Some(T));
    assert_eq!(copy.last_commit_with(0), Some(T));
    assert_eq!(copy.last_commit_with(2), None);
    // An operation that journaled nothing commits nothing.
    shard.log_cross_commit(T + 1, &[]);
    assert_eq!(shard.last_commit_with(1), Some(T));
}

#[test]
fn a_commit_inside_a_rolled_back_part_still_counts() {
    // This shard coordinated U (whose parts are elsewhere) while T held its lock.
    let u = token(0, 9);
    let mut shard = journaling();
    shard.set_cross_tag(Some(T));
    run(&mut shard, "set a 1");
    shard.log_cross_commit(u, &[1]);
    let mut file = Vec::new();
    shard.take_journal(&mut file);
    let (mut copy, open) = replay(ops_of(&file));
    open.expect("T left open")
        .resolve(&mut copy, false)
        .expect("resolves");
    assert!(!has(&mut copy, "a"));
    assert_eq!(copy.last_commit_with(1), Some(u));
}

#[test]
fn last_commits_survive_a_snapshot_and_tokens_restart_past_them() {
    let mut shard = journaling();
    shard.log_cross_commit(token(0, 41), &[1, 2]);
    shard.log_cross_commit(token(0, 40), &[2]);
    let mut parts = Vec::new();
    shard.export_snapshot(&mut |p| parts.push(p.to_vec()));
    let mut loaded = Shard::new(0);
    for part in parts {
        loaded
            .import_snapshot_part(Bytes::from(part))
            .expect("loads");
    }
    loaded.finish_snapshot().expect("indexes");
    assert_eq!(loaded.last_commit_with(1), Some(token(0, 41)));
    assert_eq!(loaded.last_commit_with(2), Some(token(0, 40)));
    assert_eq!(loaded.newest_commit_count(), 41);
}

const TEMPLATES: &[&str] = &[
    "set K M",
    "incr K",
    "del K",
    "rpush K M M",
    "lpop K",
    "lmove K L left right",
    "sadd K M M",
    "spop K",
    "hset K M M",
    "zadd K 3 M",
    "rename K L",
    "expire K 5",
    "task.submit q M",
];

fn random_command(shard: &mut Shard, rng: &mut fastrand::Rng) {
    let line: Vec<String> = TEMPLATES[rng.usize(..TEMPLATES.len())]
        .split(' ')
        .map(|w| match w {
            "K" | "L" => format!("k{}", rng.u8(0..4)),
            "M" => format!("m{}", rng.u8(0..5)),
            w => w.to_string(),
        })
        .collect();
    run(shard, &line.join(" "));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random turns, some under random cross-shard tags: every part but the last is
    /// committed by what follows it. The last, left open, comes back whole or not at all.
    #[test]
    fn an_open_part_comes_back_whole_or_not_at_all(seed in any::<u64>(), turns in 1usize..40) {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut shard = journaling();
        let mut file = Vec::new();
        let mut count = 0;
        for _ in 0..turns {
            let tag = rng.bool().then(|| { count += 1; token(1, count) });
            shard.set_cross_tag(tag);
            for _ in 0..rng.usize(0..4) {
                random_command(&mut shard, &mut rng);
            }
            shard.take_journal(&mut file);
        }
        let before = keyspace(&mut shard);
        count += 1;
        shard.set_cross_tag(Some(token(1, count)));
        // The part journals something, whatever the random commands do.
        run(&mut shard, "set last-part 1");
        for _ in 0..rng.usize(0..4) {
            random_command(&mut shard, &mut rng);
        }
        shard.take_journal(&mut file);
        let after = keyspace(&mut shard);
        for committed in [false, true] {
            let (mut copy, open) = replay(ops_of(&file));
            open.expect("the last part is open")
                .resolve(&mut copy, committed)
                .expect("resolves");
            let got = keyspace(&mut copy);
            prop_assert_eq!(&got, if committed { &after } else { &before });
        }
    }
}
