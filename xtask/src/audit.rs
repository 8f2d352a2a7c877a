//! The dependencies the firmware gets from aimdb-core (no default
//! features) and aimdb-connectors (`mqtt,embassy-net`), resolved for
//! thumbv6m-none-eabi, with the features each is built with.
//!
//! `cargo metadata` on the repository resolves every workspace member and
//! unifies their features (aimdb-bench turns on aimdb-core's `std`), so
//! each library is resolved alone: as the one dependency of a probe crate
//! in a temp dir outside the repository, with the repository's Cargo.lock
//! (the versions the firmware builds use). Proc-macros run on the host
//! and may use std: neither they nor their dependencies are listed.

use crate::{root, Result};
use cargo_metadata::{DependencyKind, MetadataCommand, PackageId, TargetKind};
use std::collections::{BTreeSet, HashMap, VecDeque};

const TARGET: &str = "thumbv6m-none-eabi";

/// `(name, version, features)` of each dependency, sorted, no duplicates.
pub fn dependencies() -> Result<Vec<(String, String, Vec<String>)>> {
    let root = root();
    let core = format!(
        "aimdb-core = {{ path = {:?}, default-features = false }}",
        root.join("aimdb-core")
    );
    let connectors = format!(
        "aimdb-connectors = {{ path = {:?}, default-features = false, features = [\"mqtt\", \"embassy-net\"] }}",
        root.join("aimdb-connectors")
    );
    let mut all = BTreeSet::new();
    for dependency in [core, connectors] {
        all.extend(resolve(&dependency)?);
    }
    Ok(all.into_iter().collect())
}

fn resolve(dependency: &str) -> Result<BTreeSet<(String, String, Vec<String>)>> {
    let dir = std::env::temp_dir().join(format!("xtask-nostd-audit-{}", std::process::id()));
    let result = resolve_in(&dir, dependency);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn resolve_in(
    dir: &std::path::Path,
    dependency: &str,
) -> Result<BTreeSet<(String, String, Vec<String>)>> {
    let io = |e: std::io::Error| format!("{}: {e}", dir.display());
    std::fs::create_dir_all(dir.join("src")).map_err(io)?;
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"nostd-audit\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n\
             [dependencies]\n{dependency}\n\n[workspace]\n"
        ),
    )
    .map_err(io)?;
    std::fs::write(dir.join("src/lib.rs"), "#![no_std]\n").map_err(io)?;
    std::fs::copy(root().join("Cargo.lock"), dir.join("Cargo.lock")).map_err(io)?;

    let meta = MetadataCommand::new()
        .manifest_path(dir.join("Cargo.toml"))
        .current_dir(dir)
        .other_options(vec!["--filter-platform".into(), TARGET.into()])
        .exec()
        .map_err(|e| format!("cargo metadata: {e}"))?;
    let resolve = meta
        .resolve
        .as_ref()
        .ok_or("cargo metadata: no resolve graph")?;
    let probe = resolve
        .root
        .as_ref()
        .ok_or("cargo metadata: no root package")?;
    let nodes: HashMap<&PackageId, _> = resolve.nodes.iter().map(|n| (&n.id, n)).collect();
    let proc_macro = |id: &PackageId| {
        meta[id]
            .targets
            .iter()
            .any(|t| t.kind.contains(&TargetKind::ProcMacro))
    };

    let mut seen = BTreeSet::new();
    let mut out = BTreeSet::new();
    let mut queue = VecDeque::from([probe]);
    while let Some(id) = queue.pop_front() {
        let node = nodes[id];
        for dep in &node.deps {
            let normal = dep
                .dep_kinds
                .iter()
                .any(|k| k.kind == DependencyKind::Normal);
            if !normal || proc_macro(&dep.pkg) || !seen.insert(&dep.pkg) {
                continue;
            }
            let package = &meta[&dep.pkg];
            let mut features: Vec<String> = nodes[&dep.pkg]
                .features
                .iter()
                .map(|f| f.to_string())
                .collect();
            features.sort();
            out.insert((
                package.name.to_string(),
                package.version.to_string(),
                features,
            ));
            queue.push_back(&dep.pkg);
        }
    }
    Ok(out)
}
