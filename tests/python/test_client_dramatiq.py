"""dramatiq on WeTask with its Results middleware: a worker process and a producer process,
100 messages through with their results checked. dramatiq's Redis broker runs its own Lua
script, which builds key names at run time: with two shards the server learns to give it
every shard."""

import json
import os
import signal
import subprocess
import sys

CLIENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "clients")


def test_dramatiq_worker_runs_100_messages(server, tmp_path):
    env = dict(os.environ, WETASK_PORT=str(server.port), PYTHONPATH=CLIENTS)
    # The worker logs to a file: a pipe nobody reads until the end fills up and stalls it.
    log_path = tmp_path / "worker.log"
    log = open(log_path, "w")
    worker = subprocess.Popen(
        [sys.executable, "-m", "dramatiq", "dramatiq_app", "--processes", "1", "--threads", "4"],
        env=env, cwd=CLIENTS, stdout=log, stderr=subprocess.STDOUT, text=True,
    )
    try:
        producer = subprocess.run(
            [sys.executable, "dramatiq_producer.py"], env=env, cwd=CLIENTS,
            capture_output=True, text=True, timeout=120,
        )
        assert producer.returncode == 0, producer.stderr[-4000:]
        assert json.loads(producer.stdout.strip().splitlines()[-1]) == [
            i + 1000 for i in range(100)
        ]
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        out = log_path.read_text(errors="replace")
        print(out[-4000:])
    assert "Traceback" not in out, out[-4000:]
