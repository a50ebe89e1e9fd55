//! The script service of a shard: its Lua state (made by the first script, dropped when
//! SCRIPT FLUSH runs anywhere) and what the script running here may touch. Running scripts
//! is `scripting`'s; the busy-script watch is `script_busy`'s.

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use wetask_shards::{Entry, Shard};

use super::core::ShardCore;

/// What the script now running on this shard may touch.
pub struct ScriptRun {
    pub token: u64,
    /// Shards locked for this script.
    pub shards: Vec<usize>,
    /// Shards whose keys the script may touch undeclared: those of its declared keys (every
    /// shard with `--lua-whole-server`). The connection's own shard is locked too, but does
    /// not count, so the rule does not depend on where a connection landed.
    pub open_shards: Vec<usize>,
    pub db: usize,
    pub client: u64,
    pub declared: Vec<Bytes>,
    pub borrowed: Vec<(usize, Bytes)>,
    pub read_only: bool,
    pub sha: String,
    /// A write command ran: the script can no longer be run again from the start.
    pub wrote: bool,
    /// The keys its write commands named (they count as changed for WATCH).
    pub written: Vec<(usize, Bytes)>,
    /// The script reached for an undeclared key on a shard it does not hold, having written
    /// nothing or only what `undo` can take back: every further call fails, and EVAL undoes
    /// its writes and runs it again holding every shard.
    pub retry_whole: bool,
    /// The keys' entries before the script first wrote them, while it holds fewer than every
    /// shard (a run that holds them all can never need to start again, and keeps none).
    pub undo: Option<UndoLog>,
    /// The caller's ACL user and CLIENT LIST line, when its rules restrict it: each
    /// `redis.call` is checked (None: allowed everything).
    pub acl: Option<ScriptAcl>,
}

/// Who runs a script, for checking its calls against the ACL.
#[derive(Clone)]
pub struct ScriptAcl {
    pub user: std::sync::Arc<crate::acl::User>,
    pub client_info: String,
}

/// What a script's writes replaced, so that a run which must start again holding every shard
/// can be taken back first and the client sees one success, never a partial write. Every
/// write of a script lands in this shard's keyspace (declared and reachable keys of other
/// shards are borrowed here first), so a key's entry before its first write is all it takes.
#[derive(Default)]
pub struct UndoLog {
    /// (db, key, the entry before the script's first write to it: `None` when absent).
    before: Vec<(usize, Bytes, Option<Entry>)>,
    seen: HashSet<(usize, Bytes)>,
    /// The script did what no entry can take back (a task command, a PUBLISH): a later
    /// undeclared key fails the script instead of running it again.
    pub irreversible: bool,
    /// How many keyspace events the shard held when the run began: those after it are the
    /// run's, unpublished while it runs, dropped with its writes.
    notes_mark: usize,
}

impl UndoLog {
    /// The log of a run starting now on `shard`.
    pub fn starting(shard: &Shard) -> Self {
        UndoLog {
            notes_mark: shard.notes.len(),
            ..Default::default()
        }
    }

    /// Keeps `key`'s entry as it is now, unless the script wrote it before.
    pub fn remember(&mut self, shard: &mut Shard, db: usize, key: &Bytes) {
        if self.seen.insert((db, key.clone())) {
            let entry = shard.clone_entry(db, key);
            self.before.push((db, key.clone(), entry));
        }
    }

    /// Puts every key the script wrote back as it was (journaled like any write).
    pub fn undo(self, shard: &mut Shard) {
        shard.notes.truncate(self.notes_mark);
        for (db, key, entry) in self.before {
            match entry {
                Some(entry) => {
                    shard.put_entry(db, &key, entry, true);
                }
                None => {
                    shard.take_entry(db, &key);
                }
            }
        }
    }
}

#[derive(Default)]
pub struct Scripts {
    /// This shard's Lua state, made by the first script.
    pub lua: RefCell<Option<mlua::Lua>>,
    /// The SCRIPT FLUSH epoch `lua` was made in (`Globals::script_flush_epoch`).
    pub epoch: Cell<u64>,
    /// The script running on this shard, if any.
    pub run: RefCell<Option<ScriptRun>>,
}

impl Scripts {
    /// Drops this shard's Lua state if SCRIPT FLUSH ran since it was made (checked every
    /// loop turn, so a flush frees every shard's compiled scripts at once, not at its next
    /// script).
    pub fn drop_flushed_state(&self, core: &ShardCore) {
        if self.lua.borrow().is_some()
            && self.run.borrow().is_none()
            && self.epoch.get() != core.globals.script_flush_epoch.load(Ordering::Relaxed)
        {
            self.lua.borrow_mut().take();
        }
    }
}
