"""The SDK against the real server: the README's 100-task example, a SIGTERM mid-task that
hands the task back (another worker gets it at once, no attempt counted), a task longer
than its lease kept alive, retries by the server's backoff into the dead set, middleware,
batches, cron, wait and events. Queue names are random, on 1 and 2 shards."""
import os
import random
import string
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import redis

import wetask
from wetask import Client, TaskFailed, Worker

HERE = os.path.dirname(__file__)


def name(prefix):
    return prefix + "-" + "".join(random.choices(string.ascii_lowercase, k=8))


def test_the_package_is_the_repositorys():
    assert os.path.realpath(wetask.__file__).startswith(os.path.realpath(os.path.join(HERE, "..")))


def test_the_hundred_task_example(server):
    done = subprocess.run([sys.executable, os.path.join(HERE, "..", "examples", "hundred.py"), str(server.port)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "done: 100 of 100" in done.stdout, done.stdout
    stats = Client(port=server.port).stats("emails")
    assert stats["queued"] == 0 and stats["leased"] == 0 and stats["dead"] == 0


def test_results_failures_and_middleware(server):
    queue = name("work")
    worker = Worker([queue], concurrency=4, port=server.port, block_ms=100)
    seen = []

    @worker.use
    def record(task, call_next):
        seen.append(task.id)
        return call_next()

    @worker.task(queue, retries=1, backoff_ms=50)
    def square(payload):
        if payload == "boom":
            raise ValueError("no such number")
        return payload * payload

    client = Client(port=server.port)
    ids = [square.submit(n) for n in range(20)]
    bad = square.submit("boom")
    worker.start()
    try:
        assert [client.wait(i, 30000) for i in ids] == [n * n for n in range(20)]
        with pytest.raises(TaskFailed) as failed:
            client.wait(bad, 30000)
        assert failed.value.info["state"] == "dead"
        assert "ValueError: no such number" in failed.value.info["error"]
        assert int(failed.value.info["attempts"]) == 2, "one retry, after the server's backoff"
    finally:
        worker.stop()
    assert set(ids) <= set(seen) and seen.count(bad) == 2


def test_a_long_task_is_kept_alive_past_its_lease(server):
    queue = name("long")
    worker = Worker([queue], concurrency=1, port=server.port, lease_ms=600, block_ms=100)

    @worker.task(queue)
    def slow(payload):
        time.sleep(2.5)
        return "finished"

    client = Client(port=server.port)
    task_id = slow.submit(None)
    worker.start()
    try:
        deadline = time.monotonic() + 10
        while client.get(task_id)["state"] != "leased" and time.monotonic() < deadline:
            time.sleep(0.01)
        # Another worker finds nothing while the first holds it, four leases long.
        other = redis.Redis(port=server.port, decode_responses=True)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            assert other.execute_command("TASK.FETCH", queue, "BLOCK", 200) == []
        assert client.wait(task_id, 10000) == "finished"
        assert int(client.get(task_id)["attempts"]) == 1
    finally:
        worker.stop()


def test_sigterm_mid_task_hands_the_task_back(server):
    queue = name("term")
    script = textwrap.dedent(f"""
        import sys, time
        from wetask import Worker
        worker = Worker([{queue!r}], concurrency=1, port={server.port}, block_ms=100,
                        lease_ms=60000, shutdown_timeout_s=0.5)
        @worker.task({queue!r})
        def forever(payload):
            print("started", flush=True)
            time.sleep(60)
        worker.run()
        print("stopped", flush=True)
    """)
    client = Client(port=server.port)
    task_id = client.submit(queue, {"big": True})
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "started"
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
        assert "stopped" in out and proc.returncode == 0
        # Handed back, not waited out: another worker leases it at once, the attempt not counted.
        other = redis.Redis(port=server.port, decode_responses=True)
        start = time.monotonic()
        tasks = other.execute_command("TASK.FETCH", queue, "BLOCK", 5000)
        assert tasks and tasks[0][0] == task_id
        assert time.monotonic() - start < 1.0
        assert int(tasks[0][3]) == 1, "the handed-back attempt is not counted"
        other.execute_command("TASK.ACK", task_id)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_batches_cron_and_events(server):
    client = Client(port=server.port)
    queue, done = name("batch"), name("after")
    ids = client.submit_batch(name("b"), [(queue, n) for n in range(5)], on_success=(done, {"all": "ok"}))
    assert len(ids) == 5
    worker = Worker([queue, done], concurrency=2, port=server.port, block_ms=100)
    finished = []

    @worker.task(queue)
    def child(payload):
        return payload

    @worker.task(done)
    def callback(payload):
        finished.append(payload)

    worker.start()
    try:
        deadline = time.monotonic() + 30
        while not finished and time.monotonic() < deadline:
            time.sleep(0.05)
        assert finished == [{"all": "ok"}]
    finally:
        worker.stop()
    cursor, events = client.events(queue, count=100)
    assert {e["id"] for e in events if e["state"] == "done"} == set(ids)
    cron = name("cron")
    assert client.cron(cron, "* * * * *", queue, {"tick": 1}) > time.time() * 1000
    assert client.cron_delete(cron)


def test_workers_and_clients_on_a_cluster_follow_moved():
    from conftest import Server
    srv = Server("--shards", "2", "--cluster-enabled", "yes")
    try:
        port = srv.shard_ports[0]
        client = Client(port=port, cluster=True)
        # Random names, two on each node, so that some MOVED must be followed.
        by_node = {}
        while sorted(len(v) for v in by_node.values()) != [2, 2]:
            queue = name("cq")
            node = client.redis.get_node_from_key(queue).name
            if len(by_node.get(node, [])) < 2:
                by_node.setdefault(node, []).append(queue)
        queues = [q for group in by_node.values() for q in group]
        worker = Worker(queues, concurrency=4, port=port, cluster=True, block_ms=100)
        for queue in queues:
            worker.task(queue)(lambda payload: payload["n"] + 1)
        ids = [(client.submit(queues[n % 4], {"n": n}), n) for n in range(40)]
        worker.start()
        try:
            assert [client.wait(i, 30000) for i, _ in ids] == [n + 1 for _, n in ids]
        finally:
            worker.stop()
        client.close()
    finally:
        srv.stop()


def test_a_worker_carries_on_after_the_server_restarts():
    import shutil
    import socket
    import tempfile
    from conftest import BINARY

    # A fixed port for both runs, below the ephemeral range so that no client's source port
    # (the worker reconnects while the server is down) can take it.
    while True:
        port = random.randint(10000, 30000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                break
            except OSError:
                continue
    data = tempfile.mkdtemp(prefix="wetask-sdk-restart-")
    log = open(os.path.join(data, "server.log"), "ab")

    def start():
        # Right after a SIGKILL the old listener may outlive its process for a moment (its
        # io_uring ring is torn down after the exit), and the new one's bind then fails with
        # "Address already in use": start again until the deadline.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            proc = subprocess.Popen([BINARY, "--port", str(port), "--dir", data, "--shards", "2"],
                                    stdout=log, stderr=subprocess.STDOUT)
            while proc.poll() is None and time.monotonic() < deadline:
                try:
                    if redis.Redis(port=port).ping():
                        return proc
                except redis.ConnectionError:
                    time.sleep(0.05)
            time.sleep(0.1)
        with open(os.path.join(data, "server.log")) as f:
            raise AssertionError("the server did not answer PING:\n" + f.read()[-3000:])

    server = start()
    queue = name("restart")
    worker = Worker([queue], concurrency=2, port=port, block_ms=100)
    worker.task(queue)(lambda payload: payload)
    try:
        worker.start()
        client = Client(port=port)
        before = [client.submit(queue, n) for n in range(5)]
        assert [client.wait(i, 30000) for i in before] == list(range(5))
        server.kill()
        server.wait()
        server = start()
        # The same worker, reconnected on its own: new tasks get done.
        client = Client(port=port)
        after = [client.submit(queue, n) for n in range(5, 10)]
        assert [client.wait(i, 30000) for i in after] == list(range(5, 10))
        assert all(client.get(i)["state"] == "done" for i in before), "the journal kept them"
    finally:
        worker.stop()
        server.kill()
        server.wait()
        shutil.rmtree(data, ignore_errors=True)
