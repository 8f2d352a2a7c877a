//! An embassy-net TCP connection as a [`Connect`] (feature `embassy-net`):
//! [`TcpConnect`] opens one `TcpSocket` to a fixed remote endpoint on every
//! connection attempt of either reconnecting connector
//! ([`Framed::run_reconnecting`](crate::framed::Framed::run_reconnecting),
//! the MQTT connector).
//!
//! No heap: the socket's receive and transmit buffers are slices the
//! caller provides (in the task's state, or a `static`/`StaticCell` for a
//! larger pair), and the one socket is reused for every connection. The
//! halves are `TcpSocket::split()`'s, a reader and a writer over the same
//! socket with no lock between them.
//!
//! Each [`Connect::connect`] first resets whatever the socket still holds
//! (the previous connection a connector dropped, or a handshake its
//! connect timeout cut off), then connects with Nagle's algorithm off:
//! both connectors write whole frames or packets and wait for answers, so
//! holding a small segment back for an ACK only adds a round trip.
//! [`Connect::failure`] maps embassy-net's `ConnectError` to the
//! connectors' [`ConnectFailure`]: a reset while connecting is
//! [`Refused`](ConnectFailure::Refused), no route (no address
//! configured yet) [`Unreachable`](ConnectFailure::Unreachable), no answer
//! within [`TcpConnect::timeout`] [`TimedOut`](ConnectFailure::TimedOut).
//!
//! The stack is the firmware's: its driver (an STM32 `Ethernet`, a Wi-Fi
//! chip, a Linux TAP device on a host), its medium and address
//! configuration (static, DHCP) and its runner task. This crate enables
//! only embassy-net's `tcp`, `proto-ipv4` and `medium-ethernet` (smoltcp
//! needs one medium).
//!
//! # Example
//!
//! A device link to a host at 192.0.2.10:7000 on an embassy task, the
//! framed connector reconnecting for ever; the same `connect` goes to
//! `mqtt::Mqtt::new` for the MQTT connector (feature `mqtt`). The stack
//! comes from `embassy_net::new`, its runner on a task of its own.
//!
//! ```no_run
//! use aimdb_connectors::embassy_net::TcpConnect;
//! use aimdb_connectors::framed::{self, Counters, Framed};
//! use aimdb_connectors::reconnect::{Backoff, Stopped};
//! use aimdb_core::codec::Postcard;
//! use aimdb_core::inbound::Dispatch;
//! use aimdb_core::outbound::{self, Routes};
//! use aimdb_core::record::{Latest, Record};
//! use aimdb_core::sync::Readiness;
//! use embassy_net::{Ipv4Address, Stack};
//! use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
//! use aimdb_connectors::clock::EmbassyClock;
//! use embassy_time::Duration;
//!
//! static STATUS: Record<Cs, Latest<u8>, 1> = Record::new("status");
//! static READY: Readiness<1> = Readiness::new();
//! static LINK: Counters = Counters::new();
//!
//! /// The device link over TCP; returns only if the policy gives up.
//! async fn tcp_link(stack: Stack<'_>) -> Stopped {
//!     // The socket's buffers, in this task's state: no heap.
//!     let (mut rx, mut tx) = ([0u8; 256], [0u8; 256]);
//!     let remote = (Ipv4Address::new(192, 0, 2, 10), 7000);
//!     let connect = TcpConnect::new(stack, remote, &mut rx, &mut tx)
//!         // A silent peer is given up after 10 s; keep-alives every 3 s
//!         // keep a live but idle one from looking silent.
//!         .timeout(Duration::from_secs(10))
//!         .keep_alive(Duration::from_secs(3));
//!
//!     let mut status = outbound::Link::new(STATUS.subscribe().unwrap(), "dev/status", Postcard);
//!     let mut payload = [0u8; 16];
//!     let mut b = Routes::<_, 1, 1>::builder(&READY, &mut payload);
//!     b.link(&mut status);
//!     let mut routes = b.build().unwrap();
//!     let mut dispatch = Dispatch::<1, 1>::builder().build().unwrap();
//!     let mut config = framed::Config::new();
//!     config.backoff = Backoff {
//!         min: core::time::Duration::from_millis(200),
//!         max: core::time::Duration::from_secs(5),
//!     };
//!     Framed::<64, 128>::with_sizes(&LINK)
//!         .with_config(config)
//!         .run_reconnecting(connect, EmbassyClock, &mut dispatch, &mut routes)
//!         .await
//! }
//! # fn main() {}
//! ```
//!
//! `examples/device-tap` in this repository runs the demo device's MQTT
//! connector this way over a Linux TAP interface, and
//! `examples/firmware-stm32f767` on a NUCLEO-F767ZI's Ethernet;
//! `tests/embassy_net.rs` checks the reset, the reuse and each failure
//! against a second embassy-net stack.
#![forbid(unsafe_code)]

// `::` because this module shares the crate's name.
use ::embassy_net::tcp::{ConnectError, TcpReader, TcpSocket, TcpWriter};
use ::embassy_net::{IpEndpoint, Stack};
use embassy_time::{with_timeout, Duration};

use crate::connect::{Connect, ConnectFailure};

/// How long [`Connect::connect`] waits for the reset of the previous
/// connection to leave before it connects anyway. The reset only spares
/// the peer its own timeout; a peer that cannot be reached (no ARP
/// answer) would otherwise hold every later attempt.
const RESET_WAIT: Duration = Duration::from_millis(500);

/// A TCP connection to one remote endpoint over an embassy-net stack,
/// opened anew on every [`Connect::connect`] on the same socket and
/// buffers.
///
/// Settings (all off by default, as in embassy-net):
/// [`timeout`](Self::timeout) bounds the handshake and gives up an
/// established connection whose peer has been silent that long;
/// [`keep_alive`](Self::keep_alive) sends TCP keep-alives when the
/// connection is idle.
pub struct TcpConnect<'d> {
    socket: TcpSocket<'d>,
    remote: IpEndpoint,
    timeout: Option<Duration>,
    keep_alive: Option<Duration>,
}

impl<'d> TcpConnect<'d> {
    /// A socket on `stack` that connects to `remote` (an `IpEndpoint`, or
    /// an `(address, port)` pair) with the receive buffer `rx` and the
    /// transmit buffer `tx`.
    ///
    /// The buffers bound what is in flight: `tx` holds what was written and
    /// not yet acknowledged, `rx` what arrived and was not yet read (the
    /// window the peer is offered). A few hundred bytes each suit small
    /// frames; throughput grows with them up to the round trip's worth.
    pub fn new(
        stack: Stack<'d>,
        remote: impl Into<IpEndpoint>,
        rx: &'d mut [u8],
        tx: &'d mut [u8],
    ) -> Self {
        Self {
            socket: TcpSocket::new(stack, rx, tx),
            remote: remote.into(),
            timeout: None,
            keep_alive: None,
        }
    }

    /// Gives up a handshake that has not completed within `timeout`
    /// ([`ConnectFailure::TimedOut`]), and an established connection whose
    /// peer has sent nothing for `timeout` (its reads and writes then fail).
    /// Pair it with a shorter [`keep_alive`](Self::keep_alive) when the
    /// connection may be idle that long.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sends a TCP keep-alive after `interval` without traffic.
    pub fn keep_alive(mut self, interval: Duration) -> Self {
        self.keep_alive = Some(interval);
        self
    }

    /// The endpoint every attempt connects to.
    pub fn remote(&self) -> IpEndpoint {
        self.remote
    }
}

impl core::fmt::Debug for TcpConnect<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TcpConnect")
            .field("remote", &self.remote)
            .field("state", &self.socket.state())
            .field("timeout", &self.timeout)
            .field("keep_alive", &self.keep_alive)
            .finish()
    }
}

/// # Cancel safety
///
/// A dropped `connect` future leaves the socket mid-handshake; the next
/// call resets it first.
impl Connect for TcpConnect<'_> {
    type Connection<'c>
        = (TcpReader<'c>, TcpWriter<'c>)
    where
        Self: 'c;
    type Error = ConnectError;

    async fn connect(&mut self) -> Result<(TcpReader<'_>, TcpWriter<'_>), ConnectError> {
        let socket = &mut self.socket;
        // Closed from any state, with a reset to the old peer if there was
        // one (`flush` waits for it to leave); a closed socket passes at once.
        socket.abort();
        let _ = with_timeout(RESET_WAIT, socket.flush()).await;
        // The handshake is bounded below, by our timer: smoltcp's own
        // timeout would end it as a reset, indistinguishable from a refusal.
        socket.set_timeout(None);
        socket.set_keep_alive(None);
        socket.set_nagle_enabled(false);
        let connected = match self.timeout {
            Some(t) => with_timeout(t, socket.connect(self.remote))
                .await
                .unwrap_or(Err(ConnectError::TimedOut)),
            None => socket.connect(self.remote).await,
        };
        if let Err(e) = connected {
            socket.abort();
            return Err(e);
        }
        socket.set_timeout(self.timeout);
        socket.set_keep_alive(self.keep_alive);
        Ok(socket.split())
    }

    fn failure(error: &ConnectError) -> ConnectFailure {
        failure(error)
    }
}

/// The connectors' word for `error`.
fn failure(error: &ConnectError) -> ConnectFailure {
    match error {
        // A RST in answer to the SYN: nothing listens there.
        ConnectError::ConnectionReset => ConnectFailure::Refused,
        ConnectError::TimedOut => ConnectFailure::TimedOut,
        // smoltcp's `Unaddressable`: no source address for the remote (the
        // interface has no IPv4 address yet, e.g. DHCP still running).
        ConnectError::NoRoute => ConnectFailure::Unreachable,
        // The socket was not closed: cannot happen after `abort`.
        ConnectError::InvalidState => ConnectFailure::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_errors_map_to_the_connectors_causes() {
        let cases = [
            (ConnectError::ConnectionReset, ConnectFailure::Refused),
            (ConnectError::TimedOut, ConnectFailure::TimedOut),
            (ConnectError::NoRoute, ConnectFailure::Unreachable),
            (ConnectError::InvalidState, ConnectFailure::Other),
        ];
        for (e, want) in cases {
            assert_eq!(<TcpConnect<'_> as Connect>::failure(&e), want, "{e:?}");
        }
    }
}
