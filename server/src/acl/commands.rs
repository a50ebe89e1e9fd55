//! The commands an ACL rule can name, numbered: every row of the command table and every
//! subcommand of a container (`config|get`), each with its ACL categories. A selector keeps
//! one bit per number. Categories are Redis's 21 and WeTask's `@task` and `@task-admin`.

use std::collections::HashMap;
use std::sync::OnceLock;

use wetask_shards::table::info::{self, Subcommand, SUBCOMMANDS};
use wetask_shards::table::{CommandSpec, COMMANDS};

/// Redis 7.2's categories, in its order (`ACL CAT`), then WeTask's.
pub const CATEGORIES: &[&str] = &[
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
    "task",
    "task-admin",
];

/// One command or subcommand an ACL bit stands for.
pub struct Entry {
    /// `get`, or `config|get` for a subcommand.
    pub name: &'static str,
    /// Its categories as bits of [`CATEGORIES`].
    pub categories: u32,
    /// For a container: the numbers of its subcommands.
    pub subcommands: Vec<usize>,
    /// For a subcommand: its container's number.
    pub parent: Option<usize>,
}

pub struct Index {
    pub entries: Vec<Entry>,
    by_name: HashMap<&'static str, usize>,
}

fn category_bits(names: &[&str]) -> u32 {
    names
        .iter()
        .filter_map(|name| {
            let name = name.strip_prefix('@').unwrap_or(name);
            CATEGORIES.iter().position(|c| *c == name)
        })
        .fold(0, |bits, at| bits | 1 << at)
}

/// The category's bit, if `name` (without `@`) is one.
pub fn category(name: &str) -> Option<u32> {
    CATEGORIES
        .iter()
        .position(|c| c.eq_ignore_ascii_case(name))
        .map(|at| 1 << at)
}

/// The numbering, built once.
pub fn index() -> &'static Index {
    static INDEX: OnceLock<Index> = OnceLock::new();
    INDEX.get_or_init(|| {
        let mut entries: Vec<Entry> = COMMANDS
            .iter()
            .map(|spec| Entry {
                name: spec.name,
                categories: category_bits(&info::categories(spec)),
                subcommands: Vec::new(),
                parent: None,
            })
            .collect();
        let mut by_name: HashMap<&'static str, usize> = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.name, i))
            .collect();
        for sub in SUBCOMMANDS {
            let (container, _) = sub.name.split_once('|').expect("container|name");
            let Some(&parent) = by_name.get(container) else {
                continue;
            };
            let id = entries.len();
            entries.push(Entry {
                name: sub.name,
                categories: category_bits(sub.categories),
                subcommands: Vec::new(),
                parent: Some(parent),
            });
            entries[parent].subcommands.push(id);
            by_name.insert(sub.name, id);
        }
        Index { entries, by_name }
    })
}

impl Index {
    /// A command or `container|subcommand` by name, any case.
    pub fn find(&self, name: &str) -> Option<usize> {
        let lower = name.to_ascii_lowercase();
        self.by_name.get(lower.as_str()).copied()
    }

    pub fn of_spec(&self, spec: &'static CommandSpec) -> usize {
        spec.index()
    }

    pub fn of_sub(&self, sub: &'static Subcommand) -> usize {
        self.by_name[sub.name]
    }

    /// Bits in a selector's bitmap: every number, plus one that only `+@all` sets (the
    /// commands a later version adds are allowed to a user who was given them all).
    pub fn bits(&self) -> usize {
        self.entries.len() + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_and_subcommand_is_numbered_once() {
        let index = index();
        assert!(index.find("get").is_some());
        assert!(index.find("CONFIG|GET").is_some());
        let config = index.find("config").unwrap();
        assert!(index.entries[config]
            .subcommands
            .contains(&index.find("config|set").unwrap()));
        assert_eq!(
            index.entries[index.find("config|set").unwrap()].parent,
            Some(config)
        );
    }

    #[test]
    fn task_commands_are_task_and_the_destructive_ones_task_admin() {
        let index = index();
        let task = category("task").unwrap();
        let admin = category("task-admin").unwrap();
        let of = |name: &str| index.entries[index.find(name).unwrap()].categories;
        assert_ne!(of("task.submit") & task, 0);
        assert_ne!(of("task.fetch") & task, 0);
        assert_eq!(of("task.submit") & admin, 0);
        for name in ["task.purge", "task.delqueue", "task.cron", "task.quiet"] {
            assert_ne!(of(name) & admin, 0, "{name}");
            assert_eq!(of(name) & task, 0, "{name}");
        }
        assert_ne!(of("get") & category("read").unwrap(), 0);
    }
}
