//! Moving slots between consensus groups (`RAFT MOVESLOTS`, docs/REPLICATION.md): who takes
//! each step, and when. What each step changes is the shard's (`wetask_shards::shard::
//! slot_moves`), journaled so that it goes through the group's own log.
//!
//! Every node runs every group, so a move from group *i* to group *j* moves the slots
//! between two shards of the same nodes, and each step is taken by one group's leader
//! from what its own node's members of the other groups have committed, with no request
//! between nodes. Every [`CHECK`], on each shard that leads its group:
//!
//! 1. **Group 0** began the move in its map (`RAFT MOVESLOTS`); its leader ends it (the
//!    map gives the slots to *j*) once its node's member of *j* has committed the arrival.
//! 2. **The source** *i*, seeing the move in its node's copy of the map, freezes the slots
//!    in its own log, holding its shard's lock (a transaction or script under way ends
//!    first). From that entry on, every member of *i* refuses their keys and queues
//!    (`-TRYAGAIN`, where every command runs), so they stop changing; the commands blocked
//!    on the shard end with the same error (nothing would wake them there again).
//! 3. **The target** *j*, once its node's member of *i* has committed the freeze (so its
//!    copy of the slots is final), copies their keys and queues from that local shard (a
//!    hop, read only) into its own log, then marks them its own. A leader that loses its
//!    leadership stops; the next one copies again from the start (puts replace).
//! 4. **The source**, once the map gives the slots to *j*, deletes them, a batch per turn,
//!    then marks the move done in its log. The slots stay frozen there until a move
//!    brings them back.
//!
//! A write acknowledged by *i* committed before the freeze, so it is in *j*'s copy; after
//! the freeze *i* acknowledges none for the slots, and *j* serves them only after its
//! copy. A node whose copy of the map lags sends clients to *i*, which answers
//! `-TRYAGAIN` until it catches up.

use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use wetask_shards::shard::slot_moves::{GroupMap, Move, SlotCopy, FROZEN};

use crate::consensus::Consensus;
use crate::mesh::{KeyRequest, Request, Response};
use crate::shard::ShardCtx;

/// How often each shard looks for a step to take.
const CHECK: Duration = Duration::from_millis(100);
/// Keys a source deletes per loop turn once a move has ended.
const DROP_BATCH: usize = 1000;
/// Keys the target copies per Raft entry.
const COPY_BATCH: usize = 1000;

/// The shard's slot mover: runs while the server does (consensus mode, several shards).
pub async fn run(ctx: Rc<ShardCtx>) {
    let Some(consensus) = ctx.globals.consensus.clone() else {
        return;
    };
    if ctx.shard_count < 2 || consensus.transport.is_capturing() {
        return;
    }
    while !ctx.globals.shutting_down() {
        ctx.mover.next(CHECK).await;
        if consensus.serving(ctx.id) {
            step(&ctx, &consensus).await;
        }
    }
}

/// A step of a slot move that a group's leader takes (see the module's comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The source freezes the move's slots.
    Freeze(Move),
    /// The target copies them in and marks them its own.
    CopyIn(Move),
    /// The source drops a move that has ended.
    Drop(Move),
}

/// On group 0's leader, whose own map is `own`: the move under way and the map once it has
/// ended, when this node's member of its target has committed the arrival.
pub fn map_to_finish(consensus: &Consensus, own: Option<&GroupMap>) -> Option<(Move, GroupMap)> {
    let map = own?;
    let m = map.moving?;
    let arrived = consensus.groups[usize::from(m.to)].arrived.load(Relaxed);
    (arrived >= m.id).then(|| (m, map.finish()))
}

/// The step the leader of `group` has to take now, from its own part in moves
/// (`progress`, `Shard::slot_move_progress`) and what this node's copy of the map and its
/// members of the other groups have committed.
pub fn next_step(
    consensus: &Consensus,
    group: usize,
    progress: (Option<Move>, u64),
) -> Option<Step> {
    let map = consensus.slot_map()?;
    let (leaving, arrived) = progress;
    if let Some(left) = leaving {
        // A move this group left must be dropped before it takes part in the next.
        let ended = map.last_move >= left.id && map.moving.is_none_or(|m| m.id != left.id);
        return ended.then_some(Step::Drop(left));
    }
    let m = map.moving?;
    if usize::from(m.from) == group {
        return Some(Step::Freeze(m));
    }
    let froze = consensus.groups[usize::from(m.from)].froze.load(Relaxed);
    (usize::from(m.to) == group && arrived < m.id && froze >= m.id).then_some(Step::CopyIn(m))
}

/// The step this shard, leading its group, has to take now, if any.
async fn step(ctx: &Rc<ShardCtx>, consensus: &Consensus) {
    if ctx.id == 0 {
        let mut shard = ctx.shard.borrow_mut();
        if let Some((m, next)) = map_to_finish(consensus, shard.slot_map()) {
            shard.log_slot_map(next);
            tracing::info!(%m, "slot move: the map gives the slots to their new group");
        }
    }
    let progress = ctx.shard.borrow().slot_move_progress();
    match next_step(consensus, ctx.id, progress) {
        Some(Step::Drop(m)) => drop_moved(ctx, consensus, m).await,
        Some(Step::Freeze(m)) => freeze(ctx, consensus, m).await,
        Some(Step::CopyIn(m)) => copy_in(ctx, consensus, m).await,
        None => {}
    }
}

/// On the source's leader: the move's slots frozen in its log, under the shard's lock.
async fn freeze(ctx: &ShardCtx, consensus: &Consensus, m: Move) {
    let token = ctx.new_token();
    ctx.lock_local(token).await;
    let still = consensus.serving(ctx.id) && ctx.shard.borrow().slot_move_progress().0.is_none();
    if still {
        ctx.shard.borrow_mut().freeze_slots(m);
        let ended = ctx.end_blocked(FROZEN);
        tracing::info!(
            %m,
            ended,
            "slot move: the slots are frozen in the source group"
        );
    }
    ctx.unlock(token);
}

/// Whether this node still leads the shard's group, without a break since now: a step
/// spread over several turns stops once it does not (the next leader takes it up again).
fn still_leading<'a>(ctx: &ShardCtx, consensus: &'a Consensus) -> impl Fn() -> bool + 'a {
    let (id, group) = (ctx.id, &consensus.groups[ctx.id]);
    let epoch = group.leadership.load(Relaxed);
    move || consensus.serving(id) && group.leadership.load(Relaxed) == epoch
}

/// On the target's leader: the frozen keys and queues copied from this node's member of
/// the source, then the slots marked this group's.
async fn copy_in(ctx: &ShardCtx, consensus: &Consensus, m: Move) {
    let still = still_leading(ctx, consensus);
    let from = usize::from(m.from);
    let mut keys = 0;
    for slot in m.first..=m.last {
        match copy_slot_keys(ctx, consensus, from, slot, &still).await {
            Some(copied) => keys += copied,
            None => return,
        }
    }
    let request = Request::Keys(KeyRequest::CopySlotQueues {
        first: m.first,
        last: m.last,
    });
    let Response::Key(queues) = ctx.request(from, request).await else {
        tracing::warn!("slot move: the source shard did not copy the queues");
        return;
    };
    if !still() {
        return;
    }
    let mut shard = ctx.shard.borrow_mut();
    let queues = match queues.map(|payload| shard.take_in_slot_queues(&payload)) {
        Some(Ok(count)) => count,
        Some(Err(e)) => {
            tracing::error!("slot move: the copied queues do not load ({e})");
            return;
        }
        None => 0,
    };
    shard.arrive_slots(m);
    tracing::info!(
        %m,
        keys,
        queues,
        "slot move: the slots' keys and queues are copied into the target group"
    );
}

/// The keys of `slot` copied from shard `from` into this one, 1,000 an entry; how many,
/// or `None` once this node stops leading (or the source does not answer).
async fn copy_slot_keys(
    ctx: &ShardCtx,
    consensus: &Consensus,
    from: usize,
    slot: u16,
    still: &dyn Fn() -> bool,
) -> Option<usize> {
    let request = Request::Keys(KeyRequest::SlotKeyNames { slot });
    let Response::KeyNames(names) = ctx.request(from, request).await else {
        tracing::warn!(
            slot,
            "slot move: the source shard did not name a slot's keys"
        );
        return None;
    };
    let mut keys = 0;
    for batch in names.chunks(COPY_BATCH) {
        let request = Request::Keys(KeyRequest::CopyKeys {
            keys: batch.to_vec(),
        });
        let Response::SlotKeys(copied) = ctx.request(from, request).await else {
            tracing::warn!(slot, "slot move: the source shard did not copy keys");
            return None;
        };
        if !still() {
            return None;
        }
        if copied.is_empty() {
            // Every one of them expired meanwhile: nothing to propose.
            continue;
        }
        keys += copied.len();
        let proposed = consensus.groups[ctx.id].proposed.load(Relaxed);
        ctx.shard
            .borrow_mut()
            .take_in_slot_keys(SlotCopy { keys: copied });
        // One batch an entry: wait until an entry is proposed after it (it carries the
        // batch), so that a slot of millions of keys (a hash tag's) never gathers into one
        // huge entry.
        while consensus.groups[ctx.id].proposed.load(Relaxed) == proposed {
            futures_lite::future::yield_now().await;
            if !still() {
                return None;
            }
        }
    }
    Some(keys)
}

/// On the source's leader, once the map gives the slots to their new group: their keys
/// and queues deleted, a batch per loop turn, then the move marked done here.
async fn drop_moved(ctx: &ShardCtx, consensus: &Consensus, m: Move) {
    let still = still_leading(ctx, consensus);
    let (mut keys, mut this_turn) = (0, 0);
    for slot in m.first..=m.last {
        if ctx.shard.borrow().serves_slot(slot) {
            // A later move brought it back: its keys are this group's again.
            continue;
        }
        loop {
            let dropped = ctx
                .shard
                .borrow_mut()
                .drop_slot_keys(slot, DROP_BATCH - this_turn);
            keys += dropped;
            this_turn += dropped;
            if this_turn >= DROP_BATCH {
                // The turn's deletes go as one entry; the shard serves meanwhile.
                this_turn = 0;
                futures_lite::future::yield_now().await;
                if !still() {
                    return;
                }
                continue;
            }
            break;
        }
    }
    let mut shard = ctx.shard.borrow_mut();
    let queues = shard.drop_slot_queues(m.first, m.last);
    shard.dropped_slots(m.id);
    tracing::info!(
        %m,
        keys,
        queues,
        "slot move: the source group dropped the moved slots"
    );
}
