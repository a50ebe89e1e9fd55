//! COMMAND and its subcommands (COUNT, INFO, DOCS, LIST, GETKEYS, GETKEYSANDFLAGS, HELP):
//! what the command table (`wetask_shards::table`), `wetask_shards::table::info` and
//! `wetask_shards::table::docs` say of every command, in Redis 7.2's shapes. A container command (CLIENT, OBJECT …) is
//! listed as Redis lists it: no flags of its own, its subcommands inside.

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::args::is;
use wetask_shards::errors::{unknown_subcommand, SYNTAX};
use wetask_shards::table::docs::{self, Arg, BeginSearch, FindKeys, KeySpec};
use wetask_shards::table::info::{self, Subcommand};
use wetask_shards::table::{flag, CommandSpec};
use wetask_shards::{lookup, COMMANDS};

/// COMMAND [subcommand …]; the subcommand and its arity were checked (`check_subcommand`).
pub fn command(args: &[Bytes]) -> Frame {
    if args.len() == 1 {
        return Frame::Array(COMMANDS.iter().map(info).collect());
    }
    let sub = &args[1];
    if is(sub, "count") {
        Frame::Integer(COMMANDS.len() as i64)
    } else if is(sub, "info") {
        if args.len() == 2 {
            return Frame::Array(COMMANDS.iter().map(info).collect());
        }
        Frame::Array(args[2..].iter().map(|name| info_of(name)).collect())
    } else if is(sub, "docs") {
        docs(args)
    } else if is(sub, "list") {
        list(args)
    } else if is(sub, "getkeys") {
        keys(&args[2..], false)
    } else if is(sub, "getkeysandflags") {
        keys(&args[2..], true)
    } else if is(sub, "help") {
        help()
    } else {
        unknown_subcommand("command", sub)
    }
}

/// A command or a subcommand, as COMMAND finds it by name (`client|id`).
enum Found {
    Command(&'static CommandSpec),
    Sub(&'static Subcommand),
}

fn find(name: &[u8]) -> Option<Found> {
    match name.iter().position(|&b| b == b'|') {
        Some(bar) => {
            let container = lookup(&name[..bar])?;
            info::subcommand(container.name, &name[bar + 1..]).map(Found::Sub)
        }
        None => lookup(name).map(Found::Command),
    }
}

fn info_of(name: &[u8]) -> Frame {
    match find(name) {
        Some(Found::Command(spec)) => info(spec),
        Some(Found::Sub(sub)) => sub_info(sub),
        None => Frame::NullArray,
    }
}

fn text(s: &'static str) -> Frame {
    Frame::Bulk(Bytes::from_static(s.as_bytes()))
}

fn simple_set(names: impl IntoIterator<Item = &'static str>) -> Frame {
    Frame::Set(
        names
            .into_iter()
            .map(|n| Frame::Simple(Bytes::from_static(n.as_bytes())))
            .collect(),
    )
}

/// The names of Redis's flags set in `flags` (WeTask's own are not shown).
fn flag_names(flags: u32) -> impl Iterator<Item = &'static str> {
    flag::NAMES
        .iter()
        .filter(move |(bit, _)| flags & bit != 0)
        .map(|(_, name)| *name)
}

/// COMMAND INFO's entry: name, arity, flags, first, last and step key, ACL categories,
/// tips, key specifications, subcommands.
fn entry(
    name: &'static str,
    arity: i32,
    flags: Frame,
    keys: (i32, i32, i32),
    categories: Vec<&'static str>,
    subcommands: Vec<Frame>,
    write: bool,
) -> Frame {
    let (tips, key_specs) = match docs::doc(name) {
        Some(doc) => (
            Frame::Set(doc.tips.iter().map(|t| text(t)).collect()),
            Frame::Set(doc.key_specs.iter().map(key_spec).collect()),
        ),
        // WeTask's own commands: their key range as a key specification.
        None => (Frame::Set(Vec::new()), legacy_key_spec(keys, write)),
    };
    Frame::Array(vec![
        text(name),
        Frame::Integer(i64::from(arity)),
        flags,
        Frame::Integer(i64::from(keys.0)),
        Frame::Integer(i64::from(keys.1)),
        Frame::Integer(i64::from(keys.2)),
        simple_set(categories),
        tips,
        key_specs,
        Frame::Array(subcommands),
    ])
}

fn map(pairs: Vec<(&'static str, Frame)>) -> Frame {
    Frame::Map(pairs.into_iter().map(|(k, v)| (text(k), v)).collect())
}

/// A key specification as COMMAND INFO gives it.
fn key_spec(spec: &KeySpec) -> Frame {
    let mut pairs = Vec::with_capacity(4);
    if !spec.notes.is_empty() {
        pairs.push(("notes", text(spec.notes)));
    }
    pairs.push(("flags", simple_set(spec.flags.iter().copied())));
    let (kind, search) = match spec.begin_search {
        BeginSearch::Index(pos) => ("index", vec![("index", Frame::Integer(pos))]),
        BeginSearch::Keyword(keyword, startfrom) => (
            "keyword",
            vec![
                ("keyword", text(keyword)),
                ("startfrom", Frame::Integer(startfrom)),
            ],
        ),
        BeginSearch::Unknown => ("unknown", Vec::new()),
    };
    pairs.push((
        "begin_search",
        map(vec![("type", text(kind)), ("spec", map(search))]),
    ));
    let (kind, find) = match spec.find_keys {
        FindKeys::Range {
            lastkey,
            keystep,
            limit,
        } => (
            "range",
            vec![
                ("lastkey", Frame::Integer(lastkey)),
                ("keystep", Frame::Integer(keystep)),
                ("limit", Frame::Integer(limit)),
            ],
        ),
        FindKeys::Keynum {
            keynumidx,
            firstkey,
            keystep,
        } => (
            "keynum",
            vec![
                ("keynumidx", Frame::Integer(keynumidx)),
                ("firstkey", Frame::Integer(firstkey)),
                ("keystep", Frame::Integer(keystep)),
            ],
        ),
        FindKeys::Unknown => ("unknown", Vec::new()),
    };
    pairs.push((
        "find_keys",
        map(vec![("type", text(kind)), ("spec", map(find))]),
    ));
    map(pairs)
}

/// A command of WeTask's own: its first/last/step key range as Redis writes a legacy range
/// key specification (a write command's keys read-write, a read's read-only).
fn legacy_key_spec(keys: (i32, i32, i32), write: bool) -> Frame {
    let (first, last, step) = keys;
    if first <= 0 {
        return Frame::Set(Vec::new());
    }
    let spec = KeySpec {
        notes: "",
        flags: if write {
            &["RW", "access", "update"]
        } else {
            &["RO", "access"]
        },
        begin_search: BeginSearch::Index(i64::from(first)),
        find_keys: FindKeys::Range {
            lastkey: i64::from(if last < 0 { last } else { last - first }),
            keystep: i64::from(step),
            limit: 0,
        },
    };
    Frame::Set(vec![key_spec(&spec)])
}

pub fn info(spec: &'static CommandSpec) -> Frame {
    if spec.has(flag::CONTAINER) {
        let subs = info::subcommands_of(spec.name).map(sub_info).collect();
        // A container has no flags of its own, unless it runs alone too (COMMAND).
        let flags = if spec.arity == -1 {
            simple_set(flag_names(spec.flags))
        } else {
            Frame::Set(Vec::new())
        };
        return entry(
            spec.name,
            spec.arity,
            flags,
            (0, 0, 0),
            info::categories(spec),
            subs,
            false,
        );
    }
    let mut flags: Vec<&'static str> = flag_names(spec.flags).collect();
    if spec.movable_keys.is_some() || keys_in_form(spec) {
        flags.push("movablekeys");
    }
    entry(
        spec.name,
        spec.arity,
        simple_set(flags),
        (spec.first_key, spec.last_key, spec.step),
        info::categories(spec),
        Vec::new(),
        spec.has(flag::WRITE),
    )
}

fn sub_info(sub: &'static Subcommand) -> Frame {
    entry(
        sub.name,
        sub.arity,
        simple_set(flag_names(sub.flags)),
        sub.keys,
        sub.categories.to_vec(),
        Vec::new(),
        sub.flags & flag::WRITE != 0,
    )
}

/// COMMAND DOCS [name …]: each command's description as Redis 7.2 gives it, a container's
/// subcommands inside it (unknown names left out; `container|name` names a subcommand).
fn docs(args: &[Bytes]) -> Frame {
    let found: Vec<Found> = if args.len() == 2 {
        COMMANDS.iter().map(Found::Command).collect()
    } else {
        args[2..].iter().filter_map(|name| find(name)).collect()
    };
    Frame::Map(
        found
            .into_iter()
            .map(|found| match found {
                Found::Command(spec) => (text(spec.name), command_doc(spec)),
                Found::Sub(sub) => (text(sub.name), doc_of(sub.name, None)),
            })
            .collect(),
    )
}

fn command_doc(spec: &'static CommandSpec) -> Frame {
    let subcommands = spec.has(flag::CONTAINER).then(|| {
        Frame::Map(
            info::subcommands_of(spec.name)
                .map(|sub| (text(sub.name), doc_of(sub.name, None)))
                .collect(),
        )
    });
    match docs::doc(spec.name) {
        Some(_) => doc_of(spec.name, subcommands),
        // WeTask's own: what the table says.
        None => map(vec![
            ("summary", text(spec.summary)),
            ("since", text(env!("CARGO_PKG_VERSION"))),
            ("group", text(spec.group)),
        ]),
    }
}

/// Redis's COMMAND DOCS map for `name` (a command or `container|name`).
fn doc_of(name: &'static str, subcommands: Option<Frame>) -> Frame {
    let Some(doc) = docs::doc(name) else {
        return map(Vec::new());
    };
    let mut pairs = Vec::with_capacity(10);
    pairs.push(("summary", text(doc.summary)));
    pairs.push(("since", text(doc.since)));
    pairs.push(("group", text(doc.group)));
    if !doc.complexity.is_empty() {
        pairs.push(("complexity", text(doc.complexity)));
    }
    if !doc.doc_flags.is_empty() {
        pairs.push(("doc_flags", simple_set(doc.doc_flags.iter().copied())));
    }
    if !doc.deprecated_since.is_empty() {
        pairs.push(("deprecated_since", text(doc.deprecated_since)));
    }
    if !doc.replaced_by.is_empty() {
        pairs.push(("replaced_by", text(doc.replaced_by)));
    }
    if !doc.history.is_empty() {
        let history = doc
            .history
            .iter()
            .map(|(version, change)| Frame::Array(vec![text(version), text(change)]))
            .collect();
        pairs.push(("history", Frame::Set(history)));
    }
    if !doc.arguments.is_empty() {
        pairs.push(("arguments", arguments(doc.arguments)));
    }
    if let Some(subcommands) = subcommands {
        pairs.push(("subcommands", subcommands));
    }
    map(pairs)
}

fn arguments(args: &'static [Arg]) -> Frame {
    Frame::Array(
        args.iter()
            .map(|arg| {
                let nested = matches!(arg.kind, "oneof" | "block");
                let mut pairs = vec![("name", text(arg.name)), ("type", text(arg.kind))];
                if !nested {
                    let display = if arg.display.is_empty() {
                        arg.name
                    } else {
                        arg.display
                    };
                    pairs.push(("display_text", text(display)));
                }
                if arg.key_spec_index >= 0 {
                    pairs.push(("key_spec_index", Frame::Integer(arg.key_spec_index)));
                }
                for (field, value) in [
                    ("token", arg.token),
                    ("summary", arg.summary),
                    ("since", arg.since),
                    ("deprecated_since", arg.deprecated_since),
                ] {
                    if !value.is_empty() {
                        pairs.push((field, text(value)));
                    }
                }
                if !arg.flags.is_empty() {
                    pairs.push(("flags", simple_set(arg.flags.iter().copied())));
                }
                if nested {
                    pairs.push(("arguments", arguments(arg.arguments)));
                }
                map(pairs)
            })
            .collect(),
    )
}

/// COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN pattern]: every command
/// and subcommand (`container|sub`).
fn list(args: &[Bytes]) -> Frame {
    enum Filter<'a> {
        None,
        Module,
        Category(&'a [u8]),
        Pattern(&'a [u8]),
    }
    let filter = match &args[2..] {
        [] => Filter::None,
        [by, kind, value] if is(by, "filterby") => {
            if is(kind, "module") {
                Filter::Module
            } else if is(kind, "aclcat") {
                Filter::Category(value)
            } else if is(kind, "pattern") {
                Filter::Pattern(value)
            } else {
                return Frame::static_error(SYNTAX);
            }
        }
        _ => return Frame::static_error(SYNTAX),
    };
    let keep = |name: &str, categories: &[&str]| match &filter {
        Filter::None => true,
        // No modules are loaded.
        Filter::Module => false,
        Filter::Category(wanted) => categories
            .iter()
            .any(|c| c.as_bytes()[1..].eq_ignore_ascii_case(wanted)),
        Filter::Pattern(pattern) => wetask_shards::glob::glob_match(pattern, name.as_bytes()),
    };
    let mut names = Vec::new();
    for spec in COMMANDS {
        if keep(spec.name, &info::categories(spec)) {
            names.push(text(spec.name));
        }
        for sub in info::subcommands_of(spec.name) {
            if keep(sub.name, sub.categories) {
                names.push(text(sub.name));
            }
        }
    }
    Frame::Array(names)
}

/// COMMAND GETKEYS / GETKEYSANDFLAGS full-command …: the command's keys (with their access
/// flags), Redis 7.2's errors.
/// Whether the command's keys are found by its parse (TASK.FETCH's queues, TASK.EVENTS'
/// queue, TASK.WAIT's task id) rather than by fixed positions: COMMAND INFO marks them
/// `movablekeys`, so that cluster clients ask COMMAND GETKEYS and route them by slot.
fn keys_in_form(spec: &CommandSpec) -> bool {
    use wetask_shards::spec::FormKind;
    matches!(
        spec.form,
        FormKind::Fetch | FormKind::Events | FormKind::Wait
    )
}

fn keys(command: &[Bytes], with_flags: bool) -> Frame {
    let Some(spec) = lookup(&command[0]) else {
        return Frame::static_error("ERR Invalid command specified");
    };
    let sub = command
        .get(1)
        .filter(|_| spec.has(flag::CONTAINER))
        .and_then(|name| info::subcommand(spec.name, name));
    let (name, arity, has_keys) = match sub {
        Some(sub) => (sub.name, sub.arity, sub.keys.0 > 0),
        None => (
            spec.name,
            spec.arity,
            spec.first_key > 0 || spec.movable_keys.is_some() || keys_in_form(spec),
        ),
    };
    if spec.has(flag::CONTAINER) && sub.is_none() {
        return Frame::static_error("ERR Invalid command specified");
    }
    if !has_keys {
        return Frame::static_error("ERR The command has no key arguments");
    }
    let argc = command.len() as i32;
    if (arity > 0 && arity != argc) || argc < -arity {
        return Frame::static_error("ERR Invalid number of arguments specified for command");
    }
    let positions: Vec<usize> = if keys_in_form(spec) {
        wetask_shards::request::Request::new(command.to_vec(), 2).key_positions()
    } else {
        spec.key_positions(command).collect()
    };
    if positions.is_empty() {
        return if spec.has(flag::NO_MANDATORY_KEYS) {
            Frame::Array(Vec::new())
        } else {
            Frame::static_error("ERR Invalid arguments specified for command")
        };
    }
    Frame::Array(
        positions
            .iter()
            .enumerate()
            .map(|(index, &at)| {
                let key = Frame::Bulk(command[at].clone());
                if !with_flags {
                    return key;
                }
                let flags = info::key_flags(name, command, index);
                Frame::Array(vec![
                    key,
                    Frame::Array(
                        flags
                            .iter()
                            .map(|f| Frame::Simple(Bytes::from_static(f.as_bytes())))
                            .collect(),
                    ),
                ])
            })
            .collect(),
    )
}

fn help() -> Frame {
    let lines = [
        "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "(no subcommand)",
        "    Return details about all Redis commands.",
        "COUNT",
        "    Return the total number of commands in this Redis server.",
        "LIST",
        "    Return a list of all commands in this Redis server.",
        "INFO [<command-name> ...]",
        "    Return details about multiple Redis commands.",
        "    If no command names are given, documentation details for all",
        "    commands are returned.",
        "DOCS [<command-name> ...]",
        "    Return documentation details about multiple Redis commands.",
        "    If no command names are given, documentation details for all",
        "    commands are returned.",
        "GETKEYS <full-command>",
        "    Return the keys from a full Redis command.",
        "GETKEYSANDFLAGS <full-command>",
        "    Return the keys and the access flags from a full Redis command.",
        "HELP",
        "    Prints this help.",
    ];
    Frame::lines(&lines)
}
