//! What COMMAND DOCS and COMMAND INFO say of Redis's commands beyond their rows in the
//! command table: summary, since, group, complexity, doc flags, deprecation, history, tips,
//! key specifications and arguments, as Redis 7.2 describes them (its src/commands/*.json,
//! written down in `command_docs_table.rs` by `scripts/redis-command-docs.py`). Clients
//! read these: redis-cli's hints come from the arguments, cluster clients find keys by the
//! key specifications. WeTask's own commands (TASK.*) have no entry; `commands::command`
//! describes them from the table.

#[rustfmt::skip]
#[path = "docs_table.rs"]
mod table;

/// One command's (or subcommand's, `container|name`) description.
pub struct Doc {
    pub name: &'static str,
    pub summary: &'static str,
    pub since: &'static str,
    pub group: &'static str,
    /// Empty when Redis gives none (so for `deprecated_since`, `replaced_by`).
    pub complexity: &'static str,
    pub doc_flags: &'static [&'static str],
    pub deprecated_since: &'static str,
    pub replaced_by: &'static str,
    /// (version, change).
    pub history: &'static [(&'static str, &'static str)],
    pub tips: &'static [&'static str],
    pub key_specs: &'static [KeySpec],
    pub arguments: &'static [Arg],
}

/// One argument. `oneof` and `block` arguments hold others; an empty text is "none", and
/// `key_spec_index` -1 is no key.
pub struct Arg {
    pub name: &'static str,
    pub kind: &'static str,
    pub display: &'static str,
    pub key_spec_index: i64,
    pub token: &'static str,
    pub summary: &'static str,
    pub since: &'static str,
    pub deprecated_since: &'static str,
    pub flags: &'static [&'static str],
    pub arguments: &'static [Arg],
}

/// Where a command's keys are: where the search begins, and how the keys follow.
pub struct KeySpec {
    pub notes: &'static str,
    pub flags: &'static [&'static str],
    pub begin_search: BeginSearch,
    pub find_keys: FindKeys,
}

pub enum BeginSearch {
    Index(i64),
    /// A keyword, searched for from an index (negative: from the end).
    Keyword(&'static str, i64),
    Unknown,
}

pub enum FindKeys {
    Range {
        lastkey: i64,
        keystep: i64,
        limit: i64,
    },
    Keynum {
        keynumidx: i64,
        firstkey: i64,
        keystep: i64,
    },
    Unknown,
}

/// The description of `name` (lower case; a subcommand as `container|name`).
pub fn doc(name: &str) -> Option<&'static Doc> {
    table::DOCS
        .binary_search_by(|d| d.name.cmp(name))
        .ok()
        .map(|i| &table::DOCS[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_holds_redis_7_2() {
        assert!(table::DOCS.windows(2).all(|w| w[0].name < w[1].name));
        let get = doc("get").expect("GET");
        assert_eq!(
            (get.since, get.group, get.complexity),
            ("1.0.0", "string", "O(1)")
        );
        let zrank = doc("zrank").expect("ZRANK");
        assert!(
            zrank.history.iter().any(|(v, _)| *v == "7.2.0"),
            "WITHSCORE's history"
        );
        assert_eq!(doc("quit").expect("QUIT").doc_flags, &["deprecated"]);
        assert!(doc("client|setinfo").is_some());
        assert!(doc("sentinel").is_none());
    }
}
