//! Crash points for the crash tests (`server/tests/`): with `WETASK_FAILPOINT=<name>` in its
//! environment, the process ends at once at the step of that name, as a `kill -9` there
//! would end it (no destructors, no flushing: what was written is what the disk has). Unset,
//! each point costs one load of a cached value.

use std::sync::OnceLock;

fn armed() -> Option<&'static str> {
    static NAME: OnceLock<Option<String>> = OnceLock::new();
    NAME.get_or_init(|| std::env::var("WETASK_FAILPOINT").ok())
        .as_deref()
}

/// Whether the crash point `name` is armed.
pub fn is_armed(name: &str) -> bool {
    armed() == Some(name)
}

/// Ends the process at once if the crash point `name` is armed.
pub fn crash_if_armed(name: &str) {
    if is_armed(name) {
        tracing::warn!(failpoint = name, "crash point reached: exiting");
        // SAFETY: _exit ends the process; nothing runs after it.
        unsafe { libc::_exit(137) };
    }
}
