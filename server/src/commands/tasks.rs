//! TASK.FETCH across shards. Each queue lives on the shard of its name's slot, and each task
//! id on its queue's shard, so a FETCH may need several shards: its ACKs go first, in one
//! message per owning shard (a refusal ends the command, before anything is leased); then the queues
//! are tried in the order named, a run of consecutive queues on one shard in one request, until
//! COUNT tasks are leased. Strict queue order holds because a later shard is asked only once the
//! earlier ones had too few. Every shard that leased to the client is remembered on the
//! connection, so its leases are released there when the connection closes. Leases go to the
//! connection's task owner: the connection itself, or the worker it took (TASK.WORKER).

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::families::tasks::commands::{FetchArgs, WaitArgs};
use wetask_shards::families::tasks::reports::EventsArgs;
use wetask_shards::lookup;
use wetask_shards::request::{Owners, Request as Command};
use wetask_shards::table::CommandSpec;

use crate::clients::ConnState;
use crate::mesh::{KeyRequest, Request, Response, TaskRequest};
use crate::routing::park::{self, Parking};
use crate::routing::Target;
use crate::shard::{LocalSlot, LocalWait, Parked, Reply, ShardCtx, Want};

/// True when a FETCH names a queue or acknowledges an id on another shard, or may block:
/// then it runs in a task, which can wait.
pub fn needs_remote(ctx: &ShardCtx, command: &Command) -> bool {
    // A malformed FETCH is answered here with its error.
    let wetask_shards::request::Form::Fetch(fetch) = command.form() else {
        return false;
    };
    let fetch = fetch.view(&command.args);
    // A local blocking fetch that can lease now runs inline like any other; only one that
    // may have to wait needs a task (with a quiet worker about, any may). (Its ACKs run
    // first and cannot make a task ready for it... except its own, which then counts as
    // not ready: it simply takes the task path.)
    !all_here(ctx, command)
        || (fetch.block_ms.is_some() && !ctx.shard.borrow_mut().task_has_ready(fetch.queues))
}

/// True when every queue and ACK id of a FETCH lives on this shard.
fn all_here(ctx: &ShardCtx, command: &Command) -> bool {
    match command.owners() {
        Owners::One(shard) => ctx.shard_count == 1 || shard == ctx.id,
        Owners::None | Owners::Several => false,
    }
}

pub async fn run(
    ctx: &Rc<ShardCtx>,
    conn: &Rc<RefCell<ConnState>>,
    fetch: &FetchArgs<'_>,
) -> Frame {
    let (at, client) = {
        let state = conn.borrow();
        let at = Target {
            db: state.db,
            client: state.task_owner(),
        };
        (at, state.id)
    };
    // A worker's usual step, FETCH q … ACK ids with q and the ids on one other shard, goes
    // there as one message: the ACKs ride with the first queue group's fetch.
    let first_shard = fetch.queues.first().map(|q| ctx.owner_of(q));
    let ride_along = !fetch.acks.is_empty()
        && first_shard.is_some_and(|s| s != ctx.id)
        && fetch
            .acks
            .iter()
            .all(|id| Some(ctx.owner_of(id)) == first_shard);
    let mut acks = Vec::new();
    if ride_along {
        acks = fetch.acks.to_vec();
    } else if let Some(refusal) = ack_all(ctx, at, fetch.acks).await {
        return refusal;
    }
    let mut leased = Vec::new();
    // A queue at its in-flight limit: reported only if the whole FETCH leased nothing.
    let mut held_back = None;
    let mut i = 0;
    while i < fetch.queues.len() && leased.len() < fetch.count {
        let shard = ctx.owner_of(&fetch.queues[i]);
        let mut end = i + 1;
        while end < fetch.queues.len() && ctx.owner_of(&fetch.queues[end]) == shard {
            end += 1;
        }
        let queues = fetch.queues[i..end].to_vec();
        let count = fetch.count - leased.len();
        conn.borrow_mut().note_task_shard(shard);
        let acks = std::mem::take(&mut acks);
        match fetch_on(ctx, shard, at.client, acks, queues, count, fetch.lease_ms).await {
            Ok(Ok(frames)) => leased.extend(frames),
            Ok(Err(error)) => held_back = held_back.or(Some(error)),
            Err(refusal) => return refusal,
        }
        i = end;
    }
    match (fetch.block_ms, held_back) {
        (_, Some(error)) if leased.is_empty() => error,
        (Some(block_ms), _) if leased.is_empty() => {
            block(ctx, client, at.client, fetch, block_ms).await
        }
        _ => Frame::Array(leased),
    }
}

/// Leases up to `count` tasks from `queues` (all owned by `shard`) to `client`, after the
/// `acks` that ride along. `Err` ends the FETCH with that reply (a refused ACK); `Ok(Err)`
/// is a queue held back by its in-flight limit.
async fn fetch_on(
    ctx: &ShardCtx,
    shard: usize,
    client: u64,
    acks: Vec<Bytes>,
    queues: Vec<Bytes>,
    count: usize,
    lease_ms: Option<u64>,
) -> Result<Result<Vec<Frame>, Frame>, Frame> {
    if shard == ctx.id {
        return Ok(ctx
            .shard
            .borrow_mut()
            .task_fetch(&queues, count, lease_ms, client));
    }
    let request = Request::Tasks(TaskRequest::Fetch {
        client,
        acks,
        queues,
        count,
        lease_ms,
    });
    match ctx.request(shard, request).await {
        Response::Refused(refusal) => Err(refusal),
        Response::Frames(frames) => Ok(match frames.iter().find(|f| f.is_error()) {
            Some(error) => Err(error.clone()),
            None => Ok(frames),
        }),
        _ => Err(Frame::static_error(
            "ERR internal error: unexpected shard response",
        )),
    }
}

/// Acknowledges a FETCH's `ACK` ids: one message per shard that owns some (not one round
/// trip per id: a worker acknowledging 50 tasks of a queue on another shard paid 50 mesh
/// round trips per fetch, and starved under load), all shards at once. Returns the first
/// refusal in the order the ids were named, if any; the other ids are acknowledged anyway.
async fn ack_all(ctx: &ShardCtx, at: Target, ids: &[Bytes]) -> Option<Frame> {
    if ids.is_empty() {
        return None;
    }
    let ack = task_ack();
    let command = |id: &Bytes| vec![Bytes::from_static(b"task.ack"), id.clone()];
    // Per id, its reply; remote replies are filled in when their shard answers.
    let mut replies: Vec<Option<Frame>> = vec![None; ids.len()];
    let mut remote: Vec<(usize, Vec<usize>)> = Vec::new();
    for (n, id) in ids.iter().enumerate() {
        match ctx.owner_of(id) {
            shard if shard == ctx.id => replies[n] = Some(ack_here(ctx, at, id)),
            shard => match remote.iter_mut().find(|(s, _)| *s == shard) {
                Some((_, positions)) => positions.push(n),
                None => remote.push((shard, vec![n])),
            },
        }
    }
    let pending: Vec<_> = remote
        .into_iter()
        .map(|(shard, positions)| {
            let commands = positions
                .iter()
                .map(|&n| (ack.index(), command(&ids[n])))
                .collect();
            let request = Request::Keys(KeyRequest::Exec {
                db: at.db,
                client: at.client,
                commands,
            });
            (ctx.request(shard, request), positions)
        })
        .collect();
    for (response, positions) in pending {
        let frames = match response.await {
            Response::Frames(frames) => frames,
            _ => Vec::new(),
        };
        let mut frames = frames.into_iter();
        for n in positions {
            replies[n] =
                Some(frames.next().unwrap_or_else(|| {
                    Frame::static_error("ERR internal error: lost shard reply")
                }));
        }
    }
    let mut refusal = None;
    for frame in replies.into_iter().flatten() {
        ctx.stats.record(ack, frame.is_error());
        if frame.is_error() && refusal.is_none() {
            refusal = Some(frame);
        }
    }
    refusal
}

/// TASK.ACK's row, looked up once (a lookup lowercases and hashes the name).
fn task_ack() -> &'static CommandSpec {
    static ACK: std::sync::LazyLock<&'static CommandSpec> =
        std::sync::LazyLock::new(|| lookup(b"task.ack").expect("task.ack is in the table"));
    *ACK
}

/// Acknowledges `id`, which lives on this shard.
fn ack_here(ctx: &ShardCtx, at: Target, id: &Bytes) -> Frame {
    let args = [Bytes::from_static(b"task.ack"), id.clone()];
    ctx.shard
        .borrow_mut()
        .execute(at.db, at.client, task_ack(), &args)
}

/// True when a FETCH blocks and names only queues and ids of this shard, while no CLIENT
/// PAUSE is on: then [`fetch_or_park`] serves it with no task. (A worker's usual step on
/// one shard.)
pub fn parks_here(ctx: &ShardCtx, command: &Command, fetch: &FetchArgs<'_>) -> bool {
    fetch.block_ms.is_some() && all_here(ctx, command) && !ctx.globals.pause.active()
}

/// A local blocking FETCH (see [`parks_here`]) without a task: its ACKs, then a lease if
/// there is one; else it parks here answering `Reply::Direct`, and `None` says so (the
/// connection then waits for the transport to write the answer). `Some` is the reply now.
pub fn fetch_or_park(
    ctx: &ShardCtx,
    conn: &RefCell<ConnState>,
    at: Target,
    fetch: FetchArgs<'_>,
) -> Option<Frame> {
    let mut refusal = None;
    for id in fetch.acks {
        let frame = ack_here(ctx, at, id);
        ctx.stats.record(task_ack(), frame.is_error());
        if frame.is_error() && refusal.is_none() {
            refusal = Some(frame);
        }
    }
    if refusal.is_some() {
        return refusal;
    }
    let client = {
        let mut state = conn.borrow_mut();
        state.note_task_shard(ctx.id);
        state.id
    };
    let fetched =
        ctx.shard
            .borrow_mut()
            .task_fetch(fetch.queues, fetch.count, fetch.lease_ms, at.client);
    match fetched {
        Ok(frames) if frames.is_empty() => {}
        Ok(frames) => return Some(Frame::Array(frames)),
        // Held back by an in-flight limit.
        Err(error) => return Some(error),
    }
    let block_ms = fetch.block_ms.unwrap_or(0);
    // The real clock: a deadline must never come early.
    let deadline_ms = (block_ms > 0).then(|| crate::globals::unix_ms().saturating_add(block_ms));
    // Not idle while it waits (the `timeout` option spares a blocked client).
    conn.borrow_mut().in_batch = true;
    ctx.task_waits.park(
        ctx,
        Parked {
            client,
            owner: at.client,
            want: Want::Fetch {
                // Copies: a parked fetch must not pin the connection's read buffer.
                queues: fetch
                    .queues
                    .iter()
                    .map(|q| Bytes::copy_from_slice(q))
                    .collect(),
                count: fetch.count,
                lease_ms: fetch.lease_ms,
            },
            deadline_ms,
            reply: Reply::Direct {
                client,
                finish: direct_fetch_reply,
            },
        },
    );
    None
}

/// A directly parked fetch's reply from its shard's answer: the leased tasks, nothing (the
/// time ran out, or the connection let go), or the error that refused it.
fn direct_fetch_reply(frames: Vec<Frame>) -> Frame {
    match frames.iter().position(Frame::is_error) {
        Some(at) => frames.into_iter().nth(at).expect("present"),
        None => Frame::Array(frames),
    }
}

/// Waits until one of the queues' shards leases something (or the time is up); see the
/// module docs of `shard::tasks`.
async fn block(
    ctx: &Rc<ShardCtx>,
    client: u64,
    owner: u64,
    fetch: &FetchArgs<'_>,
    block_ms: u64,
) -> Frame {
    // The real clock, not the shard's coarse one (which may lag): a deadline must never
    // come early.
    let now = crate::globals::unix_ms();
    let deadline_ms = (block_ms > 0).then(|| now.saturating_add(block_ms));
    // One parked fetch per shard, its queues in the order named. The names are copied: a
    // parked fetch must not pin the connection's read buffer.
    let copies = fetch.queues.iter().map(|q| Bytes::copy_from_slice(q));
    let groups = park::by_owner(ctx, copies);
    let want = |queues: &Vec<Bytes>| Want::Fetch {
        queues: queues.clone(),
        count: fetch.count,
        lease_ms: fetch.lease_ms,
    };
    let answers = park::first_answer(
        ctx,
        Parking {
            parts: &groups,
            here: &|queues, reply| {
                ctx.task_waits.park(
                    ctx,
                    Parked {
                        client,
                        owner,
                        want: want(queues),
                        deadline_ms,
                        reply,
                    },
                )
            },
            there: &|queues| {
                Request::Tasks(TaskRequest::FetchBlocking {
                    client,
                    owner,
                    queues: queues.clone(),
                    count: fetch.count,
                    lease_ms: fetch.lease_ms,
                    deadline_ms,
                })
            },
            let_go_here: &|| ctx.task_waits.unpark_client(ctx, client),
            let_go_there: &|| Request::Tasks(TaskRequest::Unpark { client }),
        },
    )
    .await;
    // What the other shards leased meanwhile came back in their answers.
    let mut delivered: Vec<Frame> = answers.into_frames().collect();
    if let Some(error) = delivered.iter().find(|f| f.is_error()).cloned() {
        let leased: Vec<Frame> = delivered.into_iter().filter(|f| !f.is_error()).collect();
        hand_back(ctx, owner, leased);
        return error;
    }
    if delivered.len() > fetch.count {
        let extra = delivered.split_off(fetch.count);
        hand_back(ctx, owner, extra);
    }
    Frame::Array(delivered)
}

/// Gives back leased tasks the client will not receive (each task frame starts with its id);
/// `client` is the owner they were leased to.
fn hand_back(ctx: &ShardCtx, client: u64, tasks: Vec<Frame>) {
    let ids = tasks.into_iter().filter_map(|task| match task {
        Frame::Array(fields) => match fields.into_iter().next() {
            Some(Frame::Bulk(id)) => Some(id),
            _ => None,
        },
        _ => None,
    });
    for (shard, ids) in park::by_owner(ctx, ids) {
        if shard == ctx.id {
            ctx.shard.borrow_mut().task_unlease(&ids, client);
        } else {
            drop(ctx.request(shard, Request::Tasks(TaskRequest::Unlease { client, ids })));
        }
    }
}

/// TASK.WAIT id [TIMEOUT ms]: waits on the task's shard until it finishes, then replies its
/// fields as TASK.GET does; nil when the time runs out; an error for an unknown id.
pub async fn wait(ctx: &Rc<ShardCtx>, conn: &Rc<RefCell<ConnState>>, wait: &WaitArgs) -> Frame {
    let timeout_ms = wait.timeout_ms;
    let client = conn.borrow().id;
    let id = wait.id.clone();
    // The real clock, not the shard's coarse one (which may lag): a deadline must never
    // come early.
    let now = crate::globals::unix_ms();
    let deadline_ms = (timeout_ms > 0).then(|| now.saturating_add(timeout_ms));
    let shard = ctx.owner_of(&id);
    let frames = if shard == ctx.id {
        if ctx.shard.borrow().tasks.get(&id).is_none() {
            return Frame::static_error("ERR no such task");
        }
        let slot = Rc::new(LocalSlot::default());
        ctx.task_waits.park(
            ctx,
            Parked {
                client,
                owner: client,
                want: Want::Finish { id },
                deadline_ms,
                reply: Reply::Local(slot.clone()),
            },
        );
        LocalWait(slot).await
    } else {
        conn.borrow_mut().note_task_shard(shard);
        match ctx
            .request(
                shard,
                Request::Tasks(TaskRequest::Wait {
                    client,
                    id,
                    deadline_ms,
                }),
            )
            .await
        {
            Response::Frames(frames) => frames,
            _ => Vec::new(),
        }
    };
    frames.into_iter().next().unwrap_or(Frame::Null)
}

/// TASK.EVENTS queue [FROM cursor] [COUNT n] [BLOCK ms]: on the queue's shard, the events
/// from the cursor on; with BLOCK, waits there until there are some (an empty page with the
/// same cursor when the time runs out).
pub async fn events(
    ctx: &Rc<ShardCtx>,
    conn: &Rc<RefCell<ConnState>>,
    parsed: &EventsArgs,
) -> Frame {
    let parsed = parsed.clone();
    let client = conn.borrow().id;
    // The real clock: a deadline must never come early.
    let now = crate::globals::unix_ms();
    let block = parsed
        .block_ms
        .map(|ms| (ms > 0).then(|| now.saturating_add(ms)));
    let shard = ctx.owner_of(&parsed.queue);
    let frames = if shard == ctx.id {
        let slot = Rc::new(LocalSlot::default());
        ctx.task_waits.events(
            ctx,
            client,
            parsed.queue,
            parsed.from,
            parsed.count,
            block,
            Reply::Local(slot.clone()),
        );
        LocalWait(slot).await
    } else {
        conn.borrow_mut().note_task_shard(shard);
        let request = Request::Tasks(TaskRequest::Events {
            client,
            queue: parsed.queue,
            from: parsed.from,
            count: parsed.count,
            block,
        });
        match ctx.request(shard, request).await {
            Response::Frames(frames) => frames,
            _ => Vec::new(),
        }
    };
    // Let go of (closing connection): an empty page from where it was.
    frames.into_iter().next().unwrap_or_else(|| {
        Frame::Array(vec![
            Frame::Integer(parsed.from as i64),
            Frame::Array(Vec::new()),
        ])
    })
}
