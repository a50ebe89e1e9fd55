//! Arbitrary bytes as the body of a DUMP payload, framed with a valid version and checksum so
//! that the value parser (ziplists, listpacks, intsets, LZF …) sees them: RESTORE's reader
//! never panics, and a value it accepts dumps and reads back as the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wetask_shards::persist::rdb::{dump, frame, restore};

fuzz_target!(|data: &[u8]| {
    if let Ok(value) = restore(&frame(data.to_vec())) {
        let again = dump(&value).expect("what RESTORE reads, DUMP writes");
        assert!(restore(&again) == Ok(value));
    }
});
