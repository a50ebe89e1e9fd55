//! Keyspace lookup cost, for callgrind (`valgrind --tool=callgrind --cache-sim=yes`):
//! loads 100k keys with 64 B values, then runs 1M GETs on random keys through the shard.

use bytes::Bytes;
use wetask_shards::Shard;

fn main() {
    let mut shard = Shard::new(0);
    let value = Bytes::from(vec![b'x'; 64]);
    for i in 0..100_000u64 {
        let key = Bytes::from(format!("key:{i:012}"));
        shard.execute_args(0, &[Bytes::from_static(b"SET"), key, value.clone()]);
    }
    let mut hits = 0u64;
    let mut seed = 42u64;
    for _ in 0..1_000_000 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let key = Bytes::from(format!("key:{:012}", (seed >> 33) % 100_000));
        if let wetask_protocol::Frame::Bulk(_) =
            shard.execute_args(0, &[Bytes::from_static(b"GET"), key])
        {
            hits += 1;
        }
    }
    println!("{hits} hits");
}
