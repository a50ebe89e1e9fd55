//! WATCH on the owner of a key: each watched key has a version on its shard (bumped by
//! every write that names it, `wetask_shards::Shard::watch`); a connection remembers the
//! versions it saw (`clients::Watched`), and EXEC compares them under its locks.

use super::core::ShardCore;
use super::ConnectionHooks;
use crate::clients::ConnState;
use crate::clients::Watched;
use crate::mesh::{Request, Response, WatchRequest};

/// Serves a WATCH request for a key this shard owns.
pub fn serve(core: &ShardCore, request: WatchRequest) -> Response {
    let mut shard = core.shard.borrow_mut();
    match request {
        WatchRequest::Watch { db, key } => Response::Version(shard.watch(db, &key)),
        WatchRequest::Version { db, key } => Response::Version(shard.watch_version(db, &key)),
        WatchRequest::Unwatch { db, key } => {
            shard.unwatch(db, &key);
            Response::Done
        }
    }
}

/// Forgets watched keys on their owners (UNWATCH, EXEC, DISCARD, a closed connection).
pub fn release(core: &ShardCore, watched: Vec<Watched>) {
    for w in watched {
        if w.shard == core.id {
            core.shard.borrow_mut().unwatch(w.db, &w.key);
        } else {
            drop(core.request(
                w.shard,
                Request::Watch(WatchRequest::Unwatch {
                    db: w.db,
                    key: w.key,
                }),
            ));
        }
    }
}

/// WATCH's connection hook (the versions live on the shards, the watch list on the
/// connection: nothing to own here).
pub struct Watches;

impl ConnectionHooks for Watches {
    fn connection_closed(&self, core: &ShardCore, state: &ConnState) {
        release(core, state.watched.clone());
    }
}
