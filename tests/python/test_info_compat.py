"""INFO against a real redis-server (7.0, installed by scripts/setup.sh): every field Redis
reports in its default sections is there in WeTask's, under the same name, and the counters
clients and exporters read move as Redis's do (keyspace hits and misses, errors, rates)."""

import time

import redis

from test_differential import real_redis  # noqa: F401 (a fixture)

SECTIONS = ["server", "clients", "memory", "persistence", "stats", "replication", "cpu",
            "cluster", "keyspace"]

# Fields of Redis's that WeTask leaves out, and why.
LEFT_OUT = {
    # Per error prefix counts (errorstat_ERR …) are not kept: total_error_replies is.
}


def fields(client, section):
    return set(client.info(section).keys())


def test_every_redis_info_field_is_there(server, real_redis):  # noqa: F811
    theirs = redis.Redis(port=real_redis)
    ours = redis.Redis(port=server.port)
    theirs.set("k", "v")
    ours.set("k", "v")
    missing = {}
    for section in SECTIONS:
        gone = fields(theirs, section) - fields(ours, section) - set(LEFT_OUT)
        if gone:
            missing[section] = sorted(gone)
    assert not missing, missing
    assert ours.info("replication")["role"] == "master"
    assert ours.info("cpu")["used_cpu_user"] > 0


def counters(client):
    stats = client.info("stats")
    return (stats["keyspace_hits"], stats["keyspace_misses"], stats["total_error_replies"])


def test_counters_move_as_redis_counters_do(server, real_redis):  # noqa: F811
    theirs = redis.Redis(port=real_redis)
    ours = redis.Redis(port=server.port)
    commands = [
        ("SET", "hit", "v"), ("GET", "hit"), ("GET", "miss"), ("EXISTS", "hit", "miss"),
        ("STRLEN", "hit"), ("TYPE", "miss"), ("HGET", "miss", "f"), ("LRANGE", "miss", 0, -1),
        ("INCR", "hit"), ("GET", "hit"),
    ]
    deltas = []
    for client in (theirs, ours):
        client.delete("hit", "miss")
        before = counters(client)
        for command in commands:
            try:
                client.execute_command(*command)
            except redis.ResponseError:
                pass
        after = counters(client)
        deltas.append(tuple(a - b for a, b in zip(after, before)))
    assert deltas[1] == deltas[0], f"hits, misses, errors: Redis {deltas[0]}, WeTask {deltas[1]}"


def test_instantaneous_ops_per_sec_follows_the_load(server):
    ours = redis.Redis(port=server.port)
    pipe = ours.pipeline(transaction=False)
    deadline = time.time() + 0.6
    while time.time() < deadline:
        for i in range(200):
            pipe.set(f"rate:{i}", i)
        pipe.execute()
    assert ours.info("stats")["instantaneous_ops_per_sec"] > 100


def test_memory_stats_has_redis_fields_in_redis_order(server, real_redis):  # noqa: F811
    """MEMORY STATS: the same fields as Redis 7.0, in the same order, in RESP2 and RESP3,
    with a db.N entry per database that holds keys; the numbers are this server's."""
    for protocol in (2, 3):
        theirs = redis.Redis(port=real_redis, protocol=protocol)
        ours = redis.Redis(port=server.port, protocol=protocol)
        names = []
        for client in (theirs, ours):
            client.response_callbacks.clear()
            client.flushall()
            client.set("k", "v")
            client.execute_command("SELECT", 3)
            client.set("k", "v", px=100_000)
            client.execute_command("SELECT", 0)
            reply = client.execute_command("MEMORY", "STATS")
            if isinstance(reply, dict):
                keys = list(reply)
                values = reply
            else:
                keys = reply[0::2]
                values = dict(zip(reply[0::2], reply[1::2]))
            names.append(keys)
            if client is ours:
                assert int(values[b"keys.count"]) == 2
                assert int(values[b"total.allocated"]) > 0
            client.flushall()
        assert names[0] == names[1]
