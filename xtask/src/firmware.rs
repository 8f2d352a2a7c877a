//! `cargo xtask firmware`: the Cortex-M firmware builds. All firmware
//! artifacts go to `target-fw/` at the repository's root, never `target/`,
//! so the host toolchain and the firmware toolchain never share artifacts.

use crate::sizes::{self, Board, DeviceMqtt, FlashRam, Footprint, Probe, SizesFile};
use crate::toolchain::{self, command, host_cargo, Toolchain, THUMB_TARGETS};
use crate::{fresh, log, rel, root, Result};
use clap::{Subcommand, ValueEnum};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;

const FW_NAME: &str = "firmware-qemu";
const BOARD_TARGET: &str = "thumbv7em-none-eabihf";
/// The footprint probe's N (it also builds 2N of one kind).
const ROUTES_BASE: u64 = 16;
/// RAM per outbound route must stay under this.
const TARGET_RAM_PER_OUTBOUND_ROUTE: u64 = 32;

#[derive(Subcommand)]
pub enum Firmware {
    /// Pick (and if needed install) a toolchain; print its versions.
    Toolchain,
    /// aimdb-core without default features and aimdb-connectors with
    /// `mqtt` (and `mqtt,embassy-net`) on thumbv6m/thumbv7m: no allocator,
    /// no std-only dependency.
    CheckCore,
    /// Build the self-test firmware, run it under QEMU, exit with QEMU's
    /// exit code.
    Smoke(CpuArg),
    /// The same with feature `inject-failure`: passes only if QEMU exits
    /// with code 1 and a check printed FAIL.
    SmokeFail(CpuArg),
    /// Build the demo device (Cortex-M3); print its ELF path.
    Device,
    /// Flash/RAM of both devices, RAM per outbound and per inbound route;
    /// write data/baselines/firmware_size.json. Fails when a target is
    /// missed.
    Footprint,
    /// Build the nRF52840 board firmware (framed, then `--features mqtt`)
    /// for thumbv7em-none-eabihf (built only: no board here).
    Board,
    /// Build the NUCLEO-F767ZI firmware (MQTT over embassy-net) and record
    /// its flash/RAM in data/baselines/firmware_size.json.
    BoardEth,
    /// Build the b3_on_target firmware; print `elf=PATH` and
    /// `rustc=VERSION (ROUTE route, ...)` (aimdb-bench's b3_on_target runs
    /// it under QEMU).
    B3(CpuArg),
    /// The firmware crate of docs/FIRMWARE.md, built from the page's files
    /// and command in a temp dir outside the repository and run under QEMU;
    /// its documented output required.
    FreshCrate,
}

#[derive(clap::Args)]
pub struct CpuArg {
    /// The QEMU CPU, and so the target.
    #[arg(long, value_enum, default_value_t = Cpu::CortexM3)]
    cpu: Cpu,
}

#[derive(Clone, Copy, ValueEnum)]
enum Cpu {
    CortexM3,
    CortexM0,
}

impl Cpu {
    fn name(self) -> &'static str {
        match self {
            Cpu::CortexM3 => "cortex-m3",
            Cpu::CortexM0 => "cortex-m0",
        }
    }

    fn target(self) -> &'static str {
        match self {
            Cpu::CortexM3 => "thumbv7m-none-eabi",
            Cpu::CortexM0 => "thumbv6m-none-eabi",
        }
    }
}

/// Runs one subcommand; its exit code.
pub fn run(cmd: Firmware) -> Result<u8> {
    match cmd {
        Firmware::Toolchain => Toolchain::select()?.print().map(|()| 0),
        Firmware::CheckCore => check_core().map(|()| 0),
        Firmware::Smoke(a) => smoke(a.cpu),
        Firmware::SmokeFail(a) => smoke_fail(a.cpu).map(|()| 0),
        Firmware::Device => device().map(|()| 0),
        Firmware::Footprint => footprint().map(|()| 0),
        Firmware::Board => board().map(|()| 0),
        Firmware::BoardEth => board_eth().map(|()| 0),
        Firmware::B3(a) => b3(a.cpu).map(|()| 0),
        Firmware::FreshCrate => fresh::fresh_crate(&Toolchain::select()?).map(|()| 0),
    }
}

pub fn target_dir() -> PathBuf {
    root().join("target-fw")
}

pub fn sizes_json() -> PathBuf {
    root().join("data/baselines/firmware_size.json")
}

/// The ELF of one of the firmware binaries.
fn fw_elf(target: &str, bin: &str) -> PathBuf {
    target_dir().join(target).join("release").join(bin)
}

/// Builds the crate in `dir` for `target` with the route's cargo, inside
/// the crate so that only its own .cargo/config.toml and Cargo.lock apply
/// (each firmware crate is a workspace of its own). Cargo's output goes to
/// stderr; `no_broker` builds with the default broker address.
fn build_in(
    tc: &Toolchain,
    dir: &Path,
    target: &str,
    args: &[&str],
    no_broker: bool,
) -> Result<()> {
    let mut cmd = tc.cargo();
    cmd.current_dir(dir)
        .args(["build", "--release", "--target", target, "--target-dir"])
        .arg(target_dir())
        .args(tc.build_std())
        .args(args)
        .stdout(std::io::stderr());
    if no_broker {
        cmd.env_remove("AIMDB_BROKER");
    }
    toolchain::run(&mut cmd, &format!("cargo build in {}", rel(dir)))
}

/// Builds the QEMU firmware crate for `target`.
fn build_firmware(tc: &Toolchain, target: &str, args: &[&str]) -> Result<()> {
    log(&format!(
        "building {FW_NAME} for {target} ({} route) {}",
        tc.route.name(),
        args.join(" ")
    ));
    build_in(
        tc,
        &root().join("examples/firmware-qemu"),
        target,
        args,
        false,
    )
}

/// Runs the firmware under QEMU, its output echoed to stdout: QEMU's exit
/// code (124 on timeout) and the output.
fn run_qemu(cpu: Cpu, elf: &Path) -> Result<(i32, String)> {
    let timeout = std::env::var("QEMU_TIMEOUT").unwrap_or_else(|_| "60".into());
    log(&format!(
        "qemu-system-arm -cpu {} -machine lm3s6965evb ... -kernel {} (timeout {timeout}s)",
        cpu.name(),
        rel(elf)
    ));
    let mut child = command("timeout")
        .arg(&timeout)
        .args(["qemu-system-arm", "-cpu", cpu.name()])
        .args(["-machine", "lm3s6965evb", "-nographic", "-monitor", "none"])
        .args(["-semihosting-config", "enable=on,target=native", "-kernel"])
        .arg(elf)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("qemu-system-arm: {e}"))?;
    let mut out = String::new();
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines() {
            let line = line.map_err(|e| format!("QEMU's output: {e}"))?;
            println!("{line}");
            out.push_str(&line);
            out.push('\n');
        }
    }
    let status = child.wait().map_err(|e| format!("qemu-system-arm: {e}"))?;
    let rc = exit_code(status);
    if rc == 124 {
        log(&format!("QEMU timed out after {timeout}s"));
    }
    Ok((rc, out))
}

/// The exit code as a shell reports it (128 + N for signal N).
pub fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

fn smoke(cpu: Cpu) -> Result<u8> {
    let tc = Toolchain::select()?;
    let target = cpu.target();
    build_firmware(&tc, target, &[])?;
    let elf = fw_elf(target, "selftest");
    sizes::print(&elf, false)?;
    let (rc, _) = run_qemu(cpu, &elf)?;
    log(&format!(
        "smoke ({}, {target}): QEMU exit code {rc}",
        cpu.name()
    ));
    Ok(u8::try_from(rc).unwrap_or(1))
}

fn smoke_fail(cpu: Cpu) -> Result<()> {
    let tc = Toolchain::select()?;
    let target = cpu.target();
    build_firmware(&tc, target, &["--features", "inject-failure"])?;
    // The feature-built ELF replaces the normal one; the next `smoke`
    // rebuilds (only the firmware crate).
    let (rc, out) = run_qemu(cpu, &fw_elf(target, "selftest"))?;
    if rc != 1 {
        return Err(format!(
            "smoke-fail: expected QEMU exit code 1 from the injected failure, got {rc}"
        ));
    }
    if !out.lines().any(|l| l.starts_with("FAIL ")) {
        return Err(
            "smoke-fail: QEMU exited 1 but no check printed FAIL (panic or fault instead?)".into(),
        );
    }
    println!(
        "smoke-fail ({}): OK, the injected check failure ended QEMU with exit code 1",
        cpu.name()
    );
    Ok(())
}

/// The readings-durable devices (MQTT, framed): bins that need the
/// `backlog` feature (which also shrinks the device app's readings
/// `Ring`).
const BACKLOG_BUILD: [&str; 6] = [
    "--features",
    "backlog",
    "--bin",
    "device-mqtt-backlog",
    "--bin",
    "device-backlog",
];

fn device() -> Result<()> {
    let tc = Toolchain::select()?;
    build_firmware(&tc, "thumbv7m-none-eabi", &[])?;
    build_firmware(&tc, "thumbv7m-none-eabi", &BACKLOG_BUILD)?;
    let elf = fw_elf("thumbv7m-none-eabi", "device");
    sizes::print(&elf, true)?;
    println!("{}", elf.display());
    Ok(())
}

fn b3(cpu: Cpu) -> Result<()> {
    let tc = Toolchain::select()?;
    let bins = ["b3", "b3-tls", "b3-backlog"];
    build_firmware(&tc, cpu.target(), &bins.map(|b| ["--bin", b]).concat())?;
    for bin in bins {
        println!("elf={}", fw_elf(cpu.target(), bin).display());
    }
    println!("rustc={}", tc.description()?);
    Ok(())
}

fn board() -> Result<()> {
    let tc = Toolchain::select()?;
    tc.require_target(BOARD_TARGET)?;
    let dir = root().join("examples/firmware-nrf52840");
    let elf = target_dir()
        .join(BOARD_TARGET)
        .join("release/firmware-nrf52840");
    for features in [None, Some("mqtt")] {
        log(&format!(
            "building firmware-nrf52840 for {BOARD_TARGET} ({} route){}",
            tc.route.name(),
            features.map_or(String::new(), |f| format!(" --features {f}"))
        ));
        let args: Vec<&str> = features.map_or(vec![], |f| vec!["--features", f]);
        build_in(&tc, &dir, BOARD_TARGET, &args, false)?;
        sizes::print(&elf, false)?;
    }
    println!("board: firmware-nrf52840 builds (framed and mqtt); run it on a board with cargo run --release (probe-rs)");
    Ok(())
}

fn board_eth() -> Result<()> {
    let tc = Toolchain::select()?;
    tc.require_target(BOARD_TARGET)?;
    let elf = target_dir()
        .join(BOARD_TARGET)
        .join("release/firmware-stm32f767");
    let dir = root().join("examples/firmware-stm32f767");
    // A CA for the TLS build to hold (its size is a real CA's): made for
    // the build, no key kept.
    let ca = target_dir().join("board-eth-ca.der");
    std::fs::write(&ca, throwaway_ca()?).map_err(|e| format!("{}: {e}", rel(&ca)))?;
    let ca = ca.display().to_string();
    let mut built = Vec::new();
    for tls in [false, true] {
        log(&format!(
            "building firmware-stm32f767 for {BOARD_TARGET} ({} route){}",
            tc.route.name(),
            if tls { " --features tls" } else { "" }
        ));
        // The default broker address: the recorded size does not depend on
        // whatever AIMDB_BROKER the caller's environment holds.
        let mut cmd = tc.cargo();
        cmd.current_dir(&dir)
            .args([
                "build",
                "--release",
                "--target",
                BOARD_TARGET,
                "--target-dir",
            ])
            .arg(target_dir())
            .args(tc.build_std())
            .env_remove("AIMDB_BROKER")
            .stdout(std::io::stderr());
        if tls {
            cmd.args(["--features", "tls"])
                .env("AIMDB_BROKER_CA", &ca)
                .env("AIMDB_BROKER_NAME", "broker.example");
        }
        toolchain::run(&mut cmd, &format!("cargo build in {}", rel(&dir)))?;
        sizes::print(&elf, false)?;
        let s = sizes::sizes(&elf)?;
        built.push(Board {
            target: BOARD_TARGET.into(),
            toolchain: tc.description()?,
            flash_bytes: s.flash,
            static_ram_bytes: s.ram,
        });
    }
    let path = sizes_json();
    let Some(mut file) = SizesFile::load(&path)? else {
        return Err(format!(
            "{} missing: run cargo xtask firmware footprint first",
            rel(&path)
        ));
    };
    let tls = built.pop();
    let plain = built.pop();
    for (what, b) in [
        ("MQTT over embassy-net", &plain),
        ("the same over TLS 1.3", &tls),
    ] {
        if let Some(b) = b {
            println!(
                "board-eth: firmware-stm32f767 ({BOARD_TARGET}, {what}): flash {} B, static RAM {} B",
                b.flash_bytes, b.static_ram_bytes
            );
        }
    }
    file.board_stm32f767_eth = plain;
    file.board_stm32f767_eth_tls = tls;
    file.save(&path)?;
    println!(
        "wrote {}; run it on a NUCLEO-F767ZI with cargo run --release (probe-rs)",
        rel(&path)
    );
    Ok(())
}

/// A self-signed ECDSA P-256 CA certificate in DER, its key dropped.
fn throwaway_ca() -> Result<Vec<u8>> {
    let e = |e: rcgen::Error| format!("making a CA: {e}");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(e)?;
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "aimdb board CA");
    let key = rcgen::KeyPair::generate().map_err(e)?;
    Ok(params.self_signed(&key).map_err(e)?.der().to_vec())
}

/// The value of `pub const NAME: usize = N;` in `source`.
fn usize_const(source: &str, name: &str) -> Option<u64> {
    let prefix = format!("pub const {name}: usize = ");
    source.lines().find_map(|l| {
        l.strip_prefix(&prefix)?
            .strip_suffix(';')?
            .replace('_', "")
            .parse()
            .ok()
    })
}

/// `(b - a) / n` to one decimal, as the JSON records it.
fn per_route(a: u64, b: u64, n: u64) -> f64 {
    let v = (b as f64 - a as f64) / n as f64;
    format!("{v:.1}").parse().unwrap_or(v)
}

fn footprint() -> Result<()> {
    let tc = Toolchain::select()?;
    let target = "thumbv7m-none-eabi";
    build_firmware(&tc, target, &[])?;
    let dev = sizes::sizes(&fw_elf(target, "device"))?;
    let mq = sizes::sizes(&fw_elf(target, "device-mqtt"))?;
    let mq_tls = sizes::sizes(&fw_elf(target, "device-mqtt-tls"))?;
    build_firmware(&tc, target, &BACKLOG_BUILD)?;
    let mq_backlog = sizes::sizes(&fw_elf(target, "device-mqtt-backlog"))?;
    // The MQTT session buffers, as the device app declares them.
    let app = root().join("examples/device-app/src/lib.rs");
    let source = std::fs::read_to_string(&app).map_err(|e| format!("{}: {e}", rel(&app)))?;
    let (Some(mq_rx), Some(mq_tx)) = (
        usize_const(&source, "MQTT_RX"),
        usize_const(&source, "MQTT_TX"),
    ) else {
        return Err(format!("MQTT_RX/MQTT_TX not found in {}", rel(&app)));
    };
    let mq_budget = dev.ram + mq_rx + mq_tx + 2048;
    let probe = fw_elf(target, "footprint");
    let base = sizes::sizes(&probe)?;
    build_firmware(
        &tc,
        target,
        &["--bin", "footprint", "--features", "double-out"],
    )?;
    let out = sizes::sizes(&probe)?;
    build_firmware(
        &tc,
        target,
        &["--bin", "footprint", "--features", "double-in"],
    )?;
    let inb = sizes::sizes(&probe)?;
    // Leave the base build in place.
    build_firmware(&tc, target, &["--bin", "footprint"])?;
    let per_out = per_route(base.ram, out.ram, ROUTES_BASE);
    let per_in = per_route(base.ram, inb.ram, ROUTES_BASE);

    let path = sizes_json();
    let old = SizesFile::load(&path)?;
    let (board, board_tls) = old.map_or((None, None), |f| {
        (f.board_stm32f767_eth, f.board_stm32f767_eth_tls)
    });
    let file = SizesFile {
        board_stm32f767_eth: board,
        board_stm32f767_eth_tls: board_tls,
        footprint: Some(Footprint {
            bench: "firmware_size".into(),
            date: sizes::today_utc(),
            toolchain: tc.description()?,
            target: target.into(),
            device: FlashRam::from(&dev),
            device_mqtt: DeviceMqtt {
                flash_bytes: mq.flash,
                static_ram_bytes: mq.ram,
                mqtt_rx_bytes: mq_rx,
                mqtt_tx_bytes: mq_tx,
                target_static_ram_bytes: mq_budget,
            },
            device_mqtt_tls: Some(FlashRam::from(&mq_tls)),
            device_mqtt_backlog: Some(FlashRam::from(&mq_backlog)),
            footprint_probe: Probe {
                routes_base: ROUTES_BASE,
                base: FlashRam::from(&base),
                double_out: FlashRam::from(&out),
                double_in: FlashRam::from(&inb),
            },
            ram_per_outbound_route_bytes: per_out,
            ram_per_inbound_route_bytes: per_in,
            target_ram_per_outbound_route_bytes: TARGET_RAM_PER_OUTBOUND_ROUTE,
        }),
    };
    file.save(&path)?;
    println!(
        "device ({target}): flash {} B, static RAM {} B",
        dev.flash, dev.ram
    );
    println!(
        "device-mqtt ({target}): flash {} B, static RAM {} B (MQTT RX {mq_rx} + TX {mq_tx} B included; target <= {mq_budget} B: the framed device + buffers + 2 KiB)",
        mq.flash, mq.ram
    );
    println!(
        "device-mqtt-tls ({target}): flash {} B, static RAM {} B (TLS buffers 11,282 B included)",
        mq_tls.flash, mq_tls.ram
    );
    println!(
        "device-mqtt-backlog ({target}): flash {} B, static RAM {} B (readings durable on flash, a readings Ring of 4)",
        mq_backlog.flash, mq_backlog.ram
    );
    println!(
        "RAM per outbound route: {per_out:.1} B (target < {TARGET_RAM_PER_OUTBOUND_ROUTE}); per inbound route: {per_in:.1} B"
    );
    println!("wrote {}", rel(&path));
    if per_out >= TARGET_RAM_PER_OUTBOUND_ROUTE as f64 {
        return Err(format!(
            "RAM per outbound route {per_out:.1} B is not under {TARGET_RAM_PER_OUTBOUND_ROUTE} B"
        ));
    }
    if mq.ram > mq_budget {
        return Err(format!(
            "device-mqtt static RAM {} B is over its target {mq_budget} B",
            mq.ram
        ));
    }
    Ok(())
}

/// Crates that are std-only or host-only by nature.
const STD_ONLY: [&str; 9] = [
    "serde_json",
    "tokio",
    "mio",
    "socket2",
    "libc",
    "std",
    "loom",
    "proptest",
    "futures-executor",
];

/// A feature that switches on std or alloc in a no_std crate.
fn std_feature(f: &str) -> bool {
    matches!(f, "std" | "use-std" | "alloc" | "use-alloc") || f.ends_with("-std")
}

fn check_core() -> Result<()> {
    let tc = Toolchain::select()?;
    let route = tc.route.name();
    // check-core builds with other RUSTFLAGS than the firmware; cargo does
    // not key artifacts by RUSTFLAGS, so a shared directory would rebuild
    // `core` each time one alternates between the two.
    let check_dir = target_dir().join("check-core");
    // 1. The libraries alone, no default features, for both thumb targets.
    for target in THUMB_TARGETS {
        let mut flags = std::env::var("RUSTFLAGS").unwrap_or_default();
        if target == "thumbv6m-none-eabi" {
            // No compare-and-swap on v6m: the library leaves the choice to
            // the final binary, so this check build (which has none) picks
            // single-core emulation itself; the firmware picks
            // portable-atomic's `critical-section` feature instead.
            flags.push_str(" --cfg portable_atomic_unsafe_assume_single_core");
        }
        let builds: [(&str, &[&str]); 3] = [
            ("aimdb-core", &[]),
            // The connectors with MQTT (embassy-time), no std, no alloc.
            ("aimdb-connectors", &["--features", "mqtt"]),
            // And with the embassy-net TcpConnect (smoltcp), device TLS
            // and the durable backlog (sequential-storage).
            (
                "aimdb-connectors",
                &["--features", "mqtt,embassy-net,embedded-tls,backlog"],
            ),
        ];
        for (package, features) in builds {
            log(&format!(
                "{package} --lib --no-default-features {}for {target} ({route} route)",
                features.iter().map(|a| format!("{a} ")).collect::<String>()
            ));
            let mut cmd = tc.cargo();
            cmd.current_dir(root())
                .env("RUSTFLAGS", &flags)
                .args(["build", "-p", package, "--lib", "--no-default-features"])
                .args(features)
                .args(["--release", "--target", target, "--target-dir"])
                .arg(&check_dir)
                .args(tc.build_std());
            toolchain::run(&mut cmd, &format!("cargo build -p {package} for {target}"))?;
        }
    }

    // 2. No allocator: the v6m firmware links without a #[global_allocator].
    // rustc refuses to link a binary whose crate graph contains `alloc`
    // without one, so a successful link proves aimdb-core (default features
    // off) pulls in no `alloc`; on the Debian route the sysroot even has
    // only `core` (-Zbuild-std=core). The symbol scan is a second, direct
    // look: the self-test and the MQTT device, plain and over TLS.
    build_firmware(&tc, "thumbv6m-none-eabi", &[])?;
    for bin in ["selftest", "device-mqtt", "device-mqtt-tls"] {
        let elf = fw_elf("thumbv6m-none-eabi", bin);
        let found = sizes::allocator_symbols(&elf)?;
        if !found.is_empty() {
            for s in &found {
                println!("{s}");
            }
            return Err(format!("allocator symbols in {}", rel(&elf)));
        }
        println!(
            "no allocator: {} links without alloc (no __rust_alloc* symbols)",
            rel(&elf)
        );
    }

    // 3. The dependency trees, resolved by the host cargo for the
    // firmware target.
    log("cargo tree -p aimdb-core -e normal --no-default-features");
    toolchain::run(
        host_cargo().current_dir(root()).args([
            "tree",
            "-p",
            "aimdb-core",
            "-e",
            "normal",
            "--no-default-features",
        ]),
        "cargo tree",
    )?;
    let flat = crate::audit::dependencies()?;
    let mut bad = Vec::new();
    for (name, version, features) in &flat {
        let line = format!("{name} v{version} [{}]", features.join(","));
        if STD_ONLY.contains(&name.as_str()) {
            bad.push(format!("std-only crate: {line}"));
            continue;
        }
        for f in features.iter().filter(|f| std_feature(f)) {
            bad.push(format!("std/alloc feature \"{f}\": {line}"));
        }
    }
    if !bad.is_empty() {
        for b in &bad {
            eprintln!("{b}");
        }
        return Err("aimdb-core --no-default-features pulls in std/alloc (see above)".into());
    }
    println!(
        "dependency tree (aimdb-core; aimdb-connectors with mqtt,embassy-net): {} crates for thumbv6m-none-eabi, none std-only, no std/alloc feature enabled",
        flat.len()
    );
    println!("check-core: OK ({route} route)");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consts_and_rounding() {
        let src = "pub const MQTT_RX: usize = 256;\npub const MQTT_TX: usize = 1_024;\n";
        assert_eq!(usize_const(src, "MQTT_RX"), Some(256));
        assert_eq!(usize_const(src, "MQTT_TX"), Some(1024));
        assert_eq!(usize_const(src, "MQTT_XX"), None);
        assert_eq!(per_route(6636, 7084, 16), 28.0);
        assert_eq!(per_route(0, 1, 16), 0.1);
        // printf's %.1f: an exact tie rounds to even.
        assert_eq!(per_route(0, 4, 16), 0.2);
        assert_eq!(per_route(0, 12, 16), 0.8);
        assert!(std_feature("std") && std_feature("serde-std") && !std_feature("stdx"));
    }
}
