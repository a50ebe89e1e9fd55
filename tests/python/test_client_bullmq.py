"""BullMQ (Node, from npm) on WeTask, each test at two releases: the pinned one (tests/node)
and the newest (tests/node-current, installed by scripts/setup.sh). A Worker runs 100 jobs
and one that fails once and succeeds on retry, every return value checked; a queue's whole
lifecycle (obliterate, add, work, counts) on 50 random names. BullMQ's Lua scripts build
some key names at run time: on several shards such a script is run again holding every
shard (server/src/commands/scripting.rs)."""

import json
import os
import subprocess

import pytest

from conftest import Server

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODE = os.path.join(TESTS, "node")
RELEASES = {"pinned": NODE, "current": os.path.join(TESTS, "node-current")}


def check_100_jobs(stdout):
    """bullmq_test.js's report: every job's result, the retried one's, the counts."""
    report = json.loads(stdout.strip().splitlines()[-1])
    assert report["results"] == [i + 1000 for i in range(100)]
    assert report["flakyResult"] == 70
    assert report["flakyAttempts"] == 2
    assert report["counts"]["completed"] == 101
    assert report["counts"]["failed"] == 0


def bullmq_env(port, release):
    home = RELEASES[release]
    assert os.path.isdir(os.path.join(home, "node_modules", "bullmq")), \
        f"BullMQ missing in {home}: scripts/setup.sh installs it"
    return dict(os.environ, WETASK_PORT=str(port), BULLMQ_HOME=home)


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_bullmq_worker_runs_100_jobs(server, release):
    env = bullmq_env(server.port, release)
    run = subprocess.run(["node", "bullmq_test.js"], env=env, cwd=NODE, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-4000:]
    check_100_jobs(run.stdout)
    stats = subprocess.run(["redis-cli", "-p", str(server.port), "INFO", "commandstats"],
                           capture_output=True, text=True, timeout=10).stdout
    failed = [line for line in stats.splitlines()
              if "failed_calls=" in line and not line.endswith("failed_calls=0")]
    assert not failed, failed


@pytest.mark.parametrize("release", sorted(RELEASES))
@pytest.mark.parametrize("shards", ["2", "4"])
def test_bullmq_obliterate_add_work_on_50_random_queues(shards, release):
    """Issue 15: which queue names broke obliterate depended on where their keys hashed."""
    srv = Server("--shards", shards)
    try:
        env = dict(bullmq_env(srv.port, release), WETASK_QUEUES="50")
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
