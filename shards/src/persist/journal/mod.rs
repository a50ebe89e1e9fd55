//! The journal's pure parts: how records are framed in a file and read back, telling a torn
//! tail (a crash mid-write: dropped) from corruption (reported); what a record holds (the
//! operations of one loop turn) and how values are encoded. The server owns the files and
//! the writes; `crate::shard::durable` is the shard's side; docs/DURABILITY.md describes the whole
//! design.

pub mod codec;
pub mod ops;
pub mod record;
/// The byte-level encoding, a leaf of the crate (the task engine's snapshot uses it too).
pub use crate::wire;
