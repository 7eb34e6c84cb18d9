#!/usr/bin/env bash
# Installs what Switchyard needs on Debian, and a Rust toolchain if none is present.
#
#   bash scripts/install-deps.sh          what the main job needs: fuse3 (the mount), libpmem
#                                         (the copy benchmark's peer baseline), fio (the file
#                                         benchmarks' baselines), UCX (remote access; its
#                                         headers, pkg-config and libclang generate the
#                                         bindings at build time), sshfs and openssh-server
#                                         (`bench remote --sshfs`'s baseline)
#   bash scripts/install-deps.sh --test   also what the tests need: sqlite3, git and tar (real
#                                         clients in the mount tests), chromium (renders the
#                                         page of `switchyard report` in its test), stress-ng
#                                         (its file-system stressors on a mount)
#
# Packages are installed without their recommendations. When a step fails, its own output is
# shown (it is kept quiet only while it succeeds). A Rust toolchain installed here is linked
# into /usr/local/bin, so the shell that ran this script finds `cargo` on its next command.
set -euo pipefail

with_tests=0
for arg in "$@"; do
  case "$arg" in
    --test) with_tests=1 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "install-deps.sh: unknown option $arg (see --help)" >&2; exit 2 ;;
  esac
done

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

# Runs a command quietly; on failure prints what it printed and stops.
quiet() {
  local log
  log="$(mktemp)"
  if ! "$@" >"$log" 2>&1; then
    echo "install-deps.sh: this step failed: $*" >&2
    cat "$log" >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
}

need=""
ldconfig -p | grep -q 'libpmem.so.1' || need="$need libpmem1"
[ -f /usr/include/ucp/api/ucp.h ] || need="$need libucx-dev"
command -v ucx_info >/dev/null || need="$need ucx-utils"
command -v pkg-config >/dev/null || need="$need pkg-config"
compgen -G '/usr/lib/llvm-*/lib/libclang.so' >/dev/null || need="$need libclang-dev"
tools="fio:fio fusermount3:fuse3 sshfs:sshfs /usr/sbin/sshd:openssh-server"
[ "$with_tests" -eq 1 ] && tools="$tools sqlite3:sqlite3 git:git tar:tar chromium:chromium stress-ng:stress-ng"
for tool in $tools; do
  command -v "${tool%%:*}" >/dev/null || need="$need ${tool#*:}"
done
# Building needs a C linker and curl for rustup.
command -v cc >/dev/null || need="$need gcc libc6-dev"
command -v cargo >/dev/null || [ -x "$HOME/.cargo/bin/cargo" ] || command -v curl >/dev/null \
  || need="$need curl ca-certificates"
if [ -n "$need" ]; then
  echo "installing:$need"
  quiet $SUDO apt-get update
  # shellcheck disable=SC2086
  quiet $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $need
fi

if ! command -v cargo >/dev/null; then
  if [ ! -x "$HOME/.cargo/bin/cargo" ]; then
    echo "installing Rust (rustup, minimal profile)"
    quiet sh -c 'curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal'
  fi
  # The caller's shell cannot see a PATH change made here: make cargo findable by name.
  for bin in cargo rustc rustup; do
    $SUDO ln -sf "$HOME/.cargo/bin/$bin" "/usr/local/bin/$bin"
  done
fi
