//! PUBLISH over the cluster bus, as Redis Cluster's bus carries a PUBLISH to every node.
//!
//! A PUBLISH queues its message here (`queue`); the bus thread sends what is queued, each
//! loop, to every node its first local node knows that is not a sibling (another shard of
//! this process), as a bus message of its own:
//! `WETASK-PUBLISH 1 <origin> <number> <channel> <message>`. A process is several nodes on
//! the bus (one per shard), so each message reaches it once per shard: the receiver
//! delivers a message the first time it sees its origin (a random token per process run)
//! and number, and drops the copies (`Seen`). It then goes to the node's relay
//! (`pubsub_relay`), which delivers it to the subscribers of every local shard.
//!
//! Best effort, as Redis's bus: a link that is down loses what was sent meanwhile, and the
//! queue holds at most [`QUEUED_BYTES_MAX`] (a stalled bus thread drops the rest).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use bytes::Bytes;

/// A publish message's first word and version.
pub const MAGIC: &[u8] = b"WETASK-PUBLISH";
const VERSION: &[u8] = b"1";
/// The most bytes of messages waiting for the bus thread.
const QUEUED_BYTES_MAX: usize = 32 << 20;
/// How many numbers back from the newest one a receiver tells copies from first sightings
/// (older ones are taken for copies).
const WINDOW: u64 = 4096;
/// The most origins a receiver keeps track of (past it, it starts over).
const ORIGINS_MAX: usize = 1024;

pub struct Publishing {
    /// This process run's origin token.
    origin: String,
    next: AtomicU64,
    outbox: Mutex<(VecDeque<Bytes>, usize)>,
    seen: Mutex<HashMap<String, Seen>>,
}

/// One origin's numbers seen lately.
#[derive(Default)]
struct Seen {
    newest: u64,
    recent: BTreeSet<u64>,
}

impl Default for Publishing {
    fn default() -> Self {
        Publishing {
            origin: crate::replication::random_hex(20),
            next: AtomicU64::new(1),
            outbox: Mutex::new((VecDeque::new(), 0)),
            seen: Mutex::new(HashMap::new()),
        }
    }
}

impl Publishing {
    /// Queues a PUBLISH for the other processes (dropped past [`QUEUED_BYTES_MAX`]).
    pub fn queue(&self, channel: &[u8], message: &[u8]) {
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        let encoded = encode(&self.origin, number, channel, message);
        let mut outbox = self.outbox.lock().expect("bus outbox");
        if outbox.1 + encoded.len() > QUEUED_BYTES_MAX {
            return;
        }
        outbox.1 += encoded.len();
        outbox.0.push_back(encoded);
    }

    /// Everything queued (the bus thread's loop).
    pub fn take(&self) -> Vec<Bytes> {
        let mut outbox = self.outbox.lock().expect("bus outbox");
        outbox.1 = 0;
        outbox.0.drain(..).collect()
    }

    /// True the first time `origin`'s message `number` arrives (this process's own never
    /// counts).
    pub fn first_time(&self, origin: &str, number: u64) -> bool {
        if origin == self.origin {
            return false;
        }
        let mut seen = self.seen.lock().expect("bus seen");
        if seen.len() >= ORIGINS_MAX && !seen.contains_key(origin) {
            seen.clear();
        }
        let seen = seen.entry(origin.to_string()).or_default();
        if number + WINDOW <= seen.newest || !seen.recent.insert(number) {
            return false;
        }
        seen.newest = seen.newest.max(number);
        let floor = seen.newest.saturating_sub(WINDOW);
        while seen.recent.first().is_some_and(|&oldest| oldest <= floor) {
            seen.recent.pop_first();
        }
        true
    }
}

/// The bus message of one PUBLISH.
pub fn encode(origin: &str, number: u64, channel: &[u8], message: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(64 + channel.len() + message.len());
    let number = number.to_string();
    wetask_protocol::encode_command(
        &mut out,
        &[
            Bytes::from_static(MAGIC),
            Bytes::from_static(VERSION),
            Bytes::copy_from_slice(origin.as_bytes()),
            Bytes::from(number),
            Bytes::copy_from_slice(channel),
            Bytes::copy_from_slice(message),
        ],
    );
    Bytes::from(out)
}

/// A bus message's origin, number, channel and message, if it is a PUBLISH of this
/// version; `None` for anything else.
pub fn decode(args: &[Bytes]) -> Option<(String, u64, Bytes, Bytes)> {
    let [magic, version, origin, number, channel, message] = args else {
        return None;
    };
    if magic.as_ref() != MAGIC || version.as_ref() != VERSION {
        return None;
    }
    let origin = std::str::from_utf8(origin).ok()?.to_string();
    let number = std::str::from_utf8(number).ok()?.parse().ok()?;
    Some((origin, number, channel.clone(), message.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use wetask_protocol::{CommandDecoder, Limits};

    fn args(bytes: &Bytes) -> Vec<Bytes> {
        let mut buffer = bytes::BytesMut::from(&bytes[..]);
        CommandDecoder::new(Limits::default())
            .decode(&mut buffer)
            .expect("decodes")
            .expect("whole")
            .to_vec()
    }

    #[test]
    fn a_publish_survives_the_wire_and_other_messages_are_not_one() {
        let wire = encode("abc", 7, b"news", b"hello");
        assert_eq!(
            decode(&args(&wire)),
            Some((
                "abc".into(),
                7,
                Bytes::from_static(b"news"),
                Bytes::from_static(b"hello")
            ))
        );
        let mut other = args(&wire);
        other[1] = Bytes::from_static(b"2");
        assert_eq!(decode(&other), None);
        assert_eq!(decode(&other[..5]), None);
    }

    #[test]
    fn each_message_is_delivered_once_whatever_order_its_copies_come_in() {
        let publishing = Publishing::default();
        assert!(publishing.first_time("peer", 2));
        assert!(publishing.first_time("peer", 1), "out of order, still new");
        assert!(!publishing.first_time("peer", 2), "a copy");
        assert!(!publishing.first_time("peer", 1), "a copy");
        assert!(publishing.first_time("other", 1), "another origin");
        assert!(publishing.first_time("peer", 2 + WINDOW * 2));
        assert!(
            !publishing.first_time("peer", 3),
            "far behind: taken for a copy"
        );
        let own = publishing.origin.clone();
        assert!(!publishing.first_time(&own, 99), "this process's own");
    }

    #[test]
    fn the_outbox_is_taken_whole_and_bounded() {
        let publishing = Publishing::default();
        publishing.queue(b"c", b"1");
        publishing.queue(b"c", b"2");
        assert_eq!(publishing.take().len(), 2);
        assert!(publishing.take().is_empty());
        let big = vec![b'x'; QUEUED_BYTES_MAX / 2];
        for _ in 0..3 {
            publishing.queue(b"c", &big);
        }
        assert_eq!(publishing.take().len(), 1, "past the bound, dropped");
    }
}
