#!/usr/bin/env bash
# The C library and the preload libraries read their configuration through
# `switchyard-config`, which has no command-line parser: neither clap nor anyhow may be linked
# into them. Fails, naming the crate and the path to the dependency, if one is.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
for crate in switchyard-capi switchyard-preload switchyard-preload-memcpy switchyard-config; do
  found=$(cargo tree -p "$crate" -e normal --prefix none | grep -E 'clap|anyhow' || true)
  if [ -n "$found" ]; then
    echo "$crate links a command-line dependency:" >&2
    echo "$found" | sort -u >&2
    cargo tree -p "$crate" -e normal -i "$(echo "$found" | head -1 | cut -d' ' -f1)" >&2 || true
    status=1
  fi
done
exit $status
