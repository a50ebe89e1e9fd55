//! The keyspace's state: one database (`db`: entries, expiry, SCAN, the key index), its nodes
//! (`node`) and their eviction stamps (`evict`), expiry (`expiries`), the growing index
//! (`growing`), cluster mode's slot → keys index (`slot_index`), prefetching (`prefetch`), typed access for the families (`typed`), the keys
//! blocked clients wait on (`blocked_keys`), keyspace notifications (`notify`) and client
//! tracking (`tracking`). `Db` and its types are re-exported here, where they have always
//! been named.

pub mod blocked_keys;
mod db;
pub mod evict;
pub(crate) mod expiries;
pub mod growing;
pub mod node;
pub mod notify;
pub(crate) mod prefetch;
mod slot_index;
pub mod tracking;
pub mod typed;

pub use db::*;

/// A database index (SELECT, COPY … DB, MOVE): an integer in `0..DATABASES`.
pub fn db_index(bytes: &[u8]) -> Result<usize, wetask_protocol::Frame> {
    match crate::args::int_arg(bytes)? {
        db if (0..DATABASES as i64).contains(&db) => Ok(db as usize),
        _ => Err(wetask_protocol::Frame::static_error(
            crate::errors::DB_INDEX_RANGE,
        )),
    }
}
