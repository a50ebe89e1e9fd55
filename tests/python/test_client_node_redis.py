"""node-redis (the `redis` package, at its newest release: tests/node-current, installed by
scripts/setup.sh) on WeTask with 20 random key names on 2 and 4 shards: typed commands, a
MULTI across shards, pipelined calls, EVAL, pub/sub, and its client-side cache (RESP3 with
CLIENT TRACKING) dropping a value another client wrote."""

import json
import os
import subprocess

import pytest

from conftest import Server

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODE = os.path.join(TESTS, "node")
HOME = os.path.join(TESTS, "node-current")


@pytest.mark.parametrize("shards", ["2", "4"])
def test_node_redis_newest_release(shards):
    assert os.path.isdir(os.path.join(HOME, "node_modules", "redis")), \
        "node-redis missing in tests/node-current: scripts/setup.sh installs it"
    srv = Server("--shards", shards)
    try:
        env = dict(os.environ, WETASK_PORT=str(srv.port), NODE_REDIS_HOME=HOME, WETASK_NAMES="20")
        run = subprocess.run(["node", "node_redis_test.js"], env=env, cwd=NODE,
                             capture_output=True, text=True, timeout=180)
        assert run.returncode == 0, run.stderr[-4000:]
        report = json.loads(run.stdout.strip().splitlines()[-1])
        assert report == {"names": 20, "invalidated": 20, "cacheHits": True}
    finally:
        srv.stop()
