//! Snapshots without the journal (`appendonly no`), as Redis's RDB persistence: SAVE,
//! BGSAVE, save points and SHUTDOWN (SAVE, or with save points) write one, LASTSAVE and INFO
//! say when, SHUTDOWN NOSAVE writes none, and a start loads the last one, also with another
//! shard count; keys and tasks alike.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use wetask_protocol::Frame;

fn start(dir: &Path, shards: usize, extra: &[&str]) -> Server {
    let shards = shards.to_string();
    let mut args = vec![
        "--appendonly",
        "no",
        "--dir",
        dir.to_str().expect("utf-8 path"),
        "--shards",
        &shards,
    ];
    args.extend_from_slice(extra);
    Server::start(&args)
}

/// Writes keys on every shard, a list, a hash and a queued task.
fn fill(c: &mut Client, tag: &str) {
    for i in 0..20 {
        assert_eq!(c.cmd(&format!("SET {tag}:k{i} v{i}")), ok());
    }
    c.cmd(&format!("RPUSH {tag}:list a b c"));
    c.cmd(&format!("HSET {tag}:hash f 1"));
    assert!(matches!(
        c.cmd(&format!("TASK.SUBMIT {tag}:queue job")),
        Frame::Bulk(_)
    ));
}

fn check(c: &mut Client, tag: &str) {
    for i in 0..20 {
        assert_eq!(
            c.cmd(&format!("GET {tag}:k{i}")),
            bulk(&format!("v{i}")),
            "{tag}"
        );
    }
    assert_eq!(
        c.cmd(&format!("LRANGE {tag}:list 0 -1")),
        array(vec![bulk("a"), bulk("b"), bulk("c")])
    );
    assert_eq!(c.cmd(&format!("HGET {tag}:hash f")), bulk("1"));
    let Frame::Array(fetched) = c.cmd(&format!("TASK.FETCH {tag}:queue")) else {
        panic!("no task")
    };
    assert_eq!(fetched.len(), 1, "{tag}: the task came back");
}

fn lastsave(c: &mut Client) -> i64 {
    match c.cmd("LASTSAVE") {
        Frame::Integer(n) => n,
        other => panic!("LASTSAVE: {other:?}"),
    }
}

#[test]
fn save_and_bgsave_snapshots_load_at_the_next_start_on_any_shard_count() {
    let dir = temp_dir("snapshots");
    {
        let server = start(&dir, 2, &[]);
        let mut c = server.client();
        fill(&mut c, "saved");
        assert_eq!(
            info_field(&mut c, "persistence", "rdb_changes_since_last_save"),
            23
        );
        assert_eq!(c.cmd("SAVE"), ok());
        assert_eq!(
            info_field(&mut c, "persistence", "rdb_changes_since_last_save"),
            0
        );
        assert_eq!(info_field(&mut c, "persistence", "rdb_saves"), 1);
        // Written after the last save, and SHUTDOWN NOSAVE: lost, as in Redis.
        c.cmd("SET lost 1");
        c.send(&[b"SHUTDOWN", b"NOSAVE"]);
        assert!(c.read().is_none());
        server.terminate();
    }
    for shards in [2, 4, 1] {
        let server = start(&dir, shards, &[]);
        let mut c = server.client();
        check(&mut c, "saved");
        assert_eq!(c.cmd("EXISTS lost"), int(0), "{shards} shards");
        // A BGSAVE answers at once; the snapshot follows.
        c.cmd(&format!("SET bg{shards} 1"));
        let before = info_field(&mut c, "persistence", "rdb_saves");
        assert_eq!(c.cmd("BGSAVE"), Frame::simple("Background saving started"));
        let deadline = Instant::now() + Duration::from_secs(20);
        while info_field(&mut c, "persistence", "rdb_saves") == before {
            assert!(Instant::now() < deadline, "the BGSAVE never ended");
            std::thread::sleep(Duration::from_millis(20));
        }
        c.cmd(&format!("TASK.SUBMIT saved:queue again{shards}"));
        c.cmd("TASK.RELEASE saved:queue");
        assert_eq!(c.cmd("SAVE"), ok());
        server.terminate();
        let again = start(&dir, shards, &[]);
        let mut c = again.client();
        assert_eq!(c.cmd(&format!("GET bg{shards}")), bulk("1"));
        again.terminate();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn save_points_and_shutdown_save_as_redis_does() {
    let dir = temp_dir("save-points");
    {
        // A save point of 1 second and 3 changes.
        let server = start(&dir, 2, &["--save", "1 3"]);
        let mut c = server.client();
        let first = lastsave(&mut c);
        for i in 0..3 {
            c.cmd(&format!("SET point{i} {i}"));
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while info_field(&mut c, "persistence", "rdb_saves") == 0 {
            assert!(Instant::now() < deadline, "the save point never saved");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(lastsave(&mut c) >= first);
        // With save points, a plain SHUTDOWN saves what came after.
        c.cmd("SET after 1");
        c.send(&[b"SHUTDOWN"]);
        assert!(c.read().is_none());
        server.terminate();
    }
    {
        let server = start(&dir, 2, &[]);
        let mut c = server.client();
        assert_eq!(
            c.cmd("MGET point0 point2 after"),
            array(vec![bulk("0"), bulk("2"), bulk("1")])
        );
        // No save points: SHUTDOWN does not save, SHUTDOWN SAVE does.
        c.cmd("SET unsaved 1");
        server.terminate();
    }
    {
        let server = start(&dir, 2, &[]);
        let mut c = server.client();
        assert_eq!(c.cmd("EXISTS unsaved"), int(0));
        c.cmd("SET saved-at-shutdown 1");
        c.send(&[b"SHUTDOWN", b"SAVE"]);
        assert!(c.read().is_none());
        server.terminate();
    }
    let server = start(&dir, 2, &[]);
    let mut c = server.client();
    assert_eq!(c.cmd("GET saved-at-shutdown"), bulk("1"));
    let _ = std::fs::remove_dir_all(&dir);
}
