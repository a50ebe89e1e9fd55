"""WeTask's Python SDK: a `Client` that submits and watches tasks, and a `Worker` that runs
decorated functions on threads, with lease extension, retries by the server's backoff,
middleware, and a graceful stop on SIGTERM. See README.md."""

from .client import Client, Task, TaskFailed
from .worker import Worker

__all__ = ["Client", "Task", "TaskFailed", "Worker"]
