//! The blocked-pop service of a shard: BLPOP, BLMOVE, BZPOPMIN, XREAD … BLOCK and their
//! kin parked on the keys this shard owns, by waiter id. When a key gets data its waiters
//! are served oldest first, each with the pop it would have run, right where the data is
//! (`wetask_shards::Shard::serve_blocked`); deadlines are kept here, checked every turn.
//! The client's side (parking on every owner, first answer wins) is `commands::blocking`.

use std::cell::RefCell;
use std::collections::HashMap;

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::{BlockOp, MoveTarget};

use super::core::ShardCore;
use super::reply::Reply;
use super::ConnectionHooks;
use crate::clients::ConnState;
use crate::mesh::{ListRequest, Request, Response};

/// Most waiters parked on one shard at once; beyond it a blocking pop is refused.
pub const LIST_WAITERS_MAX: usize = 100_000;

/// Longest a key stays held for a BLMOVE whose destination is on another shard (see
/// `ListWaiters::held`); its home releases it after one or two mesh round trips, so this
/// only bounds a release that never comes (the home's connection task gone).
pub const MOVE_HOLD_MS_MAX: u64 = 1_000;

/// A blocked pop parked on an owner shard.
pub struct ListWaiter {
    pub client: u64,
    pub db: usize,
    /// Its keys that this shard owns, in the order the command named them.
    pub keys: Vec<Bytes>,
    pub op: BlockOp,
    pub deadline_ms: Option<u64>,
    pub reply: Reply,
}

/// The blocked pops parked on this shard, and the ways to find them.
#[derive(Default)]
pub struct ListWaiters {
    waiters: RefCell<HashMap<u64, ListWaiter>>,
    index: RefCell<ListIndex>,
    /// Keys (db, key) a BLMOVE popped for a destination on another shard, with when: until
    /// its home has pushed the element there, or back here when the destination is not a
    /// list, the key's other waiters wait, so they are served in Redis's order (the next
    /// waiter gets the element a failed move leaves, not the one behind it).
    held: RefCell<HashMap<(usize, Bytes), u64>>,
}

impl ListWaiters {
    /// Serves a blocked-pop request from a peer.
    pub fn handle(&self, core: &ShardCore, from: usize, id: u64, request: ListRequest) {
        match request {
            ListRequest::Block {
                waiter,
                client,
                db,
                keys,
                op,
                deadline_ms,
            } => self.park(
                core,
                waiter,
                ListWaiter {
                    client,
                    db,
                    keys,
                    op,
                    deadline_ms,
                    reply: Reply::Peer { from, id },
                },
            ),
            ListRequest::Unblock { waiter } => {
                self.unpark(core, waiter);
                core.respond(from, id, Response::Done);
            }
            ListRequest::UnblockClient { client } => {
                self.unpark_client(core, client);
                core.respond(from, id, Response::Done);
            }
            ListRequest::Release { db, key } => {
                self.release(core, db, key);
                core.respond(from, id, Response::Done);
            }
        }
    }

    /// The clients blocked here (INFO's blocked_clients).
    pub fn blocked_clients(&self) -> Vec<u64> {
        self.index.borrow().by_client.keys().copied().collect()
    }
}

impl ListWaiters {
    /// Parks a waiter on this shard's keys, then looks at them at once: data may have
    /// arrived between the command's attempt and now.
    pub fn park(&self, core: &ShardCore, waiter: u64, mut parked: ListWaiter) {
        tracing::debug!(shard = core.id, waiter, client = parked.client, keys = parked.keys.len(), deadline = ?parked.deadline_ms, "blocked pop parked");
        if let BlockOp::XRead { after, .. } = &mut parked.op {
            let mut shard = core.shard.borrow_mut();
            for (key, id) in after.iter_mut() {
                if id.is_none() && parked.keys.contains(key) {
                    *id = Some(shard.stream_last_id(parked.db, key));
                }
            }
        }
        if self.waiters.borrow().len() >= LIST_WAITERS_MAX {
            let error = Frame::error(format!(
                "ERR too many blocked clients on one shard ({LIST_WAITERS_MAX})"
            ));
            parked.reply.send(core, vec![error]);
            return;
        }
        {
            let mut shard = core.shard.borrow_mut();
            for key in &parked.keys {
                shard.watch_blocked(parked.db, key, waiter, parked.op.wait_kind());
                shard.blocked.signal(parked.db, key);
            }
        }
        let mut index = self.index.borrow_mut();
        if let Some(deadline) = parked.deadline_ms {
            index.deadlines.insert((deadline, waiter));
        }
        // A connection runs one blocking command at a time: no other waiter of its client.
        let earlier = index.by_client.insert(parked.client, waiter);
        debug_assert!(
            earlier.is_none_or(|w| w == waiter),
            "client {} blocked twice on one shard",
            parked.client
        );
        drop(index);
        let previous = self.waiters.borrow_mut().insert(waiter, parked);
        // Waiter ids are lock tokens, unique per shard and process.
        debug_assert!(previous.is_none(), "waiter {waiter} parked twice");
        self.serve(core);
    }

    /// Takes a served or abandoned waiter out of every index; its keys forget it.
    fn remove(&self, core: &ShardCore, waiter: u64) -> Option<ListWaiter> {
        let parked = self.waiters.borrow_mut().remove(&waiter)?;
        let mut shard = core.shard.borrow_mut();
        for key in &parked.keys {
            shard.unwatch_blocked(parked.db, key, waiter);
        }
        let mut index = self.index.borrow_mut();
        if let Some(deadline) = parked.deadline_ms {
            index.deadlines.remove(&(deadline, waiter));
        }
        if index.by_client.get(&parked.client) == Some(&waiter) {
            index.by_client.remove(&parked.client);
        }
        Some(parked)
    }

    /// Takes a waiter off its keys, answering it with nothing if it was still parked.
    pub fn unpark(&self, core: &ShardCore, waiter: u64) {
        if let Some(parked) = self.remove(core, waiter) {
            tracing::debug!(shard = core.id, waiter, "blocked pop let go");
            parked.reply.send(core, Vec::new());
        }
    }

    /// Lets go of `client`'s waiter (its connection is closing).
    pub fn unpark_client(&self, core: &ShardCore, client: u64) {
        let waiter = self.index.borrow().by_client.get(&client).copied();
        if let Some(waiter) = waiter {
            self.unpark(core, waiter);
        }
    }

    /// Serves the waiters of keys that got data, oldest first per key, and answers those
    /// whose deadline passed. Called every loop turn; cheap when nothing is blocked.
    pub fn serve(&self, core: &ShardCore) {
        if self.waiters.borrow().is_empty() || core.is_locked() {
            return;
        }
        if !self.held.borrow().is_empty() {
            // A key whose hold timed out gets its waiters served again.
            let held: Vec<(usize, Bytes)> = self.held.borrow().keys().cloned().collect();
            for (db, key) in held {
                if !self.is_held(core, db, &key) {
                    core.shard.borrow_mut().blocked.signal(db, &key);
                }
            }
        }
        // A move into a key with waiters signals that key again: go round until quiet
        // (bounded, in case two moves feed each other).
        for _ in 0..16 {
            let ready = core.shard.borrow_mut().blocked.take_ready();
            if ready.is_empty() {
                break;
            }
            for (db, key) in ready {
                self.serve_key(core, db, &key);
            }
        }
        self.expire(core);
    }

    fn serve_key(&self, core: &ShardCore, db: usize, key: &Bytes) {
        if self.is_held(core, db, key) {
            return;
        }
        let waiters = core.shard.borrow().blocked.waiters(db, key);
        for waiter in waiters {
            let answer = {
                let list_waiters = self.waiters.borrow();
                let Some(parked) = list_waiters.get(&waiter) else {
                    continue;
                };
                self.pop_for(core, parked, key)
            };
            match answer {
                Some(frame) => {
                    tracing::debug!(shard = core.id, waiter, "blocked pop served");
                    let parked = self.remove(core, waiter).expect("present above");
                    let hold = matches!(&parked.op, BlockOp::Move { dst, .. } if core.owner_of(dst) != core.id)
                        && !frame.is_error();
                    parked.reply.send(core, vec![frame]);
                    if hold {
                        let now = core.shard.borrow().now_ms();
                        self.held.borrow_mut().insert((db, key.clone()), now);
                        return;
                    }
                }
                None => {
                    let list_waiters = self.waiters.borrow();
                    let op = &list_waiters.get(&waiter).expect("present above").op;
                    // A stream reader wants entries after its own id, or its group's: the
                    // next reader may find some. A waiter of another kind than the key's
                    // (a BZPOPMIN on a key now a list) is passed over, as Redis does.
                    let next_may_find =
                        matches!(op, BlockOp::XRead { .. } | BlockOp::XReadGroup(_))
                            || !core.shard.borrow_mut().holds_kind_for(db, key, op);
                    if !next_may_find {
                        // The key is empty: later waiters of its kind get nothing either.
                        break;
                    }
                }
            }
        }
    }

    /// Runs a waiter's pop on `key` (a shard operation); `None` when there is nothing to
    /// take.
    fn pop_for(&self, core: &ShardCore, parked: &ListWaiter, key: &Bytes) -> Option<Frame> {
        let target = match &parked.op {
            BlockOp::Move { dst, .. } if core.owner_of(key) != core.owner_of(dst) => {
                MoveTarget::Elsewhere
            }
            _ => MoveTarget::Here,
        };
        core.shard
            .borrow_mut()
            .serve_blocked(parked.db, parked.client, key, &parked.op, target)
    }

    /// True while `key` is held for a cross-shard BLMOVE; a hold older than
    /// `MOVE_HOLD_MS_MAX` is let go.
    fn is_held(&self, core: &ShardCore, db: usize, key: &Bytes) -> bool {
        let mut held = self.held.borrow_mut();
        let Some(&since) = held.get(&(db, key.clone())) else {
            return false;
        };
        if core.shard.borrow().now_ms() < since.saturating_add(MOVE_HOLD_MS_MAX) {
            return true;
        }
        tracing::warn!(
            shard = core.id,
            "a blocked move's hold on a key was never released"
        );
        held.remove(&(db, key.clone()));
        false
    }

    /// The home of a cross-shard BLMOVE is done with `key`: serve its other waiters.
    pub fn release(&self, core: &ShardCore, db: usize, key: Bytes) {
        if self.held.borrow_mut().remove(&(db, key.clone())).is_some() {
            core.shard.borrow_mut().blocked.signal(db, &key);
            self.serve(core);
        }
    }

    fn expire(&self, core: &ShardCore) {
        let now = core.shard.borrow().now_ms();
        loop {
            let first = self.index.borrow().deadlines.first().copied();
            match first {
                Some((deadline, waiter)) if deadline < now => self.unpark(core, waiter),
                _ => break,
            }
        }
    }
}

impl ConnectionHooks for ListWaiters {
    /// Lets go of the connection's blocked pop on every shard it parked on.
    fn connection_closing(&self, core: &ShardCore, state: &ConnState) {
        for &shard in &state.blocked_on {
            if shard == core.id {
                self.unpark_client(core, state.id);
            } else {
                drop(core.request(
                    shard,
                    Request::Lists(ListRequest::UnblockClient { client: state.id }),
                ));
            }
        }
    }
}

/// The ways a shard finds its parked list waiters besides by id.
#[derive(Default)]
struct ListIndex {
    /// (deadline, waiter), soonest first.
    deadlines: std::collections::BTreeSet<(u64, u64)>,
    /// A client's parked waiter (a connection runs one blocking command at a time).
    by_client: std::collections::HashMap<u64, u64>,
}
