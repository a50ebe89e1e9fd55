//! The `wetask` server: glommio executors (one pinned shard per core), the io_uring network
//! rings, cross-shard routing, and the connection and server commands. The only crate that
//! knows glommio and io_uring; the state machines live in `wetask-shards`.

mod access;
mod acl;
mod clients;
mod clock;
mod cluster;
mod commands;
pub mod config;
mod consensus;
mod dashboard;
mod doorbell;
mod failpoint;
mod function_store;
mod globals;
mod latency;
mod loopback;
mod lua;
pub mod memory;
mod mesh;
mod metrics;
mod net;
mod output_limits;
mod pause;
pub mod persist;
mod pubsub_relay;
mod replication;
mod routing;
pub mod runtime;
mod service;
mod session;
mod shard;
mod slowlog;
mod spares;
mod stats;
mod watchdog;
