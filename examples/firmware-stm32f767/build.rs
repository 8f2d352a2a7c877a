//! Puts `memory.x` where cortex-m-rt's `link.x` finds it and passes the
//! linker script (here rather than in `RUSTFLAGS`, which an environment
//! `RUSTFLAGS` would replace). Checks the broker address: `AIMDB_BROKER`
//! (an IPv4 `address:port`, default 10.42.0.1:1883) is read at build
//! time, so a typo fails the build instead of the board. With feature
//! `tls`, `AIMDB_BROKER_CA` (a DER certificate file) and
//! `AIMDB_BROKER_NAME` must be set; the CA's bytes are built in.
use std::net::SocketAddrV4;
use std::{env, fs, path::PathBuf};

const DEFAULT_BROKER: &str = "10.42.0.1:1883";

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap());
    fs::write(out.join("memory.x"), include_bytes!("memory.x")).unwrap();
    println!("cargo:rustc-link-search={}", out.display());
    println!("cargo:rerun-if-changed=memory.x");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-link-arg-bins=--nmagic");
    println!("cargo:rustc-link-arg-bins=-Tlink.x");

    println!("cargo:rerun-if-env-changed=AIMDB_BROKER");
    let broker = env::var("AIMDB_BROKER").unwrap_or_else(|_| DEFAULT_BROKER.into());
    if let Err(e) = broker.parse::<SocketAddrV4>() {
        panic!("AIMDB_BROKER={broker:?} is not an IPv4 address:port ({e})");
    }
    println!("cargo:rustc-env=AIMDB_BROKER={broker}");

    println!("cargo:rerun-if-env-changed=AIMDB_BROKER_CA");
    println!("cargo:rerun-if-env-changed=AIMDB_BROKER_NAME");
    if env::var_os("CARGO_FEATURE_TLS").is_some() {
        let (Ok(ca), Ok(name)) = (env::var("AIMDB_BROKER_CA"), env::var("AIMDB_BROKER_NAME"))
        else {
            panic!("feature tls: set AIMDB_BROKER_CA (the CA's DER file) and AIMDB_BROKER_NAME");
        };
        let der = fs::read(&ca).unwrap_or_else(|e| panic!("AIMDB_BROKER_CA={ca}: {e}"));
        if der.first() != Some(&0x30) {
            panic!("AIMDB_BROKER_CA={ca}: not a DER certificate (openssl x509 -outform der)");
        }
        fs::write(out.join("broker-ca.der"), der).unwrap();
        println!("cargo:rerun-if-changed={ca}");
        println!("cargo:rustc-env=AIMDB_BROKER_NAME={name}");
    }
}
