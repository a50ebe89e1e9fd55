#!/usr/bin/env python3
"""Paired syscall and CPU cost per request: Redis vs wetask --io uring vs wetask --io glommio.

Each server runs pinned to --server-cpu with one shard; redis-benchmark runs pinned to
--load-cpu, unpipelined SET and GET at --clients connections. For every run it reads the
server's utime+stime from /proc/PID/stat and counts its syscalls with
`perf stat -e raw_syscalls:sys_enter`. The servers take turns (A B C A B C ...) for --rounds
rounds; the table shows medians with min-max. Used for docs/perf-notes.md.

    python3 scripts/measure-io.py --rounds 5 --requests 200000
    python3 scripts/measure-io.py --kinds redis,wetask-uring --clients 1 --requests 50000
    python3 scripts/measure-io.py --kinds redis,wetask-uring --clients 16 --tests set --appendfsync always

redis-benchmark's p50 (its CSV) is reported too: at one connection it is the round trip.
"""

import argparse
import os
import re
import signal
import statistics
import shutil
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK_US = 1_000_000 / os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime, of all threads


def start(kind, port, cpu, binary, fsync, data):
    """`fsync`: None for no persistence, else both servers journal into `data` with it."""
    persist = ["--appendonly", "no"] if fsync is None else ["--appendfsync", fsync, "--dir", data]
    if kind == "redis":
        cmd = ["redis-server", "--port", str(port), "--save", ""]
        cmd += persist if fsync is None else ["--appendonly", "yes", *persist]
    else:
        io = kind.split("-")[1]
        cmd = [binary, "--port", str(port), "--shards", "1", "--cpus", str(cpu), "--io", io,
               "--log-level", "warn", *persist]
    proc = subprocess.Popen(["taskset", "-c", str(cpu), *cmd], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    for _ in range(200):
        if subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).stdout.strip() == b"PONG":
            return proc
        time.sleep(0.02)
    raise RuntimeError(f"{kind} did not start")


def bench(port, cpu, clients, requests, tests):
    out = subprocess.run(
        ["taskset", "-c", str(cpu), "redis-benchmark", "-p", str(port), "-c", str(clients),
         "-n", str(requests), "-t", tests, "-r", "100000", "-d", "64", "--csv"],
        capture_output=True, text=True, check=True).stdout
    rows = [[f.strip('"') for f in line.split(",")] for line in out.splitlines()[1:] if line]
    rps = [float(r[1]) for r in rows]
    p50 = [float(r[4]) * 1000 for r in rows]  # µs
    return len(rps) * requests, statistics.mean(rps), statistics.mean(p50)


def measure(kind, args, port):
    data = tempfile.mkdtemp(prefix="measure-io-")
    proc = start(kind, port, args.server_cpu, args.binary, args.appendfsync, data)
    try:
        bench(port, args.load_cpu, args.clients, min(20000, args.requests), args.tests)  # warm-up
        perf = subprocess.Popen(["perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter", "-p", str(proc.pid)],
                                stderr=subprocess.PIPE, text=True)
        time.sleep(0.2)
        before = cpu_ticks(proc.pid)
        requests, rps, p50 = bench(port, args.load_cpu, args.clients, args.requests, args.tests)
        after = cpu_ticks(proc.pid)
        perf.send_signal(signal.SIGINT)
        syscalls = int(re.search(r"^(\d+),", perf.communicate()[1], re.M).group(1))
        return {"cpu_us": (after - before) * TICK_US / requests, "syscalls": syscalls / requests,
                "rps": rps, "p50_us": p50}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "wetask"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--requests", type=int, default=200000)
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--tests", default="set,get")
    p.add_argument("--server-cpu", type=int, default=0)
    p.add_argument("--load-cpu", type=int, default=1)
    p.add_argument("--kinds", default="redis,wetask-uring,wetask-glommio")
    p.add_argument("--appendfsync", choices=["always", "everysec", "no"], default=None,
                   help="both servers persist with this policy (default: no persistence)")
    args = p.parse_args()
    kinds = args.kinds.split(",")
    results = {k: [] for k in kinds}
    for round_ in range(args.rounds):
        for i, kind in enumerate(kinds):
            results[kind].append(measure(kind, args, 17000 + i))
    version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.strip()
    print(f"# {version}; wetask {args.binary}; {args.clients} connections, unpipelined {args.tests}, "
          f"{args.requests} requests per test, {args.rounds} rounds; server on CPU {args.server_cpu}, "
          f"load on CPU {args.load_cpu}; persistence: {args.appendfsync or 'off'}")
    print("| server | CPU µs/request | syscalls/request | requests/s | p50 µs |")
    print("|---|---|---|---|---|")
    for kind in kinds:
        row = [kind]
        for key, fmt in [("cpu_us", "{:.2f}"), ("syscalls", "{:.2f}"), ("rps", "{:.0f}"),
                         ("p50_us", "{:.0f}")]:
            values = [r[key] for r in results[kind]]
            row.append(f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}–{fmt.format(max(values))})")
        print("| " + " | ".join(row) + " |")
    base = results[kinds[0]]
    for kind in kinds[1:]:
        ratios = [r["cpu_us"] / b["cpu_us"] for r, b in zip(results[kind], base)]
        print(f"{kind} / {kinds[0]} CPU per request, paired: median {statistics.median(ratios):.2f} "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f})")
        ratios = [r["rps"] / b["rps"] for r, b in zip(results[kind], base)]
        print(f"{kind} / {kinds[0]} requests/s, paired: median {statistics.median(ratios):.2f} "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f})")
        ratios = [r["p50_us"] / b["p50_us"] for r, b in zip(results[kind], base)]
        print(f"{kind} / {kinds[0]} p50 latency, paired: median {statistics.median(ratios):.2f} "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f})")


if __name__ == "__main__":
    main()
