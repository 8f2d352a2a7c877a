//! The connector contract: what a transport implements and calls.
//!
//! A connector owns one transport and runs **one** future that drives both
//! directions:
//!
//! ```text
//!  transport ──(topic, payload)──► FrameSink::dispatch ──► records
//!  records ──► MessageSource::poll_ready / message ──(topic, payload)──► transport
//! ```
//!
//! - **Inbound**: hand each received `(topic, payload)` to
//!   [`FrameSink::dispatch`] (or [`FrameSink::dispatch_retained`] for a
//!   message the transport marks as retained state, as MQTT does). A
//!   transport with subscriptions subscribes to exactly the filters
//!   [`FrameSink::next_filter`] enumerates.
//! - **Outbound**: wait for [`ready`] (or poll
//!   [`MessageSource::poll_ready`]), then take the message with
//!   [`MessageSource::message`] and write it. The message stays current
//!   until the next poll, so a write that failed can be retried from it
//!   after a reconnect; call [`MessageSource::replay_latest`] on every new
//!   connection so state (`Latest` records) is sent again.
//!
//! [`inbound::Dispatch`] implements [`FrameSink`] and
//! [`outbound::Routes`] implements [`MessageSource`], so connectors need not name their const
//! parameters. `aimdb-connectors`' framed-stream and MQTT connectors are
//! written against these two traits only.

use core::future::poll_fn;
use core::task::{Context, Poll};

use crate::inbound::{self, DispatchError};
use crate::outbound::{self, Message};

/// What a connector hands inbound messages to: implemented by
/// [`inbound::Dispatch`].
pub trait FrameSink {
    /// See [`inbound::Dispatch::dispatch`].
    fn dispatch(&mut self, topic: &[u8], payload: &[u8]) -> Result<usize, DispatchError>;
    /// See [`inbound::Dispatch::dispatch_retained`]; by default the same
    /// as `dispatch`.
    fn dispatch_retained(&mut self, topic: &[u8], payload: &[u8]) -> Result<usize, DispatchError> {
        self.dispatch(topic, payload)
    }
    /// See [`inbound::Dispatch::wants_retained`]; by default `true`.
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
    /// See [`inbound::Dispatch::stats`].
    fn stats(&self) -> &inbound::Stats;
}

/// What a connector pulls outbound messages from: implemented by
/// [`outbound::Routes`].
pub trait MessageSource {
    /// Readies the next message (see [`outbound::Routes::poll_next`]); on
    /// `Ready`, [`MessageSource::message`] returns it.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<()>;
    /// The message readied by the last `Ready` poll, if there is one.
    fn message(&self) -> Option<Message<'_>>;
    /// See [`outbound::Routes::replay_latest`].
    fn replay_latest(&mut self);
    /// See [`outbound::Routes::stats`].
    fn stats(&self) -> &outbound::Stats;
}

/// Waits until `source` has a message ready; take it with
/// [`MessageSource::message`].
///
/// # Cancel safety
///
/// Cancel-safe, as [`outbound::Routes::next`]: a message readied before
/// the drop stays current.
pub async fn ready<S: MessageSource + ?Sized>(source: &mut S) {
    poll_fn(|cx| source.poll_ready(cx)).await
}
