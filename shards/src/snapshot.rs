//! A shard's whole state as a sequence of parts, and back: what a snapshot file holds (the
//! server frames each part as a journal record). Keys come as `Put` operations in batches,
//! then the task engine's parts, then the clock. Expired keys are left out: at the clock the
//! snapshot carries they are already gone.

use bytes::Bytes;

use crate::journal::ops::{self, Op};
use crate::journal::wire::{put_u64, Reader};
use crate::keyspace::{ScanFilter, DATABASES};
use crate::shard::Shard;

/// About how large one batch of keys grows before the next part starts.
pub const KEYS_PART_BYTES: usize = 1 << 20;

const KEYS: u8 = 1;
const ENGINE: u8 = 2;
const CLOCK: u8 = 3;

impl Shard {
    /// Writes the shard's state as parts, each handed to `part`.
    pub fn export_snapshot(&mut self, part: &mut dyn FnMut(&[u8])) {
        let mut out = Vec::new();
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
                    match ops::read_op(&mut r).map_err(|e| e.0.to_string())? {
                        Op::Put { db, key, entry } => self.db(db).insert(&key, entry),
                        _ => return Err("a snapshot's keys part holds another operation".into()),
                    }
                }
            }
            ENGINE => self.tasks.import_part(body).map_err(|e| e.0.to_string())?,
            CLOCK => {
                let now = Reader::new(body).u64().map_err(|e| e.0.to_string())?;
                self.set_clock(now);
            }
            _ => return Err("an unknown snapshot part".into()),
        }
        Ok(())
    }

    /// Ends a snapshot's load: rebuilds the task engine's indexes.
    pub fn finish_snapshot(&mut self) -> Result<(), String> {
        self.tasks.finish_import().map_err(|e| e.0.to_string())
    }
}
