"""BullMQ (Node, from npm; tests/node) on WeTask: a Worker runs 100 jobs and one that
fails once and succeeds on retry, every return value checked. BullMQ's Lua scripts build
some key names at run time: on two shards the server learns those scripts need every
shard (see server/src/scripting.rs)."""

import json
import os
import subprocess

import pytest

from conftest import Server

NODE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "node")


def test_bullmq_worker_runs_100_jobs(server):
    env = dict(os.environ, WETASK_PORT=str(server.port))
    run = subprocess.run(["node", "bullmq_test.js"], env=env, cwd=NODE, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-4000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["results"] == [i + 1000 for i in range(100)]
    assert report["flakyResult"] == 70
    assert report["flakyAttempts"] == 2
    assert report["counts"]["completed"] == 101
    assert report["counts"]["failed"] == 0
    stats = subprocess.run(["redis-cli", "-p", str(server.port), "INFO", "commandstats"],
                           capture_output=True, text=True, timeout=10).stdout
    failed = [line for line in stats.splitlines()
              if "failed_calls=" in line and not line.endswith("failed_calls=0")]
    assert not failed, failed


@pytest.mark.parametrize("shards", ["2", "4"])
def test_bullmq_obliterate_add_work_on_50_random_queues(shards):
    """Issue 15: which queue names broke obliterate depended on where their keys hashed."""
    srv = Server("--shards", shards)
    try:
        env = dict(os.environ, WETASK_PORT=str(srv.port), WETASK_QUEUES="50")
        run = subprocess.run(["node", "bullmq_obliterate_test.js"], env=env, cwd=NODE,
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-4000:]
        report = json.loads(run.stdout.strip().splitlines()[-1])
        assert report == {"queues": 50, "completed": 150}
        stats = subprocess.run(["redis-cli", "-p", str(srv.port), "INFO", "commandstats"],
                               capture_output=True, text=True, timeout=10).stdout
        failed = [line for line in stats.splitlines()
                  if "failed_calls=" in line and not line.endswith("failed_calls=0")]
        assert not failed, failed
    finally:
        srv.stop()
