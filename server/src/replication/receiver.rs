//! The replica's side of the link: one thread per `REPLICAOF` that handshakes on the
//! primary's client port (`AUTH`, then `REPLCONF WETASK`: its run id, shard count, stream
//! port and token), then runs one stream per shard into that shard's inbox, and starts
//! over (after a second) whenever a stream ends, until the next `REPLICAOF`.
//!
//! A stream continues from the position its inbox last received when it was synced in full
//! from the same primary run; otherwise it asks for a full sync. A thread per stream sends
//! the shard's applied position back as it moves (the shard unparks it), and once a second.

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};

use std::time::Duration;

use bytes::Bytes;
use wetask_protocol::Frame;

use super::link::{authenticate, connect, request, Env};
use super::wire::{self, Opening};
use super::{Inbox, Item, LinkState, Replication, INBOX_BYTES_MAX};
use crate::persist::Store;

/// A stream that hears nothing (not even a heartbeat) for this long is dropped.
const SILENCE_TIMEOUT: Duration = Duration::from_secs(60);
/// The pause before a new try.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// What `REPLCONF WETASK` told the replica.
struct Hello {
    run_id: String,
    shards: usize,
    stream_port: u16,
    token: String,
}

/// Starts following `host:port` (the link epoch was already bumped by the caller).
pub fn start(env: Env, epoch: u64, host: String, port: u16) {
    let spawned = std::thread::Builder::new()
        .name("repl-link".into())
        .spawn(move || link(&env, epoch, &host, port));
    if let Err(e) = spawned {
        tracing::error!("cannot start the replication link: {e}");
    }
}

fn current(env: &Env, epoch: u64) -> bool {
    env.replication.link_epoch.load(Ordering::Acquire) == epoch && !(env.stopping)()
}

/// Sleeps `pause` in small steps while the link is current.
fn pause(env: &Env, epoch: u64, pause: Duration) {
    let until = std::time::Instant::now() + pause;
    while current(env, epoch) && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn link(env: &Env, epoch: u64, host: &str, port: u16) {
    let replication = &env.replication;
    let replica_id = super::random_hex(16);
    // Nothing is applied (so journaled) before the last clean exit's file is gone for good.
    while !replication.resume_cleared.load(Ordering::Acquire) && current(env, epoch) {
        std::thread::sleep(Duration::from_millis(5));
    }
    while current(env, epoch) {
        replication.set_link(epoch, LinkState::Connecting);
        let hello = match handshake(host, port, &env.auth) {
            Ok(None) => {
                follow_redis(env, epoch, host, port);
                return;
            }
            Ok(Some(hello)) if hello.shards != env.shard_count => Err(format!(
                "the primary runs {} shards and this node {}: start the replica with --shards {}",
                hello.shards, env.shard_count, hello.shards
            )),
            Ok(Some(hello)) => Ok(hello),
            Err(e) => Err(e),
        };
        let hello = match hello {
            Ok(hello) => hello,
            Err(e) => {
                tracing::warn!(primary = %format!("{host}:{port}"), "replication link: {e}");
                replication.set_link(epoch, LinkState::Down(e));
                pause(env, epoch, RETRY_AFTER);
                continue;
            }
        };
        tracing::info!(primary = %format!("{host}:{port}"), run = %hello.run_id, "replicating");
        replication.set_link(epoch, LinkState::Syncing);
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            for shard in 0..env.shard_count {
                let (hello, replica_id, stop) = (&hello, &replica_id, &stop);
                scope.spawn(move || {
                    let result = stream(env, epoch, host, hello, replica_id, shard, stop);
                    if let Err(e) = result {
                        tracing::info!(shard, "replication stream ended: {e}");
                    }
                    // One stream down takes the others with it: the link starts over whole.
                    stop.store(true, Ordering::Release);
                    env.replication.links.close(Some(epoch));
                });
            }
            while !stop.load(Ordering::Acquire) && current(env, epoch) {
                let synced = replication
                    .inboxes
                    .iter()
                    .all(|inbox| inbox.synced.load(Ordering::Acquire));
                let state = if synced {
                    LinkState::Connected
                } else {
                    LinkState::Syncing
                };
                replication.set_link(epoch, state);
                std::thread::sleep(Duration::from_millis(20));
            }
            stop.store(true, Ordering::Release);
            replication.links.close(Some(epoch));
        });
        replication.set_link(
            epoch,
            LinkState::Down("the link to the primary was lost".into()),
        );
        pause(env, epoch, RETRY_AFTER);
    }
}

/// Follows a Redis primary (`from_redis`) until the link is replaced: a dropped session
/// starts over after a second, resuming from Redis's backlog when it can.
fn follow_redis(env: &Env, epoch: u64, host: &str, port: u16) {
    env.replication.follows_redis.store(true, Ordering::Release);
    // Where the last clean exit left this node's data, if it followed a redis-server then.
    let saved = env
        .replication
        .redis_saved
        .lock()
        .expect("redis saved")
        .take();
    let mut resume = saved.map(|(replid, offset)| {
        tracing::info!(%replid, offset, "continuing from where the last clean exit left the stream");
        super::from_redis::Resume::at(replid, offset)
    });
    while current(env, epoch) {
        env.replication.set_link(epoch, LinkState::Connecting);
        if let Err(e) = super::from_redis::session(env, epoch, host, port, &mut resume) {
            tracing::warn!(primary = %format!("{host}:{port}"), "replication from Redis: {e}");
            env.replication.set_link(epoch, LinkState::Down(e));
        }
        pause(env, epoch, RETRY_AFTER);
    }
}

/// AUTH (with `masteruser`/`masterauth` when set), then `REPLCONF WETASK 1`: the WeTask
/// primary's hello, or `None` for a Redis primary.
fn handshake(host: &str, port: u16, auth: &[String]) -> Result<Option<Hello>, String> {
    let mut conn = connect(host, port)?;
    authenticate(&mut conn, auth)?;
    // Option and value, as Redis's REPLCONF takes them: Redis then names the option it does
    // not know.
    let reply = request(&mut conn, &["REPLCONF".into(), "WETASK".into(), "1".into()])?;
    if matches!(&reply, Frame::Error(e) if e.starts_with(b"ERR Unrecognized REPLCONF option")) {
        // Not a WeTask node: a Redis primary, followed with Redis's own protocol.
        return Ok(None);
    }
    let Frame::Array(fields) = reply else {
        return Err(format!(
            "the primary is not a WeTask node that replicates: {}",
            describe(&reply)
        ));
    };
    let text = |f: Option<&Frame>| match f {
        Some(Frame::Bulk(b)) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    };
    let number = |f: Option<&Frame>| match f {
        Some(Frame::Integer(n)) => Some(*n),
        _ => None,
    };
    match (
        text(fields.first()),
        number(fields.get(1)),
        number(fields.get(2)),
        text(fields.get(3)),
    ) {
        (Some(run_id), Some(shards), Some(port), Some(token)) if shards > 0 && port > 0 => {
            Ok(Some(Hello {
                run_id,
                shards: shards as usize,
                stream_port: port.min(i64::from(u16::MAX)) as u16,
                token,
            }))
        }
        _ => Err("the primary's REPLCONF WETASK answer is malformed".into()),
    }
}

fn describe(frame: &Frame) -> String {
    match frame {
        Frame::Error(e) => String::from_utf8_lossy(e).into_owned(),
        Frame::Simple(s) => String::from_utf8_lossy(s).into_owned(),
        other => format!("{other:?}"),
    }
}

/// One shard's stream: the opening, the answer, then frames into the inbox until the
/// stream fails or `stop` is raised.
fn stream(
    env: &Env,
    epoch: u64,
    host: &str,
    hello: &Hello,
    replica_id: &str,
    shard: usize,
    stop: &AtomicBool,
) -> Result<(), String> {
    let replication = &env.replication;
    let inbox = &replication.inboxes[shard];
    let conn = connect(host, hello.stream_port)?;
    let _link = replication.links.add(&conn, epoch);
    if stop.load(Ordering::Acquire) || !current(env, epoch) {
        return Ok(());
    }
    let resume = {
        let run = inbox.run.lock().expect("inbox run");
        let whole = inbox.synced.load(Ordering::Acquire) && !inbox.broken.load(Ordering::Acquire);
        (whole && *run == hello.run_id)
            .then(|| (hello.run_id.clone(), inbox.received.load(Ordering::Acquire)))
    };
    let opening = Opening {
        token: hello.token.clone(),
        shard,
        replica_id: replica_id.to_string(),
        listening_port: env.listening_port,
        resume,
    };
    (&conn)
        .write_all(opening.line().as_bytes())
        .map_err(|e| e.to_string())?;
    let _ = conn.set_read_timeout(Some(SILENCE_TIMEOUT));
    let mut reader = BufReader::with_capacity(1 << 16, &conn);
    let answer = wire::read_line(&mut reader).map_err(|e| e.to_string())?;
    let (word, position) = answer.split_once(' ').unwrap_or((answer.as_str(), ""));
    let position: u64 = position.trim().parse().unwrap_or(0);
    match word {
        "+FULL" => {
            inbox.synced.store(false, Ordering::Release);
            inbox.broken.store(false, Ordering::Release);
            *inbox.run.lock().expect("inbox run") = hello.run_id.clone();
            inbox.received.store(position, Ordering::Release);
            push(env, epoch, shard, Item::FullStart);
        }
        "+CONTINUE" => {}
        _ => return Err(format!("the primary refused the stream: {answer}")),
    }
    std::thread::scope(|scope| {
        let acker = scope.spawn(|| ack_loop(&conn, inbox, env.store.as_deref(), stop));
        *inbox.acker.lock().expect("acker") = Some(acker.thread().clone());
        let result = frames(env, epoch, shard, &mut reader, stop, position);
        stop.store(true, Ordering::Release);
        *inbox.acker.lock().expect("acker") = None;
        acker.thread().unpark();
        result
    })
}

/// Reads frames into the shard's inbox.
fn frames(
    env: &Env,
    epoch: u64,
    shard: usize,
    reader: &mut impl Read,
    stop: &AtomicBool,
    full_at: u64,
) -> Result<(), String> {
    let replication = &env.replication;
    let inbox = &replication.inboxes[shard];
    let mut frames = 0u64;
    while !stop.load(Ordering::Acquire) {
        let (tag, payload) = wire::read_frame(reader).map_err(|e| e.to_string())?;
        frames += 1;
        if frames % 256 == 1 {
            replication.note_io();
        }
        match tag {
            wire::PART => push(env, epoch, shard, Item::Part(Bytes::from(payload))),
            // `synced` is raised by the shard once it has applied it.
            wire::SNAPSHOT_END => push(env, epoch, shard, Item::FullEnd { position: full_at }),
            wire::RECORD => {
                let position = wire::u64_at(&payload, 0).map_err(|e| e.to_string())?;
                let payload = Bytes::from(payload).slice(8..);
                push(env, epoch, shard, Item::Record { payload, position });
                inbox.received.store(position, Ordering::Release);
            }
            wire::FUNCTIONS => push(env, epoch, shard, Item::Functions(Bytes::from(payload))),
            wire::PUBLISH => {
                let (channel, message) = crate::pubsub_relay::decode(&payload)
                    .ok_or("the primary sent a malformed PUBLISH")?;
                // Replicas of this node hear it too, as down a Redis chain.
                replication.publishes.record(&channel, &message);
                env.relay.arrived(channel, message);
            }
            wire::HEARTBEAT => {
                let position = wire::u64_at(&payload, 0).map_err(|e| e.to_string())?;
                replication.note_io();
                push(env, epoch, shard, Item::Idle { position });
            }
            other => return Err(format!("an unknown frame {other}")),
        }
        while inbox.bytes.load(Ordering::Acquire) > INBOX_BYTES_MAX {
            if stop.load(Ordering::Acquire) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    Ok(())
}

/// Queues `item` for the shard, waking it when its inbox was empty.
fn push(env: &Env, epoch: u64, shard: usize, item: Item) {
    if env.replication.inboxes[shard].push(epoch, item) {
        env.doorbells[shard].ring();
    }
}

/// Sends the shard's applied position whenever it moves (the shard unparks this thread
/// after applying: [`Replication::wake_acks`]), and once a second; and the position its
/// journal's fsync covers, when that moves.
fn ack_loop(mut conn: &TcpStream, inbox: &Inbox, store: Option<&Store>, stop: &AtomicBool) {
    let mut last = u64::MAX;
    let mut sent_at = std::time::Instant::now();
    let mut fsync = super::fsync_watch::FsyncWatch::default();
    while !stop.load(Ordering::Acquire) {
        let applied = inbox.applied.load(Ordering::Acquire);
        if applied != last || sent_at.elapsed() >= Duration::from_secs(1) {
            if conn.write_all(&ack(wire::ACK, applied)).is_err() {
                return;
            }
            (last, sent_at) = (applied, std::time::Instant::now());
        }
        if let Some(store) = store {
            if let Some(fsynced) = fsync.moved(inbox.journaled.load(Ordering::Acquire), store) {
                if conn.write_all(&ack(wire::FSYNCED, fsynced)).is_err() {
                    return;
                }
            }
        }
        // A position written but not yet fsynced is looked at again soon (the everysec
        // syncer's round ends on its own, without waking this thread).
        let pause = match fsync.waits() {
            false => Duration::from_secs(1),
            true => Duration::from_millis(50),
        };
        std::thread::park_timeout(pause);
    }
}

/// An ack frame: its tag and a position.
fn ack(tag: u8, position: u64) -> [u8; 9] {
    let mut ack = [0u8; 9];
    ack[0] = tag;
    ack[1..].copy_from_slice(&position.to_le_bytes());
    ack
}

impl Replication {
    /// Wakes the ack thread of `shard`'s stream, if any (after the shard applied).
    pub fn wake_acks(&self, shard: usize) {
        if let Some(thread) = self.inboxes[shard].acker.lock().expect("acker").as_ref() {
            thread.unpark();
        }
    }
}
