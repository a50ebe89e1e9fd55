"""RQ on WeTask: 100 jobs through a burst-mode worker, results checked, plus a job that
fails once and succeeds on retry."""

import os
import sys

import pytest
import redis
from rq import Queue, Retry, Worker

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from clients import jobs  # noqa: E402


def test_rq_burst_worker_runs_100_jobs(server, tmp_path):
    conn = redis.Redis(port=server.port)
    conn.flushall()
    queue = Queue("rq-test", connection=conn)
    enqueued = [queue.enqueue(jobs.add, i, 1000) for i in range(100)]
    retried = queue.enqueue(jobs.fail_once, str(tmp_path), 7, retry=Retry(max=2))
    assert queue.count == 101
    worker = Worker([queue], connection=conn)
    assert worker.work(burst=True)
    for i, job in enumerate(enqueued):
        job.refresh()
        assert job.get_status() == "finished", job.exc_info
        assert job.return_value() == i + 1000
    # The failing job was requeued by RQ's retry and has finished on a later attempt.
    worker.work(burst=True)
    retried.refresh()
    assert retried.get_status() == "finished", retried.exc_info
    assert retried.return_value() == 70
    assert queue.count == 0
    assert len(queue.finished_job_registry) == 101
