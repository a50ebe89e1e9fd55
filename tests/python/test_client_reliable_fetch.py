"""The reliable-fetch pattern (LREM + DEL + LMOVE in one pipeline per job) from redis-py
worker processes: one is killed with SIGKILL midway, its in-flight job is recovered from
its processing list, and every job ends up done with the right result."""

import os
import signal
import subprocess
import sys
import time

import redis

CLIENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "clients")


def worker(port, name, *extra):
    return subprocess.Popen([sys.executable, os.path.join(CLIENTS, "reliable_worker.py"),
                             str(port), name, *extra])


def test_reliable_fetch_survives_a_killed_worker(server):
    r = redis.Redis(port=server.port)
    r.flushall()
    for i in range(100):
        r.set(f"job:{i}", i)
        r.lpush("queue", i)
    # w1 stalls in its first job; w2 and w3 work normally.
    workers = {"w1": worker(server.port, "w1", "hang")}
    deadline = time.time() + 30
    while time.time() < deadline and r.llen("processing:w1") == 0:
        time.sleep(0.005)
    workers.update({name: worker(server.port, name) for name in ("w2", "w3")})
    # Kill w1 in the middle of its job.
    workers["w1"].send_signal(signal.SIGKILL)
    workers["w1"].wait()
    in_flight = r.lrange("processing:w1", 0, -1)
    assert len(in_flight) == 1
    # Recovery: the dead worker's jobs go back to the queue.
    while r.lmove("processing:w1", "queue", "RIGHT", "RIGHT") is not None:
        pass
    for name in ("w2", "w3"):
        assert workers[name].wait(timeout=60) == 0
    results = {int(k): int(v) for k, v in r.hgetall("results").items()}
    assert results == {i: 2 * i for i in range(100)}
    assert int(in_flight[0]) in results, "the recovered job ran"
    assert r.llen("queue") == 0
    assert r.llen("processing:w2") == r.llen("processing:w3") == 0
    assert r.exists("processing:w1") == 0
    assert not r.keys("job:*"), "every finished job was retired"
