//! All-or-nothing recovery of cross-shard operations: a MULTI/EXEC, a script, a RENAME, an
//! LMOVE … whose keys live on several shards, each of which journals its own part.
//!
//! While a cross-shard operation holds a shard's lock (the server names it with
//! [`Shard::set_cross_tag`]), everything that shard journals belongs to the operation: the
//! first operation logged under the lock is preceded by `Part { token }`, and the lock's
//! release logs `PartEnd`. The coordinator, once every part is journaled and before it releases any
//! lock, logs `Commit { token, parts }` (the shards that journaled a part) and makes it
//! durable. Replay ([`Replay`]) then holds a part back until its operation is known to have
//! committed:
//!
//! - a `Commit` of its own token (the coordinator's part), or anything the shard journaled
//!   after the part (the shard went on after the unlock, which comes after the commit):
//!   replayed;
//! - the end of the journal: the part is left open ([`OpenPart`]). It committed exactly when
//!   the coordinator's last commit naming this shard is this token
//!   ([`Shard::last_commit_with`]): the part is the last thing this shard journaled, so no
//!   later operation can have named it. The server decides once every shard has loaded,
//!   replays or drops it, and journals the outcome (`PartEnd`, or `Abort { token }`) so
//!   that later loads agree.
//!
//! Commits are replayed wherever they stand, even inside a part that is dropped: they say
//! something about other shards' parts, never about this shard's keys.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::persist::journal::ops::{self, Op};
use crate::shard::Shard;
use crate::wire::{put_u64, Reader};

/// A token's high bits name the shard that coordinates its operation.
const COORDINATOR_SHIFT: u32 = 48;

/// The token of a coordinator's `count`-th cross-shard operation (`count` below 2^48).
pub fn token(coordinator: usize, count: u64) -> u64 {
    ((coordinator as u64) << COORDINATOR_SHIFT) | (count & ((1 << COORDINATOR_SHIFT) - 1))
}

/// The shard that coordinates the operation of `token`.
pub fn coordinator_of(token: u64) -> usize {
    (token >> COORDINATOR_SHIFT) as usize
}

/// The count part of a token (see [`token`]).
pub fn count_of(token: u64) -> u64 {
    token & ((1 << COORDINATOR_SHIFT) - 1)
}

impl Shard {
    /// Names the cross-shard operation holding this shard's lock (`None` once released).
    /// A part journaled under the lock ends at its release, which comes after the
    /// coordinator's commit is durable: `PartEnd` is logged then, not with the shard's next
    /// operation, so that a replica (which replays the part only once it ends) shows the
    /// operation as soon as its records arrive.
    pub fn set_cross_tag(&mut self, token: Option<u64>) {
        self.cross_tag = token;
        if token.is_none() && self.emitted_tag.is_some() {
            self.mark_part();
        }
    }

    /// Whether this shard journaled a part of the operation `token` (so its commit must
    /// name this shard).
    pub fn wrote_part(&self, token: u64) -> bool {
        self.emitted_tag == Some(token)
    }

    /// Before an operation is logged: marks where a part begins or ends.
    pub(crate) fn mark_part(&mut self) {
        if self.emitted_tag == self.cross_tag {
            return;
        }
        let Some(journal) = self.journal.as_mut() else {
            return;
        };
        match self.cross_tag {
            Some(token) => ops::put_part(journal, token),
            None => ops::put_part_end(journal),
        }
        self.emitted_tag = self.cross_tag;
    }

    /// Logs, on the coordinator, that the operation `token` committed with parts on
    /// `parts`. Nothing is logged for an operation that journaled nothing.
    pub fn log_cross_commit(&mut self, token: u64, parts: &[u64]) {
        if parts.is_empty() {
            return;
        }
        self.note_commit(token, parts);
        if let Some(journal) = self.journal_turn() {
            ops::put_commit(journal, token, parts);
        }
    }

    /// Records that `token` committed with parts on `parts` (logging, and replay).
    pub(crate) fn note_commit(&mut self, token: u64, parts: &[u64]) {
        for &part in parts {
            self.cross_commits.insert(part, token);
        }
    }

    /// The last operation this shard coordinated that committed with a part on `shard`.
    pub fn last_commit_with(&self, shard: usize) -> Option<u64> {
        self.cross_commits.get(&(shard as u64)).copied()
    }

    /// Every shard's last commit, as [`Shard::last_commit_with`] answers it.
    pub fn last_commits(&self) -> BTreeMap<u64, u64> {
        self.cross_commits.clone()
    }

    /// The highest count among the tokens this shard's commits carry (a restarted
    /// coordinator issues tokens past it, so that no new token repeats a remembered one).
    pub fn newest_commit_count(&self) -> u64 {
        self.cross_commits
            .values()
            .map(|&t| count_of(t))
            .max()
            .unwrap_or(0)
    }

    /// The last commits as a snapshot part's body (empty when there are none).
    pub(crate) fn export_commits(&self, out: &mut Vec<u8>) {
        for (&shard, &token) in &self.cross_commits {
            put_u64(out, shard);
            put_u64(out, token);
        }
    }

    pub(crate) fn import_commits(&mut self, body: Bytes) -> Result<(), String> {
        let mut r = Reader::new(body);
        while !r.is_done() {
            let shard = r.u64().map_err(|e| e.0.to_string())?;
            let token = r.u64().map_err(|e| e.0.to_string())?;
            self.cross_commits.insert(shard, token);
        }
        Ok(())
    }
}

/// Replays a shard's journal with the rule of the module docs: feed it every operation in
/// order ([`Replay::op`]), then take what is left open ([`Replay::finish`]).
#[derive(Default)]
pub struct Replay {
    /// The operation whose part is being read, and whether it is known to have committed.
    open: Option<u64>,
    committed: bool,
    held: Vec<Op>,
}

impl Replay {
    pub fn op(&mut self, shard: &mut Shard, op: Op) -> Result<(), String> {
        match op {
            Op::Part { token } => {
                self.release(shard)?;
                self.open = Some(token);
                self.committed = false;
            }
            Op::PartEnd => {
                self.release(shard)?;
                self.open = None;
            }
            Op::Abort { token } => {
                if self.open == Some(token) && !self.committed {
                    self.held.clear();
                    self.open = None;
                }
            }
            Op::Commit { token, ref parts } => {
                shard.note_commit(token, parts);
                if self.open == Some(token) {
                    self.release(shard)?;
                    self.committed = true;
                }
            }
            op if self.open.is_some() && !self.committed => self.held.push(op),
            op => shard.replay(op)?,
        }
        Ok(())
    }

    /// Whether a cross-shard operation's part is held, its outcome not yet read.
    pub fn holds_part(&self) -> bool {
        self.open.is_some() && !self.committed
    }

    /// The part held back is known to have committed: replays it.
    fn release(&mut self, shard: &mut Shard) -> Result<(), String> {
        for op in self.held.drain(..) {
            shard.replay(op)?;
        }
        Ok(())
    }

    /// The part at the end of the journal whose commit this shard cannot see, if any.
    pub fn finish(self) -> Option<OpenPart> {
        match self.open {
            Some(token) if !self.committed => Some(OpenPart {
                token,
                ops: self.held,
            }),
            _ => None,
        }
    }

    /// Ends a replay whose last part is known to have committed (the compactor folds only
    /// segments the shard left while unlocked, so after the commit).
    pub fn finish_committed(mut self, shard: &mut Shard) -> Result<(), String> {
        self.release(shard)
    }
}

/// A part left open at the end of a shard's journal (see the module docs).
#[derive(Debug)]
pub struct OpenPart {
    pub token: u64,
    ops: Vec<Op>,
}

impl OpenPart {
    pub fn coordinator(&self) -> usize {
        coordinator_of(self.token)
    }

    pub fn operations(&self) -> usize {
        self.ops.len()
    }

    /// Whether the part's operation committed, given `last_commit` (the coordinator's last
    /// commit naming this shard, after its own load).
    pub fn committed(&self, last_commit: Option<u64>) -> bool {
        last_commit == Some(self.token)
    }

    /// Replays the part if `committed`, drops it otherwise; either way the outcome is
    /// journaled first when journaling starts ([`Shard::finish_replay`]).
    pub fn resolve(self, shard: &mut Shard, committed: bool) -> Result<(), String> {
        if committed {
            for op in self.ops {
                shard.replay(op)?;
            }
            shard.part_outcome = Some(None);
        } else {
            shard.part_outcome = Some(Some(self.token));
        }
        Ok(())
    }
}

/// Logs a resolved open part's outcome (see [`OpenPart::resolve`]).
pub(crate) fn log_outcome(journal: &mut Vec<u8>, outcome: Option<u64>) {
    match outcome {
        Some(token) => ops::put_abort(journal, token),
        None => ops::put_part_end(journal),
    }
}
