# Named entry points. `.ci/run` calls `make ci`; the README's two commands
# are `make demo` and `make ci`.
SHELL := /bin/bash
CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

.PHONY: demo test fmt-check clippy loom nostd firmware bench-gate bench ci deps

## The project's main job: records crossing a transport both ways.
demo:
	$(CARGO) run --release -p quickstart

## Every host test, for each feature set of aimdb-core CI builds.
test:
	$(CARGO) test -p aimdb-core
	$(CARGO) test -p aimdb-core --features std,json
	$(CARGO) test --workspace

fmt-check:
	$(CARGO) fmt --all --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p aimdb-core --all-targets -- -D warnings
	$(CARGO) clippy -p aimdb-core --all-targets --features std,json,log -- -D warnings
	$(CARGO) clippy -p aimdb-core --lib --features defmt -- -D warnings

## Loom model of the outbound wake-up path (own target dir: other RUSTFLAGS).
loom:
	RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 $(CARGO) test -p aimdb-core \
	  --features std --test loom_outbound --release --target-dir target/loom

## aimdb-core without std/alloc for thumbv6m and thumbv7m.
nostd:
	bash scripts/firmware.sh check-core

## QEMU self-test firmware: passes on Cortex-M3 and M0, and a made-to-fail
## build must exit 1.
firmware:
	bash scripts/firmware.sh smoke-fail
	bash scripts/firmware.sh smoke --cpu cortex-m0
	bash scripts/firmware.sh smoke --cpu cortex-m3

## Deterministic gates: allocations per operation (b0) and instructions
## per operation under callgrind (b2; needs valgrind, `make deps`). Every
## bench must still compile.
bench-gate:
	$(CARGO) bench -p aimdb-bench --no-run
	$(CARGO) bench -p aimdb-bench --bench b0_alloc_connector
	$(CARGO) bench -p aimdb-bench --bench b2_instructions

## Timing benches (informational; run by hand on a quiet machine).
bench:
	$(CARGO) bench -p aimdb-bench --bench b1_outbound_wakeup
	$(CARGO) bench -p aimdb-bench --bench b1_inbound_dispatch

## Debian packages the tests need (idempotent).
deps:
	bash scripts/install-deps.sh

ci: deps fmt-check clippy test loom nostd firmware bench-gate
