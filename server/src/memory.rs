//! The server's own count of the bytes it has allocated (`used_memory`), for `maxmemory`.
//!
//! [`CountingAlloc`] wraps the system allocator (the binary installs it as the global
//! allocator) and adds each allocation's size to a counter of the allocating thread, and
//! subtracts it on free. A thread owns its counter outright, so counting is a plain load and
//! store on a cache line no other core writes (no atomic read-modify-write, no sharing);
//! memory freed by another thread than the one that allocated it (an entry moved between
//! shards) makes one counter go down and another up, and the sum stays right. Reading the
//! total sums the counters of the threads that ever allocated: a handful.
//!
//! Like Redis's `used_memory` (zmalloc's count), this is what the server asked for, not RSS:
//! the allocator's own overhead and fragmentation are not in it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

/// Counters for this many threads; later threads share the last one (atomically).
const SLOTS: usize = 64;

#[repr(align(64))]
struct Slot(AtomicIsize);

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot(AtomicIsize::new(0));
static COUNTERS: [Slot; SLOTS] = [EMPTY; SLOTS];
/// How many slots have been handed to threads.
static SLOTS_TAKEN: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's slot, once it allocated (usize::MAX: none yet).
    static MY_SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn my_slot() -> usize {
    MY_SLOT
        .try_with(|slot| {
            if slot.get() == usize::MAX {
                let taken = SLOTS_TAKEN.fetch_add(1, Ordering::Relaxed);
                slot.set(taken.min(SLOTS - 1));
            }
            slot.get()
        })
        // A thread being torn down: count in the shared last slot.
        .unwrap_or(SLOTS - 1)
}

fn add(delta: isize) {
    let slot = my_slot();
    let counter = &COUNTERS[slot].0;
    if slot < SLOTS - 1 {
        // Only this thread writes its own slot: a plain load and store.
        counter.store(counter.load(Ordering::Relaxed) + delta, Ordering::Relaxed);
    } else {
        counter.fetch_add(delta, Ordering::Relaxed);
    }
}

/// The system allocator, counting.
pub struct CountingAlloc;

// SAFETY: every call goes to `System` unchanged; only a counter is updated besides.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            add(layout.size() as isize);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) };
        add(-(layout.size() as isize));
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            add(layout.size() as isize);
        }
        ptr
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let fresh = unsafe { System.realloc(ptr, layout, new_size) };
        if !fresh.is_null() {
            add(new_size as isize - layout.size() as isize);
        }
        fresh
    }
}

/// Bytes allocated and not yet freed, by every thread (0 when the counting allocator is not
/// installed, as in unit tests).
pub fn used_memory() -> u64 {
    let taken = SLOTS_TAKEN.load(Ordering::Relaxed).min(SLOTS);
    let total: isize = COUNTERS[..taken]
        .iter()
        .map(|slot| slot.0.load(Ordering::Relaxed))
        .sum();
    total.max(0) as u64
}

/// `maxmemory`, in bytes (0: none). A static, so the shards' write path can check it
/// through a plain function pointer ([`over_maxmemory`]).
static MAXMEMORY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub fn set_maxmemory(bytes: u64) {
    MAXMEMORY.store(bytes, Ordering::Relaxed);
}

pub fn maxmemory() -> u64 {
    MAXMEMORY.load(Ordering::Relaxed)
}

/// True when `maxmemory` is set and the server holds more than it.
pub fn over_maxmemory() -> bool {
    let max = maxmemory();
    max > 0 && used_memory() > max
}

/// The most `used_memory` seen (sampled every 100 ms by each shard), and what it was when
/// the server started, before any data was loaded: INFO's `used_memory_peak` and
/// `used_memory_startup`.
static PEAK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static STARTUP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub fn note_peak() -> u64 {
    let used = used_memory();
    PEAK.fetch_max(used, Ordering::Relaxed).max(used)
}

pub fn note_startup() {
    STARTUP.store(used_memory(), Ordering::Relaxed);
}

pub fn startup_memory() -> u64 {
    STARTUP.load(Ordering::Relaxed)
}
