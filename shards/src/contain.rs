//! Panic containment at the command boundary.
//!
//! A handler that panics (a bug, never a client's fault) must not leave its shard dead while
//! the process lives on. Every shard command runs inside [`contained`]: a panic there is
//! caught, the client gets `-ERR internal error …`, and the shard goes on serving. The
//! process's panic hook (set by the server) reads [`current_command`] to log which command
//! panicked, and aborts the process for a panic anywhere else (a transport, the mesh), where
//! nothing could answer the client or vouch for the shard's state: a supervisor then
//! restarts it. docs/SECURITY.md says why this split.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};

thread_local! {
    /// The command running inside a boundary on this thread, if any.
    static CURRENT: Cell<Option<&'static str>> = const { Cell::new(None) };
}

/// The command whose handler is running inside [`contained`] on this thread.
pub fn current_command() -> Option<&'static str> {
    CURRENT.with(Cell::get)
}

/// Runs `f` for command `name`; a panic inside it comes back as `Err(message)`.
///
/// The handler's effects up to the panic stay: Rust keeps every structure memory-safe, and a
/// handler mutates its collection before it builds the reply, so what remains is at worst a
/// partly applied write, as a crash would leave under a journal.
pub fn contained<R>(name: &'static str, f: impl FnOnce() -> R) -> Result<R, String> {
    let outer = CURRENT.with(|c| c.replace(Some(name)));
    let result = catch_unwind(AssertUnwindSafe(f));
    CURRENT.with(|c| c.set(outer));
    result.map_err(|payload| {
        payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_comes_back_as_an_error_and_the_boundary_unwinds() {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let caught = contained("srandmember", || -> u32 {
            assert_eq!(current_command(), Some("srandmember"));
            panic!("capacity overflow")
        });
        std::panic::set_hook(previous);
        assert_eq!(caught, Err("capacity overflow".to_string()));
        assert_eq!(current_command(), None);
        assert_eq!(contained("get", || 7), Ok(7));
    }
}
