//! What a blocked client pops when its key gets data: the operation a parked BLPOP, BLMOVE,
//! BZPOPMIN, XREAD or XREADGROUP runs on the shard that owns the key, shaped as the blocking
//! command's own reply. The server keeps who waits and where the answer goes
//! (`server/src/shard/lists.rs`); the shard runs the operation, as it runs any write: WATCH
//! sees the keys change and a panic is contained.

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::families::blocking::{BlockOp, MoveTarget};
use crate::families::lists::End;
use crate::shard::Shard;

impl Shard {
    /// Runs a waiter's operation on `key` (in database `db`, for `client`); `None` when
    /// there is nothing to take (the key is empty, missing, or of another type). An error
    /// is an answer too: the waiter is done with it, and nothing was taken.
    pub fn serve_blocked(
        &mut self,
        db: usize,
        client: u64,
        key: &Bytes,
        op: &BlockOp,
        target: MoveTarget,
    ) -> Option<Frame> {
        match op {
            BlockOp::XRead { after, count } => {
                let id = after
                    .iter()
                    .find(|(k, _)| k == key)
                    .and_then(|(_, id)| *id)?;
                let entries = self.stream_read_after(db, key, id, *count)?;
                Some(keyed(key, entries))
            }
            BlockOp::XReadGroup(read) => {
                let entries = self.stream_read_group(db, key, read)?;
                if entries.is_error() {
                    return Some(entries);
                }
                self.log_blocked(db, client, key, op, target);
                Some(keyed(key, entries))
            }
            _ => {
                let written: &[&Bytes] = match op {
                    BlockOp::Move { dst, .. } if target == MoveTarget::Here => &[key, dst],
                    _ => &[key],
                };
                for written in written {
                    self.touch_key(db, written);
                }
                let dst_existed = match op {
                    BlockOp::Move { dst, .. } if self.notes.on() => self.exists(db, dst),
                    _ => true,
                };
                let popped = self
                    .with_ctx(db, client, "blocked pop", |ctx| pop(ctx, key, op, target))
                    .unwrap_or(None);
                // An error (a BLMOVE whose destination is not a list) changed nothing.
                if popped.as_ref().is_some_and(|frame| !frame.is_error()) {
                    self.log_blocked(db, client, key, op, target);
                    if self.notes.on() {
                        self.notify_popped(db, key, op, target, dst_existed);
                    }
                }
                popped
            }
        }
    }
}

impl Shard {
    /// The keyspace events of a waiter's pop, as those of the blocking command run at once.
    #[cold]
    fn notify_popped(
        &mut self,
        db: usize,
        key: &Bytes,
        op: &BlockOp,
        target: MoveTarget,
        dst_existed: bool,
    ) {
        use crate::keyspace::notify::class::{GENERIC, LIST, NEW, ZSET};
        let pop_event = |end: End| if end == End::Left { "lpop" } else { "rpop" };
        let key_gone = !self.exists(db, key);
        let (class, event) = match op {
            BlockOp::Pop { end, .. } => (LIST, pop_event(*end)),
            BlockOp::Move { dst, from, to } => {
                if target == MoveTarget::Here {
                    if !dst_existed {
                        self.notes.push(NEW, db, "new", dst);
                    }
                    let push = if *to == End::Left { "lpush" } else { "rpush" };
                    self.notes.push(LIST, db, push, dst);
                }
                (LIST, pop_event(*from))
            }
            BlockOp::ZPop { max, .. } => (ZSET, if *max { "zpopmax" } else { "zpopmin" }),
            BlockOp::XRead { .. } | BlockOp::XReadGroup(_) => return,
        };
        self.notes.push(class, db, event, key);
        if key_gone {
            self.notes.push(GENERIC, db, "del", key);
        }
    }
}

/// The pops proper, on the shard's state.
fn pop(ctx: &mut crate::Ctx<'_>, key: &Bytes, op: &BlockOp, target: MoveTarget) -> Option<Frame> {
    use crate::families::{lists, zsets};
    // The command's own attempt, on this one key: `[key, element]`, `[key, [elements]]`,
    // `[key, member, score]` or `[key, [[member, score], …]]`.
    let keys = std::slice::from_ref(key);
    match op {
        BlockOp::Pop { end, count } => found(lists::pop_first(ctx, keys, *end, *count)),
        BlockOp::Move { from, .. } if target == MoveTarget::Elsewhere => {
            found(lists::pop_first(ctx, keys, *from, None))
        }
        // Served only while the source is a list; then the move runs as BLMOVE would run at
        // once, so a destination of another type answers WRONGTYPE (as Redis 7 re-runs the
        // command) and the element stays where it is, for the next waiter.
        BlockOp::Move { dst, from, to } => {
            if !lists::holds_list(ctx, key) {
                return None;
            }
            match lists::move_one(ctx, key, dst, *from, *to) {
                Ok(moved) => Some(Frame::Bulk(moved?)),
                Err(wrong_type) => Some(wrong_type),
            }
        }
        BlockOp::ZPop { max, count } => found(zsets::pop_first(ctx, keys, *max, *count)),
        BlockOp::XRead { .. } | BlockOp::XReadGroup(_) => unreachable!("served above"),
    }
}

/// An attempt's reply as a waiter's answer: nothing found (nil) or an error is `None`.
fn found(frame: Frame) -> Option<Frame> {
    (!matches!(frame, Frame::Null | Frame::NullArray) && !frame.is_error()).then_some(frame)
}

fn keyed(key: &Bytes, entries: Frame) -> Frame {
    Frame::Keyed(vec![(Frame::Bulk(key.clone()), entries)])
}
