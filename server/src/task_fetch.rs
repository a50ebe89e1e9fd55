//! TASK.FETCH across shards. Each queue lives on the shard of its name's slot, and each task
//! id on its queue's shard, so a FETCH may need several shards: its ACKs go first, each to its
//! id's shard (the first refusal ends the command, before anything is leased); then the queues
//! are tried in the order named, a run of consecutive queues on one shard in one request, until
//! COUNT tasks are leased. Strict queue order holds because a later shard is asked only once the
//! earlier ones had too few. Every shard that leased to the client is remembered on the
//! connection, so its leases are released there when the connection closes.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::tasks::commands::{leased_frame, parse_fetch};
use wetask_shards::{lookup, shard_of};

use crate::clients::ConnState;
use crate::context::ShardCtx;
use crate::dispatch::{send_one, single_reply, Target};
use crate::mesh::{Request, Response};

fn owner(ctx: &ShardCtx, name: &[u8]) -> usize {
    if ctx.shard_count == 1 {
        ctx.id
    } else {
        shard_of(name, ctx.shard_count)
    }
}

/// True when a FETCH names a queue or acknowledges an id on another shard.
pub fn needs_remote(ctx: &ShardCtx, args: &[Bytes]) -> bool {
    match parse_fetch(args) {
        Ok(fetch) => fetch
            .queues
            .iter()
            .chain(&fetch.acks)
            .any(|name| owner(ctx, name) != ctx.id),
        // A malformed FETCH is answered here with its error.
        Err(_) => false,
    }
}

pub async fn run(ctx: &Rc<ShardCtx>, conn: &Rc<RefCell<ConnState>>, args: &[Bytes]) -> Frame {
    let fetch = match parse_fetch(args) {
        Ok(fetch) => fetch,
        Err(err) => return err,
    };
    let at = {
        let state = conn.borrow();
        Target {
            db: state.db,
            client: state.id,
        }
    };
    let ack = lookup(b"task.ack").expect("task.ack is in the table");
    for id in &fetch.acks {
        let args = vec![Bytes::from_static(b"task.ack"), id.clone()];
        let frame = match owner(ctx, id) {
            shard if shard == ctx.id => {
                ctx.shard.borrow_mut().execute(at.db, at.client, ack, &args)
            }
            shard => single_reply(send_one(ctx, shard, at, ack, args).await),
        };
        ctx.stats.record(ack, frame.is_error());
        if frame.is_error() {
            return frame;
        }
    }
    let mut leased = Vec::new();
    let mut i = 0;
    while i < fetch.queues.len() && leased.len() < fetch.count {
        let shard = owner(ctx, &fetch.queues[i]);
        let mut end = i + 1;
        while end < fetch.queues.len() && owner(ctx, &fetch.queues[end]) == shard {
            end += 1;
        }
        let queues = fetch.queues[i..end].to_vec();
        let count = fetch.count - leased.len();
        if shard < 64 {
            conn.borrow_mut().task_shards |= 1 << shard;
        }
        if shard == ctx.id {
            let mut local = ctx.shard.borrow_mut();
            let now = local.now_ms();
            let got = local
                .tasks
                .fetch(&queues, count, fetch.lease_ms, at.client, now);
            leased.extend(got.into_iter().map(leased_frame));
        } else {
            let request = Request::TaskFetch {
                client: at.client,
                queues,
                count,
                lease_ms: fetch.lease_ms,
            };
            match ctx.request(shard, request).await {
                Response::Frames(frames) => leased.extend(frames),
                _ => return Frame::static_error("ERR internal error: unexpected shard response"),
            }
        }
        i = end;
    }
    Frame::Array(leased)
}
