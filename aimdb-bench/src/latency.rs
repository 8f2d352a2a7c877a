//! Per-message latency for the timing benches: a process-wide nanosecond
//! clock, HDR histograms (`hdrhistogram`, 1 ns to 60 s, 3 significant
//! digits, allocated before a pass so recording does not allocate), their
//! percentiles, and the [`Stamp`] a sink carries so a latency pass can
//! time each value from just before its write to its push.
//!
//! A latency pass runs after the timed runs of a cell: the producer stamps
//! the time before each write, the sink stamps its push of that value, and
//! the producer records the difference after the value was delivered, so
//! the histogram is off the measured path. Timed runs never stamp (the
//! sink's check is one flag load, the same in every column), so the cost
//! figures are not distorted.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use hdrhistogram::Histogram;
use serde_json::{json, Value};

use crate::timing::short;

/// Nanoseconds since the first call (one process-wide origin, so a stamp
/// fits an `AtomicU64`; 0 means "no stamp").
pub fn now_ns() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    let base = *BASE.get_or_init(Instant::now);
    base.elapsed().as_nanos() as u64 + 1
}

/// An empty histogram: 1 ns to 60 s, 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds")
}

/// p50 / p99 / p99.9 / max of a histogram.
#[derive(Debug, Clone, Copy)]
pub struct Percentiles {
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub samples: u64,
}

impl Percentiles {
    pub fn of(h: &Histogram<u64>) -> Option<Self> {
        (!h.is_empty()).then(|| Self {
            p50: h.value_at_quantile(0.50),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            samples: h.len(),
        })
    }

    /// `p50/p99/p99.9/max` for the human tables.
    pub fn show(&self) -> String {
        format!(
            "{}/{}/{}/{}",
            short(self.p50 as f64),
            short(self.p99 as f64),
            short(self.p999 as f64),
            short(self.max as f64)
        )
    }

    pub fn json(&self) -> Value {
        json!({
            "p50_ns": self.p50,
            "p99_ns": self.p99,
            "p999_ns": self.p999,
            "max_ns": self.max,
            "samples": self.samples,
        })
    }
}

/// The latency half of a sink: off unless a latency pass runs; then the
/// producer stamps the time before a write, the sink's push of a stamped
/// value stamps the push (one clock read and a store: the histogram is not
/// touched on the measured path), and the producer records the difference
/// once it has seen the value delivered ([`Stamp::record`]).
pub struct Stamp {
    on: AtomicBool,
    at: AtomicU64,
    pushed: AtomicU64,
    hist: Mutex<Histogram<u64>>,
}

impl Default for Stamp {
    fn default() -> Self {
        Self {
            on: AtomicBool::new(false),
            at: AtomicU64::new(0),
            pushed: AtomicU64::new(0),
            hist: Mutex::new(histogram()),
        }
    }
}

impl Stamp {
    /// Starts (or ends) a latency pass.
    pub fn enable(&self, on: bool) {
        self.on.store(on, Ordering::Release);
    }

    /// Stamps the write about to happen (only during a pass).
    #[inline]
    pub fn before_write(&self) {
        if self.on.load(Ordering::Relaxed) {
            self.at.store(now_ns(), Ordering::Release);
        }
    }

    /// At a push: stamps the push of a stamped value.
    #[inline]
    pub fn at_push(&self) {
        if self.on.load(Ordering::Relaxed) && self.at.load(Ordering::Acquire) != 0 {
            self.pushed.store(now_ns(), Ordering::Release);
        }
    }

    /// After the value was delivered: records push time − write time.
    pub fn record(&self) {
        if self.on.load(Ordering::Relaxed) {
            record(&self.hist, &self.at, &self.pushed);
        }
    }

    /// The percentiles recorded so far.
    pub fn percentiles(&self) -> Option<Percentiles> {
        Percentiles::of(&self.hist.lock().expect("histogram"))
    }
}

/// Takes both stamps and records their difference, if both are there.
pub fn record(hist: &Mutex<Histogram<u64>>, at: &AtomicU64, pushed: &AtomicU64) {
    let (a, p) = (
        at.swap(0, Ordering::AcqRel),
        pushed.swap(0, Ordering::AcqRel),
    );
    if a != 0 && p != 0 {
        let _ = hist
            .lock()
            .expect("histogram")
            .record(p.saturating_sub(a).max(1));
    }
}
