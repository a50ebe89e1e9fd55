//! Cluster mode on one node (`--cluster-enabled yes`, docs/CLUSTER.md): every shard is
//! described as a primary owning one slot range and serving on its own port; a key sent to
//! a shard port that does not own it gets `-MOVED slot host:port`; keys spread over shards
//! are served with hops; node ids survive a restart. Random key and queue names on 2 and 4
//! shards, so that no lucky name hides a routing bug.

mod common;

use common::*;
use wetask_protocol::Frame;

/// One shard as `CLUSTER SLOTS` describes it.
#[derive(Debug, Clone)]
struct Node {
    first: i64,
    last: i64,
    port: u16,
    id: String,
}

fn text(frame: &Frame) -> String {
    match frame {
        Frame::Bulk(b) | Frame::Simple(b) | Frame::Error(b) => {
            String::from_utf8_lossy(b).to_string()
        }
        Frame::Verbatim(_, b) => String::from_utf8_lossy(b).to_string(),
        other => panic!("not text: {other:?}"),
    }
}

fn int_of(frame: &Frame) -> i64 {
    match frame {
        Frame::Integer(n) => *n,
        other => panic!("not an integer: {other:?}"),
    }
}

fn slots(c: &mut Client) -> Vec<Node> {
    let Frame::Array(entries) = c.cmd("CLUSTER SLOTS") else {
        panic!("CLUSTER SLOTS is an array")
    };
    let mut nodes: Vec<Node> = entries
        .iter()
        .map(|entry| {
            let Frame::Array(parts) = entry else {
                panic!("{entry:?}")
            };
            let Frame::Array(node) = &parts[2] else {
                panic!("{entry:?}")
            };
            Node {
                first: int_of(&parts[0]),
                last: int_of(&parts[1]),
                port: int_of(&node[1]) as u16,
                id: text(&node[2]),
            }
        })
        .collect();
    nodes.sort_by_key(|n| n.first);
    nodes
}

fn random_name(rng: &mut fastrand::Rng, prefix: &str) -> String {
    let len = rng.usize(1..12);
    let tail: String = (0..len).map(|_| rng.alphanumeric()).collect();
    format!("{prefix}{tail}")
}

#[test]
fn cluster_commands_answer_disabled_when_cluster_mode_is_off() {
    let server = Server::start(&["--shards", "2"]);
    let mut c = server.client();
    for command in ["CLUSTER INFO", "CLUSTER SLOTS", "ASKING", "READONLY"] {
        assert_eq!(
            c.cmd(command),
            err("ERR This instance has cluster support disabled"),
            "{command}"
        );
    }
}

#[test]
// Long: one walk per shard count through the description, then routing of random names.
fn every_shard_is_a_node_that_owns_its_range_and_moves_the_rest() {
    let mut rng = fastrand::Rng::with_seed(35);
    for shards in [2usize, 4] {
        let server = Server::start(&["--shards", &shards.to_string(), "--cluster-enabled", "yes"]);
        let mut shared = server.client();
        let nodes = slots(&mut shared);
        assert_eq!(nodes.len(), shards);
        assert_eq!(nodes[0].first, 0);
        assert_eq!(nodes[shards - 1].last, 16383);
        for pair in nodes.windows(2) {
            assert_eq!(pair[0].last + 1, pair[1].first, "ranges touch: {nodes:?}");
        }
        let server_info = text(&shared.cmd("INFO server"));
        assert!(server_info.contains("redis_mode:cluster"), "{server_info}");
        let info = text(&shared.cmd("INFO cluster"));
        assert!(info.contains("cluster_enabled:1"), "{info}");
        let info = text(&shared.cmd("CLUSTER INFO"));
        assert!(info.contains("cluster_state:ok"), "{info}");
        assert!(
            info.contains(&format!("cluster_known_nodes:{shards}")),
            "{info}"
        );
        assert_eq!(
            text(&shared.cmd("CLUSTER NODES")).lines().count(),
            shards,
            "a line per shard"
        );
        let mut direct: Vec<Client> = nodes.iter().map(|n| Client::connect(n.port)).collect();
        for (node, c) in nodes.iter().zip(&mut direct) {
            assert_eq!(text(&c.cmd("CLUSTER MYID")), node.id);
            assert_eq!(c.cmd("ASKING"), ok());
        }
        let owner_of = |slot: i64| nodes.iter().position(|n| n.first <= slot && slot <= n.last);
        for _ in 0..100 {
            let key = random_name(&mut rng, "k");
            let slot = int_of(&shared.cmd_args(&[b"CLUSTER", b"KEYSLOT", key.as_bytes()]));
            let owner = owner_of(slot).expect("an owner");
            // Its owner's port serves it, with no hop...
            let value = format!("v-{key}");
            assert_eq!(
                direct[owner].cmd_args(&[b"SET", key.as_bytes(), value.as_bytes()]),
                ok()
            );
            assert_eq!(
                direct[owner].cmd_args(&[b"GET", key.as_bytes()]),
                bulk(&value)
            );
            // ... every other shard port moves it there, and the shared port serves it.
            let other = (owner + 1 + rng.usize(0..shards - 1)) % shards;
            let moved = direct[other].cmd_args(&[b"GET", key.as_bytes()]);
            assert_eq!(
                moved,
                err(&format!("MOVED {slot} 127.0.0.1:{}", nodes[owner].port)),
                "{key} on shard {other}"
            );
            assert_eq!(shared.cmd_args(&[b"GET", key.as_bytes()]), bulk(&value));
        }
        // A queue routes by its slot as a key does: submitted and fetched on its owner's port.
        for _ in 0..20 {
            let queue = random_name(&mut rng, "q");
            let slot = int_of(&shared.cmd_args(&[b"CLUSTER", b"KEYSLOT", queue.as_bytes()]));
            let owner = owner_of(slot).expect("an owner");
            let other = (owner + 1) % shards;
            assert_eq!(
                direct[other].cmd_args(&[b"TASK.SUBMIT", queue.as_bytes(), b"work"]),
                err(&format!("MOVED {slot} 127.0.0.1:{}", nodes[owner].port))
            );
            let id = direct[owner].cmd_args(&[b"TASK.SUBMIT", queue.as_bytes(), b"work"]);
            assert!(matches!(id, Frame::Bulk(_)), "{id:?}");
            let fetched = direct[owner].cmd_args(&[b"TASK.FETCH", queue.as_bytes()]);
            assert!(
                matches!(&fetched, Frame::Array(tasks) if tasks.len() == 1),
                "{fetched:?}"
            );
        }
        // Keys of several shards, on a shard port: one node serves them all, with hops.
        let (a, b) = loop {
            let (a, b) = (random_name(&mut rng, "a"), random_name(&mut rng, "b"));
            let slot_a = int_of(&shared.cmd_args(&[b"CLUSTER", b"KEYSLOT", a.as_bytes()]));
            let slot_b = int_of(&shared.cmd_args(&[b"CLUSTER", b"KEYSLOT", b.as_bytes()]));
            if owner_of(slot_a) != owner_of(slot_b) {
                break (a, b);
            }
        };
        assert_eq!(
            direct[0].cmd_args(&[b"MSET", a.as_bytes(), b"1", b.as_bytes(), b"2"]),
            ok()
        );
        assert_eq!(
            direct[shards - 1].cmd_args(&[b"MGET", a.as_bytes(), b.as_bytes()]),
            array(vec![bulk("1"), bulk("2")])
        );
        // The keys of a slot, counted and listed by its owner.
        let slot = int_of(&shared.cmd_args(&[b"CLUSTER", b"KEYSLOT", a.as_bytes()]));
        let slot_text = slot.to_string();
        assert!(
            int_of(&shared.cmd_args(&[b"CLUSTER", b"COUNTKEYSINSLOT", slot_text.as_bytes()])) >= 1
        );
        let Frame::Array(listed) =
            shared.cmd_args(&[b"CLUSTER", b"GETKEYSINSLOT", slot_text.as_bytes(), b"100"])
        else {
            panic!("GETKEYSINSLOT is an array")
        };
        assert!(listed.contains(&bulk(&a)), "{listed:?}");
        assert_eq!(
            shared.cmd("CLUSTER COUNTKEYSINSLOT 16384"),
            err("ERR Invalid or out of range slot")
        );
        assert!(matches!(shared.cmd("CLUSTER NOSUCH"), Frame::Error(_)));
        let Frame::Error(unsupported) = shared.cmd("CLUSTER REPLICATE 0123") else {
            panic!("CLUSTER REPLICATE is refused: every node is a primary")
        };
        assert!(
            String::from_utf8_lossy(&unsupported).contains("not supported yet"),
            "{unsupported:?}"
        );
        assert!(matches!(shared.cmd("CLUSTER HELP"), Frame::Array(lines) if lines.len() > 10));
        // A shard port is a node: DBSIZE and SCAN cover that shard's keys alone, and the
        // shards' counts add up to the shared port's.
        let total = int_of(&shared.cmd("DBSIZE"));
        let mut sum = 0;
        for (shard, c) in direct.iter_mut().enumerate() {
            sum += int_of(&c.cmd("DBSIZE"));
            let Frame::Array(parts) = c.cmd("SCAN 0 COUNT 100000") else {
                panic!("SCAN is an array")
            };
            assert_eq!(parts[0], bulk("0"), "one call scans a small shard");
            for key in sorted_strings(parts[1].clone()) {
                let slot = int_of(&shared.cmd_args(&[b"CLUSTER", b"KEYSLOT", key.as_bytes()]));
                assert_eq!(
                    owner_of(slot),
                    Some(shard),
                    "{key} scanned on shard {shard}"
                );
            }
        }
        assert_eq!(sum, total);
    }
}

#[test]
fn node_ids_survive_a_restart() {
    let dir = temp_dir("cluster-ids");
    let dir_arg = dir.to_str().unwrap();
    let args = [
        "--shards",
        "2",
        "--cluster-enabled",
        "yes",
        "--dir",
        dir_arg,
    ];
    let before: Vec<String> = {
        let server = Server::start(&args);
        slots(&mut server.client())
            .into_iter()
            .map(|n| n.id)
            .collect()
    };
    let server = Server::start(&args);
    let after: Vec<String> = slots(&mut server.client())
        .into_iter()
        .map(|n| n.id)
        .collect();
    assert_eq!(before, after);
    assert!(std::fs::read_to_string(dir.join("nodes.conf"))
        .unwrap()
        .contains(&before[0]));
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}
