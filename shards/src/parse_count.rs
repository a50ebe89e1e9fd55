//! Counts each parse of a request's form, for the tests that check a request is parsed once
//! (`crate::request`): a leaf, so that every parser (and `spec`'s key finders) may call it;
//! a form is named by anything that numbers it (`spec::FormKind` does). With the
//! `parse-count` feature (on for the server's tests) or in this crate's tests; otherwise it
//! is nothing.

/// Counts parses of each form, for the tests that check a request is parsed once (with the
/// `parse-count` feature, or in this crate's tests; otherwise nothing).
#[inline(always)]
pub fn count_parse(kind: impl Into<usize>) {
    #[cfg(any(test, feature = "parse-count"))]
    parse_counts::add(kind);
    #[cfg(not(any(test, feature = "parse-count")))]
    let _ = kind;
}

/// Counts a run of a row's key finder (a movable-key command's positions, found by parsing
/// its arguments), which the request's one parse should make the only one.
#[inline(always)]
pub fn count_key_finder() {
    #[cfg(any(test, feature = "parse-count"))]
    parse_counts::add_key_finder();
}

#[cfg(any(test, feature = "parse-count"))]
pub mod parse_counts {
    //! How many times each form was parsed, process-wide.
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    /// Forms are numbered below this.
    const FORMS: usize = 16;

    static COUNTS: [AtomicUsize; FORMS] = [const { AtomicUsize::new(0) }; FORMS];
    static KEY_FINDER_RUNS: AtomicUsize = AtomicUsize::new(0);

    pub fn add(kind: impl Into<usize>) {
        COUNTS[kind.into()].fetch_add(1, Relaxed);
    }

    /// Parses of `kind` so far.
    pub fn get(kind: impl Into<usize>) -> usize {
        COUNTS[kind.into()].load(Relaxed)
    }

    pub fn add_key_finder() {
        KEY_FINDER_RUNS.fetch_add(1, Relaxed);
    }

    /// Runs of a movable-key row's key finder so far.
    pub fn key_finder_runs() -> usize {
        KEY_FINDER_RUNS.load(Relaxed)
    }
}
