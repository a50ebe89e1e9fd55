//! A shard's whole state as a sequence of parts, and back: what a snapshot file holds (the
//! server frames each part as a journal record). First the key count of each database (so
//! the load sizes each table once instead of growing it, a quarter of a 3 M-key load's
//! time), a mark when the shard holds part of a replica's full sync (a compaction in the
//! middle of one must not make it look whole), then the keys as `Put` operations in batches, then the task engine's parts, the
//! last commit of each cross-shard operation it coordinated (`cross_commit`), the function
//! libraries its consensus group's log carried (`functions`), its part in slot moves
//! (`slot_moves`), then the clock. Expired keys
//! are left out: at the clock the snapshot carries they are already gone.

use bytes::Bytes;

use crate::keyspace::{ScanFilter, DATABASES};
use crate::persist::journal::ops::{self, Op};
use crate::shard::Shard;
use crate::wire::{put_u64, Reader};

/// About how large one batch of keys grows before the next part starts.
pub const KEYS_PART_BYTES: usize = 1 << 20;

const KEYS: u8 = 1;
const ENGINE: u8 = 2;
const CLOCK: u8 = 3;
const SIZES: u8 = 4;
const COMMITS: u8 = 5;
const FUNCTIONS: u8 = 6;
/// Written only by a shard that holds part of a full sync (a compaction in the middle of
/// one), so the snapshot keeps the mark (`Shard::holds_partial_sync`).
const PARTIAL: u8 = 7;
/// Consensus mode: the group's part in slot moves, and group 0's map (`slot_moves`).
const SLOT_MOVES: u8 = 8;

impl Shard {
    /// Writes the shard's state as parts, each handed to `part`.
    pub fn export_snapshot(&mut self, part: &mut dyn FnMut(&[u8])) {
        let mut out = vec![SIZES];
        for db in 0..DATABASES {
            let len = self.db(db).len();
            if len > 0 {
                put_u64(&mut out, db as u64);
                put_u64(&mut out, len as u64);
            }
        }
        part(&out);
        if self.partial_sync {
            part(&[PARTIAL]);
        }
        out.clear();
        for db in 0..DATABASES {
            let (_, keys) = self.scan(db, 0, usize::MAX >> 1, &ScanFilter::default());
            for key in keys {
                let Some(entry) = self.clone_entry(db, &key) else {
                    continue;
                };
                if out.is_empty() {
                    out.push(KEYS);
                }
                ops::put_put(&mut out, db, &key, &entry);
                if out.len() >= KEYS_PART_BYTES {
                    part(&out);
                    out.clear();
                }
            }
        }
        if !out.is_empty() {
            part(&out);
        }
        self.tasks.export(&mut |engine_part| {
            out.clear();
            out.push(ENGINE);
            out.extend_from_slice(engine_part);
            part(&out);
        });
        out.clear();
        out.push(COMMITS);
        self.export_commits(&mut out);
        if out.len() > 1 {
            part(&out);
        }
        if let Some(dump) = &self.functions {
            out.clear();
            out.push(FUNCTIONS);
            out.extend_from_slice(dump);
            part(&out);
        }
        if let Some(moves) = self.slot_moves_part() {
            out.clear();
            out.push(SLOT_MOVES);
            out.extend_from_slice(&moves);
            part(&out);
        }
        out.clear();
        out.push(CLOCK);
        put_u64(&mut out, self.now_ms());
        part(&out);
    }

    /// Loads one part of a snapshot (in order, into a fresh shard); call
    /// [`Shard::finish_snapshot`] after the last.
    pub fn import_snapshot_part(&mut self, part: Bytes) -> Result<(), String> {
        let Some(&tag) = part.first() else {
            return Err("an empty snapshot part".into());
        };
        let body = part.slice(1..);
        match tag {
            KEYS => {
                let mut r = Reader::new(body);
                while !r.is_done() {
                    if let Some(put) = ops::read_str_put(&mut r).map_err(|e| e.0.to_string())? {
                        let buf = r.buf();
                        self.db(put.db).insert_new_str(
                            &buf[put.key],
                            &buf[put.value],
                            put.expire_at_ms,
                        );
                        continue;
                    }
                    match ops::read_op(&mut r).map_err(|e| e.0.to_string())? {
                        // A snapshot holds each key once (it is written from the table):
                        // no lookup before the insert.
                        Op::Put { db, key, entry } => self.db(db).insert_new(&key, entry),
                        _ => return Err("a snapshot's keys part holds another operation".into()),
                    }
                }
            }
            ENGINE => self.tasks.import_part(body).map_err(|e| e.0.to_string())?,
            SIZES => {
                let mut r = Reader::new(body);
                while !r.is_done() {
                    let db = r.u64().map_err(|e| e.0.to_string())? as usize;
                    let len = r.u64().map_err(|e| e.0.to_string())?;
                    if db >= DATABASES || len > crate::keyspace::KEYS_PER_DB_MAX as u64 {
                        return Err("a snapshot's sizes part is out of range".into());
                    }
                    // Capped: past it a (CRC-checked, so only a forged) count cannot make
                    // one allocation of its own choosing; the table grows as usual.
                    self.db(db).reserve((len as usize).min(1 << 28));
                }
            }
            COMMITS => self.import_commits(body)?,
            FUNCTIONS => self.set_functions(body),
            PARTIAL => self.snapshot_partial = true,
            SLOT_MOVES => self.import_slot_moves(body)?,
            CLOCK => {
                let now = Reader::new(body).u64().map_err(|e| e.0.to_string())?;
                self.set_clock(now);
            }
            _ => return Err("an unknown snapshot part".into()),
        }
        Ok(())
    }

    /// Ends a snapshot's load: rebuilds the task engine's indexes. A replica's full sync
    /// is whole from here ([`Shard::holds_partial_sync`]), unless the snapshot itself was
    /// written from part of one.
    pub fn finish_snapshot(&mut self) -> Result<(), String> {
        self.partial_sync = std::mem::take(&mut self.snapshot_partial);
        self.tasks.finish_import().map_err(|e| e.0.to_string())
    }
}
