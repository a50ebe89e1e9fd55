//! SAVE, BGSAVE, BGREWRITEAOF and LASTSAVE. Every shard journals each write as it goes
//! (`persist`), so a "save" here is a compaction: each shard starts a new journal segment
//! and the compactor folds the old ones into a snapshot, while the shards keep serving.
//! SAVE waits for every shard's; BGSAVE and BGREWRITEAOF only ask.

use std::time::Duration;

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::args::is;
use wetask_shards::errors::SYNTAX;

use crate::persist::Store;
use crate::shard::ShardCtx;

/// How often SAVE looks whether the shards are done.
const SAVE_POLL: Duration = Duration::from_millis(5);

fn store(ctx: &ShardCtx) -> Result<&std::sync::Arc<Store>, Frame> {
    ctx.globals.store.get().ok_or_else(|| {
        Frame::static_error("ERR persistence is off (appendonly no): there is nothing to save")
    })
}

pub async fn save(ctx: &ShardCtx) -> Frame {
    let store = match store(ctx) {
        Ok(store) => store,
        Err(e) => return e,
    };
    let epoch = store.request_compaction();
    loop {
        match store.compaction_done(epoch) {
            Some(true) => return Frame::ok(),
            Some(false) => {
                return Frame::static_error("ERR a shard's snapshot failed (see the server log)")
            }
            None => glommio::timer::sleep(SAVE_POLL).await,
        }
    }
}

pub fn bgsave(ctx: &ShardCtx, args: &[Bytes]) -> Frame {
    let schedule = match &args[1..] {
        [] => false,
        [word] if is(word, "schedule") => true,
        _ => return Frame::static_error(SYNTAX),
    };
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
    let seconds = match ctx.globals.store.get() {
        Some(store) => store.lastsave_s.load(std::sync::atomic::Ordering::Acquire),
        None => crate::globals::unix_ms() / 1000 - ctx.globals.started.elapsed().as_secs(),
    };
    Frame::Integer(seconds as i64)
}
