#!/usr/bin/env bash
# No source file of a crate over 700 lines: a longer file holds several things that want
# modules of their own (functions over 80 lines are clippy's `too_many_lines`, in clippy.toml).
# Prints each offender with its line count; exits 1 if there is any.
set -euo pipefail
cd "$(dirname "$0")/.."
limit=700
status=0
while IFS= read -r -d '' f; do
  n=$(wc -l < "$f")
  if [ "$n" -gt "$limit" ]; then
    echo "$f: $n lines (limit $limit)"
    status=1
  fi
done < <(find crates/*/src -name '*.rs' -print0 | sort -z)
exit "$status"
