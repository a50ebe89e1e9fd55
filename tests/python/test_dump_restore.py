"""Values move between a real redis-server and WeTask with DUMP and RESTORE, both ways, for
every type at small and large sizes (Redis's compact and plain encodings), under many random
key names on 2 and 4 shards."""

import random
import string

import pytest
import redis

from conftest import Server
from test_differential import real_redis  # noqa: F401 (a fixture)


@pytest.fixture(scope="module", params=["2", "4"], ids=["shards2", "shards4"])
def sharded(request):
    srv = Server("--shards", request.param)
    yield srv
    srv.stop()


def name(rng):
    return "dr:" + "".join(rng.choices(string.ascii_letters + string.digits, k=12))


def fill(r, rng, key, kind, size):
    """Writes a `kind` value of `size` elements at `key` (the same with the same seed)."""
    words = [
        rng.choice(["", str(rng.randint(-10**12, 10**12)), "x" * rng.randint(1, 80)])
        + str(i)
        for i in range(size)
    ]
    if kind == "string":
        r.set(key, "".join(words)[: max(1, size * 7)])
    elif kind == "int":
        r.set(key, rng.randint(-(2**63), 2**63 - 1))
    elif kind == "list":
        r.rpush(key, *words)
    elif kind == "hash":
        r.hset(key, mapping={w: rng.choice(words) for w in words})
    elif kind == "set":
        r.sadd(key, *words)
    elif kind == "intset":
        r.sadd(key, *[rng.randint(-(2**40), 2**40) for _ in range(size)])
    elif kind == "zset":
        r.zadd(key, {w: rng.uniform(-1e6, 1e6) for w in words})
    elif kind == "stream":
        for i, w in enumerate(words):
            # Entries with the first entry's field names and with others (both encodings).
            fields = {"a": w, "b": str(i)} if i % 3 else {"c": w}
            r.xadd(key, fields, id=f"{1000 + i // 3}-{i % 3}")
        r.xdel(key, "1000-1")
        r.xgroup_create(key, "g", id="0")
        r.xreadgroup("g", "alice", {key: ">"}, count=1)
        r.xreadgroup("g", "bob", {key: ">"}, count=1)


def read(r, key):
    kind = r.type(key)
    return kind, {
        b"string": lambda: r.get(key),
        b"list": lambda: r.lrange(key, 0, -1),
        b"hash": lambda: r.hgetall(key),
        b"set": lambda: r.smembers(key),
        b"zset": lambda: r.zrange(key, 0, -1, withscores=True),
        b"stream": lambda: stream_view(r, key),
    }[kind]()


def stream_view(r, key):
    """Entries, counters, groups and pending entries (not times, which are each server's)."""
    info = r.xinfo_stream(key)
    groups = [(g["name"], g["consumers"], g["pending"], g["last-delivered-id"]) for g in r.xinfo_groups(key)]
    pending = [(p["message_id"], p["consumer"], p["times_delivered"]) for p in r.xpending_range(key, "g", "-", "+", 1000)]
    counters = [info[k] for k in ("length", "last-generated-id", "max-deleted-entry-id", "entries-added")]
    return r.xrange(key), counters, groups, pending


KINDS = ["string", "int", "list", "hash", "set", "intset", "zset", "stream"]


@pytest.mark.parametrize("size", [3, 700], ids=["small", "large"])
def test_values_move_both_ways(sharded, real_redis, size):  # noqa: F811
    theirs = redis.Redis(port=real_redis)
    ours = redis.Redis(port=sharded.port)
    rng = random.Random()
    for kind in KINDS:
        for _ in range(4):
            key = name(rng)
            seed = rng.random()
            fill(theirs, random.Random(seed), key, kind, size)
            fill(ours, random.Random(seed), key, kind, size)
            assert read(theirs, key) == read(ours, key), f"{kind}: same writes, same value"
            # Redis -> WeTask, with a TTL; WeTask -> Redis.
            copy = name(rng)
            ours.restore(copy, 100_000, theirs.dump(key))
            assert read(ours, copy) == read(theirs, key), f"{kind} from Redis"
            assert 0 < ours.pttl(copy) <= 100_000
            back = name(rng)
            theirs.restore(back, 0, ours.dump(key))
            assert read(theirs, back) == read(ours, key), f"{kind} to Redis"
            # REPLACE over another type, on whichever shard the name lives.
            ours.set(back, "old")
            ours.restore(back, 0, theirs.dump(key), replace=True)
            assert read(ours, back) == read(theirs, key)
