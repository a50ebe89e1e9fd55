//! What one journal record holds: the operations a shard applied in one loop turn, in order.
//!
//! Most writes are logged as the command itself with the shard clock it ran at (`Cmd`):
//! replay sets the clock back to that instant and runs the command again, so anything that
//! depends on time (EXPIRE's absolute time, SET EX, XADD's `*`, a lease's expiry, a retry's
//! due time) comes out the same, and lazy expiry replays as it happened. What does not
//! follow from the state and the clock is logged as its effect instead: SPOP as the SREM of
//! what it took, an evicted key as `Del`, a key that arrived from another shard as `Put`,
//! the state of this shard's keys after a command that ran on borrowed keys. The task
//! engine's changes that no command made (leases that expired, tasks that came due, a
//! closed connection's leases) are logged as the engine call that made them.

use bytes::Bytes;

use super::codec::{put_entry, read_entry};
use crate::keyspace::Entry;
use crate::tasks::{BatchNote, Fallback, Origin};
use crate::wire::{
    put_bytes, put_bytes_list, put_opt_bytes, put_opt_u64, put_u64, DecodeError, Decoded, Reader,
};

const CMD: u8 = 1;
const PUT: u8 = 2;
const DEL: u8 = 3;
const TICK: u8 = 4;
const FETCH: u8 = 5;
const UNLEASE: u8 = 6;
const RELEASE: u8 = 7;
const FALLBACK: u8 = 8;
const RELEASE_ALL: u8 = 9;
const PART: u8 = 10;
const PART_END: u8 = 11;
const ABORT: u8 = 12;
const COMMIT: u8 = 13;
const BATCH_NOTE: u8 = 14;
const RESET: u8 = 15;
const SNAPSHOT_PART: u8 = 16;
const SNAPSHOT_END: u8 = 17;
const FUNCTIONS: u8 = 18;
const SYNC_WHOLE: u8 = 19;
const SLOTS: u8 = 20;

/// The most shards one commit names (far past any shard count a server takes).
const PARTS_MAX: u64 = 4096;

/// One logged operation, decoded.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// A command, run for `client` in database `db` with the clock at `now_ms`.
    Cmd {
        db: usize,
        client: u64,
        now_ms: u64,
        args: Vec<Bytes>,
    },
    /// A key's whole entry, stored (replacing what was there).
    Put { db: usize, key: Bytes, entry: Entry },
    /// A key removed.
    Del { db: usize, key: Bytes },
    /// The task engine advanced its clock to `now_ms` (due tasks, expired leases, deadlines).
    Tick { now_ms: u64 },
    /// A fetch the server made on the engine (TASK.FETCH runs outside the command table).
    Fetch {
        client: u64,
        now_ms: u64,
        queues: Vec<Bytes>,
        count: usize,
        lease_ms: Option<u64>,
    },
    /// Leases handed back that never reached their client.
    Unlease {
        client: u64,
        now_ms: u64,
        ids: Vec<Bytes>,
    },
    /// A connection closed: its leases went back.
    Release { client: u64, now_ms: u64 },
    /// A dead task's fallback submitted here.
    Fallback { now_ms: u64, fallback: Fallback },
    /// Every lease released (a restart: leases from before it are lost).
    ReleaseAll { now_ms: u64 },
    /// The operations after this one belong to the cross-shard operation `token`, which
    /// holds this shard's lock (`crate::shard::cross_commit`).
    Part { token: u64 },
    /// The operations after this one belong to no cross-shard operation.
    PartEnd,
    /// Written at a restart: the cross-shard operation whose part ends this journal never
    /// committed, and its part is not replayed.
    Abort { token: u64 },
    /// On the coordinator of a cross-shard operation: it committed, with parts journaled
    /// on `parts` (shard ids).
    Commit { token: u64, parts: Vec<u64> },
    /// On a batch's home: a child's end heard of.
    BatchNote { now_ms: u64, note: BatchNote },
    /// A replica's full sync began: everything the shard held is gone (`crate::shard::replica`).
    Reset,
    /// One part of the primary's snapshot, as a snapshot file holds it.
    SnapshotPart { body: Bytes },
    /// The primary's snapshot is whole: the task engine's indexes are rebuilt.
    SnapshotEnd,
    /// Consensus mode, the metadata group (shard 0's): the function libraries as they are
    /// from here on, whole, in FUNCTION DUMP's format (the server loads them).
    Functions { dump: Bytes },
    /// A replica's full sync that `Reset` began ended with no snapshot end of WeTask's (a
    /// Redis primary's RDB went in as commands), or the node was told to keep the part it
    /// held: the shard's data is whole from here.
    SyncWhole,
    /// Consensus mode: a step of a slot move between groups, or group 0's slot map
    /// (`crate::shard::slot_moves` reads the body).
    Slots { body: Bytes },
}

pub fn put_cmd(out: &mut Vec<u8>, db: usize, client: u64, now_ms: u64, args: &[Bytes]) {
    out.push(CMD);
    put_u64(out, db as u64);
    put_u64(out, client);
    put_u64(out, now_ms);
    put_bytes_list(out, args);
}

pub fn put_put(out: &mut Vec<u8>, db: usize, key: &[u8], entry: &Entry) {
    out.push(PUT);
    put_u64(out, db as u64);
    put_bytes(out, key);
    put_entry(out, entry);
}

pub fn put_del(out: &mut Vec<u8>, db: usize, key: &[u8]) {
    out.push(DEL);
    put_u64(out, db as u64);
    put_bytes(out, key);
}

pub fn put_tick(out: &mut Vec<u8>, now_ms: u64) {
    out.push(TICK);
    put_u64(out, now_ms);
}

pub fn put_fetch(
    out: &mut Vec<u8>,
    client: u64,
    now_ms: u64,
    queues: &[Bytes],
    count: usize,
    lease_ms: Option<u64>,
) {
    out.push(FETCH);
    put_u64(out, client);
    put_u64(out, now_ms);
    put_bytes_list(out, queues);
    put_u64(out, count as u64);
    put_opt_u64(out, lease_ms);
}

pub fn put_unlease(out: &mut Vec<u8>, client: u64, now_ms: u64, ids: &[Bytes]) {
    out.push(UNLEASE);
    put_u64(out, client);
    put_u64(out, now_ms);
    put_bytes_list(out, ids);
}

pub fn put_release(out: &mut Vec<u8>, client: u64, now_ms: u64) {
    out.push(RELEASE);
    put_u64(out, client);
    put_u64(out, now_ms);
}

pub fn put_release_all(out: &mut Vec<u8>, now_ms: u64) {
    out.push(RELEASE_ALL);
    put_u64(out, now_ms);
}

pub fn put_part(out: &mut Vec<u8>, token: u64) {
    out.push(PART);
    put_u64(out, token);
}

pub fn put_part_end(out: &mut Vec<u8>) {
    out.push(PART_END);
}

pub fn put_abort(out: &mut Vec<u8>, token: u64) {
    out.push(ABORT);
    put_u64(out, token);
}

pub fn put_commit(out: &mut Vec<u8>, token: u64, parts: &[u64]) {
    out.push(COMMIT);
    put_u64(out, token);
    put_u64(out, parts.len() as u64);
    for &part in parts {
        put_u64(out, part);
    }
}

pub fn put_batch_note(out: &mut Vec<u8>, now_ms: u64, note: &BatchNote) {
    out.push(BATCH_NOTE);
    put_u64(out, now_ms);
    put_bytes(out, &note.batch);
    put_bytes(out, &note.child);
    out.push(u8::from(note.succeeded));
    put_opt_bytes(out, note.outcome.as_deref());
}

pub fn put_reset(out: &mut Vec<u8>) {
    out.push(RESET);
}

pub fn put_snapshot_part(out: &mut Vec<u8>, body: &[u8]) {
    out.push(SNAPSHOT_PART);
    put_bytes(out, body);
}

pub fn put_snapshot_end(out: &mut Vec<u8>) {
    out.push(SNAPSHOT_END);
}

pub fn put_sync_whole(out: &mut Vec<u8>) {
    out.push(SYNC_WHOLE);
}

pub fn put_slots(out: &mut Vec<u8>, body: &[u8]) {
    out.push(SLOTS);
    put_bytes(out, body);
}

pub fn put_functions(out: &mut Vec<u8>, dump: &[u8]) {
    out.push(FUNCTIONS);
    put_bytes(out, dump);
}

pub fn put_fallback(out: &mut Vec<u8>, now_ms: u64, fallback: &Fallback) {
    out.push(FALLBACK);
    put_u64(out, now_ms);
    put_bytes(out, &fallback.queue);
    put_bytes(out, &fallback.payload);
    let origin = &fallback.origin;
    put_bytes(out, &origin.id);
    put_bytes(out, &origin.queue);
    put_opt_bytes(out, origin.error.as_deref());
    put_u64(out, u64::from(origin.attempts));
}

/// A `Put` of a string, as ranges of the reader's buffer (see [`read_str_put`]).
pub struct StrPut {
    pub db: usize,
    pub key: std::ops::Range<usize>,
    pub expire_at_ms: u64,
    pub value: std::ops::Range<usize>,
}

/// Reads a `Put` of a string value without taking `Bytes` slices of the buffer (a
/// snapshot's load copies both into the node anyway; the slices' reference counting was a
/// third of a 3 M-key load). Any other operation is left unread: `None`.
pub fn read_str_put(r: &mut Reader) -> Decoded<Option<StrPut>> {
    let start = r.position();
    if r.u8()? != PUT {
        r.rewind(start);
        return Ok(None);
    }
    let db = read_db(r)?;
    let key = r.range()?;
    let expire_at_ms = r.u64()?;
    if r.u8()? != super::codec::STR {
        r.rewind(start);
        return Ok(None);
    }
    let value = r.range()?;
    Ok(Some(StrPut {
        db,
        key,
        expire_at_ms,
        value,
    }))
}

fn read_db(r: &mut Reader) -> Decoded<usize> {
    let db = r.u64()?;
    if db >= crate::keyspace::DATABASES as u64 {
        return Err(DecodeError("database out of range"));
    }
    Ok(db as usize)
}

fn read_commit(r: &mut Reader) -> Decoded<Op> {
    let token = r.u64()?;
    let count = r.u64()?;
    if count > PARTS_MAX {
        return Err(DecodeError("a commit names too many shards"));
    }
    let parts = (0..count).map(|_| r.u64()).collect::<Decoded<Vec<u64>>>()?;
    Ok(Op::Commit { token, parts })
}

fn read_fallback(r: &mut Reader) -> Decoded<Op> {
    let now_ms = r.u64()?;
    let queue = r.bytes()?;
    let payload = r.bytes()?;
    let origin = Origin {
        id: r.bytes()?,
        queue: r.bytes()?,
        error: r.opt_bytes()?,
        attempts: r.u32()?,
    };
    Ok(Op::Fallback {
        now_ms,
        fallback: Fallback {
            queue,
            payload,
            origin,
        },
    })
}

/// Decodes the next operation of a record.
pub fn read_op(r: &mut Reader) -> Decoded<Op> {
    Ok(match r.u8()? {
        CMD => {
            let db = read_db(r)?;
            let client = r.u64()?;
            let now_ms = r.u64()?;
            // A command copies what it keeps: its arguments can stay slices of the record.
            let args = r.shared_list()?;
            if args.is_empty() {
                return Err(DecodeError("empty command"));
            }
            Op::Cmd {
                db,
                client,
                now_ms,
                args,
            }
        }
        PUT => Op::Put {
            db: read_db(r)?,
            key: r.bytes()?,
            entry: read_entry(r)?,
        },
        DEL => Op::Del {
            db: read_db(r)?,
            key: r.bytes()?,
        },
        TICK => Op::Tick { now_ms: r.u64()? },
        FETCH => Op::Fetch {
            client: r.u64()?,
            now_ms: r.u64()?,
            queues: r.bytes_list()?,
            count: r.u64()?.min(usize::MAX as u64) as usize,
            lease_ms: r.opt_u64()?,
        },
        UNLEASE => Op::Unlease {
            client: r.u64()?,
            now_ms: r.u64()?,
            ids: r.bytes_list()?,
        },
        RELEASE => Op::Release {
            client: r.u64()?,
            now_ms: r.u64()?,
        },
        RELEASE_ALL => Op::ReleaseAll { now_ms: r.u64()? },
        PART => Op::Part { token: r.u64()? },
        PART_END => Op::PartEnd,
        ABORT => Op::Abort { token: r.u64()? },
        COMMIT => read_commit(r)?,
        FALLBACK => read_fallback(r)?,
        BATCH_NOTE => Op::BatchNote {
            now_ms: r.u64()?,
            note: BatchNote {
                batch: r.bytes()?,
                child: r.bytes()?,
                succeeded: r.flag()?,
                outcome: r.opt_bytes()?,
            },
        },
        RESET => Op::Reset,
        SNAPSHOT_PART => Op::SnapshotPart { body: r.bytes()? },
        SNAPSHOT_END => Op::SnapshotEnd,
        FUNCTIONS => Op::Functions { dump: r.bytes()? },
        SYNC_WHOLE => Op::SyncWhole,
        SLOTS => Op::Slots { body: r.bytes()? },
        _ => return Err(DecodeError("unknown operation")),
    })
}

/// Every operation of one record's payload.
pub fn read_ops(payload: Bytes) -> Decoded<Vec<Op>> {
    let mut r = Reader::new(payload);
    let mut ops = Vec::new();
    while !r.is_done() {
        ops.push(read_op(&mut r)?);
    }
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::values::value::Value;
    use proptest::prelude::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn every_operation_round_trips() {
        let fallback = Fallback {
            queue: b("fb"),
            payload: b("p"),
            origin: Origin {
                id: b("{x}1"),
                queue: b("q"),
                error: Some(b("boom")),
                attempts: 3,
            },
        };
        let entry = Entry {
            value: Value::Str(b("v")),
            expire_at_ms: 77,
        };
        let mut out = Vec::new();
        put_cmd(&mut out, 3, 9, 1234, &[b("set"), b("k"), b("v")]);
        put_put(&mut out, 1, b"k", &entry);
        put_del(&mut out, 15, b"gone");
        put_tick(&mut out, 55);
        put_fetch(&mut out, 4, 56, &[b("q1"), b("q2")], 10, Some(3000));
        put_unlease(&mut out, 4, 57, &[b("{a}1")]);
        put_release(&mut out, 4, 58);
        put_fallback(&mut out, 59, &fallback);
        put_release_all(&mut out, 60);
        let ops = read_ops(Bytes::from(out)).expect("decodes");
        assert_eq!(
            ops,
            vec![
                Op::Cmd {
                    db: 3,
                    client: 9,
                    now_ms: 1234,
                    args: vec![b("set"), b("k"), b("v")]
                },
                Op::Put {
                    db: 1,
                    key: b("k"),
                    entry
                },
                Op::Del {
                    db: 15,
                    key: b("gone")
                },
                Op::Tick { now_ms: 55 },
                Op::Fetch {
                    client: 4,
                    now_ms: 56,
                    queues: vec![b("q1"), b("q2")],
                    count: 10,
                    lease_ms: Some(3000)
                },
                Op::Unlease {
                    client: 4,
                    now_ms: 57,
                    ids: vec![b("{a}1")]
                },
                Op::Release {
                    client: 4,
                    now_ms: 58
                },
                Op::Fallback {
                    now_ms: 59,
                    fallback
                },
                Op::ReleaseAll { now_ms: 60 },
            ]
        );
    }

    #[test]
    fn cross_shard_markers_round_trip() {
        let mut out = Vec::new();
        put_part(&mut out, 1 << 48 | 5);
        put_part_end(&mut out);
        put_abort(&mut out, 7);
        put_commit(&mut out, 8, &[0, 3]);
        let note = BatchNote {
            batch: b("b1"),
            child: b("{x}batch:b1:0"),
            succeeded: true,
            outcome: Some(b("42")),
        };
        put_batch_note(&mut out, 9, &note);
        let ops = read_ops(Bytes::from(out)).expect("decodes");
        let commit = Op::Commit {
            token: 8,
            parts: vec![0, 3],
        };
        assert_eq!(
            ops,
            vec![
                Op::Part { token: 1 << 48 | 5 },
                Op::PartEnd,
                Op::Abort { token: 7 },
                commit,
                Op::BatchNote { now_ms: 9, note }
            ]
        );
        let mut huge = Vec::new();
        put_commit(&mut huge, 8, &vec![1; PARTS_MAX as usize + 1]);
        assert!(read_ops(Bytes::from(huge)).is_err());
    }

    #[test]
    fn full_sync_markers_round_trip() {
        let mut out = Vec::new();
        put_reset(&mut out);
        put_snapshot_part(&mut out, b"\x01part");
        put_snapshot_end(&mut out);
        put_functions(&mut out, b"libraries");
        put_sync_whole(&mut out);
        put_slots(&mut out, b"\x06\x01");
        let ops = read_ops(Bytes::from(out)).expect("decodes");
        assert_eq!(
            ops,
            vec![
                Op::Reset,
                Op::SnapshotPart {
                    body: b("\x01part")
                },
                Op::SnapshotEnd,
                Op::Functions {
                    dump: b("libraries")
                },
                Op::SyncWhole,
                Op::Slots {
                    body: b("\x06\x01")
                },
            ]
        );
    }

    proptest! {
        #[test]
        fn garbage_is_an_error_not_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = read_ops(Bytes::from(bytes));
        }
    }
}
