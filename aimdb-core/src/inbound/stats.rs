//! A dispatch's counters as atomics, readable from anywhere.

use portable_atomic::{AtomicU32, Ordering};

use crate::connector::{DispatchError, InboundStats};

/// A [`Dispatch`](super::Dispatch)'s [`InboundStats`] as atomics, readable from
/// any task, thread or interrupt while the connector that owns the
/// `Dispatch` runs (its own [`InboundStats`] are only reachable through it). Give
/// it to [`Builder::counters`](super::Builder::counters); the
/// dispatch is the only writer, so each update is a load and a store (no
/// read-modify-write: fine on `thumbv6m`). `const fn new()`, for a
/// `static`.
#[derive(Debug, Default)]
pub struct Counters {
    delivered: AtomicU32,
    rejected: [AtomicU32; InboundStats::REASONS],
    retained_ignored: AtomicU32,
}

impl Counters {
    /// All zero.
    pub const fn new() -> Self {
        Self {
            delivered: AtomicU32::new(0),
            rejected: [const { AtomicU32::new(0) }; InboundStats::REASONS],
            retained_ignored: AtomicU32::new(0),
        }
    }

    /// The counters now (each read on its own).
    pub fn snapshot(&self) -> InboundStats {
        let r = |i: usize| self.rejected[i].load(Ordering::Relaxed);
        InboundStats {
            delivered: self.delivered.load(Ordering::Relaxed),
            unknown_topic: r(0),
            topic_not_utf8: r(1),
            invalid_topic: r(2),
            wildcard_in_topic: r(3),
            topic_too_long: r(4),
            malformed_payload: r(5),
            payload_too_large: r(6),
            key_table_full: r(7),
            key_invalid: r(8),
            schema_unverified: r(9),
            schema_mismatch: r(10),
            retained_ignored: self.retained_ignored.load(Ordering::Relaxed),
        }
    }

    /// Mirrors one dispatch's updates of `stats`.
    pub(super) fn update(&self, stats: &InboundStats, error: Option<DispatchError>) {
        self.delivered.store(stats.delivered, Ordering::Relaxed);
        self.retained_ignored
            .store(stats.retained_ignored, Ordering::Relaxed);
        if let Some(e) = error {
            self.rejected[InboundStats::index(e)].store(stats.rejected(e), Ordering::Relaxed);
        }
    }
}
