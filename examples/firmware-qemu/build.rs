//! Puts `memory.x` where cortex-m-rt's `link.x` finds it and passes the
//! linker script. Done here rather than in `RUSTFLAGS`/`.cargo/config.toml`
//! so a `RUSTFLAGS` set in the environment (CI's `-D warnings`, a check
//! build's `--cfg`) cannot silently drop it. Also makes the certificate
//! and key of b3's TLS peer (`src/tls_peer.rs`): a new ECDSA P-256 pair
//! per build, in `OUT_DIR`, never in the repository.
use std::{env, fs, path::PathBuf};

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap());
    fs::write(out.join("memory.x"), include_bytes!("memory.x")).unwrap();
    println!("cargo:rustc-link-search={}", out.display());
    println!("cargo:rerun-if-changed=memory.x");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-link-arg-bins=--nmagic");
    println!("cargo:rustc-link-arg-bins=-Tlink.x");

    let key = rcgen::KeyPair::generate().expect("a P-256 key");
    let mut params =
        rcgen::CertificateParams::new(vec!["localhost".to_string()]).expect("certificate params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "localhost");
    let cert = params.self_signed(&key).expect("a self-signed certificate");
    fs::write(out.join("tls-peer-cert.der"), cert.der()).unwrap();
    fs::write(out.join("tls-peer-key.der"), key.serialize_der()).unwrap();
}
