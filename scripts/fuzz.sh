#!/usr/bin/env bash
# Fuzzes what Switchyard parses from outside: `bash scripts/fuzz.sh [seconds] [target]`
# (default 600 s of `mount_image`: the store's mount with damaged images; `remote_message`:
# the remote protocol's decoder). Needs a nightly toolchain and cargo-fuzz (installed here when
# missing). Any crash, hang (a single input over 10 s) or leak stops the run with the input
# saved under fuzz/artifacts/TARGET/.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-600}"
target="${2:-mount_image}"
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
mkdir -p "fuzz/corpus/$target"
# cargo-fuzz sets RUSTFLAGS, which replaces the rpath .cargo/config.toml gives the binaries:
# they find the UCX the build used (crates/ucx/build.rs) this way instead.
if [ -d /opt/switchyard/ucx/lib ] && [ -z "${SWITCHYARD_UCX:-}" ]; then
  export LD_LIBRARY_PATH="/opt/switchyard/ucx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
cd fuzz
exec cargo +nightly fuzz run "$target" "corpus/$target" -- \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 -detect_leaks=1 -print_final_stats=1
