//! The crate's module graph, as the connector contract promises it: the
//! contract module (`connector`) names neither routing table, and no two
//! top-level modules of `aimdb-core` refer to each other. Read from the
//! sources (every `crate::MODULE` outside comments), so a new reference
//! that closes a loop fails here before review.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// Top-level module → the other top-level modules its files refer to.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph = BTreeMap::new();
    for entry in fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if name == "lib" {
            continue;
        }
        let mut files = Vec::new();
        collect(&path, &mut files);
        let mut refs = BTreeSet::new();
        for file in files {
            for line in fs::read_to_string(&file).unwrap().lines() {
                if line.trim_start().starts_with("//") {
                    continue;
                }
                for part in line.split("crate::").skip(1) {
                    let target: String = part
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if target != name && !target.is_empty() {
                        refs.insert(target);
                    }
                }
            }
        }
        graph.insert(name, refs);
    }
    graph
}

fn collect(path: &Path, out: &mut Vec<std::path::PathBuf>) {
    if path.is_dir() {
        for e in fs::read_dir(path).unwrap() {
            collect(&e.unwrap().path(), out);
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_path_buf());
    }
}

#[test]
fn the_contract_names_neither_table() {
    let g = graph();
    let contract = &g["connector"];
    assert!(
        !contract.contains("inbound") && !contract.contains("outbound"),
        "connector refers to {contract:?}"
    );
    assert!(g["inbound"].contains("connector") && g["outbound"].contains("connector"));
}

#[test]
fn no_two_modules_refer_to_each_other() {
    let g = graph();
    assert!(g.len() >= 8, "the modules were found: {g:?}");
    for (a, refs) in &g {
        for b in refs {
            if let Some(back) = g.get(b) {
                assert!(!back.contains(a), "{a} and {b} refer to each other");
            }
        }
    }
}
