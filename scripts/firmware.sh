#!/usr/bin/env bash
# Kept for existing callers: the firmware tooling is `cargo xtask firmware`
# (xtask/, `cargo xtask firmware --help`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec cargo xtask firmware "$@"
