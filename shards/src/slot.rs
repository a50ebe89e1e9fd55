//! Key routing: the Redis Cluster hash slot (CRC16/XMODEM of the key, or of its `{hash tag}`,
//! mod 16384) and the shard that owns a slot: shard i of n owns the i-th of n contiguous
//! slot ranges, as each primary of a Redis Cluster made by `redis-cli --cluster create`
//! owns one range.

pub const SLOT_COUNT: u16 = 16384;

/// CRC16/XMODEM (polynomial 0x1021), the checksum Redis Cluster uses for slots. Every key
/// of every command on more than one shard goes through it. A byte at a time (through one
/// table, as Redis's `crc16.c`) each step waits for the last: 5.7% of a 2-shard server's CPU
/// under pipelined GETs of 16-byte keys. So eight bytes go at a time ("slicing by 8"):
/// eight lookups that do not wait for each other (docs/perf-notes.md, "The pipelined hop").
pub fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        // The register's two bytes meet the chunk's first two; the other six stand alone.
        let [high, low] = crc.to_be_bytes();
        crc = CRC16_TABLES[7][usize::from(high ^ chunk[0])]
            ^ CRC16_TABLES[6][usize::from(low ^ chunk[1])]
            ^ CRC16_TABLES[5][usize::from(chunk[2])]
            ^ CRC16_TABLES[4][usize::from(chunk[3])]
            ^ CRC16_TABLES[3][usize::from(chunk[4])]
            ^ CRC16_TABLES[2][usize::from(chunk[5])]
            ^ CRC16_TABLES[1][usize::from(chunk[6])]
            ^ CRC16_TABLES[0][usize::from(chunk[7])];
    }
    chunks.remainder().iter().fold(crc, |crc, &byte| {
        (crc << 8) ^ CRC16_TABLES[0][usize::from((crc >> 8) as u8 ^ byte)]
    })
}

/// `CRC16_TABLES[k][b]`: the CRC of byte `b` followed by `k` zero bytes, from a zero
/// register. Table 0 is the classic byte-at-a-time table; table k+1 is table k run through
/// one more zero byte. The CRC is linear, so a chunk's CRC is the XOR of its bytes' entries.
const CRC16_TABLES: [[u16; 256]; 8] = {
    let mut tables = [[0u16; 256]; 8];
    let mut byte = 0;
    while byte < 256 {
        tables[0][byte] = crc16_bitwise_byte(byte as u16);
        byte += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut byte = 0;
        while byte < 256 {
            let previous = tables[k - 1][byte];
            tables[k][byte] = (previous << 8) ^ tables[0][(previous >> 8) as usize];
            byte += 1;
        }
        k += 1;
    }
    tables
};

/// One byte's step of CRC16/XMODEM from a zero register, bit by bit (builds the table).
const fn crc16_bitwise_byte(byte: u16) -> u16 {
    let mut crc = byte << 8;
    let mut bit = 0;
    while bit < 8 {
        crc = if crc & 0x8000 != 0 {
            (crc << 1) ^ 0x1021
        } else {
            crc << 1
        };
        bit += 1;
    }
    crc
}

/// The part of the key that is hashed: the first non-empty `{...}` section, if any.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key)) % SLOT_COUNT
}

/// The shard owning `key` when there are `shard_count` shards.
pub fn shard_of(key: &[u8], shard_count: usize) -> usize {
    shard_of_slot(key_slot(key), shard_count)
}

/// The shard owning `slot` when there are `shard_count` shards: each owns one contiguous
/// range of slots, in order, as a Redis Cluster node does ([`slot_range`]), so that the
/// shards can be described to cluster clients as nodes with one range each. Once a cluster
/// of several nodes maps the slots ([`map_slots`]), the map says (a slot served elsewhere
/// keeps its arithmetic shard here: callers ask [`placement`] first).
#[inline]
pub fn shard_of_slot(slot: u16, shard_count: usize) -> usize {
    debug_assert!(shard_count > 0);
    if MAPPED.load(Relaxed) {
        let entry = SLOT_MAP[usize::from(slot)].load(Relaxed);
        if entry != ELSEWHERE {
            return usize::from(entry & SHARD_BITS);
        }
    }
    range_shard(slot, shard_count)
}

/// The shard whose range holds `slot` when `shard_count` shards share the slots in order
/// ([`slot_range`]), whatever a map says.
#[inline]
pub fn range_shard(slot: u16, shard_count: usize) -> usize {
    (usize::from(slot) * shard_count) >> 14
}

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU16};

/// Whether [`map_slots`] has replaced the arithmetic of [`shard_of_slot`] (cluster mode,
/// where slots are given to nodes by `CLUSTER ADDSLOTS` and move with `SETSLOT`).
static MAPPED: AtomicBool = AtomicBool::new(false);

/// Per slot: [`ELSEWHERE`], or the local shard serving it with the flags below. One
/// process-wide table (a process is one server), written by cluster commands and the bus,
/// read with one relaxed load per key by routing.
static SLOT_MAP: [AtomicU16; SLOT_COUNT as usize] =
    [const { AtomicU16::new(ELSEWHERE) }; SLOT_COUNT as usize];

/// No local shard owns or imports the slot: another node serves it (or none does).
pub const ELSEWHERE: u16 = u16::MAX;
/// The local shard imports the slot (`SETSLOT … IMPORTING`): it serves it after ASKING.
pub const IMPORTING: u16 = 1 << 14;
/// The local shard owns the slot and migrates it (`SETSLOT … MIGRATING`): a missing key is
/// answered `-ASK`.
pub const MIGRATING: u16 = 1 << 13;
const SHARD_BITS: u16 = MIGRATING - 1;

/// Where a slot is served, as the slot map says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// A local shard owns it, and nothing moves.
    Here(usize),
    /// A local shard owns it and migrates it away.
    Migrating(usize),
    /// A local shard imports it from another node.
    Importing(usize),
    /// Another node serves it, or none.
    Elsewhere,
}

/// Replaces the arithmetic for `shard_count` shards with `entries` (one per slot:
/// [`ELSEWHERE`], or a shard with [`IMPORTING`] or [`MIGRATING`]). A shard number must fit
/// under [`MIGRATING`]. A map that says what the arithmetic says (one process that is a whole
/// cluster, nothing moving) is not used: routing keeps its one-shard shortcuts and pays
/// nothing for cluster mode.
pub fn map_slots(entries: &[u16], shard_count: usize) {
    if BY_GROUPS.load(Relaxed) {
        return;
    }
    write_map(entries, shard_count);
}

/// Consensus mode: the map is group 0's (each slot's group, which is its shard on every
/// node), and from here on only this writes it (cluster mode's own views, self-assigned in
/// consensus mode, would put the arithmetic back).
pub fn map_groups(owners: &[u16], shard_count: usize) {
    BY_GROUPS.store(true, Relaxed);
    write_map(owners, shard_count);
}

/// Whether [`map_groups`] owns the map.
static BY_GROUPS: AtomicBool = AtomicBool::new(false);

fn write_map(entries: &[u16], shard_count: usize) {
    assert_eq!(entries.len(), usize::from(SLOT_COUNT));
    // Each entry is valid on its own while the table changes; the flag moves last.
    for (cell, &entry) in SLOT_MAP.iter().zip(entries) {
        cell.store(entry, Relaxed);
    }
    let arithmetic = entries
        .iter()
        .enumerate()
        .all(|(slot, &entry)| usize::from(entry) == range_shard(slot as u16, shard_count));
    MAPPED.store(!arithmetic, Relaxed);
}

/// Whether the slots are mapped ([`map_slots`]): a server in cluster mode.
#[inline]
pub fn mapped() -> bool {
    MAPPED.load(Relaxed)
}

/// Where `slot` is served. Without a map, every slot is here, on its arithmetic shard.
#[inline]
pub fn placement(slot: u16, shard_count: usize) -> Placement {
    if !mapped() {
        return Placement::Here(range_shard(slot, shard_count));
    }
    match SLOT_MAP[usize::from(slot)].load(Relaxed) {
        ELSEWHERE => Placement::Elsewhere,
        entry if entry & IMPORTING != 0 => Placement::Importing(usize::from(entry & SHARD_BITS)),
        entry if entry & MIGRATING != 0 => Placement::Migrating(usize::from(entry & SHARD_BITS)),
        entry => Placement::Here(usize::from(entry)),
    }
}

/// The first and last slot shard `shard` of `shard_count` owns (see [`shard_of_slot`]).
pub fn slot_range(shard: usize, shard_count: usize) -> (u16, u16) {
    let slots = usize::from(SLOT_COUNT);
    let first = (shard * slots).div_ceil(shard_count);
    let end = ((shard + 1) * slots).div_ceil(shard_count);
    (first as u16, (end - 1) as u16)
}

/// A short string whose slot is `slot`: `{tag}` in a name routes it to that slot. Task ids
/// carry their queue's tag, so an id finds its queue's shard with no lookup, and
/// cluster-aware clients route it too.
pub fn slot_tag(slot: u16) -> &'static [u8] {
    static TAGS: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
        let mut tags: Vec<Vec<u8>> = vec![Vec::new(); usize::from(SLOT_COUNT)];
        let mut missing = usize::from(SLOT_COUNT);
        let mut candidate = vec![0usize];
        while missing > 0 {
            let tag: Vec<u8> = candidate.iter().map(|&i| ALPHABET[i]).collect();
            let slot = usize::from(crc16(&tag) % SLOT_COUNT);
            if tags[slot].is_empty() {
                tags[slot] = tag;
                missing -= 1;
            }
            // Next candidate: count in base 62, growing a digit on overflow.
            let mut digit = 0;
            loop {
                if digit == candidate.len() {
                    candidate.push(0);
                    break;
                }
                candidate[digit] += 1;
                if candidate[digit] < ALPHABET.len() {
                    break;
                }
                candidate[digit] = 0;
                digit += 1;
            }
        }
        tags
    });
    &tags[usize::from(slot % SLOT_COUNT)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_has_a_short_tag_that_routes_to_it() {
        let mut longest = 0;
        for slot in 0..SLOT_COUNT {
            let tag = slot_tag(slot);
            longest = longest.max(tag.len());
            let name = [b"{".as_slice(), tag, b"}suffix"].concat();
            assert_eq!(key_slot(&name), slot);
        }
        assert!(longest <= 4, "tags stay short: {longest}");
    }

    #[test]
    fn each_shard_owns_one_contiguous_range_and_every_slot_has_one_owner() {
        for count in [1, 2, 3, 4, 5, 7, 8, 16, 64, 1000] {
            let mut next = 0u32;
            for shard in 0..count {
                let (first, last) = slot_range(shard, count);
                assert_eq!(u32::from(first), next, "{count} shards: ranges touch");
                assert!(first <= last);
                for slot in [first, last, first + (last - first) / 2] {
                    assert_eq!(shard_of_slot(slot, count), shard, "slot {slot} of {count}");
                }
                next = u32::from(last) + 1;
            }
            assert_eq!(
                next,
                u32::from(SLOT_COUNT),
                "{count} shards cover every slot"
            );
        }
        // Within one slot of how `redis-cli --cluster create` splits them (0-5460, 5461-10922,
        // 10923-16383 for 3 primaries).
        assert_eq!(slot_range(0, 3), (0, 5461));
        assert_eq!(slot_range(1, 3), (5462, 10922));
        assert_eq!(slot_range(2, 3), (10923, 16383));
        assert_eq!(slot_range(0, 2), (0, 8191));
    }

    /// The definition, bit by bit, for the table-driven `crc16` to agree with.
    fn crc16_bitwise(bytes: &[u8]) -> u16 {
        let mut crc: u16 = 0;
        for &byte in bytes {
            crc ^= u16::from(byte) << 8;
            for _ in 0..8 {
                crc = if crc & 0x8000 != 0 {
                    (crc << 1) ^ 0x1021
                } else {
                    crc << 1
                };
            }
        }
        crc
    }

    proptest::proptest! {
        #[test]
        fn the_tables_agree_with_the_bitwise_definition(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            proptest::prop_assert_eq!(crc16(&bytes), crc16_bitwise(&bytes));
        }
    }

    #[test]
    fn matches_redis_cluster_slots() {
        // Values from `CLUSTER KEYSLOT` on Redis.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(
            key_slot(b"{user1000}.following"),
            key_slot(b"{user1000}.followers")
        );
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
    }
}
