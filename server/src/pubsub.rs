//! Pub/sub: SUBSCRIBE, PSUBSCRIBE, UNSUBSCRIBE, PUNSUBSCRIBE, PUBLISH and PUBSUB, and the
//! shard channels of Redis 7 (SSUBSCRIBE, SUNSUBSCRIBE, SPUBLISH: a namespace of their own),
//! across shards, in RESP2 and RESP3.
//!
//! A subscription lives on the shard of the subscribing connection. PUBLISH delivers to its
//! own shard's subscribers and sends the message to every other shard that has any
//! subscription at all (a per-shard count in `Globals`, so a server with no subscribers pays
//! nothing); the reply sums the receivers. A delivered message is encoded into the
//! subscriber's pending pushes and its transport is woken to send them (`ShardCtx::
//! push_ready`). A subscriber whose pending output passes `client-output-buffer-limit
//! pubsub` (32 MiB hard, 8 MiB for 60 s soft, as Redis; `output_limits`) is disconnected,
//! so a slow reader stalls nobody else.
//!
//! In RESP2 a subscribed connection may only run the subscription commands, PING, QUIT and
//! RESET; RESP3 allows everything, with messages as push frames.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use wetask_protocol::{encode_output, Frame, Protocol};
use wetask_shards::glob::glob_match;

use crate::clients::{ConnState, Kind};
use crate::context::ShardCtx;
use crate::mesh::{PubsubQuery, PubsubReport, Request, Response};

/// Most channels plus patterns one connection may subscribe to.
pub const SUBSCRIPTIONS_PER_CLIENT_MAX: usize = 100_000;

/// This shard's subscriptions: channel (or pattern) -> subscribed client ids.
#[derive(Default)]
pub struct Registry {
    channels: HashMap<Bytes, Vec<u64>>,
    patterns: HashMap<Bytes, Vec<u64>>,
    /// Shard channels (SSUBSCRIBE / SPUBLISH): a namespace of their own, as in Redis 7.
    shard_channels: HashMap<Bytes, Vec<u64>>,
}

impl Registry {
    fn map(&mut self, kind: Kind) -> &mut HashMap<Bytes, Vec<u64>> {
        match kind {
            Kind::Channel => &mut self.channels,
            Kind::Pattern => &mut self.patterns,
            Kind::Shard => &mut self.shard_channels,
        }
    }

    fn add(&mut self, kind: Kind, name: &Bytes, client: u64) {
        self.map(kind).entry(name.clone()).or_default().push(client);
    }

    fn remove(&mut self, kind: Kind, name: &Bytes, client: u64) {
        let map = self.map(kind);
        if let Some(clients) = map.get_mut(name) {
            clients.retain(|&c| c != client);
            if clients.is_empty() {
                map.remove(name);
            }
        }
    }

    pub fn channel_names(&self) -> Vec<Bytes> {
        self.channels.keys().cloned().collect()
    }

    pub fn pattern_names(&self) -> Vec<Bytes> {
        self.patterns.keys().cloned().collect()
    }

    fn size(&self) -> usize {
        self.channels.len() + self.patterns.len() + self.shard_channels.len()
    }
}

/// True when a RESP2 connection in subscribed mode may run `spec` (flag `WHILE_SUBSCRIBED`).
pub fn allowed_while_subscribed(spec: &wetask_shards::CommandSpec) -> bool {
    spec.has(wetask_shards::table::flag::WHILE_SUBSCRIBED)
}

fn push(kind: &'static str, name: Frame, count: usize) -> Frame {
    Frame::Push(vec![
        Frame::Bulk(Bytes::from_static(kind.as_bytes())),
        name,
        Frame::Integer(count as i64),
    ])
}

impl ShardCtx {
    fn sync_subscription_count(&self) {
        let size = self.pubsub.borrow().size();
        self.globals.subscriptions[self.id].store(size, Ordering::Relaxed);
    }

    /// Delivers a message to this shard's subscribers of `channel` (and of matching
    /// patterns); returns how many received it.
    pub fn deliver(&self, channel: &Bytes, message: &Bytes, sharded: bool) -> usize {
        let mut targets: Vec<(u64, Frame)> = Vec::new();
        if sharded {
            if let Some(clients) = self.pubsub.borrow().shard_channels.get(channel) {
                let frame = Frame::Push(vec![
                    Frame::Bulk(Bytes::from_static(b"smessage")),
                    Frame::Bulk(channel.clone()),
                    Frame::Bulk(message.clone()),
                ]);
                targets.extend(clients.iter().map(|&c| (c, frame.clone())));
            }
        } else {
            let registry = self.pubsub.borrow();
            if let Some(clients) = registry.channels.get(channel) {
                let frame = Frame::Push(vec![
                    Frame::Bulk(Bytes::from_static(b"message")),
                    Frame::Bulk(channel.clone()),
                    Frame::Bulk(message.clone()),
                ]);
                targets.extend(clients.iter().map(|&c| (c, frame.clone())));
            }
            for (pattern, clients) in &registry.patterns {
                if glob_match(pattern, channel) {
                    let frame = Frame::Push(vec![
                        Frame::Bulk(Bytes::from_static(b"pmessage")),
                        Frame::Bulk(pattern.clone()),
                        Frame::Bulk(channel.clone()),
                        Frame::Bulk(message.clone()),
                    ]);
                    targets.extend(clients.iter().map(|&c| (c, frame.clone())));
                }
            }
        }
        let count = targets.len();
        for (client, frame) in targets {
            self.push_to(client, &frame);
        }
        count
    }

    /// Queues a push frame for a local client and wakes its transport.
    fn push_to(&self, client: u64, frame: &Frame) {
        let Some(conn) = self.clients.borrow().get(client) else {
            return;
        };
        // The client may be running a command right now (a PUBLISH to itself): then its
        // state is borrowed, and the push goes through the shard's queue instead.
        let Ok(mut state) = conn.try_borrow_mut() else {
            self.deferred_pushes
                .borrow_mut()
                .push((client, frame.clone()));
            self.wake_pushes(client);
            return;
        };
        let protocol = state.protocol;
        encode_output(&mut state.pushes, frame, protocol);
        let pending = state.pushes.len() + state.unsent;
        let now = crate::globals::unix_ms();
        if !state.close_requested
            && self
                .globals
                .output_limits
                .exceeded(&mut state, pending, now)
        {
            tracing::warn!(client, "pubsub output buffer limit reached; closing");
            state.pushes.clear();
            crate::clients::shut_down(&mut state);
        }
        if let Some(waker) = state.push_waker.take() {
            waker.wake();
        }
        drop(state);
        self.wake_pushes(client);
    }

    /// Tells the io_uring driver (the only transport with a hook) which client to send to;
    /// the glommio fallback's connections wait on their own waker instead.
    fn wake_pushes(&self, client: u64) {
        if let Some(hook) = self.push_hook.borrow().as_ref() {
            self.push_ready.borrow_mut().push(client);
            hook();
        }
    }

    /// Moves pushes that met a busy connection into its pending output (called by the
    /// transports before they send).
    pub fn settle_deferred_pushes(&self) {
        if self.deferred_pushes.borrow().is_empty() {
            return;
        }
        let deferred = std::mem::take(&mut *self.deferred_pushes.borrow_mut());
        for (client, frame) in deferred {
            self.push_to(client, &frame);
        }
    }

    /// Forgets a closing connection's subscriptions.
    pub fn drop_subscriptions(&self, state: &ConnState) {
        if state.subscriptions.count() == 0 {
            return;
        }
        let mut registry = self.pubsub.borrow_mut();
        for channel in &state.subscriptions.channels {
            registry.remove(Kind::Channel, channel, state.id);
        }
        for pattern in &state.subscriptions.patterns {
            registry.remove(Kind::Pattern, pattern, state.id);
        }
        for channel in &state.subscriptions.shard_channels {
            registry.remove(Kind::Shard, channel, state.id);
        }
        drop(registry);
        self.sync_subscription_count();
    }
}

/// SUBSCRIBE / PSUBSCRIBE: one confirmation per name.
pub fn subscribe(ctx: &ShardCtx, conn: &mut ConnState, args: &[Bytes], kind: Kind) -> Frame {
    let mut replies = Vec::with_capacity(args.len() - 1);
    for name in &args[1..] {
        if conn.subscriptions.count() >= SUBSCRIPTIONS_PER_CLIENT_MAX {
            replies.push(Frame::error(format!(
                "ERR too many subscriptions on one connection ({SUBSCRIPTIONS_PER_CLIENT_MAX})"
            )));
            break;
        }
        let name = Bytes::copy_from_slice(name);
        if conn.subscriptions.set(kind).insert(name.clone()) {
            ctx.pubsub.borrow_mut().add(kind, &name, conn.id);
        }
        let count = conn.subscriptions.reported(kind);
        replies.push(push(kind.subscribe_reply(), Frame::Bulk(name), count));
    }
    ctx.sync_subscription_count();
    Frame::Several(replies)
}

/// UNSUBSCRIBE / PUNSUBSCRIBE: the names given, or every one when none is.
pub fn unsubscribe(ctx: &ShardCtx, conn: &mut ConnState, args: &[Bytes], kind: Kind) -> Frame {
    let names: Vec<Bytes> = if args.len() > 1 {
        args[1..]
            .iter()
            .map(|n| Bytes::copy_from_slice(n))
            .collect()
    } else {
        conn.subscriptions.set(kind).iter().cloned().collect()
    };
    let reply = kind.unsubscribe_reply();
    if names.is_empty() {
        let count = conn.subscriptions.reported(kind);
        return Frame::Several(vec![push(reply, Frame::Null, count)]);
    }
    let mut replies = Vec::with_capacity(names.len());
    for name in names {
        if conn.subscriptions.set(kind).shift_remove(&name) {
            ctx.pubsub.borrow_mut().remove(kind, &name, conn.id);
        }
        let count = conn.subscriptions.reported(kind);
        replies.push(push(reply, Frame::Bulk(name), count));
    }
    ctx.sync_subscription_count();
    Frame::Several(replies)
}

/// True when PUBLISH must reach other shards (some other shard has subscriptions).
pub fn publish_needs_peers(ctx: &ShardCtx) -> bool {
    (0..ctx.shard_count)
        .any(|s| s != ctx.id && ctx.globals.subscriptions[s].load(Ordering::Relaxed) > 0)
}

/// PUBLISH, or SPUBLISH with `sharded` (to SSUBSCRIBE subscribers only).
pub async fn publish(ctx: &ShardCtx, args: &[Bytes], sharded: bool) -> Frame {
    let (channel, message) = (
        Bytes::copy_from_slice(&args[1]),
        Bytes::copy_from_slice(&args[2]),
    );
    let mut count = ctx.deliver(&channel, &message, sharded);
    let mut pending = Vec::new();
    for shard in 0..ctx.shard_count {
        if shard != ctx.id && ctx.globals.subscriptions[shard].load(Ordering::Relaxed) > 0 {
            pending.push(ctx.request(
                shard,
                Request::Publish {
                    channel: channel.clone(),
                    message: message.clone(),
                    sharded,
                },
            ));
        }
    }
    for reply in pending {
        if let Response::Count(n) = reply.await {
            count += n;
        }
    }
    Frame::Integer(count as i64)
}

/// What one shard knows for PUBSUB: its channels (matching a pattern), subscriber counts of
/// given channels, and its patterns.
pub fn report(ctx: &ShardCtx, query: &PubsubQuery) -> PubsubReport {
    let registry = ctx.pubsub.borrow();
    match query {
        PubsubQuery::Channels(pattern) => PubsubReport::Names(
            registry
                .channels
                .keys()
                .filter(|c| pattern.as_ref().is_none_or(|p| glob_match(p, c)))
                .cloned()
                .collect(),
        ),
        PubsubQuery::NumSub(channels) => PubsubReport::Counts(
            channels
                .iter()
                .map(|c| registry.channels.get(c).map_or(0, Vec::len))
                .collect(),
        ),
        PubsubQuery::Patterns => PubsubReport::Names(registry.patterns.keys().cloned().collect()),
        PubsubQuery::ShardChannels(pattern) => PubsubReport::Names(
            registry
                .shard_channels
                .keys()
                .filter(|c| pattern.as_ref().is_none_or(|p| glob_match(p, c)))
                .cloned()
                .collect(),
        ),
        PubsubQuery::ShardNumSub(channels) => PubsubReport::Counts(
            channels
                .iter()
                .map(|c| registry.shard_channels.get(c).map_or(0, Vec::len))
                .collect(),
        ),
    }
}

/// PUBSUB CHANNELS [pattern] | NUMSUB [channel …] | NUMPAT, gathered from every shard.
pub async fn pubsub(ctx: &Rc<ShardCtx>, args: &[Bytes]) -> Frame {
    use wetask_shards::args::is;
    let sub = &args[1];
    let query = if is(sub, "channels") && args.len() <= 3 {
        PubsubQuery::Channels(args.get(2).cloned())
    } else if is(sub, "numsub") {
        PubsubQuery::NumSub(args[2..].to_vec())
    } else if is(sub, "numpat") && args.len() == 2 {
        PubsubQuery::Patterns
    } else if is(sub, "shardchannels") && args.len() <= 3 {
        PubsubQuery::ShardChannels(args.get(2).cloned())
    } else if is(sub, "shardnumsub") {
        PubsubQuery::ShardNumSub(args[2..].to_vec())
    } else if is(sub, "help") {
        return Frame::Array(
            [
                "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "CHANNELS [<pattern>]",
                "NUMPAT",
                "NUMSUB [<channel> ...]",
                "SHARDCHANNELS [<pattern>]",
                "SHARDNUMSUB [<shardchannel> ...]",
            ]
            .iter()
            .map(|l| Frame::Simple(Bytes::from_static(l.as_bytes())))
            .collect(),
        );
    } else {
        return wetask_shards::errors::unknown_subcommand("pubsub", sub);
    };
    let mut reports = vec![report(ctx, &query)];
    let mut pending = Vec::new();
    for shard in (0..ctx.shard_count).filter(|&s| s != ctx.id) {
        pending.push(ctx.request(shard, Request::Pubsub(query.clone())));
    }
    for reply in pending {
        if let Response::Pubsub(report) = reply.await {
            reports.push(report);
        }
    }
    match query {
        PubsubQuery::Channels(_) | PubsubQuery::Patterns | PubsubQuery::ShardChannels(_) => {
            let mut names: Vec<Bytes> = reports
                .into_iter()
                .flat_map(|r| match r {
                    PubsubReport::Names(names) => names,
                    PubsubReport::Counts(_) => Vec::new(),
                })
                .collect();
            names.sort();
            names.dedup();
            if matches!(query, PubsubQuery::Patterns) {
                return Frame::Integer(names.len() as i64);
            }
            Frame::Array(names.into_iter().map(Frame::Bulk).collect())
        }
        PubsubQuery::NumSub(channels) | PubsubQuery::ShardNumSub(channels) => {
            let mut totals = vec![0usize; channels.len()];
            for report in reports {
                if let PubsubReport::Counts(counts) = report {
                    for (total, n) in totals.iter_mut().zip(counts) {
                        *total += n;
                    }
                }
            }
            Frame::Array(
                channels
                    .into_iter()
                    .zip(totals)
                    .flat_map(|(c, n)| [Frame::Bulk(c), Frame::Integer(n as i64)])
                    .collect(),
            )
        }
    }
}

/// PING in RESP2 subscribed mode: `["pong", message or ""]`.
pub fn subscribed_ping(args: &[Bytes]) -> Frame {
    Frame::Array(vec![
        Frame::Bulk(Bytes::from_static(b"pong")),
        Frame::Bulk(args.get(1).cloned().unwrap_or_default()),
    ])
}

/// Whether a connection is in RESP2 subscribed mode.
pub fn resp2_subscribed(conn: &ConnState) -> bool {
    conn.protocol == Protocol::Resp2 && conn.subscriptions.count() > 0
}

/// Waits until a connection has pushes to send (the glommio fallback's reader races it).
pub async fn pushes_ready(state: &Rc<RefCell<ConnState>>) {
    std::future::poll_fn(|cx| {
        let mut s = state.borrow_mut();
        if !s.pushes.is_empty() || s.close_requested {
            std::task::Poll::Ready(())
        } else {
            s.push_waker = Some(cx.waker().clone());
            std::task::Poll::Pending
        }
    })
    .await
}
