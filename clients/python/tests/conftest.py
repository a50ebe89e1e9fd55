"""Starts the repository's wetask binary (debug build, or $WETASK_BIN) for the SDK's tests."""
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..")
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
BINARY = os.environ.get("WETASK_BIN", os.path.join(TARGET, "debug", "wetask"))


class Server:
    def __init__(self, *args):
        self.dir = tempfile.mkdtemp(prefix="wetask-sdk-")
        self.proc = subprocess.Popen([BINARY, "--port", "0", "--dir", self.dir, *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.port = None
        self.shard_ports = []
        for line in self.proc.stdout:
            cluster = re.search(r"ports=\[([\d, ]+)\]", line)
            if cluster:
                self.shard_ports = [int(p) for p in cluster.group(1).split(",")]
            match = re.search(r"listening on [^ ]+:(\d+)", line)
            if match:
                self.port = int(match.group(1))
                break
        assert self.port, "wetask did not start"
        threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module", params=["1", "2"], ids=["shards1", "shards2"])
def server(request):
    srv = Server("--shards", request.param)
    yield srv
    srv.stop()
