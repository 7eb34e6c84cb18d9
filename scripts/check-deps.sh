#!/usr/bin/env bash
# Dependencies point down only, product first: the product binary `switchyard` (crates/cli)
# links nothing of the benchmarks (the switchyard-bench crate, and plotters, regex, snap and
# sha2, which only they use) and no test hook (a `testing` feature: the store's crash harness,
# the engine's fault injection). Fails naming what it found. See docs/design.md, "The product
# and the benchmarks".
set -euo pipefail
cd "$(dirname "$0")/.."
tree=$(cargo tree -q -p switchyard -e normal,features --prefix none)
found=$(grep -E '^(switchyard-bench|plotters|regex|snap|sha2)([- ]|$)|feature "testing"' \
  <<<"$tree" | sort -u || true)
if [ -n "$found" ]; then
  echo "check-deps: the product (switchyard) depends on what only benchmarks or tests may:" >&2
  echo "$found" >&2
  exit 1
fi
echo "check-deps: the product links no benchmark and no test hook"
