//! Dispatch counters.

use portable_atomic::{AtomicU32, Ordering};

use super::DispatchError;

/// Counters kept by a `Dispatch`: frames delivered and each rejection
/// reason. Counters wrap at `u32::MAX`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Record writes made.
    pub delivered: u32,
    /// [`DispatchError::UnknownTopic`].
    pub unknown_topic: u32,
    /// [`DispatchError::TopicNotUtf8`].
    pub topic_not_utf8: u32,
    /// [`DispatchError::InvalidTopic`].
    pub invalid_topic: u32,
    /// [`DispatchError::WildcardInTopic`].
    pub wildcard_in_topic: u32,
    /// [`DispatchError::TopicTooLong`].
    pub topic_too_long: u32,
    /// [`DispatchError::MalformedPayload`].
    pub malformed_payload: u32,
    /// [`DispatchError::PayloadTooLarge`].
    pub payload_too_large: u32,
    /// [`DispatchError::KeyTableFull`].
    pub key_table_full: u32,
    /// [`DispatchError::KeyInvalid`].
    pub key_invalid: u32,
    /// Retained messages skipped by links that do not apply them (not a
    /// rejection; see [`Dispatch::dispatch_retained`](super::Dispatch::dispatch_retained)).
    pub retained_ignored: u32,
}

impl Stats {
    fn slot(&mut self, e: DispatchError) -> &mut u32 {
        match e {
            DispatchError::UnknownTopic => &mut self.unknown_topic,
            DispatchError::TopicNotUtf8 => &mut self.topic_not_utf8,
            DispatchError::InvalidTopic => &mut self.invalid_topic,
            DispatchError::WildcardInTopic => &mut self.wildcard_in_topic,
            DispatchError::TopicTooLong => &mut self.topic_too_long,
            DispatchError::MalformedPayload(_) => &mut self.malformed_payload,
            DispatchError::PayloadTooLarge => &mut self.payload_too_large,
            DispatchError::KeyTableFull => &mut self.key_table_full,
            DispatchError::KeyInvalid => &mut self.key_invalid,
        }
    }

    pub(super) fn count(&mut self, e: DispatchError) {
        let c = self.slot(e);
        *c = c.wrapping_add(1);
    }

    /// The counter for `e`'s reason.
    pub fn rejected(&self, e: DispatchError) -> u32 {
        let mut copy = *self;
        *copy.slot(e)
    }

    /// Sum of all rejection counters.
    pub fn total_rejected(&self) -> u32 {
        [
            self.unknown_topic,
            self.topic_not_utf8,
            self.invalid_topic,
            self.wildcard_in_topic,
            self.topic_too_long,
            self.malformed_payload,
            self.payload_too_large,
            self.key_table_full,
            self.key_invalid,
        ]
        .iter()
        .fold(0u32, |a, b| a.wrapping_add(*b))
    }
}

/// Every reason, in [`Stats`] field order (the index of [`Counters`]'s
/// counters).
const REASONS: usize = 9;

fn index(e: DispatchError) -> usize {
    match e {
        DispatchError::UnknownTopic => 0,
        DispatchError::TopicNotUtf8 => 1,
        DispatchError::InvalidTopic => 2,
        DispatchError::WildcardInTopic => 3,
        DispatchError::TopicTooLong => 4,
        DispatchError::MalformedPayload(_) => 5,
        DispatchError::PayloadTooLarge => 6,
        DispatchError::KeyTableFull => 7,
        DispatchError::KeyInvalid => 8,
    }
}

/// A [`Dispatch`](super::Dispatch)'s [`Stats`] as atomics, readable from
/// any task, thread or interrupt while the connector that owns the
/// `Dispatch` runs (its own [`Stats`] are only reachable through it). Give
/// it to [`Builder::counters`](super::Builder::counters); the
/// dispatch is the only writer, so each update is a load and a store (no
/// read-modify-write: fine on `thumbv6m`). `const fn new()`, for a
/// `static`.
#[derive(Debug, Default)]
pub struct Counters {
    delivered: AtomicU32,
    rejected: [AtomicU32; REASONS],
    retained_ignored: AtomicU32,
}

impl Counters {
    /// All zero.
    pub const fn new() -> Self {
        Self {
            delivered: AtomicU32::new(0),
            rejected: [const { AtomicU32::new(0) }; REASONS],
            retained_ignored: AtomicU32::new(0),
        }
    }

    /// The counters now (each read on its own).
    pub fn snapshot(&self) -> Stats {
        let r = |i: usize| self.rejected[i].load(Ordering::Relaxed);
        Stats {
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
            retained_ignored: self.retained_ignored.load(Ordering::Relaxed),
        }
    }

    /// Mirrors one dispatch's updates of `stats`.
    pub(super) fn update(&self, stats: &Stats, error: Option<DispatchError>) {
        self.delivered.store(stats.delivered, Ordering::Relaxed);
        self.retained_ignored
            .store(stats.retained_ignored, Ordering::Relaxed);
        if let Some(e) = error {
            self.rejected[index(e)].store(stats.rejected(e), Ordering::Relaxed);
        }
    }
}
