//! A cache prefetch hint, shared by the tables that look several entries up ahead of use:
//! the keyspace's pipelined batches and the task table's retention evictions.

/// Asks the CPU to bring the cache line holding `ptr` in (x86-64; elsewhere nothing). Never
/// faults, whatever the address.
#[inline(always)]
pub(crate) fn prefetch_read(ptr: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it does not dereference `ptr` and cannot fault.
    unsafe {
        std::arch::x86_64::_mm_prefetch(ptr.cast(), std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptr;
}
