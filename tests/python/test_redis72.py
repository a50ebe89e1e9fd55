"""What Redis 7.2 added, which Debian's redis-server (7.0) cannot be compared against: each
check follows Redis 7.2's own tests (tests/unit/…, named per test) and its command docs.
WeTask announces 7.2.0 (`--announce-version`), so clients switch these on."""

import time

import pytest
import redis

from conftest import Server


def raw(port, protocol=2):
    client = redis.Redis(port=port, protocol=protocol)
    client.response_callbacks.clear()
    return client


def error_of(client, *args):
    with pytest.raises(redis.ResponseError) as e:
        client.execute_command(*args)
    return str(e.value)


@pytest.mark.parametrize("protocol", [2, 3])
def test_zrank_withscore(server, protocol):
    # unit/type/zset.tcl "ZRANK/ZREVRANK basics".
    r = raw(server.port, protocol)
    r.delete("zranktmp")
    r.zadd("zranktmp", {"x": 10, "y": 20, "z": 30})
    assert r.execute_command("ZRANK", "zranktmp", "y") == 1
    assert r.execute_command("ZRANK", "zranktmp", "x", "WITHSCORE") == [0, b"10" if protocol == 2 else 10.0]
    assert r.execute_command("ZREVRANK", "zranktmp", "x", "withscore") == [2, b"10" if protocol == 2 else 10.0]
    assert r.execute_command("ZRANK", "zranktmp", "foo") is None
    assert r.execute_command("ZRANK", "zranktmp", "foo", "WITHSCORE") is None
    assert r.execute_command("ZRANK", "nokey", "foo", "WITHSCORE") is None
    assert "syntax error" in error_of(r, "ZRANK", "zranktmp", "x", "WITHSCORES")
    assert "wrong number of arguments for 'zrank'" in error_of(
        r, "ZRANK", "zranktmp", "x", "WITHSCORE", "extra")
    r.set("str", "x")
    assert error_of(r, "ZRANK", "str", "x", "WITHSCORE").startswith("WRONGTYPE")


def test_zrank_withscore_nil_is_a_null_array(server):
    # RESP2: `*-1` with WITHSCORE (a nil array), `$-1` without.
    import socket
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(b"ZRANK nokey m WITHSCORE\r\nZRANK nokey m\r\n")
        got = b""
        while got.count(b"\r\n") < 2:
            got += s.recv(100)
        assert got == b"*-1\r\n$-1\r\n"


def test_client_setinfo(server):
    # unit/introspection.tcl "CLIENT SETINFO …" and "RESET does NOT clean library name".
    r = raw(server.port)
    assert r.execute_command("CLIENT", "SETINFO", "lib-name", "redis.py") == b"OK"
    assert r.execute_command("CLIENT", "SETINFO", "LIB-VER", "1.2.3") == b"OK"
    assert b"lib-name=redis.py lib-ver=1.2.3" in r.execute_command("CLIENT", "INFO")
    assert "wrong number of arguments for 'client|setinfo'" in error_of(
        r, "CLIENT", "SETINFO", "lib-name")
    assert error_of(r, "CLIENT", "SETINFO", "lib-name", "redis py") == (
        "lib-name cannot contain spaces, newlines or special characters.")
    assert "newlines" in error_of(r, "CLIENT", "SETINFO", "lib-ver", "1\n")
    assert error_of(r, "CLIENT", "SETINFO", "badger", "hamster") == "Unrecognized option 'badger'"
    assert b"lib-name=redis.py lib-ver=1.2.3" in r.execute_command("CLIENT", "INFO")
    assert r.execute_command("RESET") == b"RESET"
    assert b"lib-name=redis.py" in r.execute_command("CLIENT", "INFO")
    assert r.execute_command("CLIENT", "SETINFO", "lib-name", "") == b"OK"
    assert b"lib-name= " in r.execute_command("CLIENT", "INFO")


def test_client_subcommand_arity(server):
    r = raw(server.port)
    for args, name in [(["ID", "x"], "id"), (["NO-TOUCH"], "no-touch"),
                       (["NO-EVICT", "on", "x"], "no-evict"), (["GETNAME", "x"], "getname")]:
        assert error_of(r, "CLIENT", *args) == (
            f"wrong number of arguments for 'client|{name}' command")
    assert error_of(r, "CLIENT", "NO-TOUCH", "maybe") == "syntax error"


def flags(client):
    info = client.execute_command("CLIENT", "INFO").decode()
    return dict(f.split("=", 1) for f in info.split())["flags"]


def test_client_no_evict_and_no_touch_flags(server):
    # CLIENT LIST shows `e` (no-evict) and `T` (no-touch); RESET clears both (7.2 notes).
    r = raw(server.port)
    assert flags(r) == "N"
    r.execute_command("CLIENT", "NO-EVICT", "on")
    r.execute_command("CLIENT", "NO-TOUCH", "on")
    assert flags(r) == "eT"
    r.execute_command("CLIENT", "NO-EVICT", "off")
    assert flags(r) == "T"
    my_id = r.execute_command("CLIENT", "ID")
    r.execute_command("MULTI")
    line = raw(server.port).execute_command("CLIENT", "LIST", "ID", my_id).decode()
    assert " flags=xT " in line, line
    r.execute_command("DISCARD")
    r.execute_command("RESET")
    assert flags(r) == "N"


def test_no_touch_leaves_the_access_time_alone(server):
    # unit/introspection-2.tcl "Operations in no-touch mode do not alter the last access
    # time of a key" (WeTask keeps access times under an LRU policy, as eviction needs).
    admin = redis.Redis(port=server.port)
    before = admin.config_get("maxmemory-policy")["maxmemory-policy"]
    admin.config_set("maxmemory-policy", "allkeys-lru")
    try:
        r = redis.Redis(port=server.port)
        keys = [f"nt:{i}" for i in range(8)]  # on every shard
        for key in keys:
            r.set(key, "bar")
        r.execute_command("CLIENT", "NO-TOUCH", "on")
        time.sleep(2.1)
        for key in keys:
            r.get(key)
            assert r.object("idletime", key) >= 2, key
        r.execute_command("TOUCH", *keys)  # TOUCH still touches
        assert all(r.object("idletime", key) == 0 for key in keys)
        time.sleep(2.1)
        r.execute_command("CLIENT", "NO-TOUCH", "off")
        for key in keys:
            r.get(key)
            # Whole seconds: a GET at x.999 s reads 1 at (x+1).001 s; an untouched key reads 2.
            assert r.object("idletime", key) <= 1, key
    finally:
        admin.config_set("maxmemory-policy", before)


def test_waitaof(server):
    # WAITAOF numlocal numreplicas timeout (unit/wait.tcl "WAITAOF local copy …"): with the
    # journal on (the default), a write is fsynced locally; there are no replicas.
    r = raw(server.port)
    r.set("waitaof", "1")
    assert r.execute_command("WAITAOF", 1, 0, 0) == [1, 0]
    started = time.monotonic()
    assert r.execute_command("WAITAOF", 0, 1, 50) == [1, 0]
    assert time.monotonic() - started >= 0.05
    assert error_of(r, "WAITAOF", 2, 0, 0) == "value is out of range, value must between 0 and 1"
    assert error_of(r, "WAITAOF", 0, -1, 0) == "value is out of range, must be positive"
    assert error_of(r, "WAITAOF", 0, 0, -1) == "timeout is negative"
    assert "wrong number of arguments" in error_of(r, "WAITAOF", 0, 0)


def test_waitaof_without_the_journal():
    # unit/wait.tcl "WAITAOF local on server with aof disabled".
    srv = Server("--appendonly", "no")
    try:
        r = raw(srv.port)
        assert error_of(r, "WAITAOF", 1, 0, 0) == (
            "WAITAOF cannot be used when numlocal is set but appendonly is disabled.")
        assert r.execute_command("WAITAOF", 0, 0, 0) == [0, 0]
    finally:
        srv.stop()


def test_lolwut(server):
    # LOLWUT (Redis's own version line; VERSION must be an integer), in scripts too.
    r = raw(server.port)
    assert r.execute_command("LOLWUT") == b"Redis ver. 7.2.0\n"
    assert r.execute_command("LOLWUT", "VERSION", "7") == b"Redis ver. 7.2.0\n"
    assert error_of(r, "LOLWUT", "VERSION", "x") == "value is not an integer or out of range"
    assert r.eval("return redis.call('LOLWUT')", 0) == b"Redis ver. 7.2.0\n"


def consumers(r, key, group):
    return [dict(zip(c[0::2], c[1::2])) for c in r.execute_command("XINFO", "CONSUMERS", key, group)]


def test_consumer_seen_and_active_time(server):
    # unit/type/stream-cgroups.tcl "Consumer seen-time and active-time": a read that gets
    # nothing makes the consumer (7.2) and marks it seen, not active.
    r = raw(server.port)
    r.delete("mystream")
    r.execute_command("XGROUP", "CREATE", "mystream", "mygroup", "$", "MKSTREAM")
    r.execute_command("XREADGROUP", "GROUP", "mygroup", "Alice", "COUNT", 1, "STREAMS", "mystream", ">")
    time.sleep(0.1)
    alice = consumers(r, "mystream", "mygroup")[0]
    assert alice[b"idle"] >= 100 and alice[b"inactive"] == -1
    r.execute_command("XADD", "mystream", "*", "f", "v")
    r.execute_command("XREADGROUP", "GROUP", "mygroup", "Alice", "COUNT", 1, "STREAMS", "mystream", ">")
    alice = consumers(r, "mystream", "mygroup")[0]
    assert alice[b"name"] == b"Alice" and alice[b"idle"] < 80 and alice[b"inactive"] < 80
    time.sleep(0.1)
    r.execute_command("XREADGROUP", "GROUP", "mygroup", "Alice", "COUNT", 1, "STREAMS", "mystream", ">")
    alice = consumers(r, "mystream", "mygroup")[0]
    assert alice[b"idle"] < 80 and alice[b"inactive"] >= 100
    # XCLAIM and XAUTOCLAIM make their consumer too, claiming nothing (7.2).
    r.execute_command("XCLAIM", "mystream", "mygroup", "Bob", 0, "9-9")
    r.execute_command("XAUTOCLAIM", "mystream", "mygroup", "Carol", 3600000, "0")
    names = [c[b"name"] for c in consumers(r, "mystream", "mygroup")]
    assert names == [b"Alice", b"Bob", b"Carol"]
    assert all(c[b"inactive"] == -1 for c in consumers(r, "mystream", "mygroup")[1:])


def test_xinfo_stream_full(server):
    # XINFO STREAM key FULL [COUNT n] (t_stream.c xinfoReplyWithStreamInfo, 7.2's fields):
    # groups and consumers by name, consumers with seen-time and active-time.
    r = raw(server.port)
    r.delete("fs")
    for i in range(1, 13):
        r.execute_command("XADD", "fs", f"{i}-0", "f", str(i))
    r.execute_command("XGROUP", "CREATE", "fs", "zed", "0")
    r.execute_command("XGROUP", "CREATE", "fs", "abe", "$")
    r.execute_command("XREADGROUP", "GROUP", "zed", "bob", "COUNT", 3, "STREAMS", "fs", ">")
    r.execute_command("XREADGROUP", "GROUP", "zed", "al", "COUNT", 1, "STREAMS", "fs", ">")
    full = r.execute_command("XINFO", "STREAM", "fs", "FULL")
    info = dict(zip(full[0::2], full[1::2]))
    assert list(info) == [b"length", b"radix-tree-keys", b"radix-tree-nodes", b"last-generated-id",
                          b"max-deleted-entry-id", b"entries-added", b"recorded-first-entry-id",
                          b"entries", b"groups"]
    assert info[b"length"] == 12 and len(info[b"entries"]) == 10  # COUNT 10 by default
    assert [g[1] for g in info[b"groups"]] == [b"abe", b"zed"]
    zed = dict(zip(info[b"groups"][1][0::2], info[b"groups"][1][1::2]))
    assert zed[b"entries-read"] == 4 and zed[b"lag"] == 8 and zed[b"pel-count"] == 4
    assert [p[0] for p in zed[b"pending"]] == [b"1-0", b"2-0", b"3-0", b"4-0"]
    consumers_ = [dict(zip(c[0::2], c[1::2])) for c in zed[b"consumers"]]
    assert [c[b"name"] for c in consumers_] == [b"al", b"bob"]
    assert list(consumers_[0]) == [b"name", b"seen-time", b"active-time", b"pel-count", b"pending"]
    assert consumers_[1][b"active-time"] > 0 and consumers_[1][b"pel-count"] == 3
    short = r.execute_command("XINFO", "STREAM", "fs", "FULL", "COUNT", 2)
    short = dict(zip(short[0::2], short[1::2]))
    assert len(short[b"entries"]) == 2
    assert len(dict(zip(short[b"groups"][1][0::2], short[b"groups"][1][1::2]))[b"pending"]) == 2
    everything = dict(zip(*[iter(r.execute_command("XINFO", "STREAM", "fs", "FULL", "COUNT", 0))] * 2))
    assert len(everything[b"entries"]) == 12
    assert error_of(r, "XINFO", "STREAM", "fs", "FULL", "COUNT") == (
        "unknown subcommand or wrong number of arguments for 'STREAM'. Try XINFO HELP.")
    assert error_of(r, "XINFO", "STREAM", "fs", "FULL", "COUNT", "x") == (
        "value is not an integer or out of range")


def test_xadd_sequence_overflow(server):
    # 7.2 refuses `ms-*` once that millisecond's sequence is used up (7.0 said "Elements are
    # too large to be stored").
    r = raw(server.port)
    r.delete("ov")
    r.execute_command("XADD", "ov", "1-18446744073709551615", "f", "v")
    assert error_of(r, "XADD", "ov", "1-*", "f", "v") == (
        "The ID specified in XADD is equal or smaller than the target stream top item")
    assert r.execute_command("XADD", "ov", "2-*", "f", "v") == b"2-0"


def test_hello_that_fails_changes_nothing(server):
    # Redis 7.2 (#11659): HELLO checks every option before any takes effect.
    r = raw(server.port)
    assert "Client names cannot contain spaces" in error_of(r, "HELLO", "3", "SETNAME", "bad name")
    r.delete("hh")
    r.hset("hh", "a", "1")
    assert r.execute_command("HGETALL", "hh") == [b"a", b"1"], "still RESP2"
    assert r.execute_command("CLIENT", "GETNAME") is None
    with pytest.raises(redis.AuthenticationError):
        r.execute_command("HELLO", "3", "AUTH", "bob", "x", "SETNAME", "n")
    assert r.execute_command("HGETALL", "hh") == [b"a", b"1"]
    assert r.execute_command("CLIENT", "GETNAME") is None
    # Without requirepass the default user takes any password when named (nopass).
    assert r.execute_command("AUTH", "default", "anything") == b"OK"
    hello = r.execute_command("HELLO", "2", "AUTH", "default", "x", "SETNAME", "n")
    assert b"proto" in hello
    assert r.execute_command("CLIENT", "GETNAME") == b"n"


def test_blocking_commands_in_scripts_behave_as_in_multi(server):
    # Redis 7.2 (#11568): a blocking command in a script does not block, as in MULTI, and
    # XREAD/XREADGROUP BLOCK are still refused there (unit/scripting.tcl "Blocking commands
    # ignores the timeout", "Script block the time during execution").
    r = raw(server.port)
    r.delete("nol", "noz")
    assert r.eval("return redis.call('blpop', 'nol', 0)", 0) is None
    assert r.eval("return redis.call('brpoplpush', 'nol', 'dst', 0)", 0) is None
    assert r.eval("return redis.call('blmpop', 0, 1, 'nol', 'left')", 0) is None
    assert r.eval("return redis.call('bzpopmin', 'noz', 0)", 0) is None
    assert r.eval("return redis.call('wait', 0, 0)", 0) == 0
    r.rpush("nol", "a")
    assert r.eval("return redis.call('blpop', 'nol', 0)", 0) == [b"nol", b"a"]
    assert "xread command is not allowed with BLOCK option from scripts" in error_of(
        r, "EVAL", "return redis.call('xread', 'block', 0, 'streams', 'nos', '$')", 0)


def test_nan_replies_are_one_nan(server):
    # Redis 7.2 (#11597): a NaN double is "nan" whatever its sign bit, as inf is "inf".
    import socket

    def command(sock, *args):
        sock.sendall(b"*%d\r\n" % len(args)
                     + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))

    def reply(sock, ends):
        data = b""
        while not data.endswith(ends):
            data += sock.recv(65536)
        return data

    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        for script in [b"return {double=0/0}", b"return {double=-(0/0)}"]:
            command(sock, b"EVAL", script, b"0")
            assert reply(sock, b"nan\r\n") == b"$3\r\nnan\r\n", script
        command(sock, b"HELLO", b"3")
        reply(sock, b"*0\r\n")
        for script in [b"return {double=0/0}", b"return {double=-(0/0)}"]:
            command(sock, b"EVAL", script, b"0")
            assert reply(sock, b"nan\r\n") == b",nan\r\n", script


def test_tracking_follows_the_keys_a_script_reads(server):
    # Redis 7.2 (#11770): client-side tracking remembers the keys a script read, not the keys
    # its caller declared. Eight keys, some on another shard than the connection whatever
    # the layout, none existing when read.
    import socket

    keys = [f"read{i}".encode() for i in range(8)]
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        def command(*args):
            sock.sendall(b"*%d\r\n" % len(args)
                         + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))

        def until(ends):
            data = b""
            while not data.endswith(ends):
                data += sock.recv(65536)
            return data

        command(b"HELLO", b"3")
        until(b"*0\r\n")
        command(b"CLIENT", b"TRACKING", b"on")
        until(b"+OK\r\n")
        other = redis.Redis(port=server.port)
        other.delete("declared", *keys)
        command(b"EVAL", b"for _, k in ipairs(ARGV) do redis.call('get', k) end",
                b"1", b"declared", *keys)
        until(b"_\r\n")
        other.set("declared", "x")
        invalidated = []
        for key in keys:
            other.set(key, "y")
            push = b">2\r\n$10\r\ninvalidate\r\n*1\r\n$%d\r\n%s\r\n" % (len(key), key)
            assert until(b"\r\n" + key + b"\r\n") == push, key
            invalidated.append(key)
        assert invalidated == keys


def test_info_has_redis_7_2_fields(server):
    # INFO fields Redis 7.2 added: the listener line (#9320), the blocking-key counts, the
    # event loop (#11963) and ACL denials (#11288).
    import threading

    r = redis.Redis(port=server.port)
    info = r.info("everything")
    assert info["listener0"]["name"] == "tcp" and info["listener0"]["port"] == server.port
    for field in ["eventloop_cycles", "eventloop_duration_sum", "eventloop_duration_cmd_sum",
                  "instantaneous_eventloop_cycles_per_sec",
                  "instantaneous_eventloop_duration_usec", "acl_access_denied_auth",
                  "acl_access_denied_cmd", "acl_access_denied_key", "acl_access_denied_channel",
                  "total_blocking_keys", "total_blocking_keys_on_nokey"]:
        assert field in info, field
    r.delete("blk", "grp")
    r.xgroup_create("grp", "g", id="$", mkstream=True)
    blockers = [threading.Thread(target=lambda: redis.Redis(port=server.port).blpop("blk", 5)),
                threading.Thread(target=lambda: redis.Redis(port=server.port).xreadgroup(
                    "g", "c", {"grp": ">"}, block=5000))]
    for t in blockers:
        t.start()
    deadline = time.time() + 10
    while r.info("clients")["total_blocking_keys"] < 2 and time.time() < deadline:
        time.sleep(0.01)
    clients = r.info("clients")
    assert (clients["total_blocking_keys"], clients["total_blocking_keys_on_nokey"]) == (2, 1)
    r.rpush("blk", "x")
    r.xadd("grp", {"f": "v"})
    for t in blockers:
        t.join()
    import socket

    before = r.info("stats")["acl_access_denied_auth"]
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(b"*3\r\n$4\r\nAUTH\r\n$6\r\nnobody\r\n$1\r\nx\r\n")
        assert sock.recv(1024).startswith(b"-WRONGPASS")
    assert r.info("stats")["acl_access_denied_auth"] == before + 1


def test_lpos_rank_takes_long_range(server):
    # Redis 7.2 (#12167): RANK LONG_MIN is refused, as out of -LONG_MAX..LONG_MAX.
    r = raw(server.port)
    r.delete("lp")
    r.rpush("lp", "a", "b", "a")
    assert "value must between -9223372036854775807 and 9223372036854775807" in error_of(
        r, "LPOS", "lp", "a", "RANK", "-9223372036854775808")
    assert r.execute_command("LPOS", "lp", "a", "RANK", "-9223372036854775807") is None
    assert r.execute_command("LPOS", "lp", "a", "RANK", "-1") == 2


def test_blocked_xreadgroup_is_answered_when_its_stream_expires(server):
    # Redis 7.2 (#11012): a blocked XREADGROUP whose stream goes away is answered NOGROUP,
    # also when the stream expires.
    import threading

    r = redis.Redis(port=server.port)
    r.delete("xexp")
    r.xgroup_create("xexp", "g", id="$", mkstream=True)
    r.pexpire("xexp", 300)
    got = {}

    def block():
        try:
            got["reply"] = redis.Redis(port=server.port).execute_command(
                "XREADGROUP", "GROUP", "g", "c", "BLOCK", 20000, "STREAMS", "xexp", ">")
        except redis.ResponseError as e:
            got["reply"] = str(e)

    started = time.time()
    blocker = threading.Thread(target=block)
    blocker.start()
    blocker.join(30)
    assert got["reply"] == ("NOGROUP No such key 'xexp' or consumer group 'g' in XREADGROUP "
                            "with GROUP option")
    assert time.time() - started < 15, "answered at the expiry, not at the time-out"
