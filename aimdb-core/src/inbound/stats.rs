//! Dispatch counters.

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
