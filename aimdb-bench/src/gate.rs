//! The committed-limit gate of the deterministic benches: b2 (instructions
//! on the host under callgrind) and b3 (instructions on the Cortex-M under
//! QEMU with instruction counting). Both compare a measured cost per
//! operation with a limit in `data/baselines/NAME.json`; a row more than
//! a tolerance over its limit, a measured row without a limit, a limit for
//! a row that no longer exists, and an expected row that was not measured
//! all fail. Rows well under their limit are reported so the limit can be
//! tightened in the same commit.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use serde_json::Value;

/// One committed limit.
#[derive(Debug, Clone)]
pub struct Limit {
    /// Instructions per operation.
    pub per_op: f64,
    /// The compiler (and tool) the limit was recorded with.
    pub toolchain: String,
}

/// Reads the `rows` of a baseline file: `row`, `instructions_per_op`, and
/// the toolchain from the field `toolchain_field`.
pub fn load(path: &Path, toolchain_field: &str) -> Result<BTreeMap<String, Limit>, String> {
    let name = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{name}: {e}"))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{name}: {e}"))?;
    let mut limits = BTreeMap::new();
    for r in v["rows"]
        .as_array()
        .ok_or_else(|| format!("{name}: no rows"))?
    {
        let (Some(row), Some(per_op)) = (r["row"].as_str(), r["instructions_per_op"].as_f64())
        else {
            return Err(format!("{name}: malformed row {r}"));
        };
        let toolchain = r[toolchain_field].as_str().unwrap_or("unknown").to_string();
        limits.insert(row.to_string(), Limit { per_op, toolchain });
    }
    Ok(limits)
}

/// How the gate treats a row.
pub struct Rules<'a> {
    /// A row fails when it is more than this fraction over its limit.
    pub tolerance: f64,
    /// A row this fraction under its limit is reported as improved.
    pub improved: f64,
    /// The baseline's path as printed in messages.
    pub baseline: &'a str,
    /// How to add a missing limit (printed with the failure).
    pub rewrite_hint: &'a str,
    /// The toolchain of this run, compared with each limit's.
    pub toolchain: &'a str,
}

/// One measured row against its limit.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The row.
    pub row: String,
    /// Measured instructions per operation.
    pub per_op: f64,
    /// Its limit, if the baseline has one.
    pub limit: Option<f64>,
    /// Fraction over (+) or under (−) the limit.
    pub delta: Option<f64>,
    /// `ok`, `improved`, `OVER` or `NO LIMIT`.
    pub status: &'static str,
}

/// The gate's verdict on one run.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Every measured row, in the order given.
    pub rows: Vec<Checked>,
    /// The table printed for humans.
    pub table: String,
    /// Failures: empty when the gate passes.
    pub problems: Vec<String>,
    /// Rows more than [`Rules::improved`] under their limit.
    pub improved: Vec<String>,
    /// Some limit was recorded with another toolchain.
    pub other_toolchain: bool,
}

/// Compares `measured` (row, instructions per operation) with `limits`.
/// With `expected` (the full row list of an unfiltered run), a row that was
/// not measured and a limit for an unknown row fail too.
pub fn check(
    measured: &[(String, f64)],
    limits: &BTreeMap<String, Limit>,
    expected: Option<&[String]>,
    rules: &Rules<'_>,
) -> Verdict {
    let mut v = Verdict::default();
    let width = measured
        .iter()
        .map(|(r, _)| r.len())
        .max()
        .unwrap_or(0)
        .max(30);
    let _ = writeln!(
        v.table,
        "{:<width$} {:>12} {:>12} {:>9}  status",
        "row", "limit", "instr/op", "vs limit"
    );
    for (row, per_op) in measured {
        let per_op = *per_op;
        let limit = limits.get(row);
        let delta = limit.map(|l| per_op / l.per_op - 1.0);
        let limit_per_op = limit.map_or(0.0, |l| l.per_op);
        let status = match delta {
            None => {
                v.problems.push(format!(
                    "{row}: no limit in {} ({})",
                    rules.baseline, rules.rewrite_hint
                ));
                "NO LIMIT"
            }
            Some(d) if d > rules.tolerance => {
                v.problems.push(format!(
                    "{row}: {per_op:.2} instructions/op, {:+.2} % over the limit {limit_per_op:.2}",
                    d * 100.0
                ));
                "OVER"
            }
            Some(d) if d < -rules.improved => {
                v.improved.push(format!(
                    "{row}: {per_op:.2} instructions/op, {:.2} % under the limit {limit_per_op:.2}",
                    -d * 100.0
                ));
                "improved"
            }
            Some(_) => "ok",
        };
        if limit.is_some_and(|l| l.toolchain != rules.toolchain) {
            v.other_toolchain = true;
        }
        let _ = writeln!(
            v.table,
            "{row:<width$} {:>12} {per_op:>12.2} {:>9}  {status}",
            limit.map_or("-".to_string(), |l| format!("{:.2}", l.per_op)),
            delta.map_or("-".to_string(), |d| format!("{:+.2}%", d * 100.0)),
        );
        v.rows.push(Checked {
            row: row.clone(),
            per_op,
            limit: limit.map(|l| l.per_op),
            delta,
            status,
        });
    }
    if let Some(expected) = expected {
        for row in expected {
            if !measured.iter().any(|(r, _)| r == row) {
                v.problems.push(format!("row {row} is missing"));
            }
        }
        for row in limits.keys() {
            if !expected.contains(row) {
                v.problems.push(format!(
                    "{} has a limit for unknown row {row}",
                    rules.baseline
                ));
            }
        }
    }
    v
}

impl Verdict {
    /// Prints the table and the improved rows (stdout).
    pub fn print(&self, rules: &Rules<'_>) {
        print!("{}", self.table);
        for i in &self.improved {
            println!("IMPROVED (tighten the limit in {}): {i}", rules.baseline);
        }
        if self.other_toolchain {
            println!(
                "note: some limits were recorded with another toolchain than {} (see {}); counts depend on the compiler",
                rules.toolchain, rules.baseline
            );
        }
    }
}

/// Ends a gate: prints each problem (stderr) and the summary line
/// `BENCH: PASSED in S s` or `BENCH: N problem(s) in S s` (stdout, what
/// CI's log shows), and gives the exit code.
pub fn finish(bench: &str, passed: &str, problems: &[String], started: Instant) -> ExitCode {
    let secs = started.elapsed().as_secs_f64();
    if problems.is_empty() {
        println!("{bench}: {passed} in {secs:.1} s");
        ExitCode::SUCCESS
    } else {
        for p in problems {
            eprintln!("FAIL: {p}");
        }
        println!("{bench}: {} problem(s) in {secs:.1} s", problems.len());
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> BTreeMap<String, Limit> {
        [("a", 100.0), ("b", 200.0)]
            .into_iter()
            .map(|(r, l)| {
                (
                    r.to_string(),
                    Limit {
                        per_op: l,
                        toolchain: "rustc X".into(),
                    },
                )
            })
            .collect()
    }

    fn rules() -> Rules<'static> {
        Rules {
            tolerance: 0.02,
            improved: 0.05,
            baseline: "base.json",
            rewrite_hint: "rewrite",
            toolchain: "rustc X",
        }
    }

    fn run(measured: &[(&str, f64)], expected: &[&str]) -> Verdict {
        let m: Vec<(String, f64)> = measured.iter().map(|&(r, p)| (r.into(), p)).collect();
        let e: Vec<String> = expected.iter().map(|r| r.to_string()).collect();
        check(&m, &limits(), Some(&e), &rules())
    }

    #[test]
    fn within_tolerance_passes_and_over_fails() {
        let v = run(&[("a", 101.9), ("b", 200.0)], &["a", "b"]);
        assert!(v.problems.is_empty(), "{:?}", v.problems);
        let v = run(&[("a", 102.1), ("b", 200.0)], &["a", "b"]);
        assert_eq!(v.problems.len(), 1);
        assert_eq!(v.rows[0].status, "OVER");
    }

    #[test]
    fn missing_unknown_and_unlimited_rows_fail() {
        let v = run(&[("a", 100.0)], &["a", "b"]);
        assert!(v.problems.iter().any(|p| p.contains("row b is missing")));
        let v = run(&[("a", 100.0), ("c", 1.0)], &["a", "c"]);
        assert!(v.problems.iter().any(|p| p.starts_with("c: no limit")));
        assert!(v.problems.iter().any(|p| p.contains("unknown row b")));
    }

    #[test]
    fn improved_rows_are_reported_not_failed() {
        let v = run(&[("a", 90.0), ("b", 200.0)], &["a", "b"]);
        assert!(v.problems.is_empty());
        assert_eq!(v.improved.len(), 1);
        assert_eq!(v.rows[0].status, "improved");
    }
}
