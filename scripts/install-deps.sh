#!/usr/bin/env bash
# Installs what Switchyard needs on Debian, and a Rust toolchain if none is present.
#
#   bash scripts/install-deps.sh          what the main job needs: fuse3 (the mount), libpmem
#                                         (the copy benchmark's peer baseline), fio (the file
#                                         benchmarks' baselines), UCX 1.22 in
#                                         /opt/switchyard/ucx (remote access; libclang
#                                         generates the bindings from its headers at build
#                                         time), sshfs and openssh-server (`bench remote
#                                         --sshfs`'s baseline)
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
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
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

# UCX for remote access. Debian 12's UCX 1.13 emulates gets and puts between processes of
# one host with the target's CPU; UCX 1.22 runs them over `cma` by the initiator alone, so a
# remote read costs the server nothing. Debian has no 1.22: it comes from PyPI as the
# `libucx` wheel (NVIDIA's build of UCX for RAPIDS, less its CUDA modules), pinned and
# checked, unpacked into /opt/switchyard/ucx-$UCX_VERSION, with
# /opt/switchyard/ucx linking to it. crates/ucx/build.rs builds against it and the binaries
# find it by their rpath (.cargo/config.toml). Elsewhere than x86_64 the system's UCX
# (libucx-dev) is used instead.
UCX_VERSION=1.22.0
UCX_WHEEL="libucx_cu12-$UCX_VERSION-py3-none-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl"
UCX_SHA256=5cbbef0c140a0a158ae3486089af659b38822b2234cd3dc90ba40a5e6553402a
UCX_DIR="/opt/switchyard/ucx-$UCX_VERSION"
need=""
ucx_wheel=0
if [ "$(uname -m)" = x86_64 ]; then
  [ -f "$UCX_DIR/include/ucp/api/ucp.h" ] || ucx_wheel=1
else
  [ -f /usr/include/ucp/api/ucp.h ] || need="$need libucx-dev"
fi

ldconfig -p | grep -q 'libpmem.so.1' || need="$need libpmem1"
# UCX's cma transport links libnuma.
ldconfig -p | grep -q 'libnuma.so.1' || need="$need libnuma1"
if [ "$ucx_wheel" -eq 1 ]; then
  python3 -m pip --version >/dev/null 2>&1 || need="$need python3-pip"
fi
command -v pkg-config >/dev/null || need="$need pkg-config"
compgen -G '/usr/lib/llvm-*/lib/libclang.so' >/dev/null || need="$need libclang-dev"
tools="fio:fio fusermount3:fuse3 sshfs:sshfs /usr/sbin/sshd:openssh-server"
# xfsprogs: the power-cut test (crates/cli/tests/powercut_loop.rs) keeps its disk on XFS, whose
# reflinks clone it atomically.
[ "$with_tests" -eq 1 ] && tools="$tools sqlite3:sqlite3 git:git tar:tar chromium:chromium stress-ng:stress-ng /usr/sbin/mkfs.xfs:xfsprogs"
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

if [ "$ucx_wheel" -eq 1 ]; then
  echo "installing UCX $UCX_VERSION into $UCX_DIR"
  tmp="$(mktemp -d)"
  quiet python3 -m pip download --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_28_x86_64 -d "$tmp" "libucx-cu12==$UCX_VERSION"
  quiet sh -c "cd '$tmp' && echo '$UCX_SHA256  $UCX_WHEEL' | sha256sum -c -"
  quiet python3 -m zipfile -e "$tmp/$UCX_WHEEL" "$tmp/x"
  $SUDO rm -rf "$UCX_DIR"
  $SUDO mkdir -p "$UCX_DIR"
  $SUDO cp -a "$tmp/x/libucx/lib" "$tmp/x/libucx/include" "$tmp/x/libucx/bin" "$UCX_DIR/"
  # ucx_perftest's OpenMP runtime, which the wheel keeps beside its libraries.
  $SUDO cp "$tmp"/x/libucx_cu12.libs/libgomp-*.so* "$UCX_DIR/lib/"
  # Zip archives keep no modes.
  $SUDO chmod 755 "$UCX_DIR"/bin/*
  # Static libraries and the CUDA modules (whose runtime stays out) are not used.
  $SUDO find "$UCX_DIR/lib" \( -name '*.a' -o -name '*.la' -o -name '*cuda*' \) -delete
  # The wheel's pkg-config files name the prefix it was built in.
  $SUDO sed -i "s|^prefix = .*|prefix = $UCX_DIR|" "$UCX_DIR"/lib/pkgconfig/*.pc
  $SUDO ln -sfn "ucx-$UCX_VERSION" /opt/switchyard/ucx
  rm -rf "$tmp"
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
