//! [`Value`]: what a key holds, detached from the keyspace, and the collection types inside
//! it. A leaf below `keyspace` and `node` (which store values) so that neither needs the other
//! for the type.

use bytes::Bytes;
use indexmap::IndexMap;

use crate::hashing::Hasher;

/// The value of a key, detached from the keyspace (handed between shards, or built by a
/// command). A collection is boxed so that a `Value` stays 40 bytes (a node's value slot).
/// A collection is never empty in the keyspace: the command that empties it deletes the key.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Str(Bytes),
    List(Box<List>),
    Hash(Box<Hash>),
    Set(Box<Set>),
    ZSet(Box<crate::values::sorted_set::ZSet>),
    Stream(Box<crate::values::stream::Stream>),
}

/// A list's elements, head first.
pub type List = std::collections::VecDeque<Bytes>;
/// A hash's fields in insertion order; positions give HSCAN and HRANDFIELD their O(1) steps.
pub type Hash = IndexMap<Bytes, Bytes, Hasher>;
/// A set's members; positions give SSCAN, SPOP and SRANDMEMBER their O(1) steps.
pub type Set = indexmap::IndexSet<Bytes, Hasher>;

impl Value {
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::List(_) => "list",
            Value::Hash(_) => "hash",
            Value::Set(_) => "set",
            Value::ZSet(_) => "zset",
            Value::Stream(_) => "stream",
        }
    }
}
