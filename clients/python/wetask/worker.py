"""The worker's side: decorated functions run on threads, one task per thread at a time.

Each thread has a connection of its own and leases with `TASK.FETCH … BLOCK`, acknowledging
the task before in the same command when it has no result (one command per task). Every
connection announces the worker's name (`TASK.WORKER`), so the heartbeat thread may extend
any of the worker's leases (`TASK.EXTEND`) while a long task runs. A function that raises
fails its task (`TASK.FAIL … ERROR`), and the server retries it after the backoff the task
was submitted with, or moves it to the dead set. On SIGTERM (or `stop()`) the worker stops
fetching, lets running tasks finish until `shutdown_timeout_s`, and hands back the rest
(`TASK.FAIL … SNOOZE 0`: queued again at once, with no attempt counted), so another worker
takes them straight away."""

import json
import os
import signal
import socket
import threading
import time
import uuid
from typing import Callable, Dict, List

import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from .client import Client, Task, decode


class Worker:
    def __init__(self, queues=None, concurrency: int = 4, host: str = "127.0.0.1", port: int = 6379,
                 password=None, cluster: bool = False, name=None, lease_ms: int = 30000,
                 block_ms: int = 1000, shutdown_timeout_s: float = 25.0, grace_ms: int = 0):
        self.queues: List[str] = list(queues or [])
        self.concurrency = concurrency
        self.name = name or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.lease_ms, self.block_ms = lease_ms, block_ms
        self.shutdown_timeout_s = shutdown_timeout_s
        self.functions: Dict[str, Callable] = {}
        self.middleware: List[Callable] = []
        self.stopping = threading.Event()
        self.connect = dict(host=host, port=port, password=password, cluster=cluster, grace_ms=grace_ms)
        self.client = Client(host=host, port=port, password=password, cluster=cluster)
        self.in_flight: Dict[str, Task] = {}
        self.handed_back = set()
        self.lock = threading.Lock()
        self.threads: List[threading.Thread] = []
        self.idle_rounds = 0
        self.processed = 0

    # -- declaring work ---------------------------------------------------------------------

    def task(self, queue: str, **submit_options):
        """Decorates `fn(payload)` as the function for `queue`. The function gains
        `.submit(payload)`, which submits to its queue with these options (RETRIES, BACKOFF …)."""
        def register(fn):
            self.functions[queue] = fn
            if queue not in self.queues:
                self.queues.append(queue)
            fn.submit = lambda payload=None, **more: self.client.submit(
                queue, payload, **{**submit_options, **more})
            return fn
        return register

    def use(self, middleware: Callable):
        """Adds `middleware(task, call_next)`, which wraps every task: it may look at the task,
        time it, catch or change its result; `call_next()` runs the rest and the function."""
        self.middleware.append(middleware)
        return middleware

    # -- running ----------------------------------------------------------------------------

    def run(self, until_idle: bool = False):
        """Runs until SIGTERM or SIGINT (in the main thread), or `stop()`; with `until_idle`,
        until every thread found nothing to fetch in a whole BLOCK period."""
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.stopping.set())
        self.start(until_idle)
        while any(t.is_alive() for t in self.threads):
            if self.stopping.wait(0.05):
                break
        self._finish()

    def start(self, until_idle: bool = False):
        """Starts the threads and returns (`stop()` ends them)."""
        self.until_idle = until_idle
        groups = self._queue_groups()
        self.threads = [threading.Thread(target=self._loop, args=(groups[i % len(groups)],),
                                         daemon=True, name=f"wetask-{i}")
                        for i in range(self.concurrency)]
        self.heartbeat = threading.Thread(target=self._heartbeat, daemon=True, name="wetask-heartbeat")
        for thread in self.threads + [self.heartbeat]:
            thread.start()

    def stop(self):
        self.stopping.set()
        self._finish()

    def _finish(self):
        self.stopping.set()
        deadline = time.monotonic() + self.shutdown_timeout_s
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self.lock:
            left = [task for task in self.in_flight.values() if task.id not in self.handed_back]
            self.handed_back.update(task.id for task in left)
        if left:
            conn = self._connection()
            for task in left:
                try:
                    conn.execute_command("TASK.FAIL", task.id, "SNOOZE", 0)
                except redis.ResponseError:
                    pass  # it ended meanwhile
            conn.close()

    def _connection(self):
        """A connection of this worker's own, announcing its name on every (re)connect."""
        name, grace = self.name, self.connect["grace_ms"]

        def announce(conn):
            conn.on_connect()
            conn.send_command("TASK.WORKER", name, "GRACE", grace)
            conn.read_response()

        options = dict(host=self.connect["host"], port=self.connect["port"],
                       password=self.connect["password"], decode_responses=True,
                       redis_connect_func=announce)
        if self.connect["cluster"]:
            return RedisCluster(**options)
        return redis.Redis(single_connection_client=True, **options)

    def _queue_groups(self) -> List[List[str]]:
        """The queues each thread fetches from: all of them, or on a cluster the queues of one
        slot per thread (one TASK.FETCH names queues of one slot), threads dealt round the
        slots."""
        if not self.connect["cluster"]:
            return [self.queues]
        groups: Dict[int, List[str]] = {}
        for queue in self.queues:
            groups.setdefault(key_slot(queue.encode()), []).append(queue)
        return list(groups.values())

    def _loop(self, queues: List[str]):
        conn = self._connection()
        ack: List[str] = []
        try:
            while not self.stopping.is_set():
                words = ["TASK.FETCH", *queues, "LEASE", self.lease_ms, "BLOCK", self.block_ms]
                if ack:
                    words += ["ACK", *ack]
                try:
                    tasks = conn.execute_command(*words)
                except (redis.ConnectionError, redis.TimeoutError):
                    # The server restarted or the network blinked: the connection's leases went
                    # back (after the worker's GRACE), so the unacknowledged task runs again
                    # elsewhere. Reconnect (announcing the name again) after a pause.
                    ack = []
                    self.stopping.wait(0.5)
                    continue
                ack = []
                if not tasks:
                    with self.lock:
                        self.idle_rounds += 1
                        idle = self.until_idle and not self.in_flight
                    if idle:
                        break
                    continue
                task_id, queue, payload, attempt = tasks[0][:4]
                task = Task(task_id, queue, decode(payload), int(attempt))
                ack = self._work(conn, task)
        finally:
            if ack:
                conn.execute_command("TASK.ACK", *ack[:1])
            conn.close()

    def _work(self, conn, task: Task) -> List[str]:
        """Runs one task; returns the ids to acknowledge with the next fetch."""
        with self.lock:
            self.in_flight[task.id] = task
        try:
            result = self._call(task)
        except Exception as error:  # the task's own failure: the server retries or buries it
            return self._settle(conn, ["TASK.FAIL", task.id, "ERROR", f"{type(error).__name__}: {error}"])
        finally:
            with self.lock:
                self.in_flight.pop(task.id, None)
                self.processed += 1
        if result is None:
            return [] if self._was_handed_back(task) else [task.id]
        return self._settle(conn, ["TASK.ACK", task.id, "RESULT", json.dumps(result)])

    def _settle(self, conn, words) -> List[str]:
        if self._was_handed_back(words[1]):
            return []
        try:
            conn.execute_command(*words)
        except redis.ResponseError:
            pass  # the lease was lost meanwhile: the task is another worker's now
        return []

    def _was_handed_back(self, task) -> bool:
        task_id = task.id if isinstance(task, Task) else task
        with self.lock:
            return task_id in self.handed_back

    def _call(self, task: Task):
        fn = self.functions.get(task.queue)
        if fn is None:
            raise LookupError(f"no function for queue {task.queue}")
        chain = list(self.middleware)

        def call(index):
            if index == len(chain):
                return fn(task.payload)
            return chain[index](task, lambda: call(index + 1))
        return call(0)

    def _heartbeat(self):
        """Extends the leases of running tasks every third of a lease."""
        conn = None
        period = max(self.lease_ms / 3000.0, 0.05)
        while not self.stopping.wait(period) or self.in_flight:
            with self.lock:
                running = [t.id for t in self.in_flight.values() if t.id not in self.handed_back]
            if not running:
                if self.stopping.is_set():
                    break
                continue
            conn = conn or self._connection()
            for task_id in running:
                try:
                    conn.execute_command("TASK.EXTEND", task_id, self.lease_ms)
                except redis.ResponseError:
                    pass  # it ended meanwhile
            if self.stopping.is_set() and not any(t.is_alive() for t in self.threads):
                break
        if conn is not None:
            conn.close()
