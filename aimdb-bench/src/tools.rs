//! The tools a bench binary needs besides Rust, and what it does without
//! them, so that `cargo bench -p aimdb-bench` works on a machine that has
//! only Rust.
//!
//! A bench calls [`require`] before it measures anything. When every tool
//! is there it runs. When one is missing it prints
//! `BENCH: skipped: TOOL not found (install: make deps)` and exits 0, so
//! the benches after it still run, unless a missing tool must fail: `CI`
//! or `AIMDB_BENCH_REQUIRE` set to a true value (anything but empty, `0`,
//! `false`, `no` or `off`). Then it prints why on stderr and exits
//! non-zero, so a gate is never skipped silently. `make bench-gate` and
//! `make b3` set `AIMDB_BENCH_REQUIRE=1`.
//!
//! Only presence is checked, and cheaply: a program on `PATH`, or the
//! Cortex-M toolchain route `cargo xtask firmware` would pick. A tool that
//! is there but broken still fails, in the bench itself.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// How to install every tool below (`scripts/install-deps.sh`).
pub const INSTALL: &str = "make deps";

/// The Cortex-M targets of the rustup route (`cargo xtask firmware`).
const THUMB_TARGETS: [&str; 2] = ["thumbv6m-none-eabi", "thumbv7m-none-eabi"];
/// Debian's toolchain route (`cargo xtask firmware`): its rustc and cargo,
/// the library sources `-Zbuild-std=core` compiles, and the linker.
const DEBIAN_RUSTC: &str = "/usr/bin/rustc";
const DEBIAN_CARGO: &str = "/usr/bin/cargo";
const DEBIAN_CORE_SRC: &str = "/usr/lib/rustlib/src/rust/library/core";
const DEBIAN_LINKER: &str = "ld.lld";

/// A tool that Rust does not bring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// `valgrind` on `PATH` (callgrind: `b2_instructions`, `b2_cells`).
    Valgrind,
    /// `qemu-system-arm` on `PATH` (`b3_on_target`).
    Qemu,
    /// A Cortex-M toolchain route of `cargo xtask firmware`
    /// (`b3_on_target`): rustup's `thumbv6m-none-eabi` and
    /// `thumbv7m-none-eabi` targets for the repository's toolchain, or
    /// Debian's `/usr/bin/rustc` and `/usr/bin/cargo` with the library
    /// sources (`rust-web-src`) and `ld.lld`. `FW_TOOLCHAIN=rustup|debian`
    /// narrows it to that route, as it does for the script.
    CortexM,
    /// The mosquitto broker (`b4_mqtt`): [`mosquitto`] finds it.
    Mosquitto,
}

impl Tool {
    /// Whether the tool is there.
    pub fn found(self) -> bool {
        match self {
            Tool::Valgrind => on_path("valgrind"),
            Tool::Qemu => on_path("qemu-system-arm"),
            Tool::CortexM => match std::env::var("FW_TOOLCHAIN").as_deref() {
                Ok("rustup") => rustup_route(),
                Ok("debian") => debian_route(),
                _ => rustup_route() || debian_route(),
            },
            Tool::Mosquitto => mosquitto().is_some(),
        }
    }

    /// What is missing, for the skip or failure line.
    pub fn missing(self) -> &'static str {
        match self {
            Tool::Valgrind => "valgrind not found",
            Tool::Qemu => "qemu-system-arm not found",
            Tool::CortexM => "no Cortex-M toolchain (rustup targets thumbv6m-none-eabi and thumbv7m-none-eabi, or Debian's rustc-web, rust-web-src and lld)",
            Tool::Mosquitto => "mosquitto not found (in /usr/sbin, /usr/bin, /usr/local/sbin, on PATH, or MOSQUITTO)",
        }
    }
}

/// What a bench does about its tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Every tool is there: measure.
    Run,
    /// A tool is missing and nothing requires it: say so and exit 0.
    Skip,
    /// A tool is missing and the environment requires it: exit non-zero.
    Fail,
}

/// The decision for a bench whose tools are `all_found` or not, when a
/// missing tool is `required` ([`required`]) or not.
pub fn decide(all_found: bool, required: bool) -> Decision {
    match (all_found, required) {
        (true, _) => Decision::Run,
        (false, false) => Decision::Skip,
        (false, true) => Decision::Fail,
    }
}

/// Whether a missing tool fails rather than skips, from the values of
/// `CI` and `AIMDB_BENCH_REQUIRE`: either one set to a true value.
pub fn required(ci: Option<&str>, require: Option<&str>) -> bool {
    is_true(ci) || is_true(require)
}

/// Set, and not empty, `0`, `false`, `no` or `off` (any case). CI services
/// set `CI=true` or `CI=1`; reading anything else set as true keeps a
/// gate from being skipped on a spelling.
fn is_true(value: Option<&str>) -> bool {
    value.map(str::trim).is_some_and(|v| {
        !v.is_empty()
            && !["0", "false", "no", "off"]
                .iter()
                .any(|f| v.eq_ignore_ascii_case(f))
    })
}

/// Checks the `tools` of `bench` and decides ([`decide`]) from the
/// environment ([`required`]). `None`: every tool is there, measure.
/// `Some(code)`: `main` ends now with `code`, the line saying why printed
/// (the skip line on stdout; a failure on stderr, then `BENCH: not run`
/// on stdout like any gate that did not run).
pub fn require(bench: &str, tools: &[Tool]) -> Option<ExitCode> {
    let missing: Vec<&str> = tools
        .iter()
        .filter(|t| !t.found())
        .map(|t| t.missing())
        .collect();
    let var = |name| std::env::var(name).ok();
    let ci = var("CI");
    let explicit = var("AIMDB_BENCH_REQUIRE");
    let why = missing.join(", ");
    match decide(
        missing.is_empty(),
        required(ci.as_deref(), explicit.as_deref()),
    ) {
        Decision::Run => None,
        Decision::Skip => {
            println!("{bench}: skipped: {why} (install: {INSTALL})");
            Some(ExitCode::SUCCESS)
        }
        Decision::Fail => {
            let by = if is_true(explicit.as_deref()) {
                format!("AIMDB_BENCH_REQUIRE={}", explicit.unwrap_or_default())
            } else {
                format!("CI={}", ci.unwrap_or_default())
            };
            eprintln!("FAIL: {bench}: {why} (install: {INSTALL}); {by} makes a missing tool fail instead of skipping the bench");
            println!("{bench}: not run");
            Some(ExitCode::FAILURE)
        }
    }
}

/// The mosquitto binary: `MOSQUITTO` if set (and executable), else the
/// first of `/usr/sbin/mosquitto` (Debian's), `/usr/bin`, `/usr/local/sbin`
/// and `PATH` that has one. `/usr/sbin` is often not on a user's `PATH`.
pub fn mosquitto() -> Option<PathBuf> {
    mosquitto_in(
        std::env::var_os("MOSQUITTO").as_deref(),
        &["/usr/sbin", "/usr/bin", "/usr/local/sbin"],
        std::env::var_os("PATH").as_deref(),
    )
}

/// [`mosquitto`] with its inputs: the `MOSQUITTO` value, the fixed
/// directories, the `PATH` value.
fn mosquitto_in(chosen: Option<&OsStr>, fixed: &[&str], path: Option<&OsStr>) -> Option<PathBuf> {
    if let Some(p) = chosen {
        let p = PathBuf::from(p);
        return executable(&p).then_some(p);
    }
    let listed = path.map(|p| std::env::split_paths(p).collect::<Vec<_>>());
    fixed
        .iter()
        .map(PathBuf::from)
        .chain(listed.unwrap_or_default())
        .map(|d| d.join("mosquitto"))
        .find(|p| executable(p))
}

/// An executable file named `program` in a directory of `PATH`.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| in_dirs(&path, program))
}

/// An executable file named `program` in a directory of `path` (a
/// `PATH`-style list).
fn in_dirs(path: &OsStr, program: &str) -> bool {
    std::env::split_paths(path).any(|dir| executable(&dir.join(program)))
}

fn executable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        path.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        path.is_file()
    }
}

/// `rustup target list --installed`, asked from the workspace root so
/// `rust-toolchain.toml` picks the toolchain, lists both thumb targets.
fn rustup_route() -> bool {
    Command::new("rustup")
        .args(["target", "list", "--installed"])
        .current_dir(crate::workspace_root())
        .output()
        .is_ok_and(|out| {
            let installed = String::from_utf8_lossy(&out.stdout);
            out.status.success()
                && THUMB_TARGETS
                    .iter()
                    .all(|t| installed.lines().any(|l| l.trim() == *t))
        })
}

fn debian_route() -> bool {
    executable(Path::new(DEBIAN_RUSTC))
        && executable(Path::new(DEBIAN_CARGO))
        && Path::new(DEBIAN_CORE_SRC).is_dir()
        && on_path(DEBIAN_LINKER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_or_the_explicit_setting_requires_the_tools() {
        assert!(!required(None, None));
        for yes in ["true", "1", "TRUE", "yes", " true "] {
            assert!(required(Some(yes), None), "CI={yes:?}");
            assert!(required(None, Some(yes)), "AIMDB_BENCH_REQUIRE={yes:?}");
        }
        for no in ["", "0", "false", "False", "no", "off"] {
            assert!(!required(Some(no), None), "CI={no:?}");
            assert!(!required(None, Some(no)), "AIMDB_BENCH_REQUIRE={no:?}");
        }
        // Either one is enough: an explicit `0` does not undo `CI=true`.
        assert!(required(Some("true"), Some("0")));
        assert!(required(Some("false"), Some("1")));
    }

    #[test]
    fn present_runs_missing_skips_or_fails_with_ci() {
        // Tool present or missing, CI unset, false or true.
        let cases = [
            (true, None, Decision::Run),
            (true, Some("true"), Decision::Run),
            (true, Some("false"), Decision::Run),
            (false, None, Decision::Skip),
            (false, Some("false"), Decision::Skip),
            (false, Some("true"), Decision::Fail),
            (false, Some("1"), Decision::Fail),
        ];
        for (found, ci, want) in cases {
            assert_eq!(decide(found, required(ci, None)), want, "{found} {ci:?}");
        }
    }

    #[test]
    fn a_program_is_found_only_when_executable_in_a_listed_dir() {
        let dir = std::env::temp_dir().join(format!("aimdb-bench-tools-{}", std::process::id()));
        let other = dir.join("other");
        std::fs::create_dir_all(&other).expect("temp dir");
        let file = dir.join("tool");
        std::fs::write(&file, "#!/bin/sh\n").expect("write");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let set = |mode| std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode));
            set(0o644).expect("chmod");
            assert!(!executable(&file));
            set(0o755).expect("chmod");
        }
        assert!(executable(&file));
        assert!(!executable(&dir), "a directory is not a program");
        assert!(!executable(&dir.join("absent")));
        let list = |dirs: &[&Path]| std::env::join_paths(dirs).expect("PATH list");
        assert!(in_dirs(&list(&[&other, &dir]), "tool"));
        assert!(!in_dirs(&list(&[&other]), "tool"));
        assert!(!in_dirs(&list(&[&dir]), "absent"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn mosquitto_is_the_chosen_one_else_the_first_found() {
        let dir = std::env::temp_dir().join(format!("aimdb-bench-mosq-{}", std::process::id()));
        let (a, b) = (dir.join("a"), dir.join("b"));
        for d in [&a, &b] {
            std::fs::create_dir_all(d).expect("temp dir");
            let file = d.join("mosquitto");
            std::fs::write(&file, "#!/bin/sh\n").expect("write");
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755))
                    .expect("chmod");
            }
        }
        let (a_s, b_s) = (a.to_str().expect("utf-8"), b.to_str().expect("utf-8"));
        let path = std::env::join_paths([&b]).expect("PATH list");
        // A fixed directory before `PATH`.
        assert_eq!(
            mosquitto_in(None, &["/nonexistent", a_s], Some(&path)),
            Some(a.join("mosquitto"))
        );
        // `PATH` when no fixed directory has one.
        assert_eq!(
            mosquitto_in(None, &["/nonexistent"], Some(&path)),
            Some(b.join("mosquitto"))
        );
        // `MOSQUITTO` wins, and only if it is a program.
        let chosen = b.join("mosquitto");
        assert_eq!(
            mosquitto_in(Some(chosen.as_os_str()), &[a_s], None),
            Some(chosen)
        );
        assert_eq!(
            mosquitto_in(
                Some(OsStr::new("/nonexistent/mosquitto")),
                &[a_s, b_s],
                None
            ),
            None
        );
        assert_eq!(mosquitto_in(None, &["/nonexistent"], None), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
