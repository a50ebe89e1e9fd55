//! Arbitrary bytes after an RDB header, as a Redis primary's full sync could send them
//! (`REPLICAOF` at a redis-server): the file reader never panics, and every key it hands
//! on is a DUMP payload whose checksum holds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wetask_shards::persist::rdb::verified_body;
use wetask_shards::persist::rdb_file::{read, RdbItem};

fuzz_target!(|data: &[u8]| {
    let mut file = b"REDIS0011".to_vec();
    file.extend_from_slice(data);
    let _ = read(&file, &mut |item| {
        if let RdbItem::Key { payload, .. } = item {
            assert!(verified_body(&payload).is_some());
        }
        Ok(())
    });
});
