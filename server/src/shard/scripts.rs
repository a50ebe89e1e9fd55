//! The script service of a shard: its Lua state (made by the first script, dropped when
//! SCRIPT FLUSH runs anywhere) and what the script running here may touch. Running scripts
//! is `scripting`'s; the busy-script watch is `script_busy`'s.

use std::cell::{Cell, RefCell};
use std::sync::atomic::Ordering;

use bytes::Bytes;

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
    /// The script reached for an undeclared key on a shard it does not hold before writing
    /// anything: every further call fails, and EVAL runs it again holding every shard.
    pub retry_whole: bool,
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
