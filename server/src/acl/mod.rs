//! Redis 7's access control lists: users, their passwords and what each may run (commands
//! and categories, key patterns, channel patterns, selectors), the refusals log, and the ACL
//! file. Every shard reads the one [`Acl`]; a connection holds its user (an `Arc`) and
//! looks it up again only when the users change ([`Acl::epoch`]), so the default user, who
//! may do anything, costs one load and one test per command.
//!
//! Task queues count as keys: a user limited to `~jobs:*` submits to, fetches from and
//! administers only queues named `jobs:*`. The commands that act on a task the caller holds
//! the lease of (ACK, FAIL, EXTEND, PROGRESS, LOG, and FETCH's ACK list) are not checked
//! against key patterns: the engine accepts them only from the lease's holder, and the lease
//! came from a FETCH that was checked.

pub mod commands;
pub mod file;
pub mod log;
pub mod selector;
pub mod user;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use wetask_shards::request::{Form, Request};
use wetask_shards::table::{flag, info, CommandSpec};

pub use selector::{Access, RuleError};
pub use user::{Denied, Touches, User};

/// The users, the refusals log and the counters INFO reports.
pub struct Acl {
    users: RwLock<BTreeMap<Bytes, Arc<User>>>,
    epoch: AtomicU64,
    pub log: Mutex<log::AclLog>,
    pub denied_commands: AtomicU64,
    pub denied_keys: AtomicU64,
    pub denied_channels: AtomicU64,
    /// `aclfile`: where ACL SAVE writes and ACL LOAD reads (none: both refuse).
    pub file: Option<std::path::PathBuf>,
    /// `acl-pubsub-default allchannels`: new users and selectors get every channel.
    pub pubsub_all_channels: AtomicBool,
    /// `acllog-max-len`.
    pub log_max_len: AtomicUsize,
}

const NO_FILE: &str = "ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.";

impl Acl {
    /// The default user, with `requirepass` as its password if set. The ACL file's users
    /// come with [`Acl::load_at_start`].
    pub fn new(
        requirepass: Option<&str>,
        file: Option<std::path::PathBuf>,
        pubsub_all_channels: bool,
        log_max_len: usize,
    ) -> Self {
        let acl = Acl {
            users: RwLock::new(BTreeMap::new()),
            epoch: AtomicU64::new(0),
            log: Mutex::new(Default::default()),
            denied_commands: AtomicU64::new(0),
            denied_keys: AtomicU64::new(0),
            denied_channels: AtomicU64::new(0),
            file,
            pubsub_all_channels: AtomicBool::new(pubsub_all_channels),
            log_max_len: AtomicUsize::new(log_max_len),
        };
        let default = Arc::new(User::default_user());
        acl.write().insert(default.name.clone(), default);
        acl.set_default_password(requirepass);
        acl
    }

    /// The ACL file's users, if the file exists: one that does not load stops the start, as
    /// in Redis. With `requirepass` too, the file's default user gets that password.
    pub fn load_at_start(&self, requirepass: Option<&str>) -> Result<(), String> {
        match &self.file {
            Some(path) if path.exists() => {
                self.load_file()
                    .map_err(|err| format!("cannot load the ACL file: {err}"))?;
                if requirepass.is_some() {
                    self.set_default_password(requirepass);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<Bytes, Arc<User>>> {
        self.users.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<Bytes, Arc<User>>> {
        self.users.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes with every change to the users; a connection compares it with the value it
    /// saw to know its user may have changed.
    #[inline]
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    fn changed(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    pub fn user(&self, name: &[u8]) -> Option<Arc<User>> {
        self.read().get(name).cloned()
    }

    pub fn default_user(&self) -> Arc<User> {
        self.user(b"default")
            .expect("the default user is never removed")
    }

    /// Whether a new connection starts logged in (the default user is on and needs no
    /// password).
    pub fn open_by_default(&self) -> bool {
        let default = self.default_user();
        default.enabled && default.nopass
    }

    /// `requirepass`: the default user's one password, or no password at all.
    pub fn set_default_password(&self, password: Option<&str>) {
        let mut users = self.write();
        let mut default = (**users.get(&b"default"[..]).expect("default")).clone();
        let all = self.pubsub_all_channels.load(Ordering::Relaxed);
        default.apply(b"resetpass", all).expect("valid");
        match password {
            Some(password) => {
                let op = [b">".as_slice(), password.as_bytes()].concat();
                default.apply(&op, all).expect("valid");
            }
            None => default.apply(b"nopass", all).expect("valid"),
        }
        users.insert(default.name.clone(), Arc::new(default));
        drop(users);
        self.changed();
    }

    /// The user `name` if `password` opens it.
    pub fn authenticate(&self, name: &[u8], password: &[u8]) -> Option<Arc<User>> {
        self.user(name).filter(|user| user.password_ok(password))
    }

    /// `ACL SETUSER name rule…`: every rule applies, or none does.
    pub fn set_user(&self, name: &Bytes, rules: &[Bytes]) -> Result<(), String> {
        if !user::valid_name(name) {
            return Err("ERR Usernames can't contain spaces or null characters".into());
        }
        let merged = user::merge_selectors(rules).map_err(|at| {
            format!(
                "ERR Unmatched parenthesis in acl selector starting at '{}'.",
                String::from_utf8_lossy(&rules[at])
            )
        })?;
        let all = self.pubsub_all_channels.load(Ordering::Relaxed);
        let mut users = self.write();
        let mut changed = match users.get(name) {
            Some(existing) => (**existing).clone(),
            None => User::new(name.clone(), all),
        };
        for rule in &merged {
            changed.apply(rule, all).map_err(|err| {
                format!(
                    "ERR Error in ACL SETUSER modifier '{}': {}",
                    String::from_utf8_lossy(rule),
                    err.text()
                )
            })?;
        }
        users.insert(name.clone(), Arc::new(changed));
        drop(users);
        self.changed();
        Ok(())
    }

    /// `ACL DELUSER`: how many of `names` there were. The default user stays.
    pub fn delete(&self, names: &[Bytes]) -> Result<usize, String> {
        if names.iter().any(|n| &n[..] == b"default") {
            return Err("ERR The 'default' user cannot be removed".into());
        }
        let mut users = self.write();
        let deleted = names.iter().filter(|n| users.remove(*n).is_some()).count();
        drop(users);
        self.changed();
        Ok(deleted)
    }

    /// Every user, in name order.
    pub fn users(&self) -> Vec<Arc<User>> {
        self.read().values().cloned().collect()
    }

    /// `ACL LIST`'s lines: `user <name> <rules>`.
    pub fn list(&self) -> Vec<Vec<u8>> {
        self.users()
            .iter()
            .map(|user| [b"user ".as_slice(), &user.name, b" ", &user.describe()].concat())
            .collect()
    }

    /// `ACL LOAD`: the file's users replace every user, or nothing changes.
    pub fn load_file(&self) -> Result<(), String> {
        let path = self.file.as_ref().ok_or(NO_FILE)?;
        let all = self.pubsub_all_channels.load(Ordering::Relaxed);
        let loaded = file::load(path, all)?;
        *self.write() = loaded;
        self.changed();
        Ok(())
    }

    /// `ACL SAVE`: every user, written to a new file that then replaces the old one.
    pub fn save_file(&self) -> Result<(), String> {
        let path = self.file.as_ref().ok_or(NO_FILE)?;
        file::save(path, &self.list()).map_err(|err| {
            tracing::warn!("ACL SAVE: {err}");
            "ERR There was an error trying to save the ACLs. Please check the server logs for more information".to_string()
        })
    }

    /// Counts a refusal for INFO (`acl_access_denied_*`).
    pub fn count(&self, denied: Denied) {
        let counter = match denied {
            Denied::Command => &self.denied_commands,
            Denied::Key(_) => &self.denied_keys,
            Denied::Channel(_) => &self.denied_channels,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn add_log(&self, refusal: log::Refusal) {
        let max = self.log_max_len.load(Ordering::Relaxed);
        let now = crate::clock::unix_ms();
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .add(refusal, now, max);
    }
}

/// The command's number, and whether it is a subcommand.
fn number(spec: &'static CommandSpec, args: &[Bytes]) -> (usize, bool) {
    let index = commands::index();
    if spec.has(flag::CONTAINER) && args.len() >= 2 {
        if let Some(sub) = info::subcommand(spec.name, &args[1]) {
            return (index.of_sub(sub), true);
        }
    }
    (index.of_spec(spec), false)
}

/// The name a refusal gives the command: `get`, or `config|get`.
pub fn full_name(spec: &'static CommandSpec, args: &[Bytes]) -> &'static str {
    let (id, _) = number(spec, args);
    commands::index().entries[id].name
}

/// Task commands on a task the caller must hold the lease of: the engine checks that, so
/// their ids are not checked against key patterns (see the module's comment).
const LEASE_HOLDER_COMMANDS: &[&str] = &[
    "task.ack",
    "task.fail",
    "task.extend",
    "task.progress",
    "task.log",
];

/// Task commands that name a task by id, with whether they change it: where the caller can
/// wait, the id's queue is looked up and checked against the key patterns
/// (`session::access::check_task_queue`); elsewhere (EXEC, scripts) the id itself must
/// match a pattern.
pub const BY_ID_COMMANDS: &[(&str, bool)] = &[
    ("task.get", false),
    ("task.wait", false),
    ("task.logs", false),
    ("task.results", false),
    ("task.cancel", true),
    ("task.release", true),
    ("task.requeue", true),
    ("task.delete", true),
];

/// Whether `spec` names a task by id ([`BY_ID_COMMANDS`]): Some(whether it writes).
pub fn by_id(spec: &CommandSpec) -> Option<bool> {
    if spec.group != "tasks" {
        return None;
    }
    BY_ID_COMMANDS
        .iter()
        .find(|(name, _)| *name == spec.name)
        .map(|&(_, writes)| writes)
}

/// What `request` touches, for [`User::check`]. `queues_looked_up`: the caller checks the
/// queue of a task named by id itself, so the id is no key here.
pub fn touches<'a>(
    spec: &'static CommandSpec,
    request: &'a Request,
    queues_looked_up: bool,
) -> Touches<'a> {
    let args = &request.args[..];
    let (id, subcommand) = number(spec, args);
    let positions: Vec<usize> = match request.form() {
        Form::Fetch(fetch) => (1..fetch.queues_end).collect(),
        _ if LEASE_HOLDER_COMMANDS.contains(&spec.name) => Vec::new(),
        _ if queues_looked_up && by_id(spec).is_some() => Vec::new(),
        _ => request.key_positions(),
    };
    let keys = positions
        .iter()
        .enumerate()
        .map(|(i, &at)| (at, key_access(info::key_flags(spec.name, args, i))))
        .collect();
    Touches {
        id,
        subcommand,
        no_auth: spec.has(flag::NO_AUTH),
        args,
        keys,
        channels: channels(spec, args),
    }
}

/// What a key's flags need: `access` reads, `insert`, `delete` and `update` write.
fn key_access(flags: &[&str]) -> Access {
    let has = |f: &str| flags.iter().any(|g| g.eq_ignore_ascii_case(f));
    Access {
        read: has("access"),
        write: has("insert") || has("delete") || has("update"),
    }
}

/// The channels a command publishes to or subscribes to: (argument, is a pattern).
/// Unsubscribing is never refused, as in Redis.
fn channels(spec: &CommandSpec, args: &[Bytes]) -> Vec<(usize, bool)> {
    match spec.name {
        "publish" | "spublish" if args.len() > 1 => vec![(1, false)],
        "subscribe" | "ssubscribe" => (1..args.len()).map(|at| (at, false)).collect(),
        "psubscribe" => (1..args.len()).map(|at| (at, true)).collect(),
        _ => Vec::new(),
    }
}

/// The refusal's reply: Redis 7.2's text (`verbose`: ACL DRYRUN's, which names the key or
/// channel).
pub fn refusal_text(
    denied: Denied,
    user: &User,
    spec: &'static CommandSpec,
    args: &[Bytes],
    verbose: bool,
) -> String {
    let name = String::from_utf8_lossy(&user.name);
    match (denied, verbose) {
        (Denied::Command, _) => format!(
            "User {name} has no permissions to run the '{}' command",
            full_name(spec, args)
        ),
        (Denied::Key(at), true) => format!(
            "User {name} has no permissions to access the '{}' key",
            String::from_utf8_lossy(&args[at])
        ),
        (Denied::Channel(at), true) => format!(
            "User {name} has no permissions to access the '{}' channel",
            String::from_utf8_lossy(&args[at])
        ),
        (Denied::Key(_), false) => "No permissions to access a key".into(),
        (Denied::Channel(_), false) => "No permissions to access a channel".into(),
    }
}

/// The ACL LOG's object for a refusal: the command's full name, or the key or channel.
pub fn refused_object(denied: Denied, spec: &'static CommandSpec, args: &[Bytes]) -> Bytes {
    match denied {
        Denied::Command => Bytes::from_static(full_name(spec, args).as_bytes()),
        Denied::Key(at) | Denied::Channel(at) => args[at].clone(),
    }
}

/// SORT's BY (with a pattern) and GET read keys that no key position names, so, as in
/// Redis, they need a user who may read every key with some selector that allows SORT:
/// `Some` is the error. Checked after the command itself is allowed.
pub fn sort_option_refused(
    user: &User,
    spec: &'static CommandSpec,
    request: &Request,
) -> Option<String> {
    if user.unrestricted || !matches!(spec.name, "sort" | "sort_ro") {
        return None;
    }
    let args = &request.args[..];
    let mut needs = None;
    let mut at = 2;
    while at < args.len() {
        let word = &args[at];
        let more = args.len() - at - 1;
        if wetask_shards::args::is(word, "limit") && more >= 2 {
            at += 3;
            continue;
        }
        if wetask_shards::args::is(word, "by") && more >= 1 && args[at + 1].contains(&b'*') {
            needs.get_or_insert("BY");
        } else if wetask_shards::args::is(word, "get") && more >= 1 {
            needs.get_or_insert("GET");
        }
        at += if more >= 1 && !is_flag(word) { 2 } else { 1 };
    }
    let option = needs?;
    let (id, subcommand) = number(spec, args);
    let read_everything = user.selectors.iter().any(|s| {
        s.allows_command(id, args, subcommand)
            && s.allows_key_everywhere(Access {
                read: true,
                write: false,
            })
    });
    (!read_everything)
        .then(|| format!("ERR {option} option of SORT denied due to insufficient ACL permissions."))
}

/// SORT's options that take no argument.
fn is_flag(word: &[u8]) -> bool {
    ["asc", "desc", "alpha"]
        .iter()
        .any(|flag| wetask_shards::args::is(word, flag))
}

/// 256 random bits (or `bits`, rounded up to whole hex digits) as hex: ACL GENPASS.
pub fn random_hex(bits: usize) -> String {
    let chars = bits.div_ceil(4);
    let mut bytes = vec![0u8; chars.div_ceil(2)];
    let mut filled = 0;
    while filled < bytes.len() {
        // SAFETY: getrandom writes at most the given length into the buffer.
        let n = unsafe {
            libc::getrandom(bytes[filled..].as_mut_ptr().cast(), bytes.len() - filled, 0)
        };
        if n > 0 {
            filled += n as usize;
        }
    }
    let mut hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    hex.truncate(chars);
    hex
}
