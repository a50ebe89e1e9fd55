//! Everything one shard's tasks share on their core: the shard state, the mesh end, the
//! client registry and the counters. One `Rc<ShardCtx>` per executor; never sent anywhere.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use wetask_shards::Shard;

use crate::clients::Clients;
use crate::globals::{unix_ms, Globals};
use crate::mesh::{Mesh, Request, Response, ResponseFuture};
use crate::stats::{ShardReport, ShardStats};

/// Keys sampled by active expiry per loop turn, across this shard's databases.
pub const ACTIVE_EXPIRE_SAMPLES_PER_TURN: usize = 64;

pub struct ShardCtx {
    pub id: usize,
    pub shard_count: usize,
    pub shard: RefCell<Shard>,
    pub mesh: Option<Rc<Mesh>>,
    pub globals: Arc<Globals>,
    pub clients: RefCell<Clients>,
    pub stats: ShardStats,
    last_expire_ms: std::cell::Cell<u64>,
}

impl ShardCtx {
    pub fn new(id: usize, globals: Arc<Globals>, mesh: Option<Rc<Mesh>>) -> Self {
        ShardCtx {
            id,
            shard_count: globals.shard_count,
            shard: RefCell::new(Shard::new(id)),
            mesh,
            globals,
            clients: RefCell::new(Clients::default()),
            stats: ShardStats::default(),
            last_expire_ms: std::cell::Cell::new(0),
        }
    }

    /// Updates the coarse clock and runs one bounded round of active expiry. Called once per
    /// loop turn by the transport.
    pub fn tick(&self) {
        let now = unix_ms();
        let mut shard = self.shard.borrow_mut();
        shard.set_clock(now);
        // Active expiry runs at most once per millisecond, however fast the loop turns.
        if now != self.last_expire_ms.get() {
            self.last_expire_ms.set(now);
            shard.active_expire(ACTIVE_EXPIRE_SAMPLES_PER_TURN);
        }
    }

    pub fn request(&self, to: usize, request: Request) -> ResponseFuture {
        debug_assert_ne!(to, self.id, "local work never goes through the mesh");
        self.mesh
            .as_ref()
            .expect("mesh exists when there are several shards")
            .request(self.id, to, request)
    }

    pub fn report(&self) -> ShardReport {
        let shard = self.shard.borrow();
        ShardReport {
            commands: self.stats.commands.get(),
            per_command: self.stats.per_command.borrow().clone(),
            keyspace: shard.keyspace_summary(),
            expired_keys: shard.expired_keys(),
            net_input_bytes: self.stats.net_input_bytes.get(),
            net_output_bytes: self.stats.net_output_bytes.get(),
            ring_enters: self.stats.ring_enters.get(),
            ring_parks: self.stats.ring_parks.get(),
        }
    }

    /// Serves a request from another shard, synchronously, on this shard's state.
    pub fn serve(&self, request: Request) -> Response {
        // A parked shard's coarse clock may be up to a cron period old: refresh it first.
        self.tick();
        let mut shard = self.shard.borrow_mut();
        match request {
            Request::Exec { db, commands } => Response::Frames(
                commands
                    .iter()
                    .map(|(spec, args)| {
                        let spec = &wetask_shards::COMMANDS[*spec];
                        let frame = shard.execute(db, spec, args);
                        self.stats.record(spec.name, frame.is_error());
                        frame
                    })
                    .collect(),
            ),
            Request::Take { db, key } => Response::Entry(shard.take_entry(db, &key)),
            Request::Clone { db, key } => Response::Entry(shard.clone_entry(db, &key)),
            Request::Put {
                db,
                key,
                entry,
                replace,
            } => Response::Bool(shard.put_entry(db, &key, entry, replace)),
            Request::Exists { db, keys } => {
                Response::Count(keys.iter().filter(|k| shard.exists(db, k)).count())
            }
            Request::Scan {
                db,
                cursor,
                count,
                filter,
            } => {
                let (next, keys) = shard.scan(db, cursor, count, &filter);
                Response::Scan(next, keys)
            }
            Request::RandomKey { db } => Response::Key(shard.random_key(db)),
            Request::Stats => {
                drop(shard);
                Response::Stats(self.report())
            }
            Request::ResetStats => {
                self.stats.reset();
                Response::Bool(true)
            }
            Request::ClientList => Response::Text(self.clients.borrow().list(unix_ms(), None)),
            Request::ClientKill { filter } => {
                Response::Count(self.clients.borrow().kill(&filter, None))
            }
        }
    }

    /// The receiver loop for messages from one peer shard.
    pub async fn serve_peer(
        self: Rc<Self>,
        peer: usize,
        receiver: glommio::channels::shared_channel::ConnectedReceiver<crate::mesh::Message>,
    ) {
        use crate::mesh::Message;
        while let Some(message) = receiver.recv().await {
            let mesh = self.mesh.as_ref().expect("mesh");
            match message {
                Message::Request { from, id, request } => {
                    let response = self.serve(request);
                    mesh.respond(from, id, response);
                }
                Message::Response { id, response } => mesh.complete(id, response),
            }
        }
        tracing::debug!(shard = self.id, peer, "peer channel closed");
    }
}
