//! Shared plumbing for the bench binaries in `benches/`: where results go,
//! what host they came from, and the fixtures every bench uses so the rows
//! of b0 (allocations), b1 (time) and b2 (instructions) measure the same
//! code paths. Everything goes through the crates' public API.

use std::path::PathBuf;

pub mod callgrind;
pub mod fixtures;
pub mod gate;
pub mod latency;
pub mod suite;
pub mod timing;
pub mod tools;

/// `target/bench-results/` at the workspace root (or under
/// `CARGO_TARGET_DIR`), whatever the working directory.
pub fn results_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    target.join("bench-results")
}

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

/// Writes `value` as pretty JSON to `target/bench-results/NAME.json` and
/// returns the path.
pub fn write_json(name: &str, value: &serde_json::Value) -> std::io::Result<PathBuf> {
    let dir = results_dir();
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(value)? + "\n")?;
    Ok(path)
}

/// CPU model and logical core count, for the JSON `host` field.
pub fn host() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("{model}, {cores} cores")
}
