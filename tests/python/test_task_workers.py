"""Worker identities with a pooled client, as users run them: redis-py's ConnectionPool under
16 threads, each connection announcing the worker id when it connects (TASK.WORKER in
`on_connect`), so a task fetched on one pooled connection may be acknowledged on another."""

import random
import string
import threading

import redis
from conftest import Server


def random_name(prefix):
    return prefix + "-" + "".join(random.choices(string.ascii_lowercase + string.digits, k=10))


def fields_of(task):
    """TASK.GET's map, whether the client hands it over as a dict or a flat list."""
    return task if isinstance(task, dict) else dict(zip(task[::2], task[1::2]))


def worker_pool(port, worker, grace_ms=0):
    def announce(conn):
        # The client's own handshake first (AUTH, HELLO, SELECT …), then the identity.
        conn.on_connect()
        conn.send_command("TASK.WORKER", worker, "GRACE", grace_ms)
        assert conn.read_response() in (b"OK", "OK")

    pool = redis.ConnectionPool(port=port, max_connections=16, redis_connect_func=announce)
    return redis.Redis(connection_pool=pool)


def run_pool(port, queue, worker, total):
    producer = redis.Redis(port=port)
    ids = {producer.execute_command("TASK.SUBMIT", queue, f"job {n}") for n in range(total)}
    r = worker_pool(port, worker)
    acked, errors = [], []
    lock = threading.Lock()

    def work():
        while True:
            try:
                # Fetch on whichever pooled connection is free, ack on whichever is free then.
                tasks = r.execute_command("TASK.FETCH", queue, "BLOCK", 300)
                if not tasks:
                    return
                r.execute_command("TASK.ACK", tasks[0][0])
                with lock:
                    acked.append(tasks[0][0])
            except redis.RedisError as err:
                with lock:
                    errors.append(err)
                return

    threads = [threading.Thread(target=work) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(acked) == sorted(ids), "every task acked once"
    assert r.connection_pool._created_connections > 1, "the pool used several connections"
    for task_id in ids:
        task = producer.execute_command("TASK.GET", task_id)
        fields = fields_of(task)
        assert fields[b"state"] == b"done" and fields[b"attempts"] == 1


def test_a_pooled_worker_acks_on_any_connection(server):
    for _ in range(5):
        run_pool(server.port, random_name("q"), random_name("w"), 300)


def test_a_pooled_worker_on_four_shards():
    srv = Server("--shards", "4")
    try:
        for _ in range(20):
            run_pool(srv.port, random_name("q"), random_name("w"), 40)
    finally:
        srv.stop()


def test_a_dropped_connection_reconnecting_within_grace_keeps_its_leases(server):
    queue, worker = random_name("q"), random_name("w")
    producer = redis.Redis(port=server.port)
    task_id = producer.execute_command("TASK.SUBMIT", queue, "work")
    first = worker_pool(server.port, worker, grace_ms=5000)
    [[leased, *_]] = first.execute_command("TASK.FETCH", queue)
    first.connection_pool.disconnect()
    again = worker_pool(server.port, worker, grace_ms=5000)
    assert again.execute_command("TASK.ACK", leased) in (b"OK", "OK", True)
    task = producer.execute_command("TASK.GET", task_id)
    fields = fields_of(task)
    assert fields[b"attempts"] == 1 and fields[b"lost_leases"] == 0
