//! PUBLISH for replicas: a PUBLISH on a primary reaches its replicas' subscribers, as
//! Redis's replication stream carries it. Messages are not journal records (a restart must
//! not publish them again, and a PUBLISH costs no disk write): while shard 0 has a stream to
//! some replica, the message goes into a bounded log here, and each shard-0 stream sends
//! the messages after the last one it sent (`sender`), as frames of their own
//! (`wire::PUBLISH`). A replica delivers them to its subscribers (`pubsub_relay`) and logs
//! them for replicas of its own (a chain).
//!
//! Unlike Redis's, they travel beside the records, not among them: a message can reach a
//! replica's subscribers a moment before a write the primary made just before it (each
//! shard's records go on streams of their own anyway). A stream that falls more than
//! [`LOG_BYTES_MAX`] behind skips the messages it missed.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// The most bytes of messages kept for streams that lag.
pub const LOG_BYTES_MAX: usize = 32 << 20;

/// The messages kept, each with its number in the wire's encoding
/// (`pubsub_relay::encode`), and their bytes.
#[derive(Default)]
struct Log {
    messages: VecDeque<(u64, Vec<u8>)>,
    bytes: usize,
}

#[derive(Default)]
pub struct Publishes {
    log: Mutex<Log>,
    /// The newest message's number (0: none yet).
    last: AtomicU64,
    /// Shard-0 streams to replicas: messages are logged only while there is one.
    pub streams: AtomicUsize,
}

impl Publishes {
    /// Logs a message for the replicas, if any follow.
    pub fn record(&self, channel: &[u8], message: &[u8]) {
        if self.streams.load(Ordering::Relaxed) == 0 {
            return;
        }
        let body = crate::pubsub_relay::encode(channel, message);
        if body.len() > super::wire::FRAME_BYTES_MAX {
            return;
        }
        let mut log = self.log.lock().expect("publishes");
        let number = self.last.load(Ordering::Relaxed) + 1;
        log.bytes += body.len();
        log.messages.push_back((number, body));
        while log.bytes > LOG_BYTES_MAX {
            let Some((_, oldest)) = log.messages.pop_front() else {
                break;
            };
            log.bytes -= oldest.len();
        }
        self.last.store(number, Ordering::Release);
    }

    /// The newest message's number: a stream that starts sends only what comes after.
    pub fn last(&self) -> u64 {
        self.last.load(Ordering::Acquire)
    }

    /// The messages after number `after` still kept, and the number of the newest.
    pub fn since(&self, after: u64) -> (Vec<Vec<u8>>, u64) {
        let log = self.log.lock().expect("publishes");
        let newest = self.last.load(Ordering::Acquire);
        let bodies = log
            .messages
            .iter()
            .filter(|(number, _)| *number > after)
            .map(|(_, body)| body.clone())
            .collect();
        (bodies, newest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn messages_are_kept_only_for_streams_and_only_so_many() {
        let publishes = Publishes::default();
        publishes.record(b"c", b"unheard");
        assert_eq!(publishes.last(), 0, "no stream: nothing kept");
        publishes.streams.store(1, Ordering::Relaxed);
        let start = publishes.last();
        publishes.record(b"c", b"one");
        publishes.record(b"c", b"two");
        let (bodies, newest) = publishes.since(start);
        assert_eq!(newest, 2);
        let decoded: Vec<_> = bodies
            .iter()
            .map(|b| crate::pubsub_relay::decode(b).expect("decodes").1)
            .collect();
        assert_eq!(
            decoded,
            [Bytes::from_static(b"one"), Bytes::from_static(b"two")]
        );
        assert!(publishes.since(newest).0.is_empty());
        let big = vec![b'x'; LOG_BYTES_MAX / 3];
        for _ in 0..4 {
            publishes.record(b"c", &big);
        }
        let (bodies, newest) = publishes.since(0);
        assert_eq!(newest, 6);
        assert!(bodies.len() < 6, "the oldest went");
        assert!(bodies.iter().map(Vec::len).sum::<usize>() <= LOG_BYTES_MAX);
    }
}
