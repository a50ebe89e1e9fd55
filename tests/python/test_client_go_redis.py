"""go-redis (tests/go/goredis) on WeTask with 20 random key and queue names on 2 and 4
shards: typed commands, pipelines, MULTI/EXEC and WATCH across shards, EVAL, a blocking pop,
pub/sub and the task engine. The go-redis is Debian's (gopkg.in/redis.v5, installed with Go
by scripts/setup.sh), built in GOPATH mode: the module proxy is out of reach."""

import json
import os
import shutil
import subprocess

import pytest

from conftest import ROOT, TARGET, Server

SOURCE = os.path.join(ROOT, "tests", "go", "goredis")
GOPATH = "/usr/share/gocode"


@pytest.fixture(scope="module")
def go_client():
    assert shutil.which("go"), "go is missing: scripts/setup.sh installs it"
    assert os.path.isdir(os.path.join(GOPATH, "src", "gopkg.in", "redis.v5")), \
        "go-redis is missing: scripts/setup.sh installs golang-gopkg-redis.v5-dev"
    binary = os.path.join(TARGET, "go", "goredis-test")
    env = dict(os.environ, GO111MODULE="off", GOPATH=GOPATH,
               GOCACHE=os.path.join(TARGET, "go", "cache"))
    build = subprocess.run(["go", "build", "-o", binary, "."], cwd=SOURCE, env=env,
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-4000:]
    return binary


@pytest.mark.parametrize("shards", ["2", "4"])
def test_go_redis(go_client, shards):
    srv = Server("--shards", shards)
    try:
        env = dict(os.environ, WETASK_PORT=str(srv.port), WETASK_NAMES="20")
        run = subprocess.run([go_client], env=env, capture_output=True, text=True, timeout=180)
        assert run.returncode == 0, run.stderr[-4000:]
        assert json.loads(run.stdout.strip().splitlines()[-1]) == {"names": 20, "tasks": 20}
    finally:
        srv.stop()
