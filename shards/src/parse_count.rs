//! Counts each parse of a request's form, for the tests that check a request is parsed once
//! (`crate::request`): a leaf, so that every parser may call it. With the `parse-count`
//! feature (on for the server's tests) or in this crate's tests; otherwise it is nothing.

use crate::spec::FormKind;

/// Counts parses of each form, for the tests that check a request is parsed once (with the
/// `parse-count` feature, or in this crate's tests; otherwise nothing).
#[inline(always)]
pub fn count_parse(kind: FormKind) {
    #[cfg(any(test, feature = "parse-count"))]
    parse_counts::add(kind);
    #[cfg(not(any(test, feature = "parse-count")))]
    let _ = kind;
}

#[cfg(any(test, feature = "parse-count"))]
pub mod parse_counts {
    //! How many times each form was parsed, process-wide.
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    use super::FormKind;

    static COUNTS: [AtomicUsize; 8] = [const { AtomicUsize::new(0) }; 8];

    fn index(kind: FormKind) -> usize {
        match kind {
            FormKind::Plain => 0,
            FormKind::Blocking => 1,
            FormKind::Fetch => 2,
            FormKind::Wait => 3,
            FormKind::Events => 4,
            FormKind::Worker => 5,
            FormKind::Script => 6,
            FormKind::Sort => 7,
        }
    }

    pub fn add(kind: FormKind) {
        COUNTS[index(kind)].fetch_add(1, Relaxed);
    }

    /// Parses of `kind` so far.
    pub fn get(kind: FormKind) -> usize {
        COUNTS[index(kind)].load(Relaxed)
    }
}
