//! Opening a transport: the one [`Connect`] trait both reconnecting
//! connectors ([`Framed::run_reconnecting`](crate::framed::Framed::run_reconnecting)
//! and the MQTT connector) call on every connection attempt.
//!
//! A [`Connection`] is split into two halves, an `embedded-io-async`
//! [`Read`] and a [`Write`], which the runner polls together: it reads
//! and writes concurrently. Halves already apart (a UART's RX and TX, an
//! embassy-net `TcpSocket::split()`, tokio's `into_split()`) are a pair
//! `(rx, tx)`; a layer whose state both halves need is a connection of its
//! own whose halves share it (the device TLS session of `tls`); a stream
//! that only splits behind a lock (rustls on hosts) goes through tokio's
//! ([`tokio_io::split`](crate::tokio_io::split)). [`Duplex`] joins two
//! halves again for a client that takes one stream.
//!
//! Implementations here: an always-open `(rx, tx)` pair (a UART; each
//! "connection" is the same two halves), and with features `tokio_io`'s
//! `TcpConnect` / `UnixConnect`, `mqtt::TlsConnect` (`tls`) and
//! `embassy_net::TcpConnect` (`embassy-net`).

use core::fmt;
use core::future::Future;

use embedded_io_async::{ErrorType, Read, ReadReady, Write};

/// An open connection, split by the connector into a receiving and a
/// sending half that it polls together.
///
/// Halves that are already apart (a UART's RX and TX, tokio's
/// `into_split()`, embassy-net's `TcpSocket::split()`) are a pair `(R, W)`;
/// a layer that keeps state both halves need (a TLS session over the
/// pair) is a type of its own whose halves share it.
///
/// # Cancel safety
///
/// The connector drops a read, write or flush future that is pending and
/// calls again later: a half must lose nothing when that happens (a read
/// that returned `Pending` consumed nothing, a write that returned
/// `Pending` took nothing).
pub trait Connection {
    /// The receiving half.
    type Rx<'h>: Read
    where
        Self: 'h;
    /// The sending half; its error type is the receiving half's, so the
    /// two can be joined into one stream ([`Duplex`]).
    type Tx<'h>: Write<Error = <Self::Rx<'h> as ErrorType>::Error>
    where
        Self: 'h;
    /// The two halves, for as long as the connection is driven.
    fn split(&mut self) -> (Self::Rx<'_>, Self::Tx<'_>);
}

/// Two halves that are already apart, lent as they are.
impl<R: Read, W: Write<Error = R::Error>> Connection for (R, W) {
    type Rx<'h>
        = Half<'h, R>
    where
        Self: 'h;
    type Tx<'h>
        = Half<'h, W>
    where
        Self: 'h;
    fn split(&mut self) -> (Half<'_, R>, Half<'_, W>) {
        (Half(&mut self.0), Half(&mut self.1))
    }
}

/// One half of a connection, lent by [`Connection::split`]: its reads and
/// writes are the half's own futures (a `&mut R` would wrap each in a
/// future of its own, a cost on every read and write).
#[derive(Debug)]
pub struct Half<'h, T>(&'h mut T);

impl<T: ErrorType> ErrorType for Half<'_, T> {
    type Error = T::Error;
}

impl<T: Read> Read for Half<'_, T> {
    fn read(&mut self, buf: &mut [u8]) -> impl Future<Output = Result<usize, T::Error>> {
        self.0.read(buf)
    }
}

impl<T: Write> Write for Half<'_, T> {
    fn write(&mut self, buf: &[u8]) -> impl Future<Output = Result<usize, T::Error>> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> impl Future<Output = Result<(), T::Error>> {
        self.0.flush()
    }
}

impl<T: ReadReady> ReadReady for Half<'_, T> {
    fn read_ready(&mut self) -> Result<bool, T::Error> {
        self.0.read_ready()
    }
}

/// Opens a fresh connection, once per connection attempt.
///
/// The connection may borrow from the implementation (an embassy-net
/// socket borrows its RX/TX buffers, a UART pair lends its halves), hence
/// the lifetime.
///
/// # Cancel safety
///
/// A connector may drop the future of [`Connect::connect`] (at its
/// connect timeout); an implementation must leave itself able to connect
/// again after that (close a half-open socket on the next attempt).
// `async fn` in a public trait gives no `Send` bound on its future for
// generic callers; a connector future is still `Send` for a concrete
// `Connect` whose future is (`TcpConnect`, `TlsConnect`: rustc sees
// through the concrete type; pinned in tests/auto_traits.rs). Embassy
// sockets need no `Send` at all.
#[allow(async_fn_in_trait)]
pub trait Connect {
    /// An open connection.
    type Connection<'c>: Connection
    where
        Self: 'c;
    /// Why opening failed.
    type Error: fmt::Debug;
    /// Opens the connection (TCP connect, TLS handshake, …).
    async fn connect(&mut self) -> Result<Self::Connection<'_>, Self::Error>;
    /// How `error` failed, for the connectors' `last_error`; by default
    /// [`ConnectFailure::Other`].
    fn failure(error: &Self::Error) -> ConnectFailure {
        let _ = error;
        ConnectFailure::Other
    }
}

/// How opening a transport failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ConnectFailure {
    /// Nothing listens at the address (TCP connection refused).
    Refused,
    /// The attempt timed out.
    TimedOut,
    /// No route to the host or network.
    Unreachable,
    /// TCP connected, the TLS handshake failed.
    Tls,
    /// Anything else.
    Other,
}

impl fmt::Display for ConnectFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Refused => "connection refused",
            Self::TimedOut => "timed out",
            Self::Unreachable => "unreachable",
            Self::Tls => "TLS handshake failed",
            Self::Other => "transport error",
        })
    }
}

/// An always-open pair of halves (a UART): every connection is the same
/// two halves, lent. Whatever the previous connection left unread is
/// discarded first (a partial frame or packet would otherwise be read as
/// the start of the new connection's first one), which is why the
/// receiving half must be [`ReadReady`].
impl<R, W> Connect for (R, W)
where
    R: Read + ReadReady,
    W: Write<Error = R::Error>,
{
    type Connection<'c>
        = Lent<'c, R, W>
    where
        Self: 'c;
    type Error = R::Error;
    async fn connect(&mut self) -> Result<Lent<'_, R, W>, R::Error> {
        let mut junk = [0u8; 32];
        // Until a read would wait; a closed stream (reads 0 at once) has
        // nothing left to drain.
        while self.0.read_ready()? {
            if self.0.read(&mut junk).await? == 0 {
                break;
            }
        }
        Ok(Lent {
            rx: &mut self.0,
            tx: &mut self.1,
        })
    }
}

/// The connection of an always-open pair: its two halves, lent (each as a
/// [`Half`]; a pair of references would lend references to them).
#[derive(Debug)]
pub struct Lent<'c, R, W> {
    rx: &'c mut R,
    tx: &'c mut W,
}

impl<R: Read, W: Write<Error = R::Error>> Connection for Lent<'_, R, W> {
    type Rx<'h>
        = Half<'h, R>
    where
        Self: 'h;
    type Tx<'h>
        = Half<'h, W>
    where
        Self: 'h;
    fn split(&mut self) -> (Half<'_, R>, Half<'_, W>) {
        (Half(&mut *self.rx), Half(&mut *self.tx))
    }
}

/// Two halves as one `Read + Write` stream, for a client (the MQTT
/// session) that takes one.
#[derive(Debug)]
pub struct Duplex<R, W> {
    /// The receiving half.
    pub rx: R,
    /// The sending half.
    pub tx: W,
}

impl<R: Read, W: Write<Error = R::Error>> ErrorType for Duplex<R, W> {
    type Error = R::Error;
}

impl<R: Read, W: Write<Error = R::Error>> Read for Duplex<R, W> {
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize, Self::Error> {
        self.rx.read(buf).await
    }
}

impl<R: Read, W: Write<Error = R::Error>> Write for Duplex<R, W> {
    async fn write(&mut self, buf: &[u8]) -> Result<usize, Self::Error> {
        self.tx.write(buf).await
    }
    async fn flush(&mut self) -> Result<(), Self::Error> {
        self.tx.flush().await
    }
}

/// How a TCP connect failed, from its `std::io::Error`.
#[cfg(feature = "tokio")]
pub(crate) fn io_failure(error: &std::io::Error) -> ConnectFailure {
    use std::io::ErrorKind as K;
    match error.kind() {
        K::ConnectionRefused => ConnectFailure::Refused,
        K::TimedOut => ConnectFailure::TimedOut,
        K::HostUnreachable | K::NetworkUnreachable | K::AddrNotAvailable => {
            ConnectFailure::Unreachable
        }
        _ => ConnectFailure::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loopback::Pair;
    use embassy_sync::blocking_mutex::raw::NoopRawMutex;
    use futures::executor::block_on;

    #[test]
    fn a_pair_of_halves_drains_what_the_last_connection_left_unread() {
        let pair = Pair::<NoopRawMutex, 128>::new();
        let (mut peer_rx, mut peer_tx) = pair.b();
        let mut halves = pair.a();
        block_on(async {
            // Half a packet the previous connection never read.
            peer_tx.write_all(&[0x30; 40]).await.unwrap();
            let mut conn = halves.connect().await.unwrap();
            let (mut rx, mut tx) = conn.split();
            assert_eq!(rx.read_ready(), Ok(false), "left-overs drained");
            peer_tx.write_all(b"new").await.unwrap();
            let mut buf = [0u8; 8];
            assert_eq!(rx.read(&mut buf).await.unwrap(), 3);
            assert_eq!(&buf[..3], b"new");
            tx.write_all(b"out").await.unwrap();
            assert_eq!(peer_rx.read(&mut buf).await.unwrap(), 3);
        });
    }

    #[test]
    fn a_closed_pair_connects_without_draining_for_ever() {
        let pair = Pair::<NoopRawMutex, 16>::new();
        let mut halves = pair.a();
        pair.close();
        block_on(async {
            let mut conn = halves.connect().await.unwrap();
            let (mut rx, _) = conn.split();
            let mut buf = [0u8; 4];
            assert_eq!(rx.read(&mut buf).await.unwrap(), 0, "still closed");
        });
    }
}
