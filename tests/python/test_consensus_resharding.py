"""Consensus mode with several shards: slots move between groups (`RAFT MOVESLOTS`,
docs/REPLICATION.md "Moving slots between groups"). Group 0's log holds the slot map; the
source group freezes the slots in its log, the target copies their keys and queues into its
own, group 0's map then names the target, and the source drops them.

Checked: under a writer, no acknowledged write is lost across two moves (one there, part of
it back); keys, queued tasks and a worker's lease arrive; CLUSTER SLOTS and cluster clients
follow the map; the source keeps none of the moved keys; every member of each group holds
the same copy; a move's leader killed mid-way is taken over.

Every wait polls a signal (RAFT SLOTS, a reply) with a deadline; no sleep is trusted."""

import random

import pytest
import redis
from redis.cluster import RedisCluster

from conftest import DEADLINE_S, wait_for
from test_consensus import Group, assert_none_lost, start_writer, value

# The first half of group 1's range (8192-16383 with two shards).
FIRST, LAST = 8192, 12287


def slot_of(client, name):
    return int(client.execute_command("CLUSTER", "KEYSLOT", name))


def slot_map(node):
    return [tuple(r) for r in node.client().execute_command("RAFT", "SLOTS")]


def wait_for_map(g, ranges):
    """Every node routes by `ranges` and no move is under way."""
    def settled():
        return all(slot_map(n) == ranges and n.client().execute_command("RAFT", "MOVING") is None
                   for n in g.nodes if n.alive())
    wait_for(settled, f"every node's slot map to read {ranges}")


def keys_of_group(node, shard):
    return set(node.client(port=node.shard_port(shard)).keys("*"))


def test_slots_move_between_groups_under_a_writer_and_nothing_acknowledged_is_lost():
    g = Group(shards=2)
    try:
        l0 = g.leader(shard=0)
        meta = l0.client(port=l0.shard_port(0))
        assert slot_map(l0) == [(0, 8191, 0), (8192, 16383, 1)]
        # Refusals: on another shard's port, slots of two groups, a group that does not
        # exist, slots the group serves already.
        l1 = g.leader(shard=1)
        with pytest.raises(redis.ResponseError, match="group 0 holds the slot map"):
            l1.client(port=l1.shard_port(1)).execute_command("RAFT", "MOVESLOTS", FIRST, LAST, 0)
        with pytest.raises(redis.ResponseError, match="served by one group"):
            meta.execute_command("RAFT", "MOVESLOTS", 8000, 8300, 0)
        with pytest.raises(redis.ResponseError, match="no group 2"):
            meta.execute_command("RAFT", "MOVESLOTS", FIRST, LAST, 2)
        with pytest.raises(redis.ResponseError, match="serves these slots already"):
            meta.execute_command("RAFT", "MOVESLOTS", 0, 10, 0)

        rc = RedisCluster(host=l0.host, port=l0.shard_port(0), decode_responses=True)
        names = [f"k:{random.randrange(10**12)}:{i}" for i in range(600)]
        for i, name in enumerate(names):
            assert rc.set(name, value(i)) is True
        moving = [n for n in names if FIRST <= slot_of(meta, n) <= LAST]
        assert moving, "some keys live in the slots that move"
        # One slot with many keys (a hash tag's, as job queues use): the target copies it
        # a batch of keys per Raft entry.
        tag = next(t for t in (f"crowd{i}" for i in range(1000)) if FIRST <= slot_of(meta, t) < 10000)
        crowd = [f"{{{tag}}}:{i}" for i in range(3000)]
        owner = redis.Redis(host=l1.host, port=l1.shard_port(1), decode_responses=True)
        for start in range(0, len(crowd), 500):
            pipe = owner.pipeline(transaction=False)
            for key in crowd[start:start + 500]:
                pipe.set(key, key)
            assert all(r is True for r in pipe.execute())
        queues = [f"q:{random.randrange(10**12)}:{i}" for i in range(16)]
        submitted = {}
        for i in range(64):
            q = queues[i % len(queues)]
            submitted[rc.execute_command("TASK.SUBMIT", q, f"job-{i}")] = q
        moving_queues = [q for q in queues if FIRST <= slot_of(meta, q) <= LAST]
        assert moving_queues, "some queues live in the slots that move"
        # A worker leases a task of a moving queue before the move and acks it after.
        leased_q = moving_queues[0]
        worker = redis.Redis(host=l1.host, port=l1.shard_port(1), decode_responses=True)
        assert worker.execute_command("TASK.WORKER", "mover-w1", "GRACE", 60000) == "OK"
        [(leased_id, _, _, _)] = worker.execute_command("TASK.FETCH", leased_q, "LEASE", 60000)

        acked, stop, thread = start_writer(g)
        wait_for(lambda: len(acked) > 50, "the writer's first acknowledgements")
        assert meta.execute_command("RAFT", "MOVESLOTS", FIRST, LAST, 0) == "OK"
        wait_for_map(g, [(0, 12287, 0), (12288, 16383, 1)])
        before = len(acked)
        wait_for(lambda: len(acked) > before + 50, "writes after the first move")

        # The new owner acks the worker's lease (the lease carried over with its worker),
        # on a new connection, perhaps to another node; the old one, redirected, closes
        # (GRACE: a worker's registry is its node's, and the old node's would otherwise
        # release the worker's leases at once).
        l0 = g.leader(shard=0)
        moved_worker = redis.Redis(host=l0.host, port=l0.shard_port(0), decode_responses=True)
        assert moved_worker.execute_command("TASK.WORKER", "mover-w1", "GRACE", 60000) == "OK"
        with pytest.raises(redis.exceptions.MovedError):
            worker.execute_command("TASK.ACK", leased_id)
        worker.close()
        assert moved_worker.execute_command("TASK.ACK", leased_id) == "OK"

        # Part of it goes back while the writer runs, and the source's leader (group 0's,
        # which also leads the metadata group) is killed as the move begins: the group's
        # next leader takes the move over from its log.
        back_first = 10000
        l0 = g.leader(shard=0)
        meta = l0.client(port=l0.shard_port(0))
        assert meta.execute_command("RAFT", "MOVESLOTS", back_first, LAST, 1) == "OK"
        l0.kill()
        wait_for_map(g, [(0, 9999, 0), (10000, 16383, 1)])
        l0.start()
        meta = g.leader(shard=0).client(port=g.leader(shard=0).shard_port(0))
        before = len(acked)
        wait_for(lambda: len(acked) > before + 50, "writes after the second move")
        stop.set()
        thread.join(DEADLINE_S)

        rc = RedisCluster(host=l0.host, port=l0.shard_port(0), decode_responses=True)
        got = rc.mget_nonatomic(names)
        assert got == [value(i) for i in range(len(names))]
        assert rc.mget_nonatomic(crowd) == crowd
        assert_none_lost(rc, acked)
        # Every task arrives where its queue now lives, once; the acked one is gone.
        delivered = {}
        for q in queues:
            for task_id, queue, _, _ in rc.execute_command("TASK.FETCH", q, "COUNT", 100):
                assert task_id not in delivered
                delivered[task_id] = queue
        expected = dict(submitted)
        del expected[leased_id]
        assert delivered == expected

        # The slots' keys live in their group only, and every member holds the same copy.
        for shard in range(2):
            copies = []
            for node in g.nodes:
                g.caught_up(node, shard)
                copies.append(keys_of_group(node, shard))
            assert copies[0] == copies[1] == copies[2] and copies[0], shard
        group0, group1 = keys_of_group(g.nodes[0], 0), keys_of_group(g.nodes[0], 1)
        assert not group0 & group1
        assert all(slot_of(meta, k) < 10000 for k in group0)
        assert all(slot_of(meta, k) >= 10000 for k in group1)
        # CLUSTER SLOTS names the map's ranges.
        slots = sorted((s[0], s[1]) for s in g.nodes[1].client().execute_command("CLUSTER", "SLOTS"))
        assert slots == [(0, 9999), (10000, 16383)]
        print(f"two moves under a writer: {len(acked)} writes acknowledged, 0 lost; "
              f"{len(moving)} keys, a slot of {len(crowd)} and {len(moving_queues)} queues moved")
    finally:
        g.stop()
