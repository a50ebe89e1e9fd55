"""Redis Sentinel fails a WeTask primary over, as it fails a Redis primary over
(docs/REPLICATION.md, "Redis Sentinel"): three sentinels (Debian's redis-server in sentinel
mode, installed by scripts/setup.sh) watch a WeTask primary of two shards and its two
WeTask replicas. They find the replicas and each other through the primary (INFO and
PUBLISH/SUBSCRIBE on `__sentinel__:hello`); when the primary is killed with -9 they elect a
leader, which promotes a replica (`MULTI`, `SLAVEOF NO ONE`, `CONFIG REWRITE`, `CLIENT
KILL`, `EXEC`) and points the other one at it; the old primary, restarted, is turned into a
replica of the new one. redis-py's Sentinel client follows the switch.

Every wait polls a signal with a deadline; no sleep is trusted."""

import os
import shutil
import subprocess
import tempfile
import time

import pytest
import redis
from redis.sentinel import Sentinel

from conftest import DEADLINE_S, Server, server, wait_for  # noqa: F401 (a fixture)
from test_differential import real_redis  # noqa: F401 (a fixture)
from test_differential import free_port
from test_migrate_from_redis import ping
from test_replication import link_up, names

MASTER = "wetask"


class Sentinels:
    """Three redis-server processes in sentinel mode, watching `port` on 127.0.0.1."""

    def __init__(self, port):
        if not shutil.which("redis-server"):
            pytest.fail("redis-server is missing: scripts/setup.sh installs it")
        self.dir = tempfile.mkdtemp(prefix="wetask-sentinel-")
        self.ports = []
        self.procs = []
        for n in range(3):
            self.start(n, port)
        self.clients = [redis.Redis(port=p, decode_responses=True) for p in self.ports]

    def start(self, n, port):
        """Sentinel `n`, on a free port: one another process took meanwhile (the sentinel
        exits) is given up for another."""
        for _ in range(5):
            sentinel_port = free_port()
            conf = os.path.join(self.dir, f"sentinel{n}.conf")
            with open(conf, "w") as f:
                f.write(f"port {sentinel_port}\nbind 127.0.0.1\ndir {self.dir}\n"
                        f"sentinel monitor {MASTER} 127.0.0.1 {port} 2\n"
                        f"sentinel down-after-milliseconds {MASTER} 1000\n"
                        f"sentinel failover-timeout {MASTER} 10000\n")
            proc = subprocess.Popen(["redis-server", conf, "--sentinel"],
                                    stdout=subprocess.DEVNULL)
            client = redis.Redis(port=sentinel_port)
            if wait_for(lambda: proc.poll() is not None or ping(client), "a sentinel") \
                    and proc.poll() is None:
                self.ports.append(sentinel_port)
                self.procs.append(proc)
                return
        raise AssertionError("no sentinel could start")

    def master(self):
        """The primary's address as the first sentinel names it."""
        try:
            host, port = self.clients[0].execute_command(
                "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)
            return host, int(port)
        except (redis.ConnectionError, TypeError, ValueError):
            return None

    def know_everyone(self):
        """Every sentinel knows both replicas and the two other sentinels."""
        try:
            return all(len(c.execute_command("SENTINEL", "REPLICAS", MASTER)) == 2
                       and len(c.execute_command("SENTINEL", "SENTINELS", MASTER)) == 2
                       for c in self.clients)
        except redis.ConnectionError:
            return False

    def stop(self):
        for proc in self.procs:
            proc.terminate()
            proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


def role(port):
    try:
        return redis.Redis(port=port, decode_responses=True).execute_command("ROLE")
    except redis.ConnectionError:
        return None


def test_sentinel_fails_a_wetask_primary_over_and_turns_it_into_a_replica():
    """The replica with `replica-priority 0` is never the one promoted. Before, Sentinel
    elected a leader and chose a replica, but the promotion never happened: WeTask refused SLAVEOF, CONFIG and CLIENT inside MULTI, and the failover
    aborted after its timeout, again and again."""
    primary = Server("--shards", "2")
    # The first replica must never be promoted (`replica-priority 0`, as a Redis DR
    # replica is set): Sentinel picks the second.
    replicas = [Server("--shards", "2", "--replicaof", f"127.0.0.1 {primary.port}",
                       "--replica-priority", priority) for priority in ("0", "100")]
    sentinels = None
    old_primary = None
    try:
        p = redis.Redis(port=primary.port, decode_responses=True)
        for replica in replicas:
            wait_for(lambda: link_up(redis.Redis(port=replica.port, decode_responses=True)),
                     "a replica's link")
        keys = names("sentinel", 200)
        for key in keys:
            p.set(key, key)
        assert p.execute_command("WAIT", 2, 5000) == 2
        sentinels = Sentinels(primary.port)
        wait_for(sentinels.know_everyone, "the sentinels to find the replicas and each other",
                 deadline_s=60)
        client = Sentinel([("127.0.0.1", port) for port in sentinels.ports],
                          socket_timeout=2, decode_responses=True)
        assert client.discover_master(MASTER) == ("127.0.0.1", primary.port)

        primary.proc.kill()
        primary.proc.wait()
        killed = time.monotonic()
        ports = {r.port for r in replicas}
        new = wait_for(lambda: (m := sentinels.master()) and m[1] in ports and m,
                       "the sentinels to name a replica the primary", deadline_s=60)[1]
        assert new == replicas[1].port, "the replica with priority 0 was promoted"
        wait_for(lambda: (r := role(new)) and r[0] == "master", "the promotion", deadline_s=30)
        master = client.master_for(MASTER, socket_timeout=2, decode_responses=True)
        wait_for(lambda: write_works(master), "writes through redis-py's Sentinel client",
                 deadline_s=30)
        switched = time.monotonic() - killed
        print(f"failover under Sentinel (down-after 1000 ms): {switched:.2f} s")
        assert [master.get(key) for key in keys] == keys, "an acknowledged write was lost"
        other = (ports - {new}).pop()
        wait_for(lambda: (r := role(other)) and r[0] == "slave" and r[2] == new,
                 "the other replica to follow the new primary", deadline_s=30)

        # The old primary comes back alone, at its address: the sentinels make it a replica
        # of the new one.
        old_primary = restart_at(primary)
        wait_for(lambda: (r := role(old_primary.port)) and r[0] == "slave" and r[2] == new,
                 "the old primary to become a replica", deadline_s=60)
        master.set("after", "1")
        returned = redis.Redis(port=old_primary.port, decode_responses=True)
        wait_for(lambda: link_up(returned) and returned.get("after") == "1",
                 "the new primary's write on the old one", deadline_s=30)
        assert [returned.get(key) for key in keys] == keys
    finally:
        if sentinels:
            sentinels.stop()
        for server in replicas + [s for s in (old_primary,) if s]:
            server.stop()
        primary.stop()


def restart_at(server):
    """`server` started again on its data and its port (which a killed process's ring may
    hold for a moment: tried again until the deadline)."""
    end = time.monotonic() + DEADLINE_S
    while True:
        try:
            return Server("--shards", "2", "--port", str(server.port), data_dir=server.dir)
        except AssertionError:
            if time.monotonic() > end:
                raise
            time.sleep(0.1)


def write_works(master):
    try:
        return master.set("probe", "1")
    except (redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError,
            redis.sentinel.MasterNotFoundError):
        return False


def test_a_transaction_of_administration_commands_runs_and_mixing_is_refused(server):
    """What Sentinel's failover sends runs in a transaction (each command as it would alone,
    in order); a transaction that mixes such commands with key commands, or WATCHes keys,
    is refused with a clear error, as a command not allowed inside a transaction is."""
    c = redis.Redis(port=server.port, decode_responses=True, single_connection_client=True)
    c.client_setname("admin-tx")
    for command in ("MULTI", "CLIENT GETNAME", "CONFIG GET maxmemory-policy", "ROLE",
                    "CLIENT KILL TYPE normal SKIPME yes", "PING"):
        c.execute_command(*command.split())
    replies = c.execute_command("EXEC")
    assert replies[0] == "admin-tx"
    assert replies[1] in (["maxmemory-policy", "noeviction"], {"maxmemory-policy": "noeviction"})
    assert replies[2][0] == "master"
    assert isinstance(replies[3], int) and replies[4] in ("PONG", True)
    for first, second in ((("SET", "k", "v"), ("CONFIG", "GET", "port")),
                          (("CLIENT", "ID"), ("GET", "k"))):
        c.execute_command("MULTI")
        c.execute_command(*first)
        with pytest.raises(redis.ResponseError, match="run only with each other"):
            c.execute_command(*second)
        with pytest.raises(redis.ResponseError, match="Transaction discarded"):
            c.execute_command("EXEC")
    c.execute_command("WATCH", "k")
    c.execute_command("MULTI")
    c.execute_command("CLIENT", "ID")
    with pytest.raises(redis.ResponseError, match="not with key commands or WATCH"):
        c.execute_command("EXEC")
    assert c.execute_command("MULTI") == "OK" and c.execute_command("DISCARD") == "OK"


def test_client_types_are_redis_s(server, real_redis):  # noqa: F811
    """CLIENT KILL and CLIENT LIST TYPE tell normal clients from subscribers (`pubsub`) as
    Redis does (Sentinel's failover kills each type in turn), and an unknown type is an
    error: compared with a redis-server. Before, TYPE normal took subscribers too, TYPE
    pubsub matched nobody and a bad type was not an error."""
    def run(port):
        subscriber = redis.Redis(port=port, decode_responses=True).pubsub()
        subscriber.subscribe("types")
        assert subscriber.get_message(timeout=DEADLINE_S)["type"] == "subscribe"
        plain = redis.Redis(port=port, decode_responses=True, single_connection_client=True)
        plain_id = plain.client_id()
        me = redis.Redis(port=port, decode_responses=True, single_connection_client=True)

        def ids(kind):
            text = me.execute_command("CLIENT", "LIST", "TYPE", kind)
            return {int(line.split()[0][3:]) for line in text.splitlines()}

        subscribers = ids("pubsub")
        listed = {kind: (plain_id in ids(kind), bool(ids(kind) & subscribers))
                  for kind in ("normal", "pubsub", "master", "replica")}
        errors = []
        for command in (("CLIENT", "LIST", "TYPE", "bogus"), ("CLIENT", "KILL", "TYPE", "bogus")):
            with pytest.raises(redis.ResponseError) as error:
                me.execute_command(*command)
            errors.append(str(error.value))
        me.execute_command("CLIENT", "KILL", "TYPE", "normal")
        after_normal = (plain_id in ids("normal"), ids("pubsub") == subscribers)
        me.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
        after_pubsub = ids("pubsub") & subscribers
        subscriber.close()
        return listed, errors, after_normal, after_pubsub

    ours, theirs = run(server.port), run(real_redis)
    assert ours == theirs
    assert ours[0]["pubsub"] == (False, True) and ours[2] == (False, True), ours
