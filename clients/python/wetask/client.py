"""The producer's side: submit tasks (alone, as a batch, on a cron schedule), wait for them
and read a queue's events. Payloads are JSON. Works against one server or, with
`cluster=True`, a cluster (redis-py's RedisCluster follows MOVED and ASK by itself)."""

import json
from dataclasses import dataclass
from typing import Any, Optional

import redis
from redis.cluster import RedisCluster


class TaskFailed(Exception):
    """A task ended dead or cancelled; `info` is TASK.GET's map."""

    def __init__(self, info):
        super().__init__(f"task {info.get('id')} ended {info.get('state')}: {info.get('error')}")
        self.info = info


@dataclass
class Task:
    """A leased task as a worker sees it."""

    id: str
    queue: str
    payload: Any
    attempt: int


def as_map(reply):
    """TASK.GET's map, whether RESP2 gave a flat list or RESP3 a dict."""
    if reply is None:
        return None
    if isinstance(reply, dict):
        return reply
    return dict(zip(reply[::2], reply[1::2]))


def submit_options(priority=None, delay_ms=None, at_ms=None, retries=None, backoff_ms=None,
                   lease_ms=None, ttl_ms=None, fallback=None, unique=None, unique_for_ms=None,
                   task_id=None):
    """TASK.SUBMIT's options as words."""
    words = []
    for word, value in (("ID", task_id), ("PRIORITY", priority), ("DELAY", delay_ms),
                        ("AT", at_ms), ("RETRIES", retries), ("LEASE", lease_ms),
                        ("TTL", ttl_ms), ("FALLBACK", fallback)):
        if value is not None:
            words += [word, value]
    if backoff_ms is not None:
        words += ["BACKOFF", *(backoff_ms if isinstance(backoff_ms, (tuple, list)) else [backoff_ms])]
    if unique is not None:
        words += ["UNIQUE", unique] + (["FOR", unique_for_ms] if unique_for_ms is not None else [])
    return words


class Client:
    """Submits and watches tasks. `redis_client` may be any redis-py client; otherwise one is
    made from host and port (a RedisCluster when `cluster=True`)."""

    def __init__(self, host="127.0.0.1", port=6379, password=None, cluster=False,
                 redis_client=None, **redis_options):
        if redis_client is not None:
            self.redis = redis_client
        elif cluster:
            self.redis = RedisCluster(host=host, port=port, password=password,
                                      decode_responses=True, **redis_options)
        else:
            self.redis = redis.Redis(host=host, port=port, password=password,
                                     decode_responses=True, **redis_options)

    def submit(self, queue: str, payload: Any = None, **options) -> str:
        """Submits one task with a JSON payload; returns its id."""
        return self.redis.execute_command("TASK.SUBMIT", queue, json.dumps(payload),
                                          *submit_options(**options))

    def submit_batch(self, batch_id: str, children, on_success=None, on_complete=None):
        """Submits `children` ((queue, payload) pairs) as one batch; `on_success` and
        `on_complete` are (queue, payload) callbacks. Returns the children's ids."""
        words = ["TASK.BATCH", batch_id]
        for word, callback in (("ON-SUCCESS", on_success), ("ON-COMPLETE", on_complete)):
            if callback is not None:
                words += [word, callback[0], json.dumps(callback[1])]
        words.append("CHILDREN")
        for queue, payload in children:
            words += [queue, json.dumps(payload)]
        return self.redis.execute_command(*words)

    def batch(self, batch_id: str):
        return as_map(self.redis.execute_command("TASK.BATCHINFO", batch_id))

    def cron(self, name: str, schedule: str, queue: str, payload: Any = None, **options):
        """Sets a cron schedule (5 or 6 fields) that submits to `queue`; returns the next tick
        in unix ms (None for a schedule that never ticks)."""
        return self.redis.execute_command("TASK.CRON", "SET", name, schedule, queue,
                                          json.dumps(payload), *submit_options(**options))

    def cron_delete(self, name: str) -> bool:
        return self.redis.execute_command("TASK.CRON", "DEL", name) == 1

    def get(self, task_id: str) -> Optional[dict]:
        return as_map(self.redis.execute_command("TASK.GET", task_id))

    def wait(self, task_id: str, timeout_ms: int = 0) -> Any:
        """Blocks until the task ends; returns its result (JSON-decoded when it is JSON).
        Raises TaskFailed when it ended dead or cancelled, TimeoutError when `timeout_ms`
        passed first (0: wait for ever)."""
        info = as_map(self.redis.execute_command("TASK.WAIT", task_id, "TIMEOUT", timeout_ms))
        if info is None:
            raise TimeoutError(f"task {task_id} did not end within {timeout_ms} ms")
        if info.get("state") != "done":
            raise TaskFailed(info)
        return decode(info.get("result"))

    def events(self, queue: str, cursor=None, count: int = 100, block_ms: Optional[int] = None):
        """One page of the queue's events: (next cursor, [event, ...]), each event a dict of
        seq, ms, id, state, attempts (and value, for progress)."""
        words = ["TASK.EVENTS", queue]
        if cursor is not None:
            words += ["FROM", cursor]
        words += ["COUNT", count]
        if block_ms is not None:
            words += ["BLOCK", block_ms]
        next_cursor, rows = self.redis.execute_command(*words)
        names = ("seq", "ms", "id", "state", "attempts", "value")
        return next_cursor, [dict(zip(names, row)) for row in rows]

    def stats(self, queue: str) -> dict:
        return as_map(self.redis.execute_command("TASK.STATS", queue))

    def close(self):
        self.redis.close()


def decode(value):
    """A result or payload: JSON when it parses, else the text as it is."""
    if value is None:
        return None
    try:
        return json.loads(value)
    except (TypeError, ValueError):
        return value
