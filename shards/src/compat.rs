//! `docs/COMPATIBILITY.md`, rendered from the command table so the two cannot drift. The
//! test below fails when the file is stale; `make compat` rewrites it.

use std::fmt::Write;

use crate::table::{flag, Merge, Route, COMMANDS};

/// Redis command groups WeTask does not serve yet, and the issue that brings them.
const MISSING: &[(&str, &str)] = &[
    ("list, hash, set, sorted set", "the data-structures issue"),
    (
        "MULTI/EXEC/WATCH, pub/sub, EVAL/scripting",
        "the transactions, pub/sub and scripting issue",
    ),
    ("TASK.*", "the task-engine issue"),
    (
        "persistence (BGSAVE, AOF), replication, cluster",
        "later issues",
    ),
];

fn route_text(route: Route) -> &'static str {
    match route {
        Route::Server => "server",
        Route::Keyed => "owning shard; cross-shard coordinator when keys span shards",
        Route::Split(Merge::PerKey) => "split per shard, replies in key order",
        Route::Split(Merge::Sum) => "split per shard, counts summed",
        Route::Split(Merge::Ok) => "split per shard",
        Route::Split(Merge::Concat) | Route::AllShards(Merge::Concat) => {
            "every shard, concatenated"
        }
        Route::AllShards(Merge::Sum) => "every shard, summed",
        Route::AllShards(_) => "every shard",
    }
}

pub fn render() -> String {
    let mut out = String::from(
        "# Command compatibility\n\n\
         Generated from the command table (`shards/src/table.rs`) by `make compat`; a test fails\n\
         when this file is stale. Arity follows Redis: `n` exactly, `-n` at least n arguments\n\
         (counting the command name). Every listed command is fully supported with Redis's\n\
         options and error texts unless a note says otherwise.\n\n\
         | command | group | arity | flags | keys (first, last, step) | runs on |\n\
         |---|---|---|---|---|---|\n",
    );
    let mut sorted: Vec<_> = COMMANDS.iter().collect();
    sorted.sort_by_key(|c| (c.group, c.name));
    for spec in sorted {
        let flags: Vec<&str> = flag::NAMES
            .iter()
            .filter(|(bit, _)| spec.has(*bit))
            .map(|(_, n)| *n)
            .collect();
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {}, {}, {} | {} |",
            spec.name.to_ascii_uppercase(),
            spec.group,
            spec.arity,
            flags.join(" "),
            spec.first_key,
            spec.last_key,
            spec.step,
            route_text(spec.route)
        );
    }
    out.push_str("\n## Notes\n\n");
    out.push_str(
        "- `RENAME`, `RENAMENX`, `COPY` and `MSETNX` whose keys live on different shards never\n  \
         reply CROSSSLOT, and are atomic: the involved shards are locked in ascending order.\n\
         - `MGET`, `MSET`, `DEL`, `EXISTS` and `TOUCH` over several shards run as one sub-command\n  \
         per shard: each part is atomic, the whole is not (Redis's MSET is atomic as a whole).\n\
         - `INFO commandstats` reports calls, rejected and failed calls, not time spent.\n\
         - `INFO memory` reports the process RSS as `used_memory`.\n\
         - `CONFIG SET` changes `requirepass` and `maxclients`; other listed parameters are\n  \
         read-only.\n\
         - `CLIENT KILL` supports `ID`, `ADDR`, `LADDR`, `SKIPME`, `USER default`, `TYPE normal`\n  \
         and the old `ip:port` form.\n",
    );
    out.push_str("\n## Not yet supported\n\n");
    for (what, issue) in MISSING {
        let _ = writeln!(out, "- {what}: {issue}.");
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn compatibility_doc_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/COMPATIBILITY.md");
        let rendered = super::render();
        if std::env::var_os("UPDATE_COMPAT").is_some() {
            std::fs::write(path, &rendered).expect("write docs/COMPATIBILITY.md");
        }
        let current = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            current == rendered,
            "docs/COMPATIBILITY.md is stale: run `make compat`"
        );
    }
}
