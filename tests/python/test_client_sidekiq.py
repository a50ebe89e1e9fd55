"""Sidekiq 6 (Debian's ruby-sidekiq with its ruby-redis client) on WeTask: a Sidekiq worker
process runs 100 jobs, one that fails once and succeeds on retry, and one scheduled with
perform_in."""

import json
import os
import signal
import subprocess
import time

RUBY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ruby")


def test_sidekiq_runs_jobs_retries_and_schedules(server, tmp_path):
    env = dict(os.environ, REDIS_URL=f"redis://127.0.0.1:{server.port}/0")
    subprocess.run(["redis-cli", "-p", str(server.port), "FLUSHALL"], check=True,
                   capture_output=True)
    # The worker logs to a file: a pipe nobody reads until the end fills up and stalls it.
    log_path = tmp_path / "worker.log"
    log = open(log_path, "w")
    worker = subprocess.Popen(
        ["sidekiq", "-r", "./sidekiq_jobs.rb", "-c", "5", "-q", "default"],
        env=env, cwd=RUBY, stdout=log, stderr=subprocess.STDOUT, text=True,
    )
    try:
        producer = subprocess.run(
            ["ruby", "sidekiq_producer.rb"], env=env, cwd=RUBY, capture_output=True,
            text=True, timeout=120,
        )
        assert producer.returncode == 0, producer.stderr[-4000:]
        report = json.loads(producer.stdout.strip().splitlines()[-1])
        results = report["results"]
        for i in range(100):
            assert results[f"add:{i}"] == str(i + 1000)
        assert results["flaky"] == "70"
        assert report["flaky_attempts"] == 2, "failed once, then succeeded on retry"
        assert float(results["scheduled"]) >= 1.9, "ran no earlier than scheduled"
    except BaseException:
        # Sidekiq prints every thread's backtrace on TTIN, and the server its clients' last
        # commands: shown with the failure.
        clients = subprocess.run(["redis-cli", "-p", str(server.port), "CLIENT", "LIST"],
                                 capture_output=True, text=True, timeout=5)
        print("CLIENT LIST:\n" + clients.stdout + clients.stderr)
        worker.send_signal(signal.SIGTTIN)
        time.sleep(1)
        raise
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        out = log_path.read_text(errors="replace")
        noise = ("positional argument", "redis.brpop(", "Redis#sadd")
        print("\n".join(line for line in out.splitlines() if not any(n in line for n in noise)))
    errors = [line for line in out.splitlines()
              if "ERR" in line or "Redis::CommandError" in line or "WRONGTYPE" in line]
    assert not errors, "\n".join(errors[:20])
