"""Node's cluster clients against one WeTask node in cluster mode (docs/CLUSTER.md) on 2
and 4 shards, seeded with the shared port: ioredis's `Redis.Cluster` (the release BullMQ
pins, tests/node) and node-redis's `createCluster` (newest, tests/node-current), each with
20 random key names (tests/node/cluster_test.js)."""

import json
import os
import subprocess

import pytest

from conftest import Server

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODE = os.path.join(TESTS, "node")
HOME = os.path.join(TESTS, "node-current")


@pytest.mark.parametrize("shards", [2, 4])
def test_node_cluster_clients(shards):
    assert os.path.isdir(os.path.join(NODE, "node_modules", "ioredis")), \
        "ioredis missing in tests/node: scripts/setup.sh installs it"
    assert os.path.isdir(os.path.join(HOME, "node_modules", "redis")), \
        "node-redis missing in tests/node-current: scripts/setup.sh installs it"
    srv = Server("--shards", str(shards), "--cluster-enabled", "yes")
    try:
        env = dict(os.environ, WETASK_PORT=str(srv.port), NODE_REDIS_HOME=HOME, WETASK_NAMES="20")
        run = subprocess.run(["node", "cluster_test.js"], env=env, cwd=NODE,
                             capture_output=True, text=True, timeout=180)
        assert run.returncode == 0, run.stderr[-4000:]
        report = json.loads(run.stdout.strip().splitlines()[-1])
        assert report == {"names": 20, "ioredisMasters": shards, "nodeRedisMasters": shards}
    finally:
        srv.stop()
