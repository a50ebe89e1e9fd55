//! The ACL check before a command runs (`crate::acl` holds the users and the rules): the
//! connection's user read again when the users changed, the check itself, and a refusal's
//! reply, log entry and count. A user allowed everything (the default user, as shipped)
//! skips the check: [`unrestricted`] is one atomic load and one test.

use std::sync::Arc;

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::request::Request;
use wetask_shards::table::CommandSpec;

use crate::acl::log::{Context, Reason, Refusal};
use crate::acl::{self, Denied, User};
use crate::clients::ConnState;
use crate::shard::ShardCtx;

pub const NOAUTH: &str = "NOAUTH Authentication required.";

/// True when the connection's user may run anything and is current: no check is needed.
#[inline]
pub fn unrestricted(ctx: &ShardCtx, conn: &ConnState) -> bool {
    conn.acl_free && conn.acl_epoch == ctx.globals.acl.epoch()
}

/// Reads the connection's user again after a change to the users. A connection whose user
/// was deleted closes (ACL DELUSER also closes them at once); one that waited for AUTH is
/// let in when the default user no longer needs a password, as Redis decides per command.
pub fn refresh(ctx: &ShardCtx, conn: &mut ConnState) -> Result<(), Frame> {
    let acl = &ctx.globals.acl;
    let epoch = acl.epoch();
    if conn.acl_epoch == epoch {
        return Ok(());
    }
    conn.acl_epoch = epoch;
    match acl.user(&conn.user.name) {
        Some(user) => set_user(conn, user),
        None => {
            crate::clients::shut_down(conn);
            return Err(Frame::static_error(NOAUTH));
        }
    }
    if !conn.authenticated && acl.open_by_default() {
        conn.authenticated = true;
        set_user(conn, acl.default_user());
    }
    Ok(())
}

/// The connection's user, and the shortcut that goes with it.
pub fn set_user(conn: &mut ConnState, user: Arc<User>) {
    conn.acl_free = user.unrestricted;
    conn.user = user;
}

/// Logs in as `user` (AUTH, HELLO … AUTH).
pub fn log_in(ctx: &ShardCtx, conn: &mut ConnState, user: Arc<User>) {
    conn.authenticated = true;
    conn.acl_epoch = ctx.globals.acl.epoch();
    set_user(conn, user);
}

/// What a user's rules say of a command.
enum Verdict {
    Allowed,
    /// Allowed, but SORT's BY or GET needs every key readable: Redis's `ERR` text.
    SortOptionRefused(String),
    Denied(Denied),
}

/// `user`'s verdict on `request`. `queues_looked_up`: a task named by id is checked by its
/// queue afterwards ([`check_task_queue`]), so the id is no key here.
fn verdict(
    user: &User,
    spec: &'static CommandSpec,
    request: &Request,
    queues_looked_up: bool,
) -> Verdict {
    if user.unrestricted {
        return Verdict::Allowed;
    }
    match user.check(&acl::touches(spec, request, queues_looked_up)) {
        Err(denied) => Verdict::Denied(denied),
        Ok(()) => match acl::sort_option_refused(user, spec, request) {
            Some(text) => Verdict::SortOptionRefused(text),
            None => Verdict::Allowed,
        },
    }
}

/// Whether the connection's user may run `request`; `Err` is the reply (a refusal is
/// logged and counted). Callers skip this when [`unrestricted`].
pub fn check(
    ctx: &ShardCtx,
    conn: &ConnState,
    spec: &'static CommandSpec,
    request: &Request,
    context: Context,
) -> Result<(), Frame> {
    let user = &conn.user;
    // At the top level a task named by id has its queue checked once the command may wait
    // (`check_task_queue`); queued in MULTI, EXEC checks the id itself.
    match verdict(user, spec, request, context == Context::Toplevel) {
        Verdict::Allowed => Ok(()),
        Verdict::SortOptionRefused(text) => Err(Frame::error(text)),
        Verdict::Denied(denied) => {
            let args = &request.args[..];
            note_refusal(ctx, conn, user, denied, spec, args, context);
            let text = acl::refusal_text(denied, user, spec, args, false);
            Err(Frame::error(format!("NOPERM {text}")))
        }
    }
}

/// Counts and logs a refused command.
pub fn note_refusal(
    ctx: &ShardCtx,
    conn: &ConnState,
    user: &User,
    denied: Denied,
    spec: &'static CommandSpec,
    args: &[Bytes],
    context: Context,
) {
    let client_info = conn.describe(crate::globals::unix_ms());
    note_refusal_of(ctx, client_info, user, denied, spec, args, context);
}

/// A script's `redis.call`, checked against its caller's rules: `Err` is the script's
/// error (Redis 7.2's text).
pub fn check_script_call(
    ctx: &ShardCtx,
    caller: &crate::shard::ScriptAcl,
    spec: &'static CommandSpec,
    request: &Request,
) -> Result<(), String> {
    let user = &caller.user;
    let denied = match verdict(user, spec, request, false) {
        Verdict::Allowed => return Ok(()),
        Verdict::SortOptionRefused(text) => return Err(text),
        Verdict::Denied(denied) => denied,
    };
    let args = &request.args[..];
    let info = caller.client_info.clone();
    note_refusal_of(ctx, info, user, denied, spec, args, Context::Lua);
    let text = acl::refusal_text(denied, user, spec, args, false);
    Err(format!("ERR ACL failure in script: {text}"))
}

fn note_refusal_of(
    ctx: &ShardCtx,
    client_info: String,
    user: &User,
    denied: Denied,
    spec: &'static CommandSpec,
    args: &[Bytes],
    context: Context,
) {
    let acl = &ctx.globals.acl;
    acl.count(denied);
    acl.add_log(Refusal {
        reason: match denied {
            Denied::Command => Reason::Command,
            Denied::Key(_) => Reason::Key,
            Denied::Channel(_) => Reason::Channel,
        },
        context,
        object: acl::refused_object(denied, spec, args),
        username: user.name.clone(),
        client_info,
    });
}

/// Logs a refused login (AUTH, HELLO … AUTH): `command` as the client spelled it.
pub fn note_failed_login(ctx: &ShardCtx, conn: &ConnState, command: &Bytes, username: &[u8]) {
    ctx.globals.acl.add_log(Refusal {
        reason: Reason::Auth,
        context: context_of(conn),
        object: command.clone(),
        username: Bytes::copy_from_slice(username),
        client_info: conn.describe(crate::globals::unix_ms()),
    });
}

/// The context a command runs in, for the log.
pub fn context_of(conn: &ConnState) -> Context {
    if conn.multi.is_some() {
        Context::Multi
    } else {
        Context::Toplevel
    }
}

/// EXEC checks each queued command again, in case the user's rules changed since it was
/// queued; a refused one answers Redis's NOPERM in its place and the others run.
pub fn recheck_queued(
    ctx: &ShardCtx,
    conn: &ConnState,
    spec: &'static CommandSpec,
    request: &Request,
) -> Result<(), Frame> {
    let user = &conn.user;
    let denied = match verdict(user, spec, request, false) {
        Verdict::Allowed => return Ok(()),
        Verdict::SortOptionRefused(text) => return Err(Frame::error(text)),
        Verdict::Denied(denied) => denied,
    };
    note_refusal(ctx, conn, user, denied, spec, &request.args, Context::Multi);
    let reason = match denied {
        Denied::Command => "no permission to execute the command or subcommand",
        Denied::Key(_) => "no permission to touch the specified keys",
        Denied::Channel(_) => "no permission to access one of the channels used as arguments",
    };
    Err(Frame::error(format!(
        "NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: {reason}"
    )))
}

/// Whether a task command that names a task by id must first look up the task's queue
/// ([`check_task_queue`]): it then runs in a task, never inline. Asked before admission too,
/// when the connection may not have read its user again yet: a user the users' change has
/// restricted must not slip through inline, so only a current unrestricted user is let off.
pub fn looks_up_queue(ctx: &ShardCtx, conn: &ConnState, spec: &CommandSpec) -> bool {
    !unrestricted(ctx, conn) && acl::by_id(spec).is_some()
}

/// For a task command that names a task by id (`acl::BY_ID_COMMANDS`), run by a user whose
/// rules restrict it: the task's queue must match the user's key patterns, as the queue does
/// for the commands that name it. The queue is read with an internal TASK.GET on the task's
/// shard; an id that names no task is checked as a queue (TASK.REQUEUE takes either), and
/// otherwise runs (its reply says there is no such task). `Some` is the refusal.
pub async fn check_task_queue(
    ctx: &ShardCtx,
    conn: &std::cell::RefCell<ConnState>,
    spec: &'static CommandSpec,
    request: &Request,
    at: crate::routing::Target,
) -> Option<Frame> {
    let user = conn.borrow().user.clone();
    let writes = acl::by_id(spec)?;
    if user.unrestricted || request.args.len() < 2 {
        return None;
    }
    let id = request.args[1].clone();
    let get = wetask_shards::lookup(b"task.get").expect("task.get");
    let lookup = Request::with_spec(
        vec![Bytes::from_static(b"TASK.GET"), id.clone()],
        get,
        ctx.shard_count,
    );
    let reply = crate::routing::keyed(ctx, at, get, &lookup, None).await;
    let queue = match queue_in(&reply) {
        Some(queue) => queue,
        None if spec.name == "task.requeue" => id,
        None => return None,
    };
    let args = [request.args[0].clone(), queue];
    let touches = acl::Touches {
        id: acl::commands::index().of_spec(spec),
        subcommand: false,
        no_auth: false,
        args: &args,
        keys: vec![(
            1,
            acl::Access {
                read: true,
                write: writes,
            },
        )],
        channels: Vec::new(),
    };
    let denied = user.check(&touches).err()?;
    note_refusal(
        ctx,
        &conn.borrow(),
        &user,
        denied,
        spec,
        &args,
        Context::Toplevel,
    );
    let text = acl::refusal_text(denied, &user, spec, &args, false);
    Some(Frame::error(format!("NOPERM {text}")))
}

/// The `queue` field of a TASK.GET reply.
fn queue_in(reply: &Frame) -> Option<Bytes> {
    let field =
        |name: &Frame| matches!(name, Frame::Bulk(b) | Frame::Simple(b) if &b[..] == b"queue");
    match reply {
        Frame::Map(pairs) => pairs
            .iter()
            .find(|(name, _)| field(name))
            .and_then(|(_, value)| match value {
                Frame::Bulk(b) => Some(b.clone()),
                _ => None,
            }),
        Frame::Array(items) => items.chunks(2).find_map(|pair| match pair {
            [name, Frame::Bulk(value)] if field(name) => Some(value.clone()),
            _ => None,
        }),
        _ => None,
    }
}
