//! One WeTask shard's state machine: the keyspace with expiry, the command table, and the
//! command families. Pure and synchronous: no runtime, no I/O, no threads. The server owns
//! one [`Shard`] per core and decides what runs where, using the routing data in
//! [`table::COMMANDS`].

pub mod args;
pub mod bitfield;
pub mod bitmaps;
pub mod block_commands;
pub mod blocked_ops;
pub mod blocking;
pub mod command_docs;
pub mod command_info;
pub mod compat;
pub mod contain;
pub mod cross_commit;
pub mod ctx;
pub mod dump;
mod durable;
pub mod errors;
pub mod evict;
mod expiries;
pub mod geo;
pub mod geohash;
pub mod glob;
pub mod growing;
pub mod hashes;
pub mod hashing;
pub mod hyperloglog;
pub mod introspection;
pub mod journal;
pub mod key;
pub mod keys;
pub mod keyspace;
pub mod lcs;
pub mod lists;
pub mod long_double;
pub mod node;
pub mod notify;
pub mod parse_count;
mod prefetch;
pub mod rdb;
mod rdb_encoding;
mod rdb_stream;
pub mod request;
pub mod sets;
pub mod shard;
pub mod slot;
pub mod snapshot;
pub mod sort;
pub mod spec;
pub mod stream;
pub mod stream_groups;
pub mod stream_nodes;
pub mod streams;
pub mod strings;
pub mod table;
pub mod task_admin;
pub mod task_batch;
pub mod task_commands;
pub mod task_cron;
pub mod task_reports;
pub mod tasks;
pub mod tracking;
pub mod typed;
pub mod value;
pub mod wire;
pub mod zset;
pub mod zsets;

pub use block_commands::{BlockOp, MoveTarget};
pub use ctx::{Ctx, DATABASES};
pub use keyspace::{Entry, ScanFilter, Value};
pub use shard::Shard;
pub use slot::{key_slot, shard_of};
pub use table::{lookup, CommandSpec, Merge, Route, COMMANDS};

#[cfg(test)]
mod collection_tests;
#[cfg(test)]
mod cross_commit_tests;
#[cfg(test)]
mod durable_tests;
#[cfg(test)]
mod tests;
