#!/usr/bin/env bash
# Installs libswitchyard for C and C++ programs:
#
#   bash scripts/install-lib.sh [PREFIX]        (default /usr/local)
#
#   PREFIX/lib/libswitchyard.so.1   the shared library (soname libswitchyard.so.1), and the
#   PREFIX/lib/libswitchyard.so     link that -lswitchyard finds
#   PREFIX/lib/libswitchyard.a      the static library
#   PREFIX/include/switchyard.h     the header
#   PREFIX/lib/pkgconfig/switchyard.pc
#
# Then: cc prog.c $(pkg-config --cflags --libs switchyard)   (--static for the static one).
# Builds the release library first, unless SWITCHYARD_LIB_DIR names a directory that holds
# libswitchyard.so and libswitchyard.a already built.
set -euo pipefail
prefix=${1:-/usr/local}
cd "$(dirname "$0")/.."
lib=${SWITCHYARD_LIB_DIR:-}
if [[ -z $lib ]]; then
  cargo build --release -q -p switchyard-capi
  lib=target/release
fi
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
install -Dm755 "$lib/libswitchyard.so" "$prefix/lib/libswitchyard.so.1"
ln -sf libswitchyard.so.1 "$prefix/lib/libswitchyard.so"
install -Dm644 "$lib/libswitchyard.a" "$prefix/lib/libswitchyard.a"
install -Dm644 crates/capi/include/switchyard.h "$prefix/include/switchyard.h"
# The UCX the library was built against, found as crates/ucx/build.rs finds it: a static link
# needs its directory (and a program linked so needs it at run time), unless it is the
# system's.
ucx=${SWITCHYARD_UCX:-}
[[ -z $ucx && -f /opt/switchyard/ucx/include/ucp/api/ucp.h ]] && ucx=/opt/switchyard/ucx
ucx_ldflags=""
[[ -n $ucx ]] && ucx_ldflags="-L$ucx/lib -Wl,-rpath,$ucx/lib "
mkdir -p "$prefix/lib/pkgconfig"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" -e "s|@UCX_LDFLAGS@|$ucx_ldflags|" \
  crates/capi/switchyard.pc.in >"$prefix/lib/pkgconfig/switchyard.pc"
echo "installed libswitchyard $version under $prefix"
