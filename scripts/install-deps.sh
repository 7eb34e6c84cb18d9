#!/usr/bin/env bash
# Installs what Switchyard needs on Debian: PMDK's libpmem (the copy benchmark's peer
# baseline), fio (the file benchmark's baselines) and a Rust toolchain if none is present.
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if ! ldconfig -p | grep -q 'libpmem.so.1' || ! command -v fio >/dev/null; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libpmem1 fio >/dev/null
fi
if ! command -v cargo >/dev/null; then
  curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi
