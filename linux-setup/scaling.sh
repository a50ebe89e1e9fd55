#!/usr/bin/env bash
# Multi-core scaling: WeTask with 1, 2, 4 ... N shards against one Redis, same load shape.
#
# For each shard count N (while 2N CPUs exist): WeTask runs with --shards N pinned to CPUs
# 0..N-1, and N load generators (wetask-bench run) run pinned to CPUs N..2N-1, each with
# its own connections. Redis (one thread: it cannot use more cores) is pinned to CPU 0 and
# driven by the same N generators. Changes nothing on the machine; needs a release build:
#
#   cargo build --release --workspace && linux-setup/scaling.sh
#
# Environment: MIX (get|set|mixed, default get), CONNECTIONS per generator (default 64),
# PIPELINE (default 1), DURATION_MS per run (default 5000), MAX_SHARDS (default nproc/2).
#
# Reading the output: "per shard" is WeTask's ops/s divided by N, and "efficiency" compares
# it with the 1-shard run (1.00 = perfect linear scaling). With N generators a key lands on
# another shard (N-1)/N of the time, so efficiency below 1.00 is the cost of cross-shard
# hops. "vs redis" is WeTask's ops/s over Redis's under the same generators. If a generator
# core is saturated (ops/s per generator flat as N grows), the load, not the server, is the
# limit: add generators or use pipelines.
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -l unlimited 2>/dev/null || true

BENCH=${BENCH:-target/release/wetask-bench}
WETASK=${WETASK:-target/release/wetask}
MIX=${MIX:-get}
CONNECTIONS=${CONNECTIONS:-64}
PIPELINE=${PIPELINE:-1}
DURATION_MS=${DURATION_MS:-5000}
CPUS=$(nproc)
MAX_SHARDS=${MAX_SHARDS:-$((CPUS / 2))}
[ "$MAX_SHARDS" -ge 1 ] || { echo "scaling.sh needs at least 2 CPUs"; exit 1; }
for tool in "$BENCH" "$WETASK" redis-server; do
    command -v "$tool" >/dev/null || [ -x "$tool" ] || { echo "missing $tool"; exit 1; }
done

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

wait_ready() {
    for _ in $(seq 200); do
        redis-cli -p "$1" ping 2>/dev/null | grep -q PONG && return 0
        sleep 0.05
    done
    echo "server on port $1 did not start"; exit 1
}

# drive PORT N: runs N generators on CPUs N..2N-1; prints total ops/s.
drive() {
    local port=$1 n=$2 pids=() out total=0
    out=$(mktemp -d)
    for i in $(seq 0 $((n - 1))); do
        "$BENCH" run --addr "127.0.0.1:$port" --connections "$CONNECTIONS" --pipeline "$PIPELINE" \
            --mix "$MIX" --duration-ms "$DURATION_MS" --warmup-ms 500 --cpu $((n + i)) \
            > "$out/$i" 2>&1 &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid"; done
    for i in $(seq 0 $((n - 1))); do
        total=$(awk -v t="$total" '{for (i = 1; i <= NF; i++) if ($(i) == "ops/s,") print t + $(i - 1)}' "$out/$i")
    done
    rm -rf "$out"
    echo "$total"
}

# preload PORT: loads the key space so GETs hit.
preload() {
    "$BENCH" run --addr "127.0.0.1:$1" --connections 8 --pipeline 64 --mix set \
        --duration-ms 1000 --warmup-ms 0 --cpu "$((CPUS - 1))" >/dev/null
}

printf '%-7s %14s %14s %11s %14s %14s %9s\n' shards "wetask ops/s" "per shard" efficiency \
    "wetask µs/op" "redis ops/s" "vs redis"
base=""
n=1
port=17700
while [ "$n" -le "$MAX_SHARDS" ]; do
    cpus=$(seq -s, 0 $((n - 1)))
    "$WETASK" --port "$port" --shards "$n" --cpus "$cpus" --log-level error --appendonly no >/dev/null 2>&1 &
    wpid=$!
    wait_ready "$port"
    preload "$port"
    t0=$(cpu_ticks "$wpid")
    wops=$(drive "$port" "$n")
    t1=$(cpu_ticks "$wpid")
    kill "$wpid"; wait "$wpid" 2>/dev/null || true

    taskset -c 0 redis-server --port $((port + 1)) --save '' --appendonly no >/dev/null &
    rpid=$!
    wait_ready $((port + 1))
    preload $((port + 1))
    rops=$(drive $((port + 1)) "$n")
    kill "$rpid"; wait "$rpid" 2>/dev/null || true

    per=$(awk -v o="$wops" -v n="$n" 'BEGIN {printf "%.0f", o / n}')
    [ -n "$base" ] || base=$per
    hz=$(getconf CLK_TCK)
    cost=$(awk -v t=$((t1 - t0)) -v hz="$hz" -v o="$wops" -v d="$DURATION_MS" \
        'BEGIN {printf "%.2f", t / hz * 1e6 / (o * (d + 500) / 1000)}')
    printf '%-7s %14.0f %14s %11.2f %14s %14.0f %9.2f\n' "$n" "$wops" "$per" \
        "$(awk -v p="$per" -v b="$base" 'BEGIN {print p / b}')" "$cost" "$rops" \
        "$(awk -v w="$wops" -v r="$rops" 'BEGIN {print w / r}')"
    n=$((n * 2))
    port=$((port + 2))
done
