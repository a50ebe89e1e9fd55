# One task runner for the usual chores. `make test` is the README's test command.
.PHONY: check test bench gate fuzz run compat chaos

check:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

test:
	./scripts/test.sh

# Paired comparison with Redis on this machine (see docs/BENCHMARKS.md).
bench:
	cargo build --release --workspace
	./target/release/wetask-bench vs-redis --pairs 5 --workloads all --wetask target/release/wetask

# Did we get slower than the previous commit?
gate:
	cargo build --release -p wetask-bench
	./target/release/wetask-bench gate --baseline HEAD~1 --workloads kv,mixed --pairs 6

run:
	cargo run --release -p wetask-server --bin wetask

# Needs `cargo install cargo-fuzz`; see fuzz/README.md.
fuzz:
	cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run command_decoder -- -max_total_time=60

# The consensus nemesis tests at length: 50 leader kills, 21 nemesis rounds under the
# register clients (the suite runs 10 and 6), 200 blocked-client cases per variant against
# redis-server (the suite runs 30), and cluster mode's reshard under writers with 600 slots
# (the suite moves 120); results go to docs/bench/chaos.txt.
chaos:
	cargo build -p wetask-server
	{ echo "# make chaos at $$(git rev-parse --short HEAD), $$(date -u +%F): 50 leader kills under a writer," \
	       "then 21 nemesis rounds (kill, pause + cut-off read, partition) on a register (one group, then two), snapshots every 4 KiB of log"; \
	  WETASK_CHAOS_FAILOVERS=50 WETASK_CHAOS_ROUNDS=21 .venv/bin/python -m pytest -q -s \
		tests/python/test_consensus.py -k "ten_times or linearizable"; } | tee docs/bench/chaos.txt
	{ echo "# blocked clients against redis-server: 200 cases per shard count and protocol"; \
	  WETASK_BLOCKED_CASES=200 .venv/bin/python -m pytest -q tests/python/test_blocked_differential.py; } | tee -a docs/bench/chaos.txt
	{ echo "# cluster mode: redis-cli reshards 600 slots under two writers, then rebalances"; \
	  WETASK_CHAOS_RESHARD_SLOTS=600 .venv/bin/python -m pytest -q -s \
		tests/python/test_cluster_nodes.py -k reshard_and_rebalance; } | tee -a docs/bench/chaos.txt

# Regenerates docs/COMPATIBILITY.md from the command table.
compat:
	UPDATE_COMPAT=1 cargo test -p wetask-shards compatibility_doc_is_current
