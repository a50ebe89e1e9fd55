//! Replication's commands: REPLICAOF (SLAVEOF), REPLCONF, ROLE, WAIT and INFO's
//! `# Replication` section. The links themselves are `crate::replication`.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::args::{is, parse_i64};

use crate::clients::ConnState;
use crate::globals::{unix_ms, Globals};
use crate::replication::{self, constant_time_eq, LinkState, Primary};
use crate::shard::ShardCtx;

/// WAIT's arguments: (replicas, time-out in ms).
pub fn parse_wait(args: &[Bytes]) -> Result<(i64, u64), Frame> {
    let Some(replicas) = parse_i64(&args[1]) else {
        return Err(Frame::static_error(
            "ERR value is not an integer or out of range",
        ));
    };
    match parse_i64(&args[2]) {
        Some(ms) if ms < 0 => Err(Frame::static_error("ERR timeout is negative")),
        Some(ms) => Ok((replicas, ms as u64)),
        None => Err(Frame::static_error(
            "ERR timeout is not an integer or out of range",
        )),
    }
}

/// Every shard's journal position now: what a replica must reach to have every write
/// acknowledged so far.
pub(super) fn positions_now(globals: &Globals) -> Vec<u64> {
    match globals.store.get() {
        Some(store) => store
            .shards
            .iter()
            .map(|s| s.position.load(Ordering::Acquire))
            .collect(),
        None => Vec::new(),
    }
}

/// WAIT numreplicas timeout: waits until `numreplicas` replicas have applied every write
/// journaled before it was called (every shard's, not only the client's own: a superset of
/// what Redis waits for), or the time-out (0: never) passes; answers how many have. On a
/// replica, Redis's error.
pub(super) async fn wait_replicas(
    ctx: &ShardCtx,
    conn: &std::cell::RefCell<ConnState>,
    args: &[Bytes],
) -> Frame {
    let (replicas, timeout) = match parse_wait(args) {
        Ok(parsed) => parsed,
        Err(err) => return err,
    };
    let globals = ctx.globals.clone();
    if globals.consensus.is_some() {
        let wanted = replicas.max(0) as usize;
        return match wait_in_group(ctx, conn, timeout, move |_, n| n >= wanted).await {
            Some((_, reached)) => Frame::Integer(reached as i64),
            None => Frame::static_error(WAIT_ON_A_REPLICA),
        };
    }
    if globals.replication.is_replica() {
        return Frame::static_error(WAIT_ON_A_REPLICA);
    }
    // Every shard is asked first: what it journaled for this client before (a cross-shard
    // operation's part and its end, which the lock's release logs) is then in its
    // position.
    ctx.sync_every_shard().await;
    let targets = positions_now(&globals);
    if replicas <= 0 {
        return Frame::Integer(globals.replication.replicas_at(&targets) as i64);
    }
    let wanted = replicas as usize;
    let count = wait_until(ctx, conn, timeout, move || {
        let reached = globals.replication.replicas_at(&targets);
        (reached, reached >= wanted)
    })
    .await;
    Frame::Integer(count as i64)
}

/// WAIT's and WAITAOF's wait: polls `poll` (off the shard thread, `ShardCore::wait_on`)
/// until it says enough, or `timeout_ms` (0: never) passes, the server shuts down, or the
/// client leaves (a `WAIT 1 0` with no replica would poll for ever); answers its last value.
pub(super) async fn wait_until<T: Send + 'static>(
    ctx: &ShardCtx,
    conn: &std::cell::RefCell<ConnState>,
    timeout_ms: u64,
    poll: impl Fn() -> (T, bool) + Send + Clone + 'static,
) -> T {
    let (now, enough) = poll();
    if enough {
        return now;
    }
    let deadline = (timeout_ms > 0).then(|| unix_ms().saturating_add(timeout_ms));
    let globals = ctx.globals.clone();
    let closed = conn.borrow_mut().closed_flag();
    ctx.wait_on(move || {
        let (now, enough) = poll();
        let late = deadline.is_some_and(|d| unix_ms() >= d);
        let stop = late || globals.shutting_down() || closed.load(Ordering::Acquire);
        (enough || stop).then_some(now)
    })
    .await
}

/// Redis's refusal of WAIT on a replica (and, in consensus mode, on a group's follower).
const WAIT_ON_A_REPLICA: &str = "ERR WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if a replica is configured to be writable (which is not the default) writes to replicas are just local and are not propagated.";

/// In consensus mode, on the leader of the connection's shard's group (`None` elsewhere):
/// waits until `enough(local, replicas)` holds, or `timeout_ms` (0: never) passes, for
/// every entry committed when it was called (each reply waited for its entry's commit, so
/// that covers the client's writes): `local`, this node's log holds them on disk, and
/// `replicas`, how many other members' logs do (raft-rs's followers acknowledge an append
/// once it is on their disk). A quorum has each committed entry already, so one other
/// member in a group of 3 holds it at once. Answers `(local, replicas)` at the end.
pub(super) async fn wait_in_group(
    ctx: &ShardCtx,
    conn: &std::cell::RefCell<ConnState>,
    timeout_ms: u64,
    enough: impl Fn(bool, usize) -> bool + Clone + Send + 'static,
) -> Option<(bool, usize)> {
    let consensus = ctx.globals.consensus.clone()?;
    let shard = ctx.id;
    if !consensus.serving(shard) {
        return None;
    }
    let target = consensus.groups[shard].commit.load(Ordering::Acquire);
    let reached = wait_until(ctx, conn, timeout_ms, move || {
        let local = consensus.persisted_at(shard, target);
        let replicas = consensus.members_at(shard, target);
        // A leader that stops serving ends the wait with what it counted.
        let over = enough(local, replicas) || !consensus.serving(shard);
        ((local, replicas), over)
    })
    .await;
    Some(reached)
}

/// REPLICAOF host port | REPLICAOF NO ONE (and SLAVEOF, its old name).
pub(super) fn replicaof(ctx: &ShardCtx, args: &[Bytes]) -> Frame {
    let globals = &ctx.globals;
    if globals.cluster.is_some() {
        return Frame::static_error("ERR REPLICAOF not allowed in cluster mode.");
    }
    if is(&args[1], "no") && is(&args[2], "one") {
        if !globals.replication.is_replica() && globals.answers_loading() {
            keep_partial(globals);
        }
        promote(globals);
        return Frame::ok();
    }
    let port = match parse_i64(&args[2]) {
        Some(p) if (0..=65535).contains(&p) => p as u16,
        _ => return Frame::static_error("ERR Invalid master port"),
    };
    let host = String::from_utf8_lossy(&args[1]).into_owned();
    let same = globals
        .replication
        .primary
        .lock()
        .expect("primary")
        .as_ref()
        .is_some_and(|p| p.host == host && p.port == port);
    if same {
        return Frame::simple("OK Already connected to specified master");
    }
    follow(globals, host, port);
    Frame::ok()
}

/// Starts following `host:port` (from REPLICAOF): from scratch, whatever the last clean
/// exit saved.
pub fn follow(globals: &std::sync::Arc<Globals>, host: String, port: u16) {
    *globals.replication.redis_saved.lock().expect("redis saved") = None;
    follow_from(globals, host, port, None);
}

/// Starts following `host:port`; at start (`replicaof`), `resume` is where the last clean
/// exit left each shard of the primary it followed (`replication::resume`).
pub fn follow_from(
    globals: &std::sync::Arc<Globals>,
    host: String,
    port: u16,
    resume: Option<(String, Vec<u64>)>,
) {
    let replication = &globals.replication;
    let epoch = replication.link_epoch.fetch_add(1, Ordering::AcqRel) + 1;
    replication.links.close(None);
    for inbox in &replication.inboxes {
        inbox.clear();
        inbox.synced.store(false, Ordering::Release);
    }
    if let Some((run, positions)) = resume {
        tracing::info!(primary_run = %run, "continuing from where the last clean exit left the stream");
        replication::resume::restore(replication, &run, &positions);
    }
    *replication.primary.lock().expect("primary") = Some(Primary {
        host: host.clone(),
        port,
        state: LinkState::Connecting,
        since_ms: unix_ms(),
    });
    replication.gate.link_up.store(false, Ordering::Release);
    if !replication.is_replica.swap(true, Ordering::AcqRel) {
        // The primary's client ids come with its records: ours start far past them.
        globals.skip_client_ids();
        replication.demotions.fetch_add(1, Ordering::AcqRel);
        globals
            .doorbells
            .iter()
            .for_each(crate::doorbell::Doorbell::ring);
        tracing::info!(primary = %format!("{host}:{port}"), "becoming a replica");
    }
    // This node's own replicas (a chain) reconnect and continue from its journal, which
    // goes on through the new primary's full sync (its reset and snapshot are records).
    replication.sender_links.close(None);
    replication.peers.lock().expect("peers").clear();
    let inert = &super::config_inert::INERT;
    let password = inert.get("masterauth").filter(|p| !p.is_empty());
    let user = inert.get("masteruser").filter(|u| !u.is_empty());
    let stopping = globals.clone();
    let env = replication::link::Env {
        replication: globals.replication.clone(),
        doorbells: globals.doorbells.clone(),
        relay: globals.relay.clone(),
        shard_count: globals.shard_count,
        listening_port: globals.port.load(Ordering::Relaxed),
        auth: password.map_or(Vec::new(), |p| user.into_iter().chain([p]).collect()),
        stopping: Box::new(move || stopping.shutting_down()),
        local_host: match globals.config.bind.as_str() {
            "0.0.0.0" | "" => "127.0.0.1".into(),
            "::" => "::1".into(),
            bind => bind.to_string(),
        },
        local_password: globals.requirepass.lock().expect("requirepass").clone(),
        store: globals.store.get().cloned(),
    };
    replication.follows_redis.store(false, Ordering::Release);
    replication::receiver::start(env, epoch, host, port);
    globals.ring_every_shard();
}

/// REPLICAOF NO ONE on a node that started from a journal ending inside a full sync (and
/// answers LOADING for it): each shard drops its mark, journaled, and serves the part it
/// holds (`ShardCore::keep_partial_sync`, within a loop turn; LOADING until the last has).
fn keep_partial(globals: &Globals) {
    tracing::warn!("REPLICAOF NO ONE: keeping the part of a full sync this node holds");
    globals
        .replication
        .keep_partial
        .store(true, Ordering::Release);
    globals.ring_every_shard();
}

/// REPLICAOF NO ONE: stops following, and serves writes with what it has (the leases,
/// retries and deadlines of the primary's tasks carry on from their times).
fn promote(globals: &Globals) {
    let replication = &globals.replication;
    if !replication.is_replica.swap(false, Ordering::AcqRel) {
        return;
    }
    // Promotion needs a whole dataset (LOADING refused it otherwise): nothing started
    // partial any more.
    replication.started_partial.store(false, Ordering::Release);
    replication.link_epoch.fetch_add(1, Ordering::AcqRel);
    replication.links.close(None);
    *replication.primary.lock().expect("primary") = None;
    replication.gate.link_up.store(false, Ordering::Release);
    *replication.redis_saved.lock().expect("redis saved") = None;
    // A new history: replicas of the old primary cannot continue from this one's files.
    *replication.run_id.lock().expect("run id") = replication::random_hex(40);
    for inbox in &replication.inboxes {
        inbox.clear();
        inbox.synced.store(false, Ordering::Release);
    }
    globals.skip_client_ids();
    globals.ring_every_shard();
    tracing::info!("promoted: no longer a replica");
}

/// REPLCONF: `WETASK` is a WeTask replica's handshake (run id, shard count, stream port,
/// token); Redis's options (`listening-port`, `capa`, `ack` …) are accepted.
pub(super) fn replconf(ctx: &ShardCtx, conn: &mut ConnState, args: &[Bytes]) -> Frame {
    let replication = &ctx.globals.replication;
    // This node's own connection that applies a Redis primary's stream
    // (`replication::from_redis`): its writes pass a read-only replica.
    if args.len() == 3 && is(&args[1], "wetask-apply") {
        if !constant_time_eq(&args[2], replication.token.as_bytes()) {
            return Frame::static_error("ERR bad replication token");
        }
        conn.replication_applier = true;
        return Frame::ok();
    }
    if (args.len() == 2 || args.len() == 3) && is(&args[1], "wetask") {
        let port = replication.listen_port.load(Ordering::Acquire);
        if port == 0 {
            return Frame::static_error(
                "ERR this node does not replicate: a primary needs appendonly yes (its journal is what replicas follow)",
            );
        }
        return Frame::Array(vec![
            Frame::Bulk(Bytes::from(replication.run_id())),
            Frame::Integer(ctx.shard_count as i64),
            Frame::Integer(i64::from(port)),
            Frame::Bulk(Bytes::from(replication.token.clone())),
        ]);
    }
    if args.len().is_multiple_of(2) {
        return Frame::static_error("ERR syntax error");
    }
    for pair in args[1..].chunks(2) {
        let known = [
            "listening-port",
            "ip-address",
            "capa",
            "ack",
            "getack",
            "rdb-only",
        ]
        .iter()
        .any(|o| is(&pair[0], o));
        if !known {
            return Frame::error(format!(
                "ERR Unrecognized REPLCONF option: {}",
                String::from_utf8_lossy(&pair[0])
            ));
        }
    }
    Frame::ok()
}

fn bulk(text: impl Into<String>) -> Frame {
    Frame::Bulk(Bytes::from(text.into()))
}

/// The single offset ROLE and INFO show: the sum of the shards' positions.
fn offset(globals: &Globals) -> u64 {
    let replication = &globals.replication;
    if replication.is_replica() && replication.follows_redis.load(Ordering::Acquire) {
        replication.primary_offset.load(Ordering::Acquire)
    } else if replication.is_replica() {
        replication::offset_of(
            replication
                .inboxes
                .iter()
                .map(|i| i.applied.load(Ordering::Acquire)),
        )
    } else if replication.served.load(Ordering::Acquire) {
        replication::offset_of(positions_now(globals).into_iter())
    } else {
        // No replica yet: Redis without a backlog shows 0.
        0
    }
}

/// ROLE, as Redis answers it for a primary and for a replica.
pub(super) fn role(ctx: &ShardCtx) -> Frame {
    let globals = &ctx.globals;
    let replication = &globals.replication;
    let primary = replication.primary.lock().expect("primary").clone();
    match primary.filter(|_| replication.is_replica()) {
        Some(primary) => Frame::Array(vec![
            bulk("slave"),
            bulk(primary.host),
            Frame::Integer(i64::from(primary.port)),
            bulk(link_word(&primary.state)),
            Frame::Integer(offset(globals) as i64),
        ]),
        None => {
            let peers = replication.peers.lock().expect("peers").clone();
            let replicas = peers
                .iter()
                .map(|peer| {
                    let acked = replication::offset_of(
                        peer.acked.iter().map(|a| a.load(Ordering::Acquire)),
                    );
                    Frame::Array(vec![
                        bulk(peer.ip.clone()),
                        bulk(peer.listening_port.to_string()),
                        bulk(acked.to_string()),
                    ])
                })
                .collect();
            Frame::Array(vec![
                bulk("master"),
                Frame::Integer(offset(globals) as i64),
                Frame::Array(replicas),
            ])
        }
    }
}

/// ROLE's word for the link: Redis's `connect`, `connecting`, `sync`, `connected`.
fn link_word(state: &LinkState) -> &'static str {
    match state {
        LinkState::Connecting => "connecting",
        LinkState::Syncing => "sync",
        LinkState::Connected => "connected",
        LinkState::Down(_) => "connect",
    }
}

/// `# Replication`, as Redis writes it.
pub fn section(globals: &Globals, out: &mut String) {
    let replication = &globals.replication;
    // A replica shows its primary's history, as Redis does.
    let followed = replication.inboxes[0]
        .run
        .lock()
        .expect("inbox run")
        .clone();
    let run_id = match replication.is_replica() && !followed.is_empty() {
        true => followed,
        false => replication.run_id(),
    };
    let offset = offset(globals);
    let primary = replication.primary.lock().expect("primary").clone();
    out.push_str("# Replication\r\n");
    match primary.filter(|_| replication.is_replica()) {
        Some(primary) => {
            let up = primary.state == LinkState::Connected;
            let last_io = replication.last_io_ms.load(Ordering::Relaxed);
            let _ = write!(
                out,
                "role:slave\r\nmaster_host:{}\r\nmaster_port:{}\r\nmaster_link_status:{}\r\nmaster_last_io_seconds_ago:{}\r\nmaster_sync_in_progress:{}\r\nslave_read_repl_offset:{offset}\r\nslave_repl_offset:{offset}\r\n",
                primary.host,
                primary.port,
                if up { "up" } else { "down" },
                if last_io == 0 { -1 } else { (unix_ms().saturating_sub(last_io) / 1000) as i64 },
                u8::from(primary.state == LinkState::Syncing),
            );
            if let LinkState::Down(why) = &primary.state {
                let since = unix_ms().saturating_sub(primary.since_ms) / 1000;
                let _ = write!(
                    out,
                    "master_link_down_since_seconds:{since}\r\nmaster_link_down_reason:{why}\r\n"
                );
            }
            let _ = write!(
                out,
                "slave_priority:{}\r\nslave_read_only:{}\r\nreplica_announced:1\r\n",
                replication.gate.priority.load(Ordering::Relaxed),
                u8::from(replication.read_only.load(Ordering::Relaxed))
            );
        }
        None => out.push_str("role:master\r\n"),
    }
    let peers = replication.peers.lock().expect("peers").clone();
    let _ = write!(out, "connected_slaves:{}\r\n", peers.len());
    for (i, peer) in peers.iter().enumerate() {
        let acked = replication::offset_of(peer.acked.iter().map(|a| a.load(Ordering::Acquire)));
        let online = peer.online.load(Ordering::Acquire) >= globals.shard_count;
        let lag = unix_ms().saturating_sub(peer.last_ack_ms.load(Ordering::Acquire)) / 1000;
        let _ = write!(
            out,
            "slave{i}:ip={},port={},state={},offset={acked},lag={lag}\r\n",
            peer.ip,
            peer.listening_port,
            if online { "online" } else { "send_bulk" },
        );
    }
    let backlog = globals.store.get().map_or(0, |s| s.shards.len() as u64);
    let _ = write!(
        out,
        "master_failover_state:no-failover\r\nmaster_replid:{run_id}\r\nmaster_replid2:0000000000000000000000000000000000000000\r\nmaster_repl_offset:{offset}\r\nsecond_repl_offset:-1\r\nrepl_backlog_active:{}\r\nrepl_backlog_size:1048576\r\nrepl_backlog_first_byte_offset:0\r\nrepl_backlog_histlen:0\r\nrepl_port:{}\r\n",
        u8::from(backlog > 0 && replication.served.load(Ordering::Acquire)),
        replication.listen_port.load(Ordering::Acquire),
    );
}
