//! One WeTask shard's state machine: the keyspace with expiry, the command table, and the
//! command families. Pure and synchronous: no runtime, no I/O, no threads. The server owns
//! one [`Shard`] per core and decides what runs where, using the routing data in
//! [`table::COMMANDS`].
//!
//! The folders are the layers (docs/ARCHITECTURE.md, "Crates"); imports run downwards only:
//! - entry: [`shard`] (the `Shard` and what it does beside a command: blocked waiters,
//!   durability, snapshots, cross-shard commits) and [`request`] (a command parsed once);
//! - [`table`]: the rows (what every command is) and what COMMAND and the docs say of them;
//! - [`families`]: the command handlers, a file per Redis group, the task commands in
//!   `families/tasks/`;
//! - the per-command view: [`ctx`] (what a handler sees) and [`spec`] (what a row holds);
//! - state: [`keyspace`] (a database, its nodes, expiry, eviction, typed access, blocked
//!   keys, notifications, tracking) and [`tasks`] (the task engine);
//! - [`values`]: what a key holds;
//! - [`persist`]: the journal's records and RDB/DUMP encodings;
//! - helpers, one file each: [`args`], [`errors`], [`glob`], [`slot`], [`contain`],
//!   [`hashing`], [`wire`], [`parse_count`].

pub mod args;
pub mod contain;
pub mod ctx;
pub mod errors;
pub mod families;
pub mod glob;
pub mod hashing;
pub mod keyspace;
pub mod parse_count;
pub mod persist;
pub mod request;
pub mod shard;
pub mod slot;
pub mod spec;
pub mod table;
pub mod tasks;
pub mod values;
pub mod wire;

pub use ctx::{Ctx, DATABASES};
pub use families::blocking::{BlockOp, MoveTarget};
pub use keyspace::{Entry, ScanFilter, Value};
pub use shard::Shard;
pub use slot::{key_slot, shard_of};
pub use table::{lookup, CommandSpec, Merge, Route, COMMANDS};
