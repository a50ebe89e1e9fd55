//! Encodings that outlive the process: the journal's records and operations (`journal/`),
//! and Redis's RDB value encodings that DUMP, RESTORE and snapshots write (`rdb`, with
//! `rdb_encoding` for lengths, integers and LZF, and `rdb_stream` for streams). What the
//! shard does with them (replaying, snapshotting, committing across shards) is in
//! `crate::shard`, which owns the state they describe.

pub mod journal;
pub mod rdb;
pub(crate) mod rdb_encoding;
pub mod rdb_file;
pub(crate) mod rdb_stream;
