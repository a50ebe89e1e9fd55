//! SAVE, BGSAVE, BGREWRITEAOF, LASTSAVE and WAITAOF. With the journal on (`appendonly yes`)
//! every shard journals each write as it goes (`persist`), so a "save" is a compaction:
//! each shard starts a new journal segment and the compactor folds the old ones into a
//! snapshot, while the shards keep serving. With it off, a save is a snapshot of each
//! shard's state (`persist::dump`), as Redis's RDB. SAVE waits for every shard's; BGSAVE
//! and BGREWRITEAOF only ask.

use std::time::Duration;

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::args::is;
use wetask_shards::errors::{NOT_INTEGER, SYNTAX};

use crate::persist::Store;
use crate::shard::ShardCtx;

/// How often SAVE looks whether the shards are done.
const SAVE_POLL: Duration = Duration::from_millis(5);

fn store(ctx: &ShardCtx) -> Result<&std::sync::Arc<Store>, Frame> {
    ctx.globals.store.get().ok_or_else(|| {
        Frame::static_error("ERR persistence is off (appendonly no): there is nothing to save")
    })
}

/// `appendonly no`: takes a snapshot of every shard at one consistent cut (every shard held
/// at once, as a cross-shard operation holds them), leaving the writes to the writer
/// thread; returns the request to wait for with `Dumps::done`.
pub async fn snapshot_all(ctx: &ShardCtx, dumps: &crate::persist::dump::Dumps) -> u64 {
    let epoch = dumps.request();
    let held = crate::routing::cross::Held::lock_shards(ctx, (0..ctx.shard_count).collect()).await;
    for shard in 0..ctx.shard_count {
        let request = crate::mesh::Request::Admin(crate::mesh::AdminRequest::Snapshot { epoch });
        crate::routing::cross::on(&held, shard, request).await;
    }
    held.unlock().await;
    epoch
}

/// A save point's save, started from shard 0's housekeeping (`ShardCore::save_point_due`).
pub async fn save_point(ctx: std::rc::Rc<ShardCtx>) {
    if let Some(dumps) = ctx.globals.dumps.get() {
        tracing::info!("a save point was reached: saving");
        let epoch = snapshot_all(&ctx, dumps).await;
        while dumps.done(epoch).is_none() {
            glommio::timer::sleep(SAVE_POLL).await;
        }
        dumps.unschedule();
    }
}

pub async fn save(ctx: &ShardCtx) -> Frame {
    if let Some(dumps) = ctx.globals.dumps.get() {
        if dumps.in_progress() {
            return Frame::static_error("ERR Background save already in progress");
        }
        let epoch = snapshot_all(ctx, dumps).await;
        let globals = ctx.globals.clone();
        let done = move || globals.dumps.get().and_then(|d| d.done(epoch));
        return saved(ctx.wait_on(done).await);
    }
    let store = match store(ctx) {
        Ok(store) => store,
        Err(e) => return e,
    };
    let epoch = store.request_compaction();
    // Each shard starts its part at its next turn: wake the sleeping ones now.
    ctx.globals.ring_every_shard();
    let globals = ctx.globals.clone();
    let done = move || globals.store.get().and_then(|s| s.compaction_done(epoch));
    saved(ctx.wait_on(done).await)
}

/// SAVE's reply, from whether every shard's snapshot was written.
fn saved(ok: bool) -> Frame {
    match ok {
        true => Frame::ok(),
        false => Frame::static_error("ERR a shard's snapshot failed (see the server log)"),
    }
}

pub fn bgsave(ctx: &std::rc::Rc<ShardCtx>, args: &[Bytes]) -> Frame {
    let schedule = match &args[1..] {
        [] => false,
        [word] if is(word, "schedule") => true,
        _ => return Frame::static_error(SYNTAX),
    };
    if let Some(dumps) = ctx.globals.dumps.get() {
        let running = dumps.in_progress();
        if running && !schedule {
            return Frame::static_error("ERR Background save already in progress");
        }
        glommio::spawn_local(background_save(ctx.clone())).detach();
        return Frame::Simple(if running {
            "Background saving scheduled".into()
        } else {
            "Background saving started".into()
        });
    }
    let store = match store(ctx) {
        Ok(store) => store,
        Err(e) => return e,
    };
    if store.compacting() {
        if !schedule {
            return Frame::static_error("ERR Background save already in progress");
        }
        store.request_compaction();
        return Frame::Simple("Background saving scheduled".into());
    }
    store.request_compaction();
    Frame::Simple("Background saving started".into())
}

pub fn bgrewriteaof(ctx: &ShardCtx) -> Frame {
    let store = match store(ctx) {
        Ok(store) => store,
        Err(e) => return e,
    };
    let running = store.compacting();
    store.request_compaction();
    Frame::Simple(if running {
        "Background append only file rewriting scheduled".into()
    } else {
        "Background append only file rewriting started".into()
    })
}

pub fn lastsave(ctx: &ShardCtx) -> Frame {
    let seconds = match (ctx.globals.store.get(), ctx.globals.dumps.get()) {
        (Some(store), _) => store.lastsave_s.load(std::sync::atomic::Ordering::Acquire),
        (None, Some(dumps)) => dumps.lastsave_s.load(std::sync::atomic::Ordering::Acquire),
        (None, None) => crate::globals::unix_ms() / 1000 - ctx.globals.started.elapsed().as_secs(),
    };
    Frame::Integer(seconds as i64)
}

/// Redis's refusal of WAITAOF on a replica (and, in consensus mode, on a follower).
const WAITAOF_ON_A_REPLICA: &str = "ERR WAITAOF cannot be used with replica instances. Please also note that writes to replicas are just local and are not propagated.";

/// WAITAOF numlocal numreplicas timeout (Redis 7.2): waits until this connection's writes
/// so far are fsynced in the journal (`numlocal` 1) and in the journals of `numreplicas`
/// replicas, then replies `[local, replicas]` synced. Every shard is asked first, so writes
/// another shard made for this client have been journaled; then the fsync that follows
/// them is waited for: none under `always` (each reply already waited for one), the
/// everysec syncer's next round, and never under `appendfsync no`, as in Redis. A replica
/// reports the position its own journal's fsync covers (`replication::receiver`), under
/// its own `appendfsync`.
pub async fn waitaof(
    ctx: &ShardCtx,
    conn: &std::cell::RefCell<crate::clients::ConnState>,
    args: &[Bytes],
) -> Frame {
    let (numlocal, numreplicas, timeout_ms) = match parse_waitaof(args) {
        Ok(parsed) => parsed,
        Err(err) => return err,
    };
    if ctx.globals.consensus.is_some() {
        // The Raft log is the journal: its syncs are what WAITAOF counts.
        let enough = move |local: bool, n: usize| (numlocal == 0 || local) && n >= numreplicas;
        return match super::replication::wait_in_group(ctx, conn, timeout_ms, enough).await {
            Some((local, n)) => Frame::Array(vec![
                Frame::Integer(i64::from(local)),
                Frame::Integer(n as i64),
            ]),
            None => Frame::static_error(WAITAOF_ON_A_REPLICA),
        };
    }
    if ctx.globals.replication.is_replica() {
        return Frame::static_error(WAITAOF_ON_A_REPLICA);
    }
    let store = ctx.globals.store.get();
    if numlocal > 0 && store.is_none() {
        return Frame::static_error(
            "ERR WAITAOF cannot be used when numlocal is set but appendonly is disabled.",
        );
    }
    ctx.sync_every_shard().await;
    let begun = store.map_or(0, |s| s.sync_round_begun());
    let targets = super::replication::positions_now(&ctx.globals);
    let globals = ctx.globals.clone();
    let synced = move || globals.store.get().is_some_and(|s| s.synced_since(begun));
    let globals = ctx.globals.clone();
    let replicas = move || globals.replication.replicas_fsynced_at(&targets);
    // Under `appendfsync no`, `WAITAOF 1 0 0` waits until the client leaves.
    let (synced, replicas) = super::replication::wait_until(ctx, conn, timeout_ms, move || {
        let now = (synced(), replicas());
        (now, (numlocal == 0 || now.0) && now.1 >= numreplicas)
    })
    .await;
    Frame::Array(vec![
        Frame::Integer(i64::from(synced)),
        Frame::Integer(replicas as i64),
    ])
}

/// WAITAOF's arguments, with Redis's errors in its order: (numlocal, numreplicas, ms).
fn parse_waitaof(args: &[Bytes]) -> Result<(i64, usize, u64), Frame> {
    let numlocal = match wetask_shards::args::parse_i64(&args[1]) {
        Some(n @ 0..=1) => n,
        Some(_) => {
            return Err(Frame::static_error(
                "ERR value is out of range, value must between 0 and 1",
            ))
        }
        None => return Err(Frame::static_error(NOT_INTEGER)),
    };
    let numreplicas = match wetask_shards::args::parse_i64(&args[2]) {
        Some(n) if n >= 0 => n as usize,
        Some(_) => {
            return Err(Frame::static_error(
                "ERR value is out of range, must be positive",
            ))
        }
        None => return Err(Frame::static_error(NOT_INTEGER)),
    };
    match wetask_shards::args::parse_i64(&args[3]) {
        Some(ms) if ms < 0 => Err(Frame::static_error("ERR timeout is negative")),
        Some(ms) => Ok((numlocal, numreplicas, ms as u64)),
        None => Err(Frame::static_error(
            "ERR timeout is not an integer or out of range",
        )),
    }
}

/// BGSAVE with `appendonly no`: the snapshot, in a task of its own.
async fn background_save(ctx: std::rc::Rc<ShardCtx>) {
    if let Some(dumps) = ctx.globals.dumps.get() {
        snapshot_all(&ctx, dumps).await;
    }
}
