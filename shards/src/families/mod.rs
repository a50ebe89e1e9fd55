//! The command families: each command's handler, `fn(&mut Ctx, &[Bytes]) -> Frame`, in one
//! file per Redis group (strings, keys, lists …), the blocking commands together
//! (`blocking`: parsed once, their attempt shared by the request path and the handlers), and
//! the task commands in `tasks/`. Handlers see only [`crate::Ctx`]; the table
//! (`crate::table`) points at them.

pub mod bitfield;
pub mod bitmaps;
pub mod blocking;
pub mod dump;
pub mod geo;
pub mod hashes;
pub mod hyperloglog;
pub mod introspection;
pub mod keys;
pub mod lcs;
pub mod lists;
pub mod sets;
pub mod sort;
pub mod stream_groups;
pub mod streams;
pub mod strings;
pub mod tasks;
pub mod zsets;

#[cfg(test)]
mod collection_tests;
