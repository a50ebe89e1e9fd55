//! Worker identities over the wire: TASK.WORKER binds a connection to a worker, so its leases
//! belong to the worker (any of the worker's connections may ACK them, and they outlive a
//! dropped connection by GRACE); TASK.WORKERS lists the workers of every shard with their
//! lease counts; TASK.QUIET stops a worker's fetches. The book of each worker is kept on its
//! home shard (`shard::tasks`, `wetask_shards::tasks::workers`); this module asks it.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::families::tasks::commands::WorkerArgs;

use crate::clients::{ConnState, WorkerBinding};
use crate::mesh::{Request, Response, TaskRequest, WorkerRequest};
use crate::shard::ShardCtx;

/// Asks `shard` a worker request and waits for the answer.
async fn ask(ctx: &ShardCtx, shard: usize, request: WorkerRequest) -> Response {
    if shard == ctx.id {
        ctx.task_waits.worker_request(ctx, request)
    } else {
        ctx.request(shard, Request::Tasks(TaskRequest::Worker(request)))
            .await
    }
}

/// Asks every shard at once; the answers in shard order.
async fn ask_all(ctx: &ShardCtx, request: &dyn Fn() -> WorkerRequest) -> Vec<Response> {
    let pending: Vec<_> = (0..ctx.shard_count)
        .map(|shard| {
            (shard != ctx.id)
                .then(|| ctx.request(shard, Request::Tasks(TaskRequest::Worker(request()))))
        })
        .collect();
    let mut answers = Vec::with_capacity(pending.len());
    for (shard, future) in pending.into_iter().enumerate() {
        answers.push(match future {
            Some(future) => future.await,
            None => ask(ctx, shard, request()).await,
        });
    }
    answers
}

/// A worker's home shard: its name's slot's shard as the slots were spread at start, not
/// as the slot map has them now. The map moves (consensus mode's `RAFT MOVESLOTS`, cluster
/// mode's SETSLOT between a process's own shards), and a worker's registry must stay where
/// its connections found it: a connection bound after a move found another home, whose
/// GRACE ran out when the old connection closed and released the leases the new one held.
fn home_of(ctx: &ShardCtx, name: &[u8]) -> usize {
    wetask_shards::slot::range_shard(wetask_shards::key_slot(name), ctx.shard_count)
}

/// TASK.WORKER id [GRACE ms] [HEARTBEAT ms]: binds this connection to worker `id`. Again
/// with the same id it renews the options (and counts as a heartbeat); another id is refused.
pub async fn worker(
    ctx: &Rc<ShardCtx>,
    conn: &Rc<RefCell<ConnState>>,
    worker: &WorkerArgs,
) -> Frame {
    let (name, options) = (&worker.name, worker.options);
    let conn_id = {
        let state = conn.borrow();
        if let Some(bound) = state.worker.as_ref().filter(|w| w.name != *name) {
            return Frame::error(format!(
                "ERR this connection is already worker '{}'",
                String::from_utf8_lossy(&bound.name)
            ));
        }
        state.id
    };
    let home = home_of(ctx, name);
    let name = name.clone();
    let request = WorkerRequest::Bind {
        name: name.clone(),
        conn: conn_id,
        options,
    };
    match ask(ctx, home, request).await {
        Response::Version(owner) => {
            let now = ctx.shard.borrow().now_ms();
            conn.borrow_mut().worker = Some(WorkerBinding {
                name,
                owner,
                home,
                heartbeat_ms: options.heartbeat_ms,
                last_beat_ms: now,
            });
            Frame::ok()
        }
        Response::Refused(error) => error,
        _ => Frame::static_error("ERR internal error: unexpected shard response"),
    }
}

/// TASK.QUIET id: the worker's fetches lease nothing from now on, on every shard (a blocked
/// fetch waits out its BLOCK empty-handed); what it holds it may still ACK.
pub async fn quiet(ctx: &Rc<ShardCtx>, args: &[Bytes]) -> Frame {
    let name = Bytes::copy_from_slice(&args[1]);
    let owner = match ask(ctx, home_of(ctx, &name), WorkerRequest::Quiet { name }).await {
        Response::Version(owner) => owner,
        Response::Refused(error) => return error,
        _ => return Frame::static_error("ERR internal error: unexpected shard response"),
    };
    ask_all(ctx, &|| WorkerRequest::SetQuiet { owner }).await;
    Frame::ok()
}

/// TASK.WORKERS: every worker, by name within each home shard, as maps: name, status
/// (present, gone: waiting out GRACE, released), connections, leases, quiet, grace,
/// heartbeat, registered, last_seen (unix ms) and owner (what TASK.GET's `leased_by` says).
pub async fn workers(ctx: &Rc<ShardCtx>) -> Frame {
    let mut rows: Vec<(u64, Vec<(Frame, Frame)>)> = Vec::new();
    for response in ask_all(ctx, &|| WorkerRequest::List).await {
        let Response::Frames(pairs) = response else {
            continue;
        };
        for pair in pairs {
            if let Frame::Array(mut parts) = pair {
                if let (Some(Frame::Map(row)), Some(Frame::Integer(owner))) =
                    (parts.pop(), parts.pop())
                {
                    rows.push((owner as u64, row));
                }
            }
        }
    }
    let owners: Vec<u64> = rows.iter().map(|(owner, _)| *owner).collect();
    let mut leases = vec![0i64; owners.len()];
    for response in ask_all(ctx, &|| WorkerRequest::LeaseCounts {
        owners: owners.clone(),
    })
    .await
    {
        if let Response::Frames(counts) = response {
            for (total, count) in leases.iter_mut().zip(counts) {
                if let Frame::Integer(n) = count {
                    *total += n;
                }
            }
        }
    }
    let text = |s: &str| Frame::Bulk(Bytes::copy_from_slice(s.as_bytes()));
    Frame::Array(
        rows.into_iter()
            .zip(leases)
            .map(|((owner, mut row), leases)| {
                // After `connections`.
                row.insert(3, (text("leases"), Frame::Integer(leases)));
                // What TASK.GET's `leased_by` calls this worker's leases.
                row.push((
                    text("owner"),
                    text(&wetask_shards::tasks::workers::owner_label(owner)),
                ));
                Frame::Map(row)
            })
            .collect(),
    )
}

/// Tells the worker's home that this connection is alive, at most four times per HEARTBEAT
/// (any command counts). Called once per batch of commands.
pub fn beat_if_due(ctx: &ShardCtx, conn: &RefCell<ConnState>) {
    let beat = {
        let mut state = conn.borrow_mut();
        let Some(worker) = state.worker.as_mut() else {
            return;
        };
        let Some(every) = worker.heartbeat_ms else {
            return;
        };
        let now = ctx.shard.borrow().now_ms();
        if now.saturating_sub(worker.last_beat_ms) < (every / 4).max(1) {
            return;
        }
        worker.last_beat_ms = now;
        (worker.home, worker.name.clone())
    };
    let (home, name) = beat;
    ctx.task_waits
        .send_worker(ctx, home, WorkerRequest::Beat { name });
}

/// RESET: the connection stops being its worker's (as if it had closed).
pub fn leave(ctx: &ShardCtx, state: &mut ConnState) {
    if let Some(worker) = state.worker.take() {
        let request = WorkerRequest::Unbind {
            name: worker.name,
            conn: state.id,
        };
        ctx.task_waits.send_worker(ctx, worker.home, request);
    }
}
