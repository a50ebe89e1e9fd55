//! What a key holds: `value` (the value enum and its small forms), `sorted_set`, `stream` and
//! its radix nodes (`stream_nodes`), `key` (a key's bytes), and the arithmetic Redis does in
//! x87 long double (`long_double`) and geohash's.

pub mod geohash;
pub mod key;
pub mod long_double;
pub mod sorted_set;
pub mod stream;
pub mod stream_id;
pub mod stream_nodes;
pub mod value;
