#!/usr/bin/env python3
"""Time from process start to the first PONG, for wetask and Redis, over --runs runs each.

    python3 scripts/measure-boot.py --runs 20
"""

import argparse
import os
import socket
import statistics
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def first_pong_ms(cmd, port):
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return (time.perf_counter() - start) * 1000
            except OSError:
                time.sleep(0.0005)
            if time.perf_counter() - start > 10:
                raise RuntimeError("no PONG within 10 s")
    finally:
        proc.terminate()
        proc.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "wetask"))
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--shards", default="")
    args = p.parse_args()
    shards = ["--shards", args.shards] if args.shards else []
    kinds = {
        "wetask": lambda port: [args.binary, "--port", str(port), "--log-level", "warn", "--appendonly", "no", *shards],
        "redis": lambda port: ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
    }
    for name, cmd in kinds.items():
        times = [first_pong_ms(cmd(18000 + i), 18000 + i) for i in range(args.runs)]
        print(f"{name}: boot to first PONG median {statistics.median(times):.1f} ms "
              f"(min {min(times):.1f}, max {max(times):.1f}) over {args.runs} runs")


if __name__ == "__main__":
    main()
