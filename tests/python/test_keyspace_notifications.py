"""Keyspace notifications against a real redis-server 7.0: the same commands on both, with
`notify-keyspace-events` on, and every `__keyspace@…` and `__keyevent@…` message each command
publishes compared, in order, on RESP2 and RESP3 subscribers.

Each script's keys share one random hash tag, so on several shards a command's events come
from one shard in Redis's order; `test_events_on_keys_spread_over_shards` uses untagged random
names and compares each command's events as a multiset (shards publish independently).
"""

import random
import shlex
import string
import threading
import time

import pytest
import redis

from test_differential import normalise, real_redis  # noqa: F401 (a fixture)

SCRIPTS = {
    "strings": [
        "SET {t}a 1", "SET {t}a 2 XX", "SET {t}a 3 NX", "SET {t}b 1 NX EX 100",
        "SET {t}b 2 KEEPTTL", "SET {t}c v GET", "SET {t}c w NX GET", "SET {t}c x XX GET",
        "SETNX {t}a 9", "SETNX {t}d 9", "SETEX {t}e 100 v", "PSETEX {t}e 100000 w",
        "MSET {t}f 1 {t}g 2 {t}a 3", "MSETNX {t}h 1 {t}i 2", "MSETNX {t}h 1 {t}j 2",
        "GETSET {t}k 1", "GETDEL {t}k", "GETDEL {t}k", "GETEX {t}a EX 100",
        "GETEX {t}a PERSIST", "GETEX {t}a PERSIST", "GETEX {t}nope EX 5", "GETEX {t}a",
        "APPEND {t}l abc", "APPEND {t}l def", "INCR {t}n", "DECR {t}n", "INCRBY {t}n 5",
        "DECRBY {t}n 2", "INCRBYFLOAT {t}n 1.5", "INCR {t}l", "SETRANGE {t}m 3 xy",
        "SETRANGE {t}m 0 ''", "SETRANGE {t}none 0 ''", "SETBIT {t}bits 7 1",
        "BITFIELD {t}bf SET u8 0 200", "BITFIELD {t}bf GET u8 0",
        "BITOP OR {t}dst {t}bits {t}bf", "BITOP AND {t}dst {t}x1 {t}x2",
        "PFADD {t}hll a b", "PFADD {t}hll a", "PFMERGE {t}hll2 {t}hll",
    ],
    "lists": [
        "LPUSH {t}l a b c", "RPUSH {t}l d", "LPUSHX {t}l e", "RPUSHX {t}nope e",
        "LINSERT {t}l BEFORE a x", "LINSERT {t}l BEFORE zz x", "LSET {t}l 0 y",
        "LPOP {t}l", "RPOP {t}l 2", "LPOP {t}l 0", "LREM {t}l 0 x", "LREM {t}l 0 nope",
        "LTRIM {t}l 0 0", "LTRIM {t}nope 0 1", "RPUSH {t}s 1 2", "LMOVE {t}s {t}d LEFT RIGHT",
        "RPOPLPUSH {t}s {t}d", "RPOPLPUSH {t}s {t}d", "LMOVE {t}d {t}d LEFT LEFT",
        "RPUSH {t}m 1 2 3", "LMPOP 2 {t}nope {t}m LEFT COUNT 2", "LMPOP 1 {t}m RIGHT",
        "RPUSH {t}b 1", "BLPOP {t}b 1", "RPUSH {t}b 1 2", "BRPOP {t}b 1",
        "BLMOVE {t}b {t}d RIGHT LEFT 1", "LPOP {t}l", "RPUSH {t}q 1", "LTRIM {t}q 1 0",
        "RPUSH {t}srt 3 1 2", "SORT {t}srt STORE {t}sorted", "SORT {t}nope STORE {t}sorted",
    ],
    "hashes and sets": [
        "HSET {t}h a 1 b 2", "HSET {t}h a 1", "HMSET {t}h c 3", "HSETNX {t}h a 9",
        "HSETNX {t}h z 9", "HDEL {t}h nope", "HDEL {t}h a b", "HINCRBY {t}h n 2",
        "HINCRBYFLOAT {t}h f 0.5", "HDEL {t}h c z n f", "SADD {t}s a b", "SADD {t}s a",
        "SREM {t}s nope", "SREM {t}s a", "SPOP {t}s", "SPOP {t}s", "SADD {t}s x y z",
        "SPOP {t}s 3", "SADD {t}o 1 2", "SMOVE {t}o {t}p 1", "SMOVE {t}o {t}p 9",
        "SMOVE {t}o {t}p 2", "SADD {t}a 1 2 3", "SADD {t}b 2 3 4",
        "SINTERSTORE {t}r {t}a {t}b", "SUNIONSTORE {t}r {t}a {t}b",
        "SDIFFSTORE {t}r {t}a {t}a", "SDIFFSTORE {t}r {t}a {t}b",
    ],
    "sorted sets": [
        "ZADD {t}z 1 a 2 b", "ZADD {t}z 1 a", "ZADD {t}z 5 a", "ZADD {t}z XX 1 nope",
        "ZADD {t}z INCR 0 a", "ZADD {t}z INCR 1 a", "ZADD {t}z NX 3 c",
        "ZINCRBY {t}z 2 b", "ZREM {t}z nope", "ZREM {t}z c", "ZREMRANGEBYRANK {t}z 5 9",
        "ZREMRANGEBYRANK {t}z 0 0", "ZADD {t}z 1 a 2 c 3 d", "ZREMRANGEBYSCORE {t}z 1 1",
        "ZADD {t}lex 0 a 0 b 0 c", "ZREMRANGEBYLEX {t}lex [a [b", "ZPOPMIN {t}z",
        "ZPOPMAX {t}z 5", "ZPOPMIN {t}z", "ZADD {t}y 1 a 2 b 3 c", "BZPOPMIN {t}y 1",
        "BZPOPMAX {t}y 1", "ZMPOP 1 {t}y MIN", "ZADD {t}y 1 a", "BZMPOP 1 1 {t}y MAX",
        "ZADD {t}u 1 a 2 b", "ZADD {t}v 2 b 3 c", "ZUNIONSTORE {t}r 2 {t}u {t}v",
        "ZINTERSTORE {t}r 2 {t}u {t}v", "ZDIFFSTORE {t}r 2 {t}u {t}u",
        "ZRANGESTORE {t}r {t}u 0 -1", "ZRANGESTORE {t}r {t}nope 0 -1",
        "GEOADD {t}g 13.36 38.11 pal 15.08 37.50 cat", "GEOADD {t}g 13.36 38.11 pal",
        "GEOADD {t}g CH 13.40 38.11 pal", "GEOSEARCHSTORE {t}gs {t}g FROMLONLAT 15 37 BYRADIUS 200 km",
        "GEORADIUS {t}g 15 37 200 km STORE {t}gr", "GEOSEARCHSTORE {t}gs {t}g FROMLONLAT 0 0 BYRADIUS 1 km",
    ],
    "streams": [
        "XADD {t}x 1-1 f v", "XADD {t}x MAXLEN 1 2-1 f v", "XADD {t}x MAXLEN 5 3-1 f v",
        "XADD {t}nope NOMKSTREAM * f v", "XDEL {t}x 9-9", "XDEL {t}x 2-1", "XTRIM {t}x MAXLEN 5",
        "XADD {t}x 4-1 f v", "XTRIM {t}x MAXLEN 1", "XGROUP CREATE {t}x g 0",
        "XGROUP CREATE {t}new g $ MKSTREAM", "XGROUP CREATECONSUMER {t}x g c1",
        "XGROUP CREATECONSUMER {t}x g c1", "XGROUP SETID {t}x g 0",
        "XREADGROUP GROUP g c2 COUNT 1 STREAMS {t}x >", "XREADGROUP GROUP g c2 STREAMS {t}x >",
        "XCLAIM {t}x g c3 0 4-1", "XAUTOCLAIM {t}x g c4 0 0", "XGROUP DELCONSUMER {t}x g c9",
        "XGROUP DELCONSUMER {t}x g c2", "XGROUP DESTROY {t}x nope", "XGROUP DESTROY {t}x g",
        "XSETID {t}x 9-9", "XACK {t}x g 4-1",
    ],
    "keys": [
        "SET {t}a 1", "EXPIRE {t}a 100", "EXPIRE {t}a 100 NX", "PEXPIRE {t}a 100000 XX",
        "EXPIREAT {t}a 99999999999", "PERSIST {t}a", "PERSIST {t}a", "EXPIRE {t}nope 5",
        "PEXPIREAT {t}a 1", "SET {t}a 1", "EXPIRE {t}a -1", "SET {t}a 1", "SET {t}b 2",
        "DEL {t}a {t}nope {t}b", "UNLINK {t}nope", "SET {t}c 1", "RENAME {t}c {t}d",
        "RENAME {t}d {t}d", "SET {t}e 2", "RENAME {t}d {t}e", "RENAMENX {t}e {t}f",
        "SET {t}g 1", "RENAMENX {t}f {t}g", "COPY {t}g {t}h", "COPY {t}g {t}h",
        "COPY {t}g {t}h REPLACE", "COPY {t}g {t}i DB 1", "MOVE {t}g 2", "MOVE {t}nope 2",
        "SET {t}j 1", "RESTORE {t}k 0 DUMP-OF:{t}j", "RESTORE {t}k 0 DUMP-OF:{t}j",
        "RESTORE {t}k 0 DUMP-OF:{t}j REPLACE",
        "FLUSHDB",
    ],
}

def words_of(line, tag, source):
    """A script line's arguments: '' is the empty string, DUMP-OF:key the DUMP of that key
    in `source` (Redis: both servers then restore the same payload)."""
    out = []
    for w in line.replace("{t}", "{" + tag + "}").split(" "):
        if w == "''":
            w = ""
        elif w.startswith("DUMP-OF:"):
            w = source.dump(w[len("DUMP-OF:"):])
        out.append(w)
    return out


def reply(client, words):
    try:
        got = normalise(client.execute_command(*words))
    except redis.ResponseError as e:
        return ("error", str(e))
    if str(words[0]).upper() == "SPOP" and isinstance(got, (list, set)):
        return sorted(got)
    return got


MARK = "__keyevent@15__:zz-end-of-command"


class Listener:
    """A subscriber to every keyspace and keyevent channel of a server."""

    def __init__(self, port, protocol):
        self.client = redis.Redis(port=port, protocol=protocol)
        self.pubsub = self.client.pubsub()
        self.pubsub.psubscribe("__key*__:*")
        self.wait_for("psubscribe")

    def wait_for(self, kind):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            m = self.pubsub.get_message(timeout=1)
            if m and m["type"] == kind:
                return m
        raise AssertionError(f"no {kind} message")

    def collect(self, publisher, at_least=0):
        """The messages up to a marker this publishes, and then until `at_least` came."""
        publisher.execute_command("PUBLISH", MARK, "x")
        got, marked = [], False
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (marked and len(got) >= at_least):
            m = self.pubsub.get_message(timeout=0.2)
            if not m or m["type"] != "pmessage":
                continue
            if m["channel"] == MARK.encode():
                marked = True
                continue
            got.append((m["channel"], m["data"]))
        assert marked, "the marker never came back"
        return got

    def close(self):
        self.pubsub.close()
        self.client.close()


def rename_db(events, tag):
    return [(c.replace(tag.encode(), b"<t>"), d.replace(tag.encode(), b"<t>")) for c, d in events]


def config_events(client, classes):
    client.config_set("notify-keyspace-events", classes)


@pytest.mark.parametrize("protocol", [2, 3])
@pytest.mark.parametrize("family", sorted(SCRIPTS))
def test_events_match_redis(server, real_redis, family, protocol):  # noqa: F811
    theirs = redis.Redis(port=real_redis, protocol=protocol)
    ours = redis.Redis(port=server.port, protocol=protocol)
    for c in (theirs, ours):
        c.response_callbacks.clear()
        c.flushall()
        config_events(c, "KEAn")
    listen_theirs = Listener(real_redis, protocol)
    listen_ours = Listener(server.port, protocol)
    tag = "".join(random.choices(string.ascii_lowercase, k=8))
    total = 0
    try:
        for line in SCRIPTS[family]:
            words = words_of(line, tag, theirs)
            expected_reply = reply(theirs, words)
            assert reply(ours, words) == expected_reply, line
            expected = listen_theirs.collect(theirs)
            got = listen_ours.collect(ours, len(expected))
            assert rename_db(got, tag) == rename_db(expected, tag), f"{family}: {line}"
            total += len(expected)
        # The scripts are there to make events: most lines make some.
        assert total > len(SCRIPTS[family]), total
    finally:
        listen_theirs.close()
        listen_ours.close()
        for c in (theirs, ours):
            config_events(c, "")
            c.flushall()


def test_events_on_keys_spread_over_shards(server, real_redis):  # noqa: F811
    """Untagged random names: each command's events, from whichever shards, as Redis's."""
    theirs = redis.Redis(port=real_redis)
    ours = redis.Redis(port=server.port)
    for c in (theirs, ours):
        c.flushall()
        config_events(c, "KEA")
    listen_theirs = Listener(real_redis, 2)
    listen_ours = Listener(server.port, 2)
    names = ["k" + "".join(random.choices(string.ascii_lowercase, k=6)) for _ in range(20)]
    try:
        for i in range(0, len(names), 4):
            a, b, c, d = names[i : i + 4]
            for line in [
                f"MSET {a} 1 {b} 2 {c} 3",
                f"RENAME {a} {d}",
                f"COPY {d} {a}",
                f"LPUSH {a}l x y",
                f"LMOVE {a}l {b}l LEFT LEFT",
                f"SUNIONSTORE {c}s {a}l {b}l",
                f"SADD {a}s 1",
                f"SUNIONSTORE {c}s {a}s {b}s",
                f"MSETNX {a}n 1 {b}n 2",
                f"DEL {a} {b} {c} {d} {a}l {b}l",
                # A script that reaches an undeclared key on another shard after writing
                # runs again holding every shard: its first run's events are dropped.
                "EVAL \"redis.call('SET',KEYS[1],'1');redis.call('SET',ARGV[1],'2')\" "
                f"1 {a}e {b}e",
                f"EVAL \"return redis.call('DEL',KEYS[1],KEYS[2])\" 2 {a}e {b}e",
            ]:
                words = shlex.split(line)
                assert reply(ours, words) == reply(theirs, words), line
                expected = listen_theirs.collect(theirs)
                got = listen_ours.collect(ours, len(expected))
                assert sorted(got) == sorted(expected), line
    finally:
        listen_theirs.close()
        listen_ours.close()
        for c in (theirs, ours):
            config_events(c, "")
            c.flushall()


def blocked_clients(client):
    return client.info("clients")["blocked_clients"]


@pytest.mark.parametrize("block", ["BLPOP {k} 10", "BLMOVE {k} {k}dst LEFT RIGHT 10",
                                   "BZPOPMIN {k}z 10"])
def test_a_served_blocked_pop_notifies_as_in_redis(server, real_redis, block):  # noqa: F811
    theirs = redis.Redis(port=real_redis)
    ours = redis.Redis(port=server.port)
    # One hash tag: the destination of a move lives with its source.
    key = "{b" + "".join(random.choices(string.ascii_lowercase, k=6)) + "}"
    push = f"ZADD {key}z 1 m" if "ZPOP" in block else f"LPUSH {key} x"
    events = []
    for client, port in ((theirs, real_redis), (ours, server.port)):
        client.flushall()
        config_events(client, "KEAn")
        listener = Listener(port, 2)
        waiter = redis.Redis(port=port)
        t = threading.Thread(target=lambda: waiter.execute_command(*block.format(k=key).split()))
        t.start()
        deadline = time.monotonic() + 10
        while blocked_clients(client) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert blocked_clients(client) == 1
        client.execute_command(*push.split())
        t.join(timeout=10)
        got = listener.collect(client, len(events[0]) if events else 0)
        events.append(got)
        listener.close()
        config_events(client, "")
    assert events[1] == events[0]
    assert len(events[0]) >= 3, events[0]


def test_an_actively_expired_key_is_notified(server):
    client = redis.Redis(port=server.port)
    config_events(client, "Exe")
    listener = Listener(server.port, 2)
    try:
        key = "exp" + "".join(random.choices(string.ascii_lowercase, k=6))
        client.set(key, "v", px=50)
        deadline = time.monotonic() + 10
        seen = []
        # Active expiry finds it without any read.
        while time.monotonic() < deadline and (b"__keyevent@0__:expired", key.encode()) not in seen:
            m = listener.pubsub.get_message(timeout=0.2)
            if m and m["type"] == "pmessage":
                seen.append((m["channel"], m["data"]))
        assert (b"__keyevent@0__:expired", key.encode()) in seen
    finally:
        listener.close()
        config_events(client, "")


def test_config_reports_and_checks_the_classes(server):
    client = redis.Redis(port=server.port)
    try:
        config_events(client, "KEA")
        assert client.config_get("notify-keyspace-events") == {"notify-keyspace-events": "AKE"}
        config_events(client, "Elg")
        assert client.config_get("notify-keyspace-events") == {"notify-keyspace-events": "glE"}
        with pytest.raises(redis.ResponseError, match="Invalid event class character"):
            config_events(client, "KQ")
        assert client.config_get("notify-keyspace-events") == {"notify-keyspace-events": "glE"}
    finally:
        config_events(client, "")
