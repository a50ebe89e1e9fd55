//! The `wetask` server: glommio executors (one pinned shard per core), the io_uring network
//! rings, cross-shard routing, and the connection and server commands. The only crate that
//! knows glommio and io_uring; the state machines live in `wetask-shards`.

mod clients;
mod commands;
pub mod config;
mod cross;
mod dispatch;
mod globals;
mod info;
mod list_block;
mod lua_libs;
mod lua_sandbox;
pub mod memory;
mod mesh;
mod net;
mod output_limits;
mod pubsub;
pub mod runtime;
mod script_busy;
mod scripting;
mod session;
mod shard;
mod stats;
mod task_fetch;
mod transaction;
mod watchdog;
