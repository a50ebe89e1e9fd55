//! Cross-shard operations recover all-or-nothing. Each involved shard journals its own part;
//! a crash between the parts and the coordinator's commit must bring back no part at all,
//! and a crash after the commit every part. Crash points (`WETASK_FAILPOINT`) end the real
//! server at exactly those two moments, for a MULTI/EXEC, a RENAME, a script, an MSET, a DEL
//! and an LMOVE whose keys live on both shards of two; and SIGKILLs at random moments under many
//! connections' cross-shard transactions must never leave one half of a transaction.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use wetask_protocol::Frame;

fn start(dir: &Path, shards: usize, env: &[(&str, &str)]) -> Server {
    let shards = shards.to_string();
    let dir = dir.to_str().expect("utf-8 path");
    let args = ["--dir", dir, "--shards", &shards, "--appendfsync", "always"];
    Server::start_with_env(&args, env)
}

/// Waits until every shard has loaded its journal (and so resolved its open part).
fn wait_loaded(server: &Server, shards: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.log_lines("journal loaded").len() < shards {
        assert!(Instant::now() < deadline, "the shards did not load");
        std::thread::sleep(Duration::from_millis(5));
    }
}

struct Case {
    name: &'static str,
    setup: Vec<Vec<String>>,
    /// The commands; the last one is cut by the crash point.
    operation: Vec<Vec<String>>,
    /// (command, reply before the operation, reply after it).
    checks: Vec<(Vec<String>, Frame, Frame)>,
}

fn words(line: &str) -> Vec<String> {
    line.split(' ').map(str::to_string).collect()
}

fn cases() -> Vec<Case> {
    let a = key_on("a", 0);
    let b = key_on("b", 1);
    let get = |k: &str| words(&format!("GET {k}"));
    let range = |k: &str| words(&format!("LRANGE {k} 0 -1"));
    let list = |items: &[&str]| array(items.iter().map(|i| bulk(i)).collect());
    vec![
        Case {
            name: "MULTI/EXEC",
            setup: vec![
                words(&format!("SET {a} old")),
                words(&format!("SET {b} old")),
            ],
            operation: vec![
                words("MULTI"),
                words(&format!("SET {a} new")),
                words(&format!("INCR {b}x")),
                words(&format!("SET {b} new")),
                words("EXEC"),
            ],
            checks: vec![
                (get(&a), bulk("old"), bulk("new")),
                (get(&b), bulk("old"), bulk("new")),
            ],
        },
        Case {
            name: "RENAME",
            setup: vec![words(&format!("SET {a} moved"))],
            operation: vec![words(&format!("RENAME {a} {b}"))],
            checks: vec![
                (get(&a), bulk("moved"), Frame::Null),
                (get(&b), Frame::Null, bulk("moved")),
            ],
        },
        Case {
            name: "EVAL",
            setup: vec![
                words(&format!("SET {a} old")),
                words(&format!("SET {b} old")),
            ],
            operation: vec![vec![
                "EVAL".into(),
                "redis.call('set', KEYS[1], ARGV[1]); redis.call('set', KEYS[2], ARGV[1])".into(),
                "2".into(),
                a.clone(),
                b.clone(),
                "new".into(),
            ]],
            checks: vec![
                (get(&a), bulk("old"), bulk("new")),
                (get(&b), bulk("old"), bulk("new")),
            ],
        },
        Case {
            name: "MSET",
            setup: vec![
                words(&format!("SET {a} old")),
                words(&format!("SET {b} old")),
            ],
            operation: vec![words(&format!("MSET {a} new {b} new"))],
            checks: vec![
                (get(&a), bulk("old"), bulk("new")),
                (get(&b), bulk("old"), bulk("new")),
            ],
        },
        Case {
            name: "DEL",
            setup: vec![
                words(&format!("SET {a} old")),
                words(&format!("SET {b} old")),
            ],
            operation: vec![words(&format!("DEL {a} {b}"))],
            checks: vec![
                (get(&a), bulk("old"), Frame::Null),
                (get(&b), bulk("old"), Frame::Null),
            ],
        },
        Case {
            name: "LMOVE",
            setup: vec![words(&format!("RPUSH {a} x y"))],
            operation: vec![words(&format!("LMOVE {a} {b} LEFT RIGHT"))],
            checks: vec![
                (range(&a), list(&["x", "y"]), list(&["y"])),
                (range(&b), list(&[]), list(&["x"])),
            ],
        },
    ]
}

fn send(c: &mut Client, command: &[String]) {
    let args: Vec<&[u8]> = command.iter().map(|w| w.as_bytes()).collect();
    c.send(&args);
}

fn check(server: &Server, case: &Case, committed: bool, when: &str) {
    let mut c = server.client();
    for (command, before, after) in &case.checks {
        send(&mut c, command);
        let expected = if committed { after } else { before };
        assert_eq!(
            c.read().as_ref(),
            Some(expected),
            "{}: {command:?} {when}",
            case.name
        );
    }
}

/// Runs `case` up to the crash point `failpoint`, restarts on `restart_shards`, and checks
/// the keys are all as before (`committed` false) or all as after; then once more, to see
/// the outcome was journaled.
fn crash_at(case: &Case, failpoint: &str, committed: bool, restart_shards: usize) {
    let dir = temp_dir("cross");
    let server = start(&dir, 2, &[]);
    let mut c = server.client();
    for command in &case.setup {
        send(&mut c, command);
        assert!(!matches!(c.read(), Some(Frame::Error(_)) | None));
    }
    drop(c);
    assert!(server.terminate().success());

    let mut server = start(&dir, 2, &[("WETASK_FAILPOINT", failpoint)]);
    let mut c = server.client();
    let (last, queued) = case.operation.split_last().expect("commands");
    for command in queued {
        send(&mut c, command);
        assert!(!matches!(c.read(), Some(Frame::Error(_)) | None));
    }
    send(&mut c, last);
    assert!(
        c.closed(),
        "{}: a reply came; the crash point was not reached",
        case.name
    );
    assert_eq!(
        server.wait().code(),
        Some(137),
        "{}: not the crash point",
        case.name
    );
    drop(server);

    let server = start(&dir, restart_shards, &[]);
    wait_loaded(&server, restart_shards);
    let context = format!("after {failpoint}, on {restart_shards} shards");
    check(&server, case, committed, &context);
    if restart_shards == 2 {
        // Each shard's part was on disk: the coordinator's commit decided for both.
        let rolled_back = server.log_lines("rolled back").len();
        let replayed = server.log_lines("it committed; replayed").len();
        match committed {
            false => assert_eq!((rolled_back, replayed), (2, 0), "{}: {context}", case.name),
            // The coordinator's part holds its commit; the participant's waited for it.
            true => assert_eq!((rolled_back, replayed), (0, 1), "{}: {context}", case.name),
        }
    }
    assert!(server.terminate().success());

    let server = start(&dir, restart_shards, &[]);
    wait_loaded(&server, restart_shards);
    check(
        &server,
        case,
        committed,
        &format!("{context}, restarted again"),
    );
    assert!(
        server
            .log_lines("inside a cross-shard operation")
            .is_empty(),
        "{}: the outcome was not journaled",
        case.name
    );
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_crash_before_the_commit_brings_back_no_part() {
    for case in cases() {
        crash_at(&case, "cross-before-commit", false, 2);
    }
}

#[test]
fn a_crash_after_the_commit_brings_back_every_part() {
    for case in cases() {
        crash_at(&case, "cross-after-commit", true, 2);
    }
}

#[test]
fn a_restart_on_another_shard_count_resolves_the_same() {
    let cases = cases();
    crash_at(&cases[0], "cross-before-commit", false, 1);
    crash_at(&cases[0], "cross-after-commit", true, 1);
}

/// One connection's cross-shard transactions: `x` (shard 0) and `y` (shard 1) both set to
/// `from + 1`, `from + 2` … in one MULTI/EXEC or MSET each, until the server dies. Returns the last
/// value acknowledged (`from` if none was).
fn transact_until_killed(port: u16, x: String, y: String, from: u64) -> u64 {
    let mut c = Client::connect(port);
    let mut acked = from;
    for n in from + 1.. {
        let n_text = n.to_string();
        let (x, y, n_bytes) = (x.as_bytes(), y.as_bytes(), n_text.as_bytes());
        // A MULTI/EXEC and an MSET (a split command) in turn: two cross-shard paths.
        if n % 2 == 0 {
            c.send(&[b"MSET", x, n_bytes, y, n_bytes]);
        } else {
            c.send(&[b"MULTI"]);
            c.send(&[b"SET", x, n_bytes]);
            c.send(&[b"SET", y, n_bytes]);
            c.send(&[b"EXEC"]);
            for _ in 0..3 {
                if !matches!(c.try_read(), Ok(Some(_))) {
                    return acked;
                }
            }
        }
        match c.try_read() {
            Ok(Some(Frame::Array(_) | Frame::Simple(_))) => acked = n,
            _ => return acked,
        }
    }
    acked
}

#[test]
fn sigkills_never_leave_half_a_cross_shard_transaction() {
    let dir = temp_dir("cross-kill");
    let mut rng = fastrand::Rng::with_seed(0xc055);
    let pairs: Vec<(String, String)> = (0..8)
        .map(|i| (key_on(&format!("x{i}:"), 0), key_on(&format!("y{i}:"), 1)))
        .collect();
    let mut acked = vec![0u64; pairs.len()];
    let rounds = 10;
    for round in 0..=rounds {
        let mut server = start(&dir, 2, &[]);
        wait_loaded(&server, 2);
        let mut c = server.client();
        for (i, (x, y)) in pairs.iter().enumerate() {
            let value = |k: &str, c: &mut Client| match c.cmd(&format!("GET {k}")) {
                Frame::Bulk(v) => String::from_utf8_lossy(&v).parse::<u64>().expect("a count"),
                Frame::Null => 0,
                other => panic!("GET {k}: {other:?}"),
            };
            let (vx, vy) = (value(x, &mut c), value(y, &mut c));
            assert_eq!(vx, vy, "round {round}: half of a transaction on pair {i}");
            assert!(
                vx >= acked[i],
                "round {round}: pair {i} lost an acknowledged write"
            );
            acked[i] = vx;
        }
        if round == rounds {
            break;
        }
        let port = server.port;
        let workers: Vec<_> = pairs
            .iter()
            .cloned()
            .zip(acked.clone())
            .map(|((x, y), from)| {
                std::thread::spawn(move || transact_until_killed(port, x, y, from))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(rng.u64(100..400)));
        server.child.kill().expect("SIGKILL");
        let _ = server.child.wait();
        for (i, worker) in workers.into_iter().enumerate() {
            acked[i] = acked[i].max(worker.join().expect("worker"));
        }
    }
    println!("{rounds} kills; transactions acknowledged per pair: {acked:?}");
    let _ = std::fs::remove_dir_all(dir);
}
