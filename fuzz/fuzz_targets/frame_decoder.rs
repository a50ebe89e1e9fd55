//! Arbitrary bytes into the general RESP3 frame decoder: no panic, no unbounded recursion.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use wetask_protocol::FrameDecoder;

fuzz_target!(|data: &[u8]| {
    let mut decoder = FrameDecoder::default();
    let mut buf = BytesMut::from(data);
    while let Ok(Some(_)) = decoder.decode(&mut buf) {}
});
