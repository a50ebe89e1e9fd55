#!/usr/bin/env python3
"""The live migration from Redis at size (issue 36's acceptance): a redis-server with N keys
(`DEBUG POPULATE`) and a writer that keeps writing; WeTask follows it with REPLICAOF, catches
up, and after the writer stops and `WAIT 1` says the replica has everything, every key is
compared. Prints the timings and the count of keys that differ (which must be 0).

    scripts/migrate-check.py [--keys 1000000] [--shards 2] [--wetask target/release/wetask]

Everything runs on loopback, on free ports, and is stopped at the end; the writer is bounded
in count and time."""

import argparse
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time

import redis


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(check, what, deadline_s=600):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            if check():
                return
        except redis.ConnectionError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def start_wetask(binary, shards, data):
    proc = subprocess.Popen(
        [binary, "--port", "0", "--shards", str(shards), "--dir", data],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        match = re.search(r"listening on [^ ]+:(\d+)", line)
        if match:
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
            return proc, int(match.group(1))
    raise SystemExit("wetask did not start")


def writer(port, stop, count):
    client = redis.Redis(port=port)
    pipe_size = 50
    i = 0
    while not stop.is_set() and i < 5_000_000:
        pipe = client.pipeline(transaction=False)
        for _ in range(pipe_size):
            pipe.set(f"key:{(i * 7919) % 1_000_000}", f"written-{i}")
            i += 1
        pipe.execute()
        count[0] = i


def compare(a, b, batch=5000):
    """Keys in `a` whose value differs in `b`, and the count of keys compared."""
    differ, seen, keys = 0, 0, []
    for key in a.scan_iter(count=batch):
        keys.append(key)
        if len(keys) == batch:
            differ += sum(x != y for x, y in zip(a.mget(keys), b.mget(keys)))
            seen += len(keys)
            keys = []
    if keys:
        differ += sum(x != y for x, y in zip(a.mget(keys), b.mget(keys)))
        seen += len(keys)
    return differ, seen


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--wetask", default="target/release/wetask")
    parser.add_argument("--write-seconds", type=float, default=5.0)
    args = parser.parse_args()
    data = tempfile.mkdtemp(prefix="wetask-migrate-")
    redis_port = free_port()
    red_proc = subprocess.Popen(
        ["redis-server", "--port", str(redis_port), "--save", "", "--appendonly", "no",
         "--dir", data, "--enable-debug-command", "yes"], stdout=subprocess.DEVNULL)
    we_proc = None
    try:
        red = redis.Redis(port=redis_port)
        wait_for(red.ping, "redis-server")
        started = time.monotonic()
        red.execute_command("DEBUG", "POPULATE", args.keys, "key", 100)
        print(f"redis: {red.dbsize()} keys in {time.monotonic() - started:.1f} s")
        stop, count = threading.Event(), [0]
        thread = threading.Thread(target=writer, args=(redis_port, stop, count))
        thread.start()
        we_proc, we_port = start_wetask(args.wetask, args.shards, os.path.join(data, "wetask"))
        we = redis.Redis(port=we_port)
        started = time.monotonic()
        we.replicaof("127.0.0.1", redis_port)
        wait_for(lambda: we.info("replication").get("master_link_status") == "up", "the sync")
        synced = time.monotonic() - started
        print(f"wetask ({args.shards} shards): full sync of {args.keys} keys with the writer "
              f"running: {synced:.1f} s")
        time.sleep(args.write_seconds)
        stop.set()
        thread.join(timeout=60)
        started = time.monotonic()
        acked = red.execute_command("WAIT", 1, 60000)
        print(f"writer: {count[0]} writes; WAIT 1 answered {acked} after "
              f"{(time.monotonic() - started) * 1000:.0f} ms")
        we.replicaof("NO", "ONE")
        started = time.monotonic()
        differ, seen = compare(red, we)
        print(f"compared {seen} keys (redis {red.dbsize()}, wetask {we.dbsize()}) in "
              f"{time.monotonic() - started:.1f} s: {differ} differ")
        if differ or red.dbsize() != we.dbsize() or acked != 1:
            raise SystemExit(1)
    finally:
        red_proc.terminate()
        red_proc.wait(timeout=30)
        if we_proc:
            we_proc.terminate()
            we_proc.wait(timeout=60)
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
