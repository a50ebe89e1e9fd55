"""ACL in Redis 7's model: the ACL commands and their errors against a real redis-server,
a worker limited to its queues, rule changes reaching open connections, the ACL file across
a restart, and `requirepass` as the default user's password.

Debian's redis-server is 7.0; where 7.2 changed a text (the NOPERM replies, #11160) or a
field (ACL LOG's entry id and timestamps, `sanitize-payload` on new users, rules kept in the
order given, #11224), the 7.0 reply is mapped to 7.2's before comparing (`to_72`)."""

import os
import random
import re
import string
import tempfile

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from conftest import Server
from test_differential import real_redis  # noqa: F401  (the fixture)


@pytest.fixture(scope="module", params=["1", "2"], ids=["shards1", "shards2"])
def server(request):
    """Servers of this module's own: its refusals and users must not show in the shared
    server's command statistics, which other tests read."""
    srv = Server("--shards", request.param, "--appendonly", "no")
    yield srv
    srv.stop()


def raw(port, **kw):
    # No retries: a refused login is an answer here, not a reason to try again with backoff.
    client = redis.Redis(port=port, retry=Retry(NoBackoff(), 0), **kw)
    client.response_callbacks.clear()
    return client


def reply(client, *command):
    try:
        return client.execute_command(*command)
    except (redis.ResponseError, redis.AuthenticationError) as err:
        return ("error", str(err))


def as_dict(value):
    """A map reply, whether the client made it a dict or left it as pairs."""
    return value if isinstance(value, dict) else dict(zip(*[iter(value)] * 2))


def connection(client):
    """One connection of the client's pool (redis-py 5.3 dropped the argument)."""
    try:
        return client.connection_pool.get_connection()
    except TypeError:
        return client.connection_pool.get_connection("PING")


def reset_users(client):
    for name in client.execute_command("ACL", "USERS"):
        if name != b"default":
            client.execute_command("ACL", "DELUSER", name)
    client.execute_command("ACL", "LOG", "RESET")


def to_72(value, user=None):
    """Redis 7.0's texts as 7.2 words them."""
    if isinstance(value, tuple) and value[0] == "error":
        text = value[1]
        text = re.sub(r"^this user has no permissions to run the '(.+)' command$",
                      lambda m: f"User {user} has no permissions to run the '{m.group(1)}' command",
                      text)
        text = text.replace("this user has no permissions to access one of the keys used as arguments",
                            "No permissions to access a key")
        text = text.replace("this user has no permissions to access one of the channels used as arguments",
                            "No permissions to access a channel")
        text = text.replace("The user executing the script can't access at least one of the keys mentioned in the command arguments",
                            "ACL failure in script: No permissions to access a key")
        # 7.0 does not name the command a script was refused; 7.2 does.
        text = text.replace("The user executing the script can't run this command or subcommand",
                            f"ACL failure in script: User {user} has no permissions to run the <cmd> command")
        return ("error", text)
    if isinstance(value, bytes):
        return value.replace(b"This user has no permissions", f"User {user} has no permissions".encode())
    return value


# SETUSER rules, good and bad, in the order both servers get them.
SETUSER = [
    ["alice", "on", ">pw1", ">pw2", "~cached:*", "%R~ro:*", "%W~wo:*", "&news.*", "+@read", "-get",
     "+set", "+config|get", "+select|0"],
    ["bob", "on", "nopass", "allkeys", "allchannels", "+@all", "-@dangerous", "(~x* +get)"],
    ["carol", "on", "#" + "a" * 64, "resetkeys", "~k1", "~k2", "+@string", "-@write"],
    ["dave", "reset", "on", ">p", "+@hash", "~h*"],
    ["eve", "+nosuch"],
    ["eve", "~a", "allkeys", "~b"],
    ["eve", "allchannels", "&x"],
    ["eve", "%X~a"],
    ["eve", "%RR~a"],
    ["eve", "#abc"],
    ["eve", "<nopassword"],
    ["eve", "(~x"],
    ["eve", "+config|get|x"],
    ["eve", "+select|"],
    ["eve", "-select|0"],
    ["eve", "bogus"],
    ["a b", "on"],
    ["alice", "+@nosuchcategory"],
]

# Commands each user is tried with through ACL DRYRUN (the permission, not the text, is
# compared: 7.0 words it "This user").
DRYRUN = [
    ["get", "cached:1"], ["get", "x1"], ["set", "cached:1", "v"], ["set", "wo:1", "v"],
    ["set", "ro:1", "v"], ["get", "ro:1"], ["get", "wo:1"], ["hset", "h1", "f", "v"],
    ["config", "get", "maxmemory"], ["config", "set", "maxmemory", "0"], ["select", "0"],
    ["select", "1"], ["publish", "news.today", "m"], ["publish", "sport", "m"],
    ["subscribe", "news.x"], ["psubscribe", "news.*"], ["psubscribe", "n*"],
    ["flushall"], ["keys", "*"], ["mset", "k1", "a", "k2", "b"], ["mget", "k1", "k3"],
    ["append", "k1", "x"], ["lpush", "x1", "a"], ["copy", "ro:1", "wo:2"],
    ["getrange", "k2", "0", "1"], ["client", "id"], ["ping"],
]


def test_acl_commands_match_redis(server, real_redis):  # noqa: F811
    ours, theirs = raw(server.port), raw(real_redis)
    for client in (ours, theirs):
        reset_users(client)
    for rules in SETUSER:
        want = reply(theirs, "ACL", "SETUSER", *rules)
        assert reply(ours, "ACL", "SETUSER", *rules) == want, rules
    users = sorted(reply(theirs, "ACL", "USERS"))
    assert sorted(reply(ours, "ACL", "USERS")) == users
    for name in users:
        want = as_dict(reply(theirs, "ACL", "GETUSER", name))
        got = as_dict(reply(ours, "ACL", "GETUSER", name))
        # 7.2 flags new users `sanitize-payload` (#11279), and keeps rules as given.
        got[b"flags"] = [f for f in got[b"flags"] if f != b"sanitize-payload"]
        want[b"flags"] = [f for f in want[b"flags"] if f != b"sanitize-payload"]
        for field in (b"flags", b"passwords", b"keys", b"channels"):
            assert got[field] == want[field], (name, field)
        assert len(got[b"selectors"]) == len(want[b"selectors"]), name
        for command in DRYRUN:
            want_dry = reply(theirs, "ACL", "DRYRUN", name, *command)
            got_dry = reply(ours, "ACL", "DRYRUN", name, *command)
            assert got_dry == to_72(want_dry, name.decode()), (name, command)
    for command in (["ACL", "GETUSER", "nobody"], ["ACL", "DELUSER", "default"],
                    ["ACL", "DELUSER", "alice", "default"], ["ACL", "DRYRUN", "nobody", "get", "x"],
                    ["ACL", "DRYRUN", "alice", "nocmd"], ["ACL", "DRYRUN", "alice", "get"],
                    ["ACL", "GENPASS", "0"], ["ACL", "GENPASS", "x"], ["ACL", "LOG", "x"],
                    ["ACL", "LOG", "1", "2"], ["ACL", "CAT", "a", "b"], ["ACL", "CAT", "nosuch"],
                    ["ACL", "SAVE"], ["ACL", "LOAD"], ["ACL", "WHOAMI"], ["ACL", "NOSUCH"],
                    ["ACL"], ["CLIENT", "KILL", "USER", "nosuch"], ["AUTH", "nobody", "x"],
                    ["AUTH", "alice", "wrong"], ["ACL", "DELUSER", "carol", "nobody"]):
        assert reply(ours, *command) == reply(theirs, *command), command
    assert len(reply(ours, "ACL", "GENPASS")) == 64
    assert len(reply(ours, "ACL", "GENPASS", "7")) == 2
    assert reply(ours, "ACL", "GENPASS") != reply(ours, "ACL", "GENPASS")


def test_refusals_and_their_log_match_redis(server, real_redis):  # noqa: F811
    admin_ours, admin_theirs = raw(server.port), raw(real_redis)
    rules = ["on", ">pw", "~cached:*", "&news.*", "+@read", "+set", "+publish", "+subscribe",
             "+multi", "+exec", "+eval", "-get"]
    for admin in (admin_ours, admin_theirs):
        reset_users(admin)
        admin.execute_command("ACL", "SETUSER", "limited", *rules)
    ours = raw(server.port, username="limited", password="pw")
    theirs = raw(real_redis, username="limited", password="pw")
    attempts = [
        ["GET", "cached:1"], ["SET", "cached:1", "v"], ["SET", "other", "v"],
        ["HSET", "cached:h", "f", "v"], ["PUBLISH", "sport", "m"], ["PUBLISH", "news.x", "m"],
        ["MGET", "cached:1", "other"], ["FLUSHALL"], ["CONFIG", "GET", "maxmemory"],
        ["EVAL", "return redis.call('get', 'other')", "0"],
        ["EVAL", "return redis.call('strlen', 'other')", "0"],
        ["EVAL", "return redis.call('strlen', 'cached:1')", "0"],
        ["SET", "other", "v"],
        # SORT's BY and GET read keys no position names: they need every key readable.
        ["SORT_RO", "cached:l"], ["SORT_RO", "cached:l", "BY", "other_*"],
        ["SORT_RO", "cached:l", "BY", "nosort"], ["SORT_RO", "cached:l", "LIMIT", "0", "1", "GET", "#"],
        ["SORT_RO", "other"],
    ]
    for command in attempts:
        got, want = reply(ours, *command), reply(theirs, *command)
        if command[0] == "EVAL" and isinstance(want, tuple):
            # The script's SHA and line follow the text in both.
            got = (got[0], re.sub(r"run the '[^']+' command", "run the <cmd> command",
                                  got[1].rsplit(" script: ", 1)[0]))
            want = (want[0], want[1].rsplit(" script: ", 1)[0])
        assert got == to_72(want, "limited"), command
    # A transaction with a refused command queued is aborted, as in Redis.
    for client in (ours, theirs):
        pipe = client.pipeline(transaction=True)
        pipe.execute_command("SET", "cached:2", "v")
        pipe.execute_command("HSET", "cached:3", "f", "v")
        with pytest.raises(redis.ResponseError):
            pipe.execute()
    fields = (b"count", b"reason", b"context", b"object", b"username")

    def entries(admin):
        log = admin.execute_command("ACL", "LOG")
        # redis-py's CLIENT SETINFO at connect: refused (and logged) by 7.2, which has it,
        # unknown to 7.0.
        return [tuple(as_dict(e)[f] for f in fields) for e in log
                if as_dict(e)[b"object"] != b"client|setinfo"]

    assert entries(admin_ours) == entries(admin_theirs)
    log = admin_ours.execute_command("ACL", "LOG", "1")
    entry = as_dict(log[0])
    assert {b"entry-id", b"timestamp-created", b"timestamp-last-updated"} <= set(entry)
    assert b"user=limited" in entry[b"client-info"]
    info = admin_ours.execute_command("INFO", "stats").decode()
    denied = dict(re.findall(r"acl_access_denied_(\w+):(\d+)", info))
    assert int(denied["cmd"]) >= 3 and int(denied["key"]) >= 3 and int(denied["channel"]) >= 1


def random_name(prefix):
    return prefix + "".join(random.choices(string.ascii_lowercase + string.digits, k=8))


@pytest.mark.parametrize("shards", ["2", "4"])
def test_a_worker_limited_to_jobs_queues_can_do_exactly_that(shards):
    srv = Server("--shards", shards, "--appendonly", "no")
    try:
        admin = redis.Redis(port=srv.port, decode_responses=True)
        admin.execute_command("ACL", "SETUSER", "worker", "on", ">pw", "~jobs:*", "+@task", "+@read")
        worker = redis.Redis(port=srv.port, username="worker", password="pw", decode_responses=True)
        queues = [random_name("jobs:") for _ in range(12)]
        others = [random_name("other:") for _ in range(12)]
        for queue, other in zip(queues, others):
            task = worker.execute_command("TASK.SUBMIT", queue, '{"n": 1}')
            fetched = worker.execute_command("TASK.FETCH", queue, "COUNT", "1", "BLOCK", "1000")
            assert fetched and task in str(fetched)
            worker.execute_command("TASK.PROGRESS", task, "50")
            assert worker.execute_command("TASK.ACK", task, "RESULT", "done") == "OK"
            got = worker.execute_command("TASK.GET", task)
            assert as_dict(got)["queue"] == queue and "done" in str(got)
            assert worker.execute_command("TASK.STATS", queue)
            assert worker.get(queue + ":plain") is None  # @read on a jobs:* key
            # Refused: another queue, its tasks, the admin commands, writes outside @task.
            foreign = admin.execute_command("TASK.SUBMIT", other, "{}")
            for command in (["TASK.SUBMIT", other, "{}"], ["TASK.FETCH", other, "BLOCK", "10"],
                            ["TASK.GET", foreign], ["TASK.CANCEL", foreign],
                            ["TASK.STATS", other], ["GET", other]):
                with pytest.raises(redis.exceptions.NoPermissionError, match="No permissions to access a key"):
                    worker.execute_command(*command)
            for command in (["TASK.PURGE", queue, "queued"], ["TASK.DELQUEUE", queue],
                            ["SET", queue + ":x", "1"], ["TASK.CRON", "LIST"]):
                with pytest.raises(redis.exceptions.NoPermissionError, match="has no permissions to run"):
                    worker.execute_command(*command)
            assert admin.execute_command("TASK.GET", foreign)  # still there
        log = admin.execute_command("ACL", "LOG", "50")
        objects = {as_dict(e)["object"] for e in log}
        assert set(others) <= objects and "task.purge" in objects
    finally:
        srv.stop()


def test_changed_rules_reach_open_connections_and_a_deleted_user_is_closed(server):
    admin = raw(server.port)
    reset_users(admin)
    admin.execute_command("ACL", "SETUSER", "u", "on", ">pw", "~*", "+@all")
    user = raw(server.port, username="u", password="pw")
    user.execute_command("SET", "k", "v")
    # Queued before the change, refused by EXEC after it (Redis's text), the rest runs.
    conn = connection(user)
    conn.send_command("MULTI")
    assert conn.read_response() == b"OK"
    conn.send_command("SET", "k", "v3")
    assert conn.read_response() == b"QUEUED"
    conn.send_command("GET", "k")
    assert conn.read_response() == b"QUEUED"
    admin.execute_command("ACL", "SETUSER", "u", "-set")
    conn.send_command("EXEC")
    results = conn.read_response()
    assert isinstance(results[0], redis.ResponseError) and "ACLs rules changed" in str(results[0])
    assert results[1] == b"v"
    user.connection_pool.release(conn)
    with pytest.raises(redis.exceptions.NoPermissionError):
        user.execute_command("SET", "k", "v")
    admin.execute_command("ACL", "SETUSER", "u", "+set")
    assert user.execute_command("SET", "k", "v") == b"OK"
    admin.execute_command("ACL", "SETUSER", "u", "off")
    assert user.execute_command("GET", "k") == b"v", "off: open connections go on"
    with pytest.raises(redis.AuthenticationError):
        raw(server.port, username="u", password="pw").ping()
    admin.execute_command("ACL", "SETUSER", "u", "on")
    held = connection(raw(server.port, username="u", password="pw"))
    held.send_command("PING")
    assert held.read_response() == b"PONG"
    assert admin.execute_command("ACL", "DELUSER", "u") == 1
    with pytest.raises(redis.ConnectionError):
        held.send_command("PING")
        held.read_response()


def test_a_task_by_id_is_checked_on_the_first_command_after_the_rules_narrow(server):
    # The connection still holds its unrestricted user when the rules change: its next
    # TASK.GET must not run inline unchecked, but look the task's queue up as any other.
    admin = raw(server.port)
    reset_users(admin)
    admin.execute_command("ACL", "SETUSER", "late", "on", ">pw", "~*", "+@all")
    user = raw(server.port, username="late", password="pw")
    foreign = admin.execute_command("TASK.SUBMIT", "other:q", "{}")
    assert user.execute_command("TASK.GET", foreign)
    admin.execute_command("ACL", "SETUSER", "late", "resetkeys", "~jobs:*")
    with pytest.raises(redis.exceptions.NoPermissionError, match="No permissions to access a key"):
        user.execute_command("TASK.GET", foreign)
    mine = admin.execute_command("TASK.SUBMIT", "jobs:q", "{}")
    assert user.execute_command("TASK.GET", mine)


def test_requirepass_is_the_default_users_password():
    srv = Server("--requirepass", "s3cret", "--appendonly", "no")
    try:
        with pytest.raises(redis.AuthenticationError):
            raw(srv.port).ping()
        admin = redis.Redis(port=srv.port, password="s3cret")
        user = as_dict(raw(srv.port, password="s3cret").execute_command("ACL", "GETUSER", "default"))
        assert b"nopass" not in user[b"flags"] and len(user[b"passwords"]) == 1
        admin.config_set("requirepass", "other")
        assert redis.Redis(port=srv.port, password="other").ping()
        assert redis.Redis(port=srv.port, username="default", password="other").ping()
        admin.execute_command("ACL", "SETUSER", "default", "nopass")
        assert redis.Redis(port=srv.port).ping(), "nopass opens the default user"
    finally:
        srv.stop()


def test_acl_save_a_restart_and_acl_load_keep_every_user():
    directory = tempfile.mkdtemp(prefix="wetask-acl-")
    aclfile = os.path.join(directory, "users.acl")
    srv = Server("--aclfile", aclfile, data_dir=directory)
    try:
        admin = raw(srv.port)
        admin.execute_command("ACL", "SETUSER", "worker", "on", ">pw", "~jobs:*", "+@task", "+@read",
                              "(~x* +get)")
        admin.execute_command("ACL", "SETUSER", "reader", "on", "#" + "b" * 64, "%R~*", "+@read", "&*")
        admin.execute_command("ACL", "SETUSER", "default", ">adminpw")
        saved = admin.execute_command("ACL", "LIST")
        assert admin.execute_command("ACL", "SAVE") == b"OK"
        with open(aclfile, "rb") as f:
            assert f.read().splitlines() == saved
        srv.proc.send_signal(15)
        srv.proc.wait(timeout=30)
        srv = Server("--aclfile", aclfile, data_dir=directory)
        admin = raw(srv.port, password="adminpw")
        assert admin.execute_command("ACL", "LIST") == saved
        worker = raw(srv.port, username="worker", password="pw")
        assert worker.execute_command("TASK.SUBMIT", "jobs:after", "{}")
        # LOAD replaces every user with the file's; a bad file changes nothing.
        admin.execute_command("ACL", "SETUSER", "temp", "on", "nopass", "+@all")
        assert admin.execute_command("ACL", "LOAD") == b"OK"
        assert admin.execute_command("ACL", "LIST") == saved
        with open(aclfile, "ab") as f:
            f.write(b"user broken +nosuchcommand\n")
        with pytest.raises(redis.ResponseError, match=r"users.acl:4: Error in applying operation '\+nosuchcommand'"):
            admin.execute_command("ACL", "LOAD")
        assert admin.execute_command("ACL", "LIST") == saved
    finally:
        srv.stop()
