//! TASK.CRON across shards. A schedule lives on its queue's shard (so a tick's task is made
//! where the schedule moves on, in one journaled step): SET first removes the name from every
//! other shard (a schedule moved to a queue elsewhere is not left behind), then sets it on
//! the queue's shard; DEL and LIST ask every shard. In consensus mode SET, DEL and LIST
//! cover the connection's shard only (each shard is its own Raft group). The per-shard side is
//! `wetask_shards::families::tasks::cron`.

use std::rc::Rc;

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::args::is;
use wetask_shards::table::{CommandSpec, Merge};

use crate::routing::{self, Target};
use crate::shard::ShardCtx;

pub async fn cron(
    ctx: &Rc<ShardCtx>,
    at: Target,
    spec: &'static CommandSpec,
    args: &[Bytes],
) -> Frame {
    let sub = &args[1];
    if ctx.globals.consensus.is_some() {
        // Consensus mode: a schedule belongs to its queue's group, and SET came to its
        // shard (`session::consensus_route`); a write to another group's shard would skip
        // that group's log. So SET does not look for the name on other shards, and DEL and
        // LIST cover this shard's group, as a cluster node's cover its own slots.
        return routing::local(ctx, at, spec, args);
    }
    if is(sub, "set") && args.len() >= 6 {
        let home = ctx.owner_of(&args[4]);
        let del = vec![
            Bytes::from_static(b"task.cron"),
            Bytes::from_static(b"del"),
            args[2].clone(),
        ];
        let others: Vec<_> = (0..ctx.shard_count)
            .filter(|&s| s != home && s != ctx.id)
            .map(|s| routing::send_one(ctx, s, at, spec, del.clone()))
            .collect();
        if home != ctx.id {
            routing::local(ctx, at, spec, &del);
        }
        for removal in others {
            removal.await;
        }
        if home == ctx.id {
            routing::local(ctx, at, spec, args)
        } else {
            routing::single_reply(routing::send_one(ctx, home, at, spec, args.to_vec()).await)
        }
    } else if (is(sub, "del") || is(sub, "list")) && ctx.shard_count > 1 {
        let merge = if is(sub, "del") {
            Merge::Sum
        } else {
            Merge::Concat
        };
        routing::all_shards(ctx, at, spec, args, merge).await
    } else {
        // One shard, or an error the shard's handler words.
        routing::local(ctx, at, spec, args)
    }
}
