//! The CLIENT TRACKING service of a shard: it delivers what the shard's tracking table owes
//! (`wetask_shards::keyspace::tracking`) and serves the peers' tracking requests. The table lives on
//! the shard that owns the keys; an invalidation goes to the home shard of the client that
//! read, which knows the connection: its NOLOOP, its REDIRECT, its protocol. There it
//! becomes a RESP3 `invalidate` push, or a `__redis__:invalidate` message for a RESP2
//! redirect target that subscribes, as in Redis. The commands (CLIENT TRACKING, CACHING …)
//! are `commands::tracking`.

use std::cell::RefCell;
use std::collections::BTreeMap;

use bytes::Bytes;
use wetask_protocol::{Frame, Protocol};
use wetask_shards::keyspace::tracking::{Invalidation, Reader, Remember};

use super::core::ShardCore;
use super::ConnectionHooks;
use crate::clients::ConnState;
use crate::mesh::{Request, Response, TrackingRequest};

/// Redis's channel for invalidations to a RESP2 redirect target.
pub const CHANNEL: &[u8] = b"__redis__:invalidate";

/// This shard's tracking service.
#[derive(Default)]
pub struct TrackingService {
    /// Invalidations that met their client's connection busy, delivered next time.
    deferred: RefCell<Vec<Invalidation>>,
}

impl TrackingService {
    /// Delivers what the shard's table owes: invalidations to the readers' homes, the null
    /// invalidation after a flush to this shard's tracking clients, and reads of lent keys
    /// to their owners. Cheap when there is nothing. Called after commands run and before
    /// a peer's envelope is answered, so an invalidation leaves ahead of the replies that
    /// follow the write.
    #[inline]
    pub fn drain(&self, core: &ShardCore) {
        let owed = core
            .shard
            .try_borrow()
            .is_ok_and(|shard| shard.tracking.has_output());
        if owed || !self.deferred.borrow().is_empty() {
            self.deliver(core);
        }
    }

    #[cold]
    fn deliver(&self, core: &ShardCore) {
        let (pending, flushed, remote) = {
            let Ok(mut shard) = core.shard.try_borrow_mut() else {
                return;
            };
            shard.tracking.take_output()
        };
        let mut pending = pending;
        pending.append(&mut self.deferred.borrow_mut());
        let mut by_home: BTreeMap<usize, Vec<Invalidation>> = BTreeMap::new();
        for invalidation in pending {
            by_home
                .entry(invalidation.home)
                .or_default()
                .push(invalidation);
        }
        for (home, invalidations) in by_home {
            if home == core.id {
                self.invalidate_local(core, invalidations);
            } else {
                send(core, home, TrackingRequest::Invalidate(invalidations));
            }
        }
        if flushed {
            self.flush_local(core);
        }
        let mut by_owner: BTreeMap<usize, Vec<Remember>> = BTreeMap::new();
        for read in remote {
            by_owner.entry(read.owner).or_default().push(read);
        }
        for (owner, reads) in by_owner {
            if owner == core.id {
                remember(core, reads);
            } else {
                send(core, owner, TrackingRequest::Remember(reads));
            }
        }
    }

    /// Serves a peer's tracking request.
    pub fn serve(&self, core: &ShardCore, request: TrackingRequest) -> Response {
        match request {
            TrackingRequest::Register { client, reader } => {
                core.shard.borrow_mut().set_tracking(client, reader);
                Response::Done
            }
            TrackingRequest::Arm { client } => {
                core.shard.borrow_mut().tracking.arm(client);
                Response::Done
            }
            TrackingRequest::Remember(reads) => {
                remember(core, reads);
                Response::Done
            }
            TrackingRequest::Invalidate(invalidations) => {
                self.invalidate_local(core, invalidations);
                Response::Done
            }
            TrackingRequest::Deliver { target, keys } => {
                Response::Bool(deliver_to_target(core, target, keys))
            }
            TrackingRequest::HasClient { id } => {
                Response::Bool(core.clients.borrow().get(id).is_some())
            }
        }
    }

    /// Invalidations for tracking clients of this shard: grouped per client into one
    /// message, NOLOOP's own writes left out.
    fn invalidate_local(&self, core: &ShardCore, invalidations: Vec<Invalidation>) {
        let mut keys: BTreeMap<u64, Vec<Bytes>> = BTreeMap::new();
        for invalidation in invalidations {
            let Some(conn) = core.clients.borrow().get(invalidation.client) else {
                continue;
            };
            let Ok(state) = conn.try_borrow() else {
                self.deferred.borrow_mut().push(invalidation);
                continue;
            };
            let Some(tracking) = &state.tracking else {
                continue;
            };
            if tracking.noloop && invalidation.writer == state.id {
                continue;
            }
            keys.entry(invalidation.client)
                .or_default()
                .push(invalidation.key);
        }
        for (client, keys) in keys {
            deliver(core, client, Some(keys));
        }
    }

    /// After FLUSHALL or FLUSHDB ran here: every tracking client of this shard is told to
    /// forget every key (each shard runs the flush, and tells its own clients).
    fn flush_local(&self, core: &ShardCore) {
        let tracking: Vec<u64> = core
            .clients
            .borrow()
            .iter()
            .filter_map(|c| {
                let state = c.try_borrow().ok()?;
                state.tracking.is_some().then_some(state.id)
            })
            .collect();
        for client in tracking {
            deliver(core, client, None);
        }
    }
}

impl ConnectionHooks for TrackingService {
    fn connection_closed(&self, core: &ShardCore, state: &ConnState) {
        if state.tracking.is_some() {
            drop(register_everywhere(core, state.id, None));
        }
    }
}

/// Tells this shard and every peer that `client` tracks as `reader` (or no longer). Peers
/// hear before any later command of the client reaches them (the mesh keeps each pair's
/// messages in order); the returned futures say when each has, which CLIENT TRACKING waits
/// for, so that another client's write after its OK cannot miss a broadcast prefix.
pub fn register_everywhere(
    core: &ShardCore,
    client: u64,
    reader: Option<Reader>,
) -> Vec<crate::mesh::ResponseFuture> {
    core.shard.borrow_mut().set_tracking(client, reader.clone());
    core.request_peers(|| {
        Request::Tracking(TrackingRequest::Register {
            client,
            reader: reader.clone(),
        })
    })
    .into_iter()
    .map(|(_, future)| future)
    .collect()
}

/// Arms `client`'s CLIENT CACHING exception on `shard` (ahead of the command it is for).
pub fn arm(core: &ShardCore, shard: usize, client: u64) {
    if shard == core.id {
        core.shard.borrow_mut().tracking.arm(client);
    } else {
        send(core, shard, TrackingRequest::Arm { client });
    }
}

fn remember(core: &ShardCore, reads: Vec<Remember>) {
    let mut shard = core.shard.borrow_mut();
    for read in reads {
        shard.tracking.remember(read.client, read.home, &read.key);
    }
}

/// A request whose answer nobody waits for (it only confirms delivery).
fn send(core: &ShardCore, to: usize, request: TrackingRequest) {
    drop(core.request(to, Request::Tracking(request)));
}

/// The invalidation of `keys` (`None`: every key) for tracking client `client` of this
/// shard, sent where its REDIRECT says.
fn deliver(core: &ShardCore, client: u64, keys: Option<Vec<Bytes>>) {
    let Some(conn) = core.clients.borrow().get(client) else {
        return;
    };
    let (redirect, protocol) = match conn.try_borrow() {
        Ok(state) => match &state.tracking {
            Some(tracking) => (tracking.redirect, state.protocol),
            None => return,
        },
        Err(_) => return,
    };
    let Some((target, home)) = redirect else {
        // RESP2 has no pushes: without a redirect there is nowhere to say it.
        if protocol == Protocol::Resp3 {
            core.push_to(client, &invalidate_push(keys));
        }
        return;
    };
    if home != core.id {
        send(core, home, TrackingRequest::Deliver { target, keys });
    } else if !deliver_to_target(core, target, keys) {
        redirect_broken(core, client, target);
    }
}

/// The redirect target of a tracking client is gone: the client is told (RESP3), and
/// CLIENT TRACKINGINFO shows `broken_redirect`, as in Redis.
fn redirect_broken(core: &ShardCore, client: u64, target: u64) {
    let Some(conn) = core.clients.borrow().get(client) else {
        return;
    };
    let resp3 = match conn.try_borrow_mut() {
        Ok(mut state) => {
            if let Some(tracking) = state.tracking.as_mut() {
                tracking.broken_redirect = true;
            }
            state.protocol == Protocol::Resp3
        }
        Err(_) => return,
    };
    if resp3 {
        let frame = Frame::Push(vec![
            Frame::Bulk(Bytes::from_static(b"tracking-redir-broken")),
            Frame::Integer(target as i64),
        ]);
        core.push_to(client, &frame);
    }
}

/// Sends the invalidation message to a redirect target of this shard; false when it is
/// not connected here.
fn deliver_to_target(core: &ShardCore, target: u64, keys: Option<Vec<Bytes>>) -> bool {
    let Some(conn) = core.clients.borrow().get(target) else {
        return false;
    };
    let (protocol, subscribed) = match conn.try_borrow() {
        Ok(state) => (state.protocol, state.subscriptions.count() > 0),
        // Running a command this very moment: it is there; the message is lost, as one to
        // a RESP2 connection that does not subscribe would be.
        Err(_) => return true,
    };
    if protocol == Protocol::Resp3 {
        core.push_to(target, &invalidate_push(keys));
    } else if subscribed {
        let frame = Frame::Push(vec![
            Frame::Bulk(Bytes::from_static(b"message")),
            Frame::Bulk(Bytes::from_static(CHANNEL)),
            keys_frame(keys),
        ]);
        core.push_to(target, &frame);
    }
    true
}

fn invalidate_push(keys: Option<Vec<Bytes>>) -> Frame {
    Frame::Push(vec![
        Frame::Bulk(Bytes::from_static(b"invalidate")),
        keys_frame(keys),
    ])
}

fn keys_frame(keys: Option<Vec<Bytes>>) -> Frame {
    match keys {
        Some(keys) => Frame::Array(keys.into_iter().map(Frame::Bulk).collect()),
        None => Frame::Null,
    }
}
