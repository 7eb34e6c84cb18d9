#!/usr/bin/env bash
# Installs what Switchyard needs on Debian: PMDK's libpmem (the copy benchmark's peer
# baseline), fio (the file benchmark's baselines and a client of the mount), fuse3 (the
# mount), sqlite3, git and tar (real clients in the mount tests), chromium (renders the page of
# `switchyard report` in its test), and a Rust toolchain if none is present.
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
need=""
ldconfig -p | grep -q 'libpmem.so.1' || need="$need libpmem1"
for tool in fio:fio fusermount3:fuse3 sqlite3:sqlite3 git:git tar:tar chromium:chromium; do
  command -v "${tool%%:*}" >/dev/null || need="$need ${tool#*:}"
done
if [ -n "$need" ]; then
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $need >/dev/null
fi
if ! command -v cargo >/dev/null; then
  curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi
