//! The journal's promise, checked on the pure shard: replaying what a shard journaled, in a
//! fresh shard, gives the same keys, values, positions and tasks, for random mixes of
//! commands (random draws included), task lifecycles and the passage of time.

use bytes::Bytes;
use proptest::prelude::*;

use crate::keyspace::{ScanFilter, DATABASES};
use crate::persist::journal::{ops, record};
use crate::Shard;

fn args(line: &str) -> Vec<Bytes> {
    line.split(' ')
        .map(|w| Bytes::copy_from_slice(w.as_bytes()))
        .collect()
}

/// Command templates: `K`/`L` are keys, `M` a member, `N` a small number.
const TEMPLATES: &[&str] = &[
    "set K M",
    "set K M px N",
    "incr K",
    "incrbyfloat K 1.5",
    "append K M",
    "del K",
    "expire K N",
    "rpush K M M",
    "lpop K",
    "lmove K L left right",
    "hset K M M",
    "hdel K M",
    "sadd K M M M",
    "spop K",
    "spop K N",
    "srem K M",
    "smove K L M",
    "zadd K N M",
    "zincrby K 2 M",
    "zpopmin K",
    "xadd K * f M",
    "xtrim K maxlen N",
    "rename K L",
    "sunionstore K K L",
    "setbit K N 1",
    "bitfield K incrby u8 N N set i4 0 N",
    "bitop xor K K L",
    "pfadd K M M",
    "pfmerge K L",
    "geoadd K 13.361389 38.115556 M 15.087269 37.502669 M",
    "georadius K 15 37 200 km store L",
    "sort K alpha desc limit 0 3 store L",
    "task.submit q M",
    "task.submit q M delay N",
    "task.submit r M retries 2 backoff 5",
    "task.submit q M unique K 30",
    "task.submit r M ttl N",
    "task.submit r M fallback q",
    "task.requeue r",
    "task.pause q",
    "task.resume q",
    "task.limit r rate 2 per 20",
    "task.submit q M lostmax 1",
    "task.purge q dead",
    "task.purge r queued",
    "task.delqueue r force",
    "task.cron set M @every N q M",
    "task.cron set M @every 30 r M priority 2",
    "task.cron del M",
    "task.submit q M hold",
    "task.submit r M batch M",
    "task.batch M on-complete q M children r M q M",
];

fn fill(template: &str, seed: &mut fastrand::Rng) -> Vec<Bytes> {
    let line: Vec<String> = template
        .split(' ')
        .map(|w| match w {
            "K" | "L" => format!("k{}", seed.u8(0..4)),
            "M" => format!("m{}", seed.u8(0..6)),
            "N" => seed.u8(1..50).to_string(),
            w => w.to_string(),
        })
        .collect();
    args(&line.join(" "))
}

/// Every key of every database with its entry, comparable.
pub(crate) fn keyspace(shard: &mut Shard) -> Vec<String> {
    let mut out = Vec::new();
    for db in 0..DATABASES {
        let (_, mut keys) = shard.scan(db, 0, usize::MAX >> 1, &ScanFilter::default());
        keys.sort();
        for key in keys {
            out.push(format!("{db} {key:?} {:?}", shard.clone_entry(db, &key)));
        }
    }
    out
}

/// Everything observable about a shard, comparable.
fn state(shard: &mut Shard) -> Vec<String> {
    let mut out = keyspace(shard);
    for id in shard.tasks.task_ids() {
        out.push(format!("{:?}", shard.tasks.get(&id)));
    }
    for q in shard.tasks.queue_names() {
        // The latency histograms and the recent fetchers are metrics since the start,
        // never journaled.
        let stats = shard.tasks.queue_stats(&q, shard.now_ms()).map(|s| {
            let unjournaled = Default::default();
            crate::tasks::QueueStats {
                waiting_ms: unjournaled,
                running_ms: Default::default(),
                workers: 0,
                ..s
            }
        });
        out.push(format!("{q:?} {stats:?}"));
    }
    out
}

fn replayed(file: &[u8]) -> Shard {
    replay_into(Shard::new(0), file)
}

fn replay_into(mut shard: Shard, file: &[u8]) -> Shard {
    let (records, end) = record::read_all(file);
    assert_eq!(end, record::Next::End);
    for payload in records {
        for op in ops::read_ops(Bytes::copy_from_slice(payload)).expect("decodes") {
            shard.replay(op).expect("replays");
        }
    }
    shard
}

/// A TASK.FETCH of up to two tasks by a random client; what it leased joins `leased`.
fn fetch_some(shard: &mut Shard, rng: &mut fastrand::Rng, leased: &mut Vec<(u64, Bytes)>) {
    let client = rng.u64(1..4);
    let queues = [Bytes::from_static(b"q"), Bytes::from_static(b"r")];
    let Ok(frames) = shard.task_fetch(&queues, 2, Some(rng.u64(5..60)), client) else {
        return;
    };
    for f in frames {
        if let wetask_protocol::Frame::Array(fields) = f {
            if let Some(wetask_protocol::Frame::Bulk(id)) = fields.into_iter().next() {
                leased.push((client, id));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn replay_rebuilds_the_same_shard(seed in any::<u64>(), steps in 20usize..200) {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut shard = Shard::new(0);
        shard.set_journaling(true);
        let mut now = 1_000_000u64;
        let mut file = Vec::new();
        let mut leased: Vec<(u64, Bytes)> = Vec::new();
        // A snapshot taken at a random turn boundary, and where the journal stood then.
        let snapshot_at = rng.usize(0..steps);
        let mut snapshot: Option<(Vec<Vec<u8>>, usize)> = None;
        for step in 0..steps {
            if step == snapshot_at {
                shard.take_journal(&mut file);
                let mut parts = Vec::new();
                shard.export_snapshot(&mut |p| parts.push(p.to_vec()));
                snapshot = Some((parts, file.len()));
            }
            now += rng.u64(0..40);
            shard.set_clock(now);
            shard.task_advance();
            match rng.u8(0..10) {
                0 => fetch_some(&mut shard, &mut rng, &mut leased),
                1 if !leased.is_empty() => {
                    let (client, id) = leased.swap_remove(rng.usize(..leased.len()));
                    let verb = ["task.ack", "task.fail", "task.cancel", "task.fail"][rng.usize(..4)];
                    let spec = crate::lookup(verb.as_bytes()).expect("in the table");
                    let mut line = vec![Bytes::from_static(verb.as_bytes()), id];
                    if rng.bool() && verb == "task.fail" {
                        line.extend([Bytes::from_static(b"snooze"), Bytes::from(rng.u8(0..30).to_string())]);
                    }
                    shard.execute(0, client, spec, &line);
                }
                2 => {
                    shard.task_release_owner(rng.u64(1..4));
                }
                _ => {
                    let template = TEMPLATES[rng.usize(..TEMPLATES.len())];
                    let a = fill(template, &mut rng);
                    let db = usize::from(rng.bool());
                    let spec = crate::lookup(&a[0]).expect("in the table");
                    shard.execute(db, 0, spec, &a);
                }
            }
            if rng.u8(0..4) == 0 {
                shard.take_journal(&mut file);
            }
        }
        shard.take_journal(&mut file);
        let mut copy = replayed(&file);
        copy.set_clock(now);
        prop_assert_eq!(state(&mut copy), state(&mut shard));
        // The snapshot, then the journal after it, gives the same shard again.
        let (parts, offset) = snapshot.expect("taken");
        let mut loaded = Shard::new(0);
        for part in parts {
            loaded.import_snapshot_part(Bytes::from(part)).expect("loads");
        }
        loaded.finish_snapshot().expect("indexes");
        loaded.tasks.check_invariants();
        let mut resumed = replay_into(loaded, &file[offset..]);
        resumed.set_clock(now);
        resumed.tasks.check_invariants();
        prop_assert_eq!(state(&mut resumed), state(&mut shard));
    }
}
