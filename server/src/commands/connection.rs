//! Who the connection is: AUTH, HELLO (protocol, name, AUTH in one) and RESET, with the
//! password check they share.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use wetask_protocol::{Frame, Protocol};
use wetask_shards::args::{is, parse_i64};
use wetask_shards::errors::SYNTAX;

use crate::acl::User;
use crate::clients::ConnState;
use crate::shard::ShardCtx;

const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

/// The user that `password` opens (`user` None: AUTH's one-argument form, the default
/// user), counting and logging refusals (INFO's `acl_access_denied_auth`, ACL LOG). The
/// one-argument form is refused while the default user needs no password, as Redis
/// refuses it.
pub(super) fn log_in(
    ctx: &ShardCtx,
    conn: &ConnState,
    command: &Bytes,
    user: Option<&[u8]>,
    password: &[u8],
) -> Result<Arc<User>, Frame> {
    let acl = &ctx.globals.acl;
    if user.is_none() && acl.default_user().nopass {
        return Err(Frame::static_error(
            "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
        ));
    }
    let name = user.unwrap_or(b"default");
    match acl.authenticate(name, password) {
        Some(user) => Ok(user),
        None => {
            ctx.globals.auth_failures.fetch_add(1, Ordering::Relaxed);
            crate::access::note_failed_login(ctx, conn, command, name);
            Err(Frame::static_error(WRONGPASS))
        }
    }
}

pub(super) fn auth(ctx: &ShardCtx, conn: &mut ConnState, args: &[Bytes]) -> Frame {
    let (user, password) = match args.len() {
        2 => (None, &args[1]),
        3 => (Some(&args[1][..]), &args[2]),
        _ => return Frame::static_error(SYNTAX),
    };
    match log_in(ctx, conn, &args[0], user, password) {
        Ok(user) => {
            crate::access::log_in(ctx, conn, user);
            Frame::ok()
        }
        Err(err) => err,
    }
}

pub(super) fn hello(ctx: &ShardCtx, conn: &mut ConnState, args: &[Bytes]) -> Frame {
    let mut protocol = conn.protocol;
    let mut i = 1;
    if args.len() > 1 {
        protocol = match parse_i64(&args[1]) {
            Some(2) => Protocol::Resp2,
            Some(3) => Protocol::Resp3,
            Some(_) => return Frame::static_error("NOPROTO unsupported protocol version"),
            None => {
                return Frame::static_error(
                    "ERR Protocol version is not an integer or out of range",
                )
            }
        };
        i = 2;
    }
    // Every option is checked before any takes effect (Redis 7.2): a HELLO that fails
    // leaves the connection as it was.
    let mut name = None;
    let mut credentials = None;
    while i < args.len() {
        if is(&args[i], "auth") && i + 2 < args.len() {
            credentials = Some((&args[i + 1], &args[i + 2]));
            i += 3;
        } else if is(&args[i], "setname") && i + 1 < args.len() {
            if let Err(err) = super::client::valid_name(&args[i + 1]) {
                return err;
            }
            name = Some(args[i + 1].clone());
            i += 2;
        } else {
            return Frame::error(format!(
                "ERR Syntax error in HELLO option '{}'",
                String::from_utf8_lossy(&args[i])
            ));
        }
    }
    let mut logged_in = None;
    if let Some((user, password)) = credentials {
        match log_in(ctx, conn, &args[0], Some(user), password) {
            Ok(user) => logged_in = Some(user),
            Err(err) => return err,
        }
    }
    if !conn.authenticated && logged_in.is_none() {
        return Frame::static_error(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time",
        );
    }
    if let Some(user) = logged_in {
        crate::access::log_in(ctx, conn, user);
    }
    conn.protocol = protocol;
    if name.is_some() {
        conn.name = name;
    }
    let text = |s: &str| Frame::Bulk(Bytes::copy_from_slice(s.as_bytes()));
    Frame::Map(vec![
        (text("server"), text("redis")),
        (text("version"), text(&ctx.globals.config.announce_version)),
        (
            text("proto"),
            Frame::Integer(if protocol == Protocol::Resp3 { 3 } else { 2 }),
        ),
        (text("id"), Frame::Integer(conn.id as i64)),
        (text("mode"), text("standalone")),
        (text("role"), text("master")),
        (text("modules"), Frame::Array(Vec::new())),
    ])
}

pub(super) fn reset(ctx: &ShardCtx, conn: &mut ConnState) -> Frame {
    ctx.pubsub.drop_subscriptions(ctx, conn);
    super::tracking::reset(ctx, conn);
    super::workers::leave(ctx, conn);
    conn.subscriptions = Default::default();
    conn.multi = None;
    conn.multi_failed = false;
    crate::shard::watch::release(ctx, std::mem::take(&mut conn.watched));
    conn.db = 0;
    conn.protocol = Protocol::Resp2;
    conn.name = None;
    conn.reply = crate::clients::ReplyMode::On;
    conn.no_evict = false;
    conn.asking = false;
    conn.replica_reads = false;
    if std::mem::take(&mut conn.no_touch) {
        drop(ctx.no_touch_everywhere(conn.id, false));
    }
    let acl = &ctx.globals.acl;
    conn.acl_epoch = acl.epoch();
    crate::access::set_user(conn, acl.default_user());
    conn.authenticated = conn.user.enabled && conn.user.nopass;
    Frame::simple("RESET")
}
