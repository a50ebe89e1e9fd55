"""Consensus mode (`--consensus raft`, docs/REPLICATION.md "Consensus mode"): three nodes on
127.0.0.1, .2 and .3 form a Raft group; a write is acknowledged once a quorum has it.

The nemesis is the test's own: `kill -9` of the leader (then a restart on its data), and
SIGSTOP/SIGCONT of the leader (a node that believes it leads while the others elect
another). Checked: no acknowledged write or task is lost, a write the old leader ran but
never committed disappears, writes resume within 2 s (median of 10 failovers), followers
redirect to the leader, and a register history under the nemesis is linearizable
(`linearizability.py`, the WGL search).

Every wait polls a signal (INFO consensus, a reply) with a deadline; no sleep is trusted."""

import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import threading
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from conftest import BINARY, DEADLINE_S, wait_for
from linearizability import History, check_register
from nemesis_proxy import Proxy

HOSTS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
# `make chaos` runs more of each (docs/REPLICATION.md).
FAILOVERS = int(os.environ.get("WETASK_CHAOS_FAILOVERS", "10"))
NEMESIS_ROUNDS = int(os.environ.get("WETASK_CHAOS_ROUNDS", "6"))


def port_is_free(host, port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


# A node's Raft port is its client port + RAFT_OFFSET (named in --raft-peers). Every port a
# node listens on stays below Linux's ephemeral range (32768 and up): a connection's local
# port there could take a listener's port between the check and the start.
RAFT_OFFSET = 5000
SHARDS_MAX = 4


def free_base_port():
    """A client port whose shard, bus and Raft ports are free on every host."""
    for _ in range(500):
        port = random.randint(20000, 32767 - 10000 - SHARDS_MAX)
        wanted = [port, port + RAFT_OFFSET]
        wanted += [port + 1 + s for s in range(SHARDS_MAX)]
        wanted += [port + 10001 + s for s in range(SHARDS_MAX)]
        if all(port_is_free(h, p) for h in HOSTS + ["127.0.0.4"] for p in wanted):
            return port
    raise AssertionError("no free ports")


class Node:
    def __init__(self, group, raft_id, host, joining=False):
        self.group = group
        self.id = raft_id
        self.host = host
        self.joining = joining
        # Overrides this node's --raft-auth (None: the group's).
        self.auth = None
        self.dir = tempfile.mkdtemp(prefix=f"wetask-raft{raft_id}-")
        self.proc = None
        self.log = []

    @property
    def port(self):
        return self.group.port + 1

    def shard_port(self, shard):
        return self.group.port + 1 + shard

    def start(self):
        """Starts the node. After a SIGKILL, its listening socket outlives the process for
        a moment (the io_uring ring is torn down after the exit): a start that finds its
        address in use is tried again, until the deadline."""
        end = time.monotonic() + DEADLINE_S
        while True:
            try:
                return self._start_once()
            except AssertionError:
                in_use = any("Address already in use" in line for line in self.log)
                if not in_use or time.monotonic() > end:
                    raise
                time.sleep(0.05)

    def _start_once(self):
        self.log = []
        self.proc = subprocess.Popen(
            [BINARY, "--bind", self.host, "--port", str(self.group.port), "--shards", str(self.group.shards),
             "--consensus", "raft", "--raft-id", str(self.id), "--raft-peers", self.group.peers_for(self),
             "--dir", self.dir, *self.group.extra_args,
             "--raft-auth", self.auth or self.group.auth,
             *(["--raft-join", "yes"] if self.joining else [])],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        ready = False
        for line in self.proc.stdout:
            self.log.append(line)
            if "ready to accept connections" in line:
                ready = True
                break
        if not ready:
            # Its output ended: it is exiting, whether or not it has been reaped yet.
            self.proc.wait()
        assert ready and self.proc.poll() is None, "".join(self.log)
        proc = self.proc
        threading.Thread(target=lambda: [self.log.append(l) for l in proc.stdout], daemon=True).start()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def client(self, timeout=5, port=None):
        # No retries inside redis-py (its default backs off for seconds): the tests decide.
        return redis.Redis(host=self.host, port=port or self.port, socket_timeout=timeout,
                           socket_connect_timeout=timeout, decode_responses=True,
                           retry=Retry(NoBackoff(), 0))

    def consensus(self, shard=0):
        """This node's state in `shard`'s group (INFO consensus), None when unreachable."""
        try:
            return self.client(2).info("consensus")[f"group{shard}"]
        except (redis.ConnectionError, redis.TimeoutError):
            return None

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def pause(self):
        """SIGSTOP, returning once every thread has stopped: the signal takes effect
        asynchronously, and a command sent just after it may otherwise still run (a test
        once saw its "paused" leader replicate a write 3 ms after the signal)."""
        os.kill(self.proc.pid, signal.SIGSTOP)
        tasks = f"/proc/{self.proc.pid}/task"

        def stopped():
            states = []
            for task in os.listdir(tasks):
                try:
                    with open(f"{tasks}/{task}/stat") as f:
                        states.append(f.read().rsplit(")", 1)[1].split()[0])
                except OSError:
                    pass
            return states and all(state in "tT" for state in states)
        wait_for(stopped, f"node {self.id} to stop")

    def resume(self):
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self):
        if self.alive():
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Group:
    """Three nodes. `partitionable`: every node reaches each other's Raft port through a
    proxy of its own (`nemesis_proxy`), so that `isolate` can cut a node off."""

    def __init__(self, partitionable=False, snapshot_log_bytes=None, shards=1):
        self.port = free_base_port()
        self.shards = shards
        self.auth = f"group-secret-{random.randrange(10**9)}"
        self.extra_args = []
        if snapshot_log_bytes:
            self.extra_args = ["--raft-snapshot-log-bytes", str(snapshot_log_bytes)]
        self.proxies = {}
        if partitionable:
            for i, to_host in enumerate(HOSTS):
                for sender in range(1, len(HOSTS) + 1):
                    if sender != i + 1:
                        self.proxies[(sender, i + 1)] = Proxy(to_host, (to_host, self.port + RAFT_OFFSET))
        self.nodes = [Node(self, i + 1, h) for i, h in enumerate(HOSTS)]
        for node in self.nodes:
            node.start()

    def address(self, host):
        """A node's `host:port:raft-port` (RAFT ADD's argument)."""
        return f"{host}:{self.port}:{self.port + RAFT_OFFSET}"

    def join(self, raft_id, host):
        """Starts a node outside the group (`--raft-join`), to be added with RAFT ADD."""
        node = Node(self, raft_id, host, joining=True)
        self.nodes.append(node)
        node.start()
        return node

    def peers_for(self, node):
        """`node`'s --raft-peers: every node the group has started (a founding member's
        list only counts at its first start); the others' Raft ports are its proxies to
        them, if any."""
        def member(other):
            proxy = self.proxies.get((node.id, other.id))
            raft_port = proxy.port if proxy else self.port + RAFT_OFFSET
            return f"{other.id}={other.host}:{self.port}:{raft_port}"
        return ",".join(member(other) for other in self.nodes)

    def isolate(self, node):
        for (a, b), proxy in self.proxies.items():
            if node.id in (a, b):
                proxy.cut()

    def heal(self):
        for proxy in self.proxies.values():
            proxy.heal()

    def leader(self, exclude=None, deadline_s=DEADLINE_S, shard=0):
        """The node that leads and serves `shard`'s group."""
        def find():
            for node in self.nodes:
                if node is exclude or not node.alive():
                    continue
                state = node.consensus(shard)
                if state and state["role"] == "leader":
                    return node
            return None
        return wait_for(find, f"a serving leader of group {shard}", deadline_s)

    def node_at(self, host):
        return next(n for n in self.nodes if n.host == host)

    def caught_up(self, node, shard=0):
        """`node` has applied everything the leader of `shard`'s group has committed."""
        target = int(wait_for(lambda: self.leader(shard=shard).consensus(shard),
                              "the leader's state")["commit"])
        def check():
            mine = node.consensus(shard)
            return mine and int(mine["applied"]) >= target
        wait_for(check, f"node {node.id} to catch up in group {shard}")

    def stop(self):
        for node in self.nodes:
            node.stop()
        for proxy in self.proxies.values():
            proxy.close()


@pytest.fixture
def group():
    g = Group()
    yield g
    g.stop()


class Follower:
    """A client of the group that follows -MOVED, retries TRYAGAIN/CLUSTERDOWN and a dead
    node, and tells an acknowledged reply from an unknown outcome (a connection lost after
    the command was sent)."""

    def __init__(self, group, timeout=2):
        self.group = group
        self.timeout = timeout
        self.node = group.nodes[0]
        self.port = self.node.port
        self.conn = None

    def _connect(self):
        if self.conn is None:
            self.conn = self.node.client(self.timeout, self.port)
        return self.conn

    def _next_node(self):
        alive = [n for n in self.group.nodes if n.alive()] or self.group.nodes
        self.node = random.choice(alive)
        self.port = self.node.port
        self.conn = None

    def call(self, *args, deadline_s=DEADLINE_S):
        """(True, reply) when answered, (None, error) when the outcome is unknown."""
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            try:
                return True, self._connect().execute_command(*args)
            except redis.ResponseError as e:
                if isinstance(e, redis.exceptions.MovedError):
                    self.node = self.group.node_at(e.host)
                    self.port = int(e.port)
                    self.conn = None
                    continue
                if isinstance(e, (redis.exceptions.TryAgainError, redis.exceptions.ClusterDownError,
                                  redis.exceptions.ReadOnlyError)):
                    # No leader here (yet): ask another node.
                    self._next_node()
                    time.sleep(0.01)
                    continue
                raise
            except redis.ConnectionError as e:
                # Refused before sending is safe to retry; anything else may have run.
                sent = not isinstance(e.__cause__ or e.__context__, ConnectionRefusedError) \
                    and "refused" not in str(e).lower()
                self._next_node()
                if sent:
                    return None, e
                time.sleep(0.01)
            except redis.TimeoutError as e:
                self._next_node()
                return None, e
        raise AssertionError(f"{args[0]} found no leader within {deadline_s} s")


def test_a_quorum_write_is_read_back_everywhere_and_followers_redirect(group):
    leader = group.leader()
    keys = [f"k:{random.randrange(10**9)}:{i}" for i in range(200)]
    c = leader.client()
    for i, key in enumerate(keys):
        assert c.set(key, f"v{i}") is True
    c.rpush("list", *range(10))
    c.execute_command("TASK.SUBMIT", "jobs", "payload")
    followers = [n for n in group.nodes if n is not leader]
    for node in followers:
        group.caught_up(node)
        f = node.client()
        # Keyed commands, reads included, go to the leader.
        with pytest.raises(redis.exceptions.MovedError, match=rf"\d+ {leader.host}:{leader.port}"):
            f.get(keys[0])
        with pytest.raises(redis.exceptions.MovedError):
            f.execute_command("TASK.FETCH", "jobs")
        # A keyless write is refused; keyless reads answer from the follower's state.
        with pytest.raises(redis.exceptions.ReadOnlyError, match="does not lead"):
            f.flushall()
        assert f.dbsize() == c.dbsize()
        # After READONLY a follower serves reads from its own state (Redis Cluster's
        # replica reads), still no writes; READWRITE ends it.
        assert f.execute_command("READONLY") in (True, "OK")
        assert f.get(keys[7]) == "v7" and f.lrange("list", 0, 2) == ["0", "1", "2"]
        with pytest.raises(redis.exceptions.MovedError):
            f.set(keys[7], "no")
        assert f.execute_command("READWRITE") in (True, "OK")
        with pytest.raises(redis.exceptions.MovedError):
            f.get(keys[7])
        slots = f.execute_command("CLUSTER", "SLOTS")
        assert slots[0][:3] == [0, 16383, [leader.host, leader.port,
                                           c.execute_command("CLUSTER", "MYID"), {}]] or \
            slots[0][2][:2] == [leader.host, leader.port]
        assert len(slots[0]) == 5, slots
        assert "myself,slave" in f.execute_command("CLUSTER", "NODES")
        with pytest.raises(redis.ResponseError, match="consensus mode"):
            f.execute_command("CLUSTER", "ADDSLOTS", "1")
    # A cluster client seeded with a follower finds the leader and reads everything.
    rc = redis.RedisCluster(host=followers[0].host, port=followers[0].port, decode_responses=True)
    assert rc.mget_nonatomic(keys[:50]) == [f"v{i}" for i in range(50)]
    assert rc.lrange("list", 0, -1) == [str(i) for i in range(10)]
    rc.close()


def start_writer(group):
    """A thread that SETs w:0, w:1 … through a Follower until `stop` is set (bounded to
    200,000): (the writes acknowledged, `stop`, the thread)."""
    acked, stop = {}, threading.Event()

    def writer():
        client = Follower(group, timeout=1)
        for i in range(200000):
            if stop.is_set():
                return
            ok, reply = client.call("SET", f"w:{i}", str(i))
            if ok:
                assert reply in (True, "OK"), reply
                acked[f"w:{i}"] = str(i)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    return acked, stop, thread


def assert_none_lost(cluster_client, acked):
    """Every write `start_writer` saw acknowledged reads back through a cluster client."""
    keys = list(acked)
    got = cluster_client.mget_nonatomic(keys)
    lost = [k for k, v in zip(keys, got) if v != acked[k]]
    assert lost == [], f"{len(lost)} of {len(acked)} acknowledged writes lost"


def test_wait_and_waitaof_count_the_members_whose_logs_hold_the_writes(group):
    """In consensus mode WAIT and WAITAOF count the other members whose Raft logs hold, on
    disk, every entry committed so far (each write's reply waited for a quorum, so one
    other member of three has it at once); WAITAOF's local part is the leader's own log.
    With a member down the count stops at what is left. On a follower both are refused
    as on a Redis replica."""
    leader = group.leader()
    c = leader.client()
    assert c.set("w", "1") is True
    assert c.execute_command("WAIT", 1, 0) >= 1
    assert c.execute_command("WAIT", 2, 10000) == 2
    assert c.execute_command("WAITAOF", 1, 2, 10000) == [1, 2]
    follower = next(n for n in group.nodes if n is not leader)
    with pytest.raises(redis.ResponseError, match="WAIT cannot be used with replica"):
        follower.client().execute_command("WAIT", 1, 100)
    with pytest.raises(redis.ResponseError, match="WAITAOF cannot be used with replica"):
        follower.client().execute_command("WAITAOF", 0, 1, 100)
    follower.kill()
    assert c.set("w", "2") is True
    started = time.monotonic()
    assert c.execute_command("WAIT", 2, 300) == 1
    assert time.monotonic() - started >= 0.25
    assert c.execute_command("WAITAOF", 1, 1, 10000) == [1, 1]


def test_the_leader_killed_ten_times_writes_resume_within_2s_and_no_ack_is_lost(group):
    acked, stop, thread = start_writer(group)
    wait_for(lambda: len(acked) > 50, "the writer's first acknowledgements")
    failovers = []
    for run in range(FAILOVERS):
        leader = group.leader()
        before = len(acked)
        wait_for(lambda: len(acked) > before + 20, "writes on this leader")
        leader.kill()
        killed_at = time.monotonic()
        probe = Follower(group, timeout=0.3)
        while True:
            ok, _ = probe.call("SET", f"probe:{run}", "1")
            if ok:
                break
        failovers.append(time.monotonic() - killed_at)
        leader.start()
        group.caught_up(leader)
    stop.set()
    thread.join(DEADLINE_S)
    leader = group.leader()
    c = leader.client()
    items = list(acked.items())
    lost = []
    for at in range(0, len(items), 500):
        chunk = items[at:at + 500]
        got = c.mget([k for k, _ in chunk])
        lost += [k for (k, v), g in zip(chunk, got) if g != v]
    print(f"failover times (s): {sorted(round(t, 3) for t in failovers)}; "
          f"median {statistics.median(failovers):.3f}; {len(acked)} writes acknowledged, "
          f"{len(lost)} lost")
    assert lost == []
    assert statistics.median(failovers) < 2.0, failovers
    # Every node, restarted ten times between them, holds the same data.
    for node in group.nodes:
        group.caught_up(node)
    contents = [sorted(node.client().keys("*")) for node in group.nodes]
    assert contents[0] == contents[1] == contents[2]


def test_a_paused_leader_is_replaced_and_its_uncommitted_write_vanishes(group):
    old = group.leader()
    c = old.client(timeout=20)
    c.set("before", "1")
    old.pause()
    outcome = {}

    def ghost_write():
        try:
            outcome["reply"] = c.set("ghost", "1")
        except (redis.ConnectionError, redis.ResponseError, redis.TimeoutError) as e:
            outcome["error"] = str(e)

    thread = threading.Thread(target=ghost_write)
    thread.start()
    new = group.leader(exclude=old)
    assert new.client().set("after", "1") is True
    old.resume()
    thread.join(DEADLINE_S)
    assert "reply" not in outcome, "the deposed leader acknowledged a write"
    group.caught_up(old)
    state = old.consensus()
    assert state["role"] == "follower", state
    n = new.client()
    states = {node.id: node.consensus() for node in group.nodes}
    assert n.get("ghost") is None, (outcome, states, "".join(old.log[-30:]))
    assert n.get("before") == "1" and n.get("after") == "1"
    # The old leader's state was rebuilt from the committed log: no ghost there either.
    assert old.client().keys("ghost") == [], (outcome, old.consensus(), "".join(old.log[-8:]))
    assert sorted(old.client().keys("*")) == sorted(n.keys("*"))


def test_tasks_in_every_state_survive_their_leader(group):
    leader = group.leader()
    c = leader.client()
    # A named worker's lease is its name's, the same on every node (a connection's would
    # mean nothing to the next leader).
    assert c.execute_command("TASK.WORKER", "w1") == "OK"
    for i in range(5):
        c.execute_command("TASK.SUBMIT", "work", f"job{i}")
    c.execute_command("TASK.SUBMIT", "work", "later", "DELAY", 600000)
    held = c.execute_command("TASK.FETCH", "work", "COUNT", 1, "LEASE", 600000)
    doomed = c.execute_command("TASK.FETCH", "work", "COUNT", 1)
    c.execute_command("TASK.FAIL", doomed[0][0], "ERROR", "boom", "NORETRY")

    def stats(client):
        flat = client.execute_command("TASK.STATS", "work")
        s = flat if isinstance(flat, dict) else dict(zip(flat[0::2], flat[1::2]))
        return {k: int(s[k]) for k in ("queued", "scheduled", "leased", "dead", "submitted")}

    before = stats(c)
    assert before == {"queued": 3, "scheduled": 1, "leased": 1, "dead": 1, "submitted": 6}
    leader.kill()
    new = group.leader(exclude=leader)
    n = new.client()
    assert stats(n) == before
    # The lease carried over: the worker acks it on the new leader.
    assert n.execute_command("TASK.WORKER", "w1") == "OK"
    assert n.execute_command("TASK.ACK", held[0][0]) == "OK"
    got = n.execute_command("TASK.FETCH", "work", "COUNT", 10)
    assert sorted(t[2] for t in got) == ["job2", "job3", "job4"]
    leader.start()
    group.caught_up(leader)


def shard_of_name(client, name, shards):
    """Which shard's group `name` lives in (ranges of 16384 / shards slots, in order)."""
    return int(client.execute_command("CLUSTER", "KEYSLOT", name)) * shards // 16384


def test_each_shard_is_a_group_of_its_own_led_from_any_node():
    """--shards 2: each shard's slot range is a Raft group with a leader of its own. Cluster
    clients follow both; a command for another shard's group is redirected, never run with
    a hop; a write that would touch two groups is refused; a leader killed in one group
    leaves the other serving, and no acknowledged write or task is lost in either."""
    g = Group(shards=2)
    try:
        first = g.leader(shard=0)
        if g.leader(shard=1) is first:
            # Lead the two groups from two nodes.
            other = next(n for n in g.nodes if n is not first)
            first.client(port=first.shard_port(1)).execute_command("RAFT", "TRANSFER", str(other.id))
            wait_for(lambda: g.leader(shard=1) is other, "group 1 led by another node")
        second = g.leader(shard=1)
        assert second is not first
        c = first.client()
        # The slot map names each range's own leader, on that shard's port.
        for node in g.nodes:
            slots = sorted(node.client().execute_command("CLUSTER", "SLOTS"))
            assert [(s[0], s[1], s[2][0], s[2][1]) for s in slots] == [
                (0, 8191, first.host, first.shard_port(0)),
                (8192, 16383, second.host, second.shard_port(1))], slots
        names = [f"r:{random.randrange(10**12)}:{i}" for i in range(400)]
        by_shard = {0: [], 1: []}
        for name in names:
            by_shard[shard_of_name(c, name, 2)].append(name)
        assert by_shard[0] and by_shard[1]
        a, b = by_shard[0][0], by_shard[1][0]

        rc = RedisCluster(host=first.host, port=first.shard_port(0), decode_responses=True)
        for i, name in enumerate(names):
            assert rc.set(name, value(i)) is True
        assert [rc.get(name) for name in names] == [value(i) for i in range(len(names))]

        # No hop: another group's key is redirected to its leader, several groups' refused.
        with pytest.raises(redis.exceptions.MovedError, match=rf"{second.host}:{second.shard_port(1)}"):
            c.get(b)
        with pytest.raises(redis.ResponseError, match="same slot"):
            c.mset({a: "1", b: "2"})
        shared = redis.Redis(host=first.host, port=g.port, decode_responses=True)
        with pytest.raises(redis.ResponseError, match="every shard's group"):
            shared.flushall()
        with pytest.raises(redis.ResponseError, match="FALLBACK queue must live"):
            c.execute_command("TASK.SUBMIT", a, "p", "FALLBACK", b)
        # A script declares its keys: those of two groups are refused; one that writes a
        # key of another group it did not declare gets an error, and the key stays as it was.
        with pytest.raises(redis.ResponseError, match="same slot"):
            c.eval("return redis.call('SET', KEYS[1], '1')", 2, a, b)
        assert c.eval("return redis.call('SET', KEYS[1], 'script')", 1, a) == "OK"
        with pytest.raises(redis.ResponseError, match="lives in another shard's group"):
            c.eval("return redis.call('SET', ARGV[1], 'undeclared')", 0, b)
        assert rc.get(b) != "undeclared"
        # A follower of group 0 runs none of a pipeline's writes, wherever their keys live.
        follower = next(n for n in g.nodes if n is not first)
        pipe = follower.client().pipeline(transaction=False)
        for name in by_shard[0][:3] + by_shard[1][:3]:
            pipe.set(name, "follower")
        replies = pipe.execute(raise_on_error=False)
        assert all(isinstance(r, redis.exceptions.MovedError) for r in replies), replies

        # Tasks on queues of both groups, submitted through the cluster client.
        queues = [f"q:{random.randrange(10**12)}" for _ in range(8)]
        submitted = {rc.execute_command("TASK.SUBMIT", q, f"job-{i}"): q
                     for i in range(40) for q in [queues[i % len(queues)]]}
        assert {shard_of_name(c, q, 2) for q in queues} == {0, 1}

        # Kill each group's leader in turn under a writer: the other group goes on serving.
        acked, stop, thread = start_writer(g)
        wait_for(lambda: len(acked) > 50, "the writer's first acknowledgements")
        for shard, leader in [(0, first), (1, second)]:
            before = len(acked)
            leader.kill()
            survivor = g.leader(shard=1 - shard)
            if survivor is not leader:
                name = by_shard[1 - shard][1]
                assert survivor.client(port=survivor.shard_port(1 - shard)).set(name, "x") is True
            g.leader(shard=shard, exclude=leader)
            wait_for(lambda: len(acked) > before + 50, f"writes after group {shard}'s leader died")
            leader.start()
            for s in range(2):
                g.caught_up(leader, s)
        stop.set()
        thread.join(DEADLINE_S)

        rc = RedisCluster(host=first.host, port=first.shard_port(0), decode_responses=True)
        assert_none_lost(rc, acked)
        delivered = {}
        for q in queues:
            for task_id, queue, payload, _ in rc.execute_command("TASK.FETCH", q, "COUNT", 100):
                delivered[task_id] = queue
                assert rc.execute_command("TASK.ACK", task_id) == "OK"
        assert delivered == submitted

        # Every node holds the same copy of each group.
        for shard in range(2):
            copies = []
            for node in g.nodes:
                g.caught_up(node, shard)
                copies.append(sorted(node.client(port=node.shard_port(shard)).keys("*")))
            assert copies[0] == copies[1] == copies[2] and copies[0], shard
        print(f"two groups led by nodes {first.id} and {second.id}; {len(acked)} writes "
              f"acknowledged through two leader kills, 0 lost; {len(submitted)} tasks delivered")
    finally:
        g.stop()


def value(i):
    return f"{i}:" + "x" * 100


def fill(client, keys):
    """SETs key:0 … key:{keys-1} (about 110 bytes each), 100 to a pipeline."""
    for start in range(0, keys, 100):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(start + 100, keys)):
            pipe.set(f"key:{i}", value(i))
        assert all(pipe.execute())


def test_snapshots_compact_the_log_and_catch_up_a_follower_behind_it():
    """With a 32 KiB snapshot threshold, writes make several snapshots and compactions; a
    follower killed before them comes back behind the compacted log, is sent the leader's
    snapshot, and ends up with every key and task. A node restarted after compactions
    loads its snapshot and the log after it."""
    group = Group(snapshot_log_bytes=32768)
    try:
        leader = group.leader()
        late = next(n for n in group.nodes if n is not leader)
        late.kill()
        c = leader.client()
        fill(c, 2000)
        assert c.execute_command("TASK.WORKER", "w1") == "OK"
        for i in range(30):
            c.execute_command("TASK.SUBMIT", "jobs", f"job{i}")
        held = c.execute_command("TASK.FETCH", "jobs", "COUNT", 5, "LEASE", 600000)
        assert len(held) == 5
        state = leader.consensus()
        assert int(state["snapshots_made"]) >= 3, state
        assert int(state["snapshot_index"]) > 0, state
        # The log holds only what followed the last snapshot (a snapshot folds it once it
        # passes 32 KiB; one may be on its way).
        assert int(state["log_bytes"]) < 4 * 32768, state
        assert os.path.exists(os.path.join(leader.dir, "raft", "raft-0.snapshot"))

        late.start()
        group.caught_up(late)
        assert int(late.consensus()["snapshots_installed"]) >= 1, late.consensus()
        assert int(leader.consensus()["snapshots_sent"]) >= 1, leader.consensus()
        # It was streamed to a file of its own, then renamed into place: none is left over.
        raft_dir = os.path.join(late.dir, "raft")
        assert [f for f in os.listdir(raft_dir) if f.endswith(".incoming")] == []

        def contents(node):
            r = node.client()
            r.execute_command("READONLY")
            stats = r.execute_command("TASK.STATS", "jobs")
            stats = stats if isinstance(stats, dict) else dict(zip(stats[0::2], stats[1::2]))
            values = r.mget([f"key:{i}" for i in range(0, 2000, 7)])
            return r.dbsize(), int(stats["queued"]), int(stats["leased"]), values

        expected = contents(leader)
        assert expected[:3] == (2000, 25, 5), expected[:3]
        assert expected[3] == [value(i) for i in range(0, 2000, 7)]
        assert contents(late) == expected

        # Every node restarts from its snapshot and the log after it.
        for node in group.nodes:
            node.kill()
        for node in group.nodes:
            node.start()
        new = group.leader()
        for node in group.nodes:
            group.caught_up(node)
            assert contents(node) == expected
        n = new.client()
        assert n.execute_command("TASK.WORKER", "w1") == "OK"
        assert n.execute_command("TASK.ACK", held[0][0]) == "OK"
    finally:
        group.stop()


def fn_library(name):
    return (f"#!lua name={name}\n"
            f"redis.register_function('{name}_set', function(keys, args) "
            f"return redis.call('SET', keys[1], args[1]) end)")


def library_names(client):
    return sorted(dict(zip(entry[0::2], entry[1::2]))["library_name"]
                  for entry in client.function_list())


def test_function_libraries_go_through_the_metadata_groups_log():
    """FUNCTION LOAD, DELETE, FLUSH and RESTORE run on group 0's leader and its log carries
    the libraries: followers refuse them and get them, a follower behind the compacted log
    gets them in the leader's snapshot, a new leader runs FCALL, and every node restarts
    with them. With two shards they go to shard 0's port only."""
    group = Group(snapshot_log_bytes=32768, shards=2)
    try:
        leader = group.leader(shard=0)
        late = next(n for n in group.nodes if n is not leader)
        follower = next(n for n in group.nodes if n not in (leader, late))
        c = leader.client(port=leader.shard_port(0))
        with pytest.raises(redis.ResponseError, match="metadata group"):
            leader.client(port=leader.shard_port(1)).function_load(fn_library("nope"))
        with pytest.raises(redis.exceptions.ReadOnlyError):
            follower.client(port=follower.shard_port(0)).function_load(fn_library("nope"))

        assert c.function_load(fn_library("first")) == "first"
        assert c.function_load(fn_library("second")) == "second"
        # Acknowledged means committed: the follower applies it within its next turns.
        wait_for(lambda: library_names(follower.client()) == ["first", "second"],
                 "the follower's libraries")
        late.kill()
        assert c.function_delete("first")
        dump = c.function_dump()
        assert c.function_flush()
        assert c.function_restore(dump)
        assert c.function_load(fn_library("third")) == "third"
        tag = next(f"t{i}" for i in range(1000) if shard_of_name(c, f"t{i}", 2) == 0)
        for start in range(0, 2000, 100):
            pipe = c.pipeline(transaction=False)
            for i in range(start, start + 100):
                pipe.set(f"{{{tag}}}:{i}", value(i))
            assert all(pipe.execute())
        assert int(leader.consensus(0)["snapshots_made"]) >= 1, leader.consensus(0)

        late.start()
        group.caught_up(late, shard=0)
        assert int(late.consensus(0)["snapshots_installed"]) >= 1, late.consensus(0)
        expected = ["second", "third"]
        assert library_names(late.client()) == expected
        assert library_names(follower.client()) == expected

        leader.kill()
        new = group.leader(exclude=leader, shard=0)
        assert new.client(port=new.shard_port(0)).fcall("third_set", 1, f"{{{tag}}}:fn", "v")
        leader.start()
        for node in group.nodes:
            node.kill()
        for node in group.nodes:
            node.start()
        group.leader(shard=0)
        for node in group.nodes:
            group.caught_up(node, shard=0)
            assert library_names(node.client()) == expected
    finally:
        group.stop()


def members(node):
    """RAFT MEMBERS as {id: role}."""
    return {int(row[0]): row[3] for row in node.client().execute_command("RAFT", "MEMBERS")}


def next_message(pubsub, deadline_s=DEADLINE_S):
    """The next message (or pmessage) `pubsub` receives, waiting up to the deadline."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        got = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.2)
        if got:
            return got
    raise AssertionError("no message arrived")


def test_publish_reaches_the_subscribers_of_every_node():
    """As Redis Cluster's bus carries a PUBLISH to every node, a PUBLISH on any member
    (leader or follower) reaches the subscribers of every member, on every shard, patterns
    included, once each; its count is the publishing node's own subscribers, as Redis
    Cluster's is. Before, a subscriber on another node than the publisher's heard nothing:
    a cluster client subscribes on the channel's slot owner and publishes anywhere."""
    g = Group(shards=2)
    try:
        channel = f"news:{random.randrange(10**9)}"
        subscribers = []
        for node in g.nodes:
            for shard in (0, 1):
                pubsub = node.client(port=node.shard_port(shard)).pubsub()
                pubsub.subscribe(channel)
                subscribers.append((node, pubsub))
        patterned = g.nodes[2].client().pubsub()
        patterned.psubscribe("news:*")
        for _, pubsub in subscribers:
            assert pubsub.get_message(timeout=DEADLINE_S)["type"] == "subscribe"
        assert patterned.get_message(timeout=DEADLINE_S)["type"] == "psubscribe"
        for n, publisher in enumerate(g.nodes):
            message = f"m{n}"
            local = sum(1 for node, _ in subscribers if node is publisher)
            local += publisher is g.nodes[2]
            assert publisher.client().publish(channel, message) == local
            for node, pubsub in subscribers:
                got = next_message(pubsub)
                assert (got["type"], got["channel"], got["data"]) == ("message", channel, message), (
                    f"node {node.id}'s subscriber, published on node {publisher.id}")
            got = next_message(patterned)
            assert (got["type"], got["channel"], got["data"]) == ("pmessage", channel, message)
        for _, pubsub in subscribers + [(None, patterned)]:
            assert pubsub.get_message(timeout=0.3) is None, "each message arrives once"
        relayed = [int(node.client().info("stats")["pubsub_relayed"]) for node in g.nodes]
        assert relayed == [2, 2, 2], relayed
    finally:
        g.stop()


def test_a_node_joins_and_a_member_leaves_while_the_group_serves():
    """RAFT ADD brings a node started with --raft-join into the group: it catches up from
    the leader's snapshot (the group's empty start, or a real one) and its log, and
    counts in the quorum. RAFT TRANSFER moves the leadership; RAFT REMOVE takes a member
    out, and the group goes on without it. Refusals answer clear errors."""
    group = Group(snapshot_log_bytes=32768)
    try:
        leader = group.leader()
        c = leader.client()
        fill(c, 500)
        c.execute_command("TASK.SUBMIT", "jobs", "before")
        assert members(leader) == {1: "follower", 2: "follower", 3: "follower", leader.id: "leader"}
        # A writer runs through every change; what it was told is written must be on
        # every member at the end.
        acked, stop, thread = start_writer(group)

        joiner = group.join(4, "127.0.0.4")
        # Outside the group, it serves nothing and does not campaign.
        assert members(joiner) == {}
        follower = next(n for n in group.nodes[:3] if n is not leader)
        with pytest.raises(redis.ResponseError, match="does not lead its group; its leader is"):
            follower.client().execute_command("RAFT", "ADD", 4, group.address("127.0.0.4"))
        assert c.execute_command("RAFT", "ADD", 4, group.address("127.0.0.4")) == "OK"
        # It joins as a learner; the leader makes it a voter once it has caught up.
        assert members(leader)[4] in ("learner", "follower")
        with pytest.raises(redis.ResponseError, match="a member already"):
            c.execute_command("RAFT", "ADD", 4, group.address("127.0.0.4"))
        wait_for(lambda: members(leader)[4] == "follower", "node 4 promoted to a voter")
        group.caught_up(joiner)
        assert int(joiner.consensus()["snapshots_installed"]) >= 1, joiner.consensus()
        assert members(joiner)[4] == "follower"
        assert set(members(joiner)) == {1, 2, 3, 4}
        assert set(members(leader)) == {1, 2, 3, 4}
        slots = c.execute_command("CLUSTER", "SLOTS")
        assert len(slots[0]) == 2 + 4, slots
        r = joiner.client()
        r.execute_command("READONLY")
        assert r.mget([f"key:{i}" for i in range(500)]) == [value(i) for i in range(500)]

        # With four voters a quorum is three: the new member counts. Writes go on
        # through a leader change and a transfer of the leadership to the new member.
        writer = Follower(group)
        ok, _ = writer.call("SET", "after-join", "1")
        assert ok
        leader.kill()
        new = group.leader(exclude=leader)
        ok, _ = writer.call("SET", "after-kill", "1")
        assert ok
        n = new.client()
        if new is not joiner:
            assert n.execute_command("RAFT", "TRANSFER", 4) == "OK"
            wait_for(lambda: (joiner.consensus() or {}).get("role") == "leader",
                     "the leadership to move to node 4")
            new = joiner
            n = new.client()
        with pytest.raises(redis.ResponseError, match="move the leadership first"):
            n.execute_command("RAFT", "REMOVE", new.id)
        # The killed node leaves the group; the rest go on as three.
        assert n.execute_command("RAFT", "REMOVE", leader.id) == "OK"
        assert set(members(new)) == {1, 2, 3, 4} - {leader.id}
        with pytest.raises(redis.ResponseError, match="at least 3 voters"):
            n.execute_command("RAFT", "REMOVE", next(x.id for x in group.nodes
                                                       if x is not new and x is not leader))
        ok, _ = writer.call("SET", "after-remove", "1")
        assert ok
        wait_for(lambda: len(acked) > 100, "the writer's acknowledgements")
        stop.set()
        thread.join(DEADLINE_S)
        assert n.execute_command("TASK.SUBMIT", "jobs", "after") is not None
        for node in group.nodes:
            if node is not leader:
                group.caught_up(node)
                reader = node.client()
                reader.execute_command("READONLY")
                assert reader.mget("after-join", "after-kill", "after-remove") == ["1", "1", "1"]
                keys = sorted(acked)
                assert reader.mget(keys) == [acked[k] for k in keys], f"node {node.id} lost writes"
                assert set(members(node)) == {1, 2, 3, 4} - {leader.id}
        stats = n.execute_command("TASK.STATS", "jobs")
        stats = stats if isinstance(stats, dict) else dict(zip(stats[0::2], stats[1::2]))
        assert int(stats["queued"]) == 2
        with pytest.raises(redis.ResponseError, match="unknown RAFT subcommand"):
            n.execute_command("RAFT", "FROB")
    finally:
        group.stop()


def test_a_learner_does_not_count_in_the_quorum():
    """RAFT ADD of a node that never comes: it stays a learner (it never catches up), so
    the quorum is still 2 of the 3 voters, and the group writes on with one voter killed;
    as a voter at once it would have made the quorum 3 of 4, two of them down. RAFT
    REMOVE takes the learner out."""
    group = Group()
    try:
        leader = group.leader()
        c = leader.client()
        # Nothing listens at 127.0.0.9 (the group's port plan, on an address of its own).
        assert c.execute_command("RAFT", "ADD", 9, group.address("127.0.0.9")) == "OK"
        assert members(leader) == {1: "follower", 2: "follower", 3: "follower", 9: "learner",
                                   leader.id: "leader"}
        assert c.info("consensus")["raft_learners"] == 1
        down = next(n for n in group.nodes if n is not leader)
        down.kill()
        # Straight to the leader (a client that tried the killed node first could find its
        # listener half torn down and call the outcome unknown): the write must commit
        # with the two voters left, within the client's time-out.
        assert c.set("with-a-learner", "1") is True
        assert members(leader)[9] == "learner"
        with pytest.raises(redis.ResponseError, match="not another member"):
            c.execute_command("RAFT", "TRANSFER", 9)
        assert c.execute_command("RAFT", "REMOVE", 9) == "OK"
        assert 9 not in members(leader)
        assert c.set("without-it", "1") is True
    finally:
        group.stop()


def raft_members(node, shard, voters=False):
    """RAFT MEMBERS of `shard`'s group on `node`, as a set of ids (`voters`: learners left
    out)."""
    rows = node.client(port=node.shard_port(shard)).execute_command("RAFT", "MEMBERS")
    return {int(row[0]) for row in rows if not voters or row[3] != "learner"}


def test_group_0_holds_the_members_and_every_other_group_follows_them():
    """With --shards 2, group 0 is the metadata group: RAFT ADD and REMOVE go to its leader
    (at shard 0's port; elsewhere they are refused, and RAFT on the shared port too, whose
    connection lands on any shard), and group 1's leader follows its members by itself: the
    joining node is added there and catches up, and a removed member that leads group 1
    hands that leadership over and leaves. A writer runs throughout; nothing it was told is
    written is lost."""
    group = Group(shards=2)
    try:
        first = group.nodes[0]
        for shard in range(2):
            group.leader(shard=shard)
        rc = RedisCluster(host=first.host, port=first.port, decode_responses=True)
        names = [f"j:{random.randrange(10**12)}:{i}" for i in range(200)]
        for i, name in enumerate(names):
            assert rc.set(name, value(i)) is True
        acked, stop, thread = start_writer(group)
        joiner = group.join(4, "127.0.0.4")
        shared = redis.Redis(host=first.host, port=group.port, decode_responses=True)
        with pytest.raises(redis.ResponseError, match="send RAFT to the shard's port"):
            shared.execute_command("RAFT", "MEMBERS")
        lead1 = group.leader(shard=1)
        with pytest.raises(redis.ResponseError, match="group 0 holds the cluster's members"):
            lead1.client(port=lead1.shard_port(1)).execute_command("RAFT", "ADD", 4, group.address("127.0.0.4"))
        lead0 = group.leader(shard=0)
        assert lead0.client().execute_command("RAFT", "ADD", 4, group.address("127.0.0.4")) == "OK"
        for shard in range(2):
            wait_for(lambda: raft_members(group.leader(shard=shard), shard, voters=True)
                     == {1, 2, 3, 4}, f"node 4 a voter in group {shard}")
            group.caught_up(joiner, shard)
            assert raft_members(joiner, shard) == {1, 2, 3, 4}
        for shard in range(2):
            r = joiner.client(port=joiner.shard_port(shard))
            r.execute_command("READONLY")
            mine = [i for i, name in enumerate(names) if shard_of_name(r, name, 2) == shard]
            assert mine and r.mget([names[i] for i in mine]) == [value(i) for i in mine]

        # Group 0 removes a founding member that leads group 1 (not group 0's leader).
        lead0 = group.leader(shard=0)
        leaving = next(n for n in group.nodes[:3] if n is not lead0)
        lead1 = group.leader(shard=1)
        if lead1 is not leaving:
            lead1.client(port=lead1.shard_port(1)).execute_command("RAFT", "TRANSFER", leaving.id)
            wait_for(lambda: group.leader(shard=1) is leaving, "group 1 led by the leaving node")
        assert lead0.client().execute_command("RAFT", "REMOVE", leaving.id) == "OK"
        staying = {1, 2, 3, 4} - {leaving.id}
        wait_for(lambda: raft_members(group.leader(shard=1, exclude=leaving), 1) == staying,
                 "group 1 to follow the removal")
        wait_for(lambda: (leaving.consensus(1) or {}).get("role") != "leader",
                 "the removed node to hand group 1's leadership over")
        wait_for(lambda: len(acked) > 100, "the writer's acknowledgements")
        stop.set()
        thread.join(DEADLINE_S)
        rc = RedisCluster(host=lead0.host, port=lead0.port, decode_responses=True)
        keys = list(acked)
        got = rc.mget_nonatomic(keys)
        assert [k for k, v in zip(keys, got) if v != acked[k]] == []
    finally:
        group.stop()


def test_a_node_without_the_groups_secret_is_not_heard_and_hears_nothing():
    """Every Raft link opens with the group's secret (--raft-auth); a node started with
    another one is cut off both ways, and catches up once restarted with the right one."""
    group = Group()
    try:
        leader = group.leader()
        outsider = next(n for n in group.nodes if n is not leader)
        outsider.kill()
        outsider.auth = "not-the-secret"
        outsider.start()
        wait_for(lambda: any("without this group's hello or secret" in line for line in outsider.log),
                 "the outsider to drop a member's link")
        wait_for(lambda: any("without this group's hello or secret" in line
                             for n in group.nodes if n is not outsider for line in n.log),
                 "a member to drop the outsider's link")
        c = group.leader().client()
        assert c.set("secret-write", "1")
        r = outsider.client()
        r.execute_command("READONLY")
        for _ in range(50):
            assert r.get("secret-write") is None
            time.sleep(0.01)
        outsider.kill()
        outsider.auth = None
        outsider.start()
        group.caught_up(outsider)
        r = outsider.client()
        r.execute_command("READONLY")
        assert r.get("secret-write") == "1"
    finally:
        group.stop()


def test_raft_is_refused_clearly_without_consensus_mode(server):
    r = redis.Redis(port=server.port, decode_responses=True)
    with pytest.raises(redis.ResponseError, match="consensus mode is off"):
        r.execute_command("RAFT", "MEMBERS")
    assert r.execute_command("RAFT", "HELP")[0].startswith("RAFT <subcommand>")


def test_a_deposed_leader_leaves_the_leases_of_its_closing_connections_to_the_group(group):
    """A plain connection's lease, taken on a leader that is then deposed: when that
    connection closes on the old leader, now a follower, the lease stays (the group's
    leader settles it, by its deadline); releasing it there made that copy differ from
    the others for good (a bug this test found)."""
    leader = group.leader()
    worker = leader.client()
    worker.execute_command("TASK.SUBMIT", "q", "job")
    assert len(worker.execute_command("TASK.FETCH", "q", "LEASE", 600000)) == 1
    leader.pause()
    group.leader(exclude=leader)
    leader.resume()
    wait_for(lambda: (leader.consensus() or {}).get("role") == "follower",
             "the old leader to follow")
    watcher = leader.client()
    before = int(watcher.info("clients")["connected_clients"])
    worker.close()
    wait_for(lambda: int(watcher.info("clients")["connected_clients"]) == before - 1,
             "the worker's connection to close on the old leader")

    def stats(node):
        r = node.client()
        r.execute_command("READONLY")
        flat = r.execute_command("TASK.STATS", "q")
        s = flat if isinstance(flat, dict) else dict(zip(flat[0::2], flat[1::2]))
        return int(s["queued"]), int(s["leased"])

    new = group.leader()
    assert new.client().set("after", "1")
    for node in group.nodes:
        group.caught_up(node)
        assert stats(node) == (0, 1), f"node {node.id}"


def test_commands_blocked_on_a_leader_that_is_deposed_end_with_unblocked(group):
    """BLPOP … 0, TASK.FETCH … BLOCK 0 and TASK.WAIT on a leader that loses its leadership
    end with Redis's UNBLOCKED error instead of waiting forever on a node that no longer
    serves them; the client goes on at the new leader."""
    leader = group.leader()
    c = leader.client()
    task = c.execute_command("TASK.SUBMIT", "other", "job")
    blocked = {}

    def block(name, *command):
        try:
            blocked[name] = leader.client(timeout=60).execute_command(*command)
        except redis.ResponseError as e:
            blocked[name] = e

    threads = [threading.Thread(target=block, args=args, daemon=True) for args in [
        ("blpop", "BLPOP", "list", 0),
        ("fetch", "TASK.FETCH", "q", "BLOCK", 0),
        ("wait", "TASK.WAIT", task),
    ]]
    for t in threads:
        t.start()
    wait_for(lambda: int(c.info("clients")["blocked_clients"]) >= 1
             and sum(1 for line in c.execute_command("CLIENT", "LIST").splitlines()
                     if "cmd=task.fetch" in line or "cmd=task.wait" in line) == 2,
             "the three commands to block")
    leader.pause()
    new = group.leader(exclude=leader)
    leader.resume()
    for t in threads:
        t.join(DEADLINE_S)
    for name in ("blpop", "fetch", "wait"):
        assert isinstance(blocked.get(name), redis.ResponseError), (name, blocked.get(name))
        assert "instance state changed" in str(blocked[name]), blocked[name]
    n = new.client()
    n.execute_command("TASK.SUBMIT", "q", "at-the-new-leader")
    assert len(n.execute_command("TASK.FETCH", "q", "BLOCK", 1000)) == 1
    # The next blocking command on the old node starts clean (it redirects now).
    with pytest.raises(redis.exceptions.MovedError):
        leader.client().execute_command("BLPOP", "list", 0.1)


@pytest.mark.parametrize("shards", [1, 2], ids=["one-group", "two-groups"])
def test_a_register_under_kills_pauses_and_partitions_is_linearizable(shards):
    """Three clients write unique values to a register per group and read them while the
    nemesis kills, pauses and cuts off leaders; the WGL search must find a legal order of
    each register's history. After a pause or a cut, a write the new leader acknowledged is
    followed by a read sent to the old leader, which must not answer the old value. With
    two shards, each group has its register, and the rounds take each group's leader in
    turn (a node cut off or paused stops every group it is in)."""
    # Small snapshots: the nemesis also meets compactions, snapshots sent to a node that
    # was cut off, and rebuilds from a snapshot.
    group = Group(partitionable=True, snapshot_log_bytes=4096, shards=shards)
    try:
        run_register_nemesis(group, shards)
    finally:
        group.stop()


def register_names(group, shards):
    """A register name in each group, in shard order."""
    c = group.leader().client()
    names = {}
    for i in range(1000):
        name = f"register-{i}"
        names.setdefault(shard_of_name(c, name, shards), name)
        if len(names) == shards:
            return [names[s] for s in range(shards)]
    raise AssertionError("no register name for every group")


def run_register_nemesis(group, shards):
    """The nemesis's rounds (a kill, a pause, a cut, each group's leader in turn) under the
    register clients, then the checks."""
    registers = register_names(group, shards)
    histories = [History() for _ in registers]
    stop = threading.Event()
    rng = random.Random(7)

    def client(process):
        # A connection per group: each stays with its group's leader.
        followers = [Follower(group, timeout=1) for _ in registers]
        n = 0
        while not stop.is_set() and n < 1500 * max(1, NEMESIS_ROUNDS // 6):
            n += 1
            which = rng.randrange(shards)
            f, history, register = followers[which], histories[which], registers[which]
            if rng.random() < 0.5:
                value = f"{process}-{n}"
                op = history.invoke(process, "write", value)
                ok, _ = f.call("SET", register, value, deadline_s=10)
            else:
                op = history.invoke(process, "read", None)
                ok, value = f.call("GET", register, deadline_s=10)
            history.complete(op, value if ok else None, ok=bool(ok))

    def read_from(node, process, shard):
        op = histories[shard].invoke(process, "read", None)
        try:
            value = node.client(timeout=10, port=node.shard_port(shard)).get(registers[shard])
            histories[shard].complete(op, value, ok=True)
        except (redis.ConnectionError, redis.ResponseError, redis.TimeoutError):
            histories[shard].complete(op, None, ok=False)

    def acknowledged_write(round_, leader, shard):
        writer = Follower(group, timeout=1)
        writer.node, writer.port = leader, leader.shard_port(shard)
        for attempt in range(20):
            value = f"nemesis-{round_}-{attempt}"
            op = histories[shard].invoke(99, "write", value)
            ok, _ = writer.call("SET", registers[shard], value)
            histories[shard].complete(op, None, ok=bool(ok))
            if ok:
                return
        states = {n.id: n.consensus(shard) for n in group.nodes}
        logs = {n.id: "".join(n.log[-6:]) for n in group.nodes}
        raise AssertionError(f"round {round_}: no write acknowledged; {states}; {logs}")

    threads = [threading.Thread(target=client, args=(p,), daemon=True) for p in range(3)]
    for t in threads:
        t.start()
    for round_ in range(NEMESIS_ROUNDS):
        time.sleep(0.3)
        shard = round_ % shards
        leader = group.leader(shard=shard)
        kind = (round_ // shards) % 3
        if kind == 0:
            leader.kill()
            group.leader(exclude=leader, shard=shard)
            leader.start()
        elif kind == 1:
            leader.pause()
            acknowledged_write(round_, group.leader(exclude=leader, shard=shard), shard)
            # Sent to the paused node, which wakes cut off, so believing it still leads
            # (its clock stood still and no newer term can reach it): it must not answer.
            group.isolate(leader)
            stale = threading.Thread(target=read_from, args=(leader, 100 + round_, shard),
                                     daemon=True)
            stale.start()
            time.sleep(0.05)
            leader.resume()
            stale.join(DEADLINE_S)
            group.heal()
        else:
            group.isolate(leader)
            acknowledged_write(round_, group.leader(exclude=leader, shard=shard), shard)
            # Sent to the cut-off node, which may still believe it leads.
            read_from(leader, 100 + round_, shard)
            group.heal()
    time.sleep(0.3)
    stop.set()
    for t in threads:
        t.join(DEADLINE_S)
    summary = []
    for shard, (register, history) in enumerate(zip(registers, histories)):
        ops = history.ops()
        completed = sum(1 for o in ops if o.ok)
        assert completed > 50 // shards, "the clients got too few replies to judge"
        # No node kept a write the others do not have.
        values = set()
        for node in group.nodes:
            group.caught_up(node, shard)
            reader = node.client(port=node.shard_port(shard))
            assert reader.execute_command("READONLY") in (True, "OK")
            values.add(reader.get(register))
        assert len(values) == 1, values
        ok, detail = check_register(ops)
        summary.append(f"group {shard}: {len(ops)} operations, {completed} answered, "
                       f"linearizable={ok}")
        assert ok, detail
    states = [node.consensus(s) for node in group.nodes for s in range(shards)]
    made = sum(int(state["snapshots_made"]) for state in states)
    installed = sum(int(state["snapshots_installed"]) for state in states)
    rebuilds = sum(int(state["rebuilds"]) for state in states)
    assert made > 0, states
    print(f"{'; '.join(summary)}; snapshots made {made}, installed {installed}; "
          f"rebuilds {rebuilds}")


def test_bad_consensus_options_are_refused_with_a_clear_error():
    d = tempfile.mkdtemp(prefix="wetask-raftbad-")
    try:
        for args, error in [
            (["--shards", "1", "--raft-id", "4", "--raft-peers", "1=a:1,2=b:2,3=c:3"], "does not name"),
            (["--shards", "1", "--raft-id", "1", "--raft-peers", "1=a:1,2=b:2"], "3 to 7"),
            (["--shards", "1", "--raft-id", "1", "--raft-peers", "1=a:1,2=b:x,3=c:3"], "not a port"),
        ]:
            out = subprocess.run([BINARY, "--port", "0", "--dir", d, "--consensus", "raft", *args],
                                 capture_output=True, text=True, timeout=30)
            assert out.returncode != 0 and error in out.stdout + out.stderr, (args, out)
        out = subprocess.run([BINARY, "--port", "0", "--dir", d, "--consensus", "paxos"],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode != 0 and "not 'raft'" in out.stderr
    finally:
        shutil.rmtree(d, ignore_errors=True)
