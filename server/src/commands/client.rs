//! CLIENT and its subcommands (ID, INFO, LIST, KILL, SETNAME, SETINFO, PAUSE, UNPAUSE,
//! REPLY, UNBLOCK, NO-EVICT, NO-TOUCH …; TRACKING and CACHING are in `tracking`).

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::args::{is, parse_i64};
use wetask_shards::errors::{subcommand_syntax, unknown_subcommand, wrong_arity, SYNTAX};

use crate::clients::{ClientKind, ConnState, KillFilter, ReplyMode};
use crate::globals::unix_ms;
use crate::mesh::{AdminRequest, Request, Response};
use crate::shard::ShardCtx;

pub(super) fn valid_name(name: &[u8]) -> Result<(), Frame> {
    if printable(name) {
        Ok(())
    } else {
        Err(Frame::static_error(
            "ERR Client names cannot contain spaces, newlines or special characters.",
        ))
    }
}

/// What a client name and SETINFO's values may hold: CLIENT LIST splits on spaces.
pub(super) fn printable(value: &[u8]) -> bool {
    value.iter().all(|&b| (b'!'..=b'~').contains(&b))
}

/// CLIENT SETINFO LIB-NAME|LIB-VER value (an empty value clears it).
pub(super) fn client_setinfo(conn: &mut ConnState, args: &[Bytes]) -> Frame {
    let attr = &args[2];
    let value = (!args[3].is_empty()).then(|| args[3].clone());
    let slot = if is(attr, "lib-name") {
        &mut conn.lib_name
    } else if is(attr, "lib-ver") {
        &mut conn.lib_ver
    } else {
        return Frame::error(format!(
            "ERR Unrecognized option '{}'",
            String::from_utf8_lossy(attr)
        ));
    };
    if !printable(&args[3]) {
        return Frame::error(format!(
            "ERR {} cannot contain spaces, newlines or special characters.",
            String::from_utf8_lossy(attr)
        ));
    }
    *slot = value;
    Frame::ok()
}

/// CLIENT NO-EVICT|NO-TOUCH ON|OFF.
pub(super) async fn client_flag(
    ctx: &Rc<ShardCtx>,
    conn: &Rc<RefCell<ConnState>>,
    args: &[Bytes],
) -> Frame {
    let on = if is(&args[2], "on") {
        true
    } else if is(&args[2], "off") {
        false
    } else {
        return Frame::static_error(SYNTAX);
    };
    if is(&args[1], "no-evict") {
        conn.borrow_mut().no_evict = on;
        return Frame::ok();
    }
    let (id, was) = {
        let mut state = conn.borrow_mut();
        (state.id, std::mem::replace(&mut state.no_touch, on))
    };
    if was != on {
        // Every shard knows before the client's next command reaches it.
        for answered in ctx.no_touch_everywhere(id, on) {
            answered.await;
        }
    }
    Frame::ok()
}

// Long: one short branch per CLIENT subcommand (ID, INFO, SETNAME, NO-EVICT …), a dispatch table.
pub(super) async fn client(
    ctx: &Rc<ShardCtx>,
    conn: &Rc<RefCell<ConnState>>,
    args: &[Bytes],
) -> Frame {
    let sub = &args[1];
    let now = unix_ms();
    if is(sub, "id") && args.len() == 2 {
        return Frame::Integer(conn.borrow().id as i64);
    }
    if is(sub, "getname") && args.len() == 2 {
        return conn.borrow().name.clone().map_or(Frame::Null, Frame::Bulk);
    }
    if is(sub, "setname") && args.len() == 3 {
        if let Err(err) = valid_name(&args[2]) {
            return err;
        }
        conn.borrow_mut().name = (!args[2].is_empty()).then(|| args[2].clone());
        return Frame::ok();
    }
    if is(sub, "setinfo") {
        return client_setinfo(&mut conn.borrow_mut(), args);
    }
    if is(sub, "info") && args.len() == 2 {
        return Frame::Verbatim(*b"txt", Bytes::from(conn.borrow().describe(now) + "\n"));
    }
    if is(sub, "no-evict") || is(sub, "no-touch") {
        return client_flag(ctx, conn, args).await;
    }
    if is(sub, "reply") {
        return client_reply(&mut conn.borrow_mut(), args);
    }
    if is(sub, "pause") {
        return client_pause(ctx, args);
    }
    if is(sub, "unblock") {
        return client_unblock(ctx, args).await;
    }
    if is(sub, "unpause") {
        if args.len() != 2 {
            return wrong_arity("client|unpause");
        }
        ctx.globals.pause.unpause();
        return Frame::ok();
    }
    if is(sub, "tracking") {
        return super::tracking::tracking(ctx, conn, args).await;
    }
    if is(sub, "caching") {
        return super::tracking::caching(&mut conn.borrow_mut(), args);
    }
    if is(sub, "getredir") {
        return super::tracking::getredir(&conn.borrow(), args);
    }
    if is(sub, "trackinginfo") {
        return super::tracking::trackinginfo(&conn.borrow(), args);
    }
    if is(sub, "list") {
        return client_list(ctx, conn, args).await;
    }
    if is(sub, "kill") {
        return client_kill(ctx, conn, args).await;
    }
    if is(sub, "help") {
        let lines = [
            "CLIENT <subcommand> [<arg> ...]. Subcommands are:",
            "ID",
            "GETNAME",
            "SETNAME <name>",
            "SETINFO <LIB-NAME|LIB-VER> <value>",
            "INFO",
            "LIST [TYPE normal] [ID <id> ...]",
            "KILL <ip:port> | KILL [ID <id>] [ADDR <ip:port>] [LADDR <ip:port>] [SKIPME yes|no]",
            "NO-EVICT <on|off>",
            "NO-TOUCH <on|off>",
            "REPLY <ON|OFF|SKIP>",
            "PAUSE <timeout> [WRITE|ALL]",
            "UNBLOCK <clientid> [TIMEOUT|ERROR]",
            "UNPAUSE",
            "TRACKING <ON|OFF> [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]] [OPTIN] [OPTOUT] [NOLOOP]",
            "CACHING <YES|NO>",
            "GETREDIR",
            "TRACKINGINFO",
        ];
        return Frame::lines(&lines);
    }
    unknown_subcommand("client", sub)
}

/// CLIENT UNBLOCK id [TIMEOUT|ERROR]: 1 when the client was blocked (in a blocking pop or
/// stream read) and now is not, on whichever shard it lives.
pub(super) async fn client_unblock(ctx: &Rc<ShardCtx>, args: &[Bytes]) -> Frame {
    if args.len() < 3 {
        return wrong_arity("client|unblock");
    }
    if args.len() > 4 {
        return subcommand_syntax("client", &args[1]);
    }
    let error = match args.get(3) {
        None => false,
        Some(reason) if is(reason, "timeout") => false,
        Some(reason) if is(reason, "error") => true,
        Some(_) => {
            return Frame::static_error("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR")
        }
    };
    let Some(client) = parse_i64(&args[2]) else {
        return Frame::static_error("ERR value is not an integer or out of range");
    };
    let client = client.max(0) as u64;
    let pending =
        ctx.request_peers(|| Request::Admin(AdminRequest::ClientUnblock { client, error }));
    let mut unblocked = usize::from(ctx.unblock(client, error));
    for (_, future) in pending {
        if let Response::Count(n) = future.await {
            unblocked += n;
        }
    }
    Frame::Integer(unblocked.min(1) as i64)
}

/// CLIENT PAUSE timeout [WRITE|ALL]: Redis's checks, in its order.
pub(super) fn client_pause(ctx: &ShardCtx, args: &[Bytes]) -> Frame {
    if args.len() < 3 {
        return wrong_arity("client|pause");
    }
    if args.len() > 4 {
        return subcommand_syntax("client", &args[1]);
    }
    let all = match args.get(3) {
        None => true,
        Some(mode) if is(mode, "all") => true,
        Some(mode) if is(mode, "write") => false,
        Some(_) => return Frame::static_error("ERR CLIENT PAUSE mode must be WRITE or ALL"),
    };
    let timeout = match parse_i64(&args[2]) {
        Some(ms) if ms < 0 => return Frame::static_error("ERR timeout is negative"),
        Some(ms) => ms as u64,
        None => return Frame::static_error("ERR timeout is not an integer or out of range"),
    };
    ctx.globals
        .pause
        .pause(unix_ms().saturating_add(timeout), all);
    Frame::ok()
}

/// CLIENT REPLY ON | OFF | SKIP: OFF and SKIP are not answered (SKIP drops the next
/// command's reply too; under OFF it changes nothing), ON is.
pub(super) fn client_reply(state: &mut ConnState, args: &[Bytes]) -> Frame {
    if args.len() != 3 {
        return wrong_arity("client|reply");
    }
    let mode = &args[2];
    if is(mode, "on") {
        state.reply = ReplyMode::On;
    } else if is(mode, "off") {
        state.reply = ReplyMode::Off;
    } else if is(mode, "skip") {
        if state.reply != ReplyMode::Off {
            state.reply = ReplyMode::Skip(2);
        }
    } else {
        return Frame::static_error(SYNTAX);
    }
    Frame::ok()
}

pub(super) async fn client_list(
    ctx: &Rc<ShardCtx>,
    conn: &Rc<RefCell<ConnState>>,
    args: &[Bytes],
) -> Frame {
    let mut ids: Option<Vec<u64>> = None;
    let mut kind = None;
    let mut i = 2;
    while i < args.len() {
        if is(&args[i], "type") && i + 1 < args.len() {
            match ClientKind::parse(&args[i + 1]) {
                Some(found) => kind = Some(found),
                None => return unknown_type(&args[i + 1]),
            }
            i += 2;
        } else if is(&args[i], "id") && i + 1 < args.len() {
            let mut list = Vec::new();
            for arg in &args[i + 1..] {
                match parse_i64(arg) {
                    Some(id) if id > 0 => list.push(id as u64),
                    _ => return Frame::static_error("ERR Invalid client ID"),
                }
            }
            ids = Some(list);
            i = args.len();
        } else {
            return Frame::static_error(SYNTAX);
        }
    }
    let pending = ctx.request_peers(|| Request::Admin(AdminRequest::ClientList { kind }));
    let mut text = ctx
        .clients
        .borrow()
        .list(unix_ms(), Some(&conn.borrow()), kind);
    for (_, future) in pending {
        if let Response::Text(more) = future.await {
            text.push_str(&more);
        }
    }
    if let Some(ids) = ids {
        text = text
            .lines()
            .filter(|line| {
                let id = line.split(' ').next().and_then(|f| f.strip_prefix("id="));
                id.and_then(|id| id.parse::<u64>().ok())
                    .is_some_and(|id| ids.contains(&id))
            })
            .map(|line| format!("{line}\n"))
            .collect();
    }
    Frame::Verbatim(*b"txt", Bytes::from(text))
}

pub(super) async fn client_kill(
    ctx: &Rc<ShardCtx>,
    conn: &Rc<RefCell<ConnState>>,
    args: &[Bytes],
) -> Frame {
    let caller = conn.borrow().id;
    let old_style = args.len() == 3;
    // A primary's replicas are its stream threads, not clients of a shard.
    if args.len() == 4 && is(&args[2], "type") && (is(&args[3], "replica") || is(&args[3], "slave"))
    {
        let peers = ctx.globals.replication.peers.lock().expect("peers").len();
        ctx.globals.replication.sender_links.close(None);
        return Frame::Integer(peers as i64);
    }
    let filter = if old_style {
        KillFilter {
            caller,
            addr: Some(String::from_utf8_lossy(&args[2]).into_owned()),
            ..KillFilter::default()
        }
    } else {
        match kill_filter(caller, &args[2..]) {
            Ok(Some(filter))
                if filter
                    .user
                    .as_ref()
                    .is_some_and(|u| ctx.globals.acl.user(u).is_none()) =>
            {
                let name = filter.user.as_ref().expect("checked");
                return Frame::error(format!(
                    "ERR No such user '{}'",
                    String::from_utf8_lossy(name)
                ));
            }
            Ok(Some(filter)) => filter,
            // A USER or TYPE no connection here can match.
            Ok(None) => return Frame::Integer(0),
            Err(err) => return err,
        }
    };
    let pending = ctx.request_peers(|| {
        Request::Admin(AdminRequest::ClientKill {
            filter: filter.clone(),
        })
    });
    let mut killed = ctx
        .clients
        .borrow()
        .kill(&filter, Some(&mut conn.borrow_mut()));
    for (_, future) in pending {
        if let Response::Count(n) = future.await {
            killed += n;
        }
    }
    match (old_style, killed) {
        (true, 0) => Frame::static_error("ERR No such client"),
        (true, _) => Frame::ok(),
        (false, killed) => Frame::Integer(killed as i64),
    }
}

/// Redis's answer to a TYPE it does not know.
fn unknown_type(value: &[u8]) -> Frame {
    Frame::error(format!(
        "ERR Unknown client type '{}'",
        String::from_utf8_lossy(value)
    ))
}

/// CLIENT KILL's `<filter> <value> …` pairs; `None` when a filter can match nobody here
/// (TYPE replica: a WeTask primary's replicas are stream threads).
pub(super) fn kill_filter(caller: u64, pairs: &[Bytes]) -> Result<Option<KillFilter>, Frame> {
    let mut filter = KillFilter {
        caller,
        skip_me: true,
        ..KillFilter::default()
    };
    // In order, as Redis: a bad pair is reported before a dangling last word.
    for pair in pairs.chunks(2) {
        let [name, value] = pair else {
            return Err(Frame::static_error(SYNTAX));
        };
        let text = String::from_utf8_lossy(value).into_owned();
        match name {
            a if is(a, "id") => match parse_i64(value) {
                Some(id) if id > 0 => filter.id = Some(id as u64),
                _ => {
                    return Err(Frame::static_error(
                        "ERR client-id should be greater than 0",
                    ))
                }
            },
            a if is(a, "addr") => filter.addr = Some(text),
            a if is(a, "laddr") => filter.laddr = Some(text),
            a if is(a, "skipme") => {
                filter.skip_me = match text.to_ascii_lowercase().as_str() {
                    "yes" => true,
                    "no" => false,
                    _ => return Err(Frame::static_error(SYNTAX)),
                }
            }
            a if is(a, "user") => filter.user = Some(value.clone()),
            a if is(a, "type") => match ClientKind::parse(value) {
                // A WeTask primary's replicas are not connections of a shard.
                Some(ClientKind::Replica) => return Ok(None),
                Some(kind) => filter.kind = Some(kind),
                None => return Err(unknown_type(value)),
            },
            _ => return Err(Frame::static_error(SYNTAX)),
        }
    }
    Ok(Some(filter))
}
