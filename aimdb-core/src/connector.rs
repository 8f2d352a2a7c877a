//! The connector contract: what a transport implements and calls.
//!
//! A connector owns one transport and runs **one** future that drives both
//! directions. This module is all a transport author needs to read: the
//! two traits it calls, the [`Message`] it writes out, the
//! [`DispatchError`] with which an inbound frame is rejected, and the
//! counters it may read. It depends on no other routing module;
//! [`inbound::Dispatch`](crate::inbound::Dispatch) implements [`FrameSink`]
//! and [`outbound::Routes`](crate::outbound::Routes) implements
//! [`MessageSource`], so a connector need not name their const parameters.
//!
//! ```text
//!  transport ──(topic, payload)──► FrameSink::dispatch ──► records
//!  records ──► MessageSource (next / poll_next) ──► Message ──► transport
//! ```
//!
//! # What a connector does, in order
//!
//! 1. **On every new connection**: subscribe (a transport with
//!    subscriptions) to exactly the filters [`FrameSink::next_filter`]
//!    enumerates; then, from the second connection on, call
//!    [`MessageSource::replay_latest`] so state (`Latest` records) is sent
//!    again to a peer that may have missed it.
//! 2. **Inbound**: hand each received `(topic, payload)` to
//!    [`FrameSink::dispatch`], or to [`FrameSink::dispatch_retained`] for a
//!    message the transport marks as kept state (MQTT's retained
//!    messages). A rejected frame comes back as a [`DispatchError`], is
//!    counted by the sink, and changes no record; the connector counts it
//!    too and carries on with the next frame.
//! 3. **Outbound**: await [`next`] (or poll [`MessageSource::poll_next`])
//!    and write the [`Message`] it hands out: its topic, payload, and the
//!    delivery the route asks for ([`Message::qos`], [`Message::retain`],
//!    [`Message::urgent`]).
//! 4. **A write that failed** (the connection dropped mid-message): keep
//!    the [`Ready`] of [`MessageSource::poll_ready`] and turn it into the
//!    same message again with [`MessageSource::message`] once a new
//!    connection is up, before pulling anything new. The message stays
//!    intact until the next poll; so a connector that keeps the `Ready`
//!    loses nothing when a connection breaks.
//!
//! # Cancel safety
//!
//! A value is taken from its record only in the poll that hands it out, so
//! a dropped [`next`] loses nothing; `dispatch` is synchronous.
//!
//! # Counters
//!
//! [`InboundStats`] and [`OutboundStats`] are the tables' own counters
//! ([`FrameSink::stats`], [`MessageSource::stats`]). Connectors keep
//! counters of their own, with the same meanings where names match:
//! `received` is an inbound message handed to [`FrameSink::dispatch`]
//! (accepted or not), `rejected` one the sink returned an error for, and
//! `sent` an outbound message the transport accepted.

use core::fmt;
use core::future::poll_fn;
use core::task::{Context, Poll};

use crate::codec::DecodeError;
pub use inbound_counters::InboundStats;

/// One outbound message, borrowed from its source until the next poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'m> {
    /// Index of the route (declaration order).
    pub route: usize,
    /// The topic.
    pub topic: &'m str,
    /// The encoded payload.
    pub payload: &'m [u8],
    /// Values this route lost to `Ring` lag just before this one.
    pub lagged: u64,
    /// Quality of service the route asks for, on transports that have it
    /// (MQTT); see [`QoS`] for the default by record kind.
    pub qos: QoS,
    /// The route carries state: a transport that keeps the last message
    /// per topic (MQTT's retain flag) keeps this one. `true` by default for
    /// `Latest` records, `false` for `Ring` and `Mailbox`.
    pub retain: bool,
    /// The route is urgent: a transport that batches may send it at once.
    pub urgent: bool,
}

/// Quality of service of a message, MQTT's three levels. Transports
/// without acknowledgements (a framed stream) deliver every message the
/// same way and ignore it.
///
/// An outbound route's default follows its record's kind, so each kind
/// keeps its promise across a broker: `Latest` (state) and `Mailbox`
/// (commands) at least once, since a lost state publish leaves a stale
/// retained value and a lost command is never executed (a duplicate is
/// harmless: the same state, or the same latest instruction); `Ring`
/// (streams) at least once too, since a stream counts every value it
/// loses (`lagged`) and a silent loss on the wire would break that.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum QoS {
    /// At most once: fire and forget.
    AtMostOnce,
    /// At least once: retransmitted until acknowledged.
    AtLeastOnce,
    /// Exactly once: the four-packet handshake.
    ExactlyOnce,
}

/// Why an inbound frame was rejected. Each variant has its own counter in
/// [`InboundStats`]; a rejected frame changes no record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DispatchError {
    /// No route matches the topic.
    UnknownTopic,
    /// The topic bytes are not UTF-8.
    TopicNotUtf8,
    /// The topic is empty or contains NUL.
    InvalidTopic,
    /// The published topic contains `+` or `#`.
    WildcardInTopic,
    /// The topic is longer than `MAX_TOPIC_LEN` or deeper than `MAX_LEVELS`.
    TopicTooLong,
    /// The payload did not decode as the record's type.
    MalformedPayload(DecodeError),
    /// The payload is over the link's limit.
    PayloadTooLarge,
    /// A new key found its keyed table full.
    KeyTableFull,
    /// The key level is empty or longer than `KEY_MAX_LEN`.
    KeyInvalid,
    /// The link is schema-checked and the check has not answered yet
    /// (the link is down, or the device's description is still on its
    /// way): see `remote::Checked`. Transient; not a fault.
    SchemaUnverified,
    /// The link is schema-checked and the device describes the record
    /// with another schema than the host's type, or not at all: see
    /// `remote::Checked`. Lasts until the link comes up again with a
    /// matching device.
    SchemaMismatch,
}

impl DispatchError {
    /// The reason in a few words, without the decoder's detail (for logs
    /// that take only static strings, such as `defmt`'s).
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::UnknownTopic => "no inbound route for topic",
            Self::TopicNotUtf8 => "topic is not UTF-8",
            Self::InvalidTopic => "invalid topic",
            Self::WildcardInTopic => "wildcard in published topic",
            Self::TopicTooLong => "topic too long",
            Self::MalformedPayload(_) => "malformed payload",
            Self::PayloadTooLarge => "payload over the route's limit",
            Self::KeyTableFull => "key table full",
            Self::KeyInvalid => "invalid key",
            Self::SchemaUnverified => "record schema not verified yet",
            Self::SchemaMismatch => "record schema differs from the device's",
        }
    }
}

impl fmt::Display for DispatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MalformedPayload(e) => write!(f, "malformed payload: {e}"),
            e => f.write_str(e.as_str()),
        }
    }
}
impl core::error::Error for DispatchError {}

/// The inbound counter set: [`InboundStats`] (re-exported here) and its
/// atomics (public as `inbound::Counters`), from one field list.
pub(crate) mod inbound_counters {
    crate::counter_set! {
        /// A [`Dispatch`](crate::inbound::Dispatch)'s [`InboundStats`] as atomics, readable from
        /// any task, thread or interrupt while the connector that owns the
        /// `Dispatch` runs (its own [`InboundStats`] are only reachable through it). Give
        /// it to [`Builder::counters`](crate::inbound::Builder::counters); the
        /// dispatch is the only writer, so each update is a load and a store (no
        /// read-modify-write: fine on `thumbv6m`). `const fn new()`, for a
        /// `static`.
        pub struct Counters;
        /// Counters of an inbound table: record writes made and each rejection
        /// reason. Counters wrap at `u32::MAX`.
        pub struct InboundStats {
            /// Record writes made.
            delivered,
            /// [`DispatchError::UnknownTopic`](super::DispatchError::UnknownTopic).
            unknown_topic,
            /// [`DispatchError::TopicNotUtf8`](super::DispatchError::TopicNotUtf8).
            topic_not_utf8,
            /// [`DispatchError::InvalidTopic`](super::DispatchError::InvalidTopic).
            invalid_topic,
            /// [`DispatchError::WildcardInTopic`](super::DispatchError::WildcardInTopic).
            wildcard_in_topic,
            /// [`DispatchError::TopicTooLong`](super::DispatchError::TopicTooLong).
            topic_too_long,
            /// [`DispatchError::MalformedPayload`](super::DispatchError::MalformedPayload).
            malformed_payload,
            /// [`DispatchError::PayloadTooLarge`](super::DispatchError::PayloadTooLarge).
            payload_too_large,
            /// [`DispatchError::KeyTableFull`](super::DispatchError::KeyTableFull).
            key_table_full,
            /// [`DispatchError::KeyInvalid`](super::DispatchError::KeyInvalid).
            key_invalid,
            /// [`DispatchError::SchemaUnverified`](super::DispatchError::SchemaUnverified).
            schema_unverified,
            /// [`DispatchError::SchemaMismatch`](super::DispatchError::SchemaMismatch).
            schema_mismatch,
            /// Retained messages skipped by links that do not apply them (not a
            /// rejection; see
            /// [`FrameSink::dispatch_retained`](crate::connector::FrameSink::dispatch_retained)).
            retained_ignored,
        }
    }
}

impl InboundStats {
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
            DispatchError::SchemaUnverified => &mut self.schema_unverified,
            DispatchError::SchemaMismatch => &mut self.schema_mismatch,
        }
    }

    /// Counts one rejection for `e`'s reason.
    pub(crate) fn count(&mut self, e: DispatchError) {
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
            self.schema_unverified,
            self.schema_mismatch,
        ]
        .iter()
        .fold(0u32, |a, b| a.wrapping_add(*b))
    }
}

/// Counters of an outbound table over all its routes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutboundStats {
    /// Messages handed out.
    pub sent: u32,
    /// Values skipped because encoding failed.
    pub encode_errors: u32,
    /// Values skipped because the written topic was too long.
    pub topic_too_long: u32,
    /// Values skipped because the written topic was invalid.
    pub topic_invalid: u32,
    /// Values lost to `Ring` lag.
    pub lagged: u64,
}

/// What a connector hands inbound messages to: implemented by
/// [`inbound::Dispatch`](crate::inbound::Dispatch).
pub trait FrameSink {
    /// Routes one frame into every record whose link matches `topic`;
    /// returns how many records were written. On `Err` the frame is
    /// counted in [`Self::stats`] and no rejected link's record changed.
    fn dispatch(&mut self, topic: &[u8], payload: &[u8]) -> Result<usize, DispatchError>;
    /// [`Self::dispatch`] for a message the transport marks as kept state
    /// (MQTT's retained messages, replayed to each new subscriber): links
    /// that do not apply kept state (by default those into `Mailbox`
    /// records, so an old command is not executed again) skip it. By
    /// default the same as `dispatch`.
    fn dispatch_retained(&mut self, topic: &[u8], payload: &[u8]) -> Result<usize, DispatchError> {
        self.dispatch(topic, payload)
    }
    /// Whether some link of `filter` applies retained messages: a
    /// transport may ask its broker not to send them for a filter where
    /// none does. By default `true`.
    fn wants_retained(&self, filter: &str) -> bool {
        let _ = filter;
        true
    }
    /// The first declared filter at or after position `from`, each filter
    /// once, and the position to continue from; `None` past the last.
    /// Start at 0: enumerating all of them is linear in the route count,
    /// and the borrow ends between calls, so a connector can await (send a
    /// SUBSCRIBE) in between.
    fn next_filter(&self, from: usize) -> Option<(usize, &str)>;
    /// The sink's counters.
    fn stats(&self) -> &InboundStats;
}

/// Proof that a [`MessageSource`] readied a message: turn it into the
/// [`Message`] with [`MessageSource::message`]. Valid until the source is
/// polled again; a connector keeps it across a broken connection to
/// re-send the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ready {
    route: usize,
}

impl Ready {
    /// Route `route` readied the message (for [`MessageSource`]
    /// implementations).
    pub const fn new(route: usize) -> Self {
        Self { route }
    }

    /// The route that readied the message.
    pub const fn route(self) -> usize {
        self.route
    }
}

/// What a connector pulls outbound messages from: implemented by
/// [`outbound::Routes`](crate::outbound::Routes).
///
/// A connector awaits [`next`] or polls [`Self::poll_next`]; the two
/// required methods are split so that a message can be taken again after
/// the borrow of the poll ended (see the [module docs](self)).
pub trait MessageSource {
    /// Readies the next message: `Ready` with the proof, or `Pending` with
    /// the task's waker registered (a write to any routed record wakes it).
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Ready>;
    /// The message `ready` proves, borrowed until the next poll. `ready`
    /// must come from this source's latest `Ready` poll.
    fn message(&self, ready: Ready) -> Message<'_>;
    /// Readies and hands out the next message.
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Message<'_>> {
        match self.poll_ready(cx) {
            Poll::Ready(r) => Poll::Ready(self.message(r)),
            Poll::Pending => Poll::Pending,
        }
    }
    /// After a transport reconnects: every `Latest` route delivers its
    /// current value again (state is re-published); `Ring` and `Mailbox`
    /// routes deliver only what they have not delivered yet.
    fn replay_latest(&mut self);
    /// The source's counters.
    fn stats(&self) -> &OutboundStats;
}

/// Waits for `source`'s next message.
///
/// # Cancel safety
///
/// Cancel-safe: a value is taken from its record only in the poll that
/// returns it, so dropping the future before completion loses nothing.
pub async fn next<S: MessageSource + ?Sized>(source: &mut S) -> Message<'_> {
    let ready = poll_fn(|cx| source.poll_ready(cx)).await;
    source.message(ready)
}
