//! Durability with real processes: writers on many connections record every write the
//! server acknowledged; the server is SIGKILLed at random moments, at different loads, and
//! restarted on the same data directory; every acknowledged write must be there (under
//! `appendfsync always` all of them, under `everysec` all but at most the last second's).
//! The same for the task engine: every acknowledged SUBMIT exists after the restart, every
//! acknowledged ACK stays done, and once the queue is drained every task is done once.
//! Also: a torn tail at every byte offset of the last record, a flipped byte in the middle,
//! and the manifest guarding the shard count.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use wetask_protocol::Frame;

fn start(dir: &Path, shards: usize, fsync: &str) -> Server {
    start_with(dir, shards, fsync, &[])
}

fn start_with(dir: &Path, shards: usize, fsync: &str, extra: &[&str]) -> Server {
    let shards = shards.to_string();
    let mut args = vec![
        "--dir",
        dir.to_str().expect("utf-8 path"),
        "--shards",
        &shards,
        "--appendfsync",
        fsync,
    ];
    args.extend_from_slice(extra);
    Server::start(&args)
}

/// A write acknowledged: which key, and when the reply arrived.
struct Acked {
    key: String,
    value: String,
    at: Instant,
}

/// One connection writing fresh keys `prefix0, prefix1, …` in pipelines of `depth`, until
/// the server dies; returns what it acknowledged.
fn write_until_killed(port: u16, prefix: String, depth: usize) -> Vec<Acked> {
    let mut c = Client::connect(port);
    let mut acked = Vec::new();
    let mut next = 0usize;
    loop {
        let batch: Vec<(String, String)> = (next..next + depth)
            .map(|i| {
                (
                    format!("{prefix}{i}"),
                    format!("v{i}-{}", "x".repeat(i % 50)),
                )
            })
            .collect();
        next += depth;
        for (k, v) in &batch {
            c.send(&[b"SET", k.as_bytes(), v.as_bytes()]);
        }
        for (k, v) in batch {
            match c.try_read() {
                Ok(Some(frame)) if frame == ok() => acked.push(Acked {
                    key: k,
                    value: v,
                    at: Instant::now(),
                }),
                _ => return acked,
            }
        }
    }
}

/// Checks that every write acknowledged before `safe_before` is present with its value;
/// returns the positions of later ones that are missing.
fn check_writes(c: &mut Client, acked: &[Acked], safe_before: Instant) -> Vec<usize> {
    let mut missing_late = Vec::new();
    for (n, chunk) in acked.chunks(400).enumerate() {
        let mut args: Vec<&[u8]> = vec![b"MGET"];
        args.extend(chunk.iter().map(|a| a.key.as_bytes()));
        let Frame::Array(values) = c.cmd_args(&args) else {
            panic!("MGET failed")
        };
        for (i, (a, v)) in chunk.iter().zip(values).enumerate() {
            match v {
                Frame::Bulk(b) => assert_eq!(b, a.value.as_bytes(), "{} has a wrong value", a.key),
                _ if a.at >= safe_before => missing_late.push(n * 400 + i),
                other => panic!(
                    "{} was acknowledged {:?} before the kill and is missing ({other:?})",
                    a.key,
                    safe_before.saturating_duration_since(a.at)
                ),
            }
        }
    }
    missing_late
}

/// Rounds of: restart, check everything acknowledged so far, write under a load that
/// varies by round, SIGKILL at a random moment.
fn kill_loop(fsync: &str, rounds: usize, shards: usize, loss_window: Duration) {
    kill_loop_with(fsync, rounds, shards, loss_window, &[]);
}

fn kill_loop_with(
    fsync: &str,
    rounds: usize,
    shards: usize,
    loss_window: Duration,
    extra: &[&str],
) {
    let dir = temp_dir("crash");
    let mut all: Vec<Acked> = Vec::new();
    let mut last_kill = Instant::now();
    let mut rng = fastrand::Rng::with_seed(0x5eed ^ rounds as u64);
    let mut missing_total = 0;
    for round in 0..rounds {
        let mut server = start_with(&dir, shards, fsync, extra);
        let mut c = server.client();
        let missing = check_writes(&mut c, &all, last_kill - loss_window);
        missing_total += missing.len();
        // A write lost under everysec is gone for good: forget it.
        for i in missing.into_iter().rev() {
            all.remove(i);
        }
        let (connections, depth) = [(1, 1), (4, 8), (16, 32), (8, 1), (2, 64)][round % 5];
        let port = server.port;
        let writers: Vec<_> = (0..connections)
            .map(|conn| {
                let prefix = format!("r{round}:c{conn}:{}:", rng.u32(..));
                std::thread::spawn(move || write_until_killed(port, prefix, depth))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(rng.u64(50..400)));
        server.child.kill().expect("SIGKILL");
        last_kill = Instant::now();
        let _ = server.child.wait();
        for w in writers {
            all.extend(w.join().expect("writer"));
        }
    }
    let server = start_with(&dir, shards, fsync, extra);
    let mut c = server.client();
    missing_total += check_writes(&mut c, &all, last_kill - loss_window).len();
    let snapshots = std::fs::read_dir(dir.join("appendonlydir"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "snapshot")
        })
        .count();
    if !extra.is_empty() {
        assert!(snapshots > 0, "no snapshot was ever written");
    }
    println!(
        "{fsync}: {rounds} kills, {} acknowledged writes checked, {missing_total} missing (allowed: acknowledged within {loss_window:?} of a kill); {snapshots} snapshot files at the end",
        all.len()
    );
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn every_acknowledged_write_survives_sigkill_under_always() {
    kill_loop("always", 20, 1, Duration::ZERO);
}

/// Two shards: writes to the other shard's keys travel the mesh, whose envelopes also wait
/// for the journal.
#[test]
fn every_acknowledged_write_survives_sigkill_under_always_on_two_shards() {
    kill_loop("always", 20, 2, Duration::ZERO);
}

/// Compactions all the time (a 16 KB threshold): kills land in the middle of segment
/// switches, snapshot writes and the removal of what they replace.
#[test]
fn kills_during_compaction_lose_nothing() {
    kill_loop_with(
        "always",
        20,
        2,
        Duration::ZERO,
        &["--auto-aof-rewrite-min-size", "16kb"],
    );
}

#[test]
fn everysec_loses_at_most_the_last_second_under_sigkill() {
    kill_loop("everysec", 10, 2, Duration::from_millis(1500));
}

/// A field of TASK.GET's reply (a map, or a flat array under RESP2).
fn task_field(frame: &Frame, name: &str) -> Option<Frame> {
    let pairs: Vec<(Frame, Frame)> = match frame {
        Frame::Map(pairs) => pairs.clone(),
        Frame::Array(items) => items
            .chunks(2)
            .map(|p| (p[0].clone(), p[1].clone()))
            .collect(),
        _ => return None,
    };
    pairs
        .into_iter()
        .find(|(k, _)| k.as_bytes().is_some_and(|b| &b[..] == name.as_bytes()))
        .map(|(_, v)| v)
}

/// The states of the tasks `ids` (`None`: unknown), asked in pipelines.
fn task_states(c: &mut Client, ids: &[Vec<u8>]) -> Vec<Option<String>> {
    let mut states = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(500) {
        for id in chunk {
            c.send(&[b"TASK.GET", id]);
        }
        for _ in chunk {
            let frame = c.read().expect("a reply");
            states.push(task_field(&frame, "state").and_then(|s| {
                s.as_bytes()
                    .map(|b| String::from_utf8_lossy(b).into_owned())
            }));
        }
    }
    states
}

/// Submits to `queue` until the server dies; returns the acknowledged ids.
fn submit_until_killed(port: u16, queue: String, tag: String) -> Vec<Vec<u8>> {
    let mut c = Client::connect(port);
    let mut ids = Vec::new();
    for i in 0.. {
        let payload = format!("{tag}-{i}");
        c.send(&[
            b"TASK.SUBMIT",
            queue.as_bytes(),
            payload.as_bytes(),
            b"RETRIES",
            b"1000",
        ]);
        match c.try_read() {
            Ok(Some(Frame::Bulk(id))) => ids.push(id.to_vec()),
            _ => break,
        }
    }
    ids
}

/// Fetches and acknowledges until the server dies; returns the ids whose ACK was answered OK.
fn work_until_killed(port: u16, queues: Vec<String>) -> Vec<Vec<u8>> {
    let mut c = Client::connect(port);
    let mut done = Vec::new();
    loop {
        let mut args: Vec<&[u8]> = vec![b"TASK.FETCH"];
        args.extend(queues.iter().map(|q| q.as_bytes()));
        args.extend([&b"COUNT"[..], b"4", b"BLOCK", b"50"]);
        c.send(&args);
        let tasks = match c.try_read() {
            Ok(Some(Frame::Array(tasks))) => tasks,
            Ok(Some(Frame::Null)) => continue,
            _ => return done,
        };
        for task in tasks {
            let Frame::Array(fields) = task else { continue };
            let Some(Frame::Bulk(id)) = fields.into_iter().next() else {
                continue;
            };
            c.send(&[b"TASK.ACK", &id]);
            match c.try_read() {
                Ok(Some(frame)) if frame == ok() => done.push(id.to_vec()),
                Ok(Some(_)) => {}
                _ => return done,
            }
        }
    }
}

#[test]
fn tasks_survive_sigkill_whole() {
    let dir = temp_dir("crash-tasks");
    let mut rng = fastrand::Rng::with_seed(7);
    // Random queue names, so the test does not depend on where one lucky name hashes.
    let queues: Vec<String> = (0..3).map(|_| format!("q{}", rng.u32(..))).collect();
    let mut submitted: Vec<Vec<u8>> = Vec::new();
    let mut acked: Vec<Vec<u8>> = Vec::new();
    for round in 0..20 {
        let mut server = start(&dir, 2, "always");
        let mut c = server.client();
        for (id, state) in submitted.iter().zip(task_states(&mut c, &submitted)) {
            assert!(
                state.is_some(),
                "task {} was acknowledged at SUBMIT and is gone after a restart",
                String::from_utf8_lossy(id)
            );
        }
        for (id, state) in acked.iter().zip(task_states(&mut c, &acked)) {
            assert_eq!(
                state.as_deref(),
                Some("done"),
                "task {} was ACKed and is not done after a restart",
                String::from_utf8_lossy(id)
            );
        }
        let port = server.port;
        let submitters: Vec<_> = (0..3)
            .map(|i| {
                let q = queues[(round + i) % queues.len()].clone();
                let tag = format!("r{round}s{i}");
                std::thread::spawn(move || submit_until_killed(port, q, tag))
            })
            .collect();
        let workers: Vec<_> = (0..1 + round % 4)
            .map(|_| {
                let qs = queues.clone();
                std::thread::spawn(move || work_until_killed(port, qs))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(rng.u64(50..400)));
        server.child.kill().expect("SIGKILL");
        let _ = server.child.wait();
        for s in submitters {
            submitted.extend(s.join().expect("submitter"));
        }
        for w in workers {
            acked.extend(w.join().expect("worker"));
        }
    }
    // Drain: every task submitted (and acknowledged) ends done, each ACKed exactly once.
    let server = start(&dir, 2, "always");
    let mut c = server.client();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut drained = std::collections::HashSet::new();
    loop {
        let mut args: Vec<&[u8]> = vec![b"TASK.FETCH"];
        args.extend(queues.iter().map(|q| q.as_bytes()));
        args.extend([&b"COUNT"[..], b"100"]);
        let Frame::Array(tasks) = c.cmd_args(&args) else {
            break;
        };
        if tasks.is_empty() {
            break;
        }
        for task in tasks {
            let Frame::Array(fields) = task else { continue };
            let Some(Frame::Bulk(id)) = fields.into_iter().next() else {
                continue;
            };
            assert!(
                drained.insert(id.to_vec()),
                "task leased twice while draining"
            );
            assert_eq!(c.cmd_args(&[b"TASK.ACK", &id]), ok());
        }
        assert!(Instant::now() < deadline, "the queues never drained");
    }
    for (id, state) in submitted.iter().zip(task_states(&mut c, &submitted)) {
        assert_eq!(
            state.as_deref(),
            Some("done"),
            "task {}",
            String::from_utf8_lossy(id)
        );
    }
    for id in &acked {
        assert!(
            !drained.contains(id),
            "an ACKed task was handed out again after restarts"
        );
    }
    println!(
        "tasks: 20 kills, {} submits and {} ACKs acknowledged, {} drained after, none lost",
        submitted.len(),
        acked.len(),
        drained.len()
    );
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

/// The journal files of a data directory, largest first.
fn journals(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir.join("appendonlydir"))
        .expect("data dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "journal"))
        .collect();
    files.sort_by_key(|p| std::cmp::Reverse(std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)));
    files
}

/// Where a journal's records end: under `always` the file goes on in preallocated zeros.
fn records_end(file: &Path) -> u64 {
    // A compaction may have removed it since it was listed: then it holds nothing.
    let bytes = std::fs::read(file).unwrap_or_default();
    let (records, _) = wetask_shards::persist::journal::record::read_all(&bytes);
    records
        .iter()
        .map(|r| (r.len() + wetask_shards::persist::journal::record::HEADER_BYTES) as u64)
        .sum()
}

#[test]
fn a_torn_tail_at_every_offset_recovers_and_damage_in_the_middle_is_reported() {
    let dir = temp_dir("torn");
    let dir_s = dir.to_str().unwrap().to_string();
    {
        let server = start(&dir, 1, "always");
        let mut c = server.client();
        for i in 0..20 {
            assert_eq!(c.cmd(&format!("SET k{i} v{i}")), ok());
        }
        // The last record: one write (a record per loop turn; this one is alone).
        assert_eq!(c.cmd("SET last value"), ok());
    }
    let file = journals(&dir).remove(0);
    let mut whole = std::fs::read(&file).expect("journal");
    // The server was killed: under `always` its journal goes on in preallocated zeros, read
    // back as the end of the journal. Without them, where the last record starts:
    whole.truncate(records_end(&file) as usize);
    let (records, _) = wetask_shards::persist::journal::record::read_all(&whole);
    let last_len = records.last().expect("records").len()
        + wetask_shards::persist::journal::record::HEADER_BYTES;
    let last_start = whole.len() - last_len;
    for cut in last_start..whole.len() {
        std::fs::write(&file, &whole[..cut]).unwrap();
        let server = start(&dir, 1, "always");
        let mut c = server.client();
        assert_eq!(c.cmd("GET k19"), bulk("v19"), "cut at {cut}");
        assert_eq!(c.cmd("EXISTS last"), int(0), "cut at {cut}");
        if cut > last_start {
            // Logged by the shard's load, which may come after "listening on": waited for.
            server.wait_log("torn record");
        }
    }
    // Whole records followed by zeros (unused preallocated space): every record loads, and
    // nothing is reported torn, not even with `aof-load-truncated no`.
    // A one-shard server on the directory with one more option.
    let start_with = |option: &str, value: &str| {
        Server::start(&["--shards", "1", "--dir", &dir_s, option, value])
    };
    let mut padded = whole.clone();
    padded.resize(whole.len() + 64 * 1024, 0);
    std::fs::write(&file, &padded).unwrap();
    {
        let server = start_with("--aof-load-truncated", "no");
        let mut c = server.client();
        assert_eq!(c.cmd("GET last"), bulk("value"));
        // The load's report comes after any torn-record warning of the same load.
        server.wait_log("journal loaded");
        assert!(server.log_lines("torn record").is_empty());
    }
    // A flipped byte in the middle: the start stops with the file and offset...
    let mut damaged = whole.clone();
    damaged[last_start / 2] ^= 0x40;
    std::fs::write(&file, &damaged).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wetask"))
        .args(["--port", "0", "--shards", "1", "--dir", &dir_s])
        .output()
        .expect("run wetask");
    assert!(
        !out.status.success(),
        "a damaged journal must stop the start"
    );
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("damaged at byte"), "{text}");
    // ... and `--aof-load-corrupt yes` loads what precedes the damage.
    let server = start_with("--aof-load-corrupt", "yes");
    let mut c = server.client();
    assert_eq!(c.cmd("GET k0"), bulk("v0"));
    assert_eq!(c.cmd("EXISTS last"), int(0));
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_second_server_on_the_same_directory_is_refused() {
    let dir = temp_dir("locked");
    let server = start(&dir, 1, "everysec");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wetask"))
        .args([
            "--port",
            "0",
            "--shards",
            "1",
            "--dir",
            dir.to_str().unwrap(),
        ])
        .output()
        .expect("run wetask");
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("in use by another wetask process"), "{text}");
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_clean_shutdown_keeps_everything_and_appendonly_no_keeps_nothing() {
    let dir = temp_dir("clean");
    {
        let server = start(&dir, 2, "no");
        let mut c = server.client();
        assert_eq!(c.cmd("SET a 1"), ok());
        assert_eq!(c.cmd("RPUSH l x y"), int(2));
        assert!(server.terminate().success());
    }
    let server = start(&dir, 2, "no");
    let mut c = server.client();
    assert_eq!(c.cmd("GET a"), bulk("1"));
    assert_eq!(c.cmd("LLEN l"), int(2));
    drop(server);
    let volatile = Server::start(&["--appendonly", "no", "--dir", dir.to_str().unwrap()]);
    assert_eq!(volatile.client().cmd("GET a"), Frame::Null);
    let _ = std::fs::remove_dir_all(dir);
}

/// Sets the soft file-size limit of process `pid` (the hard one stays unlimited): past it a
/// write fails (EFBIG) as it would on a full disk.
fn limit_file_size(pid: u32, bytes: Option<u64>) {
    let limit = libc::rlimit {
        rlim_cur: bytes.unwrap_or(libc::RLIM_INFINITY),
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: prlimit on a child process of ours, with a valid struct.
    let rc = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_FSIZE,
            &limit,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
}

/// A disk that stops taking writes: writes answer MISCONF, reads go on, nothing
/// acknowledged is lost or corrupted, and writes resume when the disk does.
#[test]
fn a_failing_disk_refuses_writes_then_recovers_without_loss() {
    let dir = temp_dir("full");
    let mut acked: Vec<String> = Vec::new();
    {
        let server = start(&dir, 1, "everysec");
        let mut c = server.client();
        assert_eq!(c.cmd("SET before 1"), ok());
        acked.push("before".into());
        let journal = journals(&dir).remove(0);
        // A few bytes of room past the records (not the file: it goes on in preallocated
        // space): the next record is written in part, then refused.
        let size = records_end(&journal);
        limit_file_size(server.child.id(), Some(size + 7));
        let mut refused = None;
        for i in 0..100 {
            match c.cmd(&format!("SET during{i} x")) {
                frame if frame == ok() => acked.push(format!("during{i}")),
                Frame::Error(e) => {
                    refused = Some(e);
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        let refused = refused.expect("writes were never refused");
        assert!(refused.starts_with(b"MISCONF"), "{refused:?}");
        // Reads go on; the failure shows in INFO.
        assert_eq!(c.cmd("GET before"), bulk("1"));
        assert!(c.cmd("SET again y").is_error());
        let Frame::Bulk(info) = c.cmd("INFO persistence") else {
            panic!()
        };
        assert!(String::from_utf8_lossy(&info).contains("aof_last_write_status:err"));
        // The disk recovers: writes resume on their own.
        limit_file_size(server.child.id(), None);
        let deadline = Instant::now() + Duration::from_secs(10);
        while c.cmd("SET after 1") != ok() {
            assert!(Instant::now() < deadline, "writes never resumed");
            std::thread::sleep(Duration::from_millis(20));
        }
        acked.push("after".into());
        // Killed without a clean shutdown.
    }
    let server = start(&dir, 1, "everysec");
    let mut c = server.client();
    for key in &acked {
        assert_eq!(
            c.cmd(&format!("EXISTS {key}")),
            int(1),
            "{key} was acknowledged and is lost"
        );
    }
    drop(server);
    // Under `always` a failed write ends the process (a reply may wait on it), as Redis
    // does; a restart loads everything acknowledged before.
    {
        let server = start(&dir, 1, "always");
        let mut c = server.client();
        assert_eq!(c.cmd("SET last-good 1"), ok());
        // The records' end, not the file's: the file goes on in preallocated zeros.
        let size = records_end(&journals(&dir).remove(0));
        limit_file_size(server.child.id(), Some(size + 3));
        c.send(&[b"SET", b"never-acked", b"1"]);
        assert!(
            c.try_read().ok().flatten().is_none(),
            "a write that could not be synced was acknowledged"
        );
        let mut server = server;
        assert!(!server.wait().success());
    }
    let server = start(&dir, 1, "always");
    let mut c = server.client();
    assert_eq!(c.cmd("GET last-good"), bulk("1"));
    assert_eq!(c.cmd("EXISTS before"), int(1));
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

/// Bytes in a data directory's journals (their records) and snapshots. A journal's file
/// may go on in preallocated space, at most one chunk past its records (checked here).
fn data_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir.join("appendonlydir"))
        .expect("data dir")
        .map(|e| {
            let path = e.expect("entry").path();
            let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            if path.extension().is_some_and(|x| x == "journal") {
                let records = records_end(&path).min(len);
                assert!(
                    len <= records + PREALLOCATED_MAX,
                    "{} is {len} bytes for {records} of records",
                    path.display()
                );
                records
            } else {
                len
            }
        })
        .sum()
}

/// The most a journal is preallocated past its records (the server's chunk, and the
/// records of one turn beyond it).
const PREALLOCATED_MAX: u64 = 2 << 20;

/// Rewriting the same keys and cycling tasks: compaction keeps the files near the live
/// data's size, not the history's, while serving; SAVE/BGSAVE/LASTSAVE answer as Redis's.
#[test]
fn compaction_keeps_disk_use_near_live_data() {
    let dir = temp_dir("compact");
    let dir_s = dir.to_str().unwrap().to_string();
    let args = [
        "--dir",
        &dir_s,
        "--shards",
        "2",
        "--auto-aof-rewrite-min-size",
        "64kb",
        "--auto-aof-rewrite-percentage",
        "100",
    ];
    let value = "v".repeat(100);
    let mut written = 0u64;
    let mut peak = 0u64;
    {
        let server = Server::start(&args);
        let mut c = server.client();
        for round in 0..100 {
            for i in 0..100 {
                c.send(&[
                    b"SET",
                    format!("key{i}").as_bytes(),
                    format!("{round}-{value}").as_bytes(),
                ]);
                written += 130;
            }
            for _ in 0..100 {
                assert_eq!(c.read().expect("reply"), ok());
            }
            let Frame::Bulk(id) = c.cmd(&format!("TASK.SUBMIT jobs {round}-{value}")) else {
                panic!("submit")
            };
            let _ = c.cmd("TASK.FETCH jobs");
            assert_eq!(c.cmd_args(&[b"TASK.ACK", &id]), ok());
            peak = peak.max(data_bytes(&dir));
        }
        let Frame::Bulk(info) = c.cmd("INFO persistence") else {
            panic!()
        };
        let info = String::from_utf8_lossy(&info).to_string();
        let rewrites: u64 = info
            .lines()
            .find_map(|l| l.strip_prefix("aof_rewrites:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("aof_rewrites");
        assert!(rewrites >= 2, "no automatic compaction: {info}");
        assert_eq!(c.cmd("SAVE"), ok());
        let Frame::Integer(lastsave) = c.cmd("LASTSAVE") else {
            panic!()
        };
        assert!(lastsave as u64 >= (wetask_shards_now_s() - 60));
    }
    // About 1.3 MB of writes went in; the live data is 100 keys and 100 finished tasks.
    assert!(written > 1_000_000);
    assert!(
        peak < written / 3,
        "disk use peaked at {peak} bytes for {written} bytes written"
    );
    let server = Server::start(&args);
    let mut c = server.client();
    for i in 0..100 {
        assert_eq!(c.cmd(&format!("GET key{i}")), bulk(&format!("99-{value}")));
    }
    let Frame::Bulk(stats) = c.cmd("INFO tasks") else {
        panic!()
    };
    assert!(
        String::from_utf8_lossy(&stats).contains("tasks_acked:100"),
        "{}",
        String::from_utf8_lossy(&stats)
    );
    println!("compaction: {written} bytes written, disk use peaked at {peak} bytes");
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

fn wetask_shards_now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The state a restart must bring back: keys of every type (some with a TTL) and tasks in
/// every state, on random names.
struct Fixture {
    keys: Vec<String>,
    queues: Vec<String>,
    queued: Vec<Vec<u8>>,
    scheduled: Vec<Vec<u8>>,
    leased: Vec<Vec<u8>>,
    done: Vec<Vec<u8>>,
    dead: Vec<Vec<u8>>,
}

fn build_fixture(c: &mut Client, rng: &mut fastrand::Rng) -> Fixture {
    let mut f = Fixture {
        keys: Vec::new(),
        queues: (0..20).map(|_| format!("q{}", rng.u32(..))).collect(),
        queued: Vec::new(),
        scheduled: Vec::new(),
        leased: Vec::new(),
        done: Vec::new(),
        dead: Vec::new(),
    };
    for i in 0..300 {
        let key = format!("k{}:{i}", rng.u32(..));
        let reply = match i % 5 {
            0 => c.cmd(&format!("SET {key} s{i}")),
            1 => c.cmd(&format!("RPUSH {key} a{i} b{i}")),
            2 => c.cmd(&format!("HSET {key} f v{i}")),
            3 => c.cmd(&format!("ZADD {key} {i} m")),
            _ => c.cmd(&format!("SET {key} t{i} EX 3600")),
        };
        assert!(!reply.is_error(), "{reply:?}");
        f.keys.push(key);
    }
    let id = |frame: Frame| match frame {
        Frame::Bulk(id) => id.to_vec(),
        other => panic!("{other:?}"),
    };
    for (n, q) in f.queues.clone().iter().enumerate() {
        f.queued.push(id(c.cmd(&format!(
            "TASK.SUBMIT {q} queued-{n} UNIQUE u{n} FOR 3600000"
        ))));
        f.scheduled.push(id(
            c.cmd(&format!("TASK.SUBMIT {q} later-{n} DELAY 3600000"))
        ));
        let d = id(c.cmd(&format!("TASK.SUBMIT {q} die-{n} RETRIES 0")));
        let a = id(c.cmd(&format!("TASK.SUBMIT {q} ack-{n}")));
        let l = id(c.cmd(&format!("TASK.SUBMIT {q} lease-{n}")));
        // FIFO: the fetches get the queued one first; lease all four, then settle three.
        let Frame::Array(got) = c.cmd(&format!("TASK.FETCH {q} COUNT 4")) else {
            panic!()
        };
        assert_eq!(got.len(), 4);
        let q0 = f.queued.last().unwrap().clone();
        assert!(!c
            .cmd_args(&[b"TASK.FAIL", &d, b"ERROR", b"boom"])
            .is_error());
        assert_eq!(
            c.cmd_args(&[b"TASK.ACK", &a, b"RESULT", format!("r{n}").as_bytes()]),
            ok()
        );
        // The first one goes back to the queue, as if never fetched: fail with a retry.
        assert!(!c
            .cmd_args(&[b"TASK.FAIL", &q0, b"RETRYIN", b"0"])
            .is_error());
        f.dead.push(d);
        f.done.push(a);
        f.leased.push(l);
        if n % 2 == 0 {
            assert_eq!(c.cmd(&format!("TASK.PAUSE {q}")), ok());
        }
    }
    f
}

fn check_fixture(c: &mut Client, f: &Fixture, context: &str) {
    for (i, key) in f.keys.iter().enumerate() {
        let expected = match i % 5 {
            0 => bulk(&format!("s{i}")),
            1 => array(vec![bulk(&format!("a{i}")), bulk(&format!("b{i}"))]),
            2 => bulk(&format!("v{i}")),
            3 => bulk(&i.to_string()),
            _ => bulk(&format!("t{i}")),
        };
        let got = match i % 5 {
            1 => c.cmd(&format!("LRANGE {key} 0 -1")),
            2 => c.cmd(&format!("HGET {key} f")),
            3 => c.cmd(&format!("ZSCORE {key} m")),
            _ => c.cmd(&format!("GET {key}")),
        };
        assert_eq!(got, expected, "{context}: {key}");
        if i % 5 == 4 {
            let Frame::Integer(ttl) = c.cmd(&format!("TTL {key}")) else {
                panic!()
            };
            assert!((3500..=3600).contains(&ttl), "{context}: {key} ttl {ttl}");
        }
    }
    let states = |c: &mut Client, ids: &[Vec<u8>]| task_states(c, ids);
    // A lease from before a restart is lost: back in the queue (an attempt spent).
    for (what, ids, want) in [
        ("queued", &f.queued, "queued"),
        ("scheduled", &f.scheduled, "scheduled"),
        ("leased", &f.leased, "queued"),
        ("done", &f.done, "done"),
        ("dead", &f.dead, "dead"),
    ] {
        for (id, state) in ids.iter().zip(states(c, ids)) {
            assert_eq!(
                state.as_deref(),
                Some(want),
                "{context}: {what} task {}",
                String::from_utf8_lossy(id)
            );
        }
    }
    for (n, q) in f.queues.iter().enumerate() {
        let Frame::Array(dead) = c.cmd(&format!("TASK.DEAD {q}")) else {
            panic!()
        };
        assert_eq!(
            dead,
            vec![Frame::Bulk(f.dead[n].clone().into())],
            "{context}: dead of {q}"
        );
        let frame = c.cmd_args(&[b"TASK.GET", &f.done[n]]);
        assert_eq!(
            task_field(&frame, "result"),
            Some(bulk(&format!("r{n}"))),
            "{context}"
        );
        // UNIQUE still holds: the same key gives the first task's id.
        let again = c.cmd(&format!("TASK.SUBMIT {q} other UNIQUE u{n} FOR 3600000"));
        assert_eq!(
            again,
            Frame::Bulk(f.queued[n].clone().into()),
            "{context}: unique on {q}"
        );
        // A new task gets a new id.
        let Frame::Bulk(new) = c.cmd(&format!("TASK.SUBMIT {q} fresh")) else {
            panic!()
        };
        for ids in [&f.queued, &f.scheduled, &f.leased, &f.done, &f.dead] {
            assert!(
                !ids.iter().any(|id| id[..] == new[..]),
                "{context}: id reused"
            );
        }
        assert_eq!(c.cmd_args(&[b"TASK.CANCEL", &new]), ok());
    }
}

/// 1 → 2 → 1 → 4 shards, then from the first layout (slot mod n) to slot ranges: every key
/// and every task comes back on the shard that owns it now, in the state it had (leases
/// lost, as at any restart).
#[test]
fn restarts_with_other_shard_counts_keep_every_key_and_task() {
    let dir = temp_dir("reshard");
    let mut rng = fastrand::Rng::with_seed(42);
    let fixture = {
        let server = start(&dir, 1, "everysec");
        let mut c = server.client();
        build_fixture(&mut c, &mut rng)
    };
    // The same shard count first: a plain restart.
    {
        let server = start(&dir, 1, "everysec");
        check_fixture(&mut server.client(), &fixture, "after a restart");
    }
    for shards in [2, 1, 4] {
        let server = start(&dir, shards, "everysec");
        assert_layout(&dir, shards);
        let mut c = server.client();
        check_fixture(
            &mut c,
            &fixture,
            &format!("after the move to {shards} shards"),
        );
    }
    // A directory of the first layout (shard = slot mod n: files `-of-<n>.`, a manifest with
    // no `slots ranges`), made here by renaming: a start moves every key and task to the
    // shards that own their slot ranges, at the same shard count.
    let data = dir.join("appendonlydir");
    for entry in std::fs::read_dir(&data).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().to_string();
        if name.starts_with("shard-") && name.contains("-of-4r.") {
            let old = name.replace("-of-4r.", "-of-4.");
            std::fs::rename(data.join(&name), data.join(old)).unwrap();
        }
    }
    std::fs::write(data.join("manifest"), "wetask-journal 1\nshards 4\n").unwrap();
    {
        let server = start(&dir, 4, "everysec");
        assert_layout(&dir, 4);
        check_fixture(
            &mut server.client(),
            &fixture,
            "after the move from slot mod 4 to slot ranges",
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The data directory holds `shards` shards' files by slot ranges, and nothing else.
fn assert_layout(dir: &std::path::Path, shards: usize) {
    let manifest = std::fs::read_to_string(dir.join("appendonlydir/manifest")).unwrap();
    assert!(
        manifest.contains(&format!("shards {shards}\n")) && manifest.contains("slots ranges\n"),
        "{manifest}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.join("appendonlydir"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("shard-") && !n.contains(&format!("-of-{shards}r.")))
        .collect();
    assert!(left.is_empty(), "files of the old layout left: {left:?}");
}

/// SHUTDOWN SAVE writes a snapshot before it exits (the journal after it is empty), and a
/// restart loads it; SHUTDOWN NOSAVE leaves the journal as it is.
#[test]
fn shutdown_save_leaves_a_snapshot() {
    let dir = temp_dir("shutdown-save");
    let count_files = |ext: &str| {
        std::fs::read_dir(dir.join("appendonlydir"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == ext)
            })
            .count()
    };
    {
        let mut server = start(&dir, 2, "everysec");
        let mut c = server.client();
        for i in 0..200 {
            assert_eq!(c.cmd(&format!("SET k{i} v{i}")), ok());
        }
        c.send(&[b"SHUTDOWN", b"NOSAVE"]);
        assert!(server.wait().success());
    }
    assert_eq!(count_files("snapshot"), 0, "NOSAVE wrote a snapshot");
    {
        let mut server = start(&dir, 2, "everysec");
        let mut c = server.client();
        assert_eq!(c.cmd("GET k199"), bulk("v199"));
        assert_eq!(c.cmd("SET after-restart 1"), ok());
        c.send(&[b"SHUTDOWN", b"SAVE"]);
        assert!(server.wait().success());
    }
    assert_eq!(count_files("snapshot"), 2, "one snapshot per shard");
    assert_eq!(
        data_bytes_of_journals(&dir),
        0,
        "the journals after the snapshots are empty"
    );
    let server = start(&dir, 2, "everysec");
    let mut c = server.client();
    assert_eq!(c.cmd("DBSIZE"), int(201));
    assert_eq!(c.cmd("GET k0"), bulk("v0"));
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

/// Bytes in a data directory's journal segments.
fn data_bytes_of_journals(dir: &Path) -> u64 {
    journals(dir)
        .iter()
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum()
}

/// Under `always` every reply leaves from a ring fsync's completion (held sends), and one
/// fsync covers the writes of many connections; under `everysec` nothing is held. CONFIG
/// SET appendfsync switches between the two on a running server.
#[test]
fn replies_wait_for_the_rings_fsync_under_always() {
    let dir = temp_dir("held");
    let server = start(&dir, 1, "everysec");
    let mut c = server.client();
    for i in 0..50 {
        assert_eq!(c.cmd(&format!("SET e{i} v")), ok());
    }
    assert_eq!(info_field(&mut c, "stats", "net_held_sends"), 0);
    assert_eq!(info_field(&mut c, "stats", "net_ring_fsyncs"), 0);
    assert_eq!(c.cmd("CONFIG SET appendfsync always"), ok());
    // 8 connections writing at once: each reply is held, and fsyncs are shared.
    let port = server.port;
    let writers: Vec<_> = (0..8)
        .map(|w| {
            std::thread::spawn(move || {
                let mut c = Client::connect(port);
                for i in 0..100 {
                    assert_eq!(c.cmd(&format!("SET w{w}-{i} v")), ok());
                }
            })
        })
        .collect();
    for w in writers {
        w.join().expect("writer");
    }
    let held = info_field(&mut c, "stats", "net_held_sends");
    let fsyncs = info_field(&mut c, "stats", "net_ring_fsyncs");
    // The 800 SETs, the CONFIG SET's own reply and the INFO reply before this one.
    assert!(held >= 800, "{held} sends held for 800 writes");
    assert!(
        fsyncs > 0 && fsyncs <= held,
        "{fsyncs} fsyncs for {held} held sends"
    );
    assert_eq!(c.cmd("CONFIG SET appendfsync everysec"), ok());
    let held_before = info_field(&mut c, "stats", "net_held_sends");
    for i in 0..20 {
        assert_eq!(c.cmd(&format!("SET again{i} v")), ok());
    }
    assert_eq!(info_field(&mut c, "stats", "net_held_sends"), held_before);
    drop(server);
    let server = start(&dir, 1, "everysec");
    let mut c = server.client();
    assert_eq!(c.cmd("DBSIZE"), int(50 + 800 + 20));
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

/// SWAPDB and MOVE are journaled on every shard: after a SIGKILL the keys are in the
/// databases they were moved to.
#[test]
fn swapdb_and_move_survive_a_crash() {
    let dir = temp_dir("swapdb");
    let server = start(&dir, 2, "always");
    let mut c = server.client();
    let keys: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
    for k in &keys {
        assert_eq!(c.cmd(&format!("SET {k} v-{k}")), ok());
    }
    assert_eq!(c.cmd("SWAPDB 0 4"), ok());
    assert_eq!(c.cmd("SELECT 4"), ok());
    assert_eq!(c.cmd("MOVE k0 6"), int(1));
    let mut server = server;
    server.child.kill().expect("SIGKILL");
    let _ = server.child.wait();
    let server = start(&dir, 2, "always");
    let mut c = server.client();
    assert_eq!(c.cmd("DBSIZE"), int(0));
    assert_eq!(c.cmd("SELECT 4"), ok());
    assert_eq!(c.cmd("DBSIZE"), int(19));
    assert_eq!(c.cmd("GET k7"), bulk("v-k7"));
    assert_eq!(c.cmd("SELECT 6"), ok());
    assert_eq!(c.cmd("GET k0"), bulk("v-k0"));
}

/// RESTORE is journaled like any write (the payload and, for a relative TTL, the time it
/// ran): after a SIGKILL every restored key is back with its value and its deadline.
#[test]
fn restored_keys_survive_a_crash() {
    let dir = temp_dir("restore");
    let server = start(&dir, 2, "always");
    let mut c = server.client();
    let keys: Vec<String> = (0..12).map(|i| format!("src{i}")).collect();
    for (i, k) in keys.iter().enumerate() {
        let reply = match i % 3 {
            0 => c.cmd(&format!("SET {k} value-{i}")),
            1 => c.cmd(&format!("RPUSH {k} a b {i}")),
            _ => c.cmd(&format!("XADD {k} {}-1 f {i}", i + 1)),
        };
        assert!(!reply.is_error(), "{reply:?}");
    }
    for k in &keys {
        let payload = c.cmd(&format!("DUMP {k}"));
        let Frame::Bulk(payload) = payload else {
            panic!("DUMP {k}: {payload:?}")
        };
        let copy = format!("copy-{k}");
        assert_eq!(
            c.cmd_args(&[b"RESTORE", copy.as_bytes(), b"1000000", &payload]),
            ok()
        );
    }
    let mut server = server;
    server.child.kill().expect("SIGKILL");
    let _ = server.child.wait();
    let server = start(&dir, 2, "always");
    let mut c = server.client();
    for (i, k) in keys.iter().enumerate() {
        let copy = format!("copy-{k}");
        let (theirs, ours) = match i % 3 {
            0 => (c.cmd(&format!("GET {k}")), c.cmd(&format!("GET {copy}"))),
            1 => (
                c.cmd(&format!("LRANGE {k} 0 -1")),
                c.cmd(&format!("LRANGE {copy} 0 -1")),
            ),
            _ => (
                c.cmd(&format!("XRANGE {k} - +")),
                c.cmd(&format!("XRANGE {copy} - +")),
            ),
        };
        assert_eq!(theirs, ours, "{copy}");
        let Frame::Integer(ttl) = c.cmd(&format!("PTTL {copy}")) else {
            panic!("PTTL")
        };
        assert!(ttl > 900_000 && ttl <= 1_000_000, "{copy}: {ttl}");
    }
}
