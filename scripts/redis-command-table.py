#!/usr/bin/env python3
"""Writes shards/src/table/redis_table.rs: what COMMAND INFO says of Redis's commands beyond
the command table's rows (their ACL categories, their keys' access flags, and the container
commands' subcommands), read from a running redis-server (default: a fresh one on port
7501 started by this script), for the commands WeTask's server serves (default: the
debug build, started on port 7502). Run it again when the Redis version the project
compares against changes:

    .venv/bin/python scripts/redis-command-table.py > shards/src/table/redis_table.rs

Debian's redis-server is 7.0; the changes Redis 7.2 made to these (its src/commands/*.json
read against 7.0.15's) are applied below, in `REDIS_72`, so the table is 7.2's."""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

import redis

FLAGS = {
    "write": "WRITE", "readonly": "READONLY", "fast": "FAST", "denyoom": "DENYOOM",
    "admin": "ADMIN", "noscript": "NOSCRIPT", "loading": "LOADING", "stale": "STALE",
    "no_auth": "NO_AUTH", "blocking": "BLOCKING", "allow_busy": "ALLOW_BUSY",
    "pubsub": "PUBSUB", "no_async_loading": "NO_ASYNC_LOADING", "no_multi": "NO_MULTI",
    "skip_monitor": "SKIP_MONITOR", "skip_slowlog": "SKIP_SLOWLOG",
    "no_mandatory_keys": "NO_MANDATORY_KEYS",
}
# Redis 7.2's additions and changes to what this file holds.
REDIS_72_SUBCOMMANDS = [
    ("client|no-touch", 3, ["noscript", "loading", "stale"], ["@slow", "@connection"]),
    ("client|setinfo", 4, ["noscript", "loading", "stale"], ["@slow", "@connection"]),
    ("cluster|myshardid", 2, ["stale"], ["@slow"]),
]
REDIS_72_ARITIES = {"command|getkeys": -3, "command|getkeysandflags": -3}
REDIS_72_CATEGORIES = {"waitaof": ["@slow", "@connection"]}
# Subcommands WeTask does not serve (left out, so they stay unknown).
NOT_SERVED = {"script|debug"}


def started(argv, port):
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return proc
        except OSError:
            time.sleep(0.05)
    sys.exit(f"{argv[0]} did not start on port {port}")


def key_specs(entry):
    out = []
    for spec in entry[8]:
        fields = spec if isinstance(spec, dict) else dict(zip(spec[0::2], spec[1::2]))
        out.append([f.decode() for f in fields[b"flags"]])
    return out


def quoted(words):
    return "&[" + ", ".join(f'"{w}"' for w in words) + "]"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--redis-port", type=int)
    parser.add_argument("--wetask-port", type=int)
    args = parser.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    procs = []
    if args.redis_port is None:
        args.redis_port = 7501
        procs.append(started(["redis-server", "--port", "7501", "--save", ""], 7501))
    if args.wetask_port is None:
        args.wetask_port = 7502
        target = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
        data = tempfile.mkdtemp(prefix="wetask-table-")
        binary = os.path.join(target, "debug", "wetask")
        procs.append(started([binary, "--port", "7502", "--appendonly", "no", "--dir", data], 7502))
    try:
        theirs = redis.Redis(port=args.redis_port)
        ours = redis.Redis(port=args.wetask_port)
        for client in (theirs, ours):
            client.response_callbacks.clear()
        served = {e[0].decode() for e in ours.execute_command("COMMAND")}
        write(theirs, served)
    finally:
        for proc in procs:
            proc.terminate()


def write(theirs, served):
    categories, key_flags, subcommands = [], [], []
    for entry in sorted(theirs.execute_command("COMMAND"), key=lambda e: e[0]):
        name = entry[0].decode()
        if name not in served:
            continue
        categories.append((name, [c.decode() for c in entry[6]]))
        if key_specs(entry):
            key_flags.append((name, key_specs(entry)))
        for sub in entry[9] or []:
            sub_name = sub[0].decode()
            if sub_name in NOT_SERVED:
                continue
            flags = [f.decode() for f in sub[2] if f.decode() in FLAGS]
            arity = REDIS_72_ARITIES.get(sub_name, sub[1])
            keys = (sub[3], sub[4], sub[5])
            subcommands.append((sub_name, arity, flags, keys, [c.decode() for c in sub[6]]))
            if key_specs(sub):
                key_flags.append((sub_name, key_specs(sub)))
    for name, arity, flags, cats in REDIS_72_SUBCOMMANDS:
        subcommands.append((name, arity, flags, (0, 0, 0), cats))
    categories += REDIS_72_CATEGORIES.items()
    print("//! Redis 7.2's ACL categories, key access flags and subcommands of the commands WeTask")
    print("//! serves, as `scripts/redis-command-table.py` read them from a running redis-server")
    print("//! (generated: edit the script, not this file). `command_info` reads them.")
    print()
    print("use super::{sub, Subcommand};")
    print("use crate::spec::flag::*;")
    print()
    print("pub(super) static CATEGORIES: &[(&str, &[&str])] = &[")
    for name, cats in sorted(categories):
        print(f'    ("{name}", {quoted(cats)}),')
    print("];")
    print()
    print("pub(super) static KEY_FLAGS: &[(&str, &[&[&str]])] = &[")
    for name, specs in sorted(key_flags):
        print(f'    ("{name}", &[' + ", ".join(quoted(s) for s in specs) + "]),")
    print("];")
    print()
    print("pub static SUBCOMMANDS: &[Subcommand] = &[")
    for name, arity, flags, keys, cats in sorted(subcommands):
        bits = " | ".join(FLAGS[f] for f in flags) or "0"
        print(f'    sub("{name}", {arity}, {bits}, {keys}, {quoted(cats)}),')
    print("];")


if __name__ == "__main__":
    main()
