//! Instruction counts under Valgrind's callgrind, for `b2_instructions`.
//!
//! Hand-written, not on gungraun: `b2_cells` gates ratios between rows of
//! one run (parked `outbound_routes` / `task_per_route` at most 1.10, …),
//! which gungraun's per-benchmark soft and hard limits cannot express.
//!
//! The bench binary is both parent and child. The parent re-runs itself
//! under `valgrind --tool=callgrind` once per row, with [`ROW_ENV`] naming
//! the row. The child builds the row's fixture and warms it up with
//! collection off, then calls [`measured_loop`] twice: `ops` operations,
//! then `2 * ops` more. Callgrind collects only inside [`measured_loop`]
//! (`--toggle-collect`) and writes one dump after each call
//! (`--dump-after`), so set-up, warm-up and process exit are never counted,
//! and `(I₂ − I₁) / ops` is the cost of one operation with the loop's own
//! entry and exit cancelled exactly. What remains per operation besides the
//! operation itself is the loop step and one indirect call, the same few
//! instructions in every row.
//!
//! Counts are guest instructions (`Ir`): the same on a loaded and an idle
//! machine. They depend on the compiled code, so on the rustc version, the
//! build profile and `RUSTFLAGS`, and, for `memcpy`-like calls, on the
//! glibc routine picked for the CPU; the bench records rustc, valgrind and
//! host next to its numbers.

use std::hint::black_box;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Set in the child: the row to measure.
pub const ROW_ENV: &str = "B2_CHILD_ROW";
/// Set in the child: operations in the first measured loop.
pub const OPS_ENV: &str = "B2_CHILD_OPS";

/// The function callgrind collects in, as valgrind names it after
/// demangling (a pattern for `--toggle-collect` and `--dump-after`).
const LOOP_FN: &str = "aimdb_bench::callgrind::measured_loop";

/// Runs `op(i)` for every `i` in `range`. The only code callgrind counts.
#[inline(never)]
pub fn measured_loop(range: Range<usize>, op: &mut dyn FnMut(usize)) {
    for i in range {
        op(black_box(i));
    }
}

/// In the child: `warmup` operations uncounted, then [`measured_loop`]
/// over `ops` operations and over `2 * ops` more.
pub fn run_child(warmup: usize, ops: usize, op: &mut dyn FnMut(usize)) {
    for i in 0..warmup {
        op(i);
    }
    measured_loop(warmup..warmup + ops, op);
    measured_loop(warmup + ops..warmup + 3 * ops, op);
}

/// The row and operation count when this process is a child.
pub fn child() -> Option<(String, usize)> {
    let row = std::env::var(ROW_ENV).ok()?;
    let ops = std::env::var(OPS_ENV).ok()?.parse().ok()?;
    Some((row, ops))
}

/// `valgrind --version`, or why it cannot be run.
pub fn valgrind_version() -> Result<String, String> {
    let out = Command::new("valgrind")
        .arg("--version")
        .output()
        .map_err(|e| format!("valgrind not runnable ({e}); `make deps` installs it"))?;
    if !out.status.success() {
        return Err(format!("`valgrind --version` exited with {}", out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `rustc --version` of the toolchain cargo used (rustup passes its
/// choice down through `RUSTUP_TOOLCHAIN`), or `"unknown"`.
pub fn rustc_version() -> String {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".to_string())
}

/// Instructions counted in the two measured loops of one child run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// The loop over `ops` operations.
    pub first: u64,
    /// The loop over `2 * ops` operations.
    pub second: u64,
}

impl Counts {
    /// Instructions per operation: `(second − first) / ops`.
    pub fn per_op(&self, ops: usize) -> f64 {
        (self.second as f64 - self.first as f64) / ops as f64
    }
}

/// Runs `exe` under callgrind as the child for `row`, with dumps in
/// `dir/ROW.N`, and returns the two loop counts.
pub fn measure_row(exe: &Path, row: &str, ops: usize, dir: &Path) -> Result<Counts, String> {
    let out_file = dir.join(format!("{row}.out"));
    for n in ["", ".1", ".2", ".3"] {
        let _ = std::fs::remove_file(format!("{}{n}", out_file.display()));
    }
    let output = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg("--quiet")
        .arg("--collect-atstart=no")
        .arg(format!("--toggle-collect={LOOP_FN}"))
        .arg(format!("--dump-after={LOOP_FN}"))
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .arg(exe)
        .env(ROW_ENV, row)
        .env(OPS_ENV, ops.to_string())
        .output()
        .map_err(|e| format!("{row}: running valgrind: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "{row}: child exited with {}:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let dump = |n: usize| -> Result<u64, String> {
        let path = PathBuf::from(format!("{}.{n}", out_file.display()));
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("{row}: callgrind dump {}: {e}", path.display()))?;
        totals(&text).ok_or_else(|| format!("{row}: no totals in {}", path.display()))
    };
    let counts = Counts {
        first: dump(1)?,
        second: dump(2)?,
    };
    // A pattern that matched nothing would count nothing and pass every
    // limit: refuse it.
    if counts.first == 0 || counts.second <= counts.first {
        return Err(format!(
            "{row}: implausible counts {counts:?} (was {LOOP_FN} collected?)"
        ));
    }
    Ok(counts)
}

/// The instruction total of one callgrind dump (`totals:`, else
/// `summary:`; the first event is `Ir` unless other events were asked for).
fn totals(text: &str) -> Option<u64> {
    let line = text
        .lines()
        .find(|l| l.starts_with("totals:"))
        .or_else(|| text.lines().find(|l| l.starts_with("summary:")))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_reads_the_first_event() {
        assert_eq!(totals("events: Ir\nfn=x\n1 2\ntotals: 1234\n"), Some(1234));
        assert_eq!(totals("events: Ir\nsummary: 99\n"), Some(99));
        assert_eq!(totals("events: Ir\n"), None);
    }

    #[test]
    fn per_op_cancels_the_fixed_part() {
        let c = Counts {
            first: 50 + 100 * 7,
            second: 50 + 200 * 7,
        };
        assert_eq!(c.per_op(100), 7.0);
    }
}
