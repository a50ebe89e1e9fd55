//! The task service of a shard: the task engine's requests from other shards, and the
//! fetches and waits parked here (TASK.FETCH … BLOCK, TASK.WAIT).
//!
//! A blocked fetch parks on every shard that owns one of its queues: as a held mesh request
//! from another shard, or a local slot. A shard retries its parked fetches, oldest first,
//! whenever its engine's epoch moved (a task became ready, a lease or a limit freed up) or a
//! parked fetch's deadline passed, and answers each one that leased something or timed out.
//! The connection's coordinator (`commands::tasks`) takes the first shard's answer, asks the
//! others to let go, and hands back anything they leased meanwhile that it cannot deliver,
//! so no task stays leased to a client that did not receive it.
//!
//! It also keeps the book of the worker identities whose home this shard is (TASK.WORKER;
//! `wetask_shards::tasks::workers`): their connections come and go here, and when a
//! worker's GRACE runs out this shard tells every shard to release its leases.

use std::cell::{Cell, RefCell};

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::families::tasks::commands::task_frame;
use wetask_shards::families::tasks::reports::{events_frame, has_events};
use wetask_shards::tasks::workers::{BindError, Release, Workers, WORKERS_MAX};

use super::core::ShardCore;
use super::reply::Reply;
use super::ConnectionHooks;
use crate::clients::ConnState;
use crate::mesh::{Request, Response, TaskRequest, WorkerRequest};

/// Most fetches parked on one shard at once; beyond it a blocked fetch is refused.
pub const PARKED_FETCHES_MAX: usize = 100_000;

/// Most queue lists `serve_parked` remembers as empty in one pass (fetches parked on many
/// different lists are simply tried).
const FOUND_EMPTY_MAX: usize = 16;

/// What a parked command waits for.
pub enum Want {
    /// TASK.FETCH … BLOCK: something to lease from these queues.
    Fetch {
        queues: Vec<Bytes>,
        count: usize,
        lease_ms: Option<u64>,
    },
    /// TASK.WAIT: the task to finish (answered with its fields, or nil on time-out).
    Finish { id: Bytes },
    /// TASK.EVENTS … BLOCK: an event of `queue` numbered `from` or later.
    Events {
        queue: Bytes,
        from: u64,
        count: usize,
    },
}

pub struct Parked {
    /// The connection that waits (let go by this id).
    pub client: u64,
    /// Who a fetch's leases go to: the connection, or its worker.
    pub owner: u64,
    pub want: Want,
    /// Unix ms when it gives up empty-handed; `None` waits for ever.
    pub deadline_ms: Option<u64>,
    pub reply: Reply,
}

#[derive(Default)]
pub struct TaskWaits {
    parked: RefCell<Vec<Parked>>,
    /// The engine epoch the parked fetches were last tried at.
    epoch: Cell<u64>,
    /// The engine's event count when the parked reads were last looked at.
    events_seen: Cell<u64>,
    /// The workers whose home this shard is.
    workers: RefCell<Workers>,
    /// When the next worker's GRACE runs out (`None`: no worker is gone).
    next_release_ms: Cell<Option<u64>>,
    /// `serve_parked`'s answers (kept to reuse the allocation: it runs every turn).
    answers: Cell<Vec<(Reply, Vec<Frame>)>>,
}

impl TaskWaits {
    /// Serves a task request from a peer: parks the blocking ones, answers the rest.
    pub fn handle(&self, core: &ShardCore, from: usize, id: u64, request: TaskRequest) {
        match request {
            TaskRequest::FetchBlocking {
                client,
                owner,
                queues,
                count,
                lease_ms,
                deadline_ms,
            } => self.park(
                core,
                Parked {
                    client,
                    owner,
                    want: Want::Fetch {
                        queues,
                        count,
                        lease_ms,
                    },
                    deadline_ms,
                    reply: Reply::Peer { from, id },
                },
            ),
            TaskRequest::Wait {
                client,
                id: task,
                deadline_ms,
            } => {
                if core.shard.borrow().tasks.get(&task).is_none() {
                    let error = Frame::static_error("ERR no such task");
                    core.respond(from, id, Response::Frames(vec![error]));
                } else {
                    self.park(
                        core,
                        Parked {
                            client,
                            owner: client,
                            want: Want::Finish { id: task },
                            deadline_ms,
                            reply: Reply::Peer { from, id },
                        },
                    );
                }
            }
            TaskRequest::Events {
                client,
                queue,
                from: cursor,
                count,
                block,
            } => self.events(
                core,
                client,
                queue,
                cursor,
                count,
                block,
                Reply::Peer { from, id },
            ),
            request => core.respond(from, id, self.serve(core, request)),
        }
    }

    /// TASK.EVENTS here: answered now when there are events (or an error), or when it does
    /// not block; else parked until the queue has news or the deadline.
    #[allow(clippy::too_many_arguments)]
    pub fn events(
        &self,
        core: &ShardCore,
        client: u64,
        queue: Bytes,
        cursor: u64,
        count: usize,
        block: Option<Option<u64>>,
        reply: Reply,
    ) {
        let frame = {
            let mut shard = core.shard.borrow_mut();
            let now = shard.now_ms();
            events_frame(&mut shard.tasks, &queue, cursor, count, now)
        };
        match block {
            Some(deadline_ms) if !frame.is_error() && !has_events(&frame) => self.park(
                core,
                Parked {
                    client,
                    owner: client,
                    want: Want::Events {
                        queue,
                        from: cursor,
                        count,
                    },
                    deadline_ms,
                    reply,
                },
            ),
            _ => reply.send(core, vec![frame]),
        }
    }

    /// Serves a task request that is answered at once (never a parking one).
    pub fn serve(&self, core: &ShardCore, request: TaskRequest) -> Response {
        match request {
            TaskRequest::Fetch {
                client,
                acks,
                queues,
                count,
                lease_ms,
            } => fetch(core, client, acks, &queues, count, lease_ms),
            TaskRequest::Unpark { client } => {
                self.unpark_client(core, client);
                Response::Done
            }
            TaskRequest::Unlease { client, ids } => {
                Response::Count(core.shard.borrow_mut().task_unlease(&ids, client))
            }
            TaskRequest::ReleaseLeases { client } => {
                Response::Count(self.release_client(core, client))
            }
            TaskRequest::SubmitFallback { fallback } => Response::Bool(
                core.shard
                    .borrow_mut()
                    .task_submit_fallback(fallback)
                    .is_ok(),
            ),
            TaskRequest::Worker(request) => self.worker_request(core, request),
            TaskRequest::BatchNote { note } => {
                self.apply_batch_note(core, &note);
                Response::Done
            }
            TaskRequest::ChildEnds { ids } => {
                let ends = core.shard.borrow().tasks.child_ends(&ids);
                Response::Frames(ends.into_iter().map(end_frame).collect())
            }
            TaskRequest::FetchBlocking { .. }
            | TaskRequest::Wait { .. }
            | TaskRequest::Events { .. } => {
                unreachable!("parking requests go through `handle`")
            }
        }
    }

    /// `client`'s connection closed: lets go of its parked requests and requeues every
    /// task leased to it here. Returns how many leases went back.
    pub fn release_client(&self, core: &ShardCore, client: u64) -> usize {
        self.unpark_client(core, client);
        core.shard.borrow_mut().task_release_owner(client)
    }

    /// Sends a batch child's end to its batch's home (applied here when it is this shard).
    pub fn route_batch_note(&self, core: &ShardCore, note: wetask_shards::tasks::BatchNote) {
        let home = core.owner_of(&note.batch);
        if home == core.id {
            self.apply_batch_note(core, &note);
        } else {
            drop(core.request(home, Request::Tasks(TaskRequest::BatchNote { note })));
        }
    }

    /// On a batch's home: counts a child's end; when it was the last, releases or cancels
    /// the callbacks where they live.
    pub fn apply_batch_note(&self, core: &ShardCore, note: &wetask_shards::tasks::BatchNote) {
        let orders = core.shard.borrow_mut().task_batch_note(note);
        send_callback_orders(core, orders);
    }

    /// Submits a dead task's fallback on the shard that owns the fallback queue.
    pub fn route_fallback(&self, core: &ShardCore, fallback: wetask_shards::tasks::Fallback) {
        let owner = core.owner_of(&fallback.queue);
        if owner == core.id {
            if let Err(err) = core.shard.borrow_mut().task_submit_fallback(fallback) {
                tracing::warn!("fallback task refused: {}", err.text());
            }
        } else {
            // Fire and forget: the peer submits it when the envelope arrives.
            drop(core.request(
                owner,
                Request::Tasks(TaskRequest::SubmitFallback { fallback }),
            ));
        }
    }

    /// Parks a fetch or wait that found nothing; answers it at once if it can be answered
    /// now. Refuses (answers with an error frame) past `PARKED_FETCHES_MAX`.
    pub fn park(&self, core: &ShardCore, parked: Parked) {
        if self.parked.borrow().len() >= PARKED_FETCHES_MAX {
            let error = Frame::error(format!(
                "ERR too many blocked fetches on one shard ({PARKED_FETCHES_MAX})"
            ));
            parked.reply.send(core, vec![error]);
            return;
        }
        // Only the newcomer is tried: the others were tried at the epoch the shard last
        // served them, and `serve_parked` tries them again when it moves.
        let answer = {
            let mut shard = core.shard.borrow_mut();
            let expired = parked.deadline_ms.is_some_and(|d| shard.now_ms() > d);
            answer_of(&mut shard, &parked, expired)
        };
        match answer {
            Some(frames) => parked.reply.send(core, frames),
            None => self.parked.borrow_mut().push(parked),
        }
    }

    /// Retries the parked fetches if anything changed, oldest first; answers those that
    /// leased something or ran out of time.
    pub fn serve_parked(&self, core: &ShardCore) {
        if self.parked.borrow().is_empty() {
            return;
        }
        let mut answers;
        {
            let mut shard = core.shard.borrow_mut();
            let now = shard.now_ms();
            let epoch = shard.tasks.epoch();
            let mut parked = self.parked.borrow_mut();
            let deadline_passed = parked
                .iter()
                .any(|p| p.deadline_ms.is_some_and(|d| now > d));
            // New events matter only to parked TASK.EVENTS reads (a lease is an event but
            // frees nothing for a fetch, so it does not move the epoch).
            let events = shard.tasks.events_noted();
            let news = events != self.events_seen.get()
                && parked.iter().any(|p| matches!(p.want, Want::Events { .. }));
            self.events_seen.set(events);
            if epoch == self.epoch.get() && !deadline_passed && !news {
                return;
            }
            answers = self.answers.take();
            // Queue lists a fetch found nothing in, this pass: the same list finds nothing
            // for the next one either (leases only take; a quiet worker's empty hands say
            // nothing of the queue), so with many workers parked on one queue a SUBMIT costs
            // one lease, not one try per worker.
            let mut found_empty = [0usize; FOUND_EMPTY_MAX];
            let mut empties = 0;
            let mut i = 0;
            while i < parked.len() {
                let p = &parked[i];
                let expired = p.deadline_ms.is_some_and(|d| now > d);
                let queues = fetch_queues(p);
                let seen = |q| {
                    found_empty[..empties]
                        .iter()
                        .any(|&j| fetch_queues(&parked[j]) == Some(q))
                };
                if !expired && queues.is_some_and(seen) {
                    i += 1;
                    continue;
                }
                let answer = answer_of(&mut shard, p, expired);
                if answer.is_none()
                    && queues.is_some()
                    && empties < FOUND_EMPTY_MAX
                    && !shard.tasks.is_quiet(p.owner)
                {
                    found_empty[empties] = i;
                    empties += 1;
                }
                match answer {
                    Some(frames) => answers.push((parked.remove(i).reply, frames)),
                    None => i += 1,
                }
            }
            self.epoch.set(shard.tasks.epoch());
        }
        for (reply, frames) in answers.drain(..) {
            reply.send(core, frames);
        }
        self.answers.set(answers);
    }

    /// The clients with a fetch, wait or events read parked here (INFO's blocked_clients,
    /// with the blocked pops).
    pub fn blocked_clients(&self) -> Vec<u64> {
        self.parked.borrow().iter().map(|p| p.client).collect()
    }

    /// Lets go of `client`'s parked fetches, answering each with nothing.
    /// Ends every command parked here (whatever shard its client is on) with `error`;
    /// how many there were.
    pub fn end_all(&self, core: &ShardCore, error: &Frame) -> usize {
        let gone = std::mem::take(&mut *self.parked.borrow_mut());
        let count = gone.len();
        for p in gone {
            p.reply.send(core, vec![error.clone()]);
        }
        count
    }

    pub fn unpark_client(&self, core: &ShardCore, client: u64) {
        let gone: Vec<Parked> = {
            let mut parked = self.parked.borrow_mut();
            let (gone, kept) = std::mem::take(&mut *parked)
                .into_iter()
                .partition(|p| p.client == client);
            *parked = kept;
            gone
        };
        for p in gone {
            p.reply.send(core, Vec::new());
        }
    }
}

impl ConnectionHooks for TaskWaits {
    fn connection_closing(&self, core: &ShardCore, state: &ConnState) {
        self.unpark_client(core, state.id);
        for &shard in state.task_shards.iter().filter(|&&s| s != core.id) {
            drop(core.request(
                shard,
                Request::Tasks(TaskRequest::Unpark { client: state.id }),
            ));
        }
    }

    /// Requeues every task leased to the connection, on every shard it fetched from; a
    /// worker's connection tells the worker's home instead (its leases wait out GRACE).
    fn connection_closed(&self, core: &ShardCore, state: &ConnState) {
        self.unpark_client(core, state.id);
        if let Some(worker) = &state.worker {
            self.send_worker(
                core,
                worker.home,
                WorkerRequest::Unbind {
                    name: worker.name.clone(),
                    conn: state.id,
                },
            );
        }
        for &shard in &state.task_shards {
            if shard == core.id {
                self.release_client(core, state.id);
            } else {
                drop(core.request(
                    shard,
                    Request::Tasks(TaskRequest::ReleaseLeases { client: state.id }),
                ));
            }
        }
    }
}

/// A fetch's ACKs, then the fetch: one worker step. The first refused ACK is answered as
/// `Response::Refused` and nothing is leased.
fn fetch(
    core: &ShardCore,
    client: u64,
    acks: Vec<Bytes>,
    queues: &[Bytes],
    count: usize,
    lease_ms: Option<u64>,
) -> Response {
    let mut shard = core.shard.borrow_mut();
    if !acks.is_empty() {
        let ack = wetask_shards::lookup(b"task.ack").expect("task.ack is in the table");
        let mut refusal = None;
        for id in acks {
            let args = [Bytes::from_static(b"task.ack"), id];
            let frame = shard.execute(0, client, ack, &args);
            core.stats.record(ack, frame.is_error());
            if frame.is_error() && refusal.is_none() {
                refusal = Some(frame);
            }
        }
        if let Some(refusal) = refusal {
            return Response::Refused(refusal);
        }
    }
    let fetched = shard.task_fetch(queues, count, lease_ms, client);
    Response::Frames(fetched.unwrap_or_else(|error| vec![error]))
}

impl TaskWaits {
    /// Serves a worker registry request (see `WorkerRequest`).
    pub fn worker_request(&self, core: &ShardCore, request: WorkerRequest) -> Response {
        let now = core.shard.borrow().now_ms();
        let response = match request {
            WorkerRequest::Bind {
                name,
                conn,
                options,
            } => match self.workers.borrow_mut().bind(&name, conn, options, now) {
                Ok(owner) => Response::Version(owner),
                Err(BindError::TooMany) => Response::Refused(Frame::error(format!(
                    "ERR too many workers on one shard ({WORKERS_MAX})"
                ))),
                Err(BindError::Collision) => Response::Refused(Frame::static_error(
                    "ERR worker name collides with another worker's id; pick another name",
                )),
            },
            WorkerRequest::Beat { name } => {
                self.workers.borrow_mut().beat(&name, now);
                Response::Done
            }
            WorkerRequest::Unbind { name, conn } => {
                self.workers.borrow_mut().unbind(&name, conn, now);
                Response::Done
            }
            WorkerRequest::Quiet { name } => match self.workers.borrow_mut().quiet(&name) {
                Some(owner) => Response::Version(owner),
                None => Response::Refused(Frame::static_error("ERR no such worker")),
            },
            WorkerRequest::SetQuiet { owner } => {
                core.shard.borrow_mut().tasks.set_quiet(owner, true);
                Response::Done
            }
            WorkerRequest::Released { owner, forgotten } => {
                let released = core.shard.borrow_mut().task_release_owner(owner);
                if forgotten {
                    core.shard.borrow_mut().tasks.set_quiet(owner, false);
                }
                Response::Count(released)
            }
            WorkerRequest::List => Response::Frames(self.worker_rows(now)),
            WorkerRequest::LeaseCounts { owners } => {
                let shard = core.shard.borrow();
                let counts = owners.iter().map(|&owner| shard.tasks.leases_of(owner));
                Response::Frames(counts.map(|n| Frame::Integer(n as i64)).collect())
            }
        };
        self.next_release_ms
            .set(self.workers.borrow().next_release_ms());
        self.expire_workers(core);
        response
    }

    /// Sends a worker request to `shard` (served here when it is this one), not waiting.
    pub fn send_worker(&self, core: &ShardCore, shard: usize, request: WorkerRequest) {
        if shard == core.id {
            self.worker_request(core, request);
        } else {
            drop(core.request(shard, Request::Tasks(TaskRequest::Worker(request))));
        }
    }

    /// Releases, on every shard, the leases of the workers whose GRACE ran out. Cheap when
    /// none is due: called every turn.
    pub fn expire_workers(&self, core: &ShardCore) {
        let Some(due) = self.next_release_ms.get() else {
            return;
        };
        let now = core.shard.borrow().now_ms();
        if now < due {
            return;
        }
        let releases = self.workers.borrow_mut().expire(now);
        self.next_release_ms
            .set(self.workers.borrow().next_release_ms());
        for Release { owner, forgotten } in releases {
            tracing::debug!(
                owner,
                forgotten,
                "a worker's grace ran out: its leases go back"
            );
            for shard in 0..core.shard_count {
                self.send_worker(core, shard, WorkerRequest::Released { owner, forgotten });
            }
        }
    }

    /// This shard's workers as `[owner id, row]` pairs; the row is TASK.WORKERS's map less
    /// its lease count.
    fn worker_rows(&self, now: u64) -> Vec<Frame> {
        let text = |s: &str| Frame::Bulk(Bytes::copy_from_slice(s.as_bytes()));
        let int = |n: u64| Frame::Integer(n as i64);
        let workers = self.workers.borrow();
        workers
            .list()
            .into_iter()
            .map(|w| {
                let row = Frame::Map(vec![
                    (text("name"), Frame::Bulk(w.name.clone())),
                    (text("status"), text(w.status(now))),
                    (text("connections"), int(w.connections.len() as u64)),
                    (text("quiet"), int(u64::from(w.quiet))),
                    (text("grace"), int(w.options.grace_ms)),
                    (
                        text("heartbeat"),
                        w.options.heartbeat_ms.map_or(Frame::Null, int),
                    ),
                    (text("registered"), int(w.registered_ms)),
                    (text("last_seen"), int(w.last_seen_ms)),
                ]);
                Frame::Array(vec![Frame::Integer(w.owner as i64), row])
            })
            .collect()
    }
}

/// A parked request's answer now, if it has one: what a fetch leased, the events that came,
/// the task that finished; an empty one when it `expired`; `None` to keep waiting.
/// A parked fetch's queue list (`None` for a wait or an events read).
fn fetch_queues(p: &Parked) -> Option<&Vec<Bytes>> {
    match &p.want {
        Want::Fetch { queues, .. } => Some(queues),
        _ => None,
    }
}

fn answer_of(shard: &mut wetask_shards::Shard, p: &Parked, expired: bool) -> Option<Vec<Frame>> {
    match &p.want {
        Want::Fetch {
            queues,
            count,
            lease_ms,
        } => {
            // Nothing to lease (or held back by the in-flight limit): keep waiting.
            match shard.task_fetch(queues, *count, *lease_ms, p.owner) {
                Ok(frames) if !frames.is_empty() => Some(frames),
                _ => expired.then(Vec::new),
            }
        }
        Want::Events { queue, from, count } => {
            if shard.tasks.has_events(queue, *from) || expired {
                let now = shard.now_ms();
                Some(vec![events_frame(
                    &mut shard.tasks,
                    queue,
                    *from,
                    *count,
                    now,
                )])
            } else {
                None
            }
        }
        Want::Finish { id } => match shard.tasks.get(id) {
            Some(task) if task.state.is_terminal() => Some(vec![task_frame(&shard.tasks, task)]),
            None => Some(vec![Frame::Null]),
            _ => expired.then(|| vec![Frame::Null]),
        },
    }
}

/// A child's end as ChildEnds answers it: `[1 done | 0 failed | -1 not ended, outcome]`.
pub fn end_frame(end: Option<(bool, Option<Bytes>)>) -> Frame {
    match end {
        None => Frame::Array(vec![Frame::Integer(-1), Frame::Null]),
        Some((ok, outcome)) => Frame::Array(vec![
            Frame::Integer(i64::from(ok)),
            outcome.map_or(Frame::Null, Frame::Bulk),
        ]),
    }
}

/// Tells the callbacks' shards to release, cancel or fail them: TASK.RELEASE [DEAD error]
/// and TASK.CANCEL run there as commands (so journaled there), and each sent twice changes
/// nothing.
pub fn send_callback_orders(core: &ShardCore, orders: Vec<(Bytes, wetask_shards::tasks::Order)>) {
    use wetask_shards::tasks::Order;
    for (id, order) in orders {
        let verb: &'static [u8] = match order {
            Order::Cancel => b"task.cancel",
            Order::Release | Order::Kill(_) => b"task.release",
        };
        let spec = wetask_shards::lookup(verb).expect("in the table");
        let mut args = vec![Bytes::from_static(verb), id.clone()];
        if let Order::Kill(error) = order {
            args.extend([Bytes::from_static(b"DEAD"), error]);
        }
        let owner = core.owner_of(&id);
        if owner == core.id {
            core.shard.borrow_mut().execute(0, 0, spec, &args);
        } else {
            let request = Request::Keys(crate::mesh::KeyRequest::Exec {
                db: 0,
                client: 0,
                commands: crate::mesh::ShardCommands::one(spec.index(), args),
            });
            drop(core.request(owner, request));
        }
    }
}
