"""redis-py against wetask, in RESP2 and RESP3 (redis-py's HELLO 3), on one and two shards."""

import os
import subprocess

import pytest
import redis


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def r(server, request):
    client = redis.Redis(port=server.port, protocol=request.param, decode_responses=True)
    client.flushall()
    yield client
    client.close()


def test_strings(r):
    assert r.set("name", "wetask") is True
    assert r.get("name") == "wetask"
    assert r.set("name", "other", nx=True) is None
    assert r.set("name", "new", xx=True, get=True) == "wetask"
    assert r.incr("counter") == 1
    assert r.incrby("counter", 41) == 42
    assert r.decr("counter") == 41
    assert r.incrbyfloat("float", 1.5) == 1.5
    assert r.append("name", "!") == 4
    assert r.strlen("name") == 4
    assert r.getrange("name", 0, 1) == "ne"
    assert r.setrange("name", 1, "EW") == 4
    assert r.get("name") == "nEW!"
    assert r.getdel("name") == "nEW!"
    assert r.get("name") is None
    assert r.setnx("once", "1") is True
    assert r.setnx("once", "2") is False
    assert r.getset("once", "3") == "1"
    assert r.getex("once", px=50000) == "3"
    assert 0 < r.pttl("once") <= 50000


def test_multi_key_across_shards(r):
    mapping = {f"user:{i}": str(i) for i in range(100)}
    assert r.mset(mapping) is True
    assert r.mget([f"user:{i}" for i in range(100)]) == [str(i) for i in range(100)]
    assert r.exists("user:1", "user:2", "missing") == 2
    assert r.delete("user:1", "user:2", "missing") == 2
    assert r.dbsize() == 98
    assert sorted(r.keys("user:9*")) == sorted(["user:9"] + [f"user:9{i}" for i in range(10)])
    assert set(r.scan_iter(match="user:*", count=7)) == {f"user:{i}" for i in range(3, 100)} | {"user:0"}
    assert r.msetnx({"fresh:1": "a", "fresh:2": "b"}) is True
    assert r.msetnx({"fresh:2": "x", "fresh:3": "c"}) is False
    assert r.rename("user:5", "renamed") is True
    assert r.get("renamed") == "5"
    assert r.copy("renamed", "copied") is True
    assert r.renamenx("copied", "renamed") is False
    assert r.type("renamed") == "string"
    assert r.randomkey() is not None


def test_expiry(r):
    r.set("k", "v")
    assert r.expire("k", 100) is True
    assert 99 <= r.ttl("k") <= 100
    assert r.expire("k", 50, gt=True) is False
    assert r.persist("k") is True
    assert r.ttl("k") == -1
    assert r.ttl("missing") == -2
    assert r.pexpireat("k", 9999999999999) is True
    assert r.pexpiretime("k") == 9999999999999
    r.set("gone", "v", px=1)
    import time
    time.sleep(0.05)
    assert r.get("gone") is None


def test_errors_match_redis(r):
    r.set("word", "abc")
    with pytest.raises(redis.ResponseError, match="value is not an integer or out of range"):
        r.incr("word")
    with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'get' command"):
        r.execute_command("GET")
    with pytest.raises(redis.ResponseError, match="unknown command 'NOPE'"):
        r.execute_command("NOPE", "x")
    with pytest.raises(redis.ResponseError, match="syntax error"):
        r.execute_command("SET", "a", "b", "NX", "XX")
    assert r.ping() is True


def test_pipeline_and_transactionless_batches(r):
    pipe = r.pipeline(transaction=False)
    for i in range(500):
        pipe.set(f"p:{i}", i)
        pipe.get(f"p:{i}")
    results = pipe.execute()
    assert results[0::2] == [True] * 500
    assert results[1::2] == [str(i) for i in range(500)]


def test_connection_commands(r):
    assert r.client_setname("tester") is True
    assert r.client_getname() == "tester"
    assert isinstance(r.client_id(), int)
    assert any(c["name"] == "tester" for c in r.client_list())
    info = r.info()
    assert "redis_version" in info and "connected_clients" in info
    assert r.info("keyspace") is not None
    assert r.config_get("maxclients") == {"maxclients": "10000"}
    assert r.echo("hi") == "hi"
    secs, micros = r.time()
    assert secs > 1_600_000_000
    assert r.command_count() > 50
    db1 = redis.Redis(port=r.connection_pool.connection_kwargs["port"], db=1, decode_responses=True)
    db1.set("only-in-1", "x")
    assert r.get("only-in-1") is None
    assert db1.get("only-in-1") == "x"


def test_large_values_round_trip(r):
    value = os.urandom(3 * 1024 * 1024)
    raw = redis.Redis(port=r.connection_pool.connection_kwargs["port"])
    assert raw.set("big", value) is True
    assert raw.get("big") == value
    assert raw.strlen("big") == len(value)


def test_redis_cli_pipe_and_benchmark(server):
    commands = "".join(f"SET pipe:{i} {i}\r\n" for i in range(1000)).encode()
    out = subprocess.run(
        ["redis-cli", "-p", str(server.port), "--pipe"], input=commands, capture_output=True, check=True
    )
    assert b"errors: 0, replies: 1000" in out.stdout, out.stdout
    assert redis.Redis(port=server.port).get("pipe:999") == b"999"
    interactive = subprocess.run(
        ["redis-cli", "-p", str(server.port)], input=b"SET cli works\nGET cli\n", capture_output=True, check=True
    )
    assert interactive.stdout.split() == [b"OK", b"works"]
    bench = subprocess.run(
        ["redis-benchmark", "-p", str(server.port), "-t", "ping,set,get,incr,mset", "-P", "16",
         "-n", "2000", "-c", "8", "-q"],
        capture_output=True, check=True, timeout=120,
    )
    text = bench.stdout.decode() + bench.stderr.decode()
    assert "error" not in text.lower(), text
    for name in ["PING_INLINE", "PING_MBULK", "SET", "GET", "INCR", "MSET"]:
        assert f"{name}" in text, text


def test_collections_through_redis_py_helpers(r):
    """Every family through redis-py's own helpers (its RESP2 and RESP3 reply parsing)."""
    r.flushall()
    assert r.rpush("l", "a", "b", "c") == 3
    assert r.lrange("l", 0, -1) == ["a", "b", "c"]
    assert r.lpop("l", 2) == ["a", "b"]
    assert r.lmpop(2, "nope", "l", direction="RIGHT") == ["l", ["c"]]
    assert r.blpop(["nope", "l"], timeout=0.1) is None
    assert r.hset("h", mapping={"f": "1", "g": "2"}) == 2
    assert r.hgetall("h") == {"f": "1", "g": "2"}
    assert r.hincrbyfloat("h", "f", 0.5) == 1.5
    assert set(r.hrandfield("h", 5)) == {"f", "g"}
    pairs = r.hrandfield("h", 5, withvalues=True)
    # RESP2: a flat list; RESP3: [field, value] pairs.
    flat = [x for p in pairs for x in p] if isinstance(pairs[0], list) else pairs
    assert dict(zip(flat[::2], flat[1::2])) == {"f": "1.5", "g": "2"}
    assert r.sadd("s", "x", "y") == 2
    assert r.smembers("s") == {"x", "y"}
    assert r.smismember("s", ["x", "z"]) == [1, 0]
    assert r.zadd("z", {"a": 1, "b": 2.5}) == 2
    assert [tuple(p) for p in r.zrange("z", 0, -1, withscores=True)] == [("a", 1.0), ("b", 2.5)]
    assert r.zscore("z", "b") == 2.5
    assert r.zrangebyscore("z", "(1", "+inf") == ["b"]
    # As against Redis 7 with this redis-py: RESP2 [(m, s)], RESP3 [m, s].
    assert r.zpopmin("z") in ([("a", 1.0)], ["a", 1.0])
    assert tuple(r.bzpopmax("z", timeout=1)) == ("z", "b", 2.5)
    assert r.xadd("st", {"k": "v"}, id="1-1") == "1-1"
    assert r.xrange("st") == [("1-1", {"k": "v"})]
    assert r.xread({"st": "0"}) in ([["st", [("1-1", {"k": "v"})]]], {"st": [[("1-1", {"k": "v"})]]})
    assert r.type("st") == "stream"


def test_transactions_and_pubsub_through_redis_py(r, server):
    r.flushall()
    with r.pipeline(transaction=True) as pipe:
        pipe.set("a", 1).incr("a").sadd("set", "m").zadd("zs", {"m": 3}).get("a")
        assert pipe.execute() == [True, 2, 1, 1, "2"]
    # WATCH: a change by another client makes the transaction fail with WatchError.
    other = redis.Redis(port=server.port, protocol=r.connection_pool.connection_kwargs.get("protocol", 2))
    with r.pipeline() as pipe:
        pipe.watch("a")
        other.set("a", 100)
        pipe.multi()
        pipe.incr("a")
        with pytest.raises(redis.WatchError):
            pipe.execute()
    assert r.get("a") == "100"

    def transfer(pipe):
        value = int(pipe.get("a"))
        pipe.multi()
        pipe.set("a", value - 1)
        pipe.incr("b")

    r.transaction(transfer, "a")
    assert r.mget("a", "b") == ["99", "1"]
    # Pub/sub: a subscriber on its own connection gets what is published.
    p = r.pubsub()
    p.subscribe("news")
    p.psubscribe("n*")
    assert p.get_message(timeout=1)["type"] == "subscribe"
    assert p.get_message(timeout=1)["type"] == "psubscribe"
    assert r.publish("news", "hello") == 2
    got = [p.get_message(timeout=1) for _ in range(2)]
    assert sorted(m["type"] for m in got) == ["message", "pmessage"]
    assert all(m["data"] == "hello" for m in got)
    assert r.pubsub_numsub("news") == [("news", 1)]
    p.close()
