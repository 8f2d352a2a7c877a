//! Puts `memory.x` where cortex-m-rt's `link.x` finds it and passes the
//! linker script. Done here rather than in `RUSTFLAGS`/`.cargo/config.toml`
//! so a `RUSTFLAGS` set in the environment (CI's `-D warnings`, a check
//! build's `--cfg`) cannot silently drop it.
use std::{env, fs, path::PathBuf};

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap());
    fs::write(out.join("memory.x"), include_bytes!("memory.x")).unwrap();
    println!("cargo:rustc-link-search={}", out.display());
    println!("cargo:rerun-if-changed=memory.x");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-link-arg-bins=--nmagic");
    println!("cargo:rustc-link-arg-bins=-Tlink.x");
}
