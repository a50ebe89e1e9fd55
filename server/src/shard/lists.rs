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
                shard.blocked.watch(parked.db, key, waiter);
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
            shard.blocked.unwatch(parked.db, key, waiter);
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
                    parked.reply.send(core, vec![frame]);
                }
                // A read that wants later entries than this one: the next reader may not.
                None if matches!(
                    self.waiters.borrow().get(&waiter).map(|w| &w.op),
                    Some(BlockOp::XRead { .. })
                ) =>
                {
                    continue
                }
                // The key is empty (or no longer a list): later waiters get nothing either.
                None => break,
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

    fn expire(&self, core: &ShardCore) {
        let now = core.shard.borrow().now_ms();
        loop {
            let first = self.index.borrow().deadlines.first().copied();
            match first {
                Some((deadline, waiter)) if deadline <= now => self.unpark(core, waiter),
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
