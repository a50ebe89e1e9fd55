//! The journal's pure parts: how records are framed in a file and read back, telling a torn
//! tail (a crash mid-write: dropped) from corruption (reported). The server owns the files
//! and the writes; docs/DURABILITY.md describes the whole design.

pub mod record;
