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
# nextest runs each test in its own process, in parallel. No retries: the one "flaky" test
# this suite had was heap corruption (docs/perf-notes.md), and a retry only hid it.
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --workspace --no-fail-fast
else
    cargo test --workspace
fi
.venv/bin/python -m pytest -q tests/python
# The Python SDK's own tests (clients/python/tests), against the same binary.
(cd clients/python && ../../.venv/bin/python -m pytest -q tests)
./scripts/asan.sh

# A smoke run of every bench workload against the debug server: checks the harness works,
# not speed (a few hundred requests each, one pair).
target="${CARGO_TARGET_DIR:-target}"
smoke_json=$(mktemp)
smoke=$("$target/debug/wetask-bench" vs-redis --pairs 1 --workloads all --ops 300 \
    --warmup-ms 0 --duration-ms 10000 --keyspace 1000 --memory-keys 300 --json "$smoke_json" \
    --wetask "$target/debug/wetask" --server-cpu 0 --load-cpu "$(( $(nproc) > 1 ? 1 : 0 ))" 2>/dev/null)
echo "$smoke"
for workload in $("$target/debug/wetask-bench" list | awk '{print $1}'); do
    grep -q "^$workload " <<<"$smoke" || { echo "bench smoke: no result for $workload"; exit 1; }
done
echo "bench smoke: every workload reported"
pooled=$("$target/debug/wetask-bench" pool "$smoke_json" "$smoke_json")
grep -q '^# 2 runs pooled' <<<"$pooled" || { echo "bench smoke: pool did not read the run's JSON"; exit 1; }
rm -f "$smoke_json"
echo "bench smoke: pool read the run back"

# Liveness under sustained cross-shard load: 256 connections pipelining SET/GET/DEL at a
# two-shard server for 3 s must all be answered. A ring driver that never yielded to its
# cross-shard batch tasks hung this for minutes (generous limit; it takes about 3 s).
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$target/debug/wetask" --port "$port" --shards 2 --log-level error --appendonly no >/dev/null 2>&1 &
server=$!
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
if ! timeout 60 "$target/debug/wetask-bench" run --addr "127.0.0.1:$port" --connections 256 \
        --pipeline 8 --mix mixed --duration-ms 3000 --warmup-ms 0 --cpu "$(( $(nproc) > 1 ? 1 : 0 ))"; then
    kill "$server"; echo "two-shard sustained load: clients were not answered"; exit 1
fi
kill "$server"; wait "$server" 2>/dev/null || true
echo "two-shard sustained load: every request answered"
