//! Keyed commands whose keys live on different shards. Standalone clients never get
//! CROSSSLOT; the coordinating shard moves entries between owners through the mesh.
//! RENAME, RENAMENX, COPY and MSETNX have their own steps. Every other command (LMOVE, SMOVE,
//! SINTERSTORE, LMPOP …) is run by *borrowing*: the coordinator takes the entries of the keys
//! it does not own into its own keyspace, runs the ordinary shard handler there, and puts
//! whatever the keys hold afterwards back on their owners (a key the command deleted stays
//! deleted). Values move, they are not copied: a collection travels as one pointer.
//!
//! Atomicity: the coordinator first locks every involved shard, in ascending shard order so
//! that concurrent coordinators cannot deadlock (DESIGN §2.4). A locked shard runs only
//! the steps carrying the coordinator's token; its own clients' commands and other shards'
//! requests wait until the unlock. So no client ever sees the moment between two steps.
//!
//! Recovery: every involved shard journals its part tagged with the operation's token; the
//! coordinator logs the commit, durable before the first lock is released, and a restart
//! replays a part only if its operation committed (`wetask_shards::shard::cross_commit`).

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::errors::{wrong_arity, NO_SUCH_KEY};
use wetask_shards::families::keys::copy_options;
use wetask_shards::request::{Form, Request as Command};
use wetask_shards::table::CommandSpec;
use wetask_shards::{shard_of, Entry, Value};

use crate::mesh::{KeyRequest, LockRequest, Request, Response};
use crate::shard::ShardCtx;

/// The locks one cross-shard operation holds. Released by [`Held::unlock`], or, should the
/// holder's task end any other way (an error path, a dropped future), when the value is
/// dropped: no lock outlives its holder.
pub struct Held<'a> {
    pub ctx: &'a ShardCtx,
    pub token: u64,
    shards: Vec<usize>,
    /// The locks this value took and has not released yet (empty for a `resume` view).
    owned: Vec<usize>,
}

impl Held<'_> {
    /// Locks the shards owning `keys`, lowest shard first.
    async fn lock<'a>(ctx: &'a ShardCtx, keys: impl Iterator<Item = &Bytes>) -> Held<'a> {
        Held::lock_shards(ctx, keys.map(|k| shard_of(k, ctx.shard_count)).collect()).await
    }

    /// Locks `shards`, lowest first.
    pub async fn lock_shards(ctx: &ShardCtx, mut shards: Vec<usize>) -> Held<'_> {
        shards.sort_unstable();
        shards.dedup();
        let token = ctx.new_token();
        let mut held = Held {
            ctx,
            token,
            shards: shards.clone(),
            owned: Vec::with_capacity(shards.len()),
        };
        for &shard in &shards {
            // The lock order (DESIGN §2.4): every coordinator takes its shards lowest first,
            // so two can never wait on each other.
            debug_assert!(
                held.owned.last().is_none_or(|&last| last < shard),
                "locks taken out of order"
            );
            // Owned from the moment it is asked for: a peer serves our requests in order, so
            // an Unlock sent after a Lock it has not answered yet still releases it.
            held.owned.push(shard);
            if shard == ctx.id {
                ctx.lock_local(token).await;
            } else {
                ctx.request_as(shard, Some(token), Request::Lock(LockRequest::Lock))
                    .await;
            }
        }
        held
    }

    /// The locks a running operation already holds, named by its token (a script's
    /// `redis.call` acting under its EVAL's locks). Dropping it releases nothing.
    pub fn resume(ctx: &ShardCtx, token: u64, shards: Vec<usize>) -> Held<'_> {
        Held {
            ctx,
            token,
            shards,
            owned: Vec::new(),
        }
    }

    pub fn shards(&self) -> &[usize] {
        &self.shards
    }

    /// Commits (`ShardCore::log_cross_commit`), then releases every lock.
    pub async fn unlock(mut self) {
        if !self.owned.is_empty() {
            commit(self.ctx, self.token, &self.shards);
        }
        let mut pending = Vec::new();
        for shard in std::mem::take(&mut self.owned) {
            if shard == self.ctx.id {
                self.ctx.unlock(self.token);
            } else {
                pending.push(self.ctx.request_as(
                    shard,
                    Some(self.token),
                    Request::Lock(LockRequest::Unlock),
                ));
            }
        }
        for future in pending {
            future.await;
        }
    }
}

/// Logs the commit of the cross-shard operation `token` over `shards`, before its locks are
/// released (`ShardCore::log_cross_commit`). The crash points `cross-before-commit` and
/// `cross-after-commit` end the process here, with every part (and the commit) on disk.
pub fn commit(ctx: &ShardCtx, token: u64, shards: &[usize]) {
    if crate::failpoint::is_armed("cross-before-commit") {
        ctx.commit_journal(crate::persist::Commit::Durable);
        crate::failpoint::crash_if_armed("cross-before-commit");
    }
    ctx.log_cross_commit(token, shards);
    // Reads of lent keys are remembered on their owners before the unlocks reach them.
    ctx.tracking.drain(&ctx.core);
    if crate::failpoint::is_armed("cross-after-commit") {
        ctx.commit_journal(crate::persist::Commit::Durable);
        crate::failpoint::crash_if_armed("cross-after-commit");
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if self.owned.is_empty() {
            return;
        }
        tracing::warn!(
            token = self.token,
            shards = ?self.owned,
            "a cross-shard operation ended without unlocking; releasing its locks"
        );
        // What it did stays done: committed like any other end.
        self.ctx.log_cross_commit(self.token, &self.shards);
        for shard in std::mem::take(&mut self.owned) {
            if shard == self.ctx.id {
                if self.ctx.lock_holder() == Some(self.token) {
                    self.ctx.unlock(self.token);
                }
            } else {
                // Queued at once; nothing waits for the answer.
                drop(self.ctx.request_as(
                    shard,
                    Some(self.token),
                    Request::Lock(LockRequest::Unlock),
                ));
            }
        }
    }
}

/// Runs `request` on shard `to` under the held locks, locally when `to` is this shard.
pub async fn on(held: &Held<'_>, to: usize, request: Request) -> Response {
    if to == held.ctx.id {
        held.ctx.serve(request)
    } else {
        held.ctx.request_as(to, Some(held.token), request).await
    }
}

/// The owner of `key` runs `request`, under the held locks.
async fn on_owner(held: &Held<'_>, key: &Bytes, request: Request) -> Response {
    on(held, shard_of(key, held.ctx.shard_count), request).await
}

async fn take(held: &Held<'_>, db: usize, key: &Bytes) -> Option<Entry> {
    match on_owner(
        held,
        key,
        Request::Keys(KeyRequest::Take {
            db,
            key: key.clone(),
            signals: Vec::new(),
        }),
    )
    .await
    {
        Response::Entry(entry) => entry,
        _ => None,
    }
}

async fn clone(held: &Held<'_>, db: usize, key: &Bytes) -> Option<Entry> {
    match on_owner(
        held,
        key,
        Request::Keys(KeyRequest::Clone {
            db,
            key: key.clone(),
        }),
    )
    .await
    {
        Response::Entry(entry) => entry,
        _ => None,
    }
}

async fn put(held: &Held<'_>, db: usize, key: &Bytes, entry: Entry, replace: bool) -> bool {
    let request = Request::Keys(KeyRequest::Put {
        db,
        key: key.clone(),
        entry,
        replace,
    });
    matches!(on_owner(held, key, request).await, Response::Bool(true))
}

async fn exists(held: &Held<'_>, db: usize, key: &Bytes) -> bool {
    let request = Request::Keys(KeyRequest::Exists {
        db,
        keys: vec![key.clone()],
    });
    matches!(on_owner(held, key, request).await, Response::Count(1))
}

pub async fn run(
    ctx: &ShardCtx,
    at: super::Target,
    spec: &'static CommandSpec,
    request: &Command,
) -> Frame {
    let args = &request.args[..];
    let db = at.db;
    if spec.name == "msetnx" && args.len().is_multiple_of(2) {
        return wrong_arity("msetnx");
    }
    if sort_reaches_elsewhere(ctx, request) {
        let held = Held::lock_shards(ctx, (0..ctx.shard_count).collect()).await;
        let reply = sort_anywhere(&held, at, spec, request).await;
        held.unlock().await;
        return reply;
    }
    let keys: Vec<&Bytes> = request
        .placed_keys()
        .iter()
        .map(|key| &args[key.position as usize])
        .collect();
    let held = Held::lock(ctx, keys.into_iter()).await;
    let reply = match spec.name {
        "rename" => rename(&held, db, args, false).await,
        "renamenx" => rename(&held, db, args, true).await,
        "copy" => copy(&held, db, args).await,
        "msetnx" => msetnx(&held, db, args).await,
        _ => borrowed(&held, at, spec, request).await,
    };
    held.unlock().await;
    reply
}

async fn rename(held: &Held<'_>, db: usize, args: &[Bytes], nx: bool) -> Frame {
    let (from, to) = (&args[1], &args[2]);
    if !exists(held, db, from).await {
        return Frame::static_error(NO_SUCH_KEY);
    }
    if nx && exists(held, db, to).await {
        return Frame::Integer(0);
    }
    let entry = take(held, db, from).await.expect("present under the lock");
    put(held, db, to, entry, true).await;
    if from != to {
        notify(held, |e| e.rename(db, from, to));
    }
    if nx {
        Frame::Integer(1)
    } else {
        Frame::ok()
    }
}

async fn copy(held: &Held<'_>, db: usize, args: &[Bytes]) -> Frame {
    let opts = match copy_options(args) {
        Ok(opts) => opts,
        Err(err) => return err,
    };
    let Some(entry) = clone(held, db, &args[1]).await else {
        return Frame::Integer(0);
    };
    let target_db = opts.db.unwrap_or(db);
    let copied = put(held, target_db, &args[2], entry, opts.replace).await;
    if copied {
        notify(held, |e| e.copy(target_db, &args[2]));
    }
    Frame::Integer(i64::from(copied))
}

/// Records the keyspace events of an operation done here by moving entries (the shards
/// that held the keys ran no command).
fn notify(held: &Held<'_>, f: impl FnOnce(&mut wetask_shards::keyspace::notify::Emit<'_>)) {
    wetask_shards::keyspace::notify::record(&mut held.ctx.shard.borrow_mut().notes, f);
}

async fn msetnx(held: &Held<'_>, db: usize, args: &[Bytes]) -> Frame {
    for pair in args[1..].chunks(2) {
        if exists(held, db, &pair[0]).await {
            return Frame::Integer(0);
        }
    }
    for pair in args[1..].chunks(2) {
        let entry = Entry::new(Value::Str(Bytes::copy_from_slice(&pair[1])));
        put(held, db, &pair[0], entry, true).await;
    }
    notify(held, |e| {
        for pair in args[1..].chunks(2) {
            e.set_new(db, &pair[0]);
        }
    });
    Frame::Integer(1)
}

/// Runs `spec` on this shard with the entries of its other shards' keys borrowed (see the
/// module docs).
async fn borrowed(
    held: &Held<'_>,
    at: super::Target,
    spec: &'static CommandSpec,
    request: &Command,
) -> Frame {
    let (db, args) = (at.db, &request.args[..]);
    let keys = request
        .placed_keys()
        .iter()
        .map(|key| (db, args[key.position as usize].clone()));
    let borrowed = borrow(held, keys).await;
    // For the client: CLIENT TRACKING remembers its reads (on the keys' owners).
    let frame = {
        let mut shard = held.ctx.shard.borrow_mut();
        // A blocking command's attempt runs from its parsed form.
        shard.execute_request(db, at.client, spec, request, None)
    };
    // A read (SINTER, LRANGE …) gives its keys back unchanged: WATCH does not see it.
    let written = if spec.has(wetask_shards::table::flag::WRITE) {
        borrowed.clone()
    } else {
        Vec::new()
    };
    give_back(held, borrowed, &written).await;
    frame
}

/// Moves the entries of the (database, key) pairs this shard does not own into its own
/// keyspace, under the held locks; returns the pairs borrowed, for [`give_back`].
pub async fn borrow(
    held: &Held<'_>,
    keys: impl Iterator<Item = (usize, Bytes)>,
) -> Vec<(usize, Bytes)> {
    let ctx = held.ctx;
    // What the operation's commands signal for blocked clients goes to the borrowed keys'
    // owners, with the keys (see `give_back`).
    ctx.shard.borrow_mut().blocked.start_recording();
    let mut remote: Vec<(usize, Bytes)> = Vec::new();
    for (db, key) in keys {
        if shard_of(&key, ctx.shard_count) != ctx.id
            && !remote.iter().any(|(d, k)| *d == db && *k == key)
        {
            remote.push((db, Bytes::copy_from_slice(&key)));
        }
    }
    // Every loan is asked for at once (one envelope per owner), then each is taken in.
    let loans: Vec<_> = remote
        .iter()
        .map(|(db, key)| {
            let request = Request::Keys(KeyRequest::Lend {
                db: *db,
                key: key.clone(),
            });
            ctx.request_as(shard_of(key, ctx.shard_count), Some(held.token), request)
        })
        .collect();
    for ((db, key), loan) in remote.iter().zip(loans) {
        if let Response::Entry(Some(entry)) = loan.await {
            ctx.shard.borrow_mut().borrow_in(*db, key, entry);
        }
    }
    remote
}

/// True when `command` is a SORT whose BY or GET patterns may name keys on another shard
/// than the sorted key's (`wetask_shards::families::sort::patterns_reach_elsewhere`, read
/// from the request's parsed form): it runs as a cross-shard operation ([`run`]), with
/// those keys borrowed.
pub fn sort_reaches_elsewhere(ctx: &ShardCtx, command: &Command) -> bool {
    let Form::Sort(sort) = command.form() else {
        return false;
    };
    ctx.shard_count > 1
        && wetask_shards::families::sort::patterns_reach_elsewhere(
            sort,
            command.owner_of_key(1, ctx.shard_count),
            |key| shard_of(key, ctx.shard_count),
        )
}

/// Borrows the keys a SORT's patterns name now (see `sort_pattern_keys`), besides those in
/// `borrowed` already, adding them to it. The sorted key is here (owned or borrowed).
pub async fn borrow_sort_patterns(
    held: &Held<'_>,
    borrowed: &mut Vec<(usize, Bytes)>,
    db: usize,
    command: &Command,
) {
    let Form::Sort(sort) = command.form() else {
        return;
    };
    let named = held
        .ctx
        .shard
        .borrow_mut()
        .sort_pattern_keys(db, &command.args[1], sort);
    let fresh: Vec<(usize, Bytes)> = named
        .into_iter()
        .map(|key| (db, key))
        .filter(|pair| !borrowed.contains(pair))
        .collect();
    let more = borrow(held, fresh.into_iter()).await;
    borrowed.extend(more);
}

/// SORT with patterns that name keys anywhere: holding every shard, it borrows the sorted
/// and STORE keys, then every key the patterns name for the elements, runs SORT here as if
/// every key were this shard's, and gives them all back (only STORE's key written).
async fn sort_anywhere(
    held: &Held<'_>,
    at: super::Target,
    spec: &'static CommandSpec,
    command: &Command,
) -> Frame {
    let (ctx, db, args) = (held.ctx, at.db, &command.args[..]);
    let keys: Vec<(usize, Bytes)> = command
        .key_positions()
        .into_iter()
        .map(|i| (db, args[i].clone()))
        .collect();
    let mut borrowed = borrow(held, keys.iter().cloned()).await;
    borrow_sort_patterns(held, &mut borrowed, db, command).await;
    let frame = ctx
        .shard
        .borrow_mut()
        .execute_all_here(db, at.client, spec, command);
    // The STORE key (the second, when there is one) is the only one written.
    let written: Vec<(usize, Bytes)> = keys.into_iter().skip(1).collect();
    give_back(held, borrowed, &written).await;
    frame
}

/// Puts borrowed keys back on their owners as they are now (a deleted one stays deleted).
/// Keys in `written` count as changed for their owners' WATCH; a key the operation deleted
/// always does.
/// Each key takes along what the operation's commands signalled for it, for the blocked
/// clients on its owner.
pub async fn give_back(held: &Held<'_>, borrowed: Vec<(usize, Bytes)>, written: &[(usize, Bytes)]) {
    let recorded = held.ctx.shard.borrow_mut().blocked.take_recorded();
    let mut borrowed = borrowed;
    borrowed.sort_by_key(|(db, key)| recorded.first_of(*db, key));
    for (db, key) in borrowed {
        let was_written = written.iter().any(|(d, k)| *d == db && *k == key);
        let entry = held.ctx.shard.borrow_mut().borrow_out(db, &key);
        let signals = recorded.of(db, &key);
        let request = match entry {
            Some(entry) => Request::Keys(KeyRequest::Restore {
                db,
                key: key.clone(),
                entry,
                written: was_written,
                signals,
            }),
            // Gone: the operation deleted it, which its owner's watchers must see.
            None if was_written || !signals.is_empty() => Request::Keys(KeyRequest::Take {
                db,
                key: key.clone(),
                signals,
            }),
            None => continue,
        };
        on_owner(held, &key, request).await;
    }
}
