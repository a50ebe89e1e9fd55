#!/usr/bin/env python3
"""Functions longer than a limit: `scripts/long-functions.py [--max 70] server/src shards/src`.

Counts lines from a `fn` line to its closing brace by brace depth (comments, string and char
literals left out), longest first. Issue 12 asks that none over 70 lines remain without a
reason in a comment: a comment line starting `Long:` in the doc comments or attributes just
above the `fn` gives it, and such functions are listed apart. It reports; it always exits 0.
"""
import os
import re
import sys

FN = re.compile(r"\s*(pub(\([^)]*\))?\s+)?(async\s+)?(const\s+)?(unsafe\s+)?fn\s+(\w+)")


def code_of(line):
    line = re.sub(r"//.*", "", line)
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    return re.sub(r"'(\\.|[^'\\])'", "''", line)


def reason(lines, start):
    """The `Long:` comment above line `start` (doc comments and attributes), if any."""
    i = start - 1
    while i >= 0:
        text = lines[i].strip()
        if not (text.startswith("//") or text.startswith("#[")):
            return None
        body = text.lstrip("/! ").strip()
        if body.startswith("Long:"):
            return body[len("Long:") :].strip()
        i -= 1
    return None


def long_functions(roots, limit):
    found = []
    for root in roots:
        for dirpath, _, files in os.walk(root):
            for name in sorted(files):
                if not name.endswith(".rs"):
                    continue
                path = os.path.join(dirpath, name)
                lines = open(path, encoding="utf-8").read().split("\n")
                for start, line in enumerate(lines):
                    match = FN.match(line)
                    if not match or line.strip().startswith("//"):
                        continue
                    depth, opened, end = 0, False, start
                    while end < len(lines):
                        code = code_of(lines[end])
                        if not opened and ";" in code and "{" not in code:
                            break
                        depth += code.count("{") - code.count("}")
                        opened = opened or "{" in code
                        if opened and depth <= 0:
                            break
                        end += 1
                    length = end - start + 1
                    if opened and length > limit:
                        found.append((length, path, start + 1, match.group(6), reason(lines, start)))
    return sorted(found, reverse=True)


def main():
    args = sys.argv[1:]
    limit = 70
    if "--max" in args:
        i = args.index("--max")
        limit = int(args[i + 1])
        del args[i : i + 2]
    found = long_functions(args or ["server/src", "shards/src"], limit)
    unexplained = [f for f in found if f[4] is None]
    explained = [f for f in found if f[4] is not None]
    for length, path, line, name, _ in unexplained:
        print(f"{length:4} {path}:{line} {name}")
    if explained:
        print("with a reason:")
        for length, path, line, name, why in explained:
            print(f"{length:4} {path}:{line} {name}: {why}")
    print(f"{len(unexplained)} functions over {limit} lines without a reason, {len(explained)} with one")


if __name__ == "__main__":
    main()
