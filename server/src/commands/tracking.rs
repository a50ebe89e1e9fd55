//! Client-side caching's commands: CLIENT TRACKING, CACHING, GETREDIR and TRACKINGINFO,
//! with Redis 7's options, replies and error texts. The connection keeps its mode
//! (`clients::TrackingState`); every shard learns it (`shard::tracking::register_everywhere`)
//! and remembers the reads it runs for the client; invalidations come back through the
//! client's home shard (`shard::tracking`).

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::args::{is, parse_i64};
use wetask_shards::errors::{wrong_arity, SYNTAX};
use wetask_shards::keyspace::tracking::{Mode, Reader};
use wetask_shards::request::Request as Command;
use wetask_shards::table::{flag, CommandSpec, Route};

use crate::clients::{ConnState, TrackingState};
use crate::mesh::{Request, Response, TrackingRequest};
use crate::shard::tracking::{arm, register_everywhere};
use crate::shard::ShardCtx;

/// Most prefixes one CLIENT TRACKING may name (each is checked against every other).
pub const PREFIXES_MAX: usize = 1024;

/// What CLIENT TRACKING's options said.
#[derive(Default)]
struct Options {
    redirect: Option<i64>,
    bcast: bool,
    optin: bool,
    optout: bool,
    noloop: bool,
    prefixes: Vec<Bytes>,
}

fn parse_options(args: &[Bytes]) -> Result<Options, Frame> {
    let mut options = Options::default();
    let mut i = 3;
    while i < args.len() {
        let word = &args[i];
        let more = i + 1 < args.len();
        if is(word, "redirect") && more {
            i += 1;
            if options.redirect.is_some_and(|r| r != 0) {
                return Err(Frame::static_error(
                    "ERR A client can only redirect to a single other client",
                ));
            }
            let Some(id) = parse_i64(&args[i]) else {
                return Err(Frame::static_error(
                    "ERR value is not an integer or out of range",
                ));
            };
            options.redirect = Some(id);
        } else if is(word, "bcast") {
            options.bcast = true;
        } else if is(word, "optin") {
            options.optin = true;
        } else if is(word, "optout") {
            options.optout = true;
        } else if is(word, "noloop") {
            options.noloop = true;
        } else if is(word, "prefix") && more {
            i += 1;
            if options.prefixes.len() >= PREFIXES_MAX {
                return Err(Frame::error(format!(
                    "ERR too many prefixes (at most {PREFIXES_MAX})"
                )));
            }
            options.prefixes.push(args[i].clone());
        } else {
            return Err(Frame::static_error(SYNTAX));
        }
        i += 1;
    }
    Ok(options)
}

/// Redis's checks, in its order, of new options against each other and the current mode.
fn check_options(current: Option<&TrackingState>, o: &Options) -> Result<(), Frame> {
    if !o.bcast && !o.prefixes.is_empty() {
        return Err(Frame::static_error(
            "ERR PREFIX option requires BCAST mode to be enabled",
        ));
    }
    if current.is_some_and(|t| t.bcast != o.bcast) {
        return Err(Frame::static_error("ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode."));
    }
    if o.bcast && (o.optin || o.optout) {
        return Err(Frame::static_error(
            "ERR OPTIN and OPTOUT are not compatible with BCAST",
        ));
    }
    if o.optin && o.optout {
        return Err(Frame::static_error(
            "ERR You can't specify both OPTIN mode and OPTOUT mode",
        ));
    }
    if current.is_some_and(|t| (o.optin && t.optout) || (o.optout && t.optin)) {
        return Err(Frame::static_error("ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode."));
    }
    if o.bcast {
        check_prefix_overlaps(current.map_or(&[], |t| &t.prefixes), &o.prefixes)?;
    }
    Ok(())
}

fn overlap(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

/// Two prefixes of one client must not both match a key (Redis's rule and texts).
fn check_prefix_overlaps(existing: &[Bytes], new: &[Bytes]) -> Result<(), Frame> {
    let text = |b: &Bytes| String::from_utf8_lossy(b).into_owned();
    for (i, prefix) in new.iter().enumerate() {
        if let Some(old) = existing.iter().find(|old| overlap(old, prefix)) {
            return Err(Frame::error(format!(
                "ERR Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a single client must not overlap.",
                text(prefix),
                text(old)
            )));
        }
        if let Some(other) = new[i + 1..].iter().find(|other| overlap(prefix, other)) {
            return Err(Frame::error(format!(
                "ERR Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a single client must not overlap.",
                text(prefix),
                text(other)
            )));
        }
    }
    Ok(())
}

/// The shard of connected client `id`, asking the peers when it is not here.
async fn find_client(ctx: &ShardCtx, id: u64) -> Option<usize> {
    if ctx.clients.borrow().get(id).is_some() {
        return Some(ctx.id);
    }
    let pending = ctx.request_peers(|| Request::Tracking(TrackingRequest::HasClient { id }));
    let mut found = None;
    for (shard, future) in pending {
        if matches!(future.await, Response::Bool(true)) {
            found = Some(shard);
        }
    }
    found
}

/// CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX p …] [BCAST] [OPTIN] [OPTOUT] [NOLOOP].
pub async fn tracking(ctx: &Rc<ShardCtx>, conn: &Rc<RefCell<ConnState>>, args: &[Bytes]) -> Frame {
    if args.len() < 3 {
        return wrong_arity("client|tracking");
    }
    let options = match parse_options(args) {
        Ok(options) => options,
        Err(err) => return err,
    };
    let redirect = match options.redirect {
        None => None,
        Some(id) => match find_client(ctx, id.max(0) as u64).await {
            Some(home) if id > 0 => Some((id as u64, home)),
            _ => {
                return Frame::static_error("ERR The client ID you want redirect to does not exist")
            }
        },
    };
    let on = is(&args[2], "on");
    if !on && !is(&args[2], "off") {
        return Frame::static_error(SYNTAX);
    }
    let client = conn.borrow().id;
    if !on {
        if conn.borrow_mut().tracking.take().is_some() {
            drop(register_everywhere(ctx, client, None));
        }
        return Frame::ok();
    }
    let state = {
        let current = conn.borrow().tracking.clone();
        if let Err(err) = check_options(current.as_deref(), &options) {
            return err;
        }
        let mut prefixes = current.map(|t| t.prefixes).unwrap_or_default();
        if options.bcast {
            if options.prefixes.is_empty() && !prefixes.iter().any(|p| p.is_empty()) {
                prefixes.push(Bytes::new());
            }
            prefixes.extend(options.prefixes);
            prefixes.sort();
            prefixes.dedup();
        }
        TrackingState {
            bcast: options.bcast,
            optin: options.optin,
            optout: options.optout,
            noloop: options.noloop,
            redirect,
            broken_redirect: false,
            prefixes,
            caching: false,
        }
    };
    let mode = if state.bcast {
        Mode::Broadcast(state.prefixes.clone())
    } else if state.optin {
        Mode::OptIn
    } else if state.optout {
        Mode::OptOut
    } else {
        Mode::Default
    };
    conn.borrow_mut().tracking = Some(Box::new(state));
    for peer in register_everywhere(ctx, client, Some(Reader::new(ctx.id, mode))) {
        peer.await;
    }
    Frame::ok()
}

/// CLIENT CACHING YES|NO: the next command is the exception to OPTIN or OPTOUT.
pub fn caching(state: &mut ConnState, args: &[Bytes]) -> Frame {
    if args.len() != 3 {
        return wrong_arity("client|caching");
    }
    let Some(tracking) = state.tracking.as_mut() else {
        return Frame::static_error("ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled");
    };
    if is(&args[2], "yes") {
        if !tracking.optin {
            return Frame::static_error(
                "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.",
            );
        }
    } else if is(&args[2], "no") {
        if !tracking.optout {
            return Frame::static_error(
                "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.",
            );
        }
    } else {
        return Frame::static_error(SYNTAX);
    }
    tracking.caching = true;
    Frame::ok()
}

/// CLIENT GETREDIR: the redirect id, 0 for none, -1 when not tracking.
pub fn getredir(state: &ConnState, args: &[Bytes]) -> Frame {
    if args.len() != 2 {
        return wrong_arity("client|getredir");
    }
    Frame::Integer(match &state.tracking {
        Some(t) => t.redirect.map_or(0, |(id, _)| id as i64),
        None => -1,
    })
}

/// CLIENT TRACKINGINFO: flags, redirect and prefixes, as Redis answers them.
pub fn trackinginfo(state: &ConnState, args: &[Bytes]) -> Frame {
    if args.len() != 2 {
        return wrong_arity("client|trackinginfo");
    }
    let bulk = |s: &'static str| Frame::Bulk(Bytes::from_static(s.as_bytes()));
    let (flags, redirect, prefixes) = match &state.tracking {
        None => (vec![bulk("off")], -1, Vec::new()),
        Some(t) => {
            // Redis's order.
            let flags = [
                ("on", true),
                ("bcast", t.bcast),
                ("optin", t.optin),
                ("caching-yes", t.optin && t.caching),
                ("optout", t.optout),
                ("caching-no", t.optout && t.caching),
                ("noloop", t.noloop),
                ("broken_redirect", t.broken_redirect),
            ];
            (
                flags
                    .into_iter()
                    .filter(|(_, set)| *set)
                    .map(|(name, _)| bulk(name))
                    .collect(),
                t.redirect.map_or(0, |(id, _)| id as i64),
                t.prefixes.iter().cloned().map(Frame::Bulk).collect(),
            )
        }
    };
    Frame::Map(vec![
        (bulk("flags"), Frame::Array(flags)),
        (bulk("redirect"), Frame::Integer(redirect)),
        (bulk("prefixes"), Frame::Array(prefixes)),
    ])
}

/// The command after CLIENT CACHING: its keys' shards are told to make it the exception
/// (ahead of the command itself, in the mesh's order). A CLIENT command passes the flag on,
/// and inside MULTI it holds until EXEC, whose queued commands all take it, as in Redis.
pub fn arm_exception(ctx: &ShardCtx, state: &mut ConnState, spec: &CommandSpec, command: &Command) {
    if spec.name == "client" || spec.name == "multi" {
        return;
    }
    if spec.name == "exec" {
        // EXEC runs its keyed commands here, other shards' keys lent to it.
        for command in state.multi.iter().flatten() {
            let runs_here = command.spec().is_some_and(|spec| {
                spec.arity_ok(command.args.len())
                    && !spec.has(flag::TASK)
                    && matches!(spec.route, Route::Keyed | Route::Split(_))
                    && command.owners() != wetask_shards::request::Owners::None
            });
            if runs_here {
                arm(ctx, ctx.id, state.id);
            }
        }
    } else {
        for shard in shards_running(ctx, spec, command) {
            arm(ctx, shard, state.id);
        }
    }
    if let Some(tracking) = state.tracking.as_mut() {
        tracking.caching = false;
    }
}

/// Where a keyed command runs its keys (each shard once): their owner; this shard when a
/// keyed command's keys span shards (`routing::cross` lends them here); each owner for a
/// split one. Nowhere for the rest: scripts' reads are tracked as plain reads.
fn shards_running(ctx: &ShardCtx, spec: &CommandSpec, command: &Command) -> Vec<usize> {
    if spec.has(flag::TASK) || !matches!(spec.route, Route::Keyed | Route::Split(_)) {
        return Vec::new();
    }
    let mut shards: Vec<usize> = command
        .key_owners(ctx.shard_count)
        .into_iter()
        .map(|(_, owner)| owner)
        .collect();
    shards.sort_unstable();
    shards.dedup();
    if spec.route == Route::Keyed && shards.len() > 1 {
        return vec![ctx.id];
    }
    shards
}

/// RESET: tracking goes off.
pub fn reset(ctx: &ShardCtx, state: &mut ConnState) {
    if state.tracking.take().is_some() {
        drop(register_everywhere(ctx, state.id, None));
    }
}
