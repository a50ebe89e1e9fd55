//! WAIT: a standalone server has no replica to acknowledge (the replication issue gives it
//! some); its arguments are checked as Redis checks them, for clients, EXEC and scripts.

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::args::parse_i64;

use crate::globals::unix_ms;
use crate::shard::ShardCtx;

/// WAIT's arguments: (replicas, time-out in ms).
pub fn parse_wait(args: &[Bytes]) -> Result<(i64, u64), Frame> {
    let Some(replicas) = parse_i64(&args[1]) else {
        return Err(Frame::static_error(
            "ERR value is not an integer or out of range",
        ));
    };
    match parse_i64(&args[2]) {
        Some(ms) if ms < 0 => Err(Frame::static_error("ERR timeout is negative")),
        Some(ms) => Ok((replicas, ms as u64)),
        None => Err(Frame::static_error(
            "ERR timeout is not an integer or out of range",
        )),
    }
}

/// WAIT numreplicas timeout: a standalone server has no replica to acknowledge, so the
/// answer is 0, at once for 0 replicas and at the time-out otherwise (0: never), as Redis
/// without replicas does.
pub(super) async fn wait_replicas(ctx: &ShardCtx, args: &[Bytes]) -> Frame {
    let (replicas, timeout) = match parse_wait(args) {
        Ok(parsed) => parsed,
        Err(err) => return err,
    };
    if replicas > 0 {
        let deadline = (timeout > 0).then(|| unix_ms().saturating_add(timeout));
        ctx.sleep_until(deadline).await;
    }
    Frame::Integer(0)
}
