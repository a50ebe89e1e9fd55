//! How records sit in a journal file, and how a reader tells a torn tail from corruption.
//!
//! A record is a 12-byte header and a payload:
//!
//! ```text
//! | payload length: u32 LE | CRC32C of the length bytes: u32 LE | CRC32C of the payload: u32 LE | payload |
//! ```
//!
//! The length has its own checksum so that a damaged length is caught before it is trusted
//! (a flipped bit there would otherwise send the reader past the end of the file, where it
//! would look like a torn write). What a crash can leave behind is a *prefix* of what was
//! being written, or that prefix followed by zeros (a file extended before its data reached
//! the disk). So, reading from the start:
//!
//! - the file ends inside a header, or the rest of the file is zeros: **torn tail**;
//! - a header whose length check fails: **torn tail** if nothing but zeros follows it (a
//!   header written in part), **corrupt** otherwise;
//! - a good header whose payload runs past the end of the file: **torn tail**;
//! - a payload whose checksum fails: **torn tail** if nothing but zeros follows it (the
//!   last record, its pages on disk only in part), **corrupt** otherwise.
//!
//! Every header's length check is non-zero (the CRC32C of four bytes, zero included, is
//! never zero), so a record that follows a damaged one is never mistaken for zeros.
//!
//! Recovery keeps every record before a torn tail and drops the tail (with a log line);
//! corruption stops the start unless the operator allows loading up to it.

/// Bytes of a record's header.
pub const HEADER_BYTES: usize = 12;
/// The largest payload a record may carry; a header that claims more is damaged.
pub const PAYLOAD_BYTES_MAX: usize = 1 << 30;

/// Appends one record carrying `payload` to `out`.
///
/// # Panics
/// If the payload is larger than [`PAYLOAD_BYTES_MAX`]: callers split their writes.
pub fn append(out: &mut Vec<u8>, payload: &[u8]) {
    assert!(
        payload.len() <= PAYLOAD_BYTES_MAX,
        "a journal record of {} bytes",
        payload.len()
    );
    let length = (payload.len() as u32).to_le_bytes();
    out.extend_from_slice(&length);
    out.extend_from_slice(&crc32c::crc32c(&length).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// What the reader found at an offset.
#[derive(Debug, PartialEq, Eq)]
pub enum Next<'a> {
    /// A whole, intact record; the next one starts at `end`.
    Record { payload: &'a [u8], end: usize },
    /// The end of the file, on a record boundary.
    End,
    /// What follows `at` is an unfinished write: keep everything before `at`.
    TornTail { at: usize },
    /// The record at `at` is damaged and is not the file's last: stop, or load up to `at`.
    Corrupt { at: usize, reason: &'static str },
}

/// Reads the record that starts at `at` in `file`.
pub fn read(file: &[u8], at: usize) -> Next<'_> {
    let rest = &file[at.min(file.len())..];
    if rest.is_empty() {
        return Next::End;
    }
    // Nothing but zeros from `from` to the end of the file.
    let zeros_from = |from: usize| file.get(from..).is_none_or(|r| r.iter().all(|&b| b == 0));
    let damaged = |after: usize, reason: &'static str| {
        if zeros_from(after) {
            Next::TornTail { at }
        } else {
            Next::Corrupt { at, reason }
        }
    };
    if rest.len() < HEADER_BYTES || zeros_from(at) {
        return Next::TornTail { at };
    }
    let word = |i: usize| u32::from_le_bytes(rest[i..i + 4].try_into().expect("4 bytes"));
    if crc32c::crc32c(&rest[..4]) != word(4) {
        return damaged(at + HEADER_BYTES, "a record header fails its checksum");
    }
    let length = word(0) as usize;
    if length > PAYLOAD_BYTES_MAX {
        return damaged(
            at + HEADER_BYTES,
            "a record header claims an impossible length",
        );
    }
    let Some(payload) = rest.get(HEADER_BYTES..HEADER_BYTES + length) else {
        return Next::TornTail { at };
    };
    let end = at + HEADER_BYTES + length;
    if crc32c::crc32c(payload) != word(8) {
        return damaged(end, "a record's payload fails its checksum");
    }
    Next::Record { payload, end }
}

/// Every intact record of `file` from the start, and how the file ended.
pub fn read_all(file: &[u8]) -> (Vec<&[u8]>, Next<'_>) {
    let mut records = Vec::new();
    let mut at = 0;
    loop {
        match read(file, at) {
            Next::Record { payload, end } => {
                records.push(payload);
                at = end;
            }
            other => return (records, other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn file_of(payloads: &[Vec<u8>]) -> (Vec<u8>, Vec<usize>) {
        let mut file = Vec::new();
        let mut starts = Vec::new();
        for payload in payloads {
            starts.push(file.len());
            append(&mut file, payload);
        }
        (file, starts)
    }

    fn payloads() -> impl Strategy<Value = Vec<Vec<u8>>> {
        prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 2..12)
    }

    #[test]
    fn records_read_back_in_order() {
        let payloads = vec![b"one".to_vec(), Vec::new(), vec![7; 5000]];
        let (file, _) = file_of(&payloads);
        let (records, end) = read_all(&file);
        assert_eq!(
            records,
            payloads.iter().map(Vec::as_slice).collect::<Vec<_>>()
        );
        assert_eq!(end, Next::End);
        assert_eq!(read_all(&[]), (Vec::new(), Next::End));
    }

    #[test]
    fn a_zero_filled_tail_is_torn_not_corrupt() {
        let (mut file, _) = file_of(&[b"kept".to_vec()]);
        let at = file.len();
        file.resize(at + 4096, 0);
        assert_eq!(read_all(&file).1, Next::TornTail { at });
    }

    proptest! {
        /// A crash while the last record was being written leaves a prefix of it (and maybe
        /// zeros): every earlier record is kept, the tail is reported torn, at every offset.
        #[test]
        fn the_last_record_cut_anywhere_is_a_torn_tail(payloads in payloads(), zeros in 0usize..64) {
            let (file, starts) = file_of(&payloads);
            let last = *starts.last().unwrap();
            for cut in last + 1..file.len() {
                let mut torn = file[..cut].to_vec();
                torn.resize(cut + zeros, 0);
                let (records, end) = read_all(&torn);
                if torn.starts_with(&file) {
                    // The zeros happened to be the bytes that were cut (a tail of zeros in
                    // the record): the record is whole.
                    prop_assert_eq!(records.len(), payloads.len());
                    continue;
                }
                prop_assert_eq!(records.len(), payloads.len() - 1, "cut at {}", cut);
                prop_assert_eq!(end, Next::TornTail { at: last });
            }
        }

        /// Any bytes at all: what the reader returns as records is exactly what lies in the
        /// file up to where it stopped (the fuzz target `journal_reader` checks the same with
        /// coverage guidance), valid records with noise after them included.
        #[test]
        fn records_read_from_any_bytes_are_the_file_up_to_the_stop(
            payloads in payloads(),
            noise in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            for file in [noise.clone(), [file_of(&payloads).0, noise].concat()] {
                let (records, end) = read_all(&file);
                let stop = match end {
                    Next::End => file.len(),
                    Next::TornTail { at } | Next::Corrupt { at, .. } => at,
                    Next::Record { .. } => unreachable!(),
                };
                let mut again = Vec::new();
                for record in &records {
                    append(&mut again, record);
                }
                prop_assert_eq!(&again[..], &file[..stop]);
            }
        }

        /// A flipped byte in any record but the last is reported as corruption at that
        /// record, and every record before it reads back intact.
        #[test]
        fn a_flipped_byte_before_the_last_record_is_corruption(
            payloads in payloads(),
            pick in any::<prop::sample::Index>(),
            bit in 0u8..8,
        ) {
            let (mut file, starts) = file_of(&payloads);
            let last = *starts.last().unwrap();
            let offset = pick.index(last);
            file[offset] ^= 1 << bit;
            let record = starts.iter().rposition(|&s| s <= offset).unwrap();
            let (records, end) = read_all(&file);
            prop_assert_eq!(records.len(), record);
            prop_assert!(
                matches!(end, Next::Corrupt { at, .. } if at == starts[record]),
                "flip at {} gave {:?}", offset, end
            );
        }
    }
}
