# One task runner for the usual chores. `make test` is the README's test command.
.PHONY: check test fuzz run compat

check:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

test:
	./scripts/test.sh

run:
	cargo run --release -p wetask-server --bin wetask

# Needs `cargo install cargo-fuzz`; see fuzz/README.md.
fuzz:
	cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run command_decoder -- -max_total_time=60

# Regenerates docs/COMPATIBILITY.md from the command table.
compat:
	UPDATE_COMPAT=1 cargo test -p wetask-shards compatibility_doc_is_current
