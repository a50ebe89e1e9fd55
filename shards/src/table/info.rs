//! What `COMMAND` says of a command beyond its row in the table: Redis's ACL categories,
//! the access flags of its keys (`COMMAND GETKEYSANDFLAGS`), and the subcommands of the
//! container commands (CLIENT, CONFIG, OBJECT, XINFO …), each with its own arity and flags,
//! as Redis 7.2 lists them. The data is Redis's interface (what a client reads from
//! `COMMAND INFO`), written down here; `tests/python/test_command_info.py` compares every
//! command against a real redis-server, with Redis 7.2's changes (`docs/COMPATIBILITY.md`).
//!
//! The server checks a container's subcommand and its arity before running it
//! ([`check_subcommand`]), so every container answers Redis's errors for them.

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::args::is;
use crate::spec::flag::*;
use crate::spec::CommandSpec;

#[rustfmt::skip]
#[path = "redis_table.rs"]
mod table;
pub use table::SUBCOMMANDS;
use table::{CATEGORIES, KEY_FLAGS};

/// One subcommand of a container command (`client|id`).
pub struct Subcommand {
    /// Its full name, `container|name`.
    pub name: &'static str,
    pub arity: i32,
    pub flags: u32,
    pub keys: (i32, i32, i32),
    pub categories: &'static [&'static str],
}

const fn sub(
    name: &'static str,
    arity: i32,
    flags: u32,
    keys: (i32, i32, i32),
    categories: &'static [&'static str],
) -> Subcommand {
    Subcommand {
        name,
        arity,
        flags,
        keys,
        categories,
    }
}

impl Subcommand {
    /// The part after `|`.
    pub fn short_name(&self) -> &'static str {
        self.name.split_once('|').map_or(self.name, |(_, s)| s)
    }

    pub fn arity_ok(&self, argc: usize) -> bool {
        crate::spec::arity_holds(self.arity, argc)
    }
}

/// The subcommands of `container` (empty for a plain command).
pub fn subcommands_of(container: &str) -> impl Iterator<Item = &'static Subcommand> + '_ {
    SUBCOMMANDS
        .iter()
        .filter(move |s| s.name.split_once('|').is_some_and(|(c, _)| c == container))
}

/// The subcommand `name` (as a client spells it) of `container`.
pub fn subcommand(container: &str, name: &[u8]) -> Option<&'static Subcommand> {
    subcommands_of(container).find(|s| is(name, s.short_name()))
}

/// A container command's subcommand must exist and have its arity: Redis's two errors.
///
/// Inline: it runs for every command, and nearly every command is no container (as a call
/// it cost about 20 instructions per GET; callgrind, 2026-12-05).
#[inline]
pub fn check_subcommand(spec: &CommandSpec, args: &[Bytes]) -> Result<(), Frame> {
    if !spec.has(CONTAINER) || args.len() < 2 {
        return Ok(());
    }
    check_container(spec, args)
}

/// [`check_subcommand`] for a container command (CONFIG, CLIENT, XINFO …).
#[inline(never)]
fn check_container(spec: &CommandSpec, args: &[Bytes]) -> Result<(), Frame> {
    match subcommand(spec.name, &args[1]) {
        Some(sub) if sub.arity_ok(args.len()) => Ok(()),
        Some(sub) => Err(crate::errors::wrong_arity(sub.name)),
        None => Err(crate::errors::unknown_subcommand(spec.name, &args[1])),
    }
}

/// The task commands in `@task-admin` rather than `@task`.
pub const TASK_ADMIN: &[&str] = &[
    "task.purge",
    "task.delete",
    "task.delqueue",
    "task.cron",
    "task.quiet",
    "task.export",
    "task.import",
];

/// A command's ACL categories, as Redis lists them (`@read`, `@string`, `@fast` …). Task
/// commands, which Redis has not, get Redis's rules (the flags' categories) and `@task`, or
/// `@task-admin` for those that drop or move a queue's tasks or steer workers and schedules:
/// a worker given `+@task` cannot purge a queue.
pub fn categories(spec: &CommandSpec) -> Vec<&'static str> {
    if let Some((_, listed)) = CATEGORIES.iter().find(|(name, _)| *name == spec.name) {
        return listed.to_vec();
    }
    let mut out = Vec::new();
    if spec.has(WRITE) {
        out.push("@write");
    }
    if spec.has(READONLY) {
        out.push("@read");
    }
    if spec.group == "tasks" {
        out.push(if TASK_ADMIN.contains(&spec.name) {
            "@task-admin"
        } else {
            "@task"
        });
    }
    if spec.has(ADMIN) {
        out.extend(["@admin", "@dangerous"]);
    }
    if spec.has(BLOCKING) {
        out.push("@blocking");
    }
    out.push(if spec.has(FAST) { "@fast" } else { "@slow" });
    out
}

/// The access flags of the `index`-th of a command's `count` keys (`COMMAND
/// GETKEYSANDFLAGS`): its key specification's, the first key taking the first and any
/// other the last (a destination and its sources, a source and its STORE key). SET and
/// BITFIELD say what this call does, as Redis works them out.
pub fn key_flags(name: &str, args: &[Bytes], index: usize) -> &'static [&'static str] {
    match name {
        "set" => {
            return if args.iter().skip(3).any(|a| is(a, "get")) {
                &["RW", "access", "update"]
            } else {
                &["OW", "update"]
            }
        }
        "bitfield" => {
            let writes = args.iter().skip(2).any(|a| is(a, "set") || is(a, "incrby"));
            return if writes {
                &["RW", "access", "update"]
            } else {
                &["RO", "access"]
            };
        }
        _ => {}
    }
    match KEY_FLAGS.iter().find(|(n, _)| *n == name) {
        Some((_, specs)) if index == 0 => specs[0],
        Some((_, specs)) => specs[specs.len() - 1],
        None => &["RW", "access", "update"],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_container_row_has_its_subcommands_and_no_other_has_any() {
        for spec in crate::table::COMMANDS {
            let subs = subcommands_of(spec.name).count();
            assert_eq!(spec.has(CONTAINER), subs > 0, "{}", spec.name);
        }
        for sub in SUBCOMMANDS {
            let (container, _) = sub.name.split_once('|').expect("container|name");
            assert!(
                crate::lookup(container.as_bytes()).is_some(),
                "{}",
                sub.name
            );
        }
    }

    #[test]
    fn a_subcommand_is_checked_for_being_known_and_its_arity() {
        let client = crate::lookup(b"client").unwrap();
        let args = |line: &str| -> Vec<Bytes> {
            line.split(' ')
                .map(|w| Bytes::copy_from_slice(w.as_bytes()))
                .collect()
        };
        assert!(check_subcommand(client, &args("client id")).is_ok());
        assert!(check_subcommand(client, &args("client SETINFO lib-name x")).is_ok());
        assert!(check_subcommand(client, &args("client id x"))
            .map_err(|e| format!("{e:?}"))
            .unwrap_err()
            .contains("client|id"));
        assert!(check_subcommand(client, &args("client nope"))
            .map_err(|e| format!("{e:?}"))
            .unwrap_err()
            .contains("unknown subcommand 'nope'"));
    }

    #[test]
    fn keys_take_their_specs_flags() {
        let args = |line: &str| -> Vec<Bytes> {
            line.split(' ')
                .map(|w| Bytes::copy_from_slice(w.as_bytes()))
                .collect()
        };
        assert_eq!(
            key_flags("lmove", &args("lmove a b left left"), 1),
            ["RW", "insert"]
        );
        assert_eq!(key_flags("zunionstore", &args("x"), 2), ["RO", "access"]);
        assert_eq!(key_flags("set", &args("set a b"), 0), ["OW", "update"]);
        assert_eq!(
            key_flags("set", &args("set a b GET"), 0),
            ["RW", "access", "update"]
        );
    }
}
