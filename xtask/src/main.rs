//! The repository's tooling, run as `cargo xtask COMMAND` (the alias is in
//! `.cargo/config.toml`).
//!
//! `cargo xtask firmware ...` builds the Cortex-M firmware for aimdb-core:
//! it picks a toolchain route, checks the `no_std` build, runs the QEMU
//! self-test, measures flash and RAM (`data/baselines/firmware_size.json`),
//! checks the firmware crate of `docs/FIRMWARE.md` and builds the board
//! firmware. `docs/FIRMWARE.md` describes the routes.

mod audit;
mod firmware;
mod fresh;
mod sizes;
mod toolchain;

use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// An error that ends the command with exit code 1 after its message.
pub type Result<T> = std::result::Result<T, String>;

#[derive(Parser)]
#[command(about = "The repository's tooling")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Cortex-M firmware: builds, QEMU runs, sizes, board builds.
    Firmware {
        #[command(subcommand)]
        command: firmware::Firmware,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Firmware { command } => firmware::run(command),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("xtask firmware: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The repository's root directory (the workspace this crate belongs to).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace root")
        .to_path_buf()
}

/// `path` relative to the repository's root, for messages.
pub fn rel(path: &Path) -> String {
    let root = root();
    path.strip_prefix(&root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// A progress line on stderr.
pub fn log(msg: &str) {
    eprintln!("==> {msg}");
}
