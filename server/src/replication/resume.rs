//! Partial resyncs across clean restarts, as Redis keeps its replication id and offset in
//! the RDB it saves at shutdown. At a clean exit, after every shard has closed its journal,
//! a node writes `replication-resume` in its data directory: its own run id (a primary's
//! replicas continue from its journal after it restarts), and, as a replica whose every
//! shard follows its primary's journal with nothing held, the primary's run id and each
//! shard's position applied (and written to this node's journal); as a replica of a
//! redis-server, Redis's replication id and the offset this node's data stands at, which
//! the next link's PSYNC continues from (`from_redis`). At start the file is
//! read and deleted at once, before anything is written: a node that crashes afterwards
//! starts with a new run id and its replicas sync in full, since only a clean exit vouches
//! that the journal ends where the positions say.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Replication;

/// The file, in the data directory.
const FILE: &str = "replication-resume";
const MAGIC: &str = "wetask-replication-resume 1";

/// What a clean exit left.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Saved {
    /// This node's run id as a primary.
    pub run_id: Option<String>,
    /// As a replica: its primary's run id and each shard's position.
    pub follows: Option<(String, Vec<u64>)>,
    /// As a replica of a redis-server: its replication id and the offset applied.
    pub follows_redis: Option<(String, u64)>,
}

/// Reads what the last clean exit saved in `dir`, and deletes it on a thread of its own
/// (off the start's path: a directory sync costs tens of ms on some disks); until the
/// deletion is on disk no replication stream is served or followed
/// ([`Replication::resume_cleared`]), so a crash meanwhile finds the file still true.
/// A file that does not read, or names another shard count, is ignored (a full sync then,
/// never a wrong continuation).
pub fn take(dir: &Path, shards: usize, replication: &Arc<Replication>) -> Saved {
    let path = dir.join(FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(_) => return Saved::default(),
    };
    replication.resume_cleared.store(false, Ordering::Release);
    let (owned, clearing) = (dir.to_path_buf(), replication.clone());
    let spawned = std::thread::Builder::new()
        .name("repl-resume".into())
        .spawn(move || clear(&owned, &clearing));
    if let Err(e) = spawned {
        tracing::warn!(
            "cannot start the thread that clears {}: {e}",
            path.display()
        );
        clear(dir, replication);
    }
    parse(&text, shards).unwrap_or_else(|| {
        tracing::warn!(
            "{} does not read: the replicas sync in full",
            path.display()
        );
        Saved::default()
    })
}

/// Deletes the file for good, then lets the streams go. A file that cannot be deleted
/// keeps them stopped: it stays true only while nothing streams.
fn clear(dir: &Path, replication: &Replication) {
    let path = dir.join(FILE);
    let removed = std::fs::remove_file(&path).and_then(|()| crate::persist::files::sync_dir(dir));
    match removed {
        Ok(()) => replication.resume_cleared.store(true, Ordering::Release),
        Err(e) => tracing::error!(
            "cannot remove {}: {e}: no replication stream is served or followed until it is gone and the node restarts",
            path.display()
        ),
    }
}

fn parse(text: &str, shards: usize) -> Option<Saved> {
    let mut lines = text.lines();
    if lines.next()? != MAGIC {
        return None;
    }
    let mut saved = Saved::default();
    for line in lines {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("run"), Some(run)) if valid_run(run) => saved.run_id = Some(run.to_string()),
            (Some("follows"), Some(run)) if valid_run(run) => {
                let positions: Vec<u64> = words.map(str::parse).collect::<Result<_, _>>().ok()?;
                if positions.len() != shards {
                    return None;
                }
                saved.follows = Some((run.to_string(), positions));
            }
            (Some("follows-redis"), Some(replid)) if valid_run(replid) => {
                let offset = words.next()?.parse().ok()?;
                if words.next().is_some() {
                    return None;
                }
                saved.follows_redis = Some((replid.to_string(), offset));
            }
            _ => return None,
        }
    }
    Some(saved)
}

/// A run id as `random_hex(40)` makes them.
fn valid_run(run: &str) -> bool {
    run.len() == 40 && run.bytes().all(|b| b.is_ascii_hexdigit())
}

/// At a clean exit (every shard's journal closed): writes what a restart continues from.
pub fn save(dir: &Path, replication: &Replication) -> std::io::Result<()> {
    let mut text = format!("{MAGIC}\nrun {}\n", replication.run_id());
    if let Some((run, positions)) = following(replication) {
        let positions: Vec<String> = positions.iter().map(u64::to_string).collect();
        text.push_str(&format!("follows {run} {}\n", positions.join(" ")));
    }
    if let Some((replid, offset)) = following_redis(replication) {
        text.push_str(&format!("follows-redis {replid} {offset}\n"));
    }
    let tmp = dir.join(format!("{FILE}.tmp"));
    {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
    }
    std::fs::rename(&tmp, dir.join(FILE))?;
    crate::persist::files::sync_dir(dir)
}

/// As a replica of a WeTask primary whose every shard is synced, holds no cross-shard
/// part waiting for its outcome, and has written all it applied: the primary's run id and
/// the positions.
fn following(replication: &Replication) -> Option<(String, Vec<u64>)> {
    if !replication.is_replica() || replication.follows_redis.load(Ordering::Acquire) {
        return None;
    }
    let mut run = None;
    let mut positions = Vec::new();
    for inbox in &replication.inboxes {
        let applied = inbox.applied.load(Ordering::Acquire);
        let whole = inbox.synced.load(Ordering::Acquire)
            && !inbox.broken.load(Ordering::Acquire)
            && !inbox.holds_part.load(Ordering::Acquire)
            && inbox.journaled.load(Ordering::Acquire) == applied;
        let this = inbox.run.lock().expect("inbox run").clone();
        if !whole || run.as_ref().is_some_and(|r| *r != this) {
            return None;
        }
        run = Some(this);
        positions.push(applied);
    }
    Some((run?, positions))
}

/// As a replica of a redis-server whose stream stands at an offset exactly (nothing in
/// flight: `Replication::redis_at`, under the current link): its replication id and that
/// offset. Every command before it was answered, so journaled, and the journals are now
/// closed.
fn following_redis(replication: &Replication) -> Option<(String, u64)> {
    if !replication.is_replica() || !replication.follows_redis.load(Ordering::Acquire) {
        return None;
    }
    let at = replication.redis_at.lock().expect("redis at");
    let (epoch, replid, offset) = at.as_ref()?;
    (*epoch == replication.link_epoch.load(Ordering::Acquire) && valid_run(replid))
        .then(|| (replid.clone(), *offset))
}

/// A replica's shards continue from `positions` of primary run `run` (its journal holds
/// what they applied): called by the first `follow` after start, before its streams open.
pub fn restore(replication: &Replication, run: &str, positions: &[u64]) {
    for (inbox, &position) in replication.inboxes.iter().zip(positions) {
        *inbox.run.lock().expect("inbox run") = run.to_string();
        inbox.received.store(position, Ordering::Release);
        inbox.applied.store(position, Ordering::Release);
        inbox.journaled.store(position, Ordering::Release);
        inbox.broken.store(false, Ordering::Release);
        inbox.synced.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(c: char) -> String {
        std::iter::repeat_n(c, 40).collect()
    }

    #[test]
    fn what_a_clean_exit_wrote_reads_back_and_anything_else_is_refused() {
        let text = format!("{MAGIC}\nrun {}\nfollows {} 10 20\n", run('a'), run('b'));
        assert_eq!(
            parse(&text, 2),
            Some(Saved {
                run_id: Some(run('a')),
                follows: Some((run('b'), vec![10, 20])),
                follows_redis: None,
            })
        );
        assert_eq!(parse(&text, 3), None, "another shard count");
        let redis = format!(
            "{MAGIC}\nrun {}\nfollows-redis {} 12345\n",
            run('a'),
            run('d')
        );
        assert_eq!(
            parse(&redis, 2).unwrap().follows_redis,
            Some((run('d'), 12345))
        );
        for bad in [
            "follows-redis x 1",
            "follows-redis {d} -1",
            "follows-redis {d} 1 2",
        ] {
            let line = bad.replace("{d}", &run('d'));
            assert_eq!(parse(&format!("{MAGIC}\n{line}\n"), 2), None, "{line}");
        }
        let primary = format!("{MAGIC}\nrun {}\n", run('c'));
        assert_eq!(parse(&primary, 4).unwrap().follows, None);
        for bad in [
            String::new(),
            format!("{MAGIC}\nrun xyz\n"),
            format!("{MAGIC}\nrun {}\nfollows {} 1 x\n", run('a'), run('b')),
            format!("{MAGIC}\nsomething else\n"),
            format!("other 1\nrun {}\n", run('a')),
        ] {
            assert_eq!(parse(&bad, 2), None, "{bad:?}");
        }
    }

    /// Takes the file and waits for its deletion.
    fn take_now(dir: &Path, replication: &Arc<Replication>) -> Saved {
        let saved = take(dir, 2, replication);
        wait_cleared(replication);
        saved
    }

    fn wait_cleared(replication: &Replication) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !replication.resume_cleared.load(Ordering::Acquire) {
            assert!(
                std::time::Instant::now() < deadline,
                "the file was not cleared"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn take_deletes_the_file_so_a_crash_after_a_start_vouches_for_nothing() {
        let dir = std::env::temp_dir().join(format!("wetask-resume-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let replication = Arc::new(Replication::new(2));
        save(&dir, &replication).unwrap();
        let saved = take(&dir, 2, &replication);
        wait_cleared(&replication);
        assert!(!dir.join(FILE).exists());
        assert_eq!(saved.run_id, Some(replication.run_id()));
        assert_eq!(saved.follows, None, "a primary follows nobody");
        assert_eq!(take_now(&dir, &replication), Saved::default(), "read once");

        // A replica whose shards follow their primary with everything written.
        replication.is_replica.store(true, Ordering::Release);
        restore(&replication, &run('d'), &[5, 7]);
        save(&dir, &replication).unwrap();
        assert_eq!(
            take_now(&dir, &replication).follows,
            Some((run('d'), vec![5, 7]))
        );
        // Not while a shard holds a cross-shard part, or has applied more than it wrote,
        // or is not synced: a restart would not hold what the positions say.
        let inbox = &replication.inboxes[1];
        inbox.holds_part.store(true, Ordering::Release);
        save(&dir, &replication).unwrap();
        assert_eq!(take_now(&dir, &replication).follows, None);
        inbox.holds_part.store(false, Ordering::Release);
        inbox.applied.store(9, Ordering::Release);
        save(&dir, &replication).unwrap();
        assert_eq!(take_now(&dir, &replication).follows, None);
        inbox.journaled.store(9, Ordering::Release);
        inbox.synced.store(false, Ordering::Release);
        save(&dir, &replication).unwrap();
        assert_eq!(take_now(&dir, &replication).follows, None);
        inbox.synced.store(true, Ordering::Release);
        save(&dir, &replication).unwrap();
        assert_eq!(
            take_now(&dir, &replication).follows,
            Some((run('d'), vec![5, 9]))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
