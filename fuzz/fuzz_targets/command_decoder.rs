//! Feeds arbitrary bytes, in arbitrary splits, to the request decoder. It must never panic,
//! and decoding in pieces must give the same commands as decoding all at once.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use wetask_protocol::CommandDecoder;

fn decode(chunks: &[&[u8]]) -> (Vec<Vec<bytes::Bytes>>, bool) {
    let mut decoder = CommandDecoder::default();
    let mut buf = BytesMut::new();
    let mut commands = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(args)) => commands.push(args),
                Ok(None) => break,
                Err(_) => return (commands, true),
            }
        }
    }
    (commands, false)
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else { return };
    let at = usize::from(split) % (rest.len() + 1);
    let whole = decode(&[rest]);
    let pieces = decode(&[&rest[..at], &rest[at..]]);
    assert_eq!(whole, pieces);
});
