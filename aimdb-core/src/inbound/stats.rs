//! A dispatch's counters as atomics, readable from anywhere: the atomics
//! of [`InboundStats`], declared with it in `connector`.

use crate::connector::{DispatchError, InboundStats};

pub use crate::connector::inbound_counters::Counters;

impl Counters {
    /// Mirrors one dispatch's updates of `stats`: the two counters every
    /// dispatch may move, and on a rejection (rare) the whole copy.
    pub(super) fn update(&self, stats: &InboundStats, error: Option<DispatchError>) {
        if error.is_some() {
            self.store(stats);
            return;
        }
        let relaxed = crate::counters::Ordering::Relaxed;
        self.delivered.store(stats.delivered, relaxed);
        self.retained_ignored.store(stats.retained_ignored, relaxed);
    }
}
