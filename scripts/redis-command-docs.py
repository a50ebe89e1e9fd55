#!/usr/bin/env python3
"""Writes shards/src/table/docs_table.rs: what COMMAND DOCS and COMMAND INFO say of each
Redis command beyond the command table (summary, since, group, complexity, doc flags,
deprecation, history, tips, key specifications and arguments), read from Redis's own
command descriptions (src/commands/*.json) at the version WeTask announces:

    python3 scripts/redis-command-docs.py --redis-git PATH/TO/redis [--tag 7.2.6] \\
        > shards/src/table/docs_table.rs

PATH/TO/redis is a clone of github.com/redis/redis (bare or not). The transformations are
Redis's own (utils/generate-command-code.py and server.c's COMMAND replies): names and
display texts lower-cased, tokens upper-cased, tips lower-cased, flags in the order Redis
prints them. Sentinel's commands are left out."""

import argparse
import json
import subprocess
import sys

KEY_FLAGS = ["RO", "RW", "OW", "RM", "ACCESS", "UPDATE", "INSERT", "DELETE", "NOT_KEY",
             "INCOMPLETE", "VARIABLE_FLAGS"]
KEY_FLAG_NAMES = {"RO": "RO", "RW": "RW", "OW": "OW", "RM": "RM"}
DOC_FLAGS = ["DEPRECATED", "SYSCMD"]


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True,
                          text=True).stdout


def rust(text):
    """A Rust string literal."""
    if text is None:
        return '""'
    return json.dumps(text, ensure_ascii=False)


def strs(items):
    return "&[" + ", ".join(rust(i) for i in items) + "]"


def arg_code(arg):
    kind = arg["type"]
    flags = [f for f in ("optional", "multiple", "multiple_token") if arg.get(f)]
    display = "" if kind in ("oneof", "block") else arg.get("display", "").lower()
    subargs = "&[" + ", ".join(arg_code(a) for a in arg.get("arguments", [])) + "]"
    return (f"Arg {{ name: {rust(arg['name'].lower())}, kind: {rust(kind)}, "
            f"display: {rust(display)}, key_spec_index: {arg.get('key_spec_index', -1)}, "
            f"token: {rust(arg['token'].upper() if 'token' in arg else '')}, "
            f"summary: {rust(arg.get('summary', ''))}, since: {rust(arg.get('since', ''))}, "
            f"deprecated_since: {rust(arg.get('deprecated_since', ''))}, "
            f"flags: {strs(flags)}, arguments: {subargs} }}")


def key_spec_code(spec):
    flags = [KEY_FLAG_NAMES.get(f, f.lower()) for f in KEY_FLAGS if f in spec.get("flags", [])]
    bs = spec["begin_search"]
    if "index" in bs:
        begin = f"BeginSearch::Index({bs['index']['pos']})"
    elif "keyword" in bs:
        begin = (f"BeginSearch::Keyword({rust(bs['keyword']['keyword'])}, "
                 f"{bs['keyword']['startfrom']})")
    else:
        begin = "BeginSearch::Unknown"
    fk = spec["find_keys"]
    if "range" in fk:
        r = fk["range"]
        find = f"FindKeys::Range {{ lastkey: {r['lastkey']}, keystep: {r['step']}, limit: {r['limit']} }}"
    elif "keynum" in fk:
        k = fk["keynum"]
        find = (f"FindKeys::Keynum {{ keynumidx: {k['keynumidx']}, firstkey: {k['firstkey']}, "
                f"keystep: {k['step']} }}")
    else:
        find = "FindKeys::Unknown"
    return (f"KeySpec {{ notes: {rust(spec.get('notes', ''))}, flags: {strs(flags)}, "
            f"begin_search: {begin}, find_keys: {find} }}")


def doc_code(name, desc):
    history = "&[" + ", ".join(f"({rust(v)}, {rust(t)})" for v, t in desc.get("history", [])) + "]"
    doc_flags = [f.lower() for f in DOC_FLAGS if f in desc.get("doc_flags", [])]
    tips = [t.lower() for t in desc.get("command_tips", [])]
    specs = "&[" + ", ".join(key_spec_code(s) for s in desc.get("key_specs", [])) + "]"
    args = "&[" + ", ".join(arg_code(a) for a in desc.get("arguments", [])) + "]"
    return (f"    Doc {{ name: {rust(name)}, summary: {rust(desc.get('summary', ''))}, "
            f"since: {rust(desc.get('since', ''))}, group: {rust(desc['group'].replace('_', '-'))}, "
            f"complexity: {rust(desc.get('complexity', ''))}, doc_flags: {strs(doc_flags)}, "
            f"deprecated_since: {rust(desc.get('deprecated_since', ''))}, "
            f"replaced_by: {rust(desc.get('replaced_by', ''))}, history: {history}, "
            f"tips: {strs(tips)}, key_specs: {specs}, arguments: {args} }},\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--redis-git", required=True)
    parser.add_argument("--tag", default="7.2.6")
    args = parser.parse_args()
    files = git(args.redis_git, "ls-tree", "--name-only", args.tag, "src/commands/").split()
    docs = {}
    for path in files:
        if not path.endswith(".json"):
            continue
        for name, desc in json.loads(git(args.redis_git, "show", f"{args.tag}:{path}")).items():
            if desc["group"] == "sentinel":
                continue
            container = desc.get("container")
            full = f"{container.lower()}|{name.lower()}" if container else name.lower()
            docs[full] = desc
    out = sys.stdout
    out.write(
        f"//! What COMMAND DOCS and COMMAND INFO say of Redis {args.tag}'s commands beyond the\n"
        "//! command table, from Redis's src/commands/*.json by `scripts/redis-command-docs.py`\n"
        "//! (generated: edit the script, not this file). Sorted by name.\n\n"
        "use super::{Arg, BeginSearch, Doc, FindKeys, KeySpec};\n\n"
        "pub static DOCS: &[Doc] = &[\n"
    )
    for name in sorted(docs):
        out.write(doc_code(name, docs[name]))
    out.write("];\n")


if __name__ == "__main__":
    main()
