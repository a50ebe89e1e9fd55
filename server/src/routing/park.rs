//! Parking a command on the shards that own its keys (or queues), first answer wins: how a
//! blocked pop (`commands::blocking`) and a blocked task fetch (`commands::tasks`) wait.
//!
//! One part is parked on each owner: on this shard through its service, with a local slot
//! to answer into; on a peer as a held mesh request. The first owner to answer wins. Every
//! other owner is then asked to let go; each answers its held request (empty, or with what
//! it took meanwhile), and those answers are collected too, so the caller can give back
//! what the client will not receive. Nothing an owner took is lost.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;

use wetask_protocol::Frame;

use crate::mesh::{Request, Response};
use crate::shard::{LocalSlot, LocalWait, Reply, ShardCtx};

/// An answer a parked part waits for from one shard (a local slot or a held request).
type Wait = Pin<Box<dyn Future<Output = Vec<Frame>>>>;

/// How to park a command's parts and let them go, on this shard and on a peer.
pub struct Parking<'a, P> {
    /// (owner shard, the part it owns), one per owner.
    pub parts: &'a [(usize, P)],
    /// Parks the local part with this shard's service, answering into `Reply`.
    pub here: &'a dyn Fn(&P, Reply),
    /// The request that parks a part on its owner.
    pub there: &'a dyn Fn(&P) -> Request,
    /// Lets go of the local part (answered empty if still parked).
    pub let_go_here: &'a dyn Fn(),
    /// The request that lets go of the part a peer holds.
    pub let_go_there: &'a dyn Fn() -> Request,
}

/// What the owners answered: the winner's first, then the others', in part order.
pub struct Answers {
    pub first: Vec<Frame>,
    pub rest: Vec<Vec<Frame>>,
}

impl Answers {
    /// Every frame answered, the winner's first.
    pub fn into_frames(self) -> impl Iterator<Item = Frame> {
        self.first
            .into_iter()
            .chain(self.rest.into_iter().flatten())
    }
}

/// Names (keys, queues, task ids) grouped by the shard that owns them: shards in order of
/// first appearance, names in their order within each.
pub fn by_owner(
    ctx: &ShardCtx,
    names: impl IntoIterator<Item = bytes::Bytes>,
) -> Vec<(usize, Vec<bytes::Bytes>)> {
    let mut groups: Vec<(usize, Vec<bytes::Bytes>)> = Vec::new();
    for name in names {
        let shard = ctx.owner_of(&name);
        match groups.iter_mut().find(|(s, _)| *s == shard) {
            Some((_, names)) => names.push(name),
            None => groups.push((shard, vec![name])),
        }
    }
    groups
}

/// Parks every part, waits for the first answer, lets go of the rest and collects their
/// answers.
pub async fn first_answer<P>(ctx: &Rc<ShardCtx>, parking: Parking<'_, P>) -> Answers {
    let mut waits: Vec<Option<Wait>> = Vec::with_capacity(parking.parts.len());
    for (shard, part) in parking.parts {
        if *shard == ctx.id {
            let slot = Rc::new(LocalSlot::default());
            (parking.here)(part, Reply::Local(slot.clone()));
            waits.push(Some(Box::pin(LocalWait(slot))));
        } else {
            let response = ctx.request(*shard, (parking.there)(part));
            waits.push(Some(Box::pin(async move {
                match response.await {
                    Response::Frames(frames) => frames,
                    _ => Vec::new(),
                }
            })));
        }
    }
    let (winner, first) = first_ready(&mut waits).await;
    for (i, (shard, _)) in parking.parts.iter().enumerate() {
        if i == winner {
            continue;
        }
        if *shard == ctx.id {
            (parking.let_go_here)();
        } else {
            // Queued at once; its answer is the held request's.
            drop(ctx.request(*shard, (parking.let_go_there)()));
        }
    }
    let mut rest = Vec::new();
    for wait in waits.iter_mut().filter_map(Option::take) {
        rest.push(wait.await);
    }
    Answers { first, rest }
}

/// Resolves to the first of `waits` to finish (taking it out of the list) and its answer.
async fn first_ready(waits: &mut [Option<Wait>]) -> (usize, Vec<Frame>) {
    std::future::poll_fn(|cx| {
        for (i, slot) in waits.iter_mut().enumerate() {
            if let Some(wait) = slot {
                if let Poll::Ready(frames) = wait.as_mut().poll(cx) {
                    *slot = None;
                    return Poll::Ready((i, frames));
                }
            }
        }
        Poll::Pending
    })
    .await
}
