//! Heap bytes per waiting task, counted by a global allocator around the engine alone: the
//! task engine's memory target (docs/TASKS.md, "Memory per waiting task") checked on every
//! test run, not only in the bench. Its own test binary, so no other test's allocations count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use bytes::Bytes;
use wetask_shards::tasks::{Engine, SubmitOptions};

struct Counting;

static HELD: AtomicIsize = AtomicIsize::new(0);

/// malloc's real cost for a request: glibc rounds to 16 B with an 8 B header, 32 B at least.
fn charged(size: usize) -> isize {
    ((size + 8).div_ceil(16) * 16).max(32) as isize
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        HELD.fetch_add(charged(layout.size()), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HELD.fetch_sub(charged(layout.size()), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        HELD.fetch_add(
            charged(new_size) - charged(layout.size()),
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn bytes_per_waiting_task(tasks: usize) -> f64 {
    let mut engine = Engine::new(600_000);
    let payload = [b'x'; 32];
    let before = HELD.load(Ordering::Relaxed);
    for _ in 0..tasks {
        engine
            .submit(
                b"jobs",
                Bytes::copy_from_slice(&payload),
                SubmitOptions::default(),
                1_000,
            )
            .expect("submit");
    }
    let after = HELD.load(Ordering::Relaxed);
    let per_task = (after - before) as f64 / tasks as f64;
    drop(engine);
    per_task
}

/// The one test of this binary: a second one running alongside would count into `HELD`.
#[test]
fn a_waiting_task_costs_at_most_300_bytes() {
    for tasks in [50_000, 200_000] {
        let per_task = bytes_per_waiting_task(tasks);
        eprintln!("heap per waiting task ({tasks}, 32 B payloads): {per_task:.1} B");
        assert!(
            per_task <= 300.0,
            "{per_task:.1} B per waiting task of {tasks}"
        );
    }
}
