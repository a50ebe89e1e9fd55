//! XINFO STREAM (and FULL), GROUPS and CONSUMERS, with the fields Redis 7.2 reports
//! (entries-read and lag worked out as Redis does).

use super::*;

pub(super) fn field(name: &'static str, value: Frame) -> [Frame; 2] {
    [Frame::Bulk(Bytes::from_static(name.as_bytes())), value]
}

/// XINFO STREAM key | GROUPS key | CONSUMERS key group | HELP.
pub fn xinfo(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let sub = &args[1];
    if is(sub, "help") {
        return Frame::Array(
            [
                "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "CONSUMERS <key> <groupname>",
                "GROUPS <key>",
                "STREAM <key> [FULL [COUNT <count>]",
            ]
            .iter()
            .map(|l| Frame::Simple(Bytes::from_static(l.as_bytes())))
            .collect(),
        );
    }
    if args.len() < 3 {
        return wrong_arity("xinfo");
    }
    let now = ctx.now_ms;
    let key = &args[2];
    let stream = match typed::get::<Stream>(ctx.db(), key, now) {
        Ok(Some(stream)) => stream,
        Ok(None) => return Frame::static_error(NO_SUCH_KEY),
        Err(err) => return err,
    };
    if is(sub, "stream") {
        return match full_count(&args[3..]) {
            Ok(None) => xinfo_stream(stream),
            Ok(Some(count)) => xinfo_stream_full(stream, count),
            Err(FullError::Syntax) => crate::errors::subcommand_syntax("xinfo", sub),
            Err(FullError::Frame(err)) => err,
        };
    }
    if is(sub, "groups") && args.len() == 3 {
        let shape = stream.shape();
        return Frame::Array(
            by_name(&stream.groups)
                .map(|(name, g)| xinfo_group(&shape, name, g))
                .collect(),
        );
    }
    if is(sub, "consumers") && args.len() == 4 {
        let Some(group) = stream.groups.get(&args[3][..]) else {
            return no_such_group(key, &args[3]);
        };
        return Frame::Array(
            by_name(&group.consumers)
                .map(|(name, c)| {
                    // 7.2: `inactive` is the time since it last read or claimed something
                    // (-1 if never), `idle` since it last tried.
                    let inactive = c
                        .active_ms
                        .map_or(-1, |active| now.saturating_sub(active) as i64);
                    info_map(vec![
                        field("name", Frame::Bulk(name.clone())),
                        field("pending", Frame::Integer(c.pending.len() as i64)),
                        field("idle", Frame::Integer(now.saturating_sub(c.seen_ms) as i64)),
                        field("inactive", Frame::Integer(inactive)),
                    ])
                })
                .collect(),
        );
    }
    crate::errors::unknown_subcommand("xinfo", sub)
}

/// Groups or consumers in Redis's order: by name, bytewise (its radix tree's order).
pub(super) fn by_name<V>(map: &indexmap::IndexMap<Bytes, V>) -> impl Iterator<Item = (&Bytes, &V)> {
    let mut all: Vec<(&Bytes, &V)> = map.iter().collect();
    all.sort_by(|a, b| a.0.cmp(b.0));
    all.into_iter()
}

pub(super) enum FullError {
    Syntax,
    Frame(Frame),
}

/// XINFO STREAM's options: nothing (`None`), FULL (COUNT 10), FULL COUNT n (0: all; below
/// 0: 10, as Redis reads it).
pub(super) fn full_count(options: &[Bytes]) -> Result<Option<usize>, FullError> {
    match options {
        [] => Ok(None),
        [full] if is(full, "full") => Ok(Some(10)),
        [full, word, n] if is(full, "full") && is(word, "count") => {
            match int_arg(n).map_err(FullError::Frame)? {
                n if n < 0 => Ok(Some(10)),
                0 => Ok(Some(usize::MAX)),
                n => Ok(Some(n as usize)),
            }
        }
        _ => Err(FullError::Syntax),
    }
}

/// XINFO STREAM key FULL [COUNT n]: the stream's bookkeeping, its first `count` entries,
/// and every group with its pending entries and consumers (at most `count` pending each),
/// as Redis 7.2 answers it.
pub(super) fn xinfo_stream_full(stream: &Stream, count: usize) -> Frame {
    let shape = stream.shape();
    let entries: Vec<Frame> = stream
        .range(StreamId::MIN, StreamId::MAX, false, count)
        .into_iter()
        .map(|(id, fields)| {
            Frame::Array(vec![
                Frame::Bulk(id.to_bytes()),
                Frame::Array(fields.iter().map(|f| Frame::Bulk(f.clone())).collect()),
            ])
        })
        .collect();
    let groups: Vec<Frame> = by_name(&stream.groups)
        .map(|(name, g)| full_group(&shape, name, g, count))
        .collect();
    let mut fields = stream_fields(stream);
    fields.push(field("entries", Frame::Array(entries)));
    fields.push(field("groups", Frame::Array(groups)));
    info_map(fields)
}

pub(super) fn full_group(
    shape: &crate::values::stream::Shape,
    name: &Bytes,
    g: &Group,
    count: usize,
) -> Frame {
    let pending: Vec<Frame> = g
        .pending
        .iter()
        .take(count)
        .map(|(id, p)| {
            Frame::Array(vec![
                Frame::Bulk(id.to_bytes()),
                Frame::Bulk(p.consumer.clone()),
                Frame::Integer(p.delivered_ms as i64),
                Frame::Integer(p.deliveries as i64),
            ])
        })
        .collect();
    let consumers: Vec<Frame> = by_name(&g.consumers)
        .map(|(name, c)| {
            let owned: Vec<Frame> = c
                .pending
                .iter()
                .take(count)
                .filter_map(|id| g.pending.get(id).map(|p| (id, p)))
                .map(|(id, p)| {
                    Frame::Array(vec![
                        Frame::Bulk(id.to_bytes()),
                        Frame::Integer(p.delivered_ms as i64),
                        Frame::Integer(p.deliveries as i64),
                    ])
                })
                .collect();
            info_map(vec![
                field("name", Frame::Bulk(name.clone())),
                field("seen-time", Frame::Integer(c.seen_ms as i64)),
                field(
                    "active-time",
                    Frame::Integer(c.active_ms.map_or(-1, |t| t as i64)),
                ),
                field("pel-count", Frame::Integer(c.pending.len() as i64)),
                field("pending", Frame::Array(owned)),
            ])
        })
        .collect();
    let [delivered, read] = delivery_fields(g);
    info_map(vec![
        field("name", Frame::Bulk(name.clone())),
        delivered,
        read,
        field("lag", group_lag(shape, g)),
        field("pel-count", Frame::Integer(g.pending.len() as i64)),
        field("pending", Frame::Array(pending)),
        field("consumers", Frame::Array(consumers)),
    ])
}

pub(super) fn info_map(fields: Vec<[Frame; 2]>) -> Frame {
    Frame::Map(fields.into_iter().map(|[k, v]| (k, v)).collect())
}

/// XINFO STREAM key: the stream's bookkeeping and its first and last entries.
pub(super) fn xinfo_stream(stream: &Stream) -> Frame {
    let entry = |id: Option<StreamId>| match id {
        Some(id) => {
            let fields = stream.get(id).expect("an existing entry");
            Frame::Array(vec![
                Frame::Bulk(id.to_bytes()),
                Frame::Array(fields.iter().map(|f| Frame::Bulk(f.clone())).collect()),
            ])
        }
        None => Frame::Null,
    };
    let mut fields = stream_fields(stream);
    fields.push(field("groups", Frame::Integer(stream.groups.len() as i64)));
    fields.push(field("first-entry", entry(stream.first_id())));
    fields.push(field("last-entry", entry(stream.last_entry_id())));
    info_map(fields)
}

/// The bookkeeping XINFO STREAM starts with, FULL or not. `radix-tree-keys` counts the
/// nodes Redis would pack the entries in (`stream_nodes`); `radix-tree-nodes` is an
/// estimate (one more: Redis's tree for one node has two).
pub(super) fn stream_fields(stream: &Stream) -> Vec<[Frame; 2]> {
    let tree_keys = stream.nodes.len() as i64;
    vec![
        field("length", Frame::Integer(stream.len() as i64)),
        field("radix-tree-keys", Frame::Integer(tree_keys)),
        field("radix-tree-nodes", Frame::Integer(tree_keys + 1)),
        field("last-generated-id", Frame::Bulk(stream.last_id.to_bytes())),
        field(
            "max-deleted-entry-id",
            Frame::Bulk(stream.max_deleted_id.to_bytes()),
        ),
        field("entries-added", Frame::Integer(stream.entries_added as i64)),
        field(
            "recorded-first-entry-id",
            Frame::Bulk(stream.first_id().unwrap_or_default().to_bytes()),
        ),
    ]
}

/// A group's lag as Redis counts it: exact while nothing was deleted after the group's
/// last delivered entry, else estimated, else unknown (nil). Signed: ENTRIESREAD may say
/// more than the stream ever had.
pub(super) fn group_lag(shape: &crate::values::stream::Shape, g: &Group) -> Frame {
    if shape.entries_added == 0 {
        return Frame::Integer(0);
    }
    let read = match g.entries_read {
        Some(n) if !shape.has_tombstones_from(g.last_delivered) => Some(n),
        _ => shape.entries_read_at(g.last_delivered),
    };
    read.map_or(Frame::Null, |n| {
        Frame::Integer(shape.entries_added as i64 - n as i64)
    })
}

/// One group of XINFO GROUPS (which changes nothing: an estimate is not remembered).
pub(super) fn xinfo_group(shape: &crate::values::stream::Shape, name: &Bytes, g: &Group) -> Frame {
    let lag = group_lag(shape, g);
    let [delivered, read] = delivery_fields(g);
    info_map(vec![
        field("name", Frame::Bulk(name.clone())),
        field("consumers", Frame::Integer(g.consumers.len() as i64)),
        field("pending", Frame::Integer(g.pending.len() as i64)),
        delivered,
        read,
        field("lag", lag),
    ])
}

/// A group's `last-delivered-id` and `entries-read`, as XINFO GROUPS and XINFO STREAM FULL
/// both give them.
fn delivery_fields(g: &Group) -> [[Frame; 2]; 2] {
    [
        field(
            "last-delivered-id",
            Frame::Bulk(g.last_delivered.to_bytes()),
        ),
        field(
            "entries-read",
            g.entries_read
                .map_or(Frame::Null, |n| Frame::Integer(n as i64)),
        ),
    ]
}
