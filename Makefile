# Named entry points. `.ci/run` calls `make ci`; the README's two commands
# are `make demo` and `make ci`.
SHELL := /bin/bash
CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

.PHONY: demo e2e test quickstart fmt-check doc clippy loom nostd firmware footprint b3 bench-gate bench ci deps soak publish-check

DEVICE_ELF = target-fw/thumbv7m-none-eabi/release/device
DEVICE_MQTT_ELF = target-fw/thumbv7m-none-eabi/release/device-mqtt
DEVICE_MQTT_TLS_ELF = target-fw/thumbv7m-none-eabi/release/device-mqtt-tls
DEVICE_MQTT_BACKLOG_ELF = target-fw/thumbv7m-none-eabi/release/device-mqtt-backlog
DEVICE_BACKLOG_ELF = target-fw/thumbv7m-none-eabi/release/device-backlog

## The project's main job: the device firmware under QEMU, its UART bridged
## by the tokio gateway to an MQTT broker (a mosquitto the gateway starts);
## an operator client sends three commands and checks that readings arrive
## exactly once; then `aimdb ls` and `aimdb watch` look inside the device
## through the gateway. Installs the firmware toolchain, QEMU and mosquitto when
## missing.
demo:
	bash scripts/install-deps.sh >/dev/null
	$(CARGO) xtask firmware device >/dev/null
	$(CARGO) build --release -p aimdb-cli
	$(CARGO) run --release -p gateway -- --qemu $(DEVICE_ELF) --demo --seconds 5

## The same, as a test: longer, and at least 150 readings exactly once;
## then the MQTT device (the MQTT connector in the firmware) straight to a
## mosquitto, checked with mosquitto_sub/mosquitto_pub across a broker
## restart (examples/gateway/src/bin/mqtt-device-e2e.rs), and the same
## with the device speaking TLS 1.3 to the broker's TLS listener (its
## certificate checked in the firmware); then the MQTT device with its
## readings durable on flash through a 40 s broker outage with a device
## reset half-way, every reading once and in order
## (src/bin/outage-e2e.rs), and the same outage behind the gateway, the
## framed device's readings durable on its flash until the gateway has
## them in its backlog file, the gateway (and its QEMU) SIGKILLed half-way;
## then presence
## through the gateway: the device frozen, killed and restarted, the
## gateway killed, watched with mosquitto_sub; and a killed gateway's own
## QEMU and mosquitto ending with it (src/bin/presence-e2e.rs).
e2e:
	$(CARGO) xtask firmware device >/dev/null
	$(CARGO) build --release -p aimdb-cli
	$(CARGO) run --release -p gateway -- --qemu $(DEVICE_ELF) --demo --seconds 8 --min-readings 150
	$(CARGO) run --release -p gateway --bin mqtt-device-e2e -- --qemu $(DEVICE_MQTT_ELF)
	$(CARGO) run --release -p gateway --bin mqtt-device-e2e -- --qemu $(DEVICE_MQTT_TLS_ELF) --tls
	$(CARGO) run --release -p gateway --bin outage-e2e -- --qemu $(DEVICE_MQTT_BACKLOG_ELF)
	$(CARGO) build --release -p gateway --bin gateway
	$(CARGO) run --release -p gateway --bin outage-e2e -- --gateway target/release/gateway --qemu $(DEVICE_BACKLOG_ELF)
	$(CARGO) run --release -p gateway --bin presence-e2e -- --qemu $(DEVICE_ELF)

## Every host test, for each feature set of aimdb-core CI builds, and the
## quickstart example (it asserts its own outcome).
test:
	$(CARGO) test -p aimdb-core
	$(CARGO) test -p aimdb-core --features std,json
	$(CARGO) test --workspace
	$(CARGO) test -p aimdb-connectors --all-features
	$(MAKE) quickstart

## The smallest example: a device and a host in one process on tokio's
## multi-thread runtime; exits non-zero unless the command round-trips.
quickstart:
	$(CARGO) run -q -p quickstart

fmt-check:
	$(CARGO) fmt --all --check

## Rustdoc for every crate with every feature, warnings as errors (broken
## intra-doc links, links to private items).
doc:
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --all-features --no-deps

## Packaging of the two library crates verified (built from the packaged
## sources), nothing uploaded. --allow-dirty: CI's own outputs (fuzz
## corpora, target dirs) are not part of a package either way. The
## connectors are verified against the packaged core, which cargo treats
## as a registry crate: unpacked once under CARGO_HOME (in a dir named
## after the temporary overlay registry, starting with a dash; crates.io's
## are named after the index) and built once per target dir, never checked
## for changes. Both copies go first, or a second run verifies the
## connectors against an old core.
PUBLISH_TARGET := target/publish-check
publish-check:
	rm -rf "$${CARGO_HOME:-$$HOME/.cargo}"/registry/src/-*/aimdb-core-* $(PUBLISH_TARGET)
	$(CARGO) publish --dry-run --allow-dirty --target-dir $(PUBLISH_TARGET) -p aimdb-core -p aimdb-connectors

## The workspace with default and with all features; then every feature
## of the two library crates on its own (cargo-hack, installed here when
## missing; a debug build of the tool, which builds in a third of the
## time and runs as fast for this). `default` is empty in both crates
## (the no-default run covers it) and all features are the workspace's
## second run: aimdb-core's tests too (but `defmt`, which needs a firmware's
## logger), both libraries' code alone.
clippy:
	@command -v cargo-hack >/dev/null || $(CARGO) install cargo-hack --locked --version 0.6.46 --debug
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy --workspace --all-targets --all-features -- -D warnings
	$(CARGO) hack clippy -p aimdb-core --each-feature --exclude-features default,defmt \
	  --all-targets -- -D warnings
	$(CARGO) clippy -p aimdb-core --lib --features defmt -- -D warnings
	$(CARGO) hack clippy -p aimdb-connectors --each-feature --exclude-features default \
	  --exclude-all-features --lib -- -D warnings

## Loom model of the outbound wake-up path, and clippy on the loom build
## (own target dir: other RUSTFLAGS).
loom:
	RUSTFLAGS="--cfg aimdb_loom" LOOM_MAX_PREEMPTIONS=3 $(CARGO) test -p aimdb-core \
	  --features std --lib --release --target-dir target/loom outbound::loom_model
	RUSTFLAGS="--cfg aimdb_loom" $(CARGO) clippy -p aimdb-core --features std \
	  --all-targets --target-dir target/loom -- -D warnings

## aimdb-core without std/alloc, and aimdb-connectors with `mqtt`, for
## thumbv6m and thumbv7m.
nostd:
	$(CARGO) xtask firmware check-core

## QEMU self-test firmware: passes on Cortex-M3 and M0, and a made-to-fail
## build must exit 1; then the firmware crate of docs/FIRMWARE.md, built
## from the page's own files and command in a temp dir outside the
## repository and run under QEMU (so the page cannot rot); then the
## footprint, the board firmware (nRF52840; NUCLEO-F767ZI with MQTT over
## embassy-net, its sizes recorded; built only: no board here) and the
## on-target cost gate.
firmware:
	$(CARGO) xtask firmware smoke-fail
	$(CARGO) xtask firmware smoke --cpu cortex-m0
	$(CARGO) xtask firmware smoke --cpu cortex-m3
	$(CARGO) xtask firmware fresh-crate
	$(CARGO) xtask firmware footprint
	$(CARGO) xtask firmware board
	$(CARGO) xtask firmware board-eth
	$(MAKE) b3

## A gate never skips: a bench whose tool (valgrind, QEMU, the Cortex-M
## toolchain) is missing fails here, where a plain `cargo bench` would say
## it skipped it and go on (aimdb-bench/src/tools.rs).
b3 bench-gate: export AIMDB_BENCH_REQUIRE = 1

## Instructions per operation on the Cortex-M3 and M0 under QEMU with
## instruction counting (deterministic): two runs must agree to the
## instruction and no row may be 2 % over data/baselines/b3_on_target.json.
b3:
	$(CARGO) bench -p aimdb-bench --bench b3_on_target

## Flash and static RAM of the device, RAM per route (N vs 2N routes):
## data/baselines/firmware_size.json.
footprint:
	$(CARGO) xtask firmware footprint

## Deterministic gates: allocations per operation (b0), instructions
## per operation under callgrind (b2: the hot paths, and b1's cells with
## tokio; needs valgrind, `make deps`) and what a durable backlog costs
## its flash (b5: bytes written and erases per message, messages per
## KiB). Every bench must still compile.
bench-gate:
	$(CARGO) bench -p aimdb-bench --no-run
	$(CARGO) bench -p aimdb-bench --bench b0_alloc_connector
	$(CARGO) bench -p aimdb-bench --bench b2_instructions
	$(CARGO) bench -p aimdb-bench --bench b2_cells
	$(CARGO) bench -p aimdb-bench --bench b5_backlog

## Timing benches (informational; run by hand on a quiet machine). b4
## starts a mosquitto on loopback (`make deps` installs it).
bench:
	$(CARGO) bench -p aimdb-bench --bench b1_outbound_wakeup
	$(CARGO) bench -p aimdb-bench --bench b1_inbound_dispatch
	$(CARGO) bench -p aimdb-bench --bench b4_mqtt

## Soak (not in `ci`): 1,000,000 messages over 256 routes, framed over TCP
## with the fault transport in the path, then MQTT through a mosquitto
## restarted half-way; fails past 10 minutes. Prints duration and RSS. Then
## 1,000,000 QoS 1 messages between two connectors with persistent
## sessions through a mosquitto with persistence, restarted gracefully
## (0 lost) and killed (loss reported, bounded); `make test` runs 20,000.
soak:
	$(CARGO) test --release -p aimdb-connectors --all-features --test soak -- --ignored --nocapture
	MQTT_PERSIST_TOTAL=1000000 $(CARGO) test --release -p aimdb-connectors --all-features \
	  --test mqtt_persistence -- --nocapture --test-threads 1

## libFuzzer targets in fuzz/ (nightly; installs cargo-fuzz when missing):
## each for FUZZ_SECONDS from the committed corpus; non-zero on a finding.
.PHONY: fuzz fuzz-smoke
fuzz:
	bash scripts/fuzz.sh $(or $(FUZZ_SECONDS),120)

## The CI smoke: every target for 20 s (with the cargo-fuzz install and a
## clean build).
fuzz-smoke:
	bash scripts/fuzz.sh 20

## The device app's MQTT connector over a real TCP/IP stack and TLS 1.3:
## embassy-net on a Linux TAP interface and the device TLS layer
## (embedded-tls, the broker's certificate checked against a CA made for
## the run with openssl), in a network namespace the test creates and
## removes, against a mosquitto it starts there; readings and a command
## round trip checked with mosquitto_sub/mosquitto_pub; 60 s at most
## (examples/device-tap). Needs root.
.PHONY: tap
tap:
	bash scripts/tap.sh

## Debian packages the tests need (idempotent).
deps:
	bash scripts/install-deps.sh

CI_STEPS = deps fmt-check clippy doc publish-check test loom nostd firmware e2e tap demo bench-gate fuzz-smoke

## Every step above, in this order; at the end, each step's wall time (so
## a change can say what it costs CI). The firmware is built on the Debian
## route, the compiler data/baselines/ were recorded with: instruction
## counts and sizes depend on the compiler, and a machine whose rustup has
## some thumb targets would otherwise pick another one.
ci: export FW_TOOLCHAIN ?= debian
ci:
	@mkdir -p target && rm -f target/ci-times.txt
	@for t in $(CI_STEPS); do \
	  s=$$(date +%s); $(MAKE) --no-print-directory $$t || exit 1; \
	  echo "$$t $$(( $$(date +%s) - s )) s" >> target/ci-times.txt; \
	done
	@echo "==> make ci: wall time per step"; cat target/ci-times.txt
