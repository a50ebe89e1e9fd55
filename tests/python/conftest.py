"""Start the real wetask binary on a free port for the redis-py tests."""

import contextlib
import os
import re
import signal
import shutil
import subprocess
import tempfile
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
BINARY = os.environ.get("WETASK_BIN", os.path.join(TARGET, "debug", "wetask"))


# How long a test waits for a signal (a reply, an INFO field) before it fails.
DEADLINE_S = 30


def wait_for(check, what, deadline_s=DEADLINE_S):
    """`check()`'s first truthy value, polled every 10 ms until the deadline."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


@contextlib.contextmanager
def failpoint(name):
    """Servers started inside have the crash point `name` armed (server/src/failpoint.rs):
    the process ends with status 137 at that step."""
    os.environ["WETASK_FAILPOINT"] = name
    try:
        yield
    finally:
        del os.environ["WETASK_FAILPOINT"]


class Server:
    def __init__(self, *args, data_dir=None):
        # Durability is on by default: each server journals into its own directory (or
        # `data_dir`: a restart on a killed server's data).
        self.dir = data_dir or tempfile.mkdtemp(prefix="wetask-py-")
        self.proc = subprocess.Popen(
            [BINARY, "--port", "0", "--dir", self.dir, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.port = None
        # Cluster mode's own ports (one per shard) and bus ports, when it is on.
        self.shard_ports = []
        self.bus_ports = []
        for line in self.proc.stdout:
            cluster = re.search(r"ports=\[([\d, ]+)\] bus=\[([\d, ]+)\]", line)
            if cluster:
                self.shard_ports = [int(p) for p in cluster.group(1).split(",")]
                self.bus_ports = [int(p) for p in cluster.group(2).split(",")]
            match = re.search(r"listening on [^ ]+:(\d+)", line)
            if match:
                self.port = int(match.group(1))
                break
        assert self.port, "wetask did not start"
        threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            assert self.proc.wait(timeout=10) == 0
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session", params=["1", "2"], ids=["shards1", "shards2"])
def server(request):
    srv = Server("--shards", request.param)
    yield srv
    srv.stop()


def stop_process(proc, timeout=30):
    """SIGTERM, then SIGKILL if it has not gone within `timeout` seconds."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
