//! Toolchain routes (see docs/FIRMWARE.md):
//!
//! - `rustup`: `rustup target list --installed` has thumbv6m-none-eabi and
//!   thumbv7m-none-eabi for the toolchain rust-toolchain.toml selects:
//!   plain `cargo`, precompiled `core`, rust-lld.
//! - `debian`: /usr/bin/rustc (Debian's rustc-web) with the library
//!   sources in /usr/lib/rustlib/src/rust/library: `core` is compiled with
//!   `-Zbuild-std=core` (RUSTC_BOOTSTRAP=1) and linked with ld.lld.
//!   Installed with apt-get when neither route is available.
//!
//! `FW_TOOLCHAIN=rustup|debian` forces a route.

use crate::{log, root, Result};
use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};

pub const THUMB_TARGETS: [&str; 2] = ["thumbv6m-none-eabi", "thumbv7m-none-eabi"];
const DEBIAN_PACKAGES: [&str; 5] = [
    "rustc-web",
    "cargo-web",
    "rust-web-src",
    "lld",
    "qemu-system-arm",
];
const DEBIAN_RUSTC: &str = "/usr/bin/rustc";
const DEBIAN_RUSTDOC: &str = "/usr/bin/rustdoc";
const DEBIAN_CARGO: &str = "/usr/bin/cargo";
const DEBIAN_LIBSRC: &str = "/usr/lib/rustlib/src/rust/library";
/// Debian's rustc has no rust-lld: every firmware target links with ld.lld.
const DEBIAN_ENV: [(&str, &str); 6] = [
    ("RUSTC", DEBIAN_RUSTC),
    ("RUSTDOC", DEBIAN_RUSTDOC),
    ("RUSTC_BOOTSTRAP", "1"),
    ("CARGO_TARGET_THUMBV6M_NONE_EABI_LINKER", "ld.lld"),
    ("CARGO_TARGET_THUMBV7M_NONE_EABI_LINKER", "ld.lld"),
    ("CARGO_TARGET_THUMBV7EM_NONE_EABIHF_LINKER", "ld.lld"),
];

/// A command for a child process. `cargo xtask` runs under rustup's
/// proxy, which sets RUSTUP_TOOLCHAIN; removed here, so that inside the
/// repository rust-toolchain.toml picks the toolchain (as for any cargo
/// command) and outside it the user's default does.
pub fn command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_remove("RUSTUP_TOOLCHAIN");
    cmd
}

/// Whether `program` is on PATH.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// Runs `cmd`; an error unless it exits 0.
pub fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let status = cmd.status().map_err(|e| format!("{what}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what}: {status}"))
    }
}

/// The stdout of `cmd`, trimmed; an error unless it exits 0.
pub fn output(cmd: &mut Command, what: &str) -> Result<String> {
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{what}: {}", out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim_end().to_string())
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Rustup,
    Debian,
}

impl Route {
    pub fn name(self) -> &'static str {
        match self {
            Route::Rustup => "rustup",
            Route::Debian => "debian",
        }
    }
}

/// The chosen route: how to run the firmware toolchain's cargo.
pub struct Toolchain {
    pub route: Route,
}

/// The targets rustup has for the toolchain the firmware builds use, the
/// one rust-toolchain.toml selects (asked from the repository's root).
pub fn rustup_targets() -> Option<Vec<String>> {
    let out = command("rustup")
        .args(["target", "list", "--installed"])
        .current_dir(root())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    })
}

fn rustup_has_targets() -> bool {
    rustup_targets().is_some_and(|installed| {
        THUMB_TARGETS
            .iter()
            .all(|t| installed.iter().any(|i| i == t))
    })
}

fn debian_toolchain_present() -> bool {
    let exe = |p: &str| Path::new(p).is_file();
    exe(DEBIAN_RUSTC) && exe(DEBIAN_CARGO) && Path::new(DEBIAN_LIBSRC).join("core").is_dir()
}

fn is_root() -> bool {
    command("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn apt_install(packages: &[&str]) -> Result<()> {
    log(&format!("apt-get install -y {}", packages.join(" ")));
    let apt = |args: &[&str]| -> Result<()> {
        let mut cmd = if is_root() {
            command("env")
        } else if on_path("sudo") {
            let mut c = command("sudo");
            c.arg("env");
            c
        } else {
            return Err(format!("need root to run: apt-get {}", args.join(" ")));
        };
        cmd.arg("DEBIAN_FRONTEND=noninteractive")
            .arg("apt-get")
            .args(args);
        run(&mut cmd, "apt-get")
    };
    apt(&["update"])?;
    let mut args = vec!["install", "-y"];
    args.extend_from_slice(packages);
    apt(&args)
}

impl Toolchain {
    /// Decides the route; installs what is missing (Debian packages only).
    pub fn select() -> Result<Toolchain> {
        let forced = std::env::var("FW_TOOLCHAIN").unwrap_or_default();
        let route = if forced == "rustup" || (forced.is_empty() && rustup_has_targets()) {
            if !rustup_has_targets() {
                return Err(format!(
                    "FW_TOOLCHAIN=rustup but rustup lacks {}",
                    THUMB_TARGETS.join(" ")
                ));
            }
            Route::Rustup
        } else {
            if !forced.is_empty() && forced != "debian" {
                return Err("FW_TOOLCHAIN must be rustup or debian".into());
            }
            if !debian_toolchain_present() {
                apt_install(&DEBIAN_PACKAGES)?;
                if !debian_toolchain_present() {
                    return Err("Debian toolchain still missing after apt-get install".into());
                }
            }
            Route::Debian
        };
        let mut missing = Vec::new();
        if !on_path("qemu-system-arm") {
            missing.push("qemu-system-arm");
        }
        if route == Route::Debian && !on_path("ld.lld") {
            missing.push("lld");
        }
        if !missing.is_empty() {
            apt_install(&missing)?;
        }
        Ok(Toolchain { route })
    }

    /// The firmware toolchain's cargo, its environment set.
    pub fn cargo(&self) -> Command {
        match self.route {
            Route::Rustup => command("cargo"),
            Route::Debian => {
                let mut cmd = command(DEBIAN_CARGO);
                cmd.envs(DEBIAN_ENV);
                cmd
            }
        }
    }

    /// Extra cargo arguments: only `core` (and compiler_builtins) on the
    /// Debian route; a firmware that needed `alloc` would not compile there.
    pub fn build_std(&self) -> &'static [&'static str] {
        match self.route {
            Route::Rustup => &[],
            Route::Debian => &["-Zbuild-std=core"],
        }
    }

    /// `rustc --version` of the route's compiler.
    pub fn rustc_version(&self) -> Result<String> {
        let rustc = match self.route {
            Route::Rustup => "rustc",
            Route::Debian => DEBIAN_RUSTC,
        };
        output(command(rustc).arg("--version").current_dir(root()), rustc)
    }

    /// The toolchain field of firmware_size.json and of b3's output.
    pub fn description(&self) -> Result<String> {
        Ok(format!(
            "{} ({} route, opt-level s, lto)",
            self.rustc_version()?,
            self.route.name()
        ))
    }

    /// `cargo xtask firmware toolchain`: what was picked, and versions.
    pub fn print(&self) -> Result<()> {
        let prefix = match self.route {
            Route::Rustup => "cargo".to_string(),
            Route::Debian => {
                let env: Vec<String> = DEBIAN_ENV.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!("env {} {DEBIAN_CARGO}", env.join(" "))
            }
        };
        println!("route: {}", self.route.name());
        println!("cargo: {prefix} {}", self.build_std().join(" "));
        println!("target dir: {}", root().join("target-fw").display());
        let cargo_version = output(self.cargo().arg("--version").current_dir(root()), "cargo")?;
        println!("{cargo_version}");
        println!("{}", self.rustc_version()?);
        if self.route == Route::Debian {
            println!("library sources: {DEBIAN_LIBSRC}");
            println!("{}", output(command("ld.lld").arg("--version"), "ld.lld")?);
        }
        let qemu = output(
            command("qemu-system-arm").arg("--version"),
            "qemu-system-arm",
        )?;
        println!("{}", qemu.lines().next().unwrap_or_default());
        Ok(())
    }

    /// An error unless the route can build for `target` (rustup needs the
    /// target added; the Debian route builds `core` for any).
    pub fn require_target(&self, target: &str) -> Result<()> {
        if self.route == Route::Rustup
            && !rustup_targets().is_some_and(|t| t.iter().any(|i| i == target))
        {
            return Err(format!(
                "rustup has no {target}: rustup target add {target} (or FW_TOOLCHAIN=debian)"
            ));
        }
        Ok(())
    }
}

/// The cargo that resolves dependency trees: the host one if on PATH,
/// else Debian's.
pub fn host_cargo() -> Command {
    if on_path("cargo") {
        command("cargo")
    } else {
        command(DEBIAN_CARGO)
    }
}
