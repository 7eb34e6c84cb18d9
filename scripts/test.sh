#!/usr/bin/env bash
# The project's test command: formatting, lints, docs, tests, and the loom and shuttle model
# checks.
set -euo pipefail
cd "$(dirname "$0")/.."
# No source file over 700 lines (quick: it only counts lines).
bash scripts/check-sizes.sh
# What the tests need beyond the main job (real clients of the mount, a browser); quick when
# everything is there.
bash scripts/install-deps.sh --test
cargo fmt --all --check
# The C library and the preload libraries link no command-line parser.
bash scripts/check-config-deps.sh
# The product depends on nothing of the benchmarks and carries no test hook.
bash scripts/check-deps.sh
cargo clippy --workspace --all-targets -- -D warnings
# Docs build without broken or private intra-doc links.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
cargo test --workspace
CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 \
  cargo test -p switchyard-engine --release --lib loom
# The store's real in-flight tracking on shuttle's locks, under its model checker.
CARGO_TARGET_DIR=target/shuttle RUSTFLAGS="--cfg shuttle" \
  cargo test -p switchyard-store --release --lib -- inflight::model changes::model
