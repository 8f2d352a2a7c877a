#!/usr/bin/env bash
# `make tap`: the device app's MQTT connector over embassy-net and TLS 1.3
# on a Linux TAP interface, against a mosquitto, in a network namespace that the
# driver (examples/device-tap/src/bin/tap-e2e.rs) creates and removes
# itself. Builds examples/device-tap (a workspace of its own) with the
# host toolchain, then runs the driver; its exit code is this script's.
# Needs root (network namespaces, TAP), iproute2, /dev/net/tun, mosquitto
# and mosquitto-clients (`make deps`).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CARGO=${CARGO:-cargo}

die() { printf 'tap.sh: error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (ip netns, ip tuntap)"
command -v ip >/dev/null || die "no ip (Debian package iproute2)"
[ -c /dev/net/tun ] || die "no /dev/net/tun (TUN/TAP driver)"
[ -x /usr/sbin/mosquitto ] || die "no /usr/sbin/mosquitto (make deps)"
command -v mosquitto_sub >/dev/null || die "no mosquitto_sub (make deps)"
command -v openssl >/dev/null || die "no openssl (make deps)"

# The main workspace's target dir: crates built with the same features
# there (aimdb-core, postcard, ...) are shared.
(cd "$ROOT/examples/device-tap" && "$CARGO" build --release --locked --target-dir ../../target)
exec "$ROOT/target/release/tap-e2e" --device "$ROOT/target/release/device-tap" "$@"
