//! The TASK.* commands' handlers: `commands` (SUBMIT, FETCH's parse, ACK, FAIL, …), `admin`
//! (LIST, PURGE, DELETE, DELQUEUE), `batch` (BATCH, FLOW and their reports), `cron` (CRON), `reports`
//! (PROGRESS, LOG, EVENTS). The engine they drive is `crate::tasks`.

pub mod admin;
pub mod batch;
pub mod commands;
pub mod cron;
pub mod reports;
