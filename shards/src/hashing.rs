//! The hash builder of every table in a shard (the keyspace, hashes, sets, sorted sets):
//! foldhash, seeded per table. A leaf, so the collection types need nothing else for it.

pub type Hasher = foldhash::fast::RandomState;
