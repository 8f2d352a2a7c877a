#!/usr/bin/env bash
# Cortex-M firmware builds for aimdb-core: toolchain selection, no_std
# checks, and the QEMU self-test firmware in examples/firmware-qemu.
#
#   scripts/firmware.sh toolchain                 pick (and if needed install) a toolchain
#   scripts/firmware.sh check-core                aimdb-core --no-default-features and aimdb-connectors
#                                                 --features mqtt (and mqtt,embassy-net) on
#                                                 thumbv6m/thumbv7m, no allocator, no std-only dependency
#   scripts/firmware.sh smoke [--cpu cortex-m3|cortex-m0]
#                                                 build the self-test firmware, run it under QEMU,
#                                                 exit with QEMU's exit code
#   scripts/firmware.sh smoke-fail [--cpu ...]    same with feature `inject-failure`: passes
#                                                 only if QEMU exits with code 1
#   scripts/firmware.sh device                    build the demo device (Cortex-M3); prints its ELF path
#   scripts/firmware.sh footprint                 flash/RAM of both devices, RAM per outbound and per
#                                                 inbound route; writes data/baselines/firmware_size.json
#   scripts/firmware.sh board                     build the nRF52840 board firmware (framed, then
#                                                 --features mqtt) for thumbv7em-none-eabihf; it
#                                                 cannot run here (no board), so CI only builds it
#   scripts/firmware.sh board-eth                 build the NUCLEO-F767ZI firmware (MQTT over embassy-net
#                                                 on the board's Ethernet) for thumbv7em-none-eabihf and
#                                                 record its flash/RAM in data/baselines/firmware_size.json
#   scripts/firmware.sh b3 [--cpu ...]            build the b3_on_target firmware; prints `elf=PATH`
#                                                 and `rustc=VERSION (ROUTE route)` (aimdb-bench's
#                                                 b3_on_target runs it under QEMU)
#   scripts/firmware.sh fresh-crate               the firmware crate of docs/FIRMWARE.md ("Start a
#                                                 firmware crate of your own"): its files copied from
#                                                 the page into a temp dir outside the repository, the
#                                                 page's command for this route run there (QEMU
#                                                 included), its documented output required
#
# Toolchain routes (see docs/FIRMWARE.md):
#   rustup  - `rustup target list --installed` has thumbv6m-none-eabi and
#             thumbv7m-none-eabi for the toolchain rust-toolchain.toml
#             selects: plain `cargo`, precompiled core, rust-lld.
#   debian  - /usr/bin/rustc (Debian's rustc-web) with the library sources in
#             /usr/lib/rustlib/src/rust/library: core is compiled with
#             `-Zbuild-std=core` (RUSTC_BOOTSTRAP=1) and linked with ld.lld.
#             Installed with apt-get when neither route is available (CI
#             starts from a machine with only rustup's host target).
# All firmware artifacts go to target-fw/ at the workspace root, never
# target/, so the host toolchain and the firmware toolchain never share
# artifacts. FW_TOOLCHAIN=rustup|debian forces a route.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FW_DIR="$ROOT/examples/firmware-qemu"
BOARD_DIR="$ROOT/examples/firmware-nrf52840"
BOARD_TARGET=thumbv7em-none-eabihf
ETH_BOARD_DIR="$ROOT/examples/firmware-stm32f767"
SIZES_JSON="$ROOT/data/baselines/firmware_size.json"
FW_NAME=firmware-qemu
TARGET_DIR="$ROOT/target-fw"
# check-core builds aimdb-core with different RUSTFLAGS than the firmware;
# cargo does not key artifacts by RUSTFLAGS, so a shared directory would
# rebuild `core` each time one alternates between the two.
CHECK_TARGET_DIR="$TARGET_DIR/check-core"
THUMB_TARGETS=(thumbv6m-none-eabi thumbv7m-none-eabi)
DEBIAN_PACKAGES=(rustc-web cargo-web rust-web-src lld qemu-system-arm)
DEBIAN_RUSTC=/usr/bin/rustc
DEBIAN_RUSTDOC=/usr/bin/rustdoc
DEBIAN_CARGO=/usr/bin/cargo
DEBIAN_LIBSRC=/usr/lib/rustlib/src/rust/library
QEMU_TIMEOUT=${QEMU_TIMEOUT:-60}
# fresh-crate: the page it checks, its target dir (fixed, so a re-run only
# rebuilds the crate and aimdb-core) and the time the build may take, a
# cold build of `core` and every dependency included (the QEMU run then
# has QEMU_TIMEOUT).
# FRESH_DOC checks another copy of the page (a deliberately broken one must
# fail).
FRESH_DOC=${FRESH_DOC:-$ROOT/docs/FIRMWARE.md}
FRESH_TARGET_DIR="$TARGET_DIR/fresh-crate"
FRESH_TIMEOUT=${FRESH_TIMEOUT:-900}

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'firmware.sh: error: %s\n' "$*" >&2; exit 1; }

usage() {
    sed -n '2,/^# Toolchain routes/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
}

# ------------------------------------------------------------------ toolchain

ROUTE=""
CARGO_CMD=()   # command prefix that runs the firmware toolchain's cargo
BUILD_STD=()   # extra cargo arguments (build-std on the Debian route)

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root to run: $*"
    fi
}

apt_install() {
    log "apt-get install -y $*"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y "$@"
}

# rustup_targets: the targets of the toolchain the firmware builds use, the
# one rust-toolchain.toml selects (asked from the repository, whatever the
# caller's directory).
rustup_targets() {
    (cd "$ROOT" && rustup target list --installed 2>/dev/null)
}

rustup_has_targets() {
    command -v rustup >/dev/null 2>&1 || return 1
    local installed t
    installed=$(rustup_targets) || return 1
    for t in "${THUMB_TARGETS[@]}"; do
        grep -qx "$t" <<<"$installed" || return 1
    done
}

debian_toolchain_present() {
    [ -x "$DEBIAN_RUSTC" ] && [ -x "$DEBIAN_CARGO" ] && [ -d "$DEBIAN_LIBSRC/core" ]
}

# Decides the route and sets ROUTE, CARGO_CMD and BUILD_STD; installs what
# is missing (Debian packages only).
select_toolchain() {
    [ -n "$ROUTE" ] && return 0
    local forced=${FW_TOOLCHAIN:-}
    if [ "$forced" = rustup ] || { [ -z "$forced" ] && rustup_has_targets; }; then
        rustup_has_targets || die "FW_TOOLCHAIN=rustup but rustup lacks ${THUMB_TARGETS[*]}"
        ROUTE=rustup
        CARGO_CMD=(cargo)
        BUILD_STD=()
    else
        [ -z "$forced" ] || [ "$forced" = debian ] || die "FW_TOOLCHAIN must be rustup or debian"
        if ! debian_toolchain_present; then
            apt_install "${DEBIAN_PACKAGES[@]}"
            debian_toolchain_present || die "Debian toolchain still missing after apt-get install"
        fi
        ROUTE=debian
        # Debian's rustc has no rust-lld: link with ld.lld (package lld).
        CARGO_CMD=(env RUSTC="$DEBIAN_RUSTC" RUSTDOC="$DEBIAN_RUSTDOC" RUSTC_BOOTSTRAP=1
                   CARGO_TARGET_THUMBV6M_NONE_EABI_LINKER=ld.lld
                   CARGO_TARGET_THUMBV7M_NONE_EABI_LINKER=ld.lld
                   CARGO_TARGET_THUMBV7EM_NONE_EABIHF_LINKER=ld.lld
                   "$DEBIAN_CARGO")
        # Only `core` (and compiler_builtins): a firmware that needed `alloc`
        # would not compile on this route.
        BUILD_STD=(-Zbuild-std=core)
    fi
    local missing=()
    command -v qemu-system-arm >/dev/null 2>&1 || missing+=(qemu-system-arm)
    if [ "$ROUTE" = debian ]; then
        command -v ld.lld >/dev/null 2>&1 || missing+=(lld)
    fi
    if [ ${#missing[@]} -gt 0 ]; then
        apt_install "${missing[@]}"
    fi
}

cmd_toolchain() {
    select_toolchain
    echo "route: $ROUTE"
    echo "cargo: ${CARGO_CMD[*]} ${BUILD_STD[*]}"
    echo "target dir: $TARGET_DIR"
    "${CARGO_CMD[@]}" --version
    if [ "$ROUTE" = debian ]; then
        "$DEBIAN_RUSTC" --version
        echo "library sources: $DEBIAN_LIBSRC"
        ld.lld --version
    else
        rustc --version
    fi
    qemu-system-arm --version | head -n1
}

# The cargo that resolves dependency trees: the host one (rustup) if there,
# else Debian's.
host_cargo() {
    if command -v cargo >/dev/null 2>&1; then
        command -v cargo
    else
        echo "$DEBIAN_CARGO"
    fi
}

# ------------------------------------------------------------------ firmware

cpu_target() {
    case "$1" in
        cortex-m3) echo thumbv7m-none-eabi ;;
        cortex-m0) echo thumbv6m-none-eabi ;;
        *) die "unknown --cpu '$1' (cortex-m3 or cortex-m0)" ;;
    esac
}

# fw_elf TARGET [BIN]: the ELF of one of the firmware binaries.
fw_elf() { echo "$TARGET_DIR/$1/release/${2:-selftest}"; }

# build_firmware TARGET [cargo args...]
build_firmware() {
    local target=$1; shift
    select_toolchain
    log "building $FW_NAME for $target ($ROUTE route) $*"
    # cargo runs inside the firmware crate so only its own .cargo/config.toml
    # and Cargo.lock apply; it is a workspace of its own.
    (cd "$FW_DIR" && "${CARGO_CMD[@]}" build --release --target "$target" \
        --target-dir ../../target-fw "${BUILD_STD[@]}" "$@")
}

print_sizes() {
    local elf=$1 tool
    if command -v llvm-size >/dev/null 2>&1; then
        tool=llvm-size
    elif command -v size >/dev/null 2>&1; then
        tool=size
    else
        log "no llvm-size or size: skipping sizes"
        return 0
    fi
    "$tool" "$elf"
    "$tool" -A "$elf" | awk '
        $1 == ".vector_table" || $1 == ".text" || $1 == ".rodata" { flash += $2 }
        $1 == ".data" { flash += $2; ram += $2 }
        $1 == ".bss" || $1 == ".uninit" { ram += $2 }
        END { printf "flash (.vector_table+.text+.rodata+.data): %d bytes\n", flash;
              printf "static RAM (.data+.bss+.uninit): %d bytes\n", ram }'
}

# run_qemu CPU ELF [LOGFILE]: runs the firmware, returns QEMU's exit code
# (124 on timeout).
run_qemu() {
    local cpu=$1 elf=$2 logfile=${3:-/dev/null} rc
    log "qemu-system-arm -cpu $cpu -machine lm3s6965evb ... -kernel ${elf#"$ROOT"/} (timeout ${QEMU_TIMEOUT}s)"
    set +e
    timeout "$QEMU_TIMEOUT" qemu-system-arm -cpu "$cpu" -machine lm3s6965evb -nographic \
        -monitor none -semihosting-config enable=on,target=native -kernel "$elf" \
        </dev/null | tee "$logfile"
    rc=${PIPESTATUS[0]}
    set -e
    [ "$rc" -ne 124 ] || log "QEMU timed out after ${QEMU_TIMEOUT}s"
    return "$rc"
}

parse_cpu() {
    CPU=cortex-m3
    while [ $# -gt 0 ]; do
        case "$1" in
            --cpu) [ $# -ge 2 ] || die "--cpu needs a value"; CPU=$2; shift 2 ;;
            --cpu=*) CPU=${1#--cpu=}; shift ;;
            *) die "unknown argument '$1'" ;;
        esac
    done
    TARGET=$(cpu_target "$CPU")
}

cmd_smoke() {
    parse_cpu "$@"
    build_firmware "$TARGET"
    local elf rc=0
    elf=$(fw_elf "$TARGET")
    print_sizes "$elf"
    run_qemu "$CPU" "$elf" || rc=$?
    log "smoke ($CPU, $TARGET): QEMU exit code $rc"
    exit "$rc"
}

cmd_smoke_fail() {
    parse_cpu "$@"
    build_firmware "$TARGET" --features inject-failure
    local elf out rc=0
    elf=$(fw_elf "$TARGET")
    out=$(mktemp)
    # shellcheck disable=SC2064
    trap "rm -f '$out'" EXIT
    run_qemu "$CPU" "$elf" "$out" || rc=$?
    # The feature-built ELF replaces the normal one; the next `smoke`
    # rebuilds (only the firmware crate).
    if [ "$rc" -ne 1 ]; then
        die "smoke-fail: expected QEMU exit code 1 from the injected failure, got $rc"
    fi
    if ! grep -q '^FAIL ' "$out"; then
        die "smoke-fail: QEMU exited 1 but no check printed FAIL (panic or fault instead?)"
    fi
    echo "smoke-fail ($CPU): OK, the injected check failure ended QEMU with exit code 1"
}

cmd_device() {
    build_firmware thumbv7m-none-eabi >&2
    local elf
    elf=$(fw_elf thumbv7m-none-eabi device)
    print_sizes "$elf" >&2
    echo "$elf"
}

cmd_board() {
    select_toolchain
    if [ "$ROUTE" = rustup ] && ! rustup_targets | grep -qx "$BOARD_TARGET"; then
        die "rustup has no $BOARD_TARGET: rustup target add $BOARD_TARGET (or FW_TOOLCHAIN=debian)"
    fi
    local features elf
    elf="$TARGET_DIR/$BOARD_TARGET/release/firmware-nrf52840"
    for features in "" mqtt; do
        log "building firmware-nrf52840 for $BOARD_TARGET ($ROUTE route)${features:+ --features $features}"
        (cd "$BOARD_DIR" && "${CARGO_CMD[@]}" build --release --target "$BOARD_TARGET" \
            --target-dir ../../target-fw "${BUILD_STD[@]}" ${features:+--features "$features"})
        print_sizes "$elf"
    done
    echo "board: firmware-nrf52840 builds (framed and mqtt); run it on a board with cargo run --release (probe-rs)"
}

# The Ethernet board's sizes live on one line of firmware_size.json,
# `  "board_stm32f767_eth": {...},` right after the opening brace:
# board-eth rewrites that line, footprint (which rewrites the rest)
# carries it over.
board_lines() {
    [ -f "$SIZES_JSON" ] && grep -E '^  "board_[a-z0-9_]+": \{.*\},$' "$SIZES_JSON" || true
}

cmd_board_eth() {
    select_toolchain
    if [ "$ROUTE" = rustup ] && ! rustup target list --installed | grep -qx "$BOARD_TARGET"; then
        die "rustup has no $BOARD_TARGET: rustup target add $BOARD_TARGET (or FW_TOOLCHAIN=debian)"
    fi
    local elf="$TARGET_DIR/$BOARD_TARGET/release/firmware-stm32f767" flash ram rustc_v tmp
    log "building firmware-stm32f767 for $BOARD_TARGET ($ROUTE route)"
    # The default broker address: the recorded size does not depend on
    # whatever AIMDB_BROKER the caller's environment holds.
    (cd "$ETH_BOARD_DIR" && env -u AIMDB_BROKER "${CARGO_CMD[@]}" build --release \
        --target "$BOARD_TARGET" --target-dir ../../target-fw "${BUILD_STD[@]}")
    print_sizes "$elf"
    read -r flash ram < <(size_of "$elf")
    if [ "$ROUTE" = debian ]; then rustc_v=$("$DEBIAN_RUSTC" --version); else rustc_v=$(rustc --version); fi
    [ -f "$SIZES_JSON" ] || die "${SIZES_JSON#"$ROOT"/} missing: run scripts/firmware.sh footprint first"
    tmp=$(mktemp)
    {
        echo "{"
        echo "  \"board_stm32f767_eth\": { \"target\": \"$BOARD_TARGET\", \"toolchain\": \"$rustc_v ($ROUTE route, opt-level s, lto)\", \"flash_bytes\": $flash, \"static_ram_bytes\": $ram },"
        sed -e '1{/^{$/d}' -e '/^  "board_stm32f767_eth": /d' "$SIZES_JSON"
    } >"$tmp"
    mv "$tmp" "$SIZES_JSON"
    echo "board-eth: firmware-stm32f767 ($BOARD_TARGET, MQTT over embassy-net): flash $flash B, static RAM $ram B"
    echo "wrote ${SIZES_JSON#"$ROOT"/}; run it on a NUCLEO-F767ZI with cargo run --release (probe-rs)"
}

cmd_b3() {
    parse_cpu "$@"
    build_firmware "$TARGET" --bin b3 >&2
    local rustc_v
    if [ "$ROUTE" = debian ]; then rustc_v=$("$DEBIAN_RUSTC" --version); else rustc_v=$(rustc --version); fi
    echo "elf=$(fw_elf "$TARGET" b3)"
    echo "rustc=$rustc_v ($ROUTE route, opt-level s, lto)"
}

# size_of ELF: "FLASH RAM" in bytes.
size_of() {
    local tool
    tool=$(command -v llvm-size || command -v size) || die "no llvm-size or size"
    "$tool" -A "$1" | awk '
        $1 == ".vector_table" || $1 == ".text" || $1 == ".rodata" { flash += $2 }
        $1 == ".data" { flash += $2; ram += $2 }
        $1 == ".bss" || $1 == ".uninit" { ram += $2 }
        END { print flash, ram }'
}

cmd_footprint() {
    local target=thumbv7m-none-eabi base=16 out="$ROOT/data/baselines/firmware_size.json"
    local dev_flash dev_ram b_flash b_ram o_flash o_ram i_flash i_ram mq_flash mq_ram
    build_firmware "$target"
    read -r dev_flash dev_ram < <(size_of "$(fw_elf $target device)")
    read -r mq_flash mq_ram < <(size_of "$(fw_elf $target device-mqtt)")
    # The MQTT session buffers, as the device app declares them.
    local app="$ROOT/examples/device-app/src/lib.rs" mq_rx mq_tx
    mq_rx=$(sed -n 's/^pub const MQTT_RX: usize = \([0-9_]*\);/\1/p' "$app" | tr -d _)
    mq_tx=$(sed -n 's/^pub const MQTT_TX: usize = \([0-9_]*\);/\1/p' "$app" | tr -d _)
    [ -n "$mq_rx" ] && [ -n "$mq_tx" ] || die "MQTT_RX/MQTT_TX not found in ${app#"$ROOT"/}"
    local mq_budget=$((dev_ram + mq_rx + mq_tx + 2048))
    read -r b_flash b_ram < <(size_of "$(fw_elf $target footprint)")
    build_firmware "$target" --bin footprint --features double-out
    read -r o_flash o_ram < <(size_of "$(fw_elf $target footprint)")
    build_firmware "$target" --bin footprint --features double-in
    read -r i_flash i_ram < <(size_of "$(fw_elf $target footprint)")
    # Leave the base build in place.
    build_firmware "$target" --bin footprint
    local per_out per_in rustc_v
    per_out=$(awk -v a="$b_ram" -v b="$o_ram" -v n="$base" 'BEGIN { printf "%.1f", (b - a) / n }')
    per_in=$(awk -v a="$b_ram" -v b="$i_ram" -v n="$base" 'BEGIN { printf "%.1f", (b - a) / n }')
    if [ "$ROUTE" = debian ]; then rustc_v=$("$DEBIAN_RUSTC" --version); else rustc_v=$(rustc --version); fi
    local boards
    boards=$(board_lines)
    {
        echo "{"
        [ -z "$boards" ] || printf '%s\n' "$boards"
        cat <<JSON
  "bench": "firmware_size",
  "date": "$(date -u +%Y-%m-%d)",
  "toolchain": "$rustc_v ($ROUTE route, opt-level s, lto)",
  "target": "$target",
  "device": { "flash_bytes": $dev_flash, "static_ram_bytes": $dev_ram },
  "device_mqtt": {
    "flash_bytes": $mq_flash, "static_ram_bytes": $mq_ram,
    "mqtt_rx_bytes": $mq_rx, "mqtt_tx_bytes": $mq_tx,
    "target_static_ram_bytes": $mq_budget
  },
  "footprint_probe": {
    "routes_base": $base,
    "base": { "flash_bytes": $b_flash, "static_ram_bytes": $b_ram },
    "double_out": { "flash_bytes": $o_flash, "static_ram_bytes": $o_ram },
    "double_in": { "flash_bytes": $i_flash, "static_ram_bytes": $i_ram }
  },
  "ram_per_outbound_route_bytes": $per_out,
  "ram_per_inbound_route_bytes": $per_in,
  "target_ram_per_outbound_route_bytes": 32
}
JSON
    } >"$out"
    echo "device ($target): flash $dev_flash B, static RAM $dev_ram B"
    echo "device-mqtt ($target): flash $mq_flash B, static RAM $mq_ram B (MQTT RX $mq_rx + TX $mq_tx B included; target <= $mq_budget B: the framed device + buffers + 2 KiB)"
    echo "RAM per outbound route: $per_out B (target < 32); per inbound route: $per_in B"
    echo "wrote ${out#"$ROOT"/}"
    awk -v p="$per_out" 'BEGIN { exit !(p < 32) }' || die "RAM per outbound route $per_out B is not under 32 B"
    [ "$mq_ram" -le "$mq_budget" ] || die "device-mqtt static RAM $mq_ram B is over its target $mq_budget B"
}

# ------------------------------------------------------------------ fresh-crate

# extract_blocks OUT: for each `<!-- fresh-crate: KEY -->` line of the page,
# the fenced block right after it, written to OUT/files/PATH for a key
# `file PATH` and to OUT/KEY (spaces as dashes) for `setup ROUTE`,
# `run ROUTE` and `output`.
extract_blocks() {
    local out=$1 line key="" dest="" state=none lineno=0
    local doc=${FRESH_DOC#"$ROOT"/}
    mkdir -p "$out/files"
    while IFS= read -r line || [ -n "$line" ]; do
        lineno=$((lineno + 1))
        case $state in
            none)
                [[ $line =~ ^'<!-- fresh-crate: '(.+)' -->'$ ]] || continue
                key=${BASH_REMATCH[1]}
                case $key in
                    "file "*)
                        dest=${key#file }
                        case "/$dest/" in
                            //* | */../* | */./*) die "$doc:$lineno: '$dest' is not a plain relative path" ;;
                        esac
                        dest="$out/files/$dest" ;;
                    "setup rustup" | "setup debian" | "run rustup" | "run debian" | output)
                        dest="$out/${key// /-}" ;;
                    *) die "$doc:$lineno: unknown fresh-crate block '$key'" ;;
                esac
                [ ! -e "$dest" ] || die "$doc:$lineno: a second block marked '$key'"
                state=fence ;;
            fence)
                [[ $line == '```'* ]] || die "$doc:$lineno: the block marked '$key' must start on the next line"
                mkdir -p "$(dirname "$dest")"
                : >"$dest"
                state=body ;;
            body)
                if [ "$line" = '```' ]; then
                    state=none
                else
                    printf '%s\n' "$line" >>"$dest"
                fi ;;
        esac
    done <"$FRESH_DOC"
    [ "$state" = none ] || die "$doc: the block marked '$key' is not closed"
    for key in files/Cargo.toml files/.cargo/config.toml files/build.rs files/memory.x \
        files/src/main.rs setup-rustup setup-debian run-rustup run-debian output; do
        [ -s "$out/$key" ] || die "$doc: no block for '$key' (<!-- fresh-crate: ... --> markers)"
    done
}

# one_command FILE: the single command line of a documented command block.
one_command() {
    local lines
    lines=$(grep -v -e '^[[:space:]]*$' -e '^[[:space:]]*#' "$1" || true)
    [ -n "$lines" ] && [ "$(wc -l <<<"$lines")" -eq 1 ] ||
        die "${FRESH_DOC#"$ROOT"/}: the '$(basename "$1")' block must be one command line"
    printf '%s\n' "$lines"
}

# check_setup ROUTE BLOCKS CRATE: what the page's setup line for ROUTE
# installs is there (it is not run: select_toolchain installs the same).
check_setup() {
    local route=$1 blocks=$2 crate=$3 cmd args=() a
    cmd=$(one_command "$blocks/setup-$route")
    case $route in
        debian)
            [[ $cmd == "apt-get install "* ]] || die "setup debian: expected 'apt-get install ...', got: $cmd"
            read -ra args <<<"${cmd#apt-get install }"
            for a in "${args[@]}"; do
                [[ $a == -* ]] && continue
                dpkg-query -W -f='${Status}\n' "$a" 2>/dev/null | grep -q ' installed$' ||
                    die "setup debian: package '$a' (named on the page) is not installed"
            done ;;
        rustup)
            [[ $cmd == "rustup target add "* ]] || die "setup rustup: expected 'rustup target add ...', got: $cmd"
            read -ra args <<<"${cmd#rustup target add }"
            for a in "${args[@]}"; do
                # Outside the repository: the user's own default toolchain.
                (cd "$crate" && rustup target list --installed) | grep -qx "$a" ||
                    die "setup rustup: target '$a' is not installed for the toolchain active in the crate"
            done ;;
    esac
}

cmd_fresh_crate() {
    select_toolchain
    local start=$SECONDS tmp blocks crate cmd out name rc=0 want
    tmp=$(mktemp -d)
    # shellcheck disable=SC2064
    trap "rm -rf '$tmp'" EXIT
    # Outside the repository, or its Cargo.toml and rust-toolchain.toml apply.
    case "$tmp/" in "$ROOT"/*) die "mktemp -d gave $tmp, inside the repository (TMPDIR?)" ;; esac
    blocks="$tmp/blocks"
    extract_blocks "$blocks"
    # The page's layout: the crate next to a clone of this repository.
    grep -q '"\.\./aimdb/aimdb-core"' "$blocks/files/Cargo.toml" ||
        die "the page's Cargo.toml no longer depends on ../aimdb/aimdb-core (update fresh-crate's layout)"
    ln -s "$ROOT" "$tmp/aimdb"
    crate="$tmp/my-firmware"
    cp -r "$blocks/files" "$crate"
    check_setup "$ROUTE" "$blocks" "$crate"
    cmd=$(one_command "$blocks/run-$ROUTE")

    # The crate's path is new each run, so it and aimdb-core (reached
    # through it) build anew under new hashes: drop the previous run's
    # artifacts so the target dir does not grow. Dependencies stay.
    name=$(sed -n 's/^name = "\(.*\)"$/\1/p' "$crate/Cargo.toml" | head -n1)
    if [ -d "$FRESH_TARGET_DIR" ]; then
        local n u
        for n in "$name" aimdb-core; do
            u=${n//-/_}
            find "$FRESH_TARGET_DIR" -mindepth 3 -maxdepth 4 -path '*/release/*' \
                \( -name "$n-*" -o -name "$u-*" -o -name "lib$u-*" \) -prune -exec rm -rf {} +
        done
    fi

    # First the same command with `cargo build` for `cargo run`, under the
    # build's time limit; then the command as written, which finds it all
    # built and boots QEMU (the page's runner), under QEMU's. A firmware
    # that hangs then costs QEMU_TIMEOUT, not FRESH_TIMEOUT.
    local build_cmd=${cmd/cargo run /cargo build }
    [ "$build_cmd" != "$cmd" ] || die "run $ROUTE: expected a 'cargo run ...' command, got: $cmd"
    out="$tmp/run.log"
    log "fresh crate ${crate} ($ROUTE route): $build_cmd"
    set +e
    (cd "$crate" && CARGO_TARGET_DIR="$FRESH_TARGET_DIR" \
        timeout -k 10 "$FRESH_TIMEOUT" bash -c "$build_cmd") </dev/null
    rc=$?
    set -e
    [ "$rc" -ne 124 ] || die "fresh-crate: the build timed out after ${FRESH_TIMEOUT}s"
    [ "$rc" -eq 0 ] || die "fresh-crate: the page's command (as 'cargo build') exited with $rc"
    log "fresh crate ($ROUTE route, timeout ${QEMU_TIMEOUT}s): $cmd"
    set +e
    (cd "$crate" && CARGO_TARGET_DIR="$FRESH_TARGET_DIR" \
        timeout -k 10 "$QEMU_TIMEOUT" bash -c "$cmd") </dev/null 2>&1 | tee "$out"
    rc=${PIPESTATUS[0]}
    set -e
    [ "$rc" -ne 124 ] || die "fresh-crate: the run timed out after ${QEMU_TIMEOUT}s"
    [ "$rc" -eq 0 ] || die "fresh-crate: the page's command exited with $rc"
    while IFS= read -r want; do
        grep -Fxq -- "$want" "$out" || die "fresh-crate: no line '$want' (the page's expected output)"
    done <"$blocks/output"
    echo "fresh-crate: OK ($ROUTE route, $((SECONDS - start)) s): the page's crate builds outside the repository and runs under QEMU"
}

# ------------------------------------------------------------------ check-core

cmd_check_core() {
    select_toolchain
    local target flags
    # 1. The library alone, no default features, for both thumb targets.
    for target in "${THUMB_TARGETS[@]}"; do
        flags=${RUSTFLAGS:-}
        if [ "$target" = thumbv6m-none-eabi ]; then
            # No compare-and-swap on v6m: the library leaves the choice to
            # the final binary, so this check build (which has none) picks
            # single-core emulation itself; the firmware picks
            # portable-atomic's `critical-section` feature instead.
            flags="$flags --cfg portable_atomic_unsafe_assume_single_core"
        fi
        log "aimdb-core --lib --no-default-features for $target ($ROUTE route)"
        (cd "$ROOT" && RUSTFLAGS="$flags" "${CARGO_CMD[@]}" build -p aimdb-core --lib \
            --no-default-features --release --target "$target" \
            --target-dir "$CHECK_TARGET_DIR" "${BUILD_STD[@]}")
        # The connectors with MQTT (minimq, embassy-time), no std, no alloc.
        log "aimdb-connectors --lib --no-default-features --features mqtt for $target ($ROUTE route)"
        (cd "$ROOT" && RUSTFLAGS="$flags" "${CARGO_CMD[@]}" build -p aimdb-connectors --lib \
            --no-default-features --features mqtt --release --target "$target" \
            --target-dir "$CHECK_TARGET_DIR" "${BUILD_STD[@]}")
        # And with the embassy-net TcpConnect (smoltcp): about 12 s more
        # per target on top of the build above.
        log "aimdb-connectors --lib --no-default-features --features mqtt,embassy-net for $target ($ROUTE route)"
        (cd "$ROOT" && RUSTFLAGS="$flags" "${CARGO_CMD[@]}" build -p aimdb-connectors --lib \
            --no-default-features --features mqtt,embassy-net --release --target "$target" \
            --target-dir "$CHECK_TARGET_DIR" "${BUILD_STD[@]}")
    done

    # 2. No allocator: the v6m firmware links without a #[global_allocator].
    # rustc refuses to link a binary whose crate graph contains `alloc`
    # without one, so a successful link proves aimdb-core (default features
    # off) pulls in no `alloc`; on the Debian route the sysroot even has only
    # `core` (-Zbuild-std=core). The symbol scan is a second, direct look.
    build_firmware thumbv6m-none-eabi
    local elf nm_tool
    # The self-test and the MQTT device (minimq inside), both thumbv6m.
    nm_tool=$(command -v llvm-nm || command -v nm || true)
    for elf in "$(fw_elf thumbv6m-none-eabi)" "$(fw_elf thumbv6m-none-eabi device-mqtt)"; do
        if [ -n "$nm_tool" ]; then
            if "$nm_tool" "$elf" | grep -E '__rust_alloc|__rdl_alloc|__rg_alloc|__rust_alloc_error_handler|__rust_no_alloc_shim'; then
                die "allocator symbols in ${elf#"$ROOT"/}"
            fi
            echo "no allocator: ${elf#"$ROOT"/} links without alloc (no __rust_alloc* symbols)"
        else
            echo "no allocator: ${elf#"$ROOT"/} links without a #[global_allocator] (no nm to scan symbols)"
        fi
    done

    # 3. The dependency tree, resolved by the host cargo.
    local cargo_host
    cargo_host=$(host_cargo)
    log "cargo tree -p aimdb-core -e normal --no-default-features"
    (cd "$ROOT" && "$cargo_host" tree -p aimdb-core -e normal --no-default-features)
    # cargo tree shows crates, not whether a crate was built with std. So the
    # check resolves for the firmware target, drops proc-macros (they run on
    # the host and may use std), and lists each remaining crate with its
    # enabled features. It fails on
    #   - a crate that is std-only or host-only by nature (denylist), and
    #   - any enabled feature that switches on std or alloc in a no_std crate
    #     (`std`, `use-std`, `alloc`, `use-alloc`, `*-std`), e.g. serde/std or
    #     postcard/use-std unified in by a stray default feature.
    local flat bad
    flat=$(cd "$ROOT" && {
        "$cargo_host" tree -p aimdb-core -e normal,no-proc-macro \
            --no-default-features --target thumbv6m-none-eabi --prefix none -f '{p} [{f}]'
        "$cargo_host" tree -p aimdb-connectors -e normal,no-proc-macro \
            --no-default-features --features mqtt,embassy-net --target thumbv6m-none-eabi --prefix none -f '{p} [{f}]'
    } | sed 's/ (\*)$//' | sort -u)
    bad=$(awk '
        BEGIN { n = split("serde_json tokio mio socket2 libc std loom proptest futures-executor", d, " ");
                for (i = 1; i <= n; i++) deny[d[i]] = 1 }
        {
            name = $1; feats = $0; sub(/^[^[]*\[/, "", feats); sub(/\].*$/, "", feats)
            if (name in deny) { print "std-only crate: " $0; next }
            m = split(feats, f, ",")
            for (i = 1; i <= m; i++)
                if (f[i] ~ /^(std|use-std|alloc|use-alloc)$/ || f[i] ~ /-std$/) {
                    print "std/alloc feature \"" f[i] "\": " $0
                }
        }' <<<"$flat")
    if [ -n "$bad" ]; then
        printf '%s\n' "$bad" >&2
        die "aimdb-core --no-default-features pulls in std/alloc (see above)"
    fi
    echo "dependency tree (aimdb-core; aimdb-connectors with mqtt,embassy-net): $(wc -l <<<"$flat") crates for thumbv6m-none-eabi, none std-only, no std/alloc feature enabled"
    echo "check-core: OK ($ROUTE route)"
}

# ------------------------------------------------------------------ main

[ $# -ge 1 ] || { usage; exit 2; }
sub=$1; shift
case "$sub" in
    toolchain) [ $# -eq 0 ] || die "toolchain takes no arguments"; cmd_toolchain ;;
    check-core) [ $# -eq 0 ] || die "check-core takes no arguments"; cmd_check_core ;;
    smoke) cmd_smoke "$@" ;;
    device) [ $# -eq 0 ] || die "device takes no arguments"; cmd_device ;;
    footprint) [ $# -eq 0 ] || die "footprint takes no arguments"; cmd_footprint ;;
    b3) cmd_b3 "$@" ;;
    board) [ $# -eq 0 ] || die "board takes no arguments"; cmd_board ;;
    board-eth) [ $# -eq 0 ] || die "board-eth takes no arguments"; cmd_board_eth ;;
    smoke-fail) cmd_smoke_fail "$@" ;;
    fresh-crate) [ $# -eq 0 ] || die "fresh-crate takes no arguments"; cmd_fresh_crate ;;
    -h|--help|help) usage ;;
    *) usage; exit 2 ;;
esac
