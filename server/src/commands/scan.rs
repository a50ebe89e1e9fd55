//! SCAN and RANDOMKEY across shards: the cursor names a shard and that shard's position.
//! On a shard's own port (cluster mode) they cover that shard alone, as a Redis Cluster
//! node's cover its own slots.

use std::rc::Rc;

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::args::{is, parse_i64};
use wetask_shards::errors::SYNTAX;
use wetask_shards::ScanFilter;

use crate::mesh::{KeyRequest, Request, Response};
use crate::shard::ShardCtx;

/// SCAN across shards: the cursor's low part (mod the shard count) names the shard, the rest
/// is that shard's own position cursor.
pub(super) async fn scan(ctx: &Rc<ShardCtx>, db: usize, args: &[Bytes], only_here: bool) -> Frame {
    let Some(cursor) = std::str::from_utf8(&args[1])
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    else {
        return Frame::static_error("ERR invalid cursor");
    };
    let mut count = 10usize;
    let mut filter = ScanFilter::default();
    let mut i = 2;
    while i < args.len() {
        if i + 1 >= args.len() {
            return Frame::static_error(SYNTAX);
        }
        let value = &args[i + 1];
        match &args[i] {
            a if is(a, "count") => match parse_i64(value) {
                Some(n) if n >= 1 => count = n.min(1 << 20) as usize,
                Some(_) => return Frame::static_error(SYNTAX),
                None => return Frame::static_error(wetask_shards::errors::NOT_INTEGER),
            },
            a if is(a, "match") => filter.pattern = Some(value.clone()),
            a if is(a, "type") => {
                filter.type_name = Some(String::from_utf8_lossy(value).into_owned())
            }
            _ => return Frame::static_error(SYNTAX),
        }
        i += 2;
    }
    if only_here {
        let (next, found, _) = scan_shard(ctx, ctx.id, db, cursor, count, &filter).await;
        return scan_reply(next, found);
    }
    let shards = ctx.shard_count as u64;
    let mut shard = (cursor % shards) as usize;
    let mut position = cursor / shards;
    let mut keys = Vec::new();
    let mut budget = count;
    // COUNT is work, as in Redis: a shard that runs out of keys hands what is left of it to
    // the next, so a small keyspace is one call and the cursor is 0 once all are seen.
    let next_cursor = loop {
        let (next, found, visited) = scan_shard(ctx, shard, db, position, budget, &filter).await;
        keys.extend(found);
        budget = budget.saturating_sub(visited.max(1));
        if next != 0 {
            break next * shards + shard as u64;
        }
        if shard + 1 >= ctx.shard_count {
            break 0;
        }
        shard += 1;
        position = 0;
        if budget == 0 {
            break shard as u64;
        }
    };
    scan_reply(next_cursor, keys)
}

fn scan_reply(cursor: u64, keys: Vec<Bytes>) -> Frame {
    Frame::Array(vec![
        Frame::Bulk(Bytes::from(cursor.to_string())),
        Frame::Array(keys.into_iter().map(Frame::Bulk).collect()),
    ])
}

/// One shard's part of a SCAN: (next position, keys, positions looked at).
pub(super) async fn scan_shard(
    ctx: &Rc<ShardCtx>,
    shard: usize,
    db: usize,
    position: u64,
    count: usize,
    filter: &ScanFilter,
) -> (u64, Vec<Bytes>, usize) {
    if shard == ctx.id {
        return ctx
            .shard
            .borrow_mut()
            .scan_counted(db, position, count, filter);
    }
    let request = Request::Keys(KeyRequest::Scan {
        db,
        cursor: position,
        count,
        filter: filter.clone(),
    });
    match ctx.request(shard, request).await {
        Response::Scan(next, keys, visited) => (next, keys, visited),
        _ => (0, Vec::new(), 0),
    }
}

pub(super) async fn randomkey(ctx: &Rc<ShardCtx>, db: usize, only_here: bool) -> Frame {
    if only_here {
        return ctx
            .shard
            .borrow_mut()
            .random_key(db)
            .map_or(Frame::Null, Frame::Bulk);
    }
    let start = fastrand::usize(..ctx.shard_count);
    for offset in 0..ctx.shard_count {
        let shard = (start + offset) % ctx.shard_count;
        let key = if shard == ctx.id {
            ctx.shard.borrow_mut().random_key(db)
        } else {
            match ctx
                .request(shard, Request::Keys(KeyRequest::RandomKey { db }))
                .await
            {
                Response::Key(key) => key,
                _ => None,
            }
        };
        if let Some(key) = key {
            return Frame::Bulk(key);
        }
    }
    Frame::Null
}
