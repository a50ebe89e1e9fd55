"""CONFIG against a real redis-server (7.0, installed by scripts/setup.sh): every parameter
name Redis's CONFIG GET * lists is known to WeTask's CONFIG GET and CONFIG SET, a value is
taken or refused as Redis takes or refuses it (with Redis's error text), and aliases follow
each other. The parameters WeTask acts on and will not change at run time where Redis would
are listed below, with the reason."""

import redis

from test_differential import real_redis  # noqa: F401 (a fixture)

# CONFIG SET that Redis takes and WeTask refuses ("can't set immutable config"): WeTask acts
# on these, and cannot change them on a running server.
REFUSED_HERE = {
    "port": "the listeners are bound per shard at start",
    "bind": "the listeners are bound per shard at start",
    "appendonly": "the journal is opened, or not, at start (--appendonly)",
    "aof-load-truncated": "read when the journal is loaded, at start (--aof-load-truncated)",
    "proto-max-bulk-len": "the decoders' limit is fixed at start (--proto-max-bulk-len)",
}

# Values that differ by nature: where this process runs and what it was started with.
OWN_VALUES = {"port", "dir", "bind", "appendonly", "save", "maxmemory", "databases",
              "client-output-buffer-limit", "io-threads", "protected-mode", "appendfsync",
              "busy-reply-threshold", "lua-time-limit", "maxclients", "timeout",
              "tcp-keepalive", "proto-max-bulk-len",
              "auto-aof-rewrite-min-size", "auto-aof-rewrite-percentage",
              "aof-load-truncated", "appenddirname", "maxmemory-samples",
              "maxmemory-policy", "requirepass"}


# Redis 7.2 (which WeTask announces) changed these from the 7.0 the suite compares with: the
# expected error text is 7.0's with 7.2's change applied.
REDIS_72_TEXT = {
    # 7.2 adds the log level "nothing".
    "loglevel": ("debug, verbose, notice, warning", "debug, verbose, notice, warning, nothing"),
}


def outcome(client, *args):
    try:
        return ("ok", client.execute_command(*args))
    except redis.ResponseError as e:
        return ("error", str(e))


def test_every_redis_parameter_is_known_and_checked_the_same(server, real_redis):  # noqa: F811
    theirs = redis.Redis(port=real_redis, decode_responses=True)
    ours = redis.Redis(port=server.port, decode_responses=True)
    defaults = theirs.config_get("*")
    assert len(defaults) > 150
    ours_all = ours.config_get("*")
    missing = sorted(set(defaults) - set(ours_all))
    assert not missing, f"CONFIG GET * lacks {missing}"
    wrong = []
    for name, default in sorted(defaults.items()):
        assert name in ours.config_get(name), name
        if name not in OWN_VALUES and ours.config_get(name)[name] != default:
            wrong.append((name, "default", default, ours.config_get(name)[name]))
        # Its own value, then a word no parameter takes as a number or a yes/no.
        for value in [default, "bogus-value"]:
            expected = outcome(theirs, "CONFIG", "SET", name, value)
            got = outcome(ours, "CONFIG", "SET", name, value)
            if name in REDIS_72_TEXT and expected[0] == "error":
                expected = ("error", expected[1].replace(*REDIS_72_TEXT[name]))
            outcome(theirs, "CONFIG", "SET", name, default)
            outcome(ours, "CONFIG", "SET", name, default)
            if name in REFUSED_HERE and expected[0] == "ok":
                if got[0] != "error" or "immutable" not in got[1]:
                    wrong.append((name, value, expected, got))
            elif name in OWN_VALUES and value == "bogus-value":
                # Checked by WeTask's own rules: refused too, not necessarily in Redis's words.
                if got[0] != expected[0]:
                    wrong.append((name, value, expected, got))
            elif got != expected:
                wrong.append((name, value, expected, got))
    assert not wrong, "\n".join(map(repr, wrong))


def test_redis_72_parameters(server):
    ours = redis.Redis(port=server.port, decode_responses=True)
    for name, default in [("locale-collate", ""), ("cluster-announce-human-nodename", ""),
                          ("set-max-listpack-entries", "128"), ("set-max-listpack-value", "64")]:
        assert ours.config_get(name) == {name: default}
    assert ours.config_set("set-max-listpack-entries", "64")
    assert ours.config_get("set-max-listpack-entries") == {"set-max-listpack-entries": "64"}
    ours.config_set("set-max-listpack-entries", "128")
    assert ours.config_set("loglevel", "nothing")
    assert ours.config_get("loglevel") == {"loglevel": "nothing"}
    ours.config_set("loglevel", "notice")


def test_aliases_and_units_follow_redis(server, real_redis):  # noqa: F811
    theirs = redis.Redis(port=real_redis, decode_responses=True)
    ours = redis.Redis(port=server.port, decode_responses=True)
    steps = [
        ("hash-max-ziplist-entries", "100", "hash-max-listpack-entries"),
        ("zset-max-listpack-value", "2kb", "zset-max-ziplist-value"),
        ("slave-read-only", "NO", "replica-read-only"),
        ("repl-backlog-size", "2mb", "repl-backlog-size"),
        ("loglevel", "WARNING", "loglevel"),
    ]
    defaults = theirs.config_get("*")
    try:
        for name, value, read_back in steps:
            assert outcome(ours, "CONFIG", "SET", name, value) == outcome(
                theirs, "CONFIG", "SET", name, value
            ), name
            assert ours.config_get(read_back) == theirs.config_get(read_back), read_back
    finally:
        # Both servers outlive this test.
        for name, _, _ in steps:
            theirs.config_set(name, defaults[name])
            ours.config_set(name, defaults[name])
