#!/usr/bin/env python3
"""Import cycles among a crate's modules: `scripts/import-cycles.py server/src shards/src`.

Checked at two levels. *Modules*: a top-level file or folder of the crate (`net/` with
everything under it is `net`). *Files*: every file on its own (a folder's `mod.rs` is the
folder's node), paths resolved through `crate::`, `super::`, `self::` and a module's own
children, so a folder cannot hide a cycle among its files. Module A depends on B when A's code (comments, strings and `#[cfg(test)] mod`
blocks and files left out) names `crate::B`, alone or in a `use crate::{...}` group. (`super::` in a
folder's files names the folder's own module, so it adds no edge.) lib.rs and main.rs,
the roots that declare every module, are not counted. Prints each cycle (a strongly
connected component of more than one module) and exits 1 if there is any; `--graph` prints
every edge as well.
"""
import os
import re
import sys


def strip(text):
    """Code only: no comments, no string literals, no test module."""
    cut = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text)
    if cut:
        text = text[: cut.start()]
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'r#*"(?:.|\n)*?"#*', '""', text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    return text


def group_names(body):
    """Top-level names in a `{a, b::c, d::{e, f}}` use group."""
    names, depth, current = [], 0, ""
    for ch in body:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            names.append(current)
            current = ""
            continue
        if depth == 0:
            current += ch
    names.append(current)
    return [n.strip().split("::")[0].strip() for n in names if n.strip()]


def module_of(root, path):
    rel = os.path.relpath(path, root)
    first = rel.split(os.sep)[0]
    return first[:-3] if first.endswith(".rs") else first


def test_only_files(root):
    """Files declared as `#[cfg(test)] mod name;`: tests, not part of the module graph."""
    skipped = set()
    for dirpath, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".rs"):
                continue
            text = open(os.path.join(dirpath, name), encoding="utf-8").read()
            base = dirpath if name in ("lib.rs", "main.rs", "mod.rs") else os.path.join(
                dirpath, name[:-3])
            for module in re.findall(r"#\[cfg\(test\)\]\s*(?:pub\s+)?mod\s+(\w+)\s*;", text):
                skipped.add(os.path.join(base, module + ".rs"))
                skipped.add(os.path.join(base, module, "mod.rs"))
    return skipped


def graph(root):
    modules = {}
    skipped = test_only_files(root)
    for dirpath, _, files in os.walk(root):
        for name in files:
            if name.endswith(".rs"):
                path = os.path.join(dirpath, name)
                if path in skipped:
                    continue
                module = module_of(root, path)
                if module in ("lib", "main"):
                    continue
                modules.setdefault(module, []).append(path)
    edges = {m: set() for m in modules}
    for module, paths in modules.items():
        for path in paths:
            code = strip(open(path, encoding="utf-8").read())
            targets = re.findall(r"\bcrate::(\w+)", code)
            for match in re.finditer(r"\buse\s+crate::\{", code):
                depth, i = 1, match.end()
                while depth and i < len(code):
                    depth += {"{": 1, "}": -1}.get(code[i], 0)
                    i += 1
                targets += group_names(code[match.end() : i - 1])
            for target in targets:
                if target in modules and target != module:
                    edges[module].add(target)
    return edges


def module_path(root, path):
    """A file's module path: src/a/b.rs -> (a, b); src/a/mod.rs -> (a,); lib.rs -> ()."""
    parts = os.path.relpath(path, root).split(os.sep)
    last = parts.pop()
    if last not in ("mod.rs", "lib.rs", "main.rs"):
        parts.append(last[:-3])
    return tuple(parts)


def references(code):
    """Every path the code names: `crate::a::b`, `super::a`, `self::a`, and each member of
    a `use ...::{...}` group spelled out in full; also bare `name::` paths."""
    paths = []
    for match in re.finditer(r"(?<![:\w])(\w+(?:::\w+)*)::\{", code):
        depth, i = 1, match.end()
        while depth and i < len(code):
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        for name in group_names(code[match.end() : i - 1]):
            paths.append(match.group(1) + "::" + name)
    paths += re.findall(r"\b(?:crate|super|self)(?:::\w+)+", code)
    paths += re.findall(r"(?<![:\w])(\w+)::[\w*]", code)
    return paths


def file_graph(root):
    """Like `graph`, one node per file (a folder's mod.rs is the folder's own node)."""
    skipped = test_only_files(root)
    files = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            if name.endswith(".rs") and path not in skipped:
                files[module_path(root, path)] = path
    edges = {"::".join(m) or "(root)": set() for m in files}
    for module, path in files.items():
        if not module:
            continue
        code = strip(open(path, encoding="utf-8").read())
        for ref in references(code):
            parts = ref.split("::")
            if parts[0] == "crate":
                base, rest = (), parts[1:]
            elif parts[0] in ("super", "self"):
                base = module
                while parts and parts[0] in ("super", "self"):
                    if parts.pop(0) == "super":
                        base = base[:-1]
                rest = parts
            else:
                # A bare path: a child module of this one (`info::render` in a mod.rs).
                base, rest = module, parts
            # The longest prefix that is a file of this crate.
            target = None
            for n in range(len(rest), 0, -1):
                if base + tuple(rest[:n]) in files:
                    target = base + tuple(rest[:n])
                    break
            if target and target != module:
                edges["::".join(module)].add("::".join(target))
    # The root (lib.rs) only declares modules.
    edges.pop("(root)", None)
    for targets in edges.values():
        targets.discard("(root)")
    return edges


def cycles(edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    show_graph = "--graph" in sys.argv
    found = False
    for root in args or ["server/src", "shards/src"]:
        for level, edges in (("modules", graph(root)), ("files", file_graph(root))):
            if show_graph:
                for module in sorted(edges):
                    targets = ", ".join(sorted(edges[module])) or "(nothing)"
                    print(f"{root}: {level}: {module} -> {targets}")
            comps = cycles(edges)
            for comp in comps:
                found = True
                print(f"{root}: cycle among {len(comp)} {level}: {' '.join(comp)}")
            if not comps:
                print(f"{root}: no import cycle ({len(edges)} {level})")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
