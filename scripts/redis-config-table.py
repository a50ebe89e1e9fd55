#!/usr/bin/env python3
"""Writes server/src/commands/config_table.rs: every Redis configuration parameter, its default
and how CONFIG SET checks it, read from a running redis-server (default: a fresh one on port
7500 started by this script). Run it again when the Redis version the project compares
against changes:

    python3 scripts/redis-config-table.py [--port P] > server/src/commands/config_table.rs

It asks CONFIG GET * for the names and defaults, then probes each with CONFIG SET: its own
value (refused: immutable), a word (refused with "yes or no", "one of the following",
"integer" or "memory value": the kind), and, for every settable one, a changed value, to see
which other names change with it (Redis's aliases)."""

import argparse
import socket
import subprocess
import sys
import tempfile
import time


class Redis:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    def _line(self):
        while b"\r\n" not in self.buf:
            self.buf += self.sock.recv(65536)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _read(self):
        line = self._line()
        kind = line[:1]
        if kind in b"+-:":
            return line.decode()
        if kind == b"$":
            n = int(line[1:])
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self.buf += self.sock.recv(65536)
            value, self.buf = self.buf[:n], self.buf[n + 2 :]
            return value.decode()
        return [self._read() for _ in range(int(line[1:]))]

    def cmd(self, *args):
        words = [a.encode() for a in args]
        self.sock.sendall(
            b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words)
        )
        return self._read()

    def all(self):
        reply = self.cmd("CONFIG", "GET", "*")
        return dict(zip(reply[0::2], reply[1::2]))


# Checks no probe can name: a value made of several parts, or with a unit of its own.
SPECIAL = {
    "latency-tracking-info-percentiles": "Percentiles",
    "maxmemory-clients": "MemoryOrPercent",
    "oom-score-adj-values": "OomScores",
}


def probe(redis, name, default):
    first = redis.cmd("CONFIG", "SET", name, default)
    if "protected config" in first:
        return ("Protected", None)
    if first != "+OK":
        return ("Immutable", None)
    if name in SPECIAL:
        return (SPECIAL[name], None)
    error = redis.cmd("CONFIG", "SET", name, "bogus-value")
    redis.cmd("CONFIG", "SET", name, default)
    if error == "+OK":
        return ("Text", "wetask-probe")
    if "'yes' or 'no'" in error:
        return ("Bool", "no" if default == "yes" else "yes")
    if "one of the following: " in error:
        values = error.split("one of the following: ")[1].split(", ")
        other = next((v for v in values if v != default), None)
        return (("Enum", values), other)
    if "memory value" in error:
        return ("Memory", str(int(default) + 1024))
    if "integer" in error:
        return ("Int", str(int(default) + 1))
    return ("Text", None)


TYPES = """/// How CONFIG SET checks a value (as Redis does).
pub enum Kind {
    /// Set at start only: CONFIG SET refuses it.
    Immutable,
    /// Redis's protected parameters (`dir`, `dbfilename`): refused unless
    /// `enable-protected-configs`, which WeTask never sets.
    Protected,
    Bool,
    Int,
    /// An integer or a size with a unit (`64mb`), reported in bytes.
    Memory,
    /// One of these words (any case), reported as written here.
    Enum(&'static [&'static str]),
    Text,
    /// `maxmemory-clients`: a memory size or a percentage (`10%`).
    MemoryOrPercent,
    /// `latency-tracking-info-percentiles`: percentiles between 0 and 100.
    Percentiles,
    /// `oom-score-adj-values`: three integers.
    OomScores,
}

/// One Redis parameter: its name, Redis's default, its check, and the names that are the
/// same parameter.
pub struct Param {
    pub name: &'static str,
    pub default: &'static str,
    pub kind: Kind,
    pub aliases: &'static [&'static str],
}
"""


# Parameters Redis 7.2 added (src/config.c of 7.2; the debug-only ones left out).
REDIS_72_PARAMS = [
    ("cluster-announce-human-nodename", "", "Text", []),
    ("locale-collate", "", "Text", []),
    ("set-max-listpack-entries", "128", "Int", []),
    ("set-max-listpack-value", "64", "Int", []),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int)
    args = parser.parse_args()
    server = None
    port = args.port
    if port is None:
        port = 7500
        workdir = tempfile.mkdtemp()
        server = subprocess.Popen(
            ["redis-server", "--port", str(port), "--save", "", "--dir", workdir],
            stdout=subprocess.DEVNULL,
        )
        time.sleep(0.5)
    try:
        redis = Redis(port)
        version = redis.cmd("INFO", "server").split("redis_version:")[1].split("\r\n")[0]
        defaults = redis.all()
        rows = []
        for name in sorted(defaults):
            kind, changed = probe(redis, name, defaults[name])
            aliases = []
            if changed is not None and redis.cmd("CONFIG", "SET", name, changed) == "+OK":
                after = redis.all()
                aliases = [n for n in after if n != name and after[n] != defaults[n]]
                redis.cmd("CONFIG", "SET", name, defaults[name])
            rows.append((name, defaults[name], kind, aliases))
    finally:
        if server:
            server.terminate()
    if version.startswith("7.0."):
        # WeTask announces 7.2: the parameters 7.2 added, as its config.c declares them.
        rows = [(n, d, ("Enum", [*k[1], "nothing"]) if n == "loglevel" else k, a)
                for n, d, k, a in rows]
        rows += REDIS_72_PARAMS
        rows.sort()
        version = f"{version} and those Redis 7.2 added"
    out = sys.stdout
    out.write(
        f"//! Every configuration parameter of Redis {version}, with its default and how CONFIG SET\n"
        "//! checks a value, as `scripts/redis-config-table.py` read them from a running\n"
        "//! redis-server (generated: edit the script, not this file). `config_inert` serves\n"
        "//! the ones WeTask has no use for.\n\n"
        f"{TYPES}\n"
    )
    out.write("#[rustfmt::skip]\npub const PARAMS: &[Param] = &[\n")
    for name, default, kind, aliases in rows:
        if isinstance(kind, tuple):
            values = ", ".join(f'"{v}"' for v in kind[1])
            kind_text = f"Kind::Enum(&[{values}])"
        else:
            kind_text = f"Kind::{kind}"
        alias_text = ", ".join(f'"{a}"' for a in aliases)
        default_text = default.replace("\\", "\\\\").replace('"', '\\"')
        out.write(
            f'    Param {{ name: "{name}", default: "{default_text}", kind: {kind_text}, '
            f"aliases: &[{alias_text}] }},\n"
        )
    out.write("];\n")


if __name__ == "__main__":
    main()
