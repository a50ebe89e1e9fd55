//! The primary's side: a listener on `repl-port`, and per replica shard stream a thread
//! that reads that shard's journal files and sends them (module docs of `replication`).
//!
//! Reading the files rather than taking records from the shard keeps the shards out of it:
//! a replica costs the primary's shard threads nothing, a slow replica holds only its own
//! thread, and the backlog a replica resumes from is the journal itself. A segment is read
//! as it is written: a record only partly written yet fails its checksum and is read again
//! later; once the next segment exists, this one was trimmed and synced whole.

use std::fs::File;
use std::io::{BufWriter, ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wetask_shards::persist::journal::record;

use super::wire::{self, Opening};
use super::{constant_time_eq, Peer, Replication};
use crate::persist::{files, load, Store};

/// A replica that takes nothing for this long is dropped (Redis's `repl-timeout`).
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an idle stream sleeps between looks at the journal, at most.
const IDLE_POLL_MAX: Duration = Duration::from_millis(2);
/// How often an idle stream tells the replica the primary's clock.
const HEARTBEAT_EVERY: Duration = Duration::from_millis(100);
/// Bytes read from a segment per look, when records are coming.
const READ_CHUNK: usize = 256 << 10;
/// Streams served at once (a replica opens one per shard).
const STREAMS_MAX: usize = 1024;

/// Starts the listener on `bind:port` (0: a free port) and returns the port it took.
pub fn spawn(
    replication: Arc<Replication>,
    store: Arc<Store>,
    bind: &str,
    port: u16,
) -> Result<u16, String> {
    let listener = TcpListener::bind((bind, port))
        .map_err(|e| format!("cannot listen for replicas on {bind}:{port}: {e}"))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    replication.listen_port.store(port, Ordering::Release);
    std::thread::Builder::new()
        .name("repl-listen".into())
        .spawn(move || {
            let active = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                if active.load(Ordering::Acquire) >= STREAMS_MAX {
                    continue;
                }
                let (replication, store, active) =
                    (replication.clone(), store.clone(), active.clone());
                active.fetch_add(1, Ordering::AcqRel);
                let spawned =
                    std::thread::Builder::new()
                        .name("repl-send".into())
                        .spawn(move || {
                            serve(&replication, &store, conn);
                            active.fetch_sub(1, Ordering::AcqRel);
                        });
                if spawned.is_err() {
                    tracing::warn!("no thread for a replica's stream");
                }
            }
        })
        .map_err(|e| format!("cannot start the replication listener: {e}"))?;
    Ok(port)
}

/// Serves one shard stream until the replica goes or the stream fails.
fn serve(replication: &Replication, store: &Store, conn: TcpStream) {
    let ip = conn
        .peer_addr()
        .map(|a| a.ip().to_string())
        .unwrap_or_default();
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = match conn.try_clone() {
        Ok(c) => c,
        Err(_) => return,
    };
    let opening = match wire::read_line(&mut reader)
        .map_err(|e| e.to_string())
        .and_then(|line| Opening::parse(&line))
    {
        Ok(opening) => opening,
        Err(e) => {
            let _ = (&conn).write_all(format!("-ERR {e}\n").as_bytes());
            return;
        }
    };
    if let Err(e) = admit(replication, store, &opening) {
        let _ = (&conn).write_all(format!("-ERR {e}\n").as_bytes());
        return;
    }
    let peer = replication.peer(
        &opening.replica_id,
        &ip,
        opening.listening_port,
        store.shard_count,
    );
    peer.streams.fetch_add(1, Ordering::AcqRel);
    replication.served.store(true, Ordering::Release);
    let _link = replication.sender_links.add(&conn, 0);
    let acks = spawn_ack_reader(reader, peer.clone(), opening.shard);
    let _ = conn.set_write_timeout(Some(WRITE_TIMEOUT));
    let _ = conn.set_nodelay(true);
    let shard = opening.shard;
    if let Err(e) = stream(replication, store, &conn, &opening, &peer) {
        tracing::info!(replica = %peer.id, shard, "replication stream ended: {e}");
    }
    let _ = conn.shutdown(std::net::Shutdown::Both);
    if let Some(acks) = acks {
        let _ = acks.join();
    }
    replication.stream_closed(&peer);
}

/// Refuses a stream that names a wrong token or shard.
fn admit(replication: &Replication, store: &Store, opening: &Opening) -> Result<(), String> {
    if !constant_time_eq(opening.token.as_bytes(), replication.token.as_bytes()) {
        return Err("bad replication token (ask REPLCONF WETASK again)".into());
    }
    if opening.shard >= store.shard_count {
        return Err(format!(
            "no shard {} here ({} shards)",
            opening.shard, store.shard_count
        ));
    }
    if !replication.resume_cleared.load(Ordering::Acquire) {
        return Err("this node is starting; try again".into());
    }
    Ok(())
}

/// Reads the replica's acks (applied, and fsynced) into `peer` until the connection closes.
fn spawn_ack_reader(
    mut reader: TcpStream,
    peer: Arc<Peer>,
    shard: usize,
) -> Option<std::thread::JoinHandle<()>> {
    let _ = reader.set_read_timeout(Some(WRITE_TIMEOUT));
    std::thread::Builder::new()
        .name("repl-acks".into())
        .spawn(move || {
            let mut ack = [0u8; 9];
            while reader.read_exact(&mut ack).is_ok() {
                let position = u64::from_le_bytes(ack[1..].try_into().expect("8 bytes"));
                let at = match ack[0] {
                    wire::ACK => &peer.acked[shard],
                    wire::FSYNCED => &peer.fsynced[shard],
                    _ => break,
                };
                at.fetch_max(position, Ordering::AcqRel);
                peer.last_ack_ms
                    .store(crate::clock::unix_ms(), Ordering::Release);
            }
            let _ = reader.shutdown(std::net::Shutdown::Both);
        })
        .ok()
}

/// The segments a stream reads, opened at once (a compaction may remove them later; an
/// open file stays readable).
struct Plan {
    snapshot: Option<File>,
    segments: Vec<(u64, File)>,
}

/// Opens the newest snapshot of `shard` and every segment after it; tries again if a
/// compaction removed one between the listing and the opening.
fn open_plan(store: &Store, shard: usize) -> Result<Plan, String> {
    let layout = store.layout();
    'listing: for _ in 0..10 {
        let found = files::list(&store.path, shard, layout).map_err(|e| e.to_string())?;
        let (base, gens) = found.plan();
        let snapshot = match base {
            Some(gen) => match File::open(files::snapshot(&store.path, shard, layout, gen)) {
                Ok(file) => Some(file),
                Err(e) if e.kind() == ErrorKind::NotFound => continue 'listing,
                Err(e) => return Err(e.to_string()),
            },
            None => None,
        };
        let mut segments = Vec::new();
        for gen in gens {
            match File::open(files::journal(&store.path, shard, layout, gen)) {
                Ok(file) => segments.push((gen, file)),
                // A compaction folded it away meanwhile: list again.
                Err(e) if e.kind() == ErrorKind::NotFound => continue 'listing,
                Err(e) => return Err(e.to_string()),
            }
        }
        if !segments.is_empty() {
            return Ok(Plan { snapshot, segments });
        }
    }
    Err("the journal kept changing while it was opened".into())
}

/// Where a stream starts: its answer line's word, and the segments to read from.
fn start(
    replication: &Replication,
    store: &Store,
    opening: &Opening,
) -> Result<(&'static str, Plan, u64), String> {
    let shard = opening.shard;
    if let Some((run, position)) = &opening.resume {
        let (gen, offset) = wire::unpack(*position);
        let path = files::journal(&store.path, shard, store.layout(), gen);
        if *run == replication.run_id() {
            if let Ok(file) = File::open(path) {
                let len = file.metadata().map(|m| m.len()).unwrap_or(0);
                if offset <= len {
                    let plan = Plan {
                        snapshot: None,
                        segments: vec![(gen, file)],
                    };
                    return Ok(("CONTINUE", plan, offset));
                }
            }
        }
    }
    Ok(("FULL", open_plan(store, shard)?, 0))
}

/// Sends the stream: the snapshot on a full sync, then every segment's records, for as
/// long as the replica takes them.
fn stream(
    replication: &Replication,
    store: &Store,
    conn: &TcpStream,
    opening: &Opening,
    peer: &Peer,
) -> Result<(), String> {
    let (word, plan, mut offset) = start(replication, store, opening)?;
    let counter = match (word, opening.resume.is_some()) {
        ("CONTINUE", _) => &replication.sync_partial_ok,
        (_, true) => {
            replication.sync_partial_err.fetch_add(1, Ordering::Relaxed);
            &replication.sync_full
        }
        _ => &replication.sync_full,
    };
    counter.fetch_add(1, Ordering::Relaxed);
    let mut out = BufWriter::with_capacity(1 << 16, conn);
    let (mut gen, _) = plan.segments[0];
    let io = |e: std::io::Error| e.to_string();
    out.write_all(format!("+{word} {}\n", wire::pack(gen, offset)).as_bytes())
        .map_err(io)?;
    if word == "FULL" {
        if let Some(snapshot) = plan.snapshot {
            load::snapshot_parts(snapshot, "snapshot", &mut |part| {
                wire::write_frame(&mut out, wire::PART, &[part]).map_err(|e| e.to_string())
            })?;
        }
        wire::write_frame(&mut out, wire::SNAPSHOT_END, &[]).map_err(io)?;
    }
    // Shard 0's stream carries the PUBLISH messages from here on (`publishes`), counted
    // before the stream shows online.
    let _publishing = (opening.shard == 0).then(|| Publishing::new(&replication.publishes));
    peer.online.fetch_add(1, Ordering::AcqRel);
    let result = follow(
        replication,
        store,
        opening.shard,
        &mut out,
        plan.segments,
        &mut gen,
        &mut offset,
    );
    peer.online.fetch_sub(1, Ordering::AcqRel);
    result
}

/// Streams records from `segments` on, then from each newer segment as it appears; on
/// shard 0's stream, the function libraries too, at once and after each change.
fn follow(
    replication: &Replication,
    store: &Store,
    shard: usize,
    out: &mut BufWriter<&TcpStream>,
    segments: Vec<(u64, File)>,
    gen: &mut u64,
    offset: &mut u64,
) -> Result<(), String> {
    let io = |e: std::io::Error| e.to_string();
    let mut queued: std::collections::VecDeque<(u64, File)> = segments.into();
    let (_, mut file) = queued.pop_front().expect("a segment");
    let mut buf = Vec::new();
    let mut idle = Duration::from_micros(50);
    let mut last_sent = Instant::now();
    let published = &store.shards[shard].position;
    let mut functions_sent = 0;
    let mut published_sent = replication.publishes.last();
    loop {
        if shard == 0 && replication.functions_epoch() != functions_sent {
            let (epoch, dump) = replication.functions();
            wire::write_frame(out, wire::FUNCTIONS, &[&dump]).map_err(io)?;
            out.flush().map_err(io)?;
            functions_sent = epoch;
        }
        if shard == 0 && send_publishes(&replication.publishes, out, &mut published_sent)? {
            idle = Duration::from_micros(50);
        }
        // The journal publishes where it ends after each write and rotation: while that
        // has not moved past this stream, there is nothing to read (no syscall a look).
        let moved = published.load(Ordering::Acquire) > wire::pack(*gen, *offset);
        if moved || !queued.is_empty() {
            let sent = send_records(&file, *gen, offset, &mut buf, out)?;
            // Whatever was found goes now: under a steady trickle of records, waiting for
            // the buffer to fill held them back for 100 ms and more.
            out.flush().map_err(io)?;
            if sent > 0 {
                idle = Duration::from_micros(50);
                last_sent = Instant::now();
                continue;
            }
            // Nothing new here: a newer segment means this one is whole (read it once
            // more).
            let next = match queued.pop_front() {
                Some(next) => Some(next),
                None => File::open(files::journal(&store.path, shard, store.layout(), *gen + 1))
                    .ok()
                    .map(|f| (*gen + 1, f)),
            };
            if let Some((next_gen, next_file)) = next {
                while send_records(&file, *gen, offset, &mut buf, out)? > 0 {}
                (*gen, file, *offset) = (next_gen, next_file, 0);
                continue;
            }
        }
        if last_sent.elapsed() >= HEARTBEAT_EVERY {
            if passed_by(store, shard, *gen)? {
                return Err("a compaction removed the next segment before it was read: the replica syncs in full".into());
            }
            let position = wire::pack(*gen, *offset).to_le_bytes();
            wire::write_frame(out, wire::HEARTBEAT, &[&position]).map_err(io)?;
            out.flush().map_err(io)?;
            last_sent = Instant::now();
        }
        std::thread::sleep(idle);
        idle = (idle * 2).min(IDLE_POLL_MAX);
    }
}

/// Sends the PUBLISH messages logged after number `sent` (moved on to the newest); true
/// when there were some.
fn send_publishes(
    publishes: &super::publishes::Publishes,
    out: &mut BufWriter<&TcpStream>,
    sent: &mut u64,
) -> Result<bool, String> {
    if publishes.last() == *sent {
        return Ok(false);
    }
    let (bodies, newest) = publishes.since(*sent);
    for body in &bodies {
        wire::write_frame(out, wire::PUBLISH, &[body]).map_err(|e| e.to_string())?;
    }
    out.flush().map_err(|e| e.to_string())?;
    *sent = newest;
    Ok(true)
}

/// A shard-0 stream, counted while it lives: messages are logged only while one does.
struct Publishing<'a>(&'a super::publishes::Publishes);

impl<'a> Publishing<'a> {
    fn new(publishes: &'a super::publishes::Publishes) -> Self {
        publishes.streams.fetch_add(1, Ordering::AcqRel);
        Publishing(publishes)
    }
}

impl Drop for Publishing<'_> {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::AcqRel);
    }
}

/// True when the segment after `gen` is gone but a later one exists: a compaction folded
/// it into a snapshot before this stream read it (it fell that far behind).
fn passed_by(store: &Store, shard: usize, gen: u64) -> Result<bool, String> {
    let found = files::list(&store.path, shard, store.layout()).map_err(|e| e.to_string())?;
    Ok(!found.journals.contains(&(gen + 1)) && found.journals.iter().any(|&g| g > gen + 1))
}

/// Sends the whole records of `file` from `offset` on; returns how many.
fn send_records(
    file: &File,
    gen: u64,
    offset: &mut u64,
    buf: &mut Vec<u8>,
    out: &mut BufWriter<&TcpStream>,
) -> Result<usize, String> {
    let io = |e: std::io::Error| e.to_string();
    // The first record's header first, to size the read to it.
    buf.resize(record::HEADER_BYTES, 0);
    let got = read_at(file, buf, *offset).map_err(io)?;
    if got < record::HEADER_BYTES || buf.iter().all(|&b| b == 0) {
        return Ok(0);
    }
    let first = u32::from_le_bytes(buf[..4].try_into().expect("4 bytes")) as usize;
    let want = READ_CHUNK.max(record::HEADER_BYTES + first.min(record::PAYLOAD_BYTES_MAX));
    buf.resize(want, 0);
    let got = read_at(file, buf, *offset).map_err(io)?;
    buf.truncate(got);
    let mut at = 0;
    let mut sent = 0;
    loop {
        match record::read(buf, at) {
            record::Next::Record { payload, end } => {
                let position = wire::pack(gen, *offset + end as u64).to_le_bytes();
                wire::write_frame(out, wire::RECORD, &[&position, payload]).map_err(io)?;
                at = end;
                sent += 1;
            }
            record::Next::Corrupt { at: bad, reason } if sent == 0 && bad == 0 => {
                return Err(format!("the journal is damaged at {}: {reason}", *offset));
            }
            // The end of what is written, a record written in part, or damage after
            // whole records (read again from there next time).
            _ => break,
        }
    }
    *offset += at as u64;
    Ok(sent)
}

/// Reads into `buf` at `offset` until it is full or the file ends; returns the bytes read.
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
