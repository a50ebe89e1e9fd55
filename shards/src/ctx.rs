//! What a command handler sees while it runs ([`Ctx`]): the shard's databases, the selected
//! one, the clock, the task engine, the blocked-client registry and, for a local client, its
//! output buffer. A leaf module, so that the command families depend on it and not on
//! [`crate::shard`], which depends on them.

use wetask_protocol::Output;

use crate::keyspace::blocked_keys::Blocked;
use crate::keyspace::Db;
pub use crate::keyspace::DATABASES;
use crate::tasks::Engine;

/// What one command sees while it runs: the shard's databases, the selected one, the clock.
pub struct Ctx<'a> {
    pub dbs: &'a mut [Db],
    pub db: usize,
    pub now_ms: u64,
    /// The connection's output buffer when the reply goes straight to a local client: a
    /// handler may encode a bulk reply into it from the stored bytes (no reference-count
    /// traffic on the value) and return `Frame::Written`. `None` for replies that travel.
    pub out: Option<&'a mut Output>,
    /// The shard's task engine (`TASK.*`).
    pub tasks: &'a mut Engine,
    /// The client the command runs for: it owns the leases a FETCH hands out. 0 for work
    /// that runs for no client (tests, internal requests).
    pub client: u64,
    /// Keys with blocked clients; a command that adds to a list signals its key here.
    pub blocked: &'a mut Blocked,
    /// What the journal logs instead of the command, when its effect does not follow from
    /// the state and the clock (SPOP's draw: the SREM of what it took). `Some(empty)`: log
    /// nothing.
    pub rewrite: Option<Vec<bytes::Bytes>>,
    /// This shard's id and the server's shard count (for the few commands that name keys
    /// at run time, such as SORT's patterns: they must be this shard's own).
    pub layout: (usize, usize),
    /// Keyspace notifications, while they are on: the events a handler records itself
    /// (those its reply cannot tell; the rest come from `notify`'s table).
    pub notes: Option<&'a mut crate::keyspace::notify::Notes>,
}

impl Ctx<'_> {
    pub fn db(&mut self) -> &mut Db {
        &mut self.dbs[self.db]
    }

    /// Whether `key` lives on this shard.
    pub fn owns(&self, key: &[u8]) -> bool {
        let (id, count) = self.layout;
        count <= 1 || crate::shard_of(key, count) == id
    }

    /// Records a keyspace event on `key` (in the selected database), if they are on.
    pub fn notify(&mut self, class: u32, name: &'static str, key: &[u8]) {
        if let Some(notes) = self.notes.as_deref_mut() {
            notes.push(class, self.db, name, key);
        }
    }

    /// Notes that `key` (in the selected database) got data a blocked client may want: its
    /// waiters of the kind of value it now holds (see `blocking`).
    pub fn signal_ready(&mut self, key: &[u8]) {
        if !self.blocked.active() {
            return;
        }
        let now = self.now_ms;
        if let Some(type_name) = self.dbs[self.db].probe_type(key, now) {
            self.blocked.signal_value(self.db, key, type_name);
        }
    }
}
