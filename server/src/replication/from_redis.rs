//! Following a Redis primary: the live migration from Redis (`REPLICAOF` at a redis-server).
//!
//! The link speaks Redis's replica protocol: `REPLCONF listening-port` and `capa psync2`,
//! then `PSYNC` (`? -1` the first time, the primary's replication id and offset after a
//! dropped link, so a short outage resumes from Redis's backlog). A full sync arrives as an
//! RDB file (read by `wetask_shards::persist::rdb_file`), then the primary's command stream.
//!
//! What it receives is applied through a connection to this node's own client port, marked
//! as the replication applier (`REPLCONF WETASK-APPLY <token>`: writes pass a read-only
//! replica): each key of the RDB as `RESTORE … ABSTTL REPLACE`, each function library as
//! `FUNCTION LOAD REPLACE`, then every command of the stream as it came. So the keys land
//! on whichever shards own them, multi-key commands and MULTI/EXEC run as they would for a
//! client, and everything is journaled as any write is. The offset acknowledged to Redis
//! (`REPLCONF ACK`, every second and on `GETACK`) counts only commands the node has answered.

use std::collections::VecDeque;
use std::io::{BufWriter, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use wetask_protocol::{CommandDecoder, Limits};
use wetask_shards::persist::rdb_file::{self, RdbItem};

use super::link::{authenticate, connect, expect_ok, send, Env};
use super::{Inbox, Item, LinkState};
use wetask_shards::args::is;

/// The largest RDB a full sync accepts (held in memory while it loads).
const RDB_BYTES_MAX: u64 = 32 << 30;
/// How often the offset is acknowledged, and how long a read waits before that.
const ACK_EVERY: Duration = Duration::from_secs(1);
/// The key after which the crash point `redis-mid-rdb-load` ends the process.
const MID_LOAD_CRASH_AT: u64 = 500;
/// How long the shards may take to apply a full sync's start or end (a step each).
const SHARDS_TAKE_TIMEOUT: Duration = Duration::from_secs(60);
/// A primary silent for this long (Redis pings every 10 s) is dropped.
const SILENCE_TIMEOUT: Duration = Duration::from_secs(60);

/// Where a dropped link resumes: the primary's replication id and the offset applied.
#[derive(Default, Clone)]
pub struct Resume {
    replid: String,
    offset: u64,
}

impl Resume {
    pub fn at(replid: String, offset: u64) -> Resume {
        Resume { replid, offset }
    }
}

/// Publishes where this node's data stands (`Replication::redis_at`): `Some` only while
/// no command is in flight, under the link's epoch.
fn publish_at(env: &Env, epoch: u64, at: Option<&Resume>) {
    let mut published = env.replication.redis_at.lock().expect("redis at");
    *published = at.map(|r| (epoch, r.replid.clone(), r.offset));
}

/// One session with the Redis primary: the handshake, a full or partial sync, then the
/// stream until it fails or the link is replaced.
pub fn session(
    env: &Env,
    epoch: u64,
    host: &str,
    port: u16,
    resume: &mut Option<Resume>,
) -> Result<(), String> {
    // Until the sync says where the data stands, it stands nowhere a restart can trust.
    publish_at(env, epoch, None);
    let mut primary = connect(host, port)?;
    authenticate(&mut primary, &env.auth)?;
    expect_ok(
        &mut primary,
        &[
            "REPLCONF".into(),
            "listening-port".into(),
            env.listening_port.to_string(),
        ],
    )?;
    expect_ok(
        &mut primary,
        &["REPLCONF".into(), "capa".into(), "psync2".into()],
    )?;
    let psync = match resume {
        Some(r) => format!("PSYNC {} {}", r.replid, r.offset + 1),
        None => "PSYNC ? -1".into(),
    };
    let words: Vec<String> = psync.split(' ').map(String::from).collect();
    send(&mut primary, &words)?;
    let _ = primary.set_read_timeout(Some(SILENCE_TIMEOUT));
    let answer = read_line(&mut primary)?;
    let applier = Applier::open(env)?;
    let offset = synced(env, epoch, &answer, &mut primary, &applier, resume)?;
    tracing::info!(primary = %format!("{host}:{port}"), offset, "following a Redis primary");
    env.replication.set_link(epoch, LinkState::Connected);
    env.replication
        .primary_offset
        .store(offset, Ordering::Release);
    let mut progress = Progress::new(offset);
    let result = stream(env, epoch, primary, &applier, &mut progress, resume);
    // Where the next PSYNC continues: past every command sent here once all are answered;
    // with some unanswered, which of them ran is unknown, so the next sync is a full one
    // (continuing from the last answered one would run the others twice).
    let answered = applier.finish();
    match resume.as_mut() {
        Some(r) if answered => {
            r.offset = progress.consumed;
            publish_at(env, epoch, Some(r));
        }
        _ => {
            *resume = None;
            publish_at(env, epoch, None);
        }
    }
    result
}

/// PSYNC's `answer`: a full sync (the RDB loaded, `resume` set to its id and offset) or a
/// continuation from `resume`. Returns the offset the stream starts at.
fn synced(
    env: &Env,
    epoch: u64,
    answer: &str,
    primary: &mut TcpStream,
    applier: &Applier,
    resume: &mut Option<Resume>,
) -> Result<u64, String> {
    if let Some(rest) = answer.strip_prefix("+FULLRESYNC ") {
        let (replid, offset) = rest
            .split_once(' ')
            .ok_or_else(|| format!("a malformed FULLRESYNC: {answer}"))?;
        let offset: u64 = offset
            .trim()
            .parse()
            .map_err(|_| format!("a malformed offset: {answer}"))?;
        env.replication.set_link(epoch, LinkState::Syncing);
        full_sync(env, epoch, primary, applier)?;
        *resume = Some(Resume {
            replid: replid.to_string(),
            offset,
        });
        return Ok(offset);
    }
    if !answer.starts_with("+CONTINUE") {
        return Err(format!("the primary refused PSYNC: {answer}"));
    }
    let r = resume
        .as_mut()
        .ok_or("the primary continued a sync never begun")?;
    // PSYNC2: a new id after the primary's own failover.
    if let Some(id) = answer.split_whitespace().nth(1) {
        r.replid = id.to_string();
    }
    Ok(r.offset)
}

/// How far the stream has come: the primary's offset after the last whole command decoded
/// (and sent here, but for PINGs), the commands sent and the offset after each, not yet
/// answered, and the offset up to which all are.
struct Progress {
    consumed: u64,
    /// Bytes of a command the decoder has taken but not yet completed.
    partial: u64,
    pending: VecDeque<(u64, u64)>,
    applied: u64,
    /// The offset `Replication::redis_at` holds for this stream (cleared before a command
    /// is sent, set again once every command sent is answered).
    published: Option<u64>,
}

impl Progress {
    fn new(start: u64) -> Progress {
        Progress {
            consumed: start,
            partial: 0,
            pending: VecDeque::new(),
            applied: start,
            published: None,
        }
    }
}

/// One `\r\n`-terminated line, skipping the bare newlines Redis sends as keep-alives while
/// it prepares an RDB.
fn read_line(conn: &mut TcpStream) -> Result<String, String> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        conn.read_exact(&mut byte)
            .map_err(|e| format!("cannot read from the primary: {e}"))?;
        match byte[0] {
            b'\n' if line.is_empty() => continue,
            b'\n' => break,
            b'\r' => {}
            b => line.push(b),
        }
        if line.len() > 1024 {
            return Err("the primary sent an overlong line".into());
        }
    }
    Ok(String::from_utf8_lossy(&line).into_owned())
}

/// Reads the RDB (`$<len>` and the file) and loads it through the applier, between a
/// `FullStart` and a `SyncWhole` that every shard journals: a restart in the middle knows
/// its data is partial and answers LOADING, as the node does meanwhile.
fn full_sync(
    env: &Env,
    epoch: u64,
    primary: &mut TcpStream,
    applier: &Applier,
) -> Result<(), String> {
    let loading = &env.replication.redis_loading;
    let line = read_line(primary)?;
    if line.starts_with("$EOF:") {
        return Err(
            "the primary sent a diskless RDB without a length (capa eof was not offered)".into(),
        );
    }
    let len: u64 = line
        .strip_prefix('$')
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("expected the RDB's length, got {line:?}"))?;
    if len > RDB_BYTES_MAX {
        return Err(format!(
            "the primary's RDB ({len} bytes) is larger than {RDB_BYTES_MAX}"
        ));
    }
    let mut rdb = vec![0u8; len as usize];
    primary
        .read_exact(&mut rdb)
        .map_err(|e| format!("the RDB transfer failed: {e}"))?;
    // From the shards' reset until the last key is in, the node holds part of the RDB: it
    // answers LOADING (left so if the load fails: the data is partial until the next), and
    // each shard's journal says so until its `SyncWhole`, for a restart in between.
    loading.store(true, Ordering::Release);
    every_shard_takes(env, epoch, || Item::FullStart)?;
    // The shards dropped everything; FLUSHALL tells tracking clients and WATCHers, as
    // Redis's replica's empty-data step does.
    applier.command(&[Bytes::from_static(b"FLUSHALL")])?;
    let keys = load_rdb(&rdb, applier)?;
    // The stream selects its database before its first command; start from 0 as Redis does.
    applier.command(&[Bytes::from_static(b"SELECT"), Bytes::from_static(b"0")])?;
    // The link is up once the keys are in, not merely sent.
    applier.wait_answered()?;
    every_shard_takes(env, epoch, || Item::SyncWhole)?;
    loading.store(false, Ordering::Release);
    tracing::info!(keys, bytes = len, "loaded the Redis primary's RDB");
    Ok(())
}

/// Queues `item()` for every shard and waits until each has applied it (its inbox drained:
/// a shard applies what it takes in the same step), so that the applier's next commands
/// run, and are journaled, after it on every shard.
fn every_shard_takes(env: &Env, epoch: u64, item: impl Fn() -> Item) -> Result<(), String> {
    let replication = &env.replication;
    for (shard, inbox) in replication.inboxes.iter().enumerate() {
        if inbox.push(epoch, item()) {
            env.doorbells[shard].ring();
        }
    }
    let until = Instant::now() + SHARDS_TAKE_TIMEOUT;
    while !replication.inboxes.iter().all(Inbox::is_empty) {
        if replication.link_epoch.load(Ordering::Acquire) != epoch || (env.stopping)() {
            return Err("the link was replaced during the load".into());
        }
        if Instant::now() > until {
            return Err("the shards did not take the full sync's start or end".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// Sends every item of the RDB `rdb` to the applier: each key as `RESTORE … REPLACE
/// ABSTTL` (after a `SELECT` when its database changes), each library as `FUNCTION LOAD
/// REPLACE`. Returns how many keys there were.
fn load_rdb(rdb: &[u8], applier: &Applier) -> Result<u64, String> {
    let mut db = usize::MAX;
    let mut keys = 0u64;
    rdb_file::read(rdb, &mut |item| {
        match item {
            RdbItem::Key {
                db: key_db,
                key,
                expire_at_ms,
                payload,
            } => {
                if key_db != db {
                    db = key_db;
                    applier
                        .command(&[Bytes::from_static(b"SELECT"), Bytes::from(db.to_string())])?;
                }
                let ttl = Bytes::from(expire_at_ms.unwrap_or(0).to_string());
                applier.command(&[
                    Bytes::from_static(b"RESTORE"),
                    key,
                    ttl,
                    Bytes::from(payload),
                    Bytes::from_static(b"REPLACE"),
                    Bytes::from_static(b"ABSTTL"),
                ])?;
                keys += 1;
                if keys == MID_LOAD_CRASH_AT && crate::failpoint::is_armed("redis-mid-rdb-load") {
                    // The tests' crash in the middle of a load: these keys are in.
                    applier.wait_answered()?;
                    crate::failpoint::crash_if_armed("redis-mid-rdb-load");
                }
            }
            RdbItem::Library(code) => {
                applier.command(&[
                    Bytes::from_static(b"FUNCTION"),
                    Bytes::from_static(b"LOAD"),
                    Bytes::from_static(b"REPLACE"),
                    code,
                ])?;
            }
        }
        Ok(())
    })?;
    Ok(keys)
}

/// The command stream: each command to the applier, PING dropped, GETACK answered; the
/// applied offset acknowledged every second.
fn stream(
    env: &Env,
    epoch: u64,
    mut primary: TcpStream,
    applier: &Applier,
    progress: &mut Progress,
    resume: &mut Option<Resume>,
) -> Result<(), String> {
    let _ = primary.set_read_timeout(Some(ACK_EVERY));
    let mut decoder = CommandDecoder::new(Limits::default());
    let mut buffer = BytesMut::with_capacity(1 << 16);
    let mut chunk = vec![0u8; 1 << 16];
    let mut last_ack = Instant::now();
    let mut last_heard = Instant::now();
    let mut fsynced = Fsynced::new(env);
    while env.replication.link_epoch.load(Ordering::Acquire) == epoch && !(env.stopping)() {
        let mut link = (&mut primary, &mut fsynced);
        forward(
            env,
            epoch,
            &mut decoder,
            &mut buffer,
            &mut link,
            applier,
            progress,
        )?;
        applier.flush()?;
        let applied = applier.applied_offset(progress);
        env.replication
            .primary_offset
            .store(applied, Ordering::Release);
        if let Some(r) = resume.as_mut() {
            r.offset = applied;
            if progress.pending.is_empty() && progress.published != Some(applied) {
                publish_at(env, epoch, Some(r));
                progress.published = Some(applied);
            }
        }
        if last_ack.elapsed() >= ACK_EVERY {
            ack(&mut primary, applied, fsynced.at(applied))?;
            last_ack = Instant::now();
        }
        match primary.read(&mut chunk) {
            Ok(0) => return Err("the primary closed the link".into()),
            Ok(n) => {
                buffer.extend_from_slice(&chunk[..n]);
                env.replication.note_io();
                last_heard = Instant::now();
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if last_heard.elapsed() >= SILENCE_TIMEOUT {
                    return Err("the primary went silent".into());
                }
            }
            Err(e) => return Err(format!("cannot read from the primary: {e}")),
        }
    }
    Ok(())
}

/// Sends every whole command `buffer` holds to the applier (PING dropped, GETACK answered
/// on `link`, the primary's connection and the fsync tracker).
fn forward(
    env: &Env,
    epoch: u64,
    decoder: &mut CommandDecoder,
    buffer: &mut BytesMut,
    (primary, fsynced): &mut (&mut TcpStream, &mut Fsynced),
    applier: &Applier,
    progress: &mut Progress,
) -> Result<(), String> {
    loop {
        let before = buffer.len();
        let decoded = decoder
            .decode(buffer)
            .map_err(|e| format!("the primary's stream is malformed: {e:?}"))?;
        // The decoder takes a command's bytes as they arrive: they count once it is whole
        // (a link that ends mid-command must not continue past it).
        progress.partial += (before - buffer.len()) as u64;
        let Some(args) = decoded else {
            return Ok(());
        };
        let used = std::mem::take(&mut progress.partial);
        if is(&args[0], "ping") {
            progress.consumed += used;
            continue;
        }
        if is(&args[0], "replconf") && args.get(1).is_some_and(|a| is(a, "getack")) {
            progress.consumed += used;
            applier.flush()?;
            let offset = applier.applied_offset(progress);
            ack(primary, offset, fsynced.at(offset))?;
            continue;
        }
        if progress.published.take().is_some() {
            publish_at(env, epoch, None);
        }
        // Counted once sent: a command that could not be sent is not past the offset.
        let sent = applier.command(&args)?;
        progress.consumed += used;
        progress.pending.push_back((sent, progress.consumed));
    }
}

/// `REPLCONF ACK offset [FACK fsynced]`: Redis 7.2's primary counts the FACK offset for
/// WAITAOF; a node without a journal sends none, as Redis's replicas without an AOF.
fn ack(primary: &mut TcpStream, offset: u64, fsynced: Option<u64>) -> Result<(), String> {
    let mut args = vec!["REPLCONF".into(), "ACK".into(), offset.to_string()];
    if let Some(fsynced) = fsynced {
        args.extend(["FACK".into(), fsynced.to_string()]);
    }
    send(primary, &args)
}

/// The primary's offset this node's journal has fsynced: the commands answered up to an
/// offset are written (a reply goes after its commit), and on disk once the journal's
/// fsync covers them (`fsync_watch::FsyncWatch`, under this node's `appendfsync`).
struct Fsynced {
    store: Option<Arc<crate::persist::Store>>,
    watch: super::fsync_watch::FsyncWatch,
    at: u64,
}

impl Fsynced {
    fn new(env: &Env) -> Fsynced {
        Fsynced {
            store: env.store.clone(),
            watch: Default::default(),
            at: 0,
        }
    }

    /// The fsynced offset, with `applied` answered (none without a journal).
    fn at(&mut self, applied: u64) -> Option<u64> {
        let store = self.store.as_ref()?;
        if let Some(moved) = self.watch.moved(applied, store) {
            self.at = moved;
        }
        Some(self.at)
    }
}

/// The connection to this node that applies what the primary sends, and a thread that
/// reads its replies (counting them, and logging the first errors).
struct Applier {
    out: std::sync::Mutex<BufWriter<TcpStream>>,
    sent: AtomicU64,
    answered: Arc<AtomicU64>,
    reader: Option<std::thread::JoinHandle<()>>,
    conn: TcpStream,
}

impl Applier {
    fn open(env: &Env) -> Result<Applier, String> {
        let mut conn = connect(&env.local_host, env.listening_port)
            .map_err(|e| format!("cannot reach this node's own port: {e}"))?;
        if let Some(password) = &env.local_password {
            expect_ok(&mut conn, &["AUTH".into(), password.clone()])
                .map_err(|e| format!("this node refused its own applier: {e}"))?;
        }
        expect_ok(
            &mut conn,
            &[
                "REPLCONF".into(),
                "WETASK-APPLY".into(),
                env.replication.token.clone(),
            ],
        )?;
        let _ = conn.set_read_timeout(None);
        let answered = Arc::new(AtomicU64::new(0));
        let reader = {
            let (mut replies, answered) = (
                conn.try_clone().map_err(|e| e.to_string())?,
                answered.clone(),
            );
            std::thread::Builder::new()
                .name("repl-applier".into())
                .spawn(move || read_replies(&mut replies, &answered))
                .map_err(|e| e.to_string())?
        };
        Ok(Applier {
            out: std::sync::Mutex::new(BufWriter::with_capacity(
                1 << 16,
                conn.try_clone().map_err(|e| e.to_string())?,
            )),
            sent: AtomicU64::new(0),
            answered,
            reader: Some(reader),
            conn,
        })
    }

    /// Queues one command; returns how many have been sent, this one included.
    fn command(&self, args: &[Bytes]) -> Result<u64, String> {
        let mut encoded = Vec::new();
        wetask_protocol::encode_command(&mut encoded, args);
        self.out
            .lock()
            .expect("applier")
            .write_all(&encoded)
            .map_err(|e| format!("cannot write to this node: {e}"))?;
        Ok(self.sent.fetch_add(1, Ordering::AcqRel) + 1)
    }

    fn flush(&self) -> Result<(), String> {
        self.out
            .lock()
            .expect("applier")
            .flush()
            .map_err(|e| format!("cannot write to this node: {e}"))
    }

    /// Sends what is queued and waits until this node has answered every command sent.
    fn wait_answered(&self) -> Result<(), String> {
        self.flush()?;
        while self.answered.load(Ordering::Acquire) < self.sent.load(Ordering::Acquire) {
            if self.reader.as_ref().is_none_or(|r| r.is_finished()) {
                return Err("this node closed the applier's connection during the load".into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    /// The primary offset up to which every command has been answered (`progress` moved
    /// on to it).
    fn applied_offset(&self, progress: &mut Progress) -> u64 {
        let answered = self.answered.load(Ordering::Acquire);
        while let Some(&(sent, offset)) = progress.pending.front() {
            if sent > answered {
                break;
            }
            progress.applied = offset;
            progress.pending.pop_front();
        }
        if progress.pending.is_empty() {
            // Everything forwarded is answered: what was skipped (PINGs) counts too.
            progress.applied = progress.consumed;
        }
        progress.applied
    }

    /// Waits (a little) for the answers to what was sent, then closes the connection;
    /// true when every command sent was answered.
    fn finish(mut self) -> bool {
        let flushed = self.flush().is_ok();
        let until = Instant::now() + Duration::from_secs(5);
        let all = || self.answered.load(Ordering::Acquire) >= self.sent.load(Ordering::Acquire);
        while !all() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        let answered = flushed && all();
        let _ = self.conn.shutdown(std::net::Shutdown::Both);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        answered
    }
}

/// Counts the applier's replies; logs the first errors (a command WeTask refused).
fn read_replies(conn: &mut TcpStream, answered: &AtomicU64) {
    let mut decoder = wetask_protocol::FrameDecoder::new(Limits::default());
    let mut buffer = BytesMut::with_capacity(1 << 16);
    let mut chunk = vec![0u8; 1 << 16];
    let mut errors = 0u64;
    loop {
        loop {
            match decoder.decode(&mut buffer) {
                Ok(Some(frame)) => {
                    if let wetask_protocol::Frame::Error(e) = &frame {
                        errors += 1;
                        if errors <= 10 {
                            tracing::warn!(
                                "a command from the Redis primary was refused here: {}",
                                String::from_utf8_lossy(e)
                            );
                        }
                    }
                    answered.fetch_add(1, Ordering::AcqRel);
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
}
