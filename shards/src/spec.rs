//! What a command is, as data: [`CommandSpec`] (name, arity, flags, key positions, route,
//! handler) and its parts. The rows themselves are in [`crate::table`]; this leaf holds only
//! the types, so that code which reads specs need not depend on every command family.

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::ctx::Ctx;

pub type Handler = fn(&mut Ctx<'_>, &[Bytes]) -> Frame;

/// Finds the key positions of a command whose keys follow a count.
pub type KeyFinder = fn(&[Bytes]) -> Vec<usize>;

/// Command flags, as `COMMAND INFO` reports them.
pub mod flag {
    pub const WRITE: u32 = 1 << 0;
    pub const READONLY: u32 = 1 << 1;
    pub const FAST: u32 = 1 << 2;
    pub const DENYOOM: u32 = 1 << 3;
    pub const ADMIN: u32 = 1 << 4;
    pub const NOSCRIPT: u32 = 1 << 5;
    pub const LOADING: u32 = 1 << 6;
    pub const STALE: u32 = 1 << 7;
    pub const NO_AUTH: u32 = 1 << 8;
    pub const BLOCKING: u32 = 1 << 9;
    /// Runs while a script is busy (MULTI, DISCARD, WATCH, AUTH, SHUTDOWN …).
    pub const ALLOW_BUSY: u32 = 1 << 10;
    /// A pub/sub command.
    pub const PUBSUB: u32 = 1 << 11;
    /// Refused while a replica loads asynchronously.
    pub const NO_ASYNC_LOADING: u32 = 1 << 12;
    /// Refused inside MULTI.
    pub const NO_MULTI: u32 = 1 << 13;
    /// Not shown to MONITOR as the client sent it (scripts: their calls are).
    pub const SKIP_MONITOR: u32 = 1 << 14;
    /// Not logged to SLOWLOG (EXEC: its commands are).
    pub const SKIP_SLOWLOG: u32 = 1 << 15;
    /// May name no keys although it takes them (EVAL with numkeys 0).
    pub const NO_MANDATORY_KEYS: u32 = 1 << 21;

    // WeTask's own flags (bit 16 up): how the server treats a command. Not in `NAMES`, so
    // `COMMAND INFO` shows only Redis's flags.
    /// Runs at once inside MULTI instead of being queued (EXEC, DISCARD, MULTI, WATCH,
    /// RESET, QUIT).
    pub const TRANSACTION_CONTROL: u32 = 1 << 16;
    /// Allowed on a RESP2 connection in subscribed mode.
    pub const WHILE_SUBSCRIBED: u32 = 1 << 17;
    /// Touches no keyspace, so it gets past the locks of a running script: what it takes
    /// to kill the script, shut down, or say who you are.
    pub const PASSES_LOCKS: u32 = 1 << 18;
    /// A task-engine command: runs on the shard that owns its queue or task id.
    pub const TASK: u32 = 1 << 19;
    /// A server command that also runs queued in MULTI/EXEC and from scripts (one
    /// implementation serves all three: the server's `commands::run_embedded`).
    pub const EMBEDDED: u32 = 1 << 20;
    /// A container of subcommands (CLIENT, OBJECT …): `command_info` lists them, and the
    /// server checks the subcommand and its arity before the command runs.
    pub const CONTAINER: u32 = 1 << 22;
    /// Runs on a slot being imported without a preceding ASKING (RESTORE-ASKING, which
    /// MIGRATE sends).
    pub const ASKING: u32 = 1 << 23;

    pub const NAMES: &[(u32, &str)] = &[
        (WRITE, "write"),
        (READONLY, "readonly"),
        (DENYOOM, "denyoom"),
        (ADMIN, "admin"),
        (NOSCRIPT, "noscript"),
        (LOADING, "loading"),
        (STALE, "stale"),
        (FAST, "fast"),
        (NO_AUTH, "no_auth"),
        (BLOCKING, "blocking"),
        (SKIP_MONITOR, "skip_monitor"),
        (SKIP_SLOWLOG, "skip_slowlog"),
        (ALLOW_BUSY, "allow_busy"),
        (PUBSUB, "pubsub"),
        (NO_MULTI, "no_multi"),
        (NO_ASYNC_LOADING, "no_async_loading"),
        (NO_MANDATORY_KEYS, "no_mandatory_keys"),
        (ASKING, "asking"),
    ];
}

/// How replies from several shards combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Merge {
    /// Integer replies are added (DEL, EXISTS, DBSIZE).
    Sum,
    /// Every shard replied OK: reply OK once (MSET, FLUSHDB).
    Ok,
    /// One reply per key, put back in the client's key order (MGET).
    PerKey,
    /// Arrays are concatenated (KEYS).
    Concat,
}

/// Where a command runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Connection and server commands, handled by the server itself.
    Server,
    /// Runs on the shard owning its keys. When the keys span shards, the server's
    /// cross-shard coordinator handles it (RENAME, COPY, MSETNX).
    Keyed,
    /// Multi-key: split into one sub-command per shard, replies merged.
    Split(Merge),
    /// Runs on every shard, replies merged.
    AllShards(Merge),
}

/// Which parsed form a [`crate::request::Request`] carries for a command: the commands
/// whose route depends on their arguments are parsed once, when the request is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormKind {
    /// Nothing beyond the spec and the keys' positions.
    Plain,
    /// A blocking pop or move, or XREAD/XREADGROUP (`crate::shard::blocked::Blocking`).
    Blocking,
    /// TASK.FETCH (`crate::families::tasks::commands::FetchArgs`).
    Fetch,
    /// TASK.WAIT (`crate::families::tasks::commands::WaitArgs`).
    Wait,
    /// TASK.EVENTS (`crate::families::tasks::reports::EventsArgs`).
    Events,
    /// TASK.WORKER (`crate::tasks::workers::WorkerOptions`).
    Worker,
    /// EVAL, EVALSHA, FCALL and their read-only forms: `numkeys`.
    Script,
    /// SORT and SORT_RO (`crate::families::sort::SortArgs`): where its BY and GET patterns
    /// may reach decides its route.
    Sort,
}

/// A form's number, for the parse counter (`crate::parse_count`).
impl From<FormKind> for usize {
    fn from(kind: FormKind) -> usize {
        kind as usize
    }
}

pub struct CommandSpec {
    /// Lower-case name.
    pub name: &'static str,
    pub arity: i32,
    pub flags: u32,
    pub first_key: i32,
    pub last_key: i32,
    pub step: i32,
    pub route: Route,
    pub handler: Option<Handler>,
    pub group: &'static str,
    pub summary: &'static str,
    /// For commands whose keys follow a count (LMPOP, SINTERCARD …): their positions,
    /// computed from the arguments (Redis's `movablekeys`). Empty when the count is invalid:
    /// the handler then replies with the error.
    pub movable_keys: Option<KeyFinder>,
    /// The parsed form its request carries (see [`FormKind`]).
    pub form: FormKind,
}

/// Redis's arity rule: `n` arguments exactly (the name counted), or `-n`: at least n.
pub fn arity_holds(arity: i32, argc: usize) -> bool {
    let argc = argc as i32;
    if arity >= 0 {
        argc == arity
    } else {
        argc >= -arity
    }
}

impl CommandSpec {
    pub fn arity_ok(&self, argc: usize) -> bool {
        arity_holds(self.arity, argc)
    }

    pub fn has(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }

    /// The key argument positions in `args`.
    pub fn key_positions(&self, args: &[Bytes]) -> KeyPositions {
        match self.movable_keys {
            Some(find) => {
                crate::parse_count::count_key_finder();
                KeyPositions::Listed(find(args).into_iter())
            }
            None => KeyPositions::Fixed(self.fixed_key_positions(args.len())),
        }
    }

    fn fixed_key_positions(
        &self,
        argc: usize,
    ) -> std::iter::StepBy<std::ops::RangeInclusive<usize>> {
        let (first, step) = (self.first_key.max(0) as usize, self.step.max(1) as usize);
        let last = if self.first_key <= 0 {
            0
        } else if self.last_key < 0 {
            (argc as i32 + self.last_key).max(0) as usize
        } else {
            (self.last_key as usize).min(argc.saturating_sub(1))
        };
        if self.first_key <= 0 {
            #[allow(clippy::reversed_empty_ranges)] // deliberately empty
            return (1..=0).step_by(1);
        }
        (first..=last).step_by(step)
    }
}

/// The key positions of one command's arguments.
pub enum KeyPositions {
    Fixed(std::iter::StepBy<std::ops::RangeInclusive<usize>>),
    Listed(std::vec::IntoIter<usize>),
}

impl Iterator for KeyPositions {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        match self {
            KeyPositions::Fixed(range) => range.next(),
            KeyPositions::Listed(list) => list.next(),
        }
    }
}
