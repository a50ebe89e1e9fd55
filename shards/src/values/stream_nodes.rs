//! How Redis packs a stream into listpack nodes, modelled beside the entries: which entries
//! share a node and how many bytes the node's listpack takes. Approximate trimming (`MAXLEN
//! ~`, `MINID ~`) removes whole nodes only, so to trim what Redis trims WeTask must cut where
//! Redis's nodes end. Redis starts a new node when the tail one holds
//! `stream-node-max-entries` entries (live or deleted; 100) or when the next entry's fields
//! and values would take it to `stream-node-max-bytes` (4096), counted in listpack bytes
//! (t_stream.c, `streamAppendItem`); this module counts those bytes as listpack.c encodes
//! them. A deleted entry stays in its node (flagged) until the node has no live entry left,
//! then the node goes.
//!
//! The entries themselves live in `Stream`; this is bookkeeping only, rebuilt from the
//! entries when a stream is loaded (so a reloaded stream's nodes are freshly packed, as if
//! its entries had just been added; Redis keeps its nodes as they were).

use std::collections::VecDeque;

use bytes::Bytes;

use crate::values::stream_id::StreamId;

/// Redis's `stream-node-max-entries` default.
pub const NODE_ENTRIES_MAX: u64 = 100;
/// Redis's `stream-node-max-bytes` default.
pub const NODE_BYTES_MAX: usize = 4096;
/// A listpack's header (total bytes, element count) and end byte.
const LISTPACK_OVERHEAD_BYTES: usize = 7;
/// An entry's flags: its fields are the node's master fields.
const SAME_FIELDS: i64 = 2;

#[derive(Clone, Debug)]
struct Node {
    /// The first id the node got (Redis's node key).
    master: StreamId,
    /// The last id the node got, deleted or not.
    last: StreamId,
    live: u64,
    deleted: u64,
    bytes: usize,
    /// The master entry's field names (those of the node's first entry).
    fields: Vec<Bytes>,
}

/// The nodes of one stream, oldest first. The last is the one entries are appended to.
#[derive(Clone, Debug, Default)]
pub struct Nodes {
    nodes: VecDeque<Node>,
}

/// Layout, not content: two streams with the same entries are equal however packed.
impl PartialEq for Nodes {
    fn eq(&self, _: &Nodes) -> bool {
        true
    }
}

/// Which entries an approximate trim may remove.
#[derive(Clone, Copy, Debug)]
pub enum Cut {
    /// Down to this many entries.
    MaxLen(usize),
    /// Those with ids below this one.
    MinId(StreamId),
}

impl Nodes {
    /// How many nodes (XINFO STREAM's `radix-tree-keys`).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Notes entry `id` with `fields` (field, value, field, value …) appended.
    pub fn add(&mut self, id: StreamId, fields: &[Bytes]) {
        let pairs = fields.len() / 2;
        let raw_bytes: usize = fields.iter().map(Bytes::len).sum();
        let full = self.nodes.back().is_none_or(|tail| {
            tail.bytes + raw_bytes >= NODE_BYTES_MAX || tail.live + tail.deleted >= NODE_ENTRIES_MAX
        });
        if full {
            let names: Vec<Bytes> = fields.iter().step_by(2).cloned().collect();
            let mut bytes = LISTPACK_OVERHEAD_BYTES
                + int_element(1)
                + int_element(0)
                + int_element(pairs as i64)
                + names.iter().map(|n| string_element(n)).sum::<usize>()
                + int_element(0);
            bytes += entry_bytes(id, id, fields, true);
            self.nodes.push_back(Node {
                master: id,
                last: id,
                live: 1,
                deleted: 0,
                bytes,
                fields: names,
            });
            return;
        }
        let tail = self.nodes.back_mut().expect("not full: there is one");
        let same = pairs == tail.fields.len()
            && fields
                .iter()
                .step_by(2)
                .zip(&tail.fields)
                .all(|(a, b)| a == b);
        tail.bytes = tail.bytes - int_element(tail.live as i64) + int_element(tail.live as i64 + 1);
        tail.live += 1;
        tail.bytes += entry_bytes(id, tail.master, fields, same);
        tail.last = id;
    }

    /// Notes entry `id` deleted (XDEL, an exact trim): flagged in its node, and the node
    /// gone once no live entry is left in it.
    pub fn remove(&mut self, id: StreamId) {
        let at = self.nodes.partition_point(|n| n.master <= id);
        let Some(index) = at.checked_sub(1) else {
            return;
        };
        let node = &mut self.nodes[index];
        if node.live <= 1 {
            // The one before becomes the tail, if this was it, and takes appends again.
            self.nodes.remove(index);
            return;
        }
        node.bytes = node.bytes - int_element(node.live as i64) + int_element(node.live as i64 - 1);
        node.bytes =
            node.bytes - int_element(node.deleted as i64) + int_element(node.deleted as i64 + 1);
        node.live -= 1;
        node.deleted += 1;
    }

    /// How many entries, oldest first, an approximate trim removes from a stream of
    /// `length` entries: whole nodes while the cut allows and at most `limit` entries, as
    /// Redis's `streamTrim` walks them.
    pub fn whole_nodes(&self, length: usize, cut: Cut, limit: usize) -> usize {
        let (mut length, mut removed) = (length, 0);
        for node in &self.nodes {
            let entries = node.live as usize;
            if let Cut::MaxLen(maxlen) = cut {
                if length <= maxlen {
                    break;
                }
            }
            if removed + entries > limit {
                break;
            }
            let whole = match cut {
                Cut::MaxLen(maxlen) => length - entries >= maxlen,
                Cut::MinId(min) => node.last < min,
            };
            if !whole {
                break;
            }
            length -= entries;
            removed += entries;
        }
        removed
    }
}

/// The listpack bytes of one entry after the master entry (flags, id deltas, the field
/// count and names unless they are the master's, the values, the element count).
fn entry_bytes(id: StreamId, master: StreamId, fields: &[Bytes], same: bool) -> usize {
    let pairs = fields.len() as i64 / 2;
    let flags = if same { SAME_FIELDS } else { 0 };
    // Redis subtracts as unsigned 64-bit numbers and stores the result as a signed one.
    let ms_delta = id.ms.wrapping_sub(master.ms) as i64;
    let seq_delta = id.seq.wrapping_sub(master.seq) as i64;
    let mut bytes = int_element(flags) + int_element(ms_delta) + int_element(seq_delta);
    let mut count = pairs + 3;
    if !same {
        bytes += int_element(pairs);
        count += pairs + 1;
    }
    for (i, piece) in fields.iter().enumerate() {
        if same && i % 2 == 0 {
            continue;
        }
        bytes += string_element(piece);
    }
    bytes + int_element(count)
}

/// An integer element's bytes: its encoding and the back-length after it.
fn int_element(value: i64) -> usize {
    element(match value {
        0..=127 => 1,
        -4096..=4095 => 2,
        -32_768..=32_767 => 3,
        -8_388_608..=8_388_607 => 4,
        -2_147_483_648..=2_147_483_647 => 5,
        _ => 9,
    })
}

/// A string element's bytes: stored as an integer when it spells one exactly (listpack's
/// `lpStringToInt64`), else a length header and the bytes.
pub(crate) fn string_element(text: &[u8]) -> usize {
    if let Some(value) = as_int(text) {
        return int_element(value);
    }
    element(match text.len() {
        len @ 0..=63 => 1 + len,
        len @ 64..=4095 => 2 + len,
        len => 5 + len,
    })
}

/// An element of `encoded` bytes, with its back-length.
fn element(encoded: usize) -> usize {
    let backlen = match encoded {
        0..=127 => 1,
        128..=16_382 => 2,
        16_383..=2_097_150 => 3,
        2_097_151..=268_435_454 => 4,
        _ => 5,
    };
    encoded + backlen
}

/// `text` as a 64-bit integer when it is one's canonical spelling (no sign but `-`, no
/// leading zero, no blank), as listpack decides.
fn as_int(text: &[u8]) -> Option<i64> {
    if text.is_empty() || text.len() > 20 {
        return None;
    }
    let digits = text.strip_prefix(b"-").unwrap_or(text);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if digits[0] == b'0' && (digits.len() > 1 || text.len() > 1) {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(ms: u64) -> StreamId {
        StreamId { ms, seq: 0 }
    }

    fn fields(value: &str) -> Vec<Bytes> {
        vec![
            Bytes::from_static(b"f"),
            Bytes::copy_from_slice(value.as_bytes()),
        ]
    }

    #[test]
    fn small_entries_pack_a_hundred_a_node() {
        let mut nodes = Nodes::default();
        for ms in 1..=350 {
            nodes.add(id(ms), &fields("v"));
        }
        assert_eq!(nodes.len(), 4);
        // Redis 7.0, the same entries: MAXLEN ~ 120 removes 200, MINID ~ 150 removes 100.
        assert_eq!(nodes.whole_nodes(350, Cut::MaxLen(120), usize::MAX), 200);
        assert_eq!(nodes.whole_nodes(350, Cut::MinId(id(150)), usize::MAX), 100);
        assert_eq!(nodes.whole_nodes(350, Cut::MaxLen(10), 150), 100);
        assert_eq!(nodes.whole_nodes(350, Cut::MaxLen(10), 50), 0);
    }

    #[test]
    fn big_entries_fill_a_node_by_bytes() {
        // Redis 7.0, 350 entries of a 100-byte value: MAXLEN ~ 120 removes 216, so its
        // nodes hold 36 (the first 37).
        let mut nodes = Nodes::default();
        let value = "v".repeat(100);
        for ms in 1..=350 {
            nodes.add(id(ms), &fields(&value));
        }
        assert_eq!(nodes.whole_nodes(350, Cut::MaxLen(120), usize::MAX), 216);
    }

    #[test]
    fn a_deleted_entry_keeps_its_node_until_the_node_is_empty() {
        let mut nodes = Nodes::default();
        for ms in 1..=350 {
            nodes.add(id(ms), &fields("v"));
        }
        nodes.remove(id(5));
        // Redis 7.0: MINID ~ 150 after XDEL of 5 removes the first node's 99 live entries.
        assert_eq!(nodes.whole_nodes(349, Cut::MinId(id(150)), usize::MAX), 99);
        for ms in 101..=200 {
            nodes.remove(id(ms));
        }
        assert_eq!(nodes.len(), 3);
    }

    #[test]
    fn integers_and_strings_take_listpack_sizes() {
        assert_eq!(as_int(b"123"), Some(123));
        assert_eq!(as_int(b"-7"), Some(-7));
        assert_eq!(as_int(b"0"), Some(0));
        for text in [
            &b"01"[..],
            b"-0",
            b"+1",
            b" 1",
            b"",
            b"1a",
            b"99999999999999999999",
        ] {
            assert_eq!(as_int(text), None, "{text:?}");
        }
        assert_eq!(int_element(5), 2);
        assert_eq!(int_element(-5), 3);
        assert_eq!(string_element(b"v"), 3);
        assert_eq!(string_element(&[b'x'; 100]), 103);
    }
}
