#!/usr/bin/env bash
# Installs what the test suite needs, idempotently: Debian's redis-tools (redis-cli,
# redis-benchmark) and redis-server (for the bench comparisons), and a local Python venv
# (.venv) with redis-py and pytest. Nothing is installed by hand.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v redis-cli >/dev/null || need_apt+=(redis-tools)
command -v redis-benchmark >/dev/null || need_apt+=(redis-tools)
command -v redis-server >/dev/null || need_apt+=(redis-server)
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "setup: installing ${need_apt[*]} from the OS packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
    # The package starts a system redis on 6379; the tests never use it.
    (service redis-server stop || systemctl stop redis-server || true) >/dev/null 2>&1
fi

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import redis, pytest' 2>/dev/null; then
    echo "setup: creating .venv with redis-py and pytest"
    python3 -m venv .venv
    .venv/bin/pip install -q 'redis>=5,<6' 'pytest>=8'
fi
