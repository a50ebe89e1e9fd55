//! The blocking commands as one family: BLPOP, BRPOP, BLMPOP, BLMOVE, BRPOPLPUSH, BZPOPMIN,
//! BZPOPMAX, BZMPOP, XREAD and XREADGROUP. Each is parsed once into a [`Blocking`] (its keys,
//! the [`BlockOp`] a waiter runs, its timeout), by [`parse`]; the server's request carries
//! that value (`crate::request::Form::Blocking`), routes and parks by it, and runs the
//! attempt from it ([`attempt`]) with no second parse. The table's handlers below are the
//! same two steps, for the callers that hold only arguments (a script's `redis.call`).
//! [`BlockOp`], what a parked waiter pops, is declared here with the parse that makes it; the
//! shard serves waiters with it in `crate::shard::blocked`.

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::ctx::Ctx;
use crate::families::lists::{parse_ends, parse_mpop, parse_timeout, End};
use crate::parse_count::count_parse;
use crate::spec::FormKind;

/// What a waiter pops when its key has data.
#[derive(Clone, Debug)]
pub enum BlockOp {
    /// BLPOP/BRPOP (`count` None: replies `[key, element]`) and BLMPOP (`count` Some:
    /// replies `[key, [elements]]`).
    Pop { end: End, count: Option<usize> },
    /// BLMOVE/BRPOPLPUSH from the waiter's one key to `dst`.
    Move { dst: Bytes, from: End, to: End },
    /// BZPOPMIN/BZPOPMAX (`count` None: replies `[key, member, score]`) and BZMPOP (`count`
    /// Some: replies `[key, [[member, score], …]]`).
    ZPop { max: bool, count: Option<usize> },
    /// XREAD … BLOCK: entries after `after` (`None` is `$`, fixed when the read parks on
    /// the stream's shard). Nothing is consumed: every reader waiting on a stream is served.
    XRead {
        after: Vec<(Bytes, Option<crate::values::stream::StreamId>)>,
        count: usize,
    },
    /// XREADGROUP … BLOCK … `>`: new entries for a consumer of a group. Consuming, like a
    /// pop: one waiter gets each entry.
    XReadGroup(crate::families::stream_groups::XreadGroup),
}

impl BlockOp {
    /// What kind of value the waiter waits for on its keys.
    pub fn wait_kind(&self) -> crate::keyspace::blocked_keys::WaitKind {
        use crate::keyspace::blocked_keys::WaitKind;
        match self {
            BlockOp::Pop { .. } | BlockOp::Move { .. } => WaitKind::List,
            BlockOp::ZPop { .. } => WaitKind::ZSet,
            BlockOp::XRead { .. } => WaitKind::Stream,
            BlockOp::XReadGroup(_) => WaitKind::Group,
        }
    }
}

/// Where a BLMOVE's element goes when its key has data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoveTarget {
    /// The destination lives on this shard: pop and push here, replying the element.
    Here,
    /// The destination lives on another shard: only pop here, replying `[key, element]`;
    /// the client's home shard pushes.
    Elsewhere,
}

/// A blocking command, parsed: its source keys, what to pop, and its timeout.
#[derive(Clone, Debug)]
pub struct Blocking {
    pub keys: Vec<Bytes>,
    pub op: BlockOp,
    /// Milliseconds to wait (0: for ever); `None`: it never waits (XREAD without BLOCK).
    pub timeout_ms: Option<u64>,
}

impl Blocking {
    /// A copy that shares no bytes with the arguments it was parsed from: what a parked
    /// waiter or a command queued by MULTI keeps, so it does not pin the connection's read
    /// buffer.
    pub fn detached(&self) -> Blocking {
        let copy = |bytes: &Bytes| Bytes::copy_from_slice(bytes);
        let op = match &self.op {
            BlockOp::Move { dst, from, to } => BlockOp::Move {
                dst: copy(dst),
                from: *from,
                to: *to,
            },
            BlockOp::XRead { after, count } => BlockOp::XRead {
                after: after.iter().map(|(key, id)| (copy(key), *id)).collect(),
                count: *count,
            },
            BlockOp::XReadGroup(read) => {
                let mut read = read.clone();
                read.group = copy(&read.group);
                read.consumer = copy(&read.consumer);
                for (key, _) in &mut read.streams {
                    *key = copy(key);
                }
                BlockOp::XReadGroup(read)
            }
            op @ (BlockOp::Pop { .. } | BlockOp::ZPop { .. }) => op.clone(),
        };
        Blocking {
            keys: self.keys.iter().map(copy).collect(),
            op,
            timeout_ms: self.timeout_ms,
        }
    }
}

/// Parses blocking command `name` (arity already checked), in the order Redis checks its
/// arguments.
// Long: one short arm per blocking command (BLPOP … XREADGROUP): the table reads best whole.
pub fn parse(name: &str, args: &[Bytes]) -> Result<Blocking, Frame> {
    count_parse(FormKind::Blocking);
    match name {
        "blpop" | "brpop" => Ok(Blocking {
            timeout_ms: Some(parse_timeout(&args[args.len() - 1])?),
            keys: args[1..args.len() - 1].to_vec(),
            op: BlockOp::Pop {
                end: if name == "blpop" {
                    End::Left
                } else {
                    End::Right
                },
                count: None,
            },
        }),
        "blmpop" => {
            let timeout_ms = parse_timeout(&args[1])?;
            let mpop = parse_mpop(args, 2)?;
            Ok(Blocking {
                timeout_ms: Some(timeout_ms),
                keys: mpop.keys,
                op: BlockOp::Pop {
                    end: mpop.end,
                    count: Some(mpop.count),
                },
            })
        }
        "blmove" | "brpoplpush" => {
            let (from, to, timeout) = if name == "blmove" {
                let (from, to) = parse_ends(&args[3], &args[4])?;
                (from, to, &args[5])
            } else {
                (End::Right, End::Left, &args[3])
            };
            Ok(Blocking {
                timeout_ms: Some(parse_timeout(timeout)?),
                keys: vec![args[1].clone()],
                op: BlockOp::Move {
                    dst: args[2].clone(),
                    from,
                    to,
                },
            })
        }
        "bzpopmin" | "bzpopmax" => Ok(Blocking {
            timeout_ms: Some(parse_timeout(&args[args.len() - 1])?),
            keys: args[1..args.len() - 1].to_vec(),
            op: BlockOp::ZPop {
                max: name == "bzpopmax",
                count: None,
            },
        }),
        "bzmpop" => {
            let timeout_ms = parse_timeout(&args[1])?;
            let zmpop = crate::families::zsets::parse_zmpop(args, 2)?;
            Ok(Blocking {
                timeout_ms: Some(timeout_ms),
                keys: zmpop.keys,
                op: BlockOp::ZPop {
                    max: zmpop.max,
                    count: Some(zmpop.count),
                },
            })
        }
        "xread" => {
            let read = crate::families::streams::parse_xread(args)?;
            Ok(Blocking {
                timeout_ms: read.block_ms,
                keys: read.streams.iter().map(|(k, _)| k.clone()).collect(),
                op: BlockOp::XRead {
                    after: read.streams,
                    count: read.count,
                },
            })
        }
        "xreadgroup" => {
            let read = crate::families::stream_groups::parse_xreadgroup(args)?;
            Ok(Blocking {
                timeout_ms: read.block_ms,
                keys: read.streams.iter().map(|(k, _)| k.clone()).collect(),
                op: BlockOp::XReadGroup(read),
            })
        }
        other => Err(Frame::error(format!(
            "ERR '{other}' is not a blocking command"
        ))),
    }
}

/// The command run at once, as its non-blocking self: what it finds, or nil (then it may
/// block). A BLMOVE's source is its one key.
pub fn attempt(ctx: &mut Ctx<'_>, blocking: &Blocking) -> Frame {
    let keys = &blocking.keys;
    match &blocking.op {
        BlockOp::Pop { end, count } => crate::families::lists::pop_first(ctx, keys, *end, *count),
        BlockOp::Move { dst, from, to } => {
            crate::families::lists::move_attempt(ctx, &keys[0], dst, *from, *to)
        }
        BlockOp::ZPop { max, count } => crate::families::zsets::pop_first(ctx, keys, *max, *count),
        BlockOp::XRead { after, count } => crate::families::streams::read_after(ctx, after, *count),
        BlockOp::XReadGroup(read) => crate::families::stream_groups::read_for_group(ctx, read),
    }
}

/// True when an attempt's reply means "nothing there": then the command blocks.
pub fn found_nothing(frame: &Frame) -> bool {
    matches!(frame, Frame::Null | Frame::NullArray)
}

fn parse_and_attempt(ctx: &mut Ctx<'_>, name: &str, args: &[Bytes]) -> Frame {
    match parse(name, args) {
        Ok(blocking) => attempt(ctx, &blocking),
        Err(err) => err,
    }
}

macro_rules! handlers {
    ($($name:ident),*) => {
        $(
            pub fn $name(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
                parse_and_attempt(ctx, stringify!($name), args)
            }
        )*
    };
}

handlers!(blpop, brpop, blmpop, blmove, brpoplpush, bzpopmin, bzpopmax, bzmpop, xread, xreadgroup);
