#!/bin/bash
# The hop tax and the zero hop (issue 35, docs/CLUSTER.md), measured as Redis users load a
# server: redis-benchmark GETs on random keys, the server pinned to CPU 0 (both shards on it)
# and redis-benchmark to CPU 1. Prints the server's CPU per request (every thread's run
# time, from /proc/<pid>/task/*/schedstat) for 1 shard and for 2 shards:
#   cluster: through the shard ports (`redis-benchmark --cluster`; one shard: its port);
#   shared:  through the shared port (a key of the other shard costs a hop).
# Usage: scripts/hop-tax.sh [pairs] [pipeline] [requests] [modes]   (release build: make release)
#   modes: "cluster shared" (default), or one of them.
set -euo pipefail
BIN=${WETASK_BIN:-$(dirname "$0")/../target/release/wetask}
pairs=${1:-4}; pipe=${2:-1}; n=${3:-300000}; modes=${4:-cluster shared}
cpu_ns() { cat /proc/$1/task/*/schedstat 2>/dev/null | awk '{s+=$1} END {printf "%d", s}'; }
run() { # shards mode -> ns per request
  # Ports below the ephemeral range (32768 on): a client's port never takes the server's.
  # The shard ports are port+1 and port+2, their cluster bus ports port+3 and port+4. A port
  # taken meanwhile is retried with another, three times.
  local shards=$1 mode=$2 port dir pid up=no
  for _try in 1 2 3; do
    port=$((10000 + RANDOM % 20000))
    dir=$(mktemp -d)
    taskset -c 0 "$BIN" --port $port --shards "$shards" --cpus 0 --appendonly no \
      --cluster-enabled yes --cluster-port $((port + 3)) --dir "$dir" --log-level warn >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 200); do redis-cli -p $port ping >/dev/null 2>&1 && { up=yes; break; }; sleep 0.05; done
    [ $up = yes ] && break
    kill $pid 2>/dev/null; wait $pid 2>/dev/null || true; rm -rf "$dir"
  done
  if [ $up = no ]; then echo "the server did not start on three ports" >&2; exit 1; fi
  local args
  if [ "$mode" = cluster ] && [ "$shards" -gt 1 ]; then args="-p $((port + 1)) --cluster"
  elif [ "$mode" = cluster ]; then args="-p $((port + 1))"
  else args="-p $port"; fi
  # shellcheck disable=SC2086
  timeout 120 taskset -c 1 redis-benchmark $args -t get -n 20000 -r 100000 -c 50 -P "$pipe" -q >/dev/null 2>&1
  local before after
  before=$(cpu_ns $pid)
  # shellcheck disable=SC2086
  timeout 300 taskset -c 1 redis-benchmark $args -t get -n "$n" -r 100000 -c 50 -P "$pipe" -q >/dev/null 2>&1
  after=$(cpu_ns $pid)
  kill $pid; wait $pid 2>/dev/null || true; rm -rf "$dir"
  echo $(( (after - before) / n ))
}
for p in $(seq "$pairs"); do
  for mode in $modes; do
    one=$(run 1 $mode); two=$(run 2 $mode)
    echo "pair $p $mode -P $pipe: 1 shard $one ns/req, 2 shards $two ns/req, ratio $(python3 -c "print(round($two/$one, 3))")"
  done
done
