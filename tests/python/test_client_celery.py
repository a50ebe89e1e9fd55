"""Celery 5 on WeTask (broker and result backend): a worker process and a producer process,
100 tasks through with their results checked, and a task that retries once."""

import json
import os
import signal
import subprocess
import sys

CLIENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "clients")


def test_celery_worker_runs_100_tasks(server, tmp_path):
    env = dict(os.environ, WETASK_PORT=str(server.port), PYTHONPATH=CLIENTS)
    # The worker logs to a file: a pipe nobody reads until the end fills up and stalls it.
    log_path = tmp_path / "worker.log"
    log = open(log_path, "w")
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "celery_app", "worker", "--pool=threads",
         "--concurrency=4", "--loglevel=WARNING", "--without-gossip", "--without-mingle",
         "--without-heartbeat"],
        env=env, cwd=CLIENTS, stdout=log, stderr=subprocess.STDOUT, text=True,
    )
    try:
        producer = subprocess.run(
            [sys.executable, "celery_producer.py"], env=env, cwd=CLIENTS,
            capture_output=True, text=True, timeout=120,
        )
        assert producer.returncode == 0, producer.stderr[-4000:]
        report = json.loads(producer.stdout.strip().splitlines()[-1])
        assert report["values"] == [i + 1000 for i in range(100)]
        assert report["flaky"] == 70
        assert report["successful"]
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        out = log_path.read_text(errors="replace")
        # Shown when the test fails: the worker's own view.
        print(out[-4000:])
    assert "Traceback" not in out, out[-4000:]
