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
use std::rc::Rc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use wetask_protocol::{Frame, Protocol};

use crate::clients::{ConnState, Kind};
use crate::mesh::{PubSubRequest, PubsubQuery, PubsubReport, Request, Response};
use crate::shard::ShardCtx;

/// Most channels plus patterns one connection may subscribe to.
pub const SUBSCRIPTIONS_PER_CLIENT_MAX: usize = 100_000;

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
            ctx.pubsub.add(ctx, kind, &name, conn.id);
        }
        let count = conn.subscriptions.reported(kind);
        replies.push(push(kind.subscribe_reply(), Frame::Bulk(name), count));
    }
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
            ctx.pubsub.remove(ctx, kind, &name, conn.id);
        }
        let count = conn.subscriptions.reported(kind);
        replies.push(push(reply, Frame::Bulk(name), count));
    }
    Frame::Several(replies)
}

/// PUBLISH, or SPUBLISH with `sharded` (to SSUBSCRIBE subscribers only).
pub async fn publish(ctx: &ShardCtx, args: &[Bytes], sharded: bool) -> Frame {
    let (channel, message) = (
        Bytes::copy_from_slice(&args[1]),
        Bytes::copy_from_slice(&args[2]),
    );
    let mut count = ctx.pubsub.deliver(ctx, &channel, &message, sharded);
    if !sharded {
        // Every node's subscribers hear it, as over Redis Cluster's bus; the count is this
        // node's, as Redis Cluster's is.
        if let Some(consensus) = &ctx.globals.consensus {
            consensus.transport.publish(&channel, &message);
        }
        if let Some(cluster) = &ctx.globals.cluster {
            cluster.publishing.queue(&channel, &message);
        }
        // And the replicas' subscribers, as Redis's replication stream carries it.
        ctx.globals.replication.publishes.record(&channel, &message);
    }
    let mut pending = Vec::new();
    for shard in 0..ctx.shard_count {
        if shard != ctx.id && ctx.globals.subscriptions[shard].load(Ordering::Relaxed) > 0 {
            pending.push(ctx.request(
                shard,
                Request::PubSub(PubSubRequest::Publish {
                    channel: channel.clone(),
                    message: message.clone(),
                    sharded,
                }),
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
    let mut reports = vec![ctx.pubsub.report(&query)];
    let mut pending = Vec::new();
    for shard in (0..ctx.shard_count).filter(|&s| s != ctx.id) {
        pending.push(ctx.request(shard, Request::PubSub(PubSubRequest::Query(query.clone()))));
    }
    for reply in pending {
        if let Response::Pubsub(report) = reply.await {
            reports.push(report);
        }
    }
    merge_reports(query, reports)
}

/// One PUBSUB answer from every shard's report: names sorted and deduplicated (NUMPAT
/// counts them), or per-channel counts summed.
fn merge_reports(query: PubsubQuery, reports: Vec<PubsubReport>) -> Frame {
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
