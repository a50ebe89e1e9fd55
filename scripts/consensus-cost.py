#!/usr/bin/env python3
"""What consensus mode costs (issue 36, "Cost"): SET of 64 B values from 16 connections
against

  always     one WeTask node with `appendfsync always` (the yardstick),
  raft       three WeTask nodes in consensus mode on 127.0.0.1, .2 and .3 (the leader driven),
  redis+wait Redis with one replica, each SET followed by `WAIT 1 0` (wetask-bench's
             `set-wait` mix: one request is the pair),

in turns, `--pairs` times. Every server runs on CPU 0 and the load generator on CPU 1
(docs/BENCHMARKS.md's method). Prints each system's ops/s and p50 per round, the median
(min-max) of raft/always and redis+wait/always, and writes the table to `--out`.

    cargo build --release -p wetask-server -p wetask-bench
    python3 scripts/consensus-cost.py --pairs 6 --out docs/bench/consensus-cost.txt
"""

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
WETASK = os.path.join(TARGET, "release", "wetask")
BENCH = os.path.join(TARGET, "release", "wetask-bench")
HOSTS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]


def free_port():
    for _ in range(500):
        port = __import__("random").randint(20000, 40000)
        ok = True
        for host in HOSTS:
            for p in (port, port + 1, port + 10001, port + 20000):
                with socket.socket() as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    try:
                        s.bind((host, p))
                    except OSError:
                        ok = False
        if ok:
            return port
    raise SystemExit("no free port")


def cli(host, port, *args):
    out = subprocess.run(["redis-cli", "-h", host, "-p", str(port), *args],
                         capture_output=True, text=True, timeout=10)
    return out.stdout


def wait(check, what, seconds=30):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def bench(host, port, mix, seconds):
    out = subprocess.run([BENCH, "run", "--addr", f"{host}:{port}", "--mix", mix,
                          "--connections", "16", "--value-bytes", "64",
                          "--duration-ms", str(seconds * 1000), "--load-cpu", "1"],
                         capture_output=True, text=True, timeout=seconds + 60)
    line = out.stdout.strip().splitlines()[-1]
    ops = float(re.search(r"([\d.]+) ops/s", line).group(1))
    errors = int(re.search(r"(\d+) errors", line).group(1))
    p50 = int(re.search(r"p50 (\d+)", line).group(1))
    if errors:
        raise SystemExit(f"{mix} on {host}:{port}: {errors} errors")
    return ops, p50


def start(args, **kw):
    return subprocess.Popen(["taskset", "-c", "0", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, **kw)


def stop(procs, dirs):
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


def run_always(seconds):
    port, d = free_port(), tempfile.mkdtemp(prefix="cost-always-")
    procs = [start([WETASK, "--port", str(port), "--shards", "1", "--cpus", "0", "--dir", d,
                    "--appendonly", "yes", "--appendfsync", "always"])]
    try:
        wait(lambda: "PONG" in cli("127.0.0.1", port, "PING"), "wetask")
        return bench("127.0.0.1", port, "set", seconds)
    finally:
        stop(procs, [d])


def run_raft(seconds):
    port = free_port()
    peers = ",".join(f"{i + 1}={h}:{port}" for i, h in enumerate(HOSTS))
    dirs = [tempfile.mkdtemp(prefix=f"cost-raft{i}-") for i in range(3)]
    procs = [start([WETASK, "--bind", h, "--port", str(port), "--shards", "1", "--cpus", "0",
                    "--consensus", "raft", "--raft-id", str(i + 1), "--raft-peers", peers,
                    "--dir", dirs[i]]) for i, h in enumerate(HOSTS)]
    try:
        def leader():
            for h in HOSTS:
                if "role=leader" in cli(h, port + 1, "INFO", "consensus"):
                    return h
            return None
        host = wait(leader, "a leader")
        return bench(host, port + 1, "set", seconds)
    finally:
        stop(procs, dirs)


def run_redis(seconds):
    p1, p2 = free_port(), free_port()
    dirs = [tempfile.mkdtemp(prefix="cost-redis-") for _ in range(2)]
    common = ["--save", "", "--appendonly", "no", "--protected-mode", "no"]
    procs = [start(["redis-server", "--port", str(p1), "--dir", dirs[0], *common]),
             start(["redis-server", "--port", str(p2), "--dir", dirs[1], *common,
                    "--replicaof", "127.0.0.1", str(p1)])]
    try:
        wait(lambda: "master_link_status:up" in cli("127.0.0.1", p2, "INFO", "replication"),
             "the replica's link")
        return bench("127.0.0.1", p1, "set-wait", seconds)
    finally:
        stop(procs, dirs)


def summary(values):
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--seconds", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args()
    rows, lines = [], []
    systems = [("always", run_always), ("raft", run_raft), ("redis+wait", run_redis)]
    for n in range(args.pairs):
        order = systems[n % 3:] + systems[:n % 3]
        got = {name: run(args.seconds) for name, run in order}
        rows.append(got)
        line = f"round {n + 1}: " + ", ".join(
            f"{name} {got[name][0]:.0f} ops/s p50 {got[name][1]} us" for name, _ in systems)
        print(line, flush=True)
        lines.append(line)
    lines.append("")
    for name, _ in systems:
        lines.append(f"{name:11} ops/s median {statistics.median(r[name][0] for r in rows):.0f}, "
                     f"p50 median {statistics.median(r[name][1] for r in rows):.0f} us")
    for name in ("raft", "redis+wait"):
        ratios = [r[name][0] / r["always"][0] for r in rows]
        lines.append(f"{name}/always ops/s: {summary(ratios)} over {len(rows)} rounds")
    text = "\n".join(lines)
    print("\n" + "\n".join(lines[-5:]))
    if args.out:
        with open(args.out, "w") as f:
            f.write("SET 64 B, 16 connections; servers on CPU 0, wetask-bench on CPU 1\n")
            f.write(f"at {subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True, cwd=ROOT).stdout.strip()}\n\n")
            f.write(text + "\n")


if __name__ == "__main__":
    main()
