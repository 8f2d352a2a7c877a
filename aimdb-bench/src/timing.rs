//! Helpers shared by the timing benches (`b1_*`): a gated allocation
//! counter, the median/min/max summary of interleaved runs, and the JSON
//! cell shape of docs/BENCHMARKS.md.
//!
//! The timing benches count allocations in a separate pass, never inside a
//! timed loop. [`GatedCounter`] makes that literal: it is a global allocator
//! that forwards to `stats_alloc`'s instrumented system allocator only while
//! a [`Counting`] pass is open, and straight to [`System`] otherwise, so a
//! column that allocates on its hot path (e.g. `select_all`) is not charged
//! four counter updates per allocation in the timed runs.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{json, Value};
use stats_alloc::{Region, Stats, INSTRUMENTED_SYSTEM};

/// Timed runs per cell, interleaved across every cell of a bench.
pub const RUNS: usize = 5;

/// A global allocator that counts (through `stats_alloc`) only while a
/// [`Counting`] pass is open. Declare it in the bench binary:
///
/// ```ignore
/// #[global_allocator]
/// static GLOBAL: GatedCounter = GatedCounter::new();
/// ```
#[derive(Debug)]
pub struct GatedCounter {
    on: AtomicBool,
}

impl GatedCounter {
    /// Counting off.
    pub const fn new() -> Self {
        Self {
            on: AtomicBool::new(false),
        }
    }

    /// Opens a counting pass (single-threaded use: the benches run on a
    /// current-thread runtime).
    pub fn start(&'static self) -> Counting {
        self.on.store(true, Ordering::SeqCst);
        Counting {
            gate: self,
            region: Region::new(&INSTRUMENTED_SYSTEM),
        }
    }

    /// Positive control: one `Vec` allocation through the same counter.
    /// Must return 1, or the counter is broken.
    pub fn control(&'static self) -> u64 {
        let c = self.start();
        black_box(Vec::<u8>::with_capacity(black_box(32)));
        allocs(&c.stop())
    }

    fn counting(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }
}

impl Default for GatedCounter {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: every method forwards its arguments unchanged to `System`, either
// directly or through `stats_alloc`'s `StatsAlloc<System>` (which itself
// forwards to `System` after bumping counters). Both paths end in the same
// allocator, so a block allocated with counting off may be freed with it on
// and vice versa.
unsafe impl GlobalAlloc for GatedCounter {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if self.counting() {
            // SAFETY: forwarded contract.
            unsafe { INSTRUMENTED_SYSTEM.alloc(layout) }
        } else {
            // SAFETY: forwarded contract.
            unsafe { System.alloc(layout) }
        }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if self.counting() {
            // SAFETY: forwarded contract.
            unsafe { INSTRUMENTED_SYSTEM.alloc_zeroed(layout) }
        } else {
            // SAFETY: forwarded contract.
            unsafe { System.alloc_zeroed(layout) }
        }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if self.counting() {
            // SAFETY: forwarded contract; the block came from `System`.
            unsafe { INSTRUMENTED_SYSTEM.dealloc(ptr, layout) }
        } else {
            // SAFETY: forwarded contract; the block came from `System`.
            unsafe { System.dealloc(ptr, layout) }
        }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if self.counting() {
            // SAFETY: forwarded contract; the block came from `System`.
            unsafe { INSTRUMENTED_SYSTEM.realloc(ptr, layout, new_size) }
        } else {
            // SAFETY: forwarded contract; the block came from `System`.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }
}

/// An open counting pass; [`Counting::stop`] closes it.
pub struct Counting {
    gate: &'static GatedCounter,
    region: Region<'static, System>,
}

impl Counting {
    /// Closes the pass and returns what it counted.
    pub fn stop(self) -> Stats {
        let s = self.region.change();
        self.gate.on.store(false, Ordering::SeqCst);
        s
    }
}

impl std::fmt::Debug for Counting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counting").finish_non_exhaustive()
    }
}

/// Allocations and reallocations counted.
pub fn allocs(s: &Stats) -> u64 {
    (s.allocations + s.reallocations) as u64
}

/// Median, minimum and maximum of a cell's runs (ns per message).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// Median.
    pub median: f64,
    /// Fastest run.
    pub min: f64,
    /// Slowest run.
    pub max: f64,
}

impl Spread {
    /// Summarises `samples` (at least one).
    pub fn of(samples: &[f64]) -> Self {
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let median = if n % 2 == 1 {
            s[n / 2]
        } else {
            (s[n / 2 - 1] + s[n / 2]) / 2.0
        };
        Self {
            median,
            min: s[0],
            max: s[n - 1],
        }
    }

    /// `median [min-max]`, for the human tables.
    pub fn show(&self) -> String {
        format!(
            "{} [{}-{}]",
            short(self.median),
            short(self.min),
            short(self.max)
        )
    }
}

/// A number in at most about four significant digits.
pub fn short(x: f64) -> String {
    if x >= 1000.0 {
        format!("{x:.0}")
    } else if x >= 100.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// One JSON cell in the shape of docs/BENCHMARKS.md.
pub fn cell_json(
    scenario: &str,
    column: &str,
    routes: usize,
    spread: Spread,
    allocs_per_msg: f64,
) -> Value {
    json!({
        "scenario": scenario,
        "column": column,
        "routes": routes,
        "median_ns": round2(spread.median),
        "min_ns": round2(spread.min),
        "max_ns": round2(spread.max),
        "allocs_per_msg": allocs_per_msg,
    })
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// At least `msgs` messages (at least one round), rounded up to whole
/// rounds of `per_round`.
pub fn whole_rounds(msgs: usize, per_round: usize) -> usize {
    msgs.div_ceil(per_round).max(1) * per_round
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_five() {
        let s = Spread::of(&[5.0, 1.0, 4.0, 2.0, 3.0]);
        assert_eq!(
            s,
            Spread {
                median: 3.0,
                min: 1.0,
                max: 5.0
            }
        );
    }
}
