"""What deploy/ and linux-setup/ ship: the systemd unit passes `systemd-analyze verify`, the
shipped configuration file starts a server, and `linux-setup/check` reports every item a
pinned host needs, each with why, how to set it and how to undo it."""
import os
import shutil
import subprocess
import tempfile

import pytest
import redis

from conftest import BINARY, Server

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_the_unit_file_verifies():
    with open(os.path.join(ROOT, "deploy", "wetask.service")) as f:
        unit = f.read()
    for needed in ("Type=notify", "LimitMEMLOCK=infinity", "Restart=on-failure", "StateDirectory=wetask"):
        assert needed in unit
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "wetask.service")
        with open(path, "w") as f:
            f.write(unit.replace("/usr/local/bin/wetask", os.path.abspath(BINARY)))
        done = subprocess.run(["systemd-analyze", "verify", path], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr


def test_the_shipped_configuration_starts_a_server():
    # The file's own bind, port and dir give way to the test's.
    srv = Server("--config", os.path.join(ROOT, "deploy", "wetask.conf"), "--bind", "127.0.0.1")
    try:
        r = redis.Redis(port=srv.port, decode_responses=True)
        assert r.ping()
        assert r.config_get("appendfsync") == {"appendfsync": "everysec"}
    finally:
        srv.stop()


def test_the_host_check_reports_every_item_with_its_undo():
    done = subprocess.run([os.path.join(ROOT, "linux-setup", "check"), "--cpus", "0"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode in (0, 1), done.stderr
    out = done.stdout
    for item in ("memlock", "isolated-cpus", "nic-irqs", "thp", "somaxconn", "io_uring"):
        line = next((l for l in out.splitlines() if l.startswith(item)), None)
        assert line, f"{item} missing:\n{out}"
        assert line.split()[1] in ("ok", "warn", "info", "fail"), line
    assert out.count("why:") == 6 and out.count("undo:") >= 5, out
    # This machine runs the suite on io_uring, so the check must find it usable.
    assert done.returncode == 0, out
