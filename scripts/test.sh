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
# nextest runs each test in its own process and retries a failing test up to twice,
# reporting it as FLAKY rather than hiding it: one --shards 2 connection is occasionally
# closed by the server (about 1 run in 20 of a two-shard test; see docs/perf-notes.md).
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --workspace --retries 2 --no-fail-fast
else
    cargo test --workspace
fi
.venv/bin/python -m pytest -q tests/python

# A smoke run of every bench workload against the debug server: checks the harness works,
# not speed (a few hundred requests each, one pair).
target="${CARGO_TARGET_DIR:-target}"
smoke=$("$target/debug/wetask-bench" vs-redis --pairs 1 --workloads all --ops 300 \
    --warmup-ms 0 --duration-ms 10000 --keyspace 1000 --memory-keys 300 \
    --wetask "$target/debug/wetask" --server-cpu 0 --load-cpu "$(( $(nproc) > 1 ? 1 : 0 ))" 2>/dev/null)
echo "$smoke"
for workload in $("$target/debug/wetask-bench" list | awk '{print $1}'); do
    grep -q "^$workload " <<<"$smoke" || { echo "bench smoke: no result for $workload"; exit 1; }
done
echo "bench smoke: every workload reported"
