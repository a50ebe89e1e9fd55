//! The wall clock in unix time: a leaf, so that everything (the watchdog thread included)
//! reads it the same way without depending on `globals`.

use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock unix milliseconds.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Wall-clock unix microseconds.
pub fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}
