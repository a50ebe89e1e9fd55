"""`--metrics-port`: a scrape parsed by prometheus-client's OpenMetrics parser holds every
family, under redis_exporter's names for the server's and WeTask's own for the queues, and
its values agree with INFO and TASK.STATS, on one shard and across two."""

import os
import random
import string
import urllib.error
import urllib.request

import pytest
import redis
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from conftest import Server, wait_for
from test_differential import free_port

FAMILIES = {
    "redis_up", "redis_uptime_in_seconds", "redis_connected_clients", "redis_blocked_clients",
    "redis_connections_received", "redis_rejected_connections", "redis_commands_processed",
    "redis_net_input_bytes", "redis_net_output_bytes", "redis_expired_keys", "redis_evicted_keys",
    "redis_keyspace_hits", "redis_keyspace_misses", "redis_errors", "redis_memory_used_bytes",
    "redis_memory_max_bytes", "redis_rdb_changes_since_last_save",
    "redis_rdb_last_save_timestamp_seconds", "redis_aof_enabled", "redis_connected_slaves",
    "redis_commands", "redis_commands_duration_seconds", "redis_commands_rejected_calls",
    "redis_commands_failed_calls", "redis_db_keys", "redis_db_keys_expiring",
    "wetask_queue_tasks", "wetask_queue_submitted", "wetask_queue_acked", "wetask_queue_failed",
    "wetask_queue_retried", "wetask_queue_oldest_queued_age_seconds", "wetask_queue_paused",
    "wetask_queue_wait_seconds", "wetask_queue_run_seconds", "wetask_workers_connected",
    "wetask_queue_workers",
}


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("application/openmetrics-text")
        return response.read().decode()


def samples(text):
    """{(sample name, frozenset of labels): value} and the family names."""
    families = list(text_string_to_metric_families(text))
    values = {}
    for family in families:
        for sample in family.samples:
            values[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return {f.name for f in families}, values


def value(values, name, **labels):
    return values[(name, frozenset(labels.items()))]


@pytest.mark.parametrize("shards", ["1", "2"])
def test_a_scrape_holds_every_family_and_agrees_with_info_and_task_stats(shards):
    metrics_port = free_port()
    srv = Server("--shards", shards, "--appendonly", "no", "--metrics-port", str(metrics_port))
    try:
        r = redis.Redis(port=srv.port, decode_responses=True)
        for i in range(50):
            r.set(f"key:{i}", i)
        r.expire("key:1", 1000)
        for i in range(60):
            r.get(f"key:{i}")
        with pytest.raises(redis.ResponseError):
            r.execute_command("INCR", "key:nope", "extra")
        queues = ["q:" + "".join(random.choices(string.ascii_lowercase, k=8)) for _ in range(4)]
        worker = redis.Redis(port=srv.port, decode_responses=True)
        worker.execute_command("TASK.WORKER", "w1")
        for queue in queues:
            for _ in range(5):
                r.execute_command("TASK.SUBMIT", queue, "{}", "RETRIES", "3")
            for _ in range(3):
                task = worker.execute_command("TASK.FETCH", queue, "BLOCK", "1000")
                task_id = task[0][0] if isinstance(task[0], list) else task[0]
                worker.execute_command("TASK.ACK", task_id)
            task = worker.execute_command("TASK.FETCH", queue, "BLOCK", "1000")
            task_id = task[0][0] if isinstance(task[0], list) else task[0]
            assert worker.execute_command("TASK.FAIL", task_id)[0] == "retry"
        r.execute_command("TASK.PAUSE", queues[0])

        text = wait_for(lambda: scrape(metrics_port), "a scrape")
        names, values = samples(text)
        assert FAMILIES <= names, FAMILIES - names
        assert value(values, "redis_up") == 1

        calls = r.info("commandstats")
        for cmd in ("set", "get", "expire"):
            assert value(values, "redis_commands_total", cmd=cmd) == calls[f"cmdstat_{cmd}"]["calls"]
        assert value(values, "redis_commands_rejected_calls_total", cmd="incr") >= 1
        keyspace = r.info("keyspace")["db0"]
        assert value(values, "redis_db_keys", db="db0") == keyspace["keys"] == 50
        assert value(values, "redis_db_keys_expiring", db="db0") == keyspace["expires"] == 1
        stats = r.info("stats")
        assert value(values, "redis_keyspace_hits_total") <= stats["keyspace_hits"]
        assert value(values, "redis_keyspace_hits_total") >= 50  # key:50 … key:59 miss
        assert value(values, "redis_keyspace_misses_total") >= 10
        assert value(values, "redis_connected_clients") >= 2  # this test's two, and the scrape
        assert value(values, "redis_aof_enabled") == 0
        assert value(values, "wetask_workers_connected") == 1

        for queue in queues:
            s = r.execute_command("TASK.STATS", queue)
            s = s if isinstance(s, dict) else dict(zip(s[::2], s[1::2]))
            for state in ("queued", "scheduled", "leased", "dead"):
                assert value(values, "wetask_queue_tasks", queue=queue, state=state) == s[state]
            assert s["scheduled"] == 1 and s["queued"] == 1
            for key in ("submitted", "acked", "failed", "retried"):
                assert value(values, f"wetask_queue_{key}_total", queue=queue) == s[key]
            assert (s["submitted"], s["acked"], s["failed"], s["retried"]) == (5, 3, 1, 1)
            # One worker identity (w1) fetched from each queue; the scrape's own commands
            # fetch nothing.
            assert value(values, "wetask_queue_workers", queue=queue) == s["workers"] == 1
            assert value(values, "wetask_queue_paused", queue=queue) == (queue == queues[0])
            # Four first starts waited; three leases ran to an ACK.
            assert value(values, "wetask_queue_wait_seconds_count", queue=queue) == 4
            assert value(values, "wetask_queue_run_seconds_count", queue=queue) == 3
            assert value(values, "wetask_queue_run_seconds_bucket", queue=queue, le="+Inf") == 3
            assert value(values, "wetask_queue_wait_seconds_bucket", queue=queue, le="300.0") == 4
    finally:
        srv.stop()


def listening_ports(pid):
    """The TCP ports process `pid` listens on (from /proc)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_metrics_are_off_by_default_and_only_metrics_is_served():
    plain = Server("--appendonly", "no")
    try:
        assert listening_ports(plain.proc.pid) == {plain.port}
    finally:
        plain.stop()
    metrics_port = free_port()
    srv = Server("--appendonly", "no", "--metrics-port", str(metrics_port))
    try:
        assert listening_ports(srv.proc.pid) == {srv.port, metrics_port}
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/nope", timeout=10)
        assert refused.value.code == 404
    finally:
        srv.stop()


def test_scrapes_log_in_as_the_monitor_user_so_the_default_user_can_be_disabled():
    metrics_port = free_port()
    srv = Server("--appendonly", "no", "--metrics-port", str(metrics_port),
                 "--monitor-user", "monitor", "--monitor-password", "monitor-pw")
    try:
        r = redis.Redis(port=srv.port, decode_responses=True)
        r.execute_command("TASK.SUBMIT", "jobs", "{}")
        # No such user yet: the scrape cannot log in, and says so.
        with pytest.raises(urllib.error.HTTPError) as refused:
            scrape(metrics_port)
        assert refused.value.code == 503
        r.execute_command("ACL", "SETUSER", "monitor", "on", ">monitor-pw", "~*", "+info",
                          "+task.queues", "+task.stats", "+task.workers")
        r.execute_command("ACL", "SETUSER", "default", "off")
        names, values = samples(scrape(metrics_port))
        assert FAMILIES <= names, FAMILIES - names
        assert value(values, "wetask_queue_tasks", queue="jobs", state="queued") == 1
        # It is the monitor user's rules that apply: without TASK.STATS, no scrape.
        r.execute_command("ACL", "SETUSER", "monitor", "-task.stats")
        with pytest.raises(urllib.error.HTTPError) as refused:
            scrape(metrics_port)
        assert refused.value.code == 503
    finally:
        srv.stop()
