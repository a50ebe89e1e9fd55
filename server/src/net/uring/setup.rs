//! Setting the ring up: the kernel features it needs, the ring's flags, and the size of the
//! registered-file table.

use super::*;

/// Checks that this kernel has what the ring needs; the error says what is missing.
pub fn check_kernel() -> Result<(), String> {
    let ring = build_ring(8).map_err(|e| {
        format!(
            "io_uring with SINGLE_ISSUER|DEFER_TASKRUN is unavailable ({e}); Linux 6.1+ is needed"
        )
    })?;
    let mut probe = io_uring::Probe::new();
    ring.submitter()
        .register_probe(&mut probe)
        .map_err(|e| format!("io_uring probe failed: {e}"))?;
    let mut missing = Vec::new();
    for (code, name) in [
        (opcode::AcceptMulti::CODE, "multishot ACCEPT"),
        (opcode::RecvMulti::CODE, "multishot RECV"),
        (opcode::Send::CODE, "SEND"),
        (opcode::AsyncCancel::CODE, "ASYNC_CANCEL"),
    ] {
        if !probe.is_supported(code) {
            missing.push(name);
        }
    }
    if !missing.is_empty() {
        return Err(format!("io_uring lacks: {}", missing.join(", ")));
    }
    BufRing::register(&ring, BUFFER_GROUP, 2, 64)
        .map(drop)
        .map_err(|e| format!("provided buffer rings are unavailable ({e}); Linux 5.19+ is needed"))
}

pub(super) fn build_ring(entries: u32) -> io::Result<IoUring> {
    IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_taskrun_flag()
        .setup_cqsize(CQ_ENTRIES.max(entries * 2))
        .build(entries)
}

/// The soft limit on open files, capped to a u32.
pub(super) fn open_file_limit() -> u32 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 0;
    }
    limit.rlim_cur.min(u64::from(u32::MAX)) as u32
}
