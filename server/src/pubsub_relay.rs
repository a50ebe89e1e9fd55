//! PUBLISH across nodes: the messages other nodes sent here, for this node's subscribers.
//!
//! Redis delivers a PUBLISH to every subscriber of the cluster (its bus carries the message
//! to every node) and to the subscribers of its replicas (the replication stream carries
//! it). WeTask's node-to-node links do the same: a consensus group's members over their
//! Raft links (`consensus::transport`), cluster nodes over the bus (`cluster::bus_publish`),
//! a replica's primary over its streams (`replication`). Whatever thread receives a message queues it here; shard 0's next
//! turn takes the queue and delivers it as a local PUBLISH does, to its own subscribers
//! and to every shard with some (`PubSub::deliver_everywhere`).
//!
//! Delivery is best effort, as Redis's across its bus: a message that finds its queue
//! over [`QUEUED_BYTES_MAX`] (shard 0 stalled) is dropped and counted, never held
//! without bound.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

/// The most bytes of messages waiting for shard 0: past it, arrivals are dropped.
pub const QUEUED_BYTES_MAX: usize = 64 << 20;

pub struct Relay {
    queue: Mutex<VecDeque<(Bytes, Bytes)>>,
    bytes: AtomicUsize,
    /// Something is queued: shard 0's turn looks (one relaxed load otherwise).
    ready: AtomicBool,
    doorbells: Arc<[crate::doorbell::Doorbell]>,
    /// Messages taken in, and dropped because the queue was full (INFO's `pubsub_relayed`
    /// and `pubsub_relay_dropped`).
    pub relayed: AtomicU64,
    pub dropped: AtomicU64,
}

impl Relay {
    pub fn new(doorbells: Arc<[crate::doorbell::Doorbell]>) -> Relay {
        Relay {
            queue: Mutex::new(VecDeque::new()),
            bytes: AtomicUsize::new(0),
            ready: AtomicBool::new(false),
            doorbells,
            relayed: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    /// Queues a message another node published, and wakes shard 0.
    pub fn arrived(&self, channel: Bytes, message: Bytes) {
        let size = channel.len() + message.len();
        if self.bytes.fetch_add(size, Ordering::AcqRel) + size > QUEUED_BYTES_MAX {
            self.bytes.fetch_sub(size, Ordering::AcqRel);
            if self.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                tracing::warn!(
                    "PUBLISH from other nodes: more than {QUEUED_BYTES_MAX} bytes wait for shard 0; dropping messages (INFO's pubsub_relay_dropped counts them)"
                );
            }
            return;
        }
        self.queue
            .lock()
            .expect("relay")
            .push_back((channel, message));
        self.relayed.fetch_add(1, Ordering::Relaxed);
        if !self.ready.swap(true, Ordering::AcqRel) {
            if let Some(doorbell) = self.doorbells.first() {
                doorbell.ring();
            }
        }
    }

    /// Everything queued (shard 0's turn), or nothing at the cost of one load.
    #[inline]
    pub fn take(&self) -> Option<Vec<(Bytes, Bytes)>> {
        if !self.ready.load(Ordering::Relaxed) || !self.ready.swap(false, Ordering::AcqRel) {
            return None;
        }
        let taken: Vec<_> = self.queue.lock().expect("relay").drain(..).collect();
        let size: usize = taken.iter().map(|(c, m)| c.len() + m.len()).sum();
        self.bytes.fetch_sub(size, Ordering::AcqRel);
        Some(taken)
    }
}

/// A message as the links carry it: the channel's length (u32, little-endian), the
/// channel, the message.
pub fn encode(channel: &[u8], message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + channel.len() + message.len());
    out.extend_from_slice(&(channel.len() as u32).to_le_bytes());
    out.extend_from_slice(channel);
    out.extend_from_slice(message);
    out
}

/// The channel and message of [`encode`]'s bytes; `None` when malformed.
pub fn decode(body: &[u8]) -> Option<(Bytes, Bytes)> {
    let len = u32::from_le_bytes(body.get(..4)?.try_into().ok()?) as usize;
    let channel = body.get(4..4usize.checked_add(len)?)?;
    let message = &body[4 + len..];
    Some((
        Bytes::copy_from_slice(channel),
        Bytes::copy_from_slice(message),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relay() -> Relay {
        Relay::new(Arc::from(Vec::new()))
    }

    #[test]
    fn a_message_survives_the_wire_and_damage_is_refused() {
        let wire = encode(b"news", b"hello");
        assert_eq!(
            decode(&wire),
            Some((Bytes::from_static(b"news"), Bytes::from_static(b"hello")))
        );
        assert_eq!(
            decode(&encode(b"", b"")),
            Some((Bytes::new(), Bytes::new()))
        );
        assert_eq!(decode(&wire[..3]), None);
        let mut long = wire.clone();
        long[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode(&long), None);
    }

    #[test]
    fn the_queue_is_taken_whole_in_order_and_bounded() {
        let relay = relay();
        assert!(relay.take().is_none());
        relay.arrived(Bytes::from_static(b"a"), Bytes::from_static(b"1"));
        relay.arrived(Bytes::from_static(b"b"), Bytes::from_static(b"2"));
        let taken = relay.take().expect("two messages");
        assert_eq!(taken[0].0, Bytes::from_static(b"a"));
        assert_eq!(taken[1].1, Bytes::from_static(b"2"));
        assert!(relay.take().is_none(), "taken once");
        let big = Bytes::from(vec![b'x'; QUEUED_BYTES_MAX / 2]);
        relay.arrived(Bytes::new(), big.clone());
        relay.arrived(Bytes::new(), big.clone());
        relay.arrived(Bytes::new(), big);
        assert_eq!(relay.dropped.load(Ordering::Relaxed), 1);
        assert_eq!(relay.take().expect("two fit").len(), 2);
        assert_eq!(relay.bytes.load(Ordering::Relaxed), 0);
    }
}
