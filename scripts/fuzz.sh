#!/usr/bin/env bash
# Fuzzes the store's mount with damaged images: `bash scripts/fuzz.sh [seconds]` (default 600).
# Needs a nightly toolchain and cargo-fuzz (installed here when missing). Any crash, hang
# (a single input over 10 s) or leak stops the run with the input saved under
# fuzz/artifacts/mount_image/.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-600}"
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
mkdir -p fuzz/corpus/mount_image
cd fuzz
exec cargo +nightly fuzz run mount_image corpus/mount_image -- \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 -detect_leaks=1 -print_final_stats=1
