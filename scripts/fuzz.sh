#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for SECONDS each (default 30),
# starting from the committed corpus, and prints per target the executions
# and the findings. Exits non-zero on any finding, or if the tools are
# missing and cannot be installed.
#
#   bash scripts/fuzz.sh [SECONDS] [TARGET...]
#
# FUZZ_ARGS adds libFuzzer flags (e.g. FUZZ_ARGS=-dict=...); FUZZ_TOOLCHAIN
# picks the toolchain (default `nightly`).
#
# Needs a nightly toolchain (libFuzzer's sanitizer flags); installs
# cargo-fuzz with `cargo install --locked` when it is missing. New inputs
# go to a scratch directory, not to fuzz/corpus (the committed seed set
# stays small); crashes land in fuzz/artifacts/<target>/.
set -euo pipefail

secs=${1:-30}
shift || true
cd "$(dirname "$0")/../fuzz"
toolchain=${FUZZ_TOOLCHAIN:-nightly}

# Fail loudly: a skipped fuzz run must not look like a passing one.
if ! rustup toolchain list | grep -q "^${toolchain}"; then
    echo "error: no '${toolchain}' toolchain (rustup toolchain list:" >&2
    rustup toolchain list >&2
    echo "); install it with: rustup toolchain install ${toolchain} --profile minimal" >&2
    exit 2
fi
if ! cargo "+${toolchain}" fuzz --version >/dev/null 2>&1; then
    echo "==> installing cargo-fuzz"
    # A debug build of the tool: it only drives cargo, and builds faster.
    cargo install cargo-fuzz --locked --debug
fi
echo "==> $(cargo "+${toolchain}" --version); $(cargo "+${toolchain}" fuzz --version)"

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo "+${toolchain}" fuzz list)
fi

# One build for all targets (they share every dependency).
cargo "+${toolchain}" fuzz build

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
summary=()
failed=0
for t in "${targets[@]}"; do
    mkdir -p "$scratch/$t" "corpus/$t"
    log="$scratch/$t.log"
    touch "$scratch/$t.start"
    echo "==> $t: ${secs} s"
    set +e
    # The first corpus directory receives new inputs: the scratch one.
    cargo "+${toolchain}" fuzz run "$t" "$scratch/$t" "corpus/$t" -- \
        -max_total_time="$secs" -timeout=10 -print_final_stats=1 ${FUZZ_ARGS:-} >"$log" 2>&1
    rc=$?
    set -e
    execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$' | tail -1 || true)
    if [ -z "$execs" ]; then
        execs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#' || true)
    fi
    new=$(find "artifacts/$t" -type f -newer "$scratch/$t.start" 2>/dev/null | wc -l)
    if [ "$rc" -ne 0 ] || [ "$new" -gt 0 ]; then
        failed=1
        echo "---- $t: FINDING (exit $rc) ----"
        grep -E -A12 'panicked|ERROR: libFuzzer|SUMMARY' "$log" | head -60 || tail -40 "$log"
        find "artifacts/$t" -type f -newer "$scratch/$t.start" 2>/dev/null | sed 's/^/artifact: fuzz\//'
        summary+=("$(printf '%-10s %12s execs in %4ss  FINDING (exit %s, %s new artifact(s))' "$t" "${execs:-?}" "$secs" "$rc" "$new")")
    else
        summary+=("$(printf '%-10s %12s execs in %4ss  no findings' "$t" "${execs:-?}" "$secs")")
    fi
done

echo "==> fuzz summary"
printf '%s\n' "${summary[@]}"
exit "$failed"
