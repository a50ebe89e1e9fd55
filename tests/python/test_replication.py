"""REPLICAOF between WeTask nodes (docs/REPLICATION.md): a full sync of keys and tasks in
every state, the stream that follows, WAIT, ROLE and INFO, read-only replicas, a partial
resync after the link drops, promotion after the primary is killed, a replica restarted,
and the refusals (shard counts that differ, a primary without a journal).

Every wait polls for a signal (INFO, WAIT's count, a key) with a deadline; nothing sleeps
and hopes. Key and queue names are random, so that on 2 shards they land on both."""

import os
import random
import signal
import socket
import string
import subprocess
import threading
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from conftest import BINARY, DEADLINE_S, Server, failpoint, wait_for
from test_differential import free_port
from test_redis72 import error_of



def names(prefix, count):
    tag = "".join(random.choice(string.ascii_lowercase) for _ in range(6))
    return [f"{prefix}:{tag}:{i}" for i in range(count)]


def info(client, section="replication"):
    return client.info(section)


def link_up(client):
    return info(client).get("master_link_status") == "up"


def state_of(client, keys):
    """Each key's type and value (what a replica must hold)."""
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.type(key)
    types = pipe.execute()
    pipe = client.pipeline(transaction=False)
    for key, kind in zip(keys, types):
        {
            "string": lambda k: pipe.get(k),
            "list": lambda k: pipe.lrange(k, 0, -1),
            "hash": lambda k: pipe.hgetall(k),
            "set": lambda k: pipe.smembers(k),
            "zset": lambda k: pipe.zrange(k, 0, -1, withscores=True),
            "none": lambda k: pipe.exists(k),
        }[kind](key)
    return list(zip(types, pipe.execute()))


def task_stats(client, queue):
    flat = client.execute_command("TASK.STATS", queue)
    stats = flat if isinstance(flat, dict) else dict(zip(flat[0::2], flat[1::2]))
    return {k: stats[k] for k in ("queued", "scheduled", "leased", "dead", "submitted")}


def fill(client, keys):
    pipe = client.pipeline(transaction=False)
    for i, key in enumerate(keys):
        kind = i % 5
        if kind == 0:
            pipe.set(key, f"v{i}")
        elif kind == 1:
            pipe.rpush(key, "a", "b", str(i))
        elif kind == 2:
            pipe.hset(key, mapping={"f": i, "g": "x"})
        elif kind == 3:
            pipe.sadd(key, "m1", f"m{i}")
        else:
            pipe.zadd(key, {"a": 1, f"z{i}": i})
    pipe.execute()


def linked(pair):
    """Clients of the primary and of the replica, once the replica follows the primary."""
    primary, replica = pair
    p = redis.Redis(port=primary.port, decode_responses=True)
    r = redis.Redis(port=replica.port, decode_responses=True)
    assert r.replicaof("127.0.0.1", primary.port)
    wait_for(lambda: link_up(r), "the replica's link")
    return p, r


@pytest.fixture(params=["1", "2"], ids=["shards1", "shards2"])
def pair(request):
    """A primary and a replica of it, with `shards` shards each."""
    primary = Server("--shards", request.param)
    replica = Server("--shards", request.param)
    yield primary, replica
    for srv in (replica, primary):
        srv.stop()


def test_full_sync_then_the_stream(pair):
    primary, replica = pair
    p = redis.Redis(port=primary.port, decode_responses=True)
    r = redis.Redis(port=replica.port, decode_responses=True)
    keys = names("k", 500)
    fill(p, keys)
    queue = names("q", 1)[0]
    for i in range(6):
        p.execute_command("TASK.SUBMIT", queue, f"job{i}")
    p.execute_command("TASK.SUBMIT", queue, "later", "DELAY", 600000)
    # A leased task: its connection stays open, so the lease stays.
    worker = redis.Redis(port=primary.port, decode_responses=True)
    leased = worker.execute_command("TASK.FETCH", queue, "COUNT", 1, "LEASE", 600000)
    assert leased
    r.set("stale", "gone after the sync")

    assert r.replicaof("127.0.0.1", primary.port)
    wait_for(lambda: link_up(r), "the replica's link")
    assert state_of(r, keys) == state_of(p, keys)
    assert task_stats(r, queue) == task_stats(p, queue) == {
        "queued": 5, "scheduled": 1, "leased": 1, "dead": 0, "submitted": 7}
    assert r.exists("stale") == 0

    # The stream: writes after the sync, WAIT counting the replica.
    more = names("m", 200)
    fill(p, more)
    p.incr(keys[0] + ":n")
    assert p.execute_command("WAIT", 1, 5000) == 1
    assert state_of(r, more) == state_of(p, more)
    assert r.get(keys[0] + ":n") == "1"
    worker.execute_command("TASK.ACK", leased[0][0])
    assert p.execute_command("WAIT", 1, 5000) == 1
    assert task_stats(r, queue)["leased"] == 0

    role = r.execute_command("ROLE")
    assert role[:4] == ["slave", "127.0.0.1", primary.port, "connected"]
    role = p.execute_command("ROLE")
    assert role[0] == "master" and len(role[2]) == 1
    assert info(p)["connected_slaves"] == 1
    assert info(p)["slave0"]["state"] == "online"


def test_a_replica_refuses_writes_unless_told_otherwise(pair):
    primary, replica = pair
    r = redis.Redis(port=replica.port, decode_responses=True)
    r.replicaof("127.0.0.1", primary.port)
    wait_for(lambda: link_up(r), "the replica's link")
    for command in (("SET", "x", "1"), ("TASK.SUBMIT", "q", "p"), ("DEL", "x")):
        with pytest.raises(redis.exceptions.ReadOnlyError):
            r.execute_command(*command)
    assert r.execute_command("REPLICAOF", "127.0.0.1", primary.port) == "OK Already connected to specified master"
    assert r.config_get("replica-read-only") == {"replica-read-only": "yes"}
    r.config_set("replica-read-only", "no")
    assert r.set("local", "1")
    with pytest.raises(redis.ResponseError, match="WAIT cannot be used with replica"):
        r.execute_command("WAIT", 1, 10)


def test_wait_counts_only_replicas_that_have_the_writes(pair):
    primary, replica = pair
    p = redis.Redis(port=primary.port, decode_responses=True)
    p.set("a", "1")
    started = time.monotonic()
    assert p.execute_command("WAIT", 1, 200) == 0
    assert time.monotonic() - started >= 0.15
    assert p.execute_command("WAIT", 0, 0) == 0
    r = redis.Redis(port=replica.port, decode_responses=True)
    r.replicaof("127.0.0.1", primary.port)
    wait_for(lambda: link_up(r), "the replica's link")
    p.set("b", "2")
    assert p.execute_command("WAIT", 1, 5000) == 1
    assert r.get("b") == "2"
    # Asking for more replicas than there are waits out the time-out and counts the one.
    assert p.execute_command("WAIT", 2, 100) == 1


def test_a_dropped_link_resumes_where_it_stopped(pair):
    p, r = linked(pair)
    p.set("before", "1")
    assert p.execute_command("WAIT", 1, 5000) == 1
    full = info(p, "stats")["sync_full"]
    assert full >= 1
    assert p.execute_command("CLIENT", "KILL", "TYPE", "replica") == 1
    keys = names("during", 100)
    fill(p, keys)
    wait_for(lambda: p.execute_command("WAIT", 1, 100) == 1, "the replica back")
    assert state_of(r, keys) == state_of(p, keys)
    stats = info(p, "stats")
    assert stats["sync_partial_ok"] >= 1
    assert stats["sync_full"] == full, "the replica synced in full again"


def test_a_compaction_on_the_primary_does_not_lose_the_stream(pair):
    p, r = linked(pair)
    keys = names("c", 300)
    for chunk in range(3):
        fill(p, keys[chunk * 100:(chunk + 1) * 100])
        p.bgrewriteaof()
    p.set("last", "1")
    assert p.execute_command("WAIT", 1, 5000) == 1
    assert state_of(r, keys + ["last"]) == state_of(p, keys + ["last"])


def test_promotion_after_the_primary_dies_keeps_its_tasks(pair):
    primary, _ = pair
    p, r = linked(pair)
    queues = names("jobs", 3)
    for queue in queues:
        for i in range(4):
            p.execute_command("TASK.SUBMIT", queue, f"{queue}-{i}")
    worker = redis.Redis(port=primary.port, decode_responses=True)
    held = worker.execute_command("TASK.FETCH", queues[0], "COUNT", 1, "LEASE", 600000)
    # A dead task too: failed with no retry left.
    doomed = worker.execute_command("TASK.FETCH", queues[2], "COUNT", 1)
    worker.execute_command("TASK.FAIL", doomed[0][0], "ERROR", "boom", "NORETRY")
    assert p.execute_command("WAIT", 1, 5000) == 1
    before = {q: task_stats(p, q) for q in queues}
    primary.proc.send_signal(signal.SIGKILL)
    primary.proc.wait(timeout=10)
    wait_for(lambda: link_up(r) is False, "the link to go down")
    assert r.replicaof("NO", "ONE")
    assert r.execute_command("ROLE")[0] == "master"
    assert {q: task_stats(r, q) for q in queues} == before
    assert before[queues[0]]["leased"] == 1
    assert before[queues[2]]["dead"] == 1
    # The promoted node serves writes, and its workers take the queued tasks.
    got = r.execute_command("TASK.FETCH", queues[1], "COUNT", 10)
    assert len(got) == 4
    for task in got:
        r.execute_command("TASK.ACK", task[0])
    assert task_stats(r, queues[1])["queued"] == 0
    assert held[0][0] not in [t[0] for t in got]


def test_a_replica_started_with_replicaof_survives_its_own_restart(tmp_path):
    primary = Server("--shards", "2")
    replica = None
    try:
        p = redis.Redis(port=primary.port, decode_responses=True)
        keys = names("s", 200)
        fill(p, keys)
        replica = Server("--shards", "2", "--replicaof", f"127.0.0.1 {primary.port}")
        r = redis.Redis(port=replica.port, decode_responses=True)
        wait_for(lambda: link_up(r), "the replica's link")
        assert state_of(r, keys) == state_of(p, keys)
        data = replica.dir
        replica.proc.send_signal(signal.SIGKILL)
        replica.proc.wait(timeout=10)
        p.set("while-down", "1")
        # The same data directory, started again: it loads its journal, then follows.
        # (A new free port: the old listener may outlive the kill for a few seconds.)
        replica = Server("--shards", "2", "--replicaof", f"127.0.0.1 {primary.port}",
                         data_dir=data)
        r = redis.Redis(port=replica.port, decode_responses=True)
        wait_for(lambda: link_up(r), "the restarted replica's link")
        assert p.execute_command("WAIT", 1, 5000) == 1
        assert state_of(r, keys + ["while-down"]) == state_of(p, keys + ["while-down"])
    finally:
        if replica:
            replica.stop()
        primary.stop()


def port_free(port):
    """Whether a listener could bind 127.0.0.1:`port` now (as the server's does)."""
    probe = socket.socket()
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        probe.close()


@pytest.mark.parametrize("shards", ["1", "2"])
def test_a_replica_of_a_replica_follows_the_chain_and_its_promotion(shards):
    """Chained replication, as Redis has it: C follows B, which follows A. C gets A's keys,
    tasks and function libraries through B's journal (B logs what it applies, its full
    sync included); when B is promoted, C goes on with B's own writes."""
    nodes = [Server("--shards", shards) for _ in range(3)]
    try:
        a, b, c = (redis.Redis(port=n.port, decode_responses=True) for n in nodes)
        keys = names("chain", 300)
        fill(a, keys)
        queue = names("chainq", 1)[0]
        for i in range(5):
            a.execute_command("TASK.SUBMIT", queue, f"job{i}")
        a.function_load(library("chained", "f_chained"))
        assert b.replicaof("127.0.0.1", nodes[0].port)
        wait_for(lambda: link_up(b), "B's link to A")
        assert c.replicaof("127.0.0.1", nodes[1].port)
        wait_for(lambda: link_up(c), "C's link to B")
        more = names("later", 100)
        fill(a, more)
        assert a.execute_command("WAIT", 1, 5000) == 1
        everything = keys + more
        wait_for(lambda: state_of(c, everything) == state_of(a, everything),
                 "A's writes through B on C")
        assert task_stats(c, queue) == task_stats(a, queue)
        wait_for(lambda: libraries(c) == ["chained"], "A's libraries on C")
        assert c.execute_command("ROLE")[:2] == ["slave", "127.0.0.1"]
        assert info(b)["connected_slaves"] == 1

        assert b.replicaof("NO", "ONE")
        b.set("from-b", "1")
        assert b.execute_command("WAIT", 1, 5000) == 1
        assert c.get("from-b") == "1"
        assert state_of(c, everything) == state_of(b, everything)
    finally:
        for n in nodes:
            n.stop()


def online(client):
    """Every replica of `client`'s node streams every shard past its full sync."""
    slaves = [v for k, v in info(client).items() if k.startswith("slave") and isinstance(v, dict)]
    return bool(slaves) and all(s["state"] == "online" for s in slaves)


def subscribed(port, channel, count):
    """`count` connections to `port` subscribed to `channel` (landing on every shard) and
    one to the pattern of its prefix."""
    subscribers = []
    for _ in range(count):
        pubsub = redis.Redis(port=port, decode_responses=True).pubsub()
        pubsub.subscribe(channel)
        assert pubsub.get_message(timeout=DEADLINE_S)["type"] == "subscribe"
        subscribers.append(pubsub)
    patterned = redis.Redis(port=port, decode_responses=True).pubsub()
    patterned.psubscribe(channel.split(":")[0] + ":*")
    assert patterned.get_message(timeout=DEADLINE_S)["type"] == "psubscribe"
    return subscribers + [patterned]


def collect(pubsub, count):
    """The data of the messages `pubsub` receives: waits (with a deadline) for `count`,
    then a moment for any more that should not come."""
    got = []
    end = time.monotonic() + DEADLINE_S
    quiet_until = None
    while time.monotonic() < end and (quiet_until is None or time.monotonic() < quiet_until):
        message = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.05)
        if message:
            got.append(message["data"])
        if len(got) >= count and quiet_until is None:
            quiet_until = time.monotonic() + 0.3
    return got


@pytest.mark.parametrize("shards", ["1", "2"])
def test_publish_on_a_primary_reaches_the_subscribers_of_its_replicas(shards):
    """As Redis's replication stream carries a PUBLISH, a message published on a primary
    reaches the subscribers of its replica, and of the replica's replica, once each, in
    order, patterns included; the primary's count is its own subscribers. Before, a
    replica's subscribers heard nothing."""
    nodes = [Server("--shards", shards) for _ in range(3)]
    try:
        a, b, c = (redis.Redis(port=n.port, decode_responses=True) for n in nodes)
        assert b.replicaof("127.0.0.1", nodes[0].port)
        assert c.replicaof("127.0.0.1", nodes[1].port)
        wait_for(lambda: link_up(b) and link_up(c) and online(a) and online(b), "the chain")
        channel = names("news", 1)[0]
        listeners = subscribed(nodes[1].port, channel, 4) + subscribed(nodes[2].port, channel, 4)
        sent = [f"m{i}" for i in range(20)]
        for message in sent:
            assert a.publish(channel, message) == 0
        for pubsub in listeners:
            assert collect(pubsub, len(sent)) == sent
    finally:
        for n in nodes:
            n.stop()


def exit_cleanly(srv):
    """SIGTERM, and a clean exit (its data directory kept, unlike `Server.stop`)."""
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.proc.wait(timeout=DEADLINE_S) == 0


def test_a_replica_holding_part_of_a_full_sync_answers_loading():
    """A replica whose data is part of its primary's snapshot answers LOADING, as Redis does
    while it loads its primary's RDB: reads would see a partial dataset, and REPLICAOF NO
    ONE would promote one. Made certain with a crash point: the replica dies once its
    journal holds the start of a full sync and one part of it; restarted while the primary
    is stopped, its data is that part. INFO and REPLICAOF to another primary still run;
    once the primary resumes and the sync ends, everything does."""
    primary = Server("--shards", "2")
    replica = None
    try:
        p = redis.Redis(port=primary.port, decode_responses=True)
        # Each shard's snapshot spans several parts of 1 MiB (and turns of the replica).
        keys = names("big", 8000)
        for start in range(0, len(keys), 1000):
            pipe = p.pipeline(transaction=False)
            for key in keys[start:start + 1000]:
                pipe.set(key, key * 40)
            assert all(pipe.execute())
        # A full sync sends the newest snapshot, then the journal after it: the snapshot
        # must hold the keys for the replica to load parts of it.
        rewrites = int(p.info("persistence")["aof_rewrites"])
        p.bgrewriteaof()
        wait_for(lambda: int(p.info("persistence")["aof_rewrites"]) > rewrites
                 and p.info("persistence")["aof_rewrite_in_progress"] == 0, "the snapshot")
        with failpoint("replica-mid-full-sync"):
            replica = Server("--shards", "2", "--replicaof", f"127.0.0.1 {primary.port}")
        assert replica.proc.wait(timeout=DEADLINE_S) == 137, "the crash point was not reached"
        primary.proc.send_signal(signal.SIGSTOP)
        try:
            replica = Server("--shards", "2", "--replicaof", f"127.0.0.1 {primary.port}",
                             data_dir=replica.dir)
            # No retries: redis-py retries LOADING for seconds by default.
            r = redis.Redis(port=replica.port, decode_responses=True,
                            retry=Retry(NoBackoff(), 0))
            for command in (("GET", keys[0]), ("DBSIZE",), ("PING",), ("REPLICAOF", "NO", "ONE")):
                with pytest.raises(redis.exceptions.BusyLoadingError):
                    r.execute_command(*command)
            assert r.info("replication")["role"] == "slave"
            assert r.info("persistence")["loading"] == 1
            assert r.config_get("appendfsync") == {"appendfsync": "everysec"}
        finally:
            primary.proc.send_signal(signal.SIGCONT)
        wait_for(lambda: link_up(r) and p.execute_command("WAIT", 1, 100) == 1, "the full sync")
        assert r.dbsize() == p.dbsize()
        assert state_of(r, keys[::997]) == state_of(p, keys[::997])
        assert r.execute_command("REPLICAOF", "NO", "ONE") == "OK"
    finally:
        if replica:
            replica.stop()
        primary.stop()


def test_clean_restarts_continue_the_stream_and_a_crash_syncs_in_full():
    """As Redis keeps its replication id and offset across a restart: after a clean exit a
    replica continues from where its shards were, and the replicas of a primary that exited
    cleanly continue from its journal (partial resyncs, no full one); a primary killed with
    -9 vouches for nothing (its journal may have lost what it streamed), so its replica
    syncs in full. The data match after each."""
    primary = Server("--shards", "2")
    replica = None
    try:
        port = primary.port
        p = redis.Redis(port=port, decode_responses=True)
        keys = names("resume", 200)
        fill(p, keys)
        replica = Server("--shards", "2", "--replicaof", f"127.0.0.1 {port}")
        wait_for(lambda: link_up(redis.Redis(port=replica.port, decode_responses=True)),
                 "the replica's link")
        assert p.execute_command("WAIT", 1, 5000) == 1
        full = info(p, "stats")["sync_full"]
        assert full == 2, "one full sync per shard"

        # The replica exits cleanly; the primary takes writes; the replica comes back.
        exit_cleanly(replica)
        more = names("down", 50)
        fill(p, more)
        replica = Server("--shards", "2", "--replicaof", f"127.0.0.1 {port}",
                         data_dir=replica.dir)
        r = redis.Redis(port=replica.port, decode_responses=True)
        wait_for(lambda: link_up(r) and p.execute_command("WAIT", 1, 100) == 1,
                 "the restarted replica's link")
        stats = info(p, "stats")
        assert stats["sync_full"] == full, "the replica synced in full again"
        assert stats["sync_partial_ok"] >= 2
        assert state_of(r, keys + more) == state_of(p, keys + more)

        # The primary exits cleanly and starts again on its data and its port.
        exit_cleanly(primary)
        primary = Server("--shards", "2", "--port", str(port), data_dir=primary.dir)
        p = redis.Redis(port=port, decode_responses=True)
        after = names("after", 50)
        fill(p, after)
        wait_for(lambda: p.execute_command("WAIT", 1, 100) == 1, "the replica back")
        stats = info(p, "stats")
        assert (stats["sync_full"], stats["sync_partial_ok"]) == (0, 2), stats
        assert state_of(r, keys + more + after) == state_of(p, keys + more + after)

        # Killed, it starts with a new run id: a full sync. (Its listener can outlive the
        # kill for a moment, while io_uring's requests are torn down: the port is waited
        # for.)
        primary.proc.kill()
        primary.proc.wait()
        wait_for(lambda: port_free(port), "the killed primary's port")
        primary = Server("--shards", "2", "--port", str(port), data_dir=primary.dir)
        p = redis.Redis(port=port, decode_responses=True)
        last = names("killed", 50)
        fill(p, last)
        wait_for(lambda: p.execute_command("WAIT", 1, 100) == 1, "the replica back")
        assert info(p, "stats")["sync_full"] == 2
        everything = keys + more + after + last
        assert state_of(r, everything) == state_of(p, everything)
    finally:
        if replica:
            replica.stop()
        primary.stop()


def test_refusals_are_clear():
    two = Server("--shards", "2")
    one = Server("--shards", "1")
    bare = Server("--shards", "1", "--appendonly", "no")
    try:
        r = redis.Redis(port=one.port, decode_responses=True)
        r.replicaof("127.0.0.1", two.port)
        reason = wait_for(lambda: info(r).get("master_link_down_reason"), "a reason")
        assert "--shards 2" in reason
        r.replicaof("127.0.0.1", bare.port)
        wait_for(lambda: "appendonly yes" in str(info(r).get("master_link_down_reason")),
                 "the journal reason")
        with pytest.raises(redis.ResponseError, match="Invalid master port"):
            r.execute_command("REPLICAOF", "127.0.0.1", "99999")
        with pytest.raises(redis.ResponseError, match="Unrecognized REPLCONF option"):
            r.execute_command("REPLCONF", "bogus", "1")
        assert r.replicaof("NO", "ONE")
        assert r.set("mine", "1")
    finally:
        for srv in (bare, one, two):
            srv.stop()


def test_cross_shard_operations_time_and_expiry_replicate(pair):
    p, r = linked(pair)
    a, b, c, d = names("x", 4)
    p.mset({a: "1", b: "2"})
    p.rename(a, c)
    p.rpush(b + ":l", "x", "y")
    p.lmove(b + ":l", d, "LEFT", "RIGHT")
    tx = p.pipeline(transaction=True)
    tx.incr(b)
    tx.set(a, "again")
    tx.sadd(d + ":s", "m")
    tx.execute()
    # A cross-shard operation's part shows on the replica as soon as WAIT counts it (its
    # end marker is journaled when the lock goes, not with the shard's next write).
    assert p.execute_command("WAIT", 1, 5000) == 1
    every = [a, b, c, d, b + ":l", d + ":s"]
    assert state_of(r, every) == state_of(p, every)
    p.set(c + ":ttl", "soon", px=300)
    p.set(c + ":kept", "later", ex=600)
    queue = names("timed", 1)[0]
    p.execute_command("TASK.SUBMIT", queue, "due soon", "DELAY", 200)
    wait_for(lambda: task_stats(p, queue)["queued"] == 1, "the delayed task due")
    wait_for(lambda: p.exists(c + ":ttl") == 0, "the key to expire")
    assert p.execute_command("WAIT", 1, 5000) == 1
    every = [a, b, c, d, b + ":l", d + ":s", c + ":ttl", c + ":kept"]
    assert state_of(r, every) == state_of(p, every)
    assert task_stats(r, queue) == task_stats(p, queue)
    assert 590 <= r.ttl(c + ":kept") <= 600


def test_a_cross_shard_operation_shows_on_the_replica_once_wait_counts_it(pair):
    """WAIT's count covers every shard's part of the operations before it: with nothing
    written after them, MULTI/EXEC, RENAME and LMOVE over random keys (so, on 2 shards,
    over both shards) read back on the replica right after WAIT."""
    p, r = linked(pair)
    for round_ in range(20):
        a, b, c, d = names(f"cs{round_}", 4)
        tx = p.pipeline(transaction=True)
        tx.set(a, round_)
        tx.set(b, round_)
        tx.rpush(c, round_)
        tx.execute()
        p.rename(a, d)
        p.lmove(c, b + ":l", "LEFT", "RIGHT")
        assert p.execute_command("WAIT", 1, 5000) == 1
        keys = [a, b, c, d, b + ":l"]
        assert state_of(r, keys) == state_of(p, keys), f"round {round_}"


def test_a_full_sync_while_a_writer_runs(pair):
    primary, replica = pair
    p = redis.Redis(port=primary.port, decode_responses=True)
    r = redis.Redis(port=replica.port, decode_responses=True)
    keys = names("big", 20000)
    for start in range(0, len(keys), 2000):
        p.mset({k: "x" * 100 for k in keys[start:start + 2000]})
    stop = threading.Event()
    written = []

    def writer():
        w = redis.Redis(port=primary.port, decode_responses=True)
        i = 0
        while not stop.is_set() and i < 50000:
            w.set(f"w:{i % 500}", i)
            written.append(i)
            i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        r.replicaof("127.0.0.1", primary.port)
        wait_for(lambda: link_up(r), "the replica's link")
        wait_for(lambda: len(written) > 2000, "the writer to write on")
    finally:
        stop.set()
        thread.join(timeout=DEADLINE_S)
    assert p.execute_command("WAIT", 1, 10000) == 1
    touched = [f"w:{i}" for i in range(500)]
    assert state_of(r, touched) == state_of(p, touched)
    assert r.dbsize() == p.dbsize()
    assert r.mget(keys[::97]) == p.mget(keys[::97])


def test_failover_loses_only_the_writes_in_flight(pair, record_property):
    """Asynchronous replicas lose, on failover, what the primary acknowledged and had not
    yet sent: measured here (a writer acknowledged writes in order until the kill), and
    what the replica has must be a prefix of what was written. The keys share a hash tag:
    each shard streams on its own, so the prefix holds per shard (docs/REPLICATION.md)."""
    primary, _ = pair
    p, r = linked(pair)
    acked = []
    stop = threading.Event()

    def writer():
        w = redis.Redis(port=primary.port, decode_responses=True)
        try:
            for i in range(200000):
                if stop.is_set():
                    return
                w.set(f"seq:{{t}}:{i}", i)
                acked.append(i)
        except redis.exceptions.ConnectionError:
            return

    thread = threading.Thread(target=writer)
    thread.start()
    wait_for(lambda: len(acked) > 1500, "writes to flow")
    # What WAIT counted is on the replica: every write acknowledged before it.
    covered = len(acked)
    assert p.execute_command("WAIT", 1, 10000) == 1
    wait_for(lambda: len(acked) > covered + 1500, "more writes")
    primary.proc.send_signal(signal.SIGKILL)
    primary.proc.wait(timeout=10)
    stop.set()
    thread.join(timeout=DEADLINE_S)
    r.replicaof("NO", "ONE")
    last = acked[-1]
    present = r.mget([f"seq:{{t}}:{i}" for i in range(last + 2)])
    have = sum(1 for v in present if v is not None)
    # A prefix: nothing missing before the last write the replica has.
    assert present[:have] == [str(i) for i in range(have)]
    assert have >= covered, "a write WAIT counted was lost"
    lost = len(acked) - have
    record_property("acked_writes", len(acked))
    record_property("lost_on_failover", max(lost, 0))
    print(f"failover: {len(acked)} writes acknowledged, {max(lost, 0)} lost")


def test_waitaof_counts_the_replicas_whose_journals_fsynced(pair):
    """WAITAOF numreplicas (unit/wait.tcl "WAITAOF replica copy ..."): a replica reports the
    position its own journal's fsync covers, under its own `appendfsync`: everysec (the
    default) within its syncer's round, never under `no`, at once under `always`."""
    p, r = linked(pair)
    fill(p, names("aof", 40))
    started = time.monotonic()
    assert p.execute_command("WAITAOF", 1, 1, 10000) == [1, 1]
    assert time.monotonic() - started < 5
    with pytest.raises(redis.ResponseError, match="WAITAOF cannot be used with replica instances"):
        r.execute_command("WAITAOF", 0, 0, 0)
    # Asking for more replicas than there are waits out the time-out and counts the one.
    assert p.execute_command("WAITAOF", 0, 2, 100)[1] == 1

    r.config_set("appendfsync", "no")
    fill(p, names("unsynced", 40))
    assert p.execute_command("WAIT", 1, 5000) == 1, "applied on the replica"
    started = time.monotonic()
    assert p.execute_command("WAITAOF", 0, 1, 300)[1] == 0
    assert time.monotonic() - started >= 0.25

    r.config_set("appendfsync", "always")
    fill(p, names("synced", 40))
    assert p.execute_command("WAITAOF", 0, 1, 5000)[1] == 1


def library(name, function, flags=""):
    flags = f", flags={{{flags}}}" if flags else ""
    return (f"#!lua name={name}\n"
            f"redis.register_function{{function_name='{function}', callback=function(keys, args) "
            f"return redis.call('SET', keys[1], args[1]) end{flags}}}\n"
            f"redis.register_function{{function_name='{function}_ro', callback=function(keys, args) "
            f"return redis.call('GET', keys[1]) end, flags={{'no-writes'}}}}")


def libraries(client):
    """The library names FUNCTION LIST shows (a flat RESP2 list of fields per library)."""
    listed = client.function_list()
    return sorted(dict(zip(entry[0::2], entry[1::2]))["library_name"] for entry in listed)


WRITE_SCRIPT = "return redis.call('SET', KEYS[1], 'from-script')"


def test_a_read_only_replica_refuses_scripts_writes_and_function_changes(pair):
    """As Redis's: on a read-only replica a script's write fails with READONLY (the replica
    would differ from its primary for good), FCALL of a function without `no-writes` does
    not start, and FUNCTION LOAD, DELETE and FLUSH are refused; reading scripts and
    `no-writes` functions run (the messages are Redis 7.0's). `replica-read-only no` lets
    them write, as in Redis. Before, every one of them ran on the replica."""
    p, r = linked(pair)
    p.function_load(library("gated", "f_gated"))
    wait_for(lambda: libraries(r) == ["gated"], "the library on the replica")
    p.set("k", "primary")
    assert p.execute_command("WAIT", 1, 5000) == 1
    assert error_of(r, "EVAL", WRITE_SCRIPT, 1, "k").startswith(
        "You can't write against a read only replica. script:")
    for command in (("FCALL", "f_gated", 1, "k", "v"),("FUNCTION", "LOAD", "REPLACE", library("gated", "f_gated")),
                    ("FUNCTION", "DELETE", "gated"), ("FUNCTION", "FLUSH"),
                    ("SET", "k", "v"), ("TASK.SUBMIT", "q", "p")):
        assert error_of(r, *command) == "You can't write against a read only replica.", command
    assert r.eval("return redis.call('GET', KEYS[1])", 1, "k") == "primary"
    assert r.execute_command("FCALL_RO", "f_gated_ro", 1, "k") == "primary"
    assert r.get("k") == "primary" and libraries(r) == ["gated"]
    assert r.config_set("replica-read-only", "no")
    assert r.eval(WRITE_SCRIPT, 1, "k") == "OK"
    assert r.get("k") == "from-script"


def test_min_replicas_to_write_refuses_writes_without_enough_good_replicas(pair):
    """`min-replicas-to-write 1` with `min-replicas-max-lag 1`, as Redis has them: with no
    replica online, or with its replica silent for over a second (SIGSTOP), the primary
    answers a write, a script's write, a function that may write, FUNCTION LOAD and a
    transaction with a write with NOREPLICAS, and serves reads; once the replica is online
    and acknowledging, writes go through. Before, the settings were accepted and did
    nothing."""
    primary, replica = pair
    p = redis.Redis(port=primary.port, decode_responses=True)
    p.function_load(library("quorum", "f_quorum"))
    p.set("k", "before")
    assert p.config_set("min-replicas-to-write", 1)
    assert p.config_set("min-replicas-max-lag", 1)
    assert p.config_get("min-slaves-to-write") == {"min-slaves-to-write": "1"}
    assert "between 0 and 2147483647" in error_of(p, "CONFIG", "SET", "min-replicas-to-write", "-1")

    def refusals():
        c = redis.Redis(port=primary.port, decode_responses=True, single_connection_client=True)
        found = [error_of(c, "SET", "k", "v"), error_of(c, "EVAL", WRITE_SCRIPT, 1, "k"),
                 error_of(c, "FCALL", "f_quorum", 1, "k", "v"),
                 error_of(c, "FUNCTION", "LOAD", "REPLACE", library("quorum", "f_quorum"))]
        assert c.execute_command("MULTI") == "OK"
        found.append(error_of(c, "SET", "k", "v"))
        with pytest.raises(redis.exceptions.ResponseError, match="Transaction discarded"):
            c.execute_command("EXEC")
        return found

    # redis-py names no error class for NOREPLICAS: the code stays in the text.
    texts = refusals()
    assert all(text.startswith("NOREPLICAS Not enough good replicas to write.") for text in texts), texts
    assert "script:" in texts[1]
    assert p.get("k") == "before"
    assert p.execute_command("FCALL_RO", "f_quorum_ro", 1, "k") == "before"
    assert p.eval("return redis.call('GET', KEYS[1])", 1, "k") == "before"

    r = redis.Redis(port=replica.port, decode_responses=True)
    assert r.replicaof("127.0.0.1", primary.port)
    wait_for(lambda: link_up(r) and online(p), "the replica online")
    wait_for(lambda: write_goes_through(p), "writes accepted with a good replica")
    assert p.execute_command("FCALL", "f_quorum", 1, "k", "fn") == "OK"
    assert p.execute_command("WAIT", 1, 5000) == 1
    replica.proc.send_signal(signal.SIGSTOP)
    try:
        wait_for(lambda: not write_goes_through(p), "writes refused with the replica silent")
    finally:
        replica.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: write_goes_through(p), "writes accepted again")
    assert p.config_set("min-replicas-to-write", 0)


def write_goes_through(client):
    try:
        return client.set("probe", "1")
    except redis.exceptions.ResponseError as error:
        assert "NOREPLICAS" in str(error) or "Not enough good replicas" in str(error), error
        return False


def test_a_replica_that_serves_no_stale_data_answers_masterdown():
    """`replica-serve-stale-data no`, as Redis has it: while its link is down, the replica
    answers MASTERDOWN to every command without Redis's `stale` flag (GET, PING) and still
    runs those with it (INFO, CONFIG); `yes` serves the data it has. Before, the setting
    did nothing."""
    primary = Server("--shards", "2")
    replica = Server("--shards", "2", "--replica-serve-stale-data", "no")
    try:
        p = redis.Redis(port=primary.port, decode_responses=True)
        r = redis.Redis(port=replica.port, decode_responses=True)
        p.set("k", "v")
        assert r.replicaof("127.0.0.1", primary.port)
        wait_for(lambda: link_up(r) and r.get("k") == "v", "the replica's link")
        primary.proc.kill()
        primary.proc.wait()
        wait_for(lambda: not link_up(r), "the link down")
        masterdown = "Link with MASTER is down and replica-serve-stale-data is set to 'no'."
        assert error_of(r, "GET", "k") == masterdown
        assert error_of(r, "PING") == masterdown
        assert r.info("replication")["master_link_status"] == "down"
        assert r.config_get("replica-serve-stale-data") == {"replica-serve-stale-data": "no"}
        assert r.config_set("slave-serve-stale-data", "yes")
        assert r.get("k") == "v"
    finally:
        replica.stop()
        primary.stop()


def test_function_libraries_follow_the_primary(pair):
    """FUNCTION LOAD, DELETE and RESTORE on the primary reach the replica (its own libraries
    are replaced at the sync, as a Redis replica's are), and a promoted replica runs them."""
    primary, replica = pair
    p = redis.Redis(port=primary.port, decode_responses=True)
    r = redis.Redis(port=replica.port, decode_responses=True)
    p.function_load(library("before", "f_before"))
    r.function_load(library("stale", "f_stale"))
    assert r.replicaof("127.0.0.1", primary.port)
    wait_for(lambda: link_up(r), "the replica's link")
    wait_for(lambda: libraries(r) == ["before"], "the primary's libraries on the replica")

    p.function_load(library("after", "f_after"))
    wait_for(lambda: libraries(r) == ["after", "before"], "a library loaded after the sync")
    key = names("fk", 1)[0]
    assert p.fcall("f_after", 1, key, "v1") == "OK"
    assert p.execute_command("WAIT", 1, 5000) == 1
    assert r.fcall_ro("f_after_ro", 1, key) == "v1"

    p.function_delete("before")
    wait_for(lambda: libraries(r) == ["after"], "a deleted library gone from the replica")
    dump = p.function_dump()
    p.function_flush()
    wait_for(lambda: libraries(r) == [], "FUNCTION FLUSH on the replica")
    p.function_restore(dump)
    wait_for(lambda: libraries(r) == ["after"], "FUNCTION RESTORE on the replica")

    # A dropped link continues (a partial resync) and the libraries come again with it.
    p.execute_command("CLIENT", "KILL", "TYPE", "replica")
    p.function_load(library("during", "f_during"))
    wait_for(lambda: libraries(r) == ["after", "during"], "a library loaded while the link was down")

    assert r.replicaof("no", "one")
    assert r.fcall("f_during", 1, key, "v2") == "OK"
    assert r.get(key) == "v2"


def test_a_wait_whose_client_left_stops_waiting(server):
    """A `WAIT 1 0` (no replica: it would wait for ever) whose client closes leaves no thread
    polling behind it."""
    tasks = f"/proc/{server.proc.pid}/task"

    def waiting_threads():
        count = 0
        for task in os.listdir(tasks):
            try:
                with open(f"{tasks}/{task}/comm") as comm:
                    count += comm.read().startswith("wetask-offload")
            except (FileNotFoundError, ProcessLookupError):
                # The thread ended between the listing and the read (ESRCH when it was
                # still being reaped).
                pass
        return count

    clients = []
    for _ in range(20):
        c = socket.create_connection(("127.0.0.1", server.port))
        c.sendall(b"*3\r\n$4\r\nWAIT\r\n$1\r\n1\r\n$1\r\n0\r\n")
        clients.append(c)
    # Each wait polls on a thread of its own.
    wait_for(lambda: waiting_threads() >= 20, "the waits to start")
    for c in clients:
        c.close()
    wait_for(lambda: waiting_threads() == 0, "the waiting threads to end")


def redis_server():
    """A redis-server of its own on a free port: (its process, its port)."""
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL)
    wait_for(lambda: _pings(port), "redis-server")
    return proc, port


def _pings(port):
    try:
        return redis.Redis(port=port).ping()
    except redis.ConnectionError:
        return False


def blocked_until_replicaof(port, other_port, commands):
    """Blocks each of `commands` (timeout 0) on its own connection to `port`, turns that
    server into a replica of `other_port`, and returns how each blocked command ended."""
    ended = [None] * len(commands)

    def block(i, command):
        c = redis.Redis(port=port, socket_timeout=DEADLINE_S, decode_responses=True)
        try:
            ended[i] = ("reply", c.execute_command(*command))
        except redis.ResponseError as e:
            ended[i] = ("error", str(e))

    threads = [threading.Thread(target=block, args=(i, c), daemon=True) for i, c in enumerate(commands)]
    for t in threads:
        t.start()
    admin = redis.Redis(port=port, decode_responses=True)
    wait_for(lambda: int(admin.info("clients")["blocked_clients"]) == len(commands),
             "the commands to block")
    assert admin.replicaof("127.0.0.1", other_port)
    for t in threads:
        t.join(DEADLINE_S)
    admin.replicaof("NO", "ONE")
    return ended


def test_blocked_commands_end_with_unblocked_when_a_primary_turns_replica():
    """REPLICAOF host port on a primary ends its blocked commands with Redis's UNBLOCKED
    error: compared with a redis-server pair, on WeTask with 2 shards (random keys, so
    several shards hold blocked commands), TASK.FETCH … BLOCK included."""
    keys = names("blocked", 6)
    pops = [("BLPOP", key, 0) for key in keys]
    procs = []
    try:
        first, first_port = redis_server()
        second, second_port = redis_server()
        procs = [first, second]
        expected = blocked_until_replicaof(first_port, second_port, pops)
        assert all(kind == "error" and text.startswith("UNBLOCKED") for kind, text in expected), expected
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)
    primary = Server("--shards", "2")
    other = Server("--shards", "2")
    try:
        got = blocked_until_replicaof(primary.port, other.port,
                                      pops + [("TASK.FETCH", f"q:{keys[0]}", "BLOCK", 0)])
        assert got[:len(pops)] == expected
        assert got[-1] == expected[0], got[-1]
    finally:
        for srv in (other, primary):
            srv.stop()
