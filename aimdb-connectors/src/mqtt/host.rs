//! tokio implementations of [`Connect`] and `DelayNs` (feature `tokio`).

use core::time::Duration;

use ::tokio::net::{TcpStream, ToSocketAddrs};
use embedded_hal_async::delay::DelayNs;
use embedded_io_adapters::tokio_1::FromTokio;

use super::Connect;

/// Opens a TCP connection to the broker at `addr` (anything tokio resolves:
/// `"host:1883"`, a `SocketAddr`, `(host, port)`).
#[derive(Debug, Clone)]
pub struct TcpConnect<A> {
    addr: A,
}

impl<A: ToSocketAddrs + Clone> TcpConnect<A> {
    /// Connects to `addr` on every attempt (resolved anew each time).
    pub const fn new(addr: A) -> Self {
        Self { addr }
    }

    /// The broker address.
    pub fn addr(&self) -> &A {
        &self.addr
    }
}

impl<A: ToSocketAddrs + Clone> Connect for TcpConnect<A> {
    type Connection<'c>
        = FromTokio<TcpStream>
    where
        Self: 'c;
    type Error = std::io::Error;

    async fn connect(&mut self) -> Result<Self::Connection<'_>, Self::Error> {
        let stream = TcpStream::connect(self.addr.clone()).await?;
        // MQTT packets are small and written whole: no Nagle delay.
        stream.set_nodelay(true)?;
        Ok(FromTokio::new(stream))
    }
}

/// `DelayNs` on tokio's timer.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioDelay;

impl DelayNs for TokioDelay {
    async fn delay_ns(&mut self, ns: u32) {
        ::tokio::time::sleep(Duration::from_nanos(ns.into())).await;
    }
    async fn delay_us(&mut self, us: u32) {
        ::tokio::time::sleep(Duration::from_micros(us.into())).await;
    }
    async fn delay_ms(&mut self, ms: u32) {
        ::tokio::time::sleep(Duration::from_millis(ms.into())).await;
    }
}
