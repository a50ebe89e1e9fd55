//! ACL's subcommands, as Redis 7.2 answers them: SETUSER, GETUSER, DELUSER, LIST, USERS,
//! WHOAMI, CAT, LOG, SAVE, LOAD, GENPASS, DRYRUN and HELP. The users and rules live in
//! `crate::acl`; this module turns them into replies, and closes the connections of users
//! that DELUSER or LOAD removed.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::args::{is, parse_i64};
use wetask_shards::errors::unknown_subcommand;
use wetask_shards::request::Request;

use crate::acl::commands::{index, CATEGORIES};
use crate::clients::{ConnState, KillFilter};
use crate::mesh::{AdminRequest, Request as MeshRequest};
use crate::shard::ShardCtx;

/// Redis's reply to a subcommand with arguments it does not take.
fn syntax_error(sub: &[u8]) -> String {
    let sub = String::from_utf8_lossy(sub);
    format!("ERR unknown subcommand or wrong number of arguments for '{sub}'. Try ACL HELP.")
}

fn bulk(bytes: impl AsRef<[u8]>) -> Frame {
    Frame::Bulk(Bytes::copy_from_slice(bytes.as_ref()))
}

pub(super) async fn acl(
    ctx: &Rc<ShardCtx>,
    conn: &Rc<RefCell<ConnState>>,
    args: &[Bytes],
) -> Frame {
    let acl = &ctx.globals.acl;
    let sub = &args[1];
    if is(sub, "setuser") {
        setuser(ctx, conn, args).await
    } else if is(sub, "deluser") {
        match acl.delete(&args[2..]) {
            Ok(deleted) => {
                close_connections_of(ctx, conn, &args[2..]).await;
                Frame::Integer(deleted as i64)
            }
            Err(err) => Frame::error(err),
        }
    } else if is(sub, "getuser") {
        getuser(ctx, &args[2])
    } else if is(sub, "list") {
        Frame::Array(
            acl.list()
                .into_iter()
                .map(|l| Frame::Bulk(l.into()))
                .collect(),
        )
    } else if is(sub, "users") {
        Frame::Array(
            acl.users()
                .iter()
                .map(|u| Frame::Bulk(u.name.clone()))
                .collect(),
        )
    } else if is(sub, "whoami") {
        Frame::Bulk(conn.borrow().user.name.clone())
    } else if is(sub, "load") {
        load(ctx, conn).await
    } else if is(sub, "save") {
        match acl.save_file() {
            Ok(()) => Frame::ok(),
            Err(err) => Frame::error(err),
        }
    } else if is(sub, "cat") {
        cat(args)
    } else if is(sub, "genpass") {
        genpass(args)
    } else if is(sub, "log") {
        log(ctx, args)
    } else if is(sub, "dryrun") {
        dryrun(ctx, args)
    } else if is(sub, "help") {
        help()
    } else {
        unknown_subcommand("acl", sub)
    }
}

/// ACL SETUSER; connections of the user subscribed to channels it may no longer use close.
async fn setuser(ctx: &Rc<ShardCtx>, conn: &Rc<RefCell<ConnState>>, args: &[Bytes]) -> Frame {
    let acl = &ctx.globals.acl;
    let result = acl.set_user(&args[2], &args[3..]);
    ctx.globals.sync_password_set();
    if let Err(err) = result {
        return Frame::error(err);
    }
    if let Some(user) = acl.user(&args[2]) {
        let filter = KillFilter {
            caller: conn.borrow().id,
            skip_me: true,
            lost_channels: Some(user),
            ..KillFilter::default()
        };
        kill_everywhere(ctx, conn, filter).await;
    }
    Frame::ok()
}

/// ACL LOAD; the connections of users the file no longer has close.
async fn load(ctx: &Rc<ShardCtx>, conn: &Rc<RefCell<ConnState>>) -> Frame {
    let acl = &ctx.globals.acl;
    let before: Vec<Bytes> = acl.users().iter().map(|u| u.name.clone()).collect();
    if let Err(err) = acl.load_file() {
        return Frame::error(err);
    }
    ctx.globals.sync_password_set();
    let gone: Vec<Bytes> = before
        .into_iter()
        .filter(|name| acl.user(name).is_none())
        .collect();
    close_connections_of(ctx, conn, &gone).await;
    Frame::ok()
}

/// Closes every connection (on every shard) logged in as one of `names`; the caller's own
/// closes once this reply is sent, as in Redis.
async fn close_connections_of(ctx: &Rc<ShardCtx>, conn: &Rc<RefCell<ConnState>>, names: &[Bytes]) {
    for name in names {
        let filter = KillFilter {
            caller: conn.borrow().id,
            skip_me: true,
            user: Some(name.clone()),
            ..KillFilter::default()
        };
        {
            let mut me = conn.borrow_mut();
            if me.user.name == name {
                me.close_requested = true;
            }
        }
        kill_everywhere(ctx, conn, filter).await;
    }
}

/// Closes the connections `filter` matches, on every shard.
async fn kill_everywhere(ctx: &Rc<ShardCtx>, conn: &Rc<RefCell<ConnState>>, filter: KillFilter) {
    let pending = ctx.request_peers(|| {
        MeshRequest::Admin(AdminRequest::ClientKill {
            filter: filter.clone(),
        })
    });
    ctx.clients
        .borrow()
        .kill(&filter, Some(&mut conn.borrow_mut()));
    for (_, future) in pending {
        let _ = future.await;
    }
}

/// One selector's three fields, as GETUSER shows them.
fn selector_fields(selector: &crate::acl::selector::Selector) -> Vec<(Frame, Frame)> {
    vec![
        (bulk("commands"), bulk(selector.describe_commands())),
        (bulk("keys"), bulk(selector.describe_keys())),
        (bulk("channels"), bulk(selector.describe_channels())),
    ]
}

fn getuser(ctx: &ShardCtx, name: &[u8]) -> Frame {
    let Some(user) = ctx.globals.acl.user(name) else {
        return Frame::Null;
    };
    let mut fields = vec![
        (
            bulk("flags"),
            Frame::Set(user.flags().into_iter().map(bulk).collect()),
        ),
        (
            bulk("passwords"),
            Frame::Array(user.passwords.iter().map(bulk).collect()),
        ),
    ];
    fields.extend(selector_fields(&user.selectors[0]));
    let selectors = user.selectors[1..]
        .iter()
        .map(|s| Frame::Map(selector_fields(s)))
        .collect();
    fields.push((bulk("selectors"), Frame::Array(selectors)));
    Frame::Map(fields)
}

/// ACL CAT [category]: the categories, or the commands (and subcommands) in one.
fn cat(args: &[Bytes]) -> Frame {
    match args.len() {
        2 => Frame::Array(CATEGORIES.iter().map(bulk).collect()),
        3 => {
            let name = String::from_utf8_lossy(&args[2]);
            let Some(bits) = crate::acl::commands::category(&name) else {
                let shown: String = name.chars().take(128).collect();
                return Frame::error(format!("ERR Unknown category '{shown}'"));
            };
            Frame::Array(
                index()
                    .entries
                    .iter()
                    .filter(|e| e.categories & bits != 0)
                    .map(|e| bulk(e.name))
                    .collect(),
            )
        }
        _ => Frame::error(syntax_error(&args[1])),
    }
}

fn genpass(args: &[Bytes]) -> Frame {
    const BITS_MAX: i64 = 4096;
    let bits = match args.get(2) {
        None => 256,
        Some(arg) => match parse_i64(arg) {
            Some(bits) if bits > 0 && bits <= BITS_MAX => bits,
            Some(_) => {
                return Frame::error(format!(
                    "ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to {BITS_MAX}"
                ))
            }
            None => {
                return Frame::static_error("ERR value is not an integer or out of range")
            }
        },
    };
    if args.len() > 3 {
        return Frame::error(syntax_error(&args[1]));
    }
    bulk(crate::acl::random_hex(bits as usize))
}

fn log(ctx: &ShardCtx, args: &[Bytes]) -> Frame {
    let acl = &ctx.globals.acl;
    let mut count = 10;
    match args.get(2) {
        _ if args.len() > 3 => return Frame::error(syntax_error(&args[1])),
        Some(arg) if is(arg, "reset") => {
            acl.log.lock().unwrap_or_else(|e| e.into_inner()).reset();
            return Frame::ok();
        }
        Some(arg) => match parse_i64(arg) {
            Some(n) => count = n.max(0) as usize,
            None => return Frame::static_error("ERR value is not an integer or out of range"),
        },
        None => {}
    }
    let now = crate::globals::unix_ms();
    acl.log
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .reply(count, now)
}

/// ACL DRYRUN user command [arg …]: whether the user could run it, the refusal as text.
fn dryrun(ctx: &ShardCtx, args: &[Bytes]) -> Frame {
    let Some(user) = ctx.globals.acl.user(&args[2]) else {
        return Frame::error(format!(
            "ERR User '{}' not found",
            String::from_utf8_lossy(&args[2])
        ));
    };
    let command = args[3..].to_vec();
    let Some(spec) = wetask_shards::lookup(&command[0]) else {
        return Frame::error(format!(
            "ERR Command '{}' not found",
            String::from_utf8_lossy(&command[0])
        ));
    };
    let name = crate::acl::full_name(spec, &command);
    let arity_ok = match wetask_shards::table::info::subcommand(
        spec.name,
        command.get(1).map_or(&[][..], |a| a),
    ) {
        Some(sub) if spec.has(wetask_shards::table::flag::CONTAINER) => sub.arity_ok(command.len()),
        _ => spec.arity_ok(command.len()),
    };
    if !arity_ok {
        return Frame::error(format!(
            "ERR wrong number of arguments for '{name}' command"
        ));
    }
    let request = Request::new(command, ctx.shard_count);
    let touches = crate::acl::touches(spec, &request, false);
    match user.check(&touches) {
        Ok(()) => Frame::ok(),
        Err(denied) => bulk(crate::acl::refusal_text(
            denied,
            &user,
            spec,
            &request.args,
            true,
        )),
    }
}

fn help() -> Frame {
    let lines = [
        "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CAT [<category>]",
        "    List all commands that belong to <category>, or all command categories",
        "    when no category is specified.",
        "DELUSER <username> [<username> ...]",
        "    Delete a list of users.",
        "DRYRUN <username> <command> [<arg> ...]",
        "    Returns whether the user can execute the given command without executing the command.",
        "GETUSER <username>",
        "    Get the user's details.",
        "GENPASS [<bits>]",
        "    Generate a secure 256-bit user password. The optional `bits` argument can",
        "    be used to specify a different size.",
        "LIST",
        "    Show users details in config file format.",
        "LOAD",
        "    Reload users from the ACL file.",
        "LOG [<count> | RESET]",
        "    Show the ACL log entries.",
        "SAVE",
        "    Save the current config to the ACL file.",
        "SETUSER <username> <attribute> [<attribute> ...]",
        "    Create or modify a user with the specified attributes.",
        "USERS",
        "    List all the registered usernames.",
        "WHOAMI",
        "    Return the current connection username.",
        "HELP",
        "    Print this help.",
    ];
    Frame::lines(&lines)
}
