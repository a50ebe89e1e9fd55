"""COMMAND INFO against a real redis-server: every command both serve, and every
subcommand of the container commands, has Redis's arity, flags, key positions and ACL
categories. Debian's redis-server is 7.0; what Redis 7.2 changed (its src/commands/*.json,
read against 7.0.15's) is expected instead, listed in `REDIS_72`. COMMAND GETKEYS and
GETKEYSANDFLAGS are compared too."""

import pytest
import redis

from test_differential import real_redis  # noqa: F401  (the fixture)

# What Redis 7.2 changed, per (name, field): the 7.2 value WeTask must show.
REDIS_72 = {
    # "Blocking commands that were disallowed in scripts now behave in scripts the same
    # they did in MULTI" (#11568): no longer noscript.
    ("blmove", "flags"): ["blocking", "denyoom", "write"],
    ("blpop", "flags"): ["blocking", "write"],
    ("brpop", "flags"): ["blocking", "write"],
    ("brpoplpush", "flags"): ["blocking", "denyoom", "write"],
    ("bzpopmax", "flags"): ["blocking", "fast", "write"],
    ("bzpopmin", "flags"): ["blocking", "fast", "write"],
    ("wait", "flags"): [],
    # ZRANK/ZREVRANK … WITHSCORE (#11235).
    ("zrank", "arity"): -3,
    ("zrevrank", "arity"): -3,
    # COMMAND GETKEYS of a command with no arguments (#10736 in 7.2's json).
    ("command|getkeys", "arity"): -3,
    ("command|getkeysandflags", "arity"): -3,
    # "Update request / response policy hints for a few commands" (#12417).
    ("client|setname", "tips"): ["request_policy:all_nodes", "response_policy:all_succeeded"],
    ("config|resetstat", "tips"): ["request_policy:all_nodes", "response_policy:all_succeeded"],
    ("config|rewrite", "tips"): ["request_policy:all_nodes", "response_policy:all_succeeded"],
    ("latency|reset", "tips"): ["request_policy:all_nodes", "response_policy:agg_sum"],
    ("acl|deluser", "tips"): ["request_policy:all_nodes", "response_policy:all_succeeded"],
    ("acl|save", "tips"): ["request_policy:all_nodes", "response_policy:all_succeeded"],
    ("acl|setuser", "tips"): ["request_policy:all_nodes", "response_policy:all_succeeded"],
    ("msetnx", "tips"): [],
    ("randomkey", "tips"): ["nondeterministic_output", "request_policy:all_shards",
                            "response_policy:special"],
    ("scan", "tips"): ["nondeterministic_output", "request_policy:special",
                       "response_policy:special"],
}
# Subcommands Redis 7.2 added to containers, and those WeTask does not have.
ADDED_72 = {"client|no-touch", "client|setinfo", "cluster|myshardid"}
NOT_SERVED = {"script|debug"}


def table(port):
    client = redis.Redis(port=port)
    client.response_callbacks.clear()
    out = {}
    for entry in client.execute_command("COMMAND"):
        for item in [entry] + list(entry[9] or []):
            out[item[0].decode()] = {
                "arity": item[1],
                "flags": sorted(f.decode() for f in item[2]),
                "keys": (item[3], item[4], item[5]),
                "categories": sorted(c.decode() for c in item[6]),
                "tips": sorted(t.decode() for t in item[7]),
                "key_specs": repr(item[8]),
                "subcommands": sorted(s[0].decode() for s in item[9] or []),
            }
    return out


def test_command_info_matches_redis(server, real_redis):  # noqa: F811
    theirs, ours = table(real_redis), table(server.port)
    compared = 0
    for name, want in theirs.items():
        if name not in ours:
            continue
        compared += 1
        for field, value in want.items():
            expected = REDIS_72.get((name, field), value)
            if field == "subcommands":
                expected = sorted((set(value) | {s for s in ADDED_72 if s.startswith(name + "|")})
                                  - NOT_SERVED)
            assert ours[name][field] == expected, f"{name} {field}"
    # Every Redis command WeTask serves was compared (containers' subcommands included).
    assert compared >= 300, compared


@pytest.mark.parametrize("line", [
    "GETKEYS SET a b", "GETKEYS GET a", "GETKEYS LMOVE a b LEFT RIGHT",
    "GETKEYS MSET a 1 b 2", "GETKEYS ZUNIONSTORE d 2 a b", "GETKEYS SORT s BY w_* STORE d",
    "GETKEYS EVAL x 2 a b", "GETKEYS EVAL x 0", "GETKEYS XREAD COUNT 1 STREAMS a b 0 0",
    "GETKEYS OBJECT ENCODING k", "GETKEYS PING", "GETKEYS FOO a", "GETKEYS SET a",
    "GETKEYS CLIENT ID", "GETKEYS GEORADIUS g 1 2 3 km STORE d",
    "GETKEYSANDFLAGS SET a b", "GETKEYSANDFLAGS SET a b GET", "GETKEYSANDFLAGS LMOVE a b LEFT RIGHT",
    "GETKEYSANDFLAGS ZUNIONSTORE d 2 a b", "GETKEYSANDFLAGS GET a", "GETKEYSANDFLAGS DEL a b",
    "GETKEYSANDFLAGS BITFIELD k GET u8 0", "GETKEYSANDFLAGS BITFIELD k SET u8 0 1",
    "GETKEYSANDFLAGS SORT s STORE d", "GETKEYSANDFLAGS RENAME a b",
    "LIST FILTERBY PATTERN cl*", "LIST FILTERBY ACLCAT hyperloglog", "LIST FILTERBY MODULE x",
    "LIST FILTERBY FOO x", "LIST x", "INFO get client|id nope", "COUNT x",
])
def test_command_subcommands_match_redis(server, real_redis, line):  # noqa: F811
    def reply(port):
        client = redis.Redis(port=port)
        client.response_callbacks.clear()
        try:
            got = client.execute_command("COMMAND", *line.split())
        except redis.ResponseError as e:
            return ("error", str(e))
        if line.startswith("LIST"):
            got = sorted(got)
        if line.startswith("INFO"):
            got = [g[:7] if g else g for g in got]  # the fields compared above
            got = [[*g[:2], sorted(g[2]), *g[3:6], sorted(g[6])] if g else g for g in got]
        return got
    want, got = reply(real_redis), reply(server.port)
    if line == "GETKEYS PING":
        # 7.0 checks COMMAND GETKEYS's own arity first (-4); 7.2's is -3, then the command's.
        assert want == ("error", "wrong number of arguments for 'command|getkeys' command")
        want = ("error", "The command has no key arguments")
    if line.startswith("LIST") and isinstance(want, list):
        # Redis's own commands WeTask does not serve; WeTask's task commands and 7.2's.
        theirs_only = {"pfdebug", "pfselftest", "script|debug"}
        want = sorted(n for n in want if n.decode() not in theirs_only)
        got = [
            n for n in got if n.decode() not in ADDED_72
        ]
    assert got == want, line


# Commands whose COMMAND DOCS Redis 7.2 changed beyond the summaries (which 7.2 rewrote) and
# the `display_text` it added to every argument: arguments renamed as unique ids (#11051),
# SETNX, SETEX, PSETEX and QUIT deprecated, complexity texts, ZRANK's WITHSCORE history, and
# the containers holding those (CLUSTER holds 7.2's MYSHARDID, ACL LOG's 7.2 history).
DOCS_72 = {
    "bitcount", "bitfield", "bitfield_ro", "bitop", "bitpos", "flushall", "flushdb", "geoadd",
    "geohash", "geopos", "georadius", "georadius_ro", "georadiusbymember",
    "georadiusbymember_ro", "geosearch", "geosearchstore", "hello", "hmset", "hset", "lcs",
    "mset", "msetnx", "pfmerge", "psubscribe", "shutdown", "sort", "sort_ro", "xadd",
    "xclaim", "xreadgroup", "xsetid", "zadd", "zrange", "zrangebylex", "zrangebyscore",
    "zrangestore", "zrank", "zrevrangebylex", "zrevrangebyscore", "zrevrank", "client",
    "command", "config", "function", "script", "xgroup", "xinfo", "geodist", "hscan",
    "punsubscribe", "sscan", "sunsubscribe", "unsubscribe", "xread", "zrandmember", "zscan",
    "psetex", "quit", "setex", "setnx", "cluster", "migrate",
    # ACL LOG's entry id and timestamps (#11477), and the tips above.
    "acl",
}


def docs(port):
    client = redis.Redis(port=port, protocol=3)
    client.response_callbacks.clear()
    return {k.decode(): v for k, v in client.execute_command("COMMAND", "DOCS").items()}


def without_7_2_texts(doc):
    if isinstance(doc, dict):
        return {k: without_7_2_texts(v) for k, v in doc.items()
                if k not in (b"summary", b"display_text")}
    if isinstance(doc, list):
        return [without_7_2_texts(v) for v in doc]
    return doc


def test_command_docs_match_redis(server, real_redis):  # noqa: F811
    theirs, ours = docs(real_redis), docs(server.port)
    compared = 0
    for name, doc in theirs.items():
        if name not in ours or name in DOCS_72:
            continue
        compared += 1
        assert without_7_2_texts(ours[name]) == without_7_2_texts(doc), name
    assert compared >= 150, compared


def test_command_docs_are_redis_7_2s(server):
    # 7.2's src/commands/*.json: summaries, deprecations, history and argument display texts.
    ours = docs(server.port)
    assert ours["get"][b"summary"] == b"Returns the string value of a key."
    assert list(ours["quit"][b"doc_flags"]) == [b"deprecated"]
    assert ours["quit"][b"deprecated_since"] == b"7.2.0"
    assert [b"7.2.0", b"Added the optional `WITHSCORE` argument."] in ours["zrank"][b"history"]
    key = ours["get"][b"arguments"][0]
    assert key == {b"name": b"key", b"type": b"key", b"display_text": b"key",
                   b"key_spec_index": 0}
    condition = ours["set"][b"arguments"][2]
    assert condition[b"type"] == b"oneof" and b"display_text" not in condition
    assert condition[b"arguments"][0][b"token"] == b"NX"
    assert b"client|setinfo" in ours["client"][b"subcommands"]
    one = redis.Redis(port=server.port, protocol=3)
    one.response_callbacks.clear()
    only = one.execute_command("COMMAND", "DOCS", "client|no-touch", "nosuch")
    assert list(only) == [b"client|no-touch"]
    task = one.execute_command("COMMAND", "DOCS", "task.submit")[b"task.submit"]
    assert task[b"group"] and task[b"summary"]
