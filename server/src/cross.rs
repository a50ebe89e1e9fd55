//! Keyed commands whose keys live on different shards: RENAME, RENAMENX, COPY and MSETNX.
//! Standalone clients never get CROSSSLOT; the coordinating shard moves entries between
//! owners through the mesh.
//!
//! Atomicity today: each step is atomic on its shard and steps run in a fixed order, but a
//! client on a third connection can observe the moment between steps (for RENAME, neither
//! key present). Shard locking in ascending order (DESIGN §2.4) replaces this with
//! all-or-nothing visibility; see the foundation issue's notes.

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::errors::{wrong_arity, NO_SUCH_KEY};
use wetask_shards::keys::copy_options;
use wetask_shards::table::CommandSpec;
use wetask_shards::{shard_of, Entry, Value};

use crate::context::ShardCtx;
use crate::mesh::{Request, Response};

/// Runs `request` on shard `to`, locally when `to` is this shard.
async fn on(ctx: &ShardCtx, to: usize, request: Request) -> Response {
    if to == ctx.id {
        ctx.serve(request)
    } else {
        ctx.request(to, request).await
    }
}

async fn take(ctx: &ShardCtx, db: usize, key: &Bytes) -> Option<Entry> {
    let owner = shard_of(key, ctx.shard_count);
    match on(
        ctx,
        owner,
        Request::Take {
            db,
            key: key.clone(),
        },
    )
    .await
    {
        Response::Entry(entry) => entry,
        _ => None,
    }
}

async fn clone(ctx: &ShardCtx, db: usize, key: &Bytes) -> Option<Entry> {
    let owner = shard_of(key, ctx.shard_count);
    match on(
        ctx,
        owner,
        Request::Clone {
            db,
            key: key.clone(),
        },
    )
    .await
    {
        Response::Entry(entry) => entry,
        _ => None,
    }
}

async fn put(ctx: &ShardCtx, db: usize, key: &Bytes, entry: Entry, replace: bool) -> bool {
    let owner = shard_of(key, ctx.shard_count);
    let request = Request::Put {
        db,
        key: key.clone(),
        entry,
        replace,
    };
    matches!(on(ctx, owner, request).await, Response::Bool(true))
}

async fn exists(ctx: &ShardCtx, db: usize, key: &Bytes) -> bool {
    let owner = shard_of(key, ctx.shard_count);
    matches!(
        on(
            ctx,
            owner,
            Request::Exists {
                db,
                keys: vec![key.clone()]
            }
        )
        .await,
        Response::Count(1)
    )
}

pub async fn run(ctx: &ShardCtx, db: usize, spec: &'static CommandSpec, args: &[Bytes]) -> Frame {
    match spec.name {
        "rename" => rename(ctx, db, args, false).await,
        "renamenx" => rename(ctx, db, args, true).await,
        "copy" => copy(ctx, db, args).await,
        "msetnx" => msetnx(ctx, db, args).await,
        other => Frame::error(format!("ERR '{other}' cannot span shards")),
    }
}

async fn rename(ctx: &ShardCtx, db: usize, args: &[Bytes], nx: bool) -> Frame {
    let (from, to) = (&args[1], &args[2]);
    if nx && exists(ctx, db, to).await {
        return if exists(ctx, db, from).await {
            Frame::Integer(0)
        } else {
            Frame::static_error(NO_SUCH_KEY)
        };
    }
    let Some(entry) = take(ctx, db, from).await else {
        return Frame::static_error(NO_SUCH_KEY);
    };
    if !put(ctx, db, to, entry.clone(), !nx).await {
        // The target appeared meanwhile: give the source its value back.
        put(ctx, db, from, entry, false).await;
        return Frame::Integer(0);
    }
    if nx {
        Frame::Integer(1)
    } else {
        Frame::ok()
    }
}

async fn copy(ctx: &ShardCtx, db: usize, args: &[Bytes]) -> Frame {
    let opts = match copy_options(args) {
        Ok(opts) => opts,
        Err(err) => return err,
    };
    let Some(entry) = clone(ctx, db, &args[1]).await else {
        return Frame::Integer(0);
    };
    let target_db = opts.db.unwrap_or(db);
    Frame::Integer(i64::from(
        put(ctx, target_db, &args[2], entry, opts.replace).await,
    ))
}

async fn msetnx(ctx: &ShardCtx, db: usize, args: &[Bytes]) -> Frame {
    if args.len().is_multiple_of(2) {
        return wrong_arity("msetnx");
    }
    for pair in args[1..].chunks(2) {
        if exists(ctx, db, &pair[0]).await {
            return Frame::Integer(0);
        }
    }
    for pair in args[1..].chunks(2) {
        let entry = Entry::new(Value::Str(Bytes::copy_from_slice(&pair[1])));
        put(ctx, db, &pair[0], entry, true).await;
    }
    Frame::Integer(1)
}
