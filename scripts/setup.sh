#!/usr/bin/env bash
# Installs what the test suite needs, idempotently: Debian's redis-tools (redis-cli,
# redis-benchmark) and redis-server (for the bench comparisons), and a local Python venv
# (.venv) with redis-py, pytest and the job frameworks the client tests drive (RQ, Celery,
# dramatiq), Debian's ruby-sidekiq, Go with Debian's go-redis, and BullMQ from npm
# (tests/node), and Debian's chromium with chromium-driver for the dashboard's browser test.
# Nothing is installed by hand.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v redis-cli >/dev/null || need_apt+=(redis-tools)
command -v redis-benchmark >/dev/null || need_apt+=(redis-tools)
command -v redis-server >/dev/null || need_apt+=(redis-server)
# Sidekiq 6 and its Redis client, for the Sidekiq client test.
command -v sidekiq >/dev/null || need_apt+=(ruby-sidekiq ruby-redis)
# Go and go-redis for the Go client test: Debian's go-redis is v5 (gopkg.in/redis.v5); the
# Go module proxy that serves v9 is not reachable from these machines (docs/COMPATIBILITY.md).
command -v go >/dev/null || need_apt+=(golang-go)
[ -d /usr/share/gocode/src/gopkg.in/redis.v5 ] || need_apt+=(golang-gopkg-redis.v5-dev)
# Chromium and its WebDriver for the dashboard's browser test (tests/python/test_dashboard.py).
command -v chromium >/dev/null || need_apt+=(chromium)
command -v chromedriver >/dev/null || need_apt+=(chromium-driver)
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "setup: installing ${need_apt[*]} from the OS packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
    # The package starts a system redis on 6379; the tests never use it.
    (service redis-server stop || systemctl stop redis-server || true) >/dev/null 2>&1
fi

# The venv is (re)filled whenever tests/python/requirements.txt changes.
requirements=tests/python/requirements.txt
stamp=.venv/.requirements.sha256
want=$(sha256sum "$requirements" | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "setup: filling .venv from $requirements"
    [ -x .venv/bin/python ] || python3 -m venv .venv
    .venv/bin/pip install -q -r "$requirements"
    echo "$want" > "$stamp"
fi
# The Python SDK (clients/python), installed from the repository as its users install it
# (editable: its tests run the code as it is in the tree).
sdk_stamp=.venv/.sdk.sha256
sdk_want=$(sha256sum clients/python/pyproject.toml | cut -d' ' -f1)
if [ "$(cat "$sdk_stamp" 2>/dev/null)" != "$sdk_want" ] || ! .venv/bin/python -c "import wetask" 2>/dev/null; then
    echo "setup: installing the Python SDK from clients/python"
    .venv/bin/pip install -q --no-deps -e clients/python
    echo "$sdk_want" > "$sdk_stamp"
fi

# BullMQ for the Node client test, at the versions tests/node/package-lock.json pins.
if [ ! -d tests/node/node_modules/bullmq ] || [ tests/node/package-lock.json -nt tests/node/node_modules/.package-lock.json ]; then
    echo "setup: installing BullMQ into tests/node"
    (cd tests/node && npm ci --no-audit --no-fund --silent)
fi
# And BullMQ at its newest release with the newest ioredis (since 6.x BullMQ leaves choosing
# the Redis client to the user), and node-redis, in tests/node-current, so the client tests
# also run what a new user installs today; a fresh setup (CI's fresh clone) always takes the
# newest.
if [ ! -d tests/node-current/node_modules/bullmq ] || [ ! -d tests/node-current/node_modules/redis ]; then
    echo "setup: installing the newest BullMQ, ioredis and node-redis into tests/node-current"
    (cd tests/node-current && npm install --no-audit --no-fund --silent)
fi
