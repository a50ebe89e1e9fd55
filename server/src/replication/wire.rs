//! The replication stream's wire format, between a primary's sender thread and a
//! replica's receiver (one TCP connection per shard, on the primary's `repl-port`).
//!
//! The replica opens with one text line:
//!
//! ```text
//! WETASK-SYNC 1 <token> <shard> <replica id> <listening port> <run id | ?> <position>\n
//! ```
//!
//! `token` is what `REPLCONF WETASK` gave the replica on the client port (so the stream
//! port needs the same password the client port does). The primary answers one line,
//! `+FULL <position>`, `+CONTINUE <position>` or `-ERR <reason>`, and then frames:
//! a tag byte, a payload length (u32 LE) and the payload. A `position` is a place in the
//! primary shard's journal, `generation << 40 | byte offset` ([`pack`]): it only grows.
//!
//! | Tag | Payload | Meaning |
//! |---|---|---|
//! | `P` | a snapshot part | a full sync's snapshot, one part per frame |
//! | `E` | — | the snapshot is whole |
//! | `R` | position after it (u64 LE), record payload | one journal record |
//! | `H` | position (u64 LE) | nothing new past the position (sent when idle) |
//! | `L` | FUNCTION DUMP's payload | the function libraries (shard 0's stream: at its start and after each change) |
//! | `M` | channel length (u32 LE), channel, message | a PUBLISH on the primary (shard 0's stream, `publishes`) |
//!
//! The replica sends `A` and a position (u64 LE): everything up to it is applied; and `F`
//! and a position: everything up to it is fsynced in the replica's own journal (WAITAOF).

use std::io::{self, Read, Write};

/// The longest opening or answer line.
pub const LINE_BYTES_MAX: usize = 512;
/// The largest frame payload a receiver accepts (a journal record's limit, and a header).
pub const FRAME_BYTES_MAX: usize = wetask_shards::persist::journal::record::PAYLOAD_BYTES_MAX + 16;

pub const PART: u8 = b'P';
pub const SNAPSHOT_END: u8 = b'E';
pub const RECORD: u8 = b'R';
pub const HEARTBEAT: u8 = b'H';
pub const FUNCTIONS: u8 = b'L';
pub const PUBLISH: u8 = b'M';
pub const ACK: u8 = b'A';
pub const FSYNCED: u8 = b'F';

pub use crate::persist::{position as pack, segment_and_offset as unpack};

/// What a replica asks for on a shard's stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opening {
    pub token: String,
    pub shard: usize,
    pub replica_id: String,
    pub listening_port: u16,
    /// The primary run and position to continue from; `None`: a full sync.
    pub resume: Option<(String, u64)>,
}

impl Opening {
    pub fn line(&self) -> String {
        let (run, position) = match &self.resume {
            Some((run, position)) => (run.as_str(), *position),
            None => ("?", 0),
        };
        format!(
            "WETASK-SYNC 1 {} {} {} {} {run} {position}\n",
            self.token, self.shard, self.replica_id, self.listening_port
        )
    }

    pub fn parse(line: &str) -> Result<Opening, String> {
        let words: Vec<&str> = line.split_ascii_whitespace().collect();
        let [magic, version, token, shard, replica_id, port, run, position] = words[..] else {
            return Err("expected WETASK-SYNC and 7 fields".into());
        };
        if magic != "WETASK-SYNC" || version != "1" {
            return Err("not a WETASK-SYNC 1 opening".into());
        }
        let number = |s: &str| s.parse::<u64>().map_err(|_| format!("not a number: {s}"));
        let position = number(position)?;
        Ok(Opening {
            token: token.to_string(),
            shard: number(shard)? as usize,
            replica_id: replica_id.chars().take(64).collect(),
            listening_port: number(port)?.min(u64::from(u16::MAX)) as u16,
            resume: (run != "?").then(|| (run.to_string(), position)),
        })
    }
}

/// Reads one `\n`-terminated line of at most [`LINE_BYTES_MAX`] bytes, a byte at a time
/// (what follows it is the stream's, and must stay unread).
pub fn read_line(reader: &mut impl Read) -> io::Result<String> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        reader.read_exact(&mut byte)?;
        if byte[0] == b'\n' {
            break;
        }
        if line.len() >= LINE_BYTES_MAX {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "line too long"));
        }
        line.push(byte[0]);
    }
    String::from_utf8(line).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8"))
}

/// Writes one frame.
pub fn write_frame(out: &mut impl Write, tag: u8, parts: &[&[u8]]) -> io::Result<()> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let len = u32::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame too large"))?;
    let mut header = [0u8; 5];
    header[0] = tag;
    header[1..].copy_from_slice(&len.to_le_bytes());
    out.write_all(&header)?;
    for part in parts {
        out.write_all(part)?;
    }
    Ok(())
}

/// Reads one frame: its tag and payload.
pub fn read_frame(reader: &mut impl Read) -> io::Result<(u8, Vec<u8>)> {
    let mut header = [0u8; 5];
    reader.read_exact(&mut header)?;
    let len = u32::from_le_bytes(header[1..].try_into().expect("4 bytes")) as usize;
    if len > FRAME_BYTES_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "frame too large",
        ));
    }
    let mut payload = vec![0u8; len];
    reader.read_exact(&mut payload)?;
    Ok((header[0], payload))
}

/// The u64 at the start of `payload` (a position or a time).
pub fn u64_at(payload: &[u8], at: usize) -> io::Result<u64> {
    payload
        .get(at..at + 8)
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a short frame"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_order_by_segment_then_offset() {
        assert!(pack(2, 0) > pack(1, (1 << 40) - 1));
        assert_eq!(unpack(pack(7, 12345)), (7, 12345));
    }

    #[test]
    fn openings_round_trip_and_bad_ones_are_refused() {
        let full = Opening {
            token: "t0k".into(),
            shard: 1,
            replica_id: "r1".into(),
            listening_port: 7001,
            resume: None,
        };
        assert_eq!(Opening::parse(full.line().trim_end()), Ok(full));
        let resume = Opening {
            resume: Some(("abc".into(), pack(3, 99))),
            token: "t".into(),
            shard: 0,
            replica_id: "r".into(),
            listening_port: 1,
        };
        assert_eq!(Opening::parse(&resume.line()), Ok(resume));
        assert!(Opening::parse("WETASK-SYNC 2 t 0 r 1 ? 0").is_err());
        assert!(Opening::parse("GET x").is_err());
        assert!(Opening::parse("WETASK-SYNC 1 t x r 1 ? 0").is_err());
    }

    #[test]
    fn frames_round_trip_and_a_huge_length_is_refused() {
        let mut out = Vec::new();
        write_frame(&mut out, RECORD, &[&5u64.to_le_bytes(), b"payload"]).unwrap();
        write_frame(&mut out, SNAPSHOT_END, &[]).unwrap();
        let mut reader = &out[..];
        let (tag, payload) = read_frame(&mut reader).unwrap();
        assert_eq!((tag, u64_at(&payload, 0).unwrap()), (RECORD, 5));
        assert_eq!(&payload[8..], b"payload");
        assert_eq!(read_frame(&mut reader).unwrap(), (SNAPSHOT_END, Vec::new()));
        let huge = [RECORD, 0xff, 0xff, 0xff, 0xff];
        assert!(read_frame(&mut &huge[..]).is_err());
        let mut long = vec![b'x'; LINE_BYTES_MAX + 1];
        long.push(b'\n');
        assert!(read_line(&mut &long[..]).is_err());
    }
}
