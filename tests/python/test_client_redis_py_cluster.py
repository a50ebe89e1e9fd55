"""redis-py's RedisCluster against one WeTask node in cluster mode (docs/CLUSTER.md), on 2
and 4 shards: it discovers the shards from CLUSTER SLOTS, talks to each shard's own port,
follows MOVED, and sees every write. Random key and queue names, so that no lucky name hides
a routing bug."""

import random
import string

import pytest
from redis.cluster import RedisCluster
from redis.exceptions import MovedError

from conftest import Server


@pytest.fixture(scope="module", params=["2", "4"], ids=["shards2", "shards4"])
def node(request):
    srv = Server("--shards", request.param, "--cluster-enabled", "yes")
    yield srv, int(request.param)
    srv.stop()


def names(rng, prefix, count):
    """`count` distinct random names."""
    out = set()
    while len(out) < count:
        out.add(prefix + "".join(rng.choices(string.ascii_letters + string.digits, k=rng.randint(1, 12))))
    return sorted(out)


def test_a_cluster_client_sees_every_shard_and_every_write(node):
    srv, shards = node
    rng = random.Random(35 + shards)
    rc = RedisCluster(host="127.0.0.1", port=srv.port)
    try:
        primaries = rc.get_primaries()
        assert len(primaries) == shards
        # The shards' own ports, not the shared one.
        assert srv.port not in {p.port for p in primaries}
        keys = names(rng, "k:", 300)
        for key in keys:
            assert rc.set(key, key[::-1])
        assert all(rc.get(key) == key[::-1].encode() for key in keys)
        pipe = rc.pipeline()
        for key in keys:
            pipe.incr("n:" + key)
        assert pipe.execute() == [1] * len(keys)
        # Every key went where its slot lives: each shard holds only its own slots.
        for primary in primaries:
            client = primary.redis_connection
            for key in client.scan_iter(count=1000):
                slot = rc.keyslot(key)
                assert rc.nodes_manager.get_node_from_slot(slot).port == primary.port
        assert sum(p.redis_connection.dbsize() for p in primaries) >= 2 * len(keys)
    finally:
        rc.close()


def test_task_commands_route_by_their_queue_slot(node):
    srv, shards = node
    rng = random.Random(350 + shards)
    rc = RedisCluster(host="127.0.0.1", port=srv.port)
    try:
        for queue in names(rng, "q:", 20):
            target = rc.get_node_from_key(queue)
            task_id = rc.execute_command("TASK.SUBMIT", queue, "payload", target_nodes=target)
            fetched = rc.execute_command("TASK.FETCH", queue, target_nodes=target)
            assert len(fetched) == 1
            # The wrong shard port moves it; redis-py's own connection shows the raw reply.
            others = [p for p in rc.get_primaries() if p.port != target.port]
            with pytest.raises(MovedError) as moved:
                others[0].redis_connection.execute_command("TASK.SUBMIT", queue, "x")
            assert moved.value.slot_id == rc.keyslot(queue)
            assert moved.value.node_addr == ("127.0.0.1", target.port)
            assert task_id
    finally:
        rc.close()
