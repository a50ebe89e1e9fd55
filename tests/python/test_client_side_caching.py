"""Client-side caching with redis-py's own cache (`cache_config`, RESP3 tracking): a value
cached by one client is dropped when another client writes it, on 2 and 4 shards, for many
random key names (a bug that depends on where keys hash must not hide behind one name).

redis-py's cache refuses servers that announce a version under 7.4, so these servers start
with --announce-version 7.4.0 (docs/COMPATIBILITY.md).
"""

import random
import string
import time

import pytest
import redis
from redis.cache import CacheConfig

from conftest import Server

DEADLINE_S = 10


@pytest.fixture(scope="module", params=["2", "4"], ids=["shards2", "shards4"])
def caching_server(request):
    srv = Server("--shards", request.param, "--announce-version", "7.4.0")
    yield srv
    srv.stop()


def random_keys(n):
    rng = random.Random()
    return ["csc:" + "".join(rng.choices(string.ascii_letters + string.digits, k=10)) for _ in range(n)]


def until(what, check):
    """Polls `check` until it holds (DEADLINE_S at most); never sleeps and assumes."""
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


def cached_reads(port, count, value):
    """A caching client, a plain writer, and `count` random keys the first has read."""
    cached = redis.Redis(port=port, protocol=3, cache_config=CacheConfig())
    writer = redis.Redis(port=port)
    keys = random_keys(count)
    for key in keys:
        writer.set(key, value)
        assert cached.get(key) == value.encode()
        assert cached.get(key) == value.encode()
    return cached, writer, keys


def test_a_cached_value_is_dropped_when_another_client_writes(caching_server):
    cached, writer, keys = cached_reads(caching_server.port, 24, "v1")
    cache = cached.get_cache()
    assert cache.size >= len(keys), "redis-py cached the reads"
    # Served from the cache: the server sees no GET for a cached key.
    hits_before = writer.info("stats")["keyspace_hits"]
    for key in keys:
        assert cached.get(key) == b"v1"
    assert writer.info("stats")["keyspace_hits"] == hits_before
    for key in keys:
        writer.set(key, "v2")
    # Each invalidation push reaches the cache; the next read goes to the server.
    until("every key invalidated", lambda: all(cached.get(k) == b"v2" for k in keys))
    writer.delete(*keys)
    until("every delete invalidated", lambda: all(cached.get(k) is None for k in keys))


def test_a_flush_empties_the_cache(caching_server):
    cached, writer, keys = cached_reads(caching_server.port, 8, "v")
    writer.flushall()
    until("the flush invalidated every key", lambda: all(cached.get(k) is None for k in keys))


def test_raw_tracking_sees_the_invalidation_push(caching_server):
    """The push itself, as redis-py's parser hands it to its invalidation handler."""
    port = caching_server.port
    reader = redis.Redis(port=port, protocol=3)
    writer = redis.Redis(port=port)
    conn = reader.connection_pool.get_connection()
    pushes = []
    conn._parser.set_invalidation_push_handler(pushes.append)
    conn.send_command("CLIENT", "TRACKING", "ON")
    assert conn.read_response() == b"OK"
    keys = random_keys(20)
    for key in keys:
        writer.set(key, "x")
        conn.send_command("GET", key)
        assert conn.read_response() == b"x"
    for key in keys:
        writer.set(key, "y")

    def all_seen():
        while conn.can_read(timeout=0):
            conn.read_response(push_request=True, timeout=0.1)
        return {k.decode() for p in pushes for k in (p[1] or [])} >= set(keys)

    until("an invalidation push for every key", all_seen)
    assert all(p[0] == b"invalidate" for p in pushes)
    reader.connection_pool.release(conn)
