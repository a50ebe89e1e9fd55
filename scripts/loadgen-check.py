#!/usr/bin/env python3
"""Checks wetask-bench's load generator against redis-benchmark on the same Redis.

Redis runs pinned to --server-cpu; each generator, pinned to --load-cpu, drives the same
shape in turns for --rounds rounds. Prints the medians and the ratio per shape, and the
Redis CPU utilisation during each run (1.0 = the server core is saturated, so the load
generator is not the bottleneck).

    python3 scripts/loadgen-check.py --rounds 3
"""

import argparse
import os
import re
import statistics
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", default=os.path.join(ROOT, "target", "release", "wetask-bench"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--server-cpu", type=int, default=0)
    p.add_argument("--load-cpu", type=int, default=1)
    args = p.parse_args()
    port = 17600
    redis = subprocess.Popen(["taskset", "-c", str(args.server_cpu), "redis-server", "--port", str(port),
                              "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    time.sleep(0.3)
    subprocess.run(["redis-benchmark", "-p", str(port), "-t", "set", "-r", "100000", "-n", "200000", "-q"],
                   capture_output=True)  # load the key space for GET
    shapes = [("set", 64, 1), ("get", 64, 1), ("set", 16, 16), ("get", 16, 16)]
    print("| shape | redis-benchmark ops/s | wetask-bench ops/s | ratio | Redis core busy (rb / wb) |")
    print("|---|---|---|---|---|")
    for test, conns, pipeline in shapes:
        rb, wb, rb_busy, wb_busy = [], [], [], []
        for _ in range(args.rounds):
            t0, c0 = time.time(), cpu_seconds(redis.pid)
            out = subprocess.run(["taskset", "-c", str(args.load_cpu), "redis-benchmark", "-p", str(port),
                                  "-c", str(conns), "-P", str(pipeline), "-t", test, "-d", "64", "-r", "100000",
                                  "-n", str(300000 if pipeline == 1 else 2000000), "--csv"],
                                 capture_output=True, text=True, check=True).stdout
            rb_busy.append((cpu_seconds(redis.pid) - c0) / (time.time() - t0))
            rb.append(float(out.splitlines()[1].split(",")[1].strip('"')))
            t0, c0 = time.time(), cpu_seconds(redis.pid)
            out = subprocess.run([args.bench, "run", "--addr", f"127.0.0.1:{port}", "--connections", str(conns),
                                  "--pipeline", str(pipeline), "--mix", test, "--value-bytes", "64",
                                  "--duration-ms", "3000", "--warmup-ms", "0", "--load-cpu", str(args.load_cpu)],
                                 capture_output=True, text=True, check=True).stdout
            wb_busy.append((cpu_seconds(redis.pid) - c0) / (time.time() - t0))
            wb.append(float(re.search(r"([\d.]+) ops/s", out).group(1)))
        r, w = statistics.median(rb), statistics.median(wb)
        print(f"| {test.upper()} -c {conns} -P {pipeline} | {r:.0f} | {w:.0f} | {w / r:.2f} | "
              f"{statistics.median(rb_busy):.2f} / {statistics.median(wb_busy):.2f} |")
    redis.terminate()
    redis.wait()


if __name__ == "__main__":
    main()
