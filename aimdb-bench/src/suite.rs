//! The parent side of a callgrind bench binary (`b2_instructions`,
//! `b2_cells`): measure every row in a child under callgrind
//! ([`crate::callgrind`]), rewrite the baseline on request, gate the rows
//! against it ([`crate::gate`]), let the binary add checks of its own, and
//! write its JSON. Without valgrind the parent does none of it
//! ([`crate::tools`]).
//!
//! Environment: `B2_FILTER=text` measures only rows containing `text` (no
//! JSON, no missing-row check); `B2_WRITE_BASELINE=1` rewrites the
//! baseline from this run (every row); `B2_JOBS=n` runs `n` children at a
//! time (default: the core count; counts do not depend on it).

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use serde_json::{json, Map, Value};

use crate::callgrind::{self, Counts};
use crate::gate;
use crate::tools::{self, Tool};

/// A row fails when it is more than this fraction over its limit.
pub const TOLERANCE: f64 = 0.02;
/// A row this fraction under its limit is reported as improved.
pub const IMPROVED: f64 = 0.05;

/// A bench binary's rows and the baseline they are gated against (at
/// [`TOLERANCE`], reporting rows [`IMPROVED`] under their limit).
pub struct Suite {
    /// The binary's name: JSON file, summary line, dump folder.
    bench: &'static str,
    /// The baseline, relative to the workspace root.
    baseline: &'static str,
    /// Every row, in report order.
    rows: Vec<&'static str>,
    /// Operations in the first measured loop (the second runs twice as
    /// many).
    ops: usize,
    /// Uncounted operations before the measured loops.
    warmup: usize,
}

/// What the parent measured, for the binary's own checks.
pub struct Run {
    /// Instructions per operation of every row measured, in report order.
    pub measured: Vec<(&'static str, f64)>,
}

impl Run {
    /// Instructions per operation of `row`, if it was measured.
    pub fn per_op(&self, row: &str) -> Option<f64> {
        self.measured.iter().find(|&&(r, _)| r == row).map(|m| m.1)
    }
}

/// What a binary's own checks add: lines printed after the gate's table,
/// problems (each fails the run), fields added to the JSON.
#[derive(Default)]
pub struct Extra {
    /// Printed after the gate's table.
    pub text: String,
    /// Failures.
    pub problems: Vec<String>,
    /// Added to the JSON document.
    pub json: Map<String, Value>,
}

impl Suite {
    /// A suite of `rows` (name, what one operation is).
    pub fn new(
        bench: &'static str,
        baseline: &'static str,
        rows: &[(&'static str, &'static str)],
        ops: usize,
        warmup: usize,
    ) -> Self {
        Self {
            bench,
            baseline,
            rows: rows.iter().map(|&(r, _)| r).collect(),
            ops,
            warmup,
        }
    }

    /// A bench binary's `main`: in a child (see [`callgrind::child`]),
    /// `child(row, ops)` measures one row; otherwise [`Self::run`].
    pub fn main(
        self,
        child: impl FnOnce(&str, usize) -> ExitCode,
        extra: impl FnOnce(&Run) -> Extra,
    ) -> ExitCode {
        if let Some((row, ops)) = callgrind::child() {
            return child(&row, ops);
        }
        self.run(extra)
    }

    /// Runs the parent: measures, gates, calls `extra` with what was
    /// measured, prints, writes the JSON, and gives the exit code.
    /// Without valgrind it is skipped or fails as [`tools::require`]
    /// decides; the children never check (valgrind runs them).
    pub fn run(&self, extra: impl FnOnce(&Run) -> Extra) -> ExitCode {
        if let Some(exit) = tools::require(self.bench, &[Tool::Valgrind]) {
            return exit;
        }
        let started = Instant::now();
        let filter = std::env::var("B2_FILTER").ok();
        let write = std::env::var_os("B2_WRITE_BASELINE").is_some_and(|v| v == "1");
        let jobs = std::env::var("B2_JOBS")
            .ok()
            .and_then(|j| j.parse().ok())
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let valgrind = match callgrind::valgrind_version() {
            Ok(v) => v,
            Err(e) => {
                eprintln!("FAIL: {e}");
                println!("{}: not run", self.bench);
                return ExitCode::FAILURE;
            }
        };
        if write && filter.is_some() {
            eprintln!("FAIL: B2_WRITE_BASELINE needs every row; unset B2_FILTER");
            return ExitCode::FAILURE;
        }
        let rustc = callgrind::rustc_version();
        let rows: Vec<&'static str> = self
            .rows
            .iter()
            .copied()
            .filter(|r| filter.as_deref().is_none_or(|f| r.contains(f)))
            .collect();
        let results = self.measure_all(&rows, jobs);

        let mut problems = Vec::new();
        let mut measured = Vec::new();
        let mut counts = BTreeMap::new();
        for (row, r) in rows.iter().zip(results) {
            match r {
                Ok(c) => {
                    measured.push((*row, c.per_op(self.ops)));
                    counts.insert(*row, c);
                }
                Err(e) => problems.push(e),
            }
        }
        if write && problems.is_empty() {
            match self.write_baseline(&measured, &rustc, &valgrind) {
                Ok(()) => println!("wrote {} from this run", self.baseline),
                Err(e) => problems.push(e),
            }
        }
        let path = crate::workspace_root().join(self.baseline);
        let limits = gate::load(&path, "rustc").unwrap_or_else(|e| {
            problems.push(format!("baseline: {e}"));
            BTreeMap::new()
        });
        let rules = gate::Rules {
            tolerance: TOLERANCE,
            improved: IMPROVED,
            baseline: self.baseline,
            rewrite_hint: "B2_WRITE_BASELINE=1 adds it",
            toolchain: &rustc,
        };
        let all: Vec<String> = self.rows.iter().map(|r| r.to_string()).collect();
        let named: Vec<(String, f64)> = measured.iter().map(|&(r, p)| (r.to_string(), p)).collect();
        let verdict = gate::check(
            &named,
            &limits,
            filter.is_none().then_some(&all[..]),
            &rules,
        );
        problems.extend(verdict.problems.iter().cloned());
        let json_rows: Vec<Value> = verdict
            .rows
            .iter()
            .map(|c| {
                let n = counts[c.row.as_str()];
                json!({
                    "row": c.row,
                    "instructions_per_op": c.per_op,
                    "limit": c.limit,
                    "vs_limit_pct": c.delta.map(|d| d * 100.0),
                    "status": c.status,
                    "loop_instructions": [n.first, n.second],
                })
            })
            .collect();

        let run = Run { measured };
        let extra = extra(&run);
        problems.extend(extra.problems);

        verdict.print(&rules);
        print!("{}", extra.text);
        println!("rustc: {rustc}; {valgrind}; host: {}", crate::host());
        if filter.is_none() {
            let mut doc = json!({
                "bench": self.bench,
                "host": crate::host(),
                "rustc": rustc,
                "valgrind": valgrind,
                "ops": self.ops,
                "warmup": self.warmup,
                "tolerance_pct": TOLERANCE * 100.0,
                "rows": json_rows,
            });
            if let Value::Object(m) = &mut doc {
                m.extend(extra.json);
            }
            match crate::write_json(self.bench, &doc) {
                Ok(p) => println!("wrote {}", p.display()),
                Err(e) => problems.push(format!("writing JSON: {e}")),
            }
        }
        if !problems.is_empty() && verdict.other_toolchain {
            eprintln!("(limits were recorded with another rustc than {rustc})");
        }
        gate::finish(
            self.bench,
            &format!("{} rows passed", run.measured.len()),
            &problems,
            started,
        )
    }

    /// Runs the children, `jobs` at a time; results in `rows` order.
    fn measure_all(&self, rows: &[&'static str], jobs: usize) -> Vec<Result<Counts, String>> {
        let exe = match std::env::current_exe() {
            Ok(e) => e,
            Err(e) => {
                return rows
                    .iter()
                    .map(|_| Err(format!("current_exe: {e}")))
                    .collect()
            }
        };
        let dir = crate::results_dir().join(format!("{}_callgrind", self.bench));
        if let Err(e) = std::fs::create_dir_all(&dir) {
            return rows
                .iter()
                .map(|_| Err(format!("{}: {e}", dir.display())))
                .collect();
        }
        let next = AtomicUsize::new(0);
        let results = Mutex::new(vec![None; rows.len()]);
        std::thread::scope(|s| {
            for _ in 0..jobs.clamp(1, rows.len().max(1)) {
                s.spawn(|| loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some(row) = rows.get(k) else { break };
                    let r = callgrind::measure_row(&exe, row, self.ops, &dir);
                    results.lock().expect("no panics while locked")[k] = Some(r);
                });
            }
        });
        results
            .into_inner()
            .expect("no panics while locked")
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err("not run".to_string())))
            .collect()
    }

    fn write_baseline(
        &self,
        measured: &[(&str, f64)],
        rustc: &str,
        valgrind: &str,
    ) -> Result<(), String> {
        let rows: Vec<Value> = measured
            .iter()
            .map(|&(row, per_op)| {
                json!({
                    "row": row,
                    "instructions_per_op": (per_op * 1000.0).round() / 1000.0,
                    "rustc": rustc,
                    "valgrind": valgrind,
                })
            })
            .collect();
        let note = format!(
            "Instruction limits per operation under callgrind; a row more than {} % over its limit fails `make bench-gate`. Regenerate with `B2_WRITE_BASELINE=1 cargo bench -p aimdb-bench --bench {}` and commit with the reason. Counts hold for the rustc named per row.",
            TOLERANCE * 100.0,
            self.bench
        );
        let doc = json!({
            "bench": self.bench,
            "note": note,
            "host": crate::host(),
            "ops": self.ops,
            "warmup": self.warmup,
            "rows": rows,
        });
        let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())? + "\n";
        std::fs::write(crate::workspace_root().join(self.baseline), text)
            .map_err(|e| format!("{}: {e}", self.baseline))
    }
}
