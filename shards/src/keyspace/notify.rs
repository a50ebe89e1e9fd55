//! Keyspace notifications (`notify-keyspace-events`): the classes a user turns on, and which
//! events each write command makes, as Redis 7.0 makes them. The shard records events here
//! while it runs commands ([`Notes`]); the server publishes them, as `__keyspace@<db>__:<key>`
//! (message: the event) and `__keyevent@<db>__:<event>` (message: the key), to subscribers
//! on every shard.
//!
//! Most commands' events follow from their reply, their arguments and which of their keys a
//! command created or deleted (Redis's `new` and `del`), so the table ([`emit`]) says per
//! command when it fires what. A few need what only the handler sees (whether ZADD changed a
//! score, whether XADD trimmed, whether XREADGROUP made its consumer): those handlers call
//! [`crate::Ctx::notify`], and the table adds only what surrounds it.

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::args::is;

/// The classes, with Redis's bits (`NOTIFY_*`) and letters.
pub mod class {
    /// K: publish on `__keyspace@<db>__:<key>`.
    pub const KEYSPACE: u32 = 1 << 0;
    /// E: publish on `__keyevent@<db>__:<event>`.
    pub const KEYEVENT: u32 = 1 << 1;
    pub const GENERIC: u32 = 1 << 2;
    pub const STRING: u32 = 1 << 3;
    pub const LIST: u32 = 1 << 4;
    pub const SET: u32 = 1 << 5;
    pub const HASH: u32 = 1 << 6;
    pub const ZSET: u32 = 1 << 7;
    pub const EXPIRED: u32 = 1 << 8;
    pub const EVICTED: u32 = 1 << 9;
    pub const STREAM: u32 = 1 << 10;
    /// m: a read command's key was missing (not part of A, as in Redis).
    pub const KEY_MISS: u32 = 1 << 11;
    /// d: module events (there are no modules: accepted and reported, never fired).
    pub const MODULE: u32 = 1 << 13;
    /// n: a key was created (not part of A, as in Redis).
    pub const NEW: u32 = 1 << 14;
    /// A: every class but m and n.
    pub const ALL: u32 =
        GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;
}

/// Redis's complaint about a bad class letter.
pub const BAD_CLASS: &str = "Invalid event class character. Use 'Ag$lshzxeKEtmdn'.";

/// The flags a `notify-keyspace-events` value names; `None` for an unknown letter.
pub fn parse(text: &str) -> Option<u32> {
    use class::*;
    text.chars().try_fold(0, |flags, c| {
        let bit = match c {
            'A' => ALL,
            'g' => GENERIC,
            '$' => STRING,
            'l' => LIST,
            's' => SET,
            'h' => HASH,
            'z' => ZSET,
            'x' => EXPIRED,
            'e' => EVICTED,
            'K' => KEYSPACE,
            'E' => KEYEVENT,
            't' => STREAM,
            'm' => KEY_MISS,
            'd' => MODULE,
            'n' => NEW,
            _ => return None,
        };
        Some(flags | bit)
    })
}

/// The flags as CONFIG GET shows them (Redis's order: `A` for all of A's classes).
pub fn describe(flags: u32) -> String {
    use class::*;
    let mut text = String::new();
    if flags & ALL == ALL {
        text.push('A');
    } else {
        for (bit, letter) in [
            (GENERIC, 'g'),
            (STRING, '$'),
            (LIST, 'l'),
            (SET, 's'),
            (HASH, 'h'),
            (ZSET, 'z'),
            (EXPIRED, 'x'),
            (EVICTED, 'e'),
            (STREAM, 't'),
            (MODULE, 'd'),
            (NEW, 'n'),
        ] {
            if flags & bit != 0 {
                text.push(letter);
            }
        }
    }
    for (bit, letter) in [(KEYSPACE, 'K'), (KEYEVENT, 'E'), (KEY_MISS, 'm')] {
        if flags & bit != 0 {
            text.push(letter);
        }
    }
    text
}

/// One event: `name` happened to `key` in database `db`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub db: usize,
    pub name: &'static str,
    pub key: Bytes,
}

impl Event {
    /// The (channel, message) pairs it publishes under `flags`.
    pub fn messages(&self, flags: u32) -> Vec<(Bytes, Bytes)> {
        let mut out = Vec::with_capacity(2);
        if flags & class::KEYSPACE != 0 {
            let mut channel = format!("__keyspace@{}__:", self.db).into_bytes();
            channel.extend_from_slice(&self.key);
            out.push((
                Bytes::from(channel),
                Bytes::from_static(self.name.as_bytes()),
            ));
        }
        if flags & class::KEYEVENT != 0 {
            let channel = format!("__keyevent@{}__:{}", self.db, self.name);
            out.push((Bytes::from(channel), self.key.clone()));
        }
        out
    }
}

/// The shard's notification settings and the events recorded since the server last took
/// them.
#[derive(Default)]
pub struct Notes {
    flags: u32,
    /// `flags` name a channel kind and a class (kept apart: every command tests it).
    on: bool,
    events: Vec<Event>,
}

impl Notes {
    pub fn flags(&self) -> u32 {
        self.flags
    }

    pub fn set_flags(&mut self, flags: u32) {
        self.flags = flags;
        self.on = flags & (class::KEYSPACE | class::KEYEVENT) != 0
            && flags & !(class::KEYSPACE | class::KEYEVENT) != 0;
        if !self.on {
            self.events.clear();
        }
    }

    /// Whether anything would be published: a channel kind (K or E) and a class.
    #[inline]
    pub fn on(&self) -> bool {
        self.on
    }

    pub fn wants(&self, class: u32) -> bool {
        self.flags & class != 0
    }

    /// Records `name` on `key` if its class is on.
    pub fn push(&mut self, class: u32, db: usize, name: &'static str, key: &[u8]) {
        if self.on() && self.wants(class) {
            self.events.push(Event {
                db,
                name,
                key: Bytes::copy_from_slice(key),
            });
        }
    }

    fn insert(&mut self, at: usize, class: u32, db: usize, name: &'static str, key: &[u8]) {
        if self.wants(class) {
            let at = at.min(self.events.len());
            let event = Event {
                db,
                name,
                key: Bytes::copy_from_slice(key),
            };
            self.events.insert(at, event);
        }
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Drops what was recorded after `mark` (a script's run that is undone).
    pub fn truncate(&mut self, mark: usize) {
        self.events.truncate(mark);
    }

    pub fn take(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }
}

/// A key a command names, as it was before the command and is after it.
pub struct Seen {
    pub db: usize,
    pub key: Bytes,
    /// `None`: absent; `Some(at)`: live, with its expiry (`NO_EXPIRY` for none).
    pub before: Option<u64>,
    pub after: bool,
}

/// What one command did, as the table needs it.
pub struct Facts<'a> {
    pub db: usize,
    pub args: &'a [Bytes],
    pub reply: &'a Frame,
    pub seen: &'a [Seen],
}

impl Facts<'_> {
    fn find(&self, db: usize, key: &[u8]) -> Option<&Seen> {
        self.seen.iter().find(|s| s.db == db && s.key[..] == *key)
    }

    fn existed(&self, key: &[u8]) -> bool {
        self.find(self.db, key).is_some_and(|s| s.before.is_some())
    }

    fn had_ttl(&self, key: &[u8]) -> bool {
        self.find(self.db, key)
            .is_some_and(|s| s.before.is_some_and(|at| at != crate::keyspace::NO_EXPIRY))
    }

    fn ok(&self) -> bool {
        !self.reply.is_error()
    }

    fn positive(&self) -> bool {
        matches!(self.reply, Frame::Integer(n) if *n > 0)
    }

    /// A reply that carries something: not nil, not an empty array, not an error.
    fn something(&self) -> bool {
        !matches!(self.reply, Frame::Null | Frame::NullArray)
            && !self.reply.is_error()
            && !matches!(self.reply, Frame::Array(a) if a.is_empty())
    }

    /// The key named first in a `[key, …]` reply (BLPOP's, LMPOP's).
    fn reply_key(&self) -> Option<Bytes> {
        match self.reply {
            Frame::Array(items) => match items.first() {
                Some(Frame::Bulk(key)) => Some(key.clone()),
                _ => None,
            },
            _ => None,
        }
    }
}

/// Writes one command's events into the notes, in Redis's order: a `new` goes before the
/// events the handler recorded (from `mark` on), or after the table's last event.
pub struct Emit<'a> {
    notes: &'a mut Notes,
    front: usize,
}

impl Emit<'_> {
    /// An event after those so far; a later `new` goes after it.
    fn event(&mut self, class: u32, db: usize, name: &'static str, key: &[u8]) {
        self.notes.push(class, db, name, key);
        self.front = self.notes.len();
    }

    /// `new` at the front of this command's events, if the command created `key` in `db`.
    fn new_if_created(&mut self, facts: &Facts<'_>, db: usize, key: &[u8]) {
        if facts
            .find(db, key)
            .is_some_and(|s| s.before.is_none() && s.after)
        {
            self.new_key(db, key);
        }
    }

    /// `new`, at this point of the command's events (a key made again after a delete).
    fn new_key(&mut self, db: usize, key: &[u8]) {
        if self.notes.wants(class::NEW) {
            self.notes.insert(self.front, class::NEW, db, "new", key);
            self.front += 1;
        }
    }

    /// `del` if the command deleted `key` in `db`.
    fn del_if_deleted(&mut self, facts: &Facts<'_>, db: usize, key: &[u8]) {
        if facts
            .find(db, key)
            .is_some_and(|s| s.before.is_some() && !s.after)
        {
            self.event(class::GENERIC, db, "del", key);
        }
    }
}

/// Extra keys whose before and after a command's events need, besides its key positions:
/// MOVE's and COPY … DB's key in the other database.
pub fn other_db_key(name: &str, db: usize, args: &[Bytes]) -> Option<(usize, Bytes)> {
    match name {
        "move" => crate::args::parse_i64(&args[2])
            .filter(|d| (0..crate::keyspace::DATABASES as i64).contains(d))
            .map(|d| (d as usize, args[1].clone())),
        "copy" => args[3..]
            .iter()
            .position(|a| is(a, "db"))
            .and_then(|i| args.get(i + 4))
            .and_then(|d| crate::args::parse_i64(d))
            .filter(|d| (0..crate::keyspace::DATABASES as i64).contains(d))
            .map(|d| d as usize)
            .filter(|&d| d != db)
            .map(|d| (d, args[2].clone())),
        _ => None,
    }
}

/// The events of write command `name`, after it ran (see the module docs). Events the
/// handler recorded sit in the notes from `mark` on.
// Long: the table itself, one arm per command family, each as Redis 7.0 notifies.
pub fn emit(name: &str, facts: &Facts<'_>, notes: &mut Notes, mark: usize) {
    use class::*;
    let mut out = Emit { notes, front: mark };
    let db = facts.db;
    let args = facts.args;
    let key: &[u8] = args.get(1).map_or(&[], |k| &k[..]);
    // The common shapes: an event on the first key, after `new` if it made the key and
    // before `del` if it emptied it.
    let simple = |out: &mut Emit<'_>, fires: bool, class: u32, event: &'static str| {
        if fires {
            out.new_if_created(facts, db, key);
            out.event(class, db, event, key);
            out.del_if_deleted(facts, db, key);
        }
    };
    match name {
        // Strings.
        "set" => {
            let (mut nx, mut xx, mut get, mut ttl) = (false, false, false, false);
            for a in &args[3..] {
                nx |= is(a, "nx");
                xx |= is(a, "xx");
                get |= is(a, "get");
                ttl |= is(a, "ex") || is(a, "px") || is(a, "exat") || is(a, "pxat");
            }
            let done = facts.ok()
                && if get {
                    !(nx && facts.existed(key) || xx && !facts.existed(key))
                } else {
                    !matches!(facts.reply, Frame::Null)
                };
            if done {
                out.new_if_created(facts, db, key);
                out.event(STRING, db, "set", key);
                if ttl {
                    out.event(GENERIC, db, "expire", key);
                }
            }
        }
        "setnx" => simple(&mut out, facts.positive(), STRING, "set"),
        "getset" => simple(&mut out, facts.ok(), STRING, "set"),
        "setex" | "psetex" if facts.ok() => {
            out.new_if_created(facts, db, key);
            out.event(STRING, db, "set", key);
            out.event(GENERIC, db, "expire", key);
        }
        "mset" | "msetnx" if facts.ok() && !matches!(facts.reply, Frame::Integer(0)) => {
            for pair in args[1..].chunks(2) {
                out.new_if_created(facts, db, &pair[0]);
                out.event(STRING, db, "set", &pair[0]);
            }
        }
        "getdel" => out.del_if_deleted(facts, db, key),
        "getex" if facts.something() => {
            let ttl = args[2..]
                .iter()
                .any(|a| is(a, "ex") || is(a, "px") || is(a, "exat") || is(a, "pxat"));
            if args[2..].iter().any(|a| is(a, "persist")) {
                if facts.had_ttl(key) {
                    out.event(GENERIC, db, "persist", key);
                }
            } else if ttl {
                match facts.find(db, key).is_some_and(|s| !s.after) {
                    true => out.event(GENERIC, db, "del", key),
                    false => out.event(GENERIC, db, "expire", key),
                }
            }
        }
        "append" => simple(&mut out, facts.ok(), STRING, "append"),
        "incr" | "decr" | "incrby" | "decrby" => simple(&mut out, facts.ok(), STRING, "incrby"),
        "incrbyfloat" => simple(&mut out, facts.ok(), STRING, "incrbyfloat"),
        "setrange" => simple(
            &mut out,
            facts.ok() && !args[3].is_empty(),
            STRING,
            "setrange",
        ),
        "setbit" => simple(&mut out, facts.ok(), STRING, "setbit"),
        "bitfield" => {
            let sets = args[2..].iter().any(|a| is(a, "set") || is(a, "incrby"));
            simple(&mut out, facts.ok() && sets, STRING, "setbit")
        }
        "bitop" => store(&mut out, facts, &args[2], STRING, "set"),
        "pfadd" => simple(&mut out, facts.positive(), STRING, "pfadd"),
        "pfmerge" => simple(&mut out, facts.ok(), STRING, "pfadd"),
        // Lists.
        "lpush" => simple(&mut out, facts.ok(), LIST, "lpush"),
        "rpush" => simple(&mut out, facts.ok(), LIST, "rpush"),
        "lpushx" => simple(&mut out, facts.positive(), LIST, "lpush"),
        "rpushx" => simple(&mut out, facts.positive(), LIST, "rpush"),
        "linsert" => simple(&mut out, facts.positive(), LIST, "linsert"),
        "lset" => simple(&mut out, facts.ok(), LIST, "lset"),
        "lpop" => simple(&mut out, facts.something(), LIST, "lpop"),
        "rpop" => simple(&mut out, facts.something(), LIST, "rpop"),
        "lrem" => simple(&mut out, facts.positive(), LIST, "lrem"),
        "ltrim" => simple(&mut out, facts.ok() && facts.existed(key), LIST, "ltrim"),
        "lmove" | "blmove" | "rpoplpush" | "brpoplpush" if facts.something() => {
            let (from, to) = match name {
                "lmove" | "blmove" => (&args[3], &args[4]),
                _ => (&args[0], &args[0]),
            };
            let pop = if is(from, "left") { "lpop" } else { "rpop" };
            let push = if is(to, "right") { "rpush" } else { "lpush" };
            moved(&mut out, facts, (key, pop), (&args[2], push));
        }
        "blpop" | "brpop" | "lmpop" | "blmpop" => {
            if let Some(popped) = facts.reply_key() {
                let left = match name {
                    "blpop" => true,
                    "brpop" => false,
                    _ => args.iter().any(|a| is(a, "left")),
                };
                let event = if left { "lpop" } else { "rpop" };
                out.event(LIST, db, event, &popped);
                out.del_if_deleted(facts, db, &popped);
            }
        }
        "sort" => {
            let at = args.iter().position(|a| is(a, "store"));
            if let Some(dest) = at.and_then(|i| args.get(i + 1)) {
                store(&mut out, facts, dest, LIST, "sortstore");
            }
        }
        // Hashes.
        "hset" | "hmset" => simple(&mut out, facts.ok(), HASH, "hset"),
        "hsetnx" => simple(&mut out, facts.positive(), HASH, "hset"),
        "hdel" => simple(&mut out, facts.positive(), HASH, "hdel"),
        "hincrby" => simple(&mut out, facts.ok(), HASH, "hincrby"),
        "hincrbyfloat" => simple(&mut out, facts.ok(), HASH, "hincrbyfloat"),
        // Sets.
        "sadd" => simple(&mut out, facts.positive(), SET, "sadd"),
        "srem" => simple(&mut out, facts.positive(), SET, "srem"),
        "spop" => simple(&mut out, facts.something(), SET, "spop"),
        "smove" if facts.positive() && args[1] != args[2] => {
            out.event(SET, db, "srem", key);
            out.del_if_deleted(facts, db, key);
            out.new_if_created(facts, db, &args[2]);
            out.event(SET, db, "sadd", &args[2]);
        }
        "sinterstore" => store(&mut out, facts, key, SET, "sinterstore"),
        "sunionstore" => store(&mut out, facts, key, SET, "sunionstore"),
        "sdiffstore" => store(&mut out, facts, key, SET, "sdiffstore"),
        // Sorted sets (ZADD's and GEOADD's own event is the handler's).
        "zadd" | "geoadd" if out.notes.len() > mark => {
            out.new_if_created(facts, db, key);
        }
        "zincrby" => simple(&mut out, facts.ok(), ZSET, "zincr"),
        "zrem" => simple(&mut out, facts.positive(), ZSET, "zrem"),
        "zremrangebyrank" => simple(&mut out, facts.positive(), ZSET, "zremrangebyrank"),
        "zremrangebyscore" => simple(&mut out, facts.positive(), ZSET, "zremrangebyscore"),
        "zremrangebylex" => simple(&mut out, facts.positive(), ZSET, "zremrangebylex"),
        "zpopmin" => simple(&mut out, facts.something(), ZSET, "zpopmin"),
        "zpopmax" => simple(&mut out, facts.something(), ZSET, "zpopmax"),
        "bzpopmin" | "bzpopmax" | "zmpop" | "bzmpop" => {
            if let Some(popped) = facts.reply_key() {
                let max = match name {
                    "bzpopmin" => false,
                    "bzpopmax" => true,
                    _ => args.iter().any(|a| is(a, "max")),
                };
                out.event(ZSET, db, if max { "zpopmax" } else { "zpopmin" }, &popped);
                out.del_if_deleted(facts, db, &popped);
            }
        }
        "zunionstore" => store(&mut out, facts, key, ZSET, "zunionstore"),
        "zinterstore" => store(&mut out, facts, key, ZSET, "zinterstore"),
        "zdiffstore" => store(&mut out, facts, key, ZSET, "zdiffstore"),
        "zrangestore" => store(&mut out, facts, key, ZSET, "zrangestore"),
        "geosearchstore" => store(&mut out, facts, key, ZSET, "geosearchstore"),
        "georadius" | "georadiusbymember" => {
            let at = args
                .iter()
                .position(|a| is(a, "store") || is(a, "storedist"));
            if let Some(dest) = at.and_then(|i| args.get(i + 1)) {
                store(&mut out, facts, dest, ZSET, "georadiusstore");
            }
        }
        // Streams (XADD's, XREADGROUP's, the claims' and DELCONSUMER's events are the
        // handlers').
        "xadd" if out.notes.len() > mark => {
            out.new_if_created(facts, db, key);
        }
        "xgroup" if args.len() > 2 => {
            let (sub, stream) = (&args[1], &args[2]);
            let event = if is(sub, "create") && facts.ok() {
                Some("xgroup-create")
            } else if is(sub, "setid") && facts.ok() {
                Some("xgroup-setid")
            } else if is(sub, "destroy") && facts.positive() {
                Some("xgroup-destroy")
            } else if is(sub, "createconsumer") && facts.positive() {
                Some("xgroup-createconsumer")
            } else {
                None // DELCONSUMER's is the handler's: its reply cannot tell.
            };
            if let Some(event) = event {
                out.new_if_created(facts, db, stream);
                out.event(STREAM, db, event, stream);
            }
        }
        "xdel" => simple(&mut out, facts.positive(), STREAM, "xdel"),
        "xtrim" => simple(&mut out, facts.positive(), STREAM, "xtrim"),
        "xsetid" => simple(&mut out, facts.ok(), STREAM, "xsetid"),
        // The keyspace.
        "del" | "unlink" => {
            for k in &args[1..] {
                out.del_if_deleted(facts, db, k);
            }
        }
        "expire" | "pexpire" | "expireat" | "pexpireat" if facts.positive() => {
            match facts.find(db, key).is_some_and(|s| !s.after) {
                true => out.event(GENERIC, db, "del", key),
                false => out.event(GENERIC, db, "expire", key),
            }
        }
        "persist" => simple(&mut out, facts.positive(), GENERIC, "persist"),
        "rename" | "renamenx" => {
            let done = matches!(facts.reply, Frame::Integer(1)) || facts.reply == &Frame::ok();
            if done && args[1] != args[2] {
                renamed(&mut out, db, &args[1], &args[2]);
            }
        }
        "move" => {
            if let (true, Some((to, _))) = (facts.positive(), other_db_key(name, db, args)) {
                out.new_key(to, key);
                out.event(GENERIC, db, "move_from", key);
                out.event(GENERIC, to, "move_to", key);
            }
        }
        "copy" if facts.positive() => {
            let to = other_db_key(name, db, args).map_or(db, |(d, _)| d);
            out.new_key(to, &args[2]);
            out.event(GENERIC, to, "copy_to", &args[2]);
        }
        "restore" if facts.ok() => {
            out.new_key(db, key);
            out.event(GENERIC, db, "restore", key);
        }
        // FLUSHDB, FLUSHALL and SWAPDB notify nothing in Redis; the task engine is not
        // the keyspace.
        _ => {}
    }
}

/// A STORE command's events on `dest`: its event (after `new`) when it stored something,
/// `del` when it stored nothing over an existing key.
fn store(out: &mut Emit<'_>, facts: &Facts<'_>, dest: &[u8], class: u32, event: &'static str) {
    if !facts.ok() {
        return;
    }
    if facts.positive() {
        out.new_if_created(facts, facts.db, dest);
        out.event(class, facts.db, event, dest);
    } else {
        out.del_if_deleted(facts, facts.db, dest);
    }
}

/// LMOVE's events, in Redis's order: the push (after `new`), then the pop and `del`.
fn moved(
    out: &mut Emit<'_>,
    facts: &Facts<'_>,
    (src, pop): (&[u8], &'static str),
    (dst, push): (&[u8], &'static str),
) {
    let db = facts.db;
    out.new_if_created(facts, db, dst);
    out.event(class::LIST, db, push, dst);
    out.event(class::LIST, db, pop, src);
    out.del_if_deleted(facts, db, src);
}

/// RENAME's events (the destination is always made anew, as Redis's `dbAdd`).
pub fn renamed(out: &mut Emit<'_>, db: usize, from: &[u8], to: &[u8]) {
    out.new_key(db, to);
    out.event(class::GENERIC, db, "rename_from", from);
    out.event(class::GENERIC, db, "rename_to", to);
}

/// Events of operations that run outside the command table (a cross-shard RENAME, COPY or
/// MSETNX, a blocked client's pop): recorded through an [`Emit`] on the notes.
pub fn record(notes: &mut Notes, f: impl FnOnce(&mut Emit<'_>)) {
    if notes.on() {
        let front = notes.len();
        f(&mut Emit { notes, front });
    }
}

impl Emit<'_> {
    /// A cross-shard RENAME: as [`renamed`].
    pub fn rename(&mut self, db: usize, from: &[u8], to: &[u8]) {
        renamed(self, db, from, to);
    }

    /// A cross-shard COPY.
    pub fn copy(&mut self, db: usize, to: &[u8]) {
        self.new_key(db, to);
        self.event(class::GENERIC, db, "copy_to", to);
    }

    /// A cross-shard MSETNX's key (none existed).
    pub fn set_new(&mut self, db: usize, key: &[u8]) {
        self.new_key(db, key);
        self.event(class::STRING, db, "set", key);
    }

    /// Any one event.
    pub fn note(&mut self, class: u32, db: usize, name: &'static str, key: &[u8]) {
        self.event(class, db, name, key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_round_trip_as_redis_writes_them() {
        assert_eq!(parse("KEA").map(describe).as_deref(), Some("AKE"));
        assert_eq!(parse("Elg").map(describe).as_deref(), Some("glE"));
        assert_eq!(parse("").map(describe).as_deref(), Some(""));
        assert_eq!(parse("AnmK").map(describe).as_deref(), Some("AKm"));
        assert_eq!(parse("gn$E").map(describe).as_deref(), Some("g$nE"));
        assert_eq!(parse("Kq"), None);
    }

    #[test]
    fn nothing_is_on_without_a_channel_kind_and_a_class() {
        let mut notes = Notes::default();
        for (text, on) in [("A", false), ("K", false), ("KA", true), ("Ex", true)] {
            notes.set_flags(parse(text).unwrap());
            assert_eq!(notes.on(), on, "{text}");
        }
    }

    #[test]
    fn an_event_publishes_on_the_channels_its_flags_name() {
        let event = Event {
            db: 3,
            name: "lpush",
            key: Bytes::from_static(b"q"),
        };
        let both = event.messages(parse("KEl").unwrap());
        assert_eq!(
            both,
            vec![
                (
                    Bytes::from_static(b"__keyspace@3__:q"),
                    Bytes::from_static(b"lpush")
                ),
                (
                    Bytes::from_static(b"__keyevent@3__:lpush"),
                    Bytes::from_static(b"q")
                ),
            ]
        );
        assert_eq!(event.messages(parse("El").unwrap()).len(), 1);
    }

    fn run(shard: &mut crate::Shard, line: &str) -> Frame {
        let args: Vec<Bytes> = line
            .split(' ')
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect();
        shard.execute_args(0, &args)
    }

    fn events(shard: &mut crate::Shard) -> Vec<String> {
        let taken = shard.notes.take();
        taken
            .iter()
            .map(|e| format!("{}:{}", e.name, String::from_utf8_lossy(&e.key)))
            .collect()
    }

    fn shard_with(classes: &str) -> crate::Shard {
        let mut shard = crate::Shard::new(0);
        shard.set_notify_flags(parse(classes).unwrap());
        shard
    }

    #[test]
    fn a_list_made_and_emptied_says_new_push_pop_del() {
        let mut shard = shard_with("KEAn");
        run(&mut shard, "LPUSH l a");
        run(&mut shard, "LPOP l");
        run(&mut shard, "LPOP l");
        assert_eq!(events(&mut shard), ["new:l", "lpush:l", "lpop:l", "del:l"]);
    }

    #[test]
    fn only_the_classes_on_are_recorded() {
        let mut shard = shard_with("El");
        run(&mut shard, "SET s 1");
        run(&mut shard, "RPUSH l a");
        run(&mut shard, "DEL s l");
        assert_eq!(events(&mut shard), ["rpush:l"]);
        shard.set_notify_flags(0);
        run(&mut shard, "RPUSH l a");
        assert!(shard.notes.is_empty());
    }

    #[test]
    fn expiry_eviction_and_misses_are_notified() {
        let mut shard = shard_with("KExem");
        shard.set_clock(1_000);
        run(&mut shard, "SET a 1 PX 10");
        run(&mut shard, "SET b 1");
        shard.set_clock(2_000);
        run(&mut shard, "GET a");
        assert_eq!(events(&mut shard), ["expired:a", "keymiss:a"]);
        shard.set_eviction_policy(crate::keyspace::evict::Policy::AllkeysRandom);
        assert!(shard.evict_one(5));
        assert_eq!(events(&mut shard), ["evicted:b"]);
    }

    #[test]
    fn a_write_that_changes_nothing_says_nothing() {
        let mut shard = shard_with("KEA");
        run(&mut shard, "SADD s a");
        events(&mut shard);
        for line in [
            "SADD s a",
            "SREM s b",
            "DEL nope",
            "LPUSHX nope a",
            "ZADD z XX 1 a",
            "HDEL nope f",
            "EXPIRE nope 5",
            "PERSIST s",
            "SET s 1 XX NX",
            "INCR s",
        ] {
            run(&mut shard, line);
            assert_eq!(events(&mut shard), Vec::<String>::new(), "{line}");
        }
    }

    #[test]
    fn handlers_events_come_after_new() {
        let mut shard = shard_with("KEAn");
        run(&mut shard, "ZADD z 1 a");
        run(&mut shard, "ZADD z 1 a");
        run(&mut shard, "ZADD z 2 a");
        run(&mut shard, "XADD x MAXLEN 1 * f v");
        run(&mut shard, "XADD x MAXLEN 1 * f v");
        assert_eq!(
            events(&mut shard),
            ["new:z", "zadd:z", "zadd:z", "new:x", "xadd:x", "xadd:x", "xtrim:x"]
        );
    }
}
