//! A provided-buffer ring (IORING_REGISTER_PBUF_RING): the kernel picks a free buffer for
//! each multishot recv completion, so no buffer is tied up per idle connection. Buffers are
//! handed back as soon as their bytes are copied into the connection's read buffer.

use std::io;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types::BufRingEntry;
use io_uring::IoUring;

pub struct BufRing {
    entries: *mut BufRingEntry,
    entries_bytes: usize,
    mask: u16,
    tail: u16,
    buffers: Vec<u8>,
    buffer_bytes: usize,
    group: u16,
}

impl BufRing {
    /// Maps and registers a ring of `count` buffers (a power of two) of `buffer_bytes` each.
    pub fn register(
        ring: &IoUring,
        group: u16,
        count: u16,
        buffer_bytes: usize,
    ) -> io::Result<BufRing> {
        assert!(
            count.is_power_of_two(),
            "buffer count must be a power of two"
        );
        let entries_bytes = usize::from(count) * std::mem::size_of::<BufRingEntry>();
        // SAFETY: an anonymous private mapping; checked for failure below.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                entries_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_ANONYMOUS | libc::MAP_PRIVATE,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut bufring = BufRing {
            entries: map.cast(),
            entries_bytes,
            mask: count - 1,
            tail: 0,
            buffers: vec![0u8; usize::from(count) * buffer_bytes],
            buffer_bytes,
            group,
        };
        // SAFETY: the mapping is page-aligned, sized for `count` entries, and outlives the
        // registration (it is unregistered before it is unmapped, in Drop).
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(map as u64, count, group, 0)?
        };
        for id in 0..count {
            bufring.push(id);
        }
        bufring.publish();
        Ok(bufring)
    }

    pub fn group(&self) -> u16 {
        self.group
    }

    fn push(&mut self, id: u16) {
        let index = usize::from(self.tail & self.mask);
        // SAFETY: index < count, inside the mapping; the kernel reads entries only up to the
        // published tail, and this one is past it until `publish`.
        let entry = unsafe { &mut *self.entries.add(index) };
        let start = usize::from(id) * self.buffer_bytes;
        entry.set_addr(self.buffers[start..].as_ptr() as u64);
        entry.set_len(self.buffer_bytes as u32);
        entry.set_bid(id);
        self.tail = self.tail.wrapping_add(1);
    }

    fn publish(&self) {
        // SAFETY: the tail field lives in the first entry of the mapping; the kernel reads it
        // with acquire ordering.
        let tail = unsafe { &*(BufRingEntry::tail(self.entries) as *const AtomicU16) };
        tail.store(self.tail, Ordering::Release);
    }

    /// The first `len` bytes the kernel wrote into buffer `id`.
    pub fn bytes(&self, id: u16, len: usize) -> &[u8] {
        let start = usize::from(id) * self.buffer_bytes;
        &self.buffers[start..start + len.min(self.buffer_bytes)]
    }

    /// Returns buffer `id` to the kernel.
    pub fn recycle(&mut self, id: u16) {
        self.push(id);
        self.publish();
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping; the ring that used it is being torn down with us.
        unsafe { libc::munmap(self.entries.cast(), self.entries_bytes) };
    }
}
