//! Counters a running connector updates and anyone may read.

use aimdb_core::counters::bump;
use portable_atomic::{AtomicBool, AtomicU32, Ordering};

use super::Cause;

aimdb_core::counter_set! {
    /// Live counters of one MQTT connector.
    ///
    /// The connector is the only writer, so each bump is a `load` and a
    /// `store` rather than a read-modify-write: no CAS is needed, which keeps
    /// this usable on `thumbv6m` without a critical-section fallback. Readers on
    /// other tasks, threads or interrupt handlers see each counter move
    /// monotonically (wrapping at `u32::MAX`).
    ///
    /// `const fn new()` (all zero, not connected), so it can live in a
    /// `static`.
    pub struct Counters {
        /// [`Cause::pack`]ed, 0: none yet.
        last_error: AtomicU32 = AtomicU32::new(0),
        connected: AtomicBool = AtomicBool::new(false),
    }
    /// A copy of [`Counters`] at one moment.
    pub struct Stats {
        /// Messages handed to the broker connection (QoS 0 written; QoS 1/2
        /// admitted to the session, which retransmits them until acknowledged).
        sent,
        /// Publishes received from the broker and handed to the frame sink.
        received,
        /// Received publishes the frame sink rejected (unknown topic, malformed
        /// payload, …; the sink's own stats say which).
        rejected,
        /// Outbound messages that could not be sent: too large for the
        /// session buffers, or refused by the broker's limits.
        dropped,
        /// Successful connections after the first one.
        reconnects,
        /// Connection attempts that failed (TCP connect, MQTT handshake,
        /// subscription, or the connect timeout).
        connect_failures,
        /// Connections dropped because the broker stayed silent past the
        /// acknowledgement timeout with publishes unacknowledged
        /// ([`Config::ack_timeout`](super::Config::ack_timeout)).
        ack_timeouts,
        /// Received publishes with an empty payload: MQTT's way to clear a
        /// retained message. Not dispatched, not rejected.
        cleared,
        /// Values outbound `Ring` routes lost before they could be sent
        /// (the reader fell behind, e.g. while the broker was away); wraps.
        lagged,
        /// Writes to the transport (each a system call on a host socket):
        /// with [`Mqtt::with_write_buffer`](super::Mqtt::with_write_buffer),
        /// messages ready together share one; wraps.
        writes,
        /// QoS 1/2 publishes the broker has acknowledged (PUBACK, or PUBCOMP
        /// at QoS 2), whatever its reason code; wraps.
        acked,
        /// QoS 1/2 publishes admitted to the session and not yet
        /// acknowledged, right now: retransmitted on a resumed session,
        /// discarded with a new one.
        in_flight,
        ;
        /// Whether the connector is connected and subscribed right now.
        connected: bool = is_connected,
    }
}

impl Counters {
    /// Messages sent; see [`Stats::sent`].
    pub fn sent(&self) -> u32 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Publishes received; see [`Stats::received`].
    pub fn received(&self) -> u32 {
        self.received.load(Ordering::Relaxed)
    }

    /// Received publishes rejected; see [`Stats::rejected`].
    pub fn rejected(&self) -> u32 {
        self.rejected.load(Ordering::Relaxed)
    }

    /// Outbound messages dropped; see [`Stats::dropped`].
    pub fn dropped(&self) -> u32 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Reconnections; see [`Stats::reconnects`].
    pub fn reconnects(&self) -> u32 {
        self.reconnects.load(Ordering::Relaxed)
    }

    /// Failed connection attempts; see [`Stats::connect_failures`].
    pub fn connect_failures(&self) -> u32 {
        self.connect_failures.load(Ordering::Relaxed)
    }

    /// Connections dropped by the acknowledgement timeout; see
    /// [`Stats::ack_timeouts`].
    pub fn ack_timeouts(&self) -> u32 {
        self.ack_timeouts.load(Ordering::Relaxed)
    }

    /// Cleared retained messages received; see [`Stats::cleared`].
    pub fn cleared(&self) -> u32 {
        self.cleared.load(Ordering::Relaxed)
    }

    /// Values lost to `Ring` lag on the outbound routes; see
    /// [`Stats::lagged`].
    pub fn lagged(&self) -> u32 {
        self.lagged.load(Ordering::Relaxed)
    }

    /// Transport writes; see [`Stats::writes`].
    pub fn writes(&self) -> u32 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Acknowledged QoS 1/2 publishes; see [`Stats::acked`].
    pub fn acked(&self) -> u32 {
        self.acked.load(Ordering::Relaxed)
    }

    /// QoS 1/2 publishes unacknowledged now; see [`Stats::in_flight`].
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Why the last connection attempt failed or the last connection
    /// ended (`None` until the first failure). It stays after a successful
    /// reconnect: it is the last error, not the state (see
    /// [`Self::is_connected`]).
    pub fn last_error(&self) -> Option<Cause> {
        Cause::unpack(self.last_error.load(Ordering::Relaxed))
    }

    /// Whether connected and subscribed right now.
    pub fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Acquire)
    }

    pub(super) fn add_lagged(&self, n: u64) {
        if n > 0 {
            bump(&self.lagged, n as u32);
        }
    }
    /// A QoS 1/2 publish admitted to the session.
    pub(super) fn admit(&self) {
        bump(&self.in_flight, 1);
    }
    /// A PUBACK or PUBCOMP received.
    pub(super) fn ack(&self) {
        bump(&self.acked, 1);
        let n = self.in_flight.load(Ordering::Relaxed);
        self.in_flight.store(n.saturating_sub(1), Ordering::Relaxed);
    }
    /// What is in flight after a CONNACK (a new session keeps only what
    /// it never sent).
    pub(super) fn set_in_flight(&self, n: u16) {
        self.in_flight.store(n.into(), Ordering::Relaxed);
    }
    pub(super) fn set_last_error(&self, cause: Cause) {
        self.last_error.store(cause.pack(), Ordering::Relaxed);
    }
    pub(super) fn set_connected(&self, on: bool) {
        self.connected.store(on, Ordering::Release);
    }
}

#[cfg(feature = "remote")]
crate::counted!(Counters);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_snapshots() {
        static C: Counters = Counters::new();
        bump(&C.sent, 1);
        bump(&C.sent, 1);
        bump(&C.rejected, 1);
        C.set_connected(true);
        let s = C.snapshot();
        assert_eq!((s.sent, s.rejected, s.received), (2, 1, 0));
        assert!(s.connected);
    }
}
