//! MIGRATE host port key|"" destination-db timeout [COPY] [REPLACE] [AUTH password |
//! AUTH2 username password] [KEYS key …]: moves keys to another server, as Redis does. Each
//! key is DUMPed with its time to live on the shard that holds it, the lot is sent to the
//! target in one pipeline of RESTORE-ASKING (after AUTH and SELECT when asked), and each key
//! the target acknowledged is deleted here (unless COPY). `redis-cli --cluster reshard`
//! moves a slot's keys this way, with the DUMP payloads WeTask already writes. A queue of
//! that name goes along: TASK.EXPORT takes it out here and TASK.IMPORT takes it in there
//! (put back here if the target refuses it).
//!
//! The target is reached from a thread of its own with a blocking socket bounded by the
//! timeout (`shard::offload`), so a dead or slow target holds this connection only, never
//! the shard.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use wetask_protocol::{encode_command, Frame, FrameDecoder, Limits};
use wetask_shards::args::{is, parse_i64};
use wetask_shards::slot::shard_of;

use crate::routing::{send_one, single_reply, Target};
use crate::shard::ShardCtx;

/// What MIGRATE's arguments ask for.
struct Migration {
    address: String,
    db: i64,
    timeout: Duration,
    copy: bool,
    replace: bool,
    auth: Vec<Bytes>,
    keys: Vec<Bytes>,
}

/// What MIGRATE sends of one name: a key's DUMP payload and time to live, or a queue's
/// TASK.EXPORT payload (already taken out of this node's engine).
enum Item {
    Key {
        name: Bytes,
        payload: Bytes,
        ttl: i64,
    },
    Queue {
        name: Bytes,
        payload: Bytes,
    },
}

/// MIGRATE, for a connection on database `at.db`.
pub async fn migrate(ctx: &Rc<ShardCtx>, at: Target, args: &[Bytes]) -> Frame {
    let migration = match parse(args) {
        Ok(migration) => migration,
        Err(err) => return err,
    };
    let mut in_flight = InFlight {
        ctx,
        db: at.db,
        keys: Vec::new(),
        slots: Vec::new(),
    };
    let found = match take_payloads(ctx, at, &migration.keys, &mut in_flight).await {
        Ok(found) => found,
        Err(err) => return err,
    };
    if found.is_empty() {
        return Frame::Simple(Bytes::from_static(b"NOKEY"));
    }
    let replies = match exchange(ctx, &migration, &found).await {
        Ok(replies) => replies,
        Err(err) => {
            // Nothing reached the target: the queues taken out come back.
            for item in &found {
                if let Item::Queue { name, payload } = item {
                    put_back(ctx, at, name, payload).await;
                }
            }
            return err;
        }
    };
    // As Redis: the keys the target took are deleted (unless COPY); the first refusal is the
    // reply. A queue the target refused (or a COPY's) comes back here.
    let mut first_error = None;
    for (item, reply) in found.iter().zip(&replies) {
        let taken = !reply.is_error();
        if let Frame::Error(text) = reply {
            first_error.get_or_insert_with(|| target_refused(text));
        }
        match item {
            Item::Key { name, .. } if taken && !migration.copy => {
                run_on_owner(ctx, at, vec![Bytes::from_static(b"DEL"), name.clone()]).await;
            }
            Item::Queue { name, payload } if !taken || migration.copy => {
                put_back(ctx, at, name, payload).await;
            }
            _ => {}
        }
    }
    drop(in_flight);
    first_error.unwrap_or_else(Frame::ok)
}

/// Imports a queue MIGRATE took out back into this node.
async fn put_back(ctx: &Rc<ShardCtx>, at: Target, name: &Bytes, payload: &Bytes) {
    let import = vec![
        Bytes::from_static(b"TASK.IMPORT"),
        name.clone(),
        payload.clone(),
    ];
    if let Frame::Error(e) = run_on_owner(ctx, at, import).await {
        tracing::error!(queue = %String::from_utf8_lossy(name), error = %String::from_utf8_lossy(&e), "MIGRATE could not put a queue back");
    }
}

/// The names of this shard a MIGRATE is sending (in `ShardCtx::keys_in_flight`), and the
/// slots of the queues among them (in `ShardCtx::slots_in_flight`), until it ends, however
/// it ends.
struct InFlight<'a> {
    ctx: &'a ShardCtx,
    db: usize,
    keys: Vec<Bytes>,
    slots: Vec<u16>,
}

impl InFlight<'_> {
    fn add(&mut self, key: &Bytes) {
        self.ctx
            .keys_in_flight
            .borrow_mut()
            .insert((self.db, key.clone()));
        self.keys.push(key.clone());
    }

    fn add_slot(&mut self, slot: u16) {
        *self
            .ctx
            .slots_in_flight
            .borrow_mut()
            .entry(slot)
            .or_default() += 1;
        self.slots.push(slot);
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut set = self.ctx.keys_in_flight.borrow_mut();
        for key in self.keys.drain(..) {
            set.remove(&(self.db, key));
        }
        let mut slots = self.ctx.slots_in_flight.borrow_mut();
        for slot in self.slots.drain(..) {
            if let Some(count) = slots.get_mut(&slot) {
                *count -= 1;
                if *count == 0 {
                    slots.remove(&slot);
                }
            }
        }
    }
}

/// What each name has to send: its key's DUMP payload and time to live, and its queue's
/// TASK.EXPORT payload (missing names are left out). A name of this shard is read (and a
/// queue taken out) and marked in flight in one step, so that nothing slips between the
/// payload and the delete; a name of another local shard (MIGRATE on the shared port) is
/// read there, without that guard (docs/CLUSTER.md).
async fn take_payloads(
    ctx: &Rc<ShardCtx>,
    at: Target,
    names: &[Bytes],
    in_flight: &mut InFlight<'_>,
) -> Result<Vec<Item>, Frame> {
    let mut found = Vec::new();
    for name in names {
        let dump = vec![Bytes::from_static(b"DUMP"), name.clone()];
        let pttl = vec![Bytes::from_static(b"PTTL"), name.clone()];
        let export = vec![Bytes::from_static(b"TASK.EXPORT"), name.clone()];
        let (payload, ttl, queue) = if shard_of(name, ctx.shard_count) == ctx.id {
            let payload = run_here(ctx, at, &dump);
            let ttl = run_here(ctx, at, &pttl);
            let queue = run_here(ctx, at, &export);
            if matches!(payload, Frame::Bulk(_)) || matches!(queue, Frame::Bulk(_)) {
                in_flight.add(name);
            }
            if matches!(queue, Frame::Bulk(_)) {
                in_flight.add_slot(wetask_shards::slot::key_slot(name));
            }
            (payload, ttl, queue)
        } else {
            let payload = run_on_owner(ctx, at, dump).await;
            let ttl = run_on_owner(ctx, at, pttl).await;
            (payload, ttl, run_on_owner(ctx, at, export).await)
        };
        if let Frame::Bulk(payload) = queue {
            found.push(Item::Queue {
                name: name.clone(),
                payload,
            });
        }
        let payload = match payload {
            Frame::Bulk(payload) => payload,
            Frame::Null => continue,
            other => return Err(other),
        };
        let ttl = match ttl {
            Frame::Integer(ttl) if ttl > 0 => ttl,
            _ => 0,
        };
        found.push(Item::Key {
            name: name.clone(),
            payload,
            ttl,
        });
    }
    Ok(found)
}

fn parse(args: &[Bytes]) -> Result<Migration, Frame> {
    let syntax = || Frame::static_error("ERR syntax error");
    let integer = || Frame::static_error("ERR value is not an integer or out of range");
    let host = String::from_utf8_lossy(&args[1]).into_owned();
    let port = parse_i64(&args[2])
        .filter(|p| (0..=65535).contains(p))
        .ok_or_else(integer)?;
    let db = parse_i64(&args[4])
        .filter(|d| *d >= 0)
        .ok_or_else(integer)?;
    let timeout = parse_i64(&args[5]).ok_or_else(integer)?;
    let mut migration = Migration {
        address: if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        },
        db,
        timeout: Duration::from_millis(if timeout <= 0 { 1000 } else { timeout as u64 }),
        copy: false,
        replace: false,
        auth: Vec::new(),
        keys: Vec::new(),
    };
    let mut at = 6;
    while at < args.len() {
        let arg = &args[at];
        if is(arg, "copy") {
            migration.copy = true;
        } else if is(arg, "replace") {
            migration.replace = true;
        } else if is(arg, "auth") && at + 1 < args.len() {
            migration.auth = vec![Bytes::from_static(b"AUTH"), args[at + 1].clone()];
            at += 1;
        } else if is(arg, "auth2") && at + 2 < args.len() {
            migration.auth = vec![
                Bytes::from_static(b"AUTH"),
                args[at + 1].clone(),
                args[at + 2].clone(),
            ];
            at += 2;
        } else if is(arg, "keys") {
            if !args[3].is_empty() {
                return Err(Frame::static_error(
                    "ERR When using MIGRATE KEYS option, the key argument must be set to the empty string",
                ));
            }
            migration.keys = args[at + 1..].to_vec();
            break;
        } else {
            return Err(syntax());
        }
        at += 1;
    }
    if migration.keys.is_empty() {
        if args[3].is_empty() {
            return Err(syntax());
        }
        migration.keys.push(args[3].clone());
    }
    Ok(migration)
}

/// Sends the RESTORE-ASKINGs (after AUTH and SELECT) and reads a reply per key, on a thread
/// of its own (`shard::offload`: glommio's socket would wait for the loop's cron tick at
/// every step).
async fn exchange(
    ctx: &ShardCtx,
    migration: &Migration,
    found: &[Item],
) -> Result<Vec<Frame>, Frame> {
    let (out, preamble) = pipeline(migration, found);
    let (address, timeout, expected) = (
        migration.address.clone(),
        migration.timeout,
        preamble + found.len(),
    );
    let answer = ctx.off_shard(move || talk(&address, timeout, &out, expected));
    let mut replies = match answer {
        Some(answer) => answer.await?,
        None => return Err(Frame::static_error("ERR cannot start MIGRATE's thread")),
    };
    let restores = replies.split_off(preamble);
    if let Some(Frame::Error(text)) = replies.into_iter().find(|r| r.is_error()) {
        return Err(target_refused(&text));
    }
    Ok(restores)
}

/// Connects to `address`, writes `out` and reads `expected` replies, each step bounded by
/// `timeout` (Redis's MIGRATE time-out is one of its socket's waits, too).
fn talk(
    address: &str,
    timeout: Duration,
    out: &[u8],
    expected: usize,
) -> Result<Vec<Frame>, Frame> {
    let io_error =
        |what: &str| Frame::error(format!("IOERR error or timeout {what} target instance"));
    let connect_error = || Frame::static_error("IOERR error or timeout connecting to the client");
    let mut stream = address
        .to_socket_addrs()
        .map_err(|_| connect_error())?
        .find_map(|at| TcpStream::connect_timeout(&at, timeout).ok())
        .ok_or_else(connect_error)?;
    let _ = stream.set_read_timeout(Some(timeout));
    let _ = stream.set_write_timeout(Some(timeout));
    let _ = stream.set_nodelay(true);
    stream.write_all(out).map_err(|_| io_error("writing to"))?;
    let mut decoder = FrameDecoder::new(Limits::default());
    let mut buffer = BytesMut::with_capacity(4096);
    let mut replies = Vec::with_capacity(expected);
    let mut chunk = vec![0u8; 16384];
    while replies.len() < expected {
        match decoder.decode(&mut buffer) {
            Ok(Some(frame)) => {
                replies.push(frame);
                continue;
            }
            Ok(None) => {}
            Err(_) => return Err(io_error("reading from")),
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return Err(io_error("reading from")),
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
    Ok(replies)
}

/// MIGRATE's reply when the target refused a command, as Redis words it.
fn target_refused(text: &[u8]) -> Frame {
    Frame::error(format!(
        "ERR Target instance replied with error: {}",
        String::from_utf8_lossy(text)
    ))
}

/// The commands MIGRATE sends: AUTH (when asked) and SELECT, then a RESTORE-ASKING per
/// key and a TASK.IMPORT per queue. Also how many come before the RESTOREs.
fn pipeline(migration: &Migration, found: &[Item]) -> (Vec<u8>, usize) {
    let mut out = Vec::new();
    let mut preamble = 0;
    if !migration.auth.is_empty() {
        encode_command(&mut out, &migration.auth);
        preamble += 1;
    }
    encode_command(
        &mut out,
        &[
            Bytes::from_static(b"SELECT"),
            Bytes::from(migration.db.to_string()),
        ],
    );
    preamble += 1;
    for item in found {
        let command = match item {
            Item::Key { name, payload, ttl } => {
                let mut command = vec![
                    Bytes::from_static(b"RESTORE-ASKING"),
                    name.clone(),
                    Bytes::from(ttl.to_string()),
                    payload.clone(),
                ];
                if migration.replace {
                    command.push(Bytes::from_static(b"REPLACE"));
                }
                command
            }
            Item::Queue { name, payload } => vec![
                Bytes::from_static(b"TASK.IMPORT"),
                name.clone(),
                payload.clone(),
            ],
        };
        encode_command(&mut out, &command);
    }
    (out, preamble)
}

/// Runs `args` (a one-key command) on the shard that holds its key.
async fn run_on_owner(ctx: &Rc<ShardCtx>, at: Target, args: Vec<Bytes>) -> Frame {
    let owner = shard_of(&args[1], ctx.shard_count);
    if owner == ctx.id {
        return run_here(ctx, at, &args);
    }
    let spec = wetask_shards::table::lookup(&args[0]).expect("a known command");
    single_reply(send_one(ctx, owner, at, spec, args).await)
}

/// Runs `args` (a one-key command of this shard) here, at once.
fn run_here(ctx: &ShardCtx, at: Target, args: &[Bytes]) -> Frame {
    let spec = wetask_shards::table::lookup(&args[0]).expect("a known command");
    crate::routing::local(ctx, at, spec, args)
}
