#!/usr/bin/env bash
# Installs the Debian packages the test suite needs, if missing. CI starts
# from a fresh machine with only rustup's stable host toolchain.
set -euo pipefail

need=()
command -v qemu-system-arm >/dev/null || need+=(qemu-system-arm)
command -v ld.lld >/dev/null || need+=(lld)
command -v llvm-size >/dev/null || command -v size >/dev/null || need+=(llvm)
command -v valgrind >/dev/null || need+=(valgrind)
[ -x /usr/sbin/mosquitto ] || need+=(mosquitto)
command -v mosquitto_pub >/dev/null || need+=(mosquitto-clients)
# `make tap`: network namespaces and the TAP device; its run's certificates.
command -v ip >/dev/null || need+=(iproute2)
command -v openssl >/dev/null || need+=(openssl)

if [ ${#need[@]} -gt 0 ]; then
    echo "==> installing: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q "${need[@]}"
fi
# The Cortex-M toolchain route is chosen (and installed) by
# `cargo xtask firmware` itself.
cd "$(dirname "$0")/.." && cargo xtask firmware toolchain
