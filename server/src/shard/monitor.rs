//! MONITOR: every command a client runs, as one line to every monitoring connection, in
//! Redis's format (`+<unix s>.<µs> [<db> <ip:port>] "arg" "arg" …`). The connection's home
//! shard writes the line (it knows the client's address and database) and sends it to the
//! shards that hold monitors (`Globals::monitors`, a count per shard). While nobody
//! monitors, a command pays one relaxed load.

use std::cell::RefCell;
use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::table::{flag, CommandSpec};

use super::core::ShardCore;
use super::ConnectionHooks;
use crate::clients::ConnState;
use crate::mesh::{PubSubRequest, Request};

/// This shard's monitoring connections.
#[derive(Default)]
pub struct Monitors {
    clients: RefCell<Vec<u64>>,
}

impl Monitors {
    /// MONITOR: `client` sees every command from now on.
    pub fn add(&self, core: &ShardCore, client: u64) {
        let mut clients = self.clients.borrow_mut();
        if !clients.contains(&client) {
            clients.push(client);
            core.globals.monitors[core.id].fetch_add(1, Relaxed);
            core.globals.monitoring.fetch_add(1, Relaxed);
        }
    }

    /// Delivers a line to this shard's monitors.
    pub fn deliver(&self, core: &ShardCore, line: &Bytes) {
        let frame = Frame::Simple(line.clone());
        let clients = self.clients.borrow().clone();
        for client in clients {
            core.push_to(client, &frame);
        }
    }
}

impl ConnectionHooks for Monitors {
    fn connection_closed(&self, core: &ShardCore, state: &ConnState) {
        let mut clients = self.clients.borrow_mut();
        if let Some(at) = clients.iter().position(|&c| c == state.id) {
            clients.swap_remove(at);
            core.globals.monitors[core.id].fetch_sub(1, Relaxed);
            core.globals.monitoring.fetch_sub(1, Relaxed);
        }
    }
}

/// Whether anyone monitors (the per-command test).
#[inline]
pub fn active(core: &ShardCore) -> bool {
    core.globals.monitoring.load(Relaxed) != 0
}

/// Feeds command `args` of `state` to every monitor. EXEC first feeds the commands it
/// runs, as Redis shows a transaction: MULTI, its commands, EXEC.
#[cold]
pub fn feed_command(
    core: &ShardCore,
    monitors: &Monitors,
    state: &ConnState,
    spec: &CommandSpec,
    args: &[Bytes],
) {
    if spec.name == "exec" {
        for queued in state.multi.iter().flatten() {
            if let Some(spec) = queued.spec() {
                feed(core, monitors, state, spec, &queued.args);
            }
        }
    }
    feed(core, monitors, state, spec, args);
}

/// Feeds one command to every monitor, as Redis does for the commands it runs: not
/// administrative ones (CONFIG, SHUTDOWN …), and AUTH's secrets redacted.
fn feed(
    core: &ShardCore,
    monitors: &Monitors,
    state: &ConnState,
    spec: &CommandSpec,
    args: &[Bytes],
) {
    if spec.has(flag::ADMIN) {
        return;
    }
    let line = Bytes::from(line(state, spec, args, crate::clock::unix_us()));
    for shard in 0..core.shard_count {
        if core.globals.monitors[shard].load(Relaxed) == 0 {
            continue;
        }
        if shard == core.id {
            monitors.deliver(core, &line);
        } else {
            let request = Request::PubSub(PubSubRequest::Monitor { line: line.clone() });
            drop(core.request(shard, request));
        }
    }
}

/// One MONITOR line (without the `+` and line end, which the push adds).
fn line(state: &ConnState, spec: &CommandSpec, args: &[Bytes], now_us: u64) -> String {
    let mut out = format!(
        "{}.{:06} [{} {}]",
        now_us / 1_000_000,
        now_us % 1_000_000,
        state.db,
        state.addr
    );
    let redacted_from = match spec.name {
        "auth" => 1,
        "hello" => args
            .iter()
            .position(|a| a.eq_ignore_ascii_case(b"auth"))
            .map_or(usize::MAX, |at| at + 1),
        _ => usize::MAX,
    };
    for (i, arg) in args.iter().enumerate() {
        out.push(' ');
        let shown: &[u8] = if i >= redacted_from && (spec.name == "auth" || i <= redacted_from + 1)
        {
            b"(redacted)"
        } else {
            arg
        };
        quote(&mut out, shown);
    }
    out
}

/// Redis's `sdscatrepr`: a quoted string with C escapes and `\xNN` for the rest.
fn quote(out: &mut String, bytes: &[u8]) {
    out.push('"');
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'"' => out.push_str("\\\""),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            7 => out.push_str("\\a"),
            8 => out.push_str("\\b"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_follows_sdscatrepr() {
        let mut out = String::new();
        quote(&mut out, b"a \"b\"\\\n\x01\xff");
        assert_eq!(out, r#""a \"b\"\\\n\x01\xff""#);
    }
}
