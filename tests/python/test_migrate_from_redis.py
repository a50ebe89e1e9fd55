"""The live migration from Redis (docs/REPLICATION.md): WeTask `REPLICAOF` a running
redis-server (Debian's, installed by scripts/setup.sh) while a writer keeps writing, catches
up, holds every key after the cut-over, resumes a dropped link from Redis's backlog, and
serves Sidekiq's and BullMQ's queues that were filled on Redis.

Random key names, on 2 and 4 shards; every wait polls a signal with a deadline."""

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from conftest import DEADLINE_S, Server, failpoint, stop_process
from test_replication import (collect, exit_cleanly, fill, link_up, names, state_of, subscribed,
                              wait_for)

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUBY = os.path.join(TESTS, "ruby")
NODE = os.path.join(TESTS, "node")

LIBRARY = """#!lua name=migrated
redis.register_function('twice', function(keys, args) return tonumber(args[1]) * 2 end)
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(tmp_path):
    """A redis-server (its RDB for the sync goes to tmp_path), answering: (process, port)."""
    if not shutil.which("redis-server"):
        pytest.fail("redis-server is missing: scripts/setup.sh installs it")
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port, decode_responses=True)
    wait_for(lambda: ping(client), "redis-server")
    return proc, port


@pytest.fixture
def source(tmp_path):
    """A redis-server to migrate from."""
    proc, port = start_redis(tmp_path)
    yield port
    proc.terminate()
    proc.wait(timeout=10)


def ping(client):
    try:
        return client.ping()
    except redis.ConnectionError:
        return False


def all_keys(client):
    return sorted(client.scan_iter(count=1000))


@pytest.fixture(params=["2", "4"], ids=["shards2", "shards4"])
def target(request):
    srv = Server("--shards", request.param)
    yield srv
    srv.stop()


def test_every_key_survives_a_live_migration(source, target):
    red = redis.Redis(port=source, decode_responses=True)
    keys = names("m", 20000)
    for start in range(0, len(keys), 5000):
        fill(red, keys[start:start + 5000])
    red.set("ttl:key", "x", ex=1000)
    red.xadd("a:stream", {"f": "v"})
    red.function_load(LIBRARY)
    stop = threading.Event()
    written = []

    def writer():
        w = redis.Redis(port=source, decode_responses=True)
        for i in range(100000):
            if stop.is_set():
                return
            w.set(f"live:{i % 1000}", i)
            w.hincrby("live:counts", f"f{i % 7}", 1)
            written.append(i)

    thread = threading.Thread(target=writer)
    thread.start()
    we = redis.Redis(port=target.port, decode_responses=True)
    try:
        assert we.replicaof("127.0.0.1", source)
        wait_for(lambda: link_up(we), "the link to Redis")
        mark = len(written)
        wait_for(lambda: len(written) > mark + 2000, "the writer to go on")
    finally:
        stop.set()
        thread.join(timeout=DEADLINE_S)
    # Redis's WAIT asks its replica for its offset (REPLCONF GETACK): the cut-over point.
    # (Redis 7.2's WAIT covers its own client's writes only: this client writes last.)
    red.set("cut-over", "1")
    assert red.execute_command("WAIT", 1, 10000) == 1
    everything = all_keys(red)
    assert all_keys(we) == everything
    for start in range(0, len(everything), 2000):
        chunk = everything[start:start + 2000]
        if "a:stream" in chunk:
            chunk.remove("a:stream")
        assert state_of(we, chunk) == state_of(red, chunk)
    assert we.xrange("a:stream") == red.xrange("a:stream")
    assert 990 <= we.ttl("ttl:key") <= 1000
    # The cut-over: the replica stops following and serves writes, functions included.
    assert we.replicaof("NO", "ONE")
    assert we.set("after", "1")
    assert we.fcall("twice", 0, 21) == 42
    assert we.hget("live:counts", "f0") == red.hget("live:counts", "f0")


def test_a_dropped_link_resumes_from_redis_backlog(source, target):
    red = redis.Redis(port=source, decode_responses=True)
    we = redis.Redis(port=target.port, decode_responses=True)
    fill(red, names("p", 500))
    we.replicaof("127.0.0.1", source)
    wait_for(lambda: link_up(we), "the link to Redis")
    assert red.execute_command("WAIT", 1, 10000) == 1
    full = red.info("stats")["sync_full"]
    assert red.execute_command("CLIENT", "KILL", "TYPE", "replica") == 1
    more = names("q", 300)
    fill(red, more)
    wait_for(lambda: red.execute_command("WAIT", 1, 200) == 1, "the replica back")
    assert red.info("stats")["sync_partial_ok"] >= 1
    assert red.info("stats")["sync_full"] == full
    assert state_of(we, more) == state_of(red, more)
    # A replica of Redis refuses clients' writes as any replica does.
    with pytest.raises(redis.exceptions.ReadOnlyError):
        we.set("x", "1")


def test_links_dropped_under_a_writer_resume_without_applying_twice(source, target):
    """Redis's link to the replica is killed five times while a client runs INCR and RPUSH:
    each partial resync continues right after the last command this node applied, so
    nothing is applied twice (an INCR counted twice) or skipped."""
    red = redis.Redis(port=source, decode_responses=True)
    we = redis.Redis(port=target.port, decode_responses=True)
    # A backlog that outlasts each reconnect (Redis's 1 MB default fills in about a second
    # of this writer, and the link comes back after one).
    assert red.config_set("repl-backlog-size", 64 << 20)
    we.replicaof("127.0.0.1", source)
    wait_for(lambda: link_up(we), "the link to Redis")
    stop = threading.Event()

    def writer():
        w = redis.Redis(port=source, decode_responses=True)
        for i in range(200000):
            if stop.is_set():
                return
            pipe = w.pipeline(transaction=False)
            pipe.incr("counter")
            pipe.rpush("pushed", i)
            pipe.execute()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        full = red.info("stats")["sync_full"]
        for kill in range(5):
            mark = int(red.get("counter") or 0)
            wait_for(lambda: int(red.get("counter") or 0) > mark + 200, "the writer to go on")
            assert red.execute_command("CLIENT", "KILL", "TYPE", "replica") == 1
            wait_for(lambda: link_up(we) and red.info("replication")["connected_slaves"] == 1,
                     f"the link back after kill {kill}")
    finally:
        stop.set()
        thread.join(timeout=DEADLINE_S)
    # Redis 7.2's WAIT covers its own client's writes only: this one writes last.
    red.set("marker", "1")
    assert red.execute_command("WAIT", 1, 10000) == 1
    assert red.info("stats")["sync_full"] == full, "every resync was partial"
    assert we.get("counter") == red.get("counter")
    assert we.llen("pushed") == red.llen("pushed")
    assert we.lrange("pushed", -50, -1) == red.lrange("pushed", -50, -1)


def test_publish_on_redis_reaches_subscribers_on_wetask(source, target):
    """Redis's replication stream carries its PUBLISH messages: a subscriber on the WeTask
    replica hears what is published on Redis, in order, once each, as a subscriber on a
    Redis replica would."""
    red = redis.Redis(port=source, decode_responses=True)
    we = redis.Redis(port=target.port, decode_responses=True)
    assert we.replicaof("127.0.0.1", source)
    wait_for(lambda: link_up(we), "the link to Redis")
    listeners = subscribed(target.port, "news:redis", 4)
    sent = [f"m{i}" for i in range(20)]
    for message in sent:
        red.publish("news:redis", message)
    for pubsub in listeners:
        assert collect(pubsub, len(sent)) == sent


def restart_replica(replica, source, red):
    """Starts `replica` again on its data, following `source`, and waits until it has
    every write `red` made."""
    replica = Server("--shards", "2", "--replicaof", f"127.0.0.1 {source}", data_dir=replica.dir)
    we = redis.Redis(port=replica.port, decode_responses=True)
    wait_for(lambda: link_up(we) and red.execute_command("WAIT", 1, 100) == 1,
             "the restarted replica's link")
    return replica, we


def test_a_clean_restart_continues_from_redis_backlog_and_a_crash_syncs_in_full(source):
    """As a Redis replica keeps its primary's replication id and offset across a restart:
    a WeTask replica of Redis that exits cleanly continues with a partial resync from
    Redis's backlog (counters show nothing applied twice or skipped); one killed with -9
    vouches for nothing and syncs in full."""
    red = redis.Redis(port=source, decode_responses=True)
    fill(red, names("before", 300))
    replica = Server("--shards", "2", "--replicaof", f"127.0.0.1 {source}")
    try:
        we = redis.Redis(port=replica.port, decode_responses=True)
        wait_for(lambda: link_up(we), "the link to Redis")
        for _ in range(100):
            red.incr("counter")
        assert red.execute_command("WAIT", 1, 10000) == 1
        stats = red.info("stats")
        full, partial = stats["sync_full"], stats["sync_partial_ok"]

        exit_cleanly(replica)
        more = names("down", 100)
        fill(red, more)
        for _ in range(50):
            red.incr("counter")
        replica, we = restart_replica(replica, source, red)
        stats = red.info("stats")
        assert (stats["sync_full"], stats["sync_partial_ok"]) == (full, partial + 1), stats
        assert we.get("counter") == red.get("counter") == "150"
        assert state_of(we, more) == state_of(red, more)

        replica.proc.kill()
        replica.proc.wait()
        for _ in range(10):
            red.incr("counter")
        replica, we = restart_replica(replica, source, red)
        assert red.info("stats")["sync_full"] == full + 1
        assert we.get("counter") == red.get("counter") == "160"
    finally:
        replica.stop()


def crash_mid_load(port):
    """A replica of the redis-server at `port` that died in the middle of loading its RDB
    (the crash point ends it once 500 keys are in): its data directory."""
    with failpoint("redis-mid-rdb-load"):
        crashed = Server("--shards", "2", "--replicaof", f"127.0.0.1 {port}")
    assert crashed.proc.wait(timeout=DEADLINE_S) == 137, "the crash point was not reached"
    return crashed.dir


def assert_loading(client):
    for command in (("GET", "any"), ("DBSIZE",), ("PING",)):
        with pytest.raises(redis.exceptions.BusyLoadingError):
            client.execute_command(*command)
    assert client.info("persistence")["loading"] == 1


@pytest.mark.parametrize("restart", ["replica", "primary-keeps", "primary-resyncs"])
def test_a_crash_in_the_middle_of_an_rdb_load_is_never_served_as_whole(tmp_path, restart):
    """Each shard journals the start and the end of a Redis RDB's load (which goes in as
    RESTOREs), so a node killed in the middle knows on restart that it holds part of it and
    answers LOADING, as it did during the load, rather than serve the part as the whole:
    restarted as a replica (Redis stopped meanwhile) until the next full sync ends; restarted
    as a primary (REPLICAOF was given at run time, so the restart does not follow Redis)
    until REPLICAOF NO ONE keeps the part, which stays kept across a restart, or REPLICAOF
    syncs again. Before, each restart served the 500 keys of 2,000 as if they were all."""
    proc, port = start_redis(tmp_path)
    node = None
    try:
        red = redis.Redis(port=port, decode_responses=True)
        keys = names("rdb", 2000)
        fill(red, keys)
        data_dir = crash_mid_load(port)
        # No retries: redis-py retries LOADING for seconds by default.
        plain = {"decode_responses": True, "retry": Retry(NoBackoff(), 0)}
        if restart == "replica":
            proc.send_signal(signal.SIGSTOP)
            try:
                node = Server("--shards", "2", "--replicaof", f"127.0.0.1 {port}",
                              data_dir=data_dir)
                we = redis.Redis(port=node.port, **plain)
                assert_loading(we)
                with pytest.raises(redis.exceptions.BusyLoadingError):
                    we.execute_command("REPLICAOF", "NO", "ONE")
            finally:
                proc.send_signal(signal.SIGCONT)
            wait_for(lambda: link_up(we) and red.execute_command("WAIT", 1, 100) == 1,
                     "the next full sync")
        else:
            node = Server("--shards", "2", data_dir=data_dir)
            we = redis.Redis(port=node.port, **plain)
            assert_loading(we)
            assert we.info("replication")["role"] == "master"
            if restart == "primary-keeps":
                assert we.execute_command("REPLICAOF", "NO", "ONE") == "OK"
                wait_for(lambda: we.info("persistence")["loading"] == 0, "the part kept")
                held = we.dbsize()
                assert 500 <= held < len(keys), held
                kept = [k for k in keys if we.exists(k)]
                assert state_of(we, kept) == state_of(red, kept)
                # The shards journaled the end of the mark: a restart serves at once.
                exit_cleanly(node)
                node = Server("--shards", "2", data_dir=data_dir)
                we = redis.Redis(port=node.port, **plain)
                assert we.dbsize() == held
                return
            assert we.execute_command("REPLICAOF", "127.0.0.1", str(port)) == "OK"
            wait_for(lambda: link_up(we) and red.execute_command("WAIT", 1, 100) == 1,
                     "the new full sync")
        assert we.dbsize() == red.dbsize()
        assert state_of(we, keys[::97]) == state_of(red, keys[::97])
    finally:
        if node:
            node.stop()
        proc.terminate()
        proc.wait(timeout=10)


def migrate(source, target):
    """Follows `source` until it is caught up, then cuts over."""
    we = redis.Redis(port=target.port, decode_responses=True)
    we.replicaof("127.0.0.1", source)
    wait_for(lambda: link_up(we), "the link to Redis")
    # Redis 7.2's WAIT covers its own client's writes only: this client writes last.
    red = redis.Redis(port=source)
    red.set("cut-over", "1")
    assert red.execute_command("WAIT", 1, 10000) == 1
    assert we.replicaof("NO", "ONE")
    return we


def test_sidekiq_jobs_enqueued_on_redis_run_on_wetask(source, target, tmp_path):
    subprocess.run(["ruby", "sidekiq_enqueue.rb"], cwd=RUBY, check=True, timeout=120,
                   capture_output=True,
                   env=dict(os.environ, REDIS_URL=f"redis://127.0.0.1:{source}/0"))
    we = migrate(source, target)
    assert we.llen("queue:default") == 100
    log = open(tmp_path / "worker.log", "w")
    worker = subprocess.Popen(
        ["sidekiq", "-r", "./sidekiq_jobs.rb", "-c", "5", "-q", "default"],
        env=dict(os.environ, REDIS_URL=f"redis://127.0.0.1:{target.port}/0"),
        cwd=RUBY, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        wait_for(lambda: we.hlen("results") >= 101, "the jobs to run on WeTask", 60)
        results = we.hgetall("results")
        assert all(results[f"add:{i}"] == str(i + 1000) for i in range(100))
    finally:
        stop_process(worker)


def test_bullmq_jobs_added_on_redis_run_on_wetask(source, target):
    queue = names("bull", 1)[0].replace(":", "-")
    add = subprocess.run(["node", "bullmq_migrate.js", "add"], cwd=NODE, timeout=120,
                         capture_output=True, text=True,
                         env=dict(os.environ, WETASK_PORT=str(source), BULLMQ_QUEUE=queue))
    assert add.returncode == 0, add.stderr[-3000:]
    migrate(source, target)
    work = subprocess.run(["node", "bullmq_migrate.js", "work"], cwd=NODE, timeout=120,
                          capture_output=True, text=True,
                          env=dict(os.environ, WETASK_PORT=str(target.port), BULLMQ_QUEUE=queue))
    assert work.returncode == 0, work.stdout[-3000:] + work.stderr[-3000:]
    report = json.loads(work.stdout.strip().splitlines()[-1])
    assert report["completed"] == 50 and report["wrong"] == 0


def test_redis_72s_waitaof_counts_a_wetask_replicas_fsync(source, target):
    """A WeTask replica of Redis 7.2 acknowledges with `REPLCONF ACK <offset> FACK
    <fsynced>`, as 7.2's replicas do, so WAITAOF on Redis counts it once its own journal has
    synced the writes, and not while its `appendfsync no` leaves them unsynced. Debian's
    redis-server is 7.0 (no WAITAOF, FACK ignored): the suite skips this there; run it with
    a 7.2 redis-server first on PATH (docs/REPLICATION.md says how it was run)."""
    red = redis.Redis(port=source, decode_responses=True)
    version = red.info("server")["redis_version"]
    if tuple(int(part) for part in version.split(".")[:2]) < (7, 2):
        pytest.skip(f"WAITAOF and FACK are Redis 7.2's; this redis-server is {version}")
    we = redis.Redis(port=target.port, decode_responses=True)
    assert we.replicaof("127.0.0.1", source)
    wait_for(lambda: link_up(we), "the link to Redis")
    red.set("synced", "1")
    # The replica's everysec sync covers the write within about a second.
    assert red.execute_command("WAITAOF", 0, 1, 10000) == [0, 1]
    assert we.config_set("appendfsync", "no")
    red.set("unsynced", "1")
    started = time.monotonic()
    assert red.execute_command("WAITAOF", 0, 1, 300) == [0, 0]
    assert time.monotonic() - started >= 0.25
    # Applied, though: WAIT counts it.
    assert red.execute_command("WAIT", 1, 10000) == 1
    assert we.config_set("appendfsync", "always")
    red.set("synced-again", "1")
    assert red.execute_command("WAITAOF", 0, 1, 10000) == [0, 1]
