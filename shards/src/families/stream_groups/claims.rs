//! Taking pending entries over: XCLAIM (by id, with IDLE, TIME, RETRYCOUNT, FORCE, JUSTID,
//! LASTID) and XAUTOCLAIM (by idle time from a cursor, deleted entries dropped), each as
//! Redis 7.2 counts deliveries and marks consumers seen and active.

use super::*;

/// XCLAIM key group consumer min-idle-time id… [IDLE ms] [TIME ms] [RETRYCOUNT n] [FORCE]
/// [JUSTID] [LASTID id].
pub fn xclaim(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    notifying_new_consumer(ctx, args, claim_named)
}

pub fn xautoclaim(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    notifying_new_consumer(ctx, args, autoclaim)
}

/// Runs a claim (`key group consumer …`), notifying `xgroup-createconsumer` when it made
/// its consumer, as Redis does.
pub(super) fn notifying_new_consumer(ctx: &mut Ctx<'_>, args: &[Bytes], claim: Handler) -> Frame {
    if ctx.notes.is_none() {
        return claim(ctx, args);
    }
    let now = ctx.now_ms;
    let exists = |ctx: &mut Ctx<'_>| match typed::get::<Stream>(ctx.db(), &args[1], now) {
        Ok(Some(stream)) => has_consumer(stream, &args[2], &args[3]),
        _ => false,
    };
    let had = exists(ctx);
    let reply = claim(ctx, args);
    if !had && exists(ctx) {
        ctx.notify(
            crate::keyspace::notify::class::STREAM,
            "xgroup-createconsumer",
            &args[1],
        );
    }
    reply
}

/// XCLAIM proper.
pub(super) fn claim_named(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now_ms;
    let min_idle = match int_arg(&args[4]) {
        Ok(n) => n.max(0) as u64,
        Err(_) => return Frame::static_error("ERR Invalid min-idle-time argument for XCLAIM"),
    };
    let mut ids = Vec::new();
    let mut i = 5;
    while i < args.len() {
        match StreamId::parse(&args[i], 0) {
            Some(id) => ids.push(id),
            None => break,
        }
        i += 1;
    }
    let options = match ClaimOptions::parse(&args[i..], now) {
        Ok(options) => options,
        Err(err) => return err,
    };
    let ClaimOptions {
        delivered_ms,
        retry_count,
        force,
        justid,
        last_id,
    } = options;
    let (key, group_name, consumer) = (&args[1], &args[2], Bytes::copy_from_slice(&args[3]));
    let stream = match typed::get::<Stream>(ctx.db(), key, now) {
        Ok(Some(stream)) => stream,
        Ok(None) => return no_group(key, group_name, "XCLAIM"),
        Err(err) => return err,
    };
    let exists: Vec<bool> = ids.iter().map(|id| stream.get(*id).is_some()).collect();
    let Some(group) = stream.groups.get_mut(&group_name[..]) else {
        return no_group(key, group_name, "XCLAIM");
    };
    if let Some(last) = last_id {
        if last > group.last_delivered {
            group.last_delivered = last;
        }
    }
    let mut claimed = Vec::new();
    for (id, exists) in ids.into_iter().zip(exists) {
        let pending = group.pending.get(&id).cloned();
        let deliveries = match pending {
            None if force && exists => 0,
            None => continue,
            Some(_) if !exists => {
                // Deleted from the stream meanwhile: dropped from the pending list.
                group.ack(id);
                continue;
            }
            Some(p) => {
                if now.saturating_sub(p.delivered_ms) < min_idle {
                    continue;
                }
                p.deliveries
            }
        };
        let deliveries = retry_count.unwrap_or(if justid { deliveries } else { deliveries + 1 });
        group.assign(id, &consumer, delivered_ms, deliveries);
        claimed.push(id);
    }
    note_claim(group, &consumer, now, !claimed.is_empty());
    claimed_reply(stream, claimed, justid)
}

/// A claim (XCLAIM, XAUTOCLAIM) makes its consumer (Redis 7.2: whether or not it claimed
/// anything) and marks it seen; active too when it claimed something.
pub(super) fn note_claim(group: &mut Group, consumer: &Bytes, now: u64, claimed: bool) {
    let (c, _) = group.consumer(consumer, now);
    c.seen_ms = now;
    if claimed {
        c.active_ms = Some(now);
    }
}

/// XCLAIM's options after its ids.
pub(super) struct ClaimOptions {
    /// The delivery time the claimed entries get (IDLE, TIME; now by default).
    delivered_ms: u64,
    retry_count: Option<u64>,
    force: bool,
    justid: bool,
    last_id: Option<StreamId>,
}

impl ClaimOptions {
    fn parse(args: &[Bytes], now: u64) -> Result<Self, Frame> {
        let mut options = ClaimOptions {
            delivered_ms: now,
            retry_count: None,
            force: false,
            justid: false,
            last_id: None,
        };
        let mut i = 0;
        while i < args.len() {
            let a = &args[i];
            if is(a, "force") {
                options.force = true;
            } else if is(a, "justid") {
                options.justid = true;
            } else if is(a, "idle") || is(a, "time") || is(a, "retrycount") || is(a, "lastid") {
                let value = args.get(i + 1).ok_or_else(|| Frame::static_error(SYNTAX))?;
                if is(a, "lastid") {
                    options.last_id = Some(parse_id(value)?);
                } else {
                    let n = int_arg(value)
                        .map_err(|_| {
                            Frame::static_error("ERR Invalid IDLE option argument for XCLAIM")
                        })?
                        .max(0) as u64;
                    if is(a, "idle") {
                        options.delivered_ms = now.saturating_sub(n);
                    } else if is(a, "time") {
                        options.delivered_ms = n;
                    } else {
                        options.retry_count = Some(n);
                    }
                }
                i += 1;
            } else {
                return Err(Frame::error(format!(
                    "ERR Unrecognized XCLAIM option '{}'",
                    String::from_utf8_lossy(a)
                )));
            }
            i += 1;
        }
        Ok(options)
    }
}

/// XCLAIM's and XAUTOCLAIM's claimed entries: ids with JUSTID, else `[id, fields]` for
/// each that still exists.
pub(super) fn claimed_reply(stream: &Stream, claimed: Vec<StreamId>, justid: bool) -> Frame {
    if justid {
        return Frame::Array(
            claimed
                .into_iter()
                .map(|id| Frame::Bulk(id.to_bytes()))
                .collect(),
        );
    }
    Frame::Array(
        claimed
            .into_iter()
            .filter_map(|id| {
                stream.get(id).map(|fields| {
                    Frame::Array(vec![
                        Frame::Bulk(id.to_bytes()),
                        Frame::Array(fields.iter().map(|f| Frame::Bulk(f.clone())).collect()),
                    ])
                })
            })
            .collect(),
    )
}

/// XAUTOCLAIM's `[COUNT n] [JUSTID]`: (count, justid).
pub(super) fn autoclaim_options(args: &[Bytes]) -> Result<(usize, bool), Frame> {
    let mut count = 100usize;
    let mut justid = false;
    let mut i = 0;
    while i < args.len() {
        if is(&args[i], "count") && i + 1 < args.len() {
            match int_arg(&args[i + 1]) {
                Ok(n) if (1..=i64::MAX / 10).contains(&n) => count = n as usize,
                _ => return Err(Frame::static_error("ERR COUNT must be > 0")),
            }
            i += 2;
        } else if is(&args[i], "justid") {
            justid = true;
            i += 1;
        } else {
            return Err(Frame::static_error(SYNTAX));
        }
    }
    Ok((count, justid))
}

/// One XAUTOCLAIM's terms.
pub(super) struct Claim<'a> {
    consumer: &'a Bytes,
    min_idle: u64,
    count: usize,
    justid: bool,
    now: u64,
}

impl Claim<'_> {
    /// Claims the idle entries of `window` (pending entries in id order, with whether each
    /// still exists) until `count` are claimed or found deleted. Returns the claimed ids,
    /// the deleted ones (dropped from the PEL) and how many entries were looked at.
    fn window(
        &self,
        group: &mut Group,
        window: &[(StreamId, crate::values::stream::Pending, bool)],
    ) -> (Vec<StreamId>, Vec<StreamId>, usize) {
        let mut claimed = Vec::new();
        let mut deleted = Vec::new();
        let mut remaining = self.count;
        let mut examined = 0;
        for (id, p, live) in window {
            if remaining == 0 {
                break;
            }
            examined += 1;
            if !live {
                group.ack(*id);
                deleted.push(*id);
                remaining -= 1;
                continue;
            }
            if self.now.saturating_sub(p.delivered_ms) < self.min_idle {
                continue;
            }
            let deliveries = p.deliveries + u64::from(!self.justid);
            group.assign(*id, self.consumer, self.now, deliveries);
            claimed.push(*id);
            remaining -= 1;
        }
        (claimed, deleted, examined)
    }
}

/// XAUTOCLAIM key group consumer min-idle-time start [COUNT n] [JUSTID], proper.
pub(super) fn autoclaim(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now_ms;
    let min_idle = match int_arg(&args[4]) {
        Ok(n) => n.max(0) as u64,
        Err(_) => return Frame::static_error("ERR Invalid min-idle-time argument for XAUTOCLAIM"),
    };
    let start = match range_bound(&args[5], true) {
        Ok(id) => id,
        Err(err) => return err,
    };
    let (count, justid) = match autoclaim_options(&args[6..]) {
        Ok(options) => options,
        Err(err) => return err,
    };
    let (key, group_name, consumer) = (&args[1], &args[2], Bytes::copy_from_slice(&args[3]));
    let stream = match typed::get::<Stream>(ctx.db(), key, now) {
        Ok(Some(stream)) => stream,
        Ok(None) => return no_group(key, group_name, "XAUTOCLAIM"),
        Err(err) => return err,
    };
    // As Redis: at most COUNT×10 pending entries are looked at, COUNT of them claimed (or
    // found deleted), so one call costs O(COUNT) whatever the size of the PEL; the cursor is
    // the first entry not looked at.
    let attempts = count.saturating_mul(10);
    let window: Vec<(StreamId, crate::values::stream::Pending, bool)> = {
        let Some(group) = stream.groups.get(&group_name[..]) else {
            return no_group(key, group_name, "XAUTOCLAIM");
        };
        group
            .pending
            .range(start..)
            .take(attempts.saturating_add(1))
            .map(|(id, p)| (*id, p.clone(), stream.get(*id).is_some()))
            .collect()
    };
    let group = stream
        .groups
        .get_mut(&group_name[..])
        .expect("checked above");
    let claim = Claim {
        consumer: &consumer,
        min_idle,
        count,
        justid,
        now,
    };
    let (claimed, deleted, examined) = claim.window(group, &window[..window.len().min(attempts)]);
    let next = window.get(examined).map_or(StreamId::MIN, |(id, _, _)| *id);
    note_claim(group, &consumer, now, !claimed.is_empty());
    Frame::Array(vec![
        Frame::Bulk(next.to_bytes()),
        claimed_reply(stream, claimed, justid),
        Frame::Array(
            deleted
                .into_iter()
                .map(|id| Frame::Bulk(id.to_bytes()))
                .collect(),
        ),
    ])
}
