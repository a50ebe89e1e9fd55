//! Arbitrary bytes as a journal file: the reader never panics, every record it returns lies
//! inside the file, and framing those records again gives back the file exactly up to where
//! reading stopped (so nothing damaged is ever passed off as a record).
#![no_main]

use libfuzzer_sys::fuzz_target;
use wetask_shards::persist::journal::record::{append, read_all, Next};

fuzz_target!(|data: &[u8]| {
    let (records, end) = read_all(data);
    let stop = match end {
        Next::End => data.len(),
        Next::TornTail { at } | Next::Corrupt { at, .. } => at,
        Next::Record { .. } => unreachable!("read_all stops only at an end"),
    };
    let mut again = Vec::new();
    for record in &records {
        append(&mut again, record);
    }
    assert_eq!(&again[..], &data[..stop]);
});
