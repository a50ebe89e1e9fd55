//! MIGRATE host port key|"" destination-db timeout [COPY] [REPLACE] [AUTH password |
//! AUTH2 username password] [KEYS key …]: moves keys to another server, as Redis does. Each
//! key is DUMPed with its time to live on the shard that holds it, the lot is sent to the
//! target in one pipeline of RESTORE-ASKING (after AUTH and SELECT when asked), and each key
//! the target acknowledged is deleted here (unless COPY). `redis-cli --cluster reshard`
//! moves a slot's keys this way, with the DUMP payloads WeTask already writes. Queues move
//! the same way once they are keys of their slot (docs/CLUSTER.md says where that stands).
//!
//! The target is reached through glommio's socket on this shard's executor, bounded by the
//! timeout, so a dead or slow target holds this connection only, never the shard.

use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use wetask_protocol::{Frame, FrameDecoder, Limits};
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
    };
    let found = match take_payloads(ctx, at, &migration.keys, &mut in_flight).await {
        Ok(found) => found,
        Err(err) => return err,
    };
    if found.is_empty() {
        return Frame::Simple(Bytes::from_static(b"NOKEY"));
    }
    let replies = match exchange(&migration, &found).await {
        Ok(replies) => replies,
        Err(err) => return err,
    };
    // As Redis: the keys the target took are deleted (unless COPY); the first refusal is the
    // reply.
    let mut first_error = None;
    for ((key, _, _), reply) in found.iter().zip(&replies) {
        match reply {
            Frame::Error(text) => {
                first_error.get_or_insert_with(|| {
                    Frame::error(format!(
                        "ERR Target instance replied with error: {}",
                        String::from_utf8_lossy(text)
                    ))
                });
            }
            _ if migration.copy => {}
            _ => {
                run_on_owner(ctx, at, vec![Bytes::from_static(b"DEL"), key.clone()]).await;
            }
        }
    }
    drop(in_flight);
    first_error.unwrap_or_else(Frame::ok)
}

/// The keys of this shard a MIGRATE is sending, in `ShardCtx::keys_in_flight` until it
/// ends, however it ends.
struct InFlight<'a> {
    ctx: &'a ShardCtx,
    db: usize,
    keys: Vec<Bytes>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut set = self.ctx.keys_in_flight.borrow_mut();
        for key in self.keys.drain(..) {
            set.remove(&(self.db, key));
        }
    }
}

/// Each key's DUMP payload and time to live (missing keys are left out). A key of this
/// shard is read and marked in flight in one step, so that no write slips between the
/// payload and the delete; a key of another local shard (MIGRATE on the shared port) is
/// read there, without that guard (docs/CLUSTER.md).
async fn take_payloads(
    ctx: &Rc<ShardCtx>,
    at: Target,
    keys: &[Bytes],
    in_flight: &mut InFlight<'_>,
) -> Result<Vec<(Bytes, Bytes, i64)>, Frame> {
    let mut found = Vec::new();
    for key in keys {
        let dump = vec![Bytes::from_static(b"DUMP"), key.clone()];
        let pttl = vec![Bytes::from_static(b"PTTL"), key.clone()];
        let (payload, ttl) = if shard_of(key, ctx.shard_count) == ctx.id {
            let payload = run_here(ctx, at, &dump);
            let ttl = run_here(ctx, at, &pttl);
            if matches!(payload, Frame::Bulk(_)) {
                ctx.keys_in_flight.borrow_mut().insert((at.db, key.clone()));
                in_flight.keys.push(key.clone());
            }
            (payload, ttl)
        } else {
            let payload = run_on_owner(ctx, at, dump).await;
            (payload, run_on_owner(ctx, at, pttl).await)
        };
        let payload = match payload {
            Frame::Bulk(payload) => payload,
            Frame::Null => continue,
            other => return Err(other),
        };
        let ttl = match ttl {
            Frame::Integer(ttl) if ttl > 0 => ttl,
            _ => 0,
        };
        found.push((key.clone(), payload, ttl));
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

/// Sends the RESTORE-ASKINGs (after AUTH and SELECT) and reads a reply per key.
async fn exchange(
    migration: &Migration,
    found: &[(Bytes, Bytes, i64)],
) -> Result<Vec<Frame>, Frame> {
    let io_error =
        |what: &str| Frame::error(format!("IOERR error or timeout {what} target instance"));
    let connect = glommio::net::TcpStream::connect_timeout(&migration.address, migration.timeout);
    let mut stream = connect
        .await
        .map_err(|_| Frame::static_error("IOERR error or timeout connecting to the client"))?;
    let _ = stream.set_read_timeout(Some(migration.timeout));
    let _ = stream.set_write_timeout(Some(migration.timeout));
    let (out, preamble) = pipeline(migration, found);
    stream
        .write_all(&out)
        .await
        .map_err(|_| io_error("writing to"))?;
    let mut decoder = FrameDecoder::new(Limits::default());
    let mut buffer = BytesMut::with_capacity(4096);
    let mut replies = Vec::with_capacity(preamble + found.len());
    let mut chunk = vec![0u8; 16384];
    while replies.len() < preamble + found.len() {
        match decoder.decode(&mut buffer) {
            Ok(Some(frame)) => {
                replies.push(frame);
                continue;
            }
            Ok(None) => {}
            Err(_) => return Err(io_error("reading from")),
        }
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|_| io_error("reading from"))?;
        if n == 0 {
            return Err(io_error("reading from"));
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    let restores = replies.split_off(preamble);
    if let Some(Frame::Error(text)) = replies.into_iter().find(|r| r.is_error()) {
        return Err(Frame::error(format!(
            "ERR Target instance replied with error: {}",
            String::from_utf8_lossy(&text)
        )));
    }
    Ok(restores)
}

/// The commands MIGRATE sends: AUTH (when asked) and SELECT, then a RESTORE-ASKING per
/// key. Also how many come before the RESTOREs.
fn pipeline(migration: &Migration, found: &[(Bytes, Bytes, i64)]) -> (Vec<u8>, usize) {
    let mut out = Vec::new();
    let mut preamble = 0;
    if !migration.auth.is_empty() {
        encode(&mut out, &migration.auth);
        preamble += 1;
    }
    encode(
        &mut out,
        &[
            Bytes::from_static(b"SELECT"),
            Bytes::from(migration.db.to_string()),
        ],
    );
    preamble += 1;
    for (key, payload, ttl) in found {
        let mut command = vec![
            Bytes::from_static(b"RESTORE-ASKING"),
            key.clone(),
            Bytes::from(ttl.to_string()),
            payload.clone(),
        ];
        if migration.replace {
            command.push(Bytes::from_static(b"REPLACE"));
        }
        encode(&mut out, &command);
    }
    (out, preamble)
}

fn encode(out: &mut Vec<u8>, args: &[Bytes]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
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
