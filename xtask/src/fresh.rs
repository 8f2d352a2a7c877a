//! `cargo xtask firmware fresh-crate`: the firmware crate of
//! docs/FIRMWARE.md ("Start a firmware crate of your own"), its files
//! copied from the page into a temp dir outside the repository, the
//! page's command for this route run there (QEMU included), its
//! documented output required.
//!
//! `FRESH_DOC` checks another copy of the page (a deliberately broken one
//! must fail); `FRESH_TIMEOUT` (default 900 s) bounds the build, a cold
//! build of `core` and every dependency included; the QEMU run then has
//! `QEMU_TIMEOUT` (default 60 s).

use crate::firmware::{exit_code, target_dir};
use crate::toolchain::{command, output, Route, Toolchain};
use crate::{log, rel, root, Result};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

#[derive(Debug)]
/// The blocks of the page, by their `<!-- fresh-crate: KEY -->` marker.
struct Blocks {
    /// `file PATH`: PATH in the crate and its contents.
    files: BTreeMap<PathBuf, String>,
    /// `setup ROUTE`, `run ROUTE` and `output`.
    other: BTreeMap<String, String>,
}

/// For each `<!-- fresh-crate: KEY -->` line of the page, the fenced block
/// right after it.
fn extract_blocks(doc: &Path, text: &str) -> Result<Blocks> {
    let name = rel(doc);
    let mut blocks = Blocks {
        files: BTreeMap::new(),
        other: BTreeMap::new(),
    };
    enum State {
        None,
        Fence,
        Body,
    }
    let mut state = State::None;
    let mut key = String::new();
    let mut body = String::new();
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        match state {
            State::None => {
                let Some(k) = line
                    .strip_prefix("<!-- fresh-crate: ")
                    .and_then(|l| l.strip_suffix(" -->"))
                    .filter(|k| !k.is_empty())
                else {
                    continue;
                };
                key = k.to_string();
                let duplicate = if let Some(path) = key.strip_prefix("file ") {
                    let plain = !path.starts_with('/')
                        && Path::new(path)
                            .components()
                            .all(|c| matches!(c, Component::Normal(_)))
                        && !path.split('/').any(|c| c == "." || c.is_empty());
                    if !plain {
                        return Err(format!(
                            "{name}:{lineno}: '{path}' is not a plain relative path"
                        ));
                    }
                    blocks.files.contains_key(Path::new(path))
                } else if matches!(
                    key.as_str(),
                    "setup rustup" | "setup debian" | "run rustup" | "run debian" | "output"
                ) {
                    blocks.other.contains_key(&key)
                } else {
                    return Err(format!(
                        "{name}:{lineno}: unknown fresh-crate block '{key}'"
                    ));
                };
                if duplicate {
                    return Err(format!("{name}:{lineno}: a second block marked '{key}'"));
                }
                state = State::Fence;
            }
            State::Fence => {
                if !line.starts_with("```") {
                    return Err(format!(
                        "{name}:{lineno}: the block marked '{key}' must start on the next line"
                    ));
                }
                body.clear();
                state = State::Body;
            }
            State::Body => {
                if line == "```" {
                    let contents = std::mem::take(&mut body);
                    match key.strip_prefix("file ") {
                        Some(path) => blocks.files.insert(path.into(), contents),
                        None => blocks.other.insert(key.clone(), contents),
                    };
                    state = State::None;
                } else {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
    }
    if !matches!(state, State::None) {
        return Err(format!("{name}: the block marked '{key}' is not closed"));
    }
    for f in [
        "Cargo.toml",
        ".cargo/config.toml",
        "build.rs",
        "memory.x",
        "src/main.rs",
    ] {
        if blocks.files.get(Path::new(f)).is_none_or(String::is_empty) {
            return Err(format!(
                "{name}: no block for 'files/{f}' (<!-- fresh-crate: ... --> markers)"
            ));
        }
    }
    for k in [
        "setup rustup",
        "setup debian",
        "run rustup",
        "run debian",
        "output",
    ] {
        if blocks.other.get(k).is_none_or(String::is_empty) {
            return Err(format!(
                "{name}: no block for '{}' (<!-- fresh-crate: ... --> markers)",
                k.replace(' ', "-")
            ));
        }
    }
    Ok(blocks)
}

/// The single command line of a documented command block.
fn one_command(doc: &Path, blocks: &Blocks, key: &str) -> Result<String> {
    let lines: Vec<&str> = blocks.other[key]
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            !t.is_empty() && !t.starts_with('#')
        })
        .collect();
    match lines.as_slice() {
        [line] => Ok(line.to_string()),
        _ => Err(format!(
            "{}: the '{}' block must be one command line",
            rel(doc),
            key.replace(' ', "-")
        )),
    }
}

/// What the page's setup line for the route installs is there (it is not
/// run: the toolchain selection installs the same).
fn check_setup(route: Route, cmd: &str, crate_dir: &Path) -> Result<()> {
    match route {
        Route::Debian => {
            let packages = cmd.strip_prefix("apt-get install ").ok_or_else(|| {
                format!("setup debian: expected 'apt-get install ...', got: {cmd}")
            })?;
            for p in packages.split_whitespace().filter(|a| !a.starts_with('-')) {
                let status = command("dpkg-query")
                    .args(["-W", "-f=${Status}\n", p])
                    .stderr(Stdio::null())
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_default();
                if !status.lines().any(|l| l.ends_with(" installed")) {
                    return Err(format!(
                        "setup debian: package '{p}' (named on the page) is not installed"
                    ));
                }
            }
        }
        Route::Rustup => {
            let targets = cmd.strip_prefix("rustup target add ").ok_or_else(|| {
                format!("setup rustup: expected 'rustup target add ...', got: {cmd}")
            })?;
            // Outside the repository: the user's own default toolchain.
            let installed = output(
                command("rustup")
                    .args(["target", "list", "--installed"])
                    .current_dir(crate_dir),
                "rustup target list",
            )?;
            for t in targets.split_whitespace() {
                if !installed.lines().any(|l| l == t) {
                    return Err(format!(
                        "setup rustup: target '{t}' is not installed for the toolchain active in the crate"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The `name = "..."` of the crate's manifest.
fn crate_name(manifest: &str) -> Option<&str> {
    manifest
        .lines()
        .find_map(|l| l.strip_prefix("name = \"")?.strip_suffix('"'))
}

/// The crate's path is new each run, so it and aimdb-core (reached through
/// it) build anew under new hashes: drops the previous run's artifacts of
/// those two so the target dir does not grow. Dependencies stay.
fn drop_old_artifacts(dir: &Path, names: &[&str]) {
    let prefixes: Vec<String> = names
        .iter()
        .flat_map(|n| {
            let u = n.replace('-', "_");
            [format!("{n}-"), format!("{u}-"), format!("lib{u}-")]
        })
        .collect();
    let matches = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| prefixes.iter().any(|pre| n.starts_with(pre.as_str())))
    };
    // Entries 3 or 4 levels below `dir` with a `release` directory above.
    let children = |p: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(p)
            .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default()
    };
    let under_release = |p: &Path| {
        p.strip_prefix(dir).is_ok_and(|r| {
            let parts: Vec<_> = r.components().collect();
            parts[..parts.len().saturating_sub(1)]
                .iter()
                .any(|c| c.as_os_str() == "release")
        })
    };
    for a in children(dir) {
        for b in children(&a) {
            for c in children(&b) {
                if under_release(&c) && matches(&c) {
                    remove(&c);
                    continue;
                }
                for d in children(&c) {
                    if under_release(&d) && matches(&d) {
                        remove(&d);
                    }
                }
            }
        }
    }
}

fn remove(p: &Path) {
    let _ = if p.is_dir() && !p.is_symlink() {
        std::fs::remove_dir_all(p)
    } else {
        std::fs::remove_file(p)
    };
}

/// Runs `cmd` with bash in `dir` under `timeout -k 10 SECS`, stdout and
/// stderr together echoed to stdout when `echo`: the exit code and the
/// output.
fn run_bash(dir: &Path, cmd: &str, secs: &str, echo: bool) -> Result<(i32, String)> {
    let fresh_target = target_dir().join("fresh-crate");
    let mut c = command("timeout");
    c.args(["-k", "10", secs, "bash", "-c", cmd])
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", &fresh_target)
        .stdin(Stdio::null());
    if !echo {
        let status = c.status().map_err(|e| format!("timeout: {e}"))?;
        return Ok((exit_code(status), String::new()));
    }
    let (reader, writer) = std::io::pipe().map_err(|e| e.to_string())?;
    c.stdout(writer.try_clone().map_err(|e| e.to_string())?)
        .stderr(writer);
    let mut child = c.spawn().map_err(|e| format!("timeout: {e}"))?;
    // The command holds the pipe's write ends: dropped, the reader ends at
    // the child's exit.
    drop(c);
    let mut out = String::new();
    for line in BufReader::new(reader).lines() {
        let line = line.map_err(|e| e.to_string())?;
        println!("{line}");
        out.push_str(&line);
        out.push('\n');
    }
    let status = child.wait().map_err(|e| format!("timeout: {e}"))?;
    Ok((exit_code(status), out))
}

/// Removes its directory when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn make_temp_dir() -> Result<TempDir> {
    let out = output(command("mktemp").arg("-d"), "mktemp -d")?;
    Ok(TempDir(PathBuf::from(out)))
}

pub fn fresh_crate(tc: &Toolchain) -> Result<()> {
    let start = Instant::now();
    let root = root();
    let doc = std::env::var_os("FRESH_DOC")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("docs/FIRMWARE.md"));
    let fresh_timeout = std::env::var("FRESH_TIMEOUT").unwrap_or_else(|_| "900".into());
    let qemu_timeout = std::env::var("QEMU_TIMEOUT").unwrap_or_else(|_| "60".into());
    let route = tc.route.name();

    let tmp = make_temp_dir()?;
    // Outside the repository, or its Cargo.toml and rust-toolchain.toml apply.
    if tmp.0.starts_with(&root) {
        return Err(format!(
            "mktemp -d gave {}, inside the repository (TMPDIR?)",
            tmp.0.display()
        ));
    }
    let text = std::fs::read_to_string(&doc).map_err(|e| format!("{}: {e}", doc.display()))?;
    let blocks = extract_blocks(&doc, &text)?;
    // The page's layout: the crate next to a clone of this repository.
    let manifest = &blocks.files[Path::new("Cargo.toml")];
    if !manifest.contains("\"../aimdb/aimdb-core\"") {
        return Err("the page's Cargo.toml no longer depends on ../aimdb/aimdb-core (update fresh-crate's layout)".into());
    }
    std::os::unix::fs::symlink(&root, tmp.0.join("aimdb")).map_err(|e| e.to_string())?;
    let crate_dir = tmp.0.join("my-firmware");
    for (path, contents) in &blocks.files {
        let dest = crate_dir.join(path);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        }
        std::fs::write(&dest, contents).map_err(|e| format!("{}: {e}", dest.display()))?;
    }
    let setup = one_command(&doc, &blocks, &format!("setup {route}"))?;
    check_setup(tc.route, &setup, &crate_dir)?;
    let cmd = one_command(&doc, &blocks, &format!("run {route}"))?;

    let fresh_target = target_dir().join("fresh-crate");
    if let Some(name) = crate_name(manifest) {
        if fresh_target.is_dir() {
            drop_old_artifacts(&fresh_target, &[name, "aimdb-core"]);
        }
    }

    // First the same command with `cargo build` for `cargo run`, under the
    // build's time limit; then the command as written, which finds it all
    // built and boots QEMU (the page's runner), under QEMU's. A firmware
    // that hangs then costs QEMU_TIMEOUT, not FRESH_TIMEOUT.
    let build_cmd = cmd.replacen("cargo run ", "cargo build ", 1);
    if build_cmd == cmd {
        return Err(format!(
            "run {route}: expected a 'cargo run ...' command, got: {cmd}"
        ));
    }
    log(&format!(
        "fresh crate {} ({route} route): {build_cmd}",
        crate_dir.display()
    ));
    let (rc, _) = run_bash(&crate_dir, &build_cmd, &fresh_timeout, false)?;
    if rc == 124 {
        return Err(format!(
            "fresh-crate: the build timed out after {fresh_timeout}s"
        ));
    }
    if rc != 0 {
        return Err(format!(
            "fresh-crate: the page's command (as 'cargo build') exited with {rc}"
        ));
    }
    log(&format!(
        "fresh crate ({route} route, timeout {qemu_timeout}s): {cmd}"
    ));
    let (rc, out) = run_bash(&crate_dir, &cmd, &qemu_timeout, true)?;
    if rc == 124 {
        return Err(format!(
            "fresh-crate: the run timed out after {qemu_timeout}s"
        ));
    }
    if rc != 0 {
        return Err(format!("fresh-crate: the page's command exited with {rc}"));
    }
    for want in blocks.other["output"].lines() {
        if !out.lines().any(|l| l == want) {
            return Err(format!(
                "fresh-crate: no line '{want}' (the page's expected output)"
            ));
        }
    }
    println!(
        "fresh-crate: OK ({route} route, {} s): the page's crate builds outside the repository and runs under QEMU",
        start.elapsed().as_secs()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_from_the_page() {
        let doc = root().join("docs/FIRMWARE.md");
        let text = std::fs::read_to_string(&doc).unwrap();
        let blocks = extract_blocks(&doc, &text).unwrap();
        assert_eq!(blocks.files.len(), 5);
        assert!(one_command(&doc, &blocks, "run debian")
            .unwrap()
            .contains("cargo run "));
        assert_eq!(
            crate_name(&blocks.files[Path::new("Cargo.toml")]),
            Some("my-firmware")
        );
    }

    #[test]
    fn rejects_bad_pages() {
        let doc = Path::new("page.md");
        let bad = "<!-- fresh-crate: file ../x -->\n```\nx\n```\n";
        assert!(extract_blocks(doc, bad)
            .unwrap_err()
            .contains("plain relative path"));
        let open = "<!-- fresh-crate: output -->\n```\nx\n";
        assert!(extract_blocks(doc, open)
            .unwrap_err()
            .contains("not closed"));
        let unknown = "<!-- fresh-crate: run windows -->\n```\nx\n```\n";
        assert!(extract_blocks(doc, unknown)
            .unwrap_err()
            .contains("unknown"));
    }
}
