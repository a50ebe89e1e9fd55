#!/usr/bin/env bash
# The whole test suite: unit, property and integration tests (cargo), then redis-py,
# redis-cli and redis-benchmark against the real binary. `./scripts/test.sh` is what the
# README and .ci/run call.
set -euo pipefail
cd "$(dirname "$0")/.."

# glommio and io_uring lock memory; raise the limit where we may (see linux-setup/README.md).
ulimit -l unlimited 2>/dev/null || ulimit -l "$(ulimit -H -l)" 2>/dev/null || true

./scripts/setup.sh
cargo build --workspace --all-targets
cargo test --workspace
.venv/bin/python -m pytest -q tests/python
