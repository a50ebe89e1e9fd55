//! A shard's doorbell: how other threads wake a network loop that sleeps in its own ring.
//!
//! On the io_uring path an idle shard sleeps in one `io_uring_enter` on its own ring, not in
//! glommio (docs/ARCHITECTURE.md, "The idle path"). Completions on that ring wake it; this
//! doorbell is how everything else does: a read of the doorbell's eventfd is always armed on
//! the ring, so a write to the eventfd completes it and ends the wait.
//!
//! Writers: a peer shard that has put an envelope into this shard's mesh channel
//! ([`Doorbell::post`]), shutdown and the watchdog ([`Doorbell::ring`]).
//!
//! A post rings only when the shard says it sleeps, so a busy shard costs its peers no
//! syscall. The handshake is the classic one on two variables: the sender counts the
//! envelope and then reads `sleeping`; the shard sets `sleeping` and then reads the counts.
//! Both sides use sequentially consistent operations, so at least one sees the other: the
//! shard does not sleep, or the sender rings.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[repr(align(64))]
#[derive(Default)]
struct Padded(AtomicU64);

pub struct Doorbell {
    fd: OwnedFd,
    sleeping: AtomicBool,
    /// Envelopes each peer has put into this shard's channel (indexed by the sender), one
    /// cache line each so that senders do not contend.
    posted: Box<[Padded]>,
    /// Writes to the eventfd so far (INFO: doorbell_rings).
    pub rings: AtomicU64,
}

impl Doorbell {
    pub fn new(shard_count: usize) -> io::Result<Doorbell> {
        // A blocking eventfd: the ring's read of it waits for a write instead of failing.
        // SAFETY: eventfd has no memory preconditions; the result is checked.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Doorbell {
            // SAFETY: raw is a fresh fd nobody else owns.
            fd: unsafe { OwnedFd::from_raw_fd(raw) },
            sleeping: AtomicBool::new(false),
            posted: (0..shard_count).map(|_| Padded::default()).collect(),
            rings: AtomicU64::new(0),
        })
    }

    /// One doorbell per shard.
    pub fn for_shards(shard_count: usize) -> io::Result<std::sync::Arc<[Doorbell]>> {
        (0..shard_count)
            .map(|_| Doorbell::new(shard_count))
            .collect()
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// A peer put an envelope into this shard's channel: count it, and ring if the shard
    /// sleeps (the first sender to find it asleep rings; the rest need not).
    pub fn post(&self, from: usize) {
        self.posted[from].0.fetch_add(1, Ordering::SeqCst);
        // A read first: a shard that is awake costs its senders no write to this line.
        if self.sleeping.load(Ordering::SeqCst) && self.sleeping.swap(false, Ordering::SeqCst) {
            self.ring();
        }
    }

    /// Envelopes from `from` so far.
    pub fn posted(&self, from: usize) -> u64 {
        self.posted[from].0.load(Ordering::SeqCst)
    }

    /// Wakes the shard whatever it is doing.
    pub fn ring(&self) {
        self.rings.fetch_add(1, Ordering::Relaxed);
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a live u64 to our own eventfd.
        unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// The shard is about to sleep: from now on posts ring. The caller must look at the
    /// counts (and anything else a peer may change) *after* this, and not sleep if they moved.
    pub fn announce_sleep(&self) {
        self.sleeping.store(true, Ordering::SeqCst);
    }

    /// The shard is awake again.
    pub fn awake(&self) {
        self.sleeping.store(false, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(bell: &Doorbell) -> u64 {
        let mut value = 0u64;
        // SAFETY: a non-blocking poll of our own eventfd, then a read of 8 bytes into a u64.
        unsafe {
            let mut poll = libc::pollfd {
                fd: bell.fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            if libc::poll(&mut poll, 1, 0) == 1 {
                libc::read(bell.fd(), (&mut value as *mut u64).cast(), 8);
            }
        }
        value
    }

    #[test]
    fn a_post_rings_only_a_sleeping_shard_and_only_once() {
        let bell = Doorbell::new(2).unwrap();
        bell.post(1);
        assert_eq!(bell.posted(1), 1);
        assert_eq!(pending(&bell), 0, "an awake shard is not rung");
        bell.announce_sleep();
        bell.post(1);
        bell.post(0);
        assert_eq!((bell.posted(0), bell.posted(1)), (1, 2));
        assert_eq!(pending(&bell), 1, "the first post to a sleeper rings, once");
        bell.ring();
        assert_eq!(pending(&bell), 1);
        assert_eq!(bell.rings.load(Ordering::Relaxed), 2);
    }
}
