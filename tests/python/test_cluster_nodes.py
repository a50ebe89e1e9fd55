"""Several WeTask processes as one Redis Cluster (docs/CLUSTER.md, "Several nodes"): three
processes of two shards each, on 127.0.0.1, .2 and .3, are six primaries to
`redis-cli --cluster create`. Then redis-py's RedisCluster writes random keys, `redis-cli
--cluster reshard` moves slots while writers run, and `rebalance` moves them back; every
acknowledged write is read back afterwards. Bad input (a wrong slot, a SETSLOT on a slot
the node does not own, a MIGRATE to a dead port) gets a clear error and loses nothing.

Every wait is bounded: a poll with a deadline, never a bare sleep."""

import json
import os
import random
import shutil
import socket
import string
import subprocess
import threading
import time

import pytest
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from conftest import TARGET, Server
from test_client_bullmq import check_100_jobs

HOSTS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]


def addresses(servers):
    return [f"{host}:{port}" for host, srv in zip(HOSTS, servers) for port in srv.shard_ports]


def node_client(address):
    host, port = address.rsplit(":", 1)
    return redis.Redis(host=host, port=int(port), socket_timeout=10, decode_responses=True)


def raw_connection(node):
    """One connection of its own, for commands whose order on it matters (ASKING, MULTI)."""
    return redis.Connection(host=node.host, port=node.port, decode_responses=True)


def command(connection, *args):
    connection.send_command(*args)
    return connection.read_response()


def wait_until(what, check, seconds=30):
    deadline = time.monotonic() + seconds
    while True:
        last = check()
        if last:
            return last
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def cluster_info(address):
    text = node_client(address).execute_command("CLUSTER", "INFO")
    return dict(line.split(":", 1) for line in text.split() if ":" in line)


def redis_cli(*args, timeout=240):
    done = subprocess.run(
        ["redis-cli", *args], capture_output=True, text=True, timeout=timeout
    )
    return done.returncode, done.stdout + done.stderr


def names(rng, prefix, count):
    out = set()
    while len(out) < count:
        out.add(prefix + "".join(rng.choices(string.ascii_letters + string.digits, k=rng.randint(1, 12))))
    return sorted(out)


@pytest.fixture(scope="module")
def cluster():
    servers = [
        Server("--bind", host, "--shards", "2", "--cluster-enabled", "yes", "--cluster-self-assign", "no",
               "--appendonly", "no")
        for host in HOSTS
    ]
    try:
        addrs = addresses(servers)
        # A fresh node knows only itself and owns nothing, as redis-cli requires.
        for address in addrs:
            info = cluster_info(address)
            assert info["cluster_known_nodes"] == "1", info
            assert info["cluster_slots_assigned"] == "0", info
        code, out = redis_cli("--cluster", "create", *addrs, "--cluster-yes")
        assert code == 0, out
        assert "[OK] All 16384 slots covered" in out, out
        for address in addrs:
            wait_until(
                f"{address} to know every node",
                lambda: cluster_info(address)["cluster_known_nodes"] == "6"
                and cluster_info(address)["cluster_state"] == "ok",
            )
        yield servers, addrs
    finally:
        for srv in servers:
            srv.stop()


def test_redis_cli_builds_and_checks_a_cluster_of_processes(cluster):
    servers, addrs = cluster
    code, out = redis_cli("--cluster", "check", addrs[3])
    assert code == 0, out
    assert "[OK] All nodes agree about slots configuration." in out, out
    # Each shard is a primary of its own, with its own range, on its own port.
    nodes = node_client(addrs[0]).execute_command("CLUSTER", "NODES")
    lines = [line.split() for line in nodes.splitlines()]
    assert len(lines) == 6
    assert {line[1].split("@")[0] for line in lines} == set(addrs)
    assert all("master" in line[2] for line in lines)
    # The shared port of each process answers MOVED for the slots it does not serve.
    shared = redis.Redis(host=HOSTS[0], port=servers[0].port)
    rc = RedisCluster(host=HOSTS[0], port=servers[0].shard_ports[0])
    try:
        elsewhere = next(k for k in (f"probe{i}" for i in range(1000))
                         if rc.get_node_from_key(k).host != HOSTS[0])
        with pytest.raises(redis.exceptions.MovedError):
            shared.get(elsewhere)
    finally:
        rc.close()


def test_a_cluster_client_writes_everywhere_and_reads_it_all_back(cluster):
    servers, addrs = cluster
    rng = random.Random(3501)
    rc = RedisCluster(host=HOSTS[1], port=servers[1].shard_ports[1])
    try:
        assert len(rc.get_primaries()) == 6
        keys = names(rng, "w:", 400)
        for key in keys:
            assert rc.set(key, key[::-1])
        assert all(rc.get(key) == key[::-1].encode() for key in keys)
        # Every process holds a share.
        held = {host: 0 for host in HOSTS}
        for address in addrs:
            held[address.split(":")[0]] += node_client(address).dbsize()
        assert all(count > 0 for count in held.values()), held
        # Keys of one hash tag go to one node, multi-key commands included.
        assert rc.mset({"{tag}a": "1", "{tag}b": "2"})
        assert rc.mget("{tag}a", "{tag}b") == [b"1", b"2"]
        # A task goes to its queue's node, and a worker there leases it.
        for queue in names(rng, "q:", 12):
            target = rc.get_node_from_key(queue)
            task = rc.execute_command("TASK.SUBMIT", queue, "job", target_nodes=target)
            leased = rc.execute_command("TASK.FETCH", queue, target_nodes=target)
            assert leased and leased[0][0] == task, leased
    finally:
        rc.close()


class Writer(threading.Thread):
    """SETs unique keys through a RedisCluster until told to stop (bounded by count and
    time), remembering each acknowledged one."""

    def __init__(self, host, port, seed):
        super().__init__(daemon=True)
        self.rc = RedisCluster(host=host, port=port)
        self.prefix = f"load{seed}:"
        self.acked = {}
        self.errors = []
        self.stop = threading.Event()

    def run(self):
        deadline = time.monotonic() + 120
        i = 0
        while not self.stop.is_set() and i < 200_000 and time.monotonic() < deadline:
            key, value = f"{self.prefix}{i}", f"v{i}"
            try:
                if self.rc.set(key, value):
                    self.acked[key] = value
                # Overwrite an earlier key now and then: an update in flight must not be lost.
                if i % 7 == 0 and i:
                    old = f"{self.prefix}{i // 2}"
                    if self.rc.set(old, f"u{i}"):
                        self.acked[old] = f"u{i}"
            except Exception as e:  # noqa: BLE001 - counted, the test fails on them
                self.errors.append(repr(e))
            i += 1
        self.rc.close()


# Slots the reshard moves (the rebalance then moves about as many back): each costs the
# debug build about 0.1 s a move, so the suite moves 120 (it took 68 s with 300, the
# suite's longest test); `make chaos` moves more.
RESHARD_SLOTS = int(os.environ.get("WETASK_CHAOS_RESHARD_SLOTS", "120"))


def test_reshard_and_rebalance_under_writers_lose_no_acknowledged_write(cluster):
    servers, addrs = cluster
    writers = [Writer(HOSTS[i % 3], servers[i % 3].shard_ports[i % 2], i) for i in range(2)]
    for w in writers:
        w.start()
    try:
        wait_until("the writers to start", lambda: all(len(w.acked) > 50 for w in writers))
        source = node_client(addrs[0]).execute_command("CLUSTER", "MYID")
        target = node_client(addrs[5]).execute_command("CLUSTER", "MYID")
        code, out = redis_cli("--cluster", "reshard", addrs[2], "--cluster-from", source,
                              "--cluster-to", target, "--cluster-slots", str(RESHARD_SLOTS), "--cluster-yes")
        assert code == 0, out
        assert "ERR" not in out, out
        code, out = redis_cli("--cluster", "rebalance", addrs[1], "--cluster-threshold", "1")
        assert code == 0, out
    finally:
        for w in writers:
            w.stop.set()
        for w in writers:
            w.join(timeout=60)
    assert all(not w.errors for w in writers), [w.errors[:3] for w in writers]
    code, out = redis_cli("--cluster", "check", addrs[4])
    assert code == 0 and "[OK] All 16384 slots covered." in out, out
    assert "[OK] All nodes agree about slots configuration." in out, out
    # The target took slots: it owns more than its sixth before rebalance evened it out,
    # and every acknowledged write reads back, wherever its slot went.
    rc = RedisCluster(host=HOSTS[2], port=servers[2].shard_ports[0])
    try:
        total = 0
        for w in writers:
            for key, value in w.acked.items():
                assert rc.get(key) == value.encode(), key
                total += 1
        assert total > 100
    finally:
        rc.close()


def test_bad_cluster_input_gets_clear_errors_and_loses_nothing(cluster):
    servers, addrs = cluster
    a = node_client(addrs[0])
    rc = RedisCluster(host=HOSTS[0], port=servers[0].shard_ports[0])
    try:
        mine = next(int(s) for s in range(16384) if rc.nodes_manager.get_node_from_slot(s).port == servers[0].shard_ports[0]
                    and rc.nodes_manager.get_node_from_slot(s).host == HOSTS[0])
        foreign = next(s for s in range(16384) if rc.nodes_manager.get_node_from_slot(s).host != HOSTS[0])
        key = next(k for k in (f"bad{i}" for i in range(100000)) if rc.keyslot(k) == mine)
        assert rc.set(key, "kept")
        # A key of another node's slot: MOVED to its owner.
        other = next(k for k in (f"o{i}" for i in range(100000)) if rc.keyslot(k) == foreign)
        with pytest.raises(redis.exceptions.MovedError) as moved:
            a.get(other)
        assert moved.value.slot_id == foreign
        # Keys of two slots on two nodes: CROSSSLOT.
        with pytest.raises(redis.exceptions.ClusterCrossSlotError):
            a.mget(key, other)
        # SETSLOT MIGRATING of a slot this node does not own.
        some_id = node_client(addrs[1]).execute_command("CLUSTER", "MYID")
        with pytest.raises(redis.exceptions.ResponseError, match=f"I'm not the owner of hash slot {foreign}"):
            a.execute_command("CLUSTER", "SETSLOT", foreign, "MIGRATING", some_id)
        with pytest.raises(redis.exceptions.ResponseError, match="I'm already the owner"):
            a.execute_command("CLUSTER", "SETSLOT", mine, "IMPORTING", some_id)
        with pytest.raises(redis.exceptions.ResponseError, match="Unknown node"):
            a.execute_command("CLUSTER", "SETSLOT", mine, "NODE", "f" * 40)
        with pytest.raises(redis.exceptions.ResponseError, match="still hold keys"):
            a.execute_command("CLUSTER", "SETSLOT", mine, "NODE", some_id)
        # A slot whose only key is in another database (SELECT works here; reshard moves
        # database 0): not given up either, rather than strand the key.
        empty = next(s for s in range(mine + 1, 16384) if rc.nodes_manager.get_node_from_slot(s).name
                     == rc.nodes_manager.get_node_from_slot(mine).name and a.execute_command("CLUSTER", "COUNTKEYSINSLOT", s) == 0)
        elsewhere = next(k for k in (f"db3-{i}" for i in range(100000)) if rc.keyslot(k) == empty)
        host, port = addrs[0].rsplit(":", 1)
        db3 = redis.Redis(host=host, port=int(port), db=3, decode_responses=True)
        assert db3.set(elsewhere, "in db 3")
        with pytest.raises(redis.exceptions.ResponseError, match="still hold keys"):
            a.execute_command("CLUSTER", "SETSLOT", empty, "NODE", some_id)
        assert db3.delete(elsewhere) == 1
        db3.close()
        with pytest.raises(redis.exceptions.ResponseError, match="already busy"):
            a.execute_command("CLUSTER", "ADDSLOTS", mine)
        with pytest.raises(redis.exceptions.ResponseError, match="out of range"):
            a.execute_command("CLUSTER", "ADDSLOTS", 16384)
        with pytest.raises(redis.exceptions.ResponseError, match="Invalid node address"):
            a.execute_command("CLUSTER", "MEET", "not-an-ip", 7000)
        with pytest.raises(redis.exceptions.ResponseError, match="config epoch"):
            a.execute_command("CLUSTER", "SET-CONFIG-EPOCH", 99)
        # MIGRATE to a port nobody listens on: an IOERR, and the key stays.
        dead = socket.socket()
        dead.bind(("127.0.0.1", 0))
        dead_port = dead.getsockname()[1]
        dead.close()
        with pytest.raises(redis.exceptions.ResponseError, match="IOERR"):
            a.execute_command("MIGRATE", "127.0.0.1", dead_port, key, 0, 500)
        assert a.get(key) == "kept"
        # MIGRATE of a missing key: NOKEY.
        assert a.execute_command("MIGRATE", "127.0.0.1", dead_port, key + "-missing", 0, 500) == "NOKEY"
        # The cluster is whole after all of it.
        code, out = redis_cli("--cluster", "check", addrs[0])
        assert code == 0 and "[OK] All nodes agree about slots configuration." in out, out
        assert rc.get(key) == b"kept"
    finally:
        rc.close()


def test_a_migrating_slot_answers_ask_and_the_importer_serves_after_asking(cluster):
    servers, addrs = cluster
    rc = RedisCluster(host=HOSTS[0], port=servers[0].shard_ports[0])
    try:
        src_node = rc.get_node(host=HOSTS[1], port=servers[1].shard_ports[0])
        dst_node = rc.get_node(host=HOSTS[2], port=servers[2].shard_ports[1])
        src, dst = node_client(f"{src_node.host}:{src_node.port}"), node_client(f"{dst_node.host}:{dst_node.port}")
        # A slot of the source that holds no key yet (the writers of the tests before wrote
        # everywhere), so that the two keys below are all it moves.
        slot = next(s for s in range(16384) if rc.nodes_manager.get_node_from_slot(s).name == src_node.name
                    and src.execute_command("CLUSTER", "COUNTKEYSINSLOT", s) == 0)
        here = next(k for k in (f"ask{i}" for i in range(100000)) if rc.keyslot(k) == slot)
        missing = next(k for k in (f"gone{i}" for i in range(100000)) if rc.keyslot(k) == slot)
        assert src.set(here, "1")
        src_id, dst_id = src.execute_command("CLUSTER", "MYID"), dst.execute_command("CLUSTER", "MYID")
        assert dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        assert src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        assert src.get(here) == "1"
        with pytest.raises(redis.exceptions.AskError) as ask:
            src.get(missing)
        assert (ask.value.slot_id, ask.value.node_addr) == (slot, (dst_node.host, dst_node.port))
        # Without ASKING the importer sends the client back to the owner.
        with pytest.raises(redis.exceptions.MovedError) as moved:
            dst.get(missing)
        assert (moved.value.slot_id, moved.value.node_addr) == (slot, (src_node.host, src_node.port))
        pipe = dst.pipeline(transaction=False)
        pipe.execute_command("ASKING")
        pipe.set(missing, "new")
        assert pipe.execute() == [True, True]
        # A cluster client follows ASK by itself, for reads and writes.
        assert rc.get(missing) == b"new"
        # ASKING holds for a whole transaction, up to its EXEC, as in Redis; without it the
        # importer's MOVED at queueing time aborts the EXEC.
        for asking, reply in ((True, ["OK"]), (False, None)):
            tx = raw_connection(dst_node)
            if asking:
                assert command(tx, "ASKING") == "OK"
            assert command(tx, "MULTI") == "OK"
            if asking:
                assert command(tx, "SET", missing, "newer") == "QUEUED"
                assert command(tx, "EXEC") == reply
            else:
                with pytest.raises(redis.exceptions.MovedError):
                    command(tx, "SET", missing, "lost")
                with pytest.raises(redis.exceptions.ExecAbortError):
                    command(tx, "EXEC")
            tx.disconnect()
        # A transaction queued before its slot moved is discarded at EXEC, which answers
        # MOVED (Redis's EXEC checks every queued command again).
        stale = raw_connection(src_node)
        assert command(stale, "MULTI") == "OK"
        assert command(stale, "SET", here, "lost") == "QUEUED"
        assert src.execute_command("MIGRATE", dst_node.host, dst_node.port, "", 0, 5000, "KEYS", here) == "OK"
        assert rc.get(here) == b"1"
        for client in (dst, src):
            assert client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        with pytest.raises(redis.exceptions.MovedError) as moved:
            command(stale, "EXEC")
        assert (moved.value.slot_id, moved.value.node_addr) == (slot, (dst_node.host, dst_node.port))
        with pytest.raises(redis.exceptions.ResponseError, match="EXEC without MULTI"):
            command(stale, "EXEC")
        stale.disconnect()
        wait_until("every node to see the slot's new owner", lambda: all(
            f"{dst_node.host}:{dst_node.port}" in [
                f"{e[2][0]}:{e[2][1]}" for e in node_client(address).execute_command("CLUSTER", "SLOTS")
                if e[0] <= slot <= e[1]
            ] for address in addrs))
        fresh = RedisCluster(host=HOSTS[2], port=servers[2].shard_ports[0])
        try:
            assert fresh.get(here) == b"1" and fresh.get(missing) == b"newer"
            assert fresh.get_node_from_key(here).name == dst_node.name
        finally:
            fresh.close()
    finally:
        rc.close()


def test_queues_move_with_their_slots_and_each_task_is_acked_once(cluster):
    """Producers and workers run through a reshard of the slots that hold their queues:
    every submitted task is acknowledged exactly once as done. A lease a plain connection
    held when its queue moved is handed back and leased again (the connection's id means
    nothing on the other node), so an ACK may be refused once and the task done later."""
    servers, addrs = cluster
    rc = RedisCluster(host=HOSTS[0], port=servers[0].shard_ports[0])
    try:
        source = rc.get_primaries()[0]
        source_client = node_client(f"{source.host}:{source.port}")
        source_id = source_client.execute_command("CLUSTER", "MYID")
        owned = sorted(s for s in range(16384) if rc.nodes_manager.get_node_from_slot(s).name == source.name)
        moved_slots = owned[:60]
        target = next(p for p in rc.get_primaries() if p.host != source.host)
        target_id = node_client(f"{target.host}:{target.port}").execute_command("CLUSTER", "MYID")
        queues = []
        for i in range(100000):
            name = f"jobs{i}"
            if rc.keyslot(name) in moved_slots[:40]:
                queues.append(name)
            if len(queues) == 6:
                break
        assert len(queues) == 6
    finally:
        rc.close()

    submitted, acked, refused, errors = [], {}, [], []
    stop = threading.Event()
    lock = threading.Lock()

    def produce():
        client = RedisCluster(host=HOSTS[1], port=servers[1].shard_ports[0])
        try:
            for n in range(3000):
                if stop.is_set():
                    break
                queue = queues[n % len(queues)]
                try:
                    task_id = client.execute_command("TASK.SUBMIT", queue, f"job{n}")
                    with lock:
                        submitted.append(task_id)
                except Exception as e:  # noqa: BLE001
                    errors.append(("submit", repr(e)))
        finally:
            client.close()

    def work(seed):
        client = RedisCluster(host=HOSTS[2], port=servers[2].shard_ports[seed % 2])
        deadline = time.monotonic() + 180
        try:
            while time.monotonic() < deadline:
                idle = True
                for queue in queues:
                    try:
                        tasks = client.execute_command("TASK.FETCH", queue, "COUNT", 10)
                    except Exception as e:  # noqa: BLE001
                        errors.append(("fetch", repr(e)))
                        continue
                    for task in tasks or []:
                        idle = False
                        task_id = task[0]
                        try:
                            client.execute_command("TASK.ACK", task_id)
                            with lock:
                                acked[task_id] = acked.get(task_id, 0) + 1
                        except redis.exceptions.ResponseError as e:
                            refused.append((task_id, str(e)))
                        except Exception as e:  # noqa: BLE001
                            errors.append(("ack", repr(e)))
                if idle and stop.is_set():
                    with lock:
                        if set(submitted) <= set(acked):
                            return
                if idle:
                    time.sleep(0.02)
        finally:
            client.close()

    producer = threading.Thread(target=produce, daemon=True)
    workers = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(2)]
    producer.start()
    for w in workers:
        w.start()
    try:
        wait_until("tasks to flow", lambda: len(acked) > 100, seconds=60)
        # Tasks that are certainly on the source when the slots move: scheduled past the
        # reshard's start, so that only the moved queues can deliver them.
        for queue in queues:
            delayed = source_client.execute_command("TASK.SUBMIT", queue, "later", "DELAY", 1500)
            with lock:
                submitted.append(delayed.encode())
        counts = [int(source_client.execute_command("CLUSTER", "COUNTKEYSINSLOT", rc.keyslot(q)))
                  for q in queues]
        assert all(count >= 1 for count in counts), counts
        code, out = redis_cli("--cluster", "reshard", addrs[0], "--cluster-from", source_id,
                              "--cluster-to", target_id, "--cluster-slots", str(len(moved_slots)),
                              "--cluster-yes")
        assert code == 0 and "ERR" not in out, out
    finally:
        producer.join(timeout=120)
        stop.set()
        for w in workers:
            w.join(timeout=200)
    assert not errors, errors[:5]
    assert len(submitted) == len(set(submitted)) > 100
    # Exactly once: every task done, none acknowledged twice.
    missing = set(submitted) - set(acked)
    assert not missing, (len(missing), sorted(missing)[:5], refused[:5])
    assert all(count == 1 for count in acked.values())
    # The queues live on the target now: their slots moved, and so did they.
    rc = RedisCluster(host=HOSTS[0], port=servers[0].shard_ports[1])
    try:
        for queue in queues:
            assert rc.get_node_from_key(queue).name == target.name
            stats = rc.execute_command("TASK.STATS", queue)
            assert stats, queue
        code, out = redis_cli("--cluster", "check", addrs[2])
        assert code == 0 and "[OK] All nodes agree about slots configuration." in out, out
    finally:
        rc.close()


TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODE = os.path.join(TESTS, "node")
NODE_CURRENT = os.path.join(TESTS, "node-current")


def test_node_cluster_clients_across_processes(cluster):
    """ioredis's Cluster and node-redis's createCluster, seeded with one shard's port of the
    three processes: 30 random keys each, every key on exactly one master."""
    servers, addrs = cluster
    host, port = addrs[3].rsplit(":", 1)
    env = dict(os.environ, WETASK_PORT=port, WETASK_SEED_HOST=host, WETASK_PROCESSES="1",
               NODE_REDIS_HOME=NODE_CURRENT, WETASK_NAMES="30")
    run = subprocess.run(["node", "cluster_test.js"], env=env, cwd=NODE, capture_output=True,
                         text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-4000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report == {"names": 30, "ioredisMasters": 6, "nodeRedisMasters": 6}


@pytest.mark.parametrize("release", ["pinned", "current"])
def test_bullmq_with_a_prefix_on_the_cluster(cluster, release):
    """BullMQ through ioredis's Cluster with a `{prefix}`: 100 jobs and one retried."""
    servers, addrs = cluster
    home = {"pinned": NODE, "current": NODE_CURRENT}[release]
    nodes = [{"host": a.rsplit(":", 1)[0], "port": int(a.rsplit(":", 1)[1])} for a in addrs[:2]]
    env = dict(os.environ, WETASK_CLUSTER_NODES=json.dumps(nodes), BULLMQ_HOME=home)
    run = subprocess.run(["node", "bullmq_test.js"], env=env, cwd=NODE, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-4000:]
    check_100_jobs(run.stdout)


def test_publish_reaches_the_subscribers_of_every_process(cluster):
    """As Redis Cluster's bus carries a PUBLISH to every node: a message published on any
    process (its shared port or a shard's) reaches the subscribers on every shard of every
    process, a pattern subscriber included, once each (a process is two nodes on the bus,
    so it gets each message twice and delivers it once); PUBLISH's count is the publishing
    process's own subscribers. Before, only the publishing process's subscribers heard it."""
    servers, addrs = cluster
    channel = f"news:{random.randrange(10**9)}"
    subscribers = []
    for address in addrs:
        pubsub = node_client(address).pubsub()
        pubsub.subscribe(channel)
        subscribers.append((address.split(":")[0], pubsub))
    patterned = redis.Redis(host=HOSTS[1], port=servers[1].port, decode_responses=True).pubsub()
    patterned.psubscribe("news:*")
    subscribers.append((HOSTS[1], patterned))
    for _, pubsub in subscribers:
        assert pubsub.get_message(timeout=10)["type"] in ("subscribe", "psubscribe")
    sent = []
    for n, (host, srv) in enumerate(zip(HOSTS, servers)):
        publisher = redis.Redis(host=host, port=srv.shard_ports[n % 2] if n else srv.port,
                                decode_responses=True)
        local = sum(1 for h, _ in subscribers if h == host)
        message = f"m{n}"
        assert publisher.publish(channel, message) == local
        sent.append(message)
    for host, pubsub in subscribers:
        got = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(got) < len(sent):
            message = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.1)
            if message:
                got.append(message["data"])
        while (message := pubsub.get_message(ignore_subscribe_messages=True, timeout=0.3)):
            got.append(message["data"])
        # Each process's messages in its order; processes' messages may interleave.
        assert sorted(got) == sorted(sent), (host, got)


def test_nodes_that_disagree_on_an_epoch_settle_it_as_redis_does():
    """Two fresh one-shard nodes given the same config epoch and each half the slots, then
    met: the one with the lower node id takes a new epoch, as Redis's collision rule says,
    and both agree on every slot. A third claims a slot the first owns, with a lower epoch:
    the first keeps it."""
    servers = [Server("--bind", host, "--shards", "1", "--cluster-enabled", "yes",
                      "--cluster-self-assign", "no", "--appendonly", "no") for host in HOSTS[:3]]
    try:
        a, b, c = (node_client(f"{host}:{srv.shard_ports[0]}") for host, srv in zip(HOSTS, servers))
        assert a.execute_command("CLUSTER", "SET-CONFIG-EPOCH", 5)
        assert b.execute_command("CLUSTER", "SET-CONFIG-EPOCH", 5)
        assert c.execute_command("CLUSTER", "SET-CONFIG-EPOCH", 1)
        assert a.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 8191)
        assert b.execute_command("CLUSTER", "ADDSLOTSRANGE", 8192, 16383)
        assert c.execute_command("CLUSTER", "ADDSLOTS", 100)
        for host, srv in zip(HOSTS[1:], servers[1:]):
            assert a.execute_command("CLUSTER", "MEET", host, srv.shard_ports[0], srv.bus_ports[0])
        ids = {name: client.execute_command("CLUSTER", "MYID") for name, client in
               (("a", a), ("b", b), ("c", c))}

        def settled():
            epochs = [int(cluster_info(f"{h}:{s.shard_ports[0]}")["cluster_my_epoch"])
                      for h, s in zip(HOSTS, servers)]
            slots = [sorted((e[0], e[1], e[2][2]) for e in cl.execute_command("CLUSTER", "SLOTS"))
                     for cl in (a, b, c)]
            known = [int(cluster_info(f"{h}:{s.shard_ports[0]}")["cluster_known_nodes"])
                     for h, s in zip(HOSTS, servers)]
            return len(set(epochs)) == 3 and slots[0] == slots[1] == slots[2] and known == [3, 3, 3] \
                and (epochs, slots[0])

        epochs, slots = wait_until("the epochs and slots to settle", settled)
        lower, higher = sorted(["a", "b"], key=lambda n: ids[n])
        by_name = dict(zip("abc", epochs))
        assert by_name[higher] == 5 and by_name[lower] > 5, (by_name, ids)
        # Slot 100 stays a's (epoch 5 or more beats c's 1), and c's claim is dropped.
        assert (0, 8191, ids["a"]) in slots, slots
        assert (8192, 16383, ids["b"]) in slots, slots
        with pytest.raises(redis.exceptions.MovedError):
            c.get(next(k for k in (f"e{i}" for i in range(100000)) if key_slot(k.encode()) == 100))
    finally:
        for srv in servers:
            srv.stop()


def test_go_cluster_client_across_processes(cluster):
    """go-redis's ClusterClient (Debian's v5) seeded with two shard ports: 20 random keys and
    20 tasks by queue slot. v5 cannot read Redis 7's CLUSTER SLOTS, so it reaches each key
    by following MOVED (tests/go/gocluster)."""
    assert shutil.which("go"), "go is missing: scripts/setup.sh installs it"
    servers, addrs = cluster
    source = os.path.join(TESTS, "go", "gocluster")
    binary = os.path.join(TARGET, "go", "gocluster-test")
    env = dict(os.environ, GO111MODULE="off", GOPATH="/usr/share/gocode",
               GOCACHE=os.path.join(TARGET, "go", "cache"))
    build = subprocess.run(["go", "build", "-o", binary, "."], cwd=source, env=env,
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-4000:]
    env = dict(os.environ, WETASK_CLUSTER_ADDRS=",".join([addrs[1], addrs[4]]), WETASK_NAMES="20")
    run = subprocess.run([binary], env=env, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-4000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == {"names": 20, "tasks": 20}
