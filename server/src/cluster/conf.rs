//! The cluster configuration file (`cluster-config-file`, in `dir`): each local node's view
//! (`cluster::view::View`) as Redis writes `nodes.conf`, one node per line in `CLUSTER
//! NODES`' format, under a `view <shard> currentEpoch <n>` line per shard. A file written
//! before several nodes existed has node ids only (one per shard, by slot range): it reads
//! as those ids.

use std::fmt::Write as _;
use std::path::Path;

use super::view::{Node, View};

/// What a configuration file holds.
pub enum Saved {
    /// One view per shard, in shard order.
    Views(Vec<View>),
    /// A file of the first cluster mode: the shards' node ids, in slot-range order.
    Ids(Vec<String>),
    Nothing,
}

pub fn read(path: &Path) -> Result<Saved, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Saved::Nothing),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    if !text.lines().any(|l| l.starts_with("view ")) {
        return Ok(Saved::Ids(legacy_ids(&text)));
    }
    let bad = |line: &str| format!("{}: cannot read the line {line:?}", path.display());
    let mut views: Vec<View> = Vec::new();
    let mut epoch = 0;
    let mut pending: Vec<(Node, Vec<&str>, bool)> = Vec::new();
    let finish = |pending: &mut Vec<(Node, Vec<&str>, bool)>, epoch: u64| -> Option<View> {
        let me = pending.iter().position(|(_, _, me)| *me)?;
        let mut lines = std::mem::take(pending);
        let first = lines.remove(me);
        lines.insert(0, first);
        let mut view = View::alone(lines[0].0.clone());
        view.current_epoch = epoch;
        view.nodes = lines.iter().map(|(n, _, _)| n.clone()).collect();
        for (index, (_, slots, _)) in lines.iter().enumerate() {
            for field in slots {
                apply_slot_field(&mut view, index, field)?;
            }
        }
        Some(view)
    };
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            [] => continue,
            [comment, ..] if comment.starts_with('#') => continue,
            ["view", _, "currentEpoch", n] => {
                if !pending.is_empty() {
                    views.push(finish(&mut pending, epoch).ok_or_else(|| bad(line))?);
                }
                epoch = n.parse().map_err(|_| bad(line))?;
            }
            ["vars", ..] => continue,
            _ => {
                let (node, me) = node_of(&fields).ok_or_else(|| bad(line))?;
                pending.push((node, fields.get(8..).unwrap_or(&[]).to_vec(), me));
            }
        }
    }
    if !pending.is_empty() {
        views.push(finish(&mut pending, epoch).ok_or_else(|| bad("a view with no myself"))?);
    }
    Ok(Saved::Views(views))
}

/// The file's text for every view.
pub fn render(views: &[View]) -> String {
    let mut text = String::from(
        "# WeTask cluster configuration (docs/CLUSTER.md): each shard's view, as CLUSTER NODES\n",
    );
    for (shard, view) in views.iter().enumerate() {
        let _ = writeln!(text, "view {shard} currentEpoch {}", view.current_epoch);
        text.push_str(&nodes_text(view, "", |_| true));
    }
    text
}

/// Writes `text` ([`render`]), through a temporary file, an fsync and a rename: a crash
/// leaves the old file or the new one.
pub fn write(path: &Path, text: &str) -> Result<(), String> {
    let tmp = path.with_extension("tmp");
    let written = (|| {
        use std::io::Write;
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok::<(), std::io::Error>(())
    })();
    written.map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// `CLUSTER NODES`: a line per node, itself marked `myself`. `host` stands in for an
/// address this node does not know yet; `linked` says whether a node's link is up.
pub fn nodes_text(view: &View, host: &str, linked: impl Fn(&Node) -> bool) -> String {
    let mut out = String::new();
    for (index, node) in view.nodes.iter().enumerate() {
        let flags = match (index, node.handshake) {
            (0, _) => "myself,master",
            (_, true) => "handshake",
            _ => "master",
        };
        let ip = if node.ip.is_empty() { host } else { &node.ip };
        let link = if index == 0 || linked(node) {
            "connected"
        } else {
            "disconnected"
        };
        let _ = write!(
            out,
            "{} {ip}:{}@{} {flags} - 0 {} {} {link}",
            node.id, node.port, node.cport, node.seen_ms, node.epoch
        );
        for (first, last) in view.ranges_of(index) {
            if first == last {
                let _ = write!(out, " {first}");
            } else {
                let _ = write!(out, " {first}-{last}");
            }
        }
        if index == 0 {
            for (slot, to) in &view.migrating {
                let _ = write!(out, " [{slot}->-{to}]");
            }
            for (slot, from) in &view.importing {
                let _ = write!(out, " [{slot}-<-{from}]");
            }
        }
        out.push('\n');
    }
    out
}

/// A node line's node, and whether it is `myself`.
fn node_of(fields: &[&str]) -> Option<(Node, bool)> {
    let [id, address, flags, _master, _ping, seen, epoch, _link, ..] = fields else {
        return None;
    };
    let address = address.split(',').next()?;
    let (ip_port, cport) = address.split_once('@')?;
    let (ip, port) = ip_port.rsplit_once(':')?;
    let node = Node {
        id: id.to_string(),
        ip: ip.to_string(),
        port: port.parse().ok()?,
        cport: cport.parse().ok()?,
        epoch: epoch.parse().ok()?,
        handshake: flags.split(',').any(|f| f == "handshake"),
        seen_ms: seen.parse().ok()?,
    };
    Some((node, flags.split(',').any(|f| f == "myself")))
}

/// A slot field of the node at `index`: `n`, `a-b`, `[n->-id]` or `[n-<-id]`.
fn apply_slot_field(view: &mut View, index: usize, field: &str) -> Option<()> {
    if let Some(inner) = field.strip_prefix('[').and_then(|f| f.strip_suffix(']')) {
        if let Some((slot, to)) = inner.split_once("->-") {
            view.migrating.insert(slot.parse().ok()?, to.to_string());
        } else {
            let (slot, from) = inner.split_once("-<-")?;
            view.importing.insert(slot.parse().ok()?, from.to_string());
        }
        return Some(());
    }
    let (first, last) = match field.split_once('-') {
        Some((a, b)) => (a.parse::<u16>().ok()?, b.parse::<u16>().ok()?),
        None => (field.parse().ok()?, field.parse().ok()?),
    };
    if last < first || last >= wetask_shards::slot::SLOT_COUNT {
        return None;
    }
    for slot in first..=last {
        view.assign(slot, index);
    }
    Some(())
}

/// The node ids a first-mode file names, in the order of the slot ranges they own.
fn legacy_ids(text: &str) -> Vec<String> {
    let mut owned: Vec<(u32, String)> = text
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let id = *fields.first()?;
            if id.len() != 40 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            let first = fields
                .get(8)
                .and_then(|range| range.split('-').next())
                .and_then(|slot| slot.parse().ok())
                .unwrap_or(u32::MAX);
            Some((first, id.to_string()))
        })
        .collect();
    owned.sort();
    owned.into_iter().map(|(_, id)| id).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: char, port: u16, epoch: u64) -> Node {
        Node {
            id: id.to_string().repeat(40),
            ip: "127.0.0.1".into(),
            port,
            cport: port + 10000,
            epoch,
            handshake: false,
            seen_ms: 0,
        }
    }

    #[test]
    fn views_read_back_as_they_were_written() {
        let mut first = View::alone(node('a', 7000, 2));
        first.current_epoch = 3;
        first.add_slots(&[0, 1, 2, 10]).unwrap();
        first.nodes.push(node('b', 7001, 3));
        first.assign(11, 1);
        first.nodes[1].ip.clear();
        first.set_migrating(2, &"b".repeat(40)).unwrap();
        let mut second = View::alone(node('b', 7001, 3));
        second.importing.insert(4, "a".repeat(40));
        let dir = std::env::temp_dir().join(format!("wetask-conf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("nodes.conf");
        write(&path, &render(&[first.clone(), second.clone()])).unwrap();
        let Saved::Views(views) = read(&path).unwrap() else {
            panic!("views expected");
        };
        assert_eq!(views.len(), 2);
        assert_eq!(views[0].nodes, first.nodes);
        assert_eq!(views[0].ranges_of(0), vec![(0, 2), (10, 10)]);
        assert_eq!(views[0].ranges_of(1), vec![(11, 11)]);
        assert_eq!(views[0].migrating, first.migrating);
        assert_eq!(views[0].current_epoch, 3);
        assert_eq!(views[1].importing, second.importing);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains(&format!(
                "{} 127.0.0.1:7000@17000 myself,master - 0 0 2 connected 0-2 10 [2->-{}]",
                "a".repeat(40),
                "b".repeat(40)
            )),
            "{text}"
        );
        std::fs::write(&path, "view 0 currentEpoch 1\nnot a node line\n").unwrap();
        assert!(
            read(&path).is_err(),
            "a damaged file is an error, not an empty cluster"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_first_mode_file_reads_as_its_ids_in_range_order() {
        let text = format!(
            "{b} 127.0.0.1:7002@0 master - 0 0 2 connected 8192-16383\n{a} 127.0.0.1:7001@0 master - 0 0 1 connected 0-8191\nvars currentEpoch 2 lastVoteEpoch 0\n",
            a = "a".repeat(40),
            b = "b".repeat(40)
        );
        assert_eq!(legacy_ids(&text), vec!["a".repeat(40), "b".repeat(40)]);
    }
}
