//! The tokio implementation of [`Connect`] (feature `tokio`).

use std::string::{String, ToString};

use ::tokio::net::TcpStream;
use embedded_io_adapters::tokio_1::FromTokio;

use super::{Connect, ConnectFailure};

/// Opens a TCP connection to the broker at `addr`: `"host:1883"`,
/// `"127.0.0.1:1883"`, `"[::1]:1883"`, or a `SocketAddr`.
///
/// The address is kept as text and resolved anew on every attempt
/// (tokio's resolver, off the async threads for names). Owned text rather
/// than a type parameter: a connector future generic over a borrowed
/// address type (`&'static str`) is not provably `Send` to rustc
/// (higher-ranked lifetimes in an `async fn` in a trait), which made
/// `tokio::spawn(mqtt.run(..))` fail for `TcpConnect::new("host:1883")`.
#[derive(Debug, Clone)]
pub struct TcpConnect {
    addr: String,
}

impl TcpConnect {
    /// Connects to `addr` (its `Display` text) on every attempt.
    pub fn new(addr: impl core::fmt::Display) -> Self {
        Self {
            addr: addr.to_string(),
        }
    }

    /// The broker address.
    pub fn addr(&self) -> &str {
        &self.addr
    }
}

impl Connect for TcpConnect {
    type Connection<'c>
        = FromTokio<TcpStream>
    where
        Self: 'c;
    type Error = std::io::Error;

    async fn connect(&mut self) -> Result<Self::Connection<'_>, Self::Error> {
        let stream = TcpStream::connect(self.addr.as_str()).await?;
        // MQTT packets are small and written whole: no Nagle delay.
        stream.set_nodelay(true)?;
        Ok(FromTokio::new(stream))
    }

    fn failure(error: &std::io::Error) -> ConnectFailure {
        io_failure(error)
    }
}

/// How a TCP connect failed.
pub(super) fn io_failure(error: &std::io::Error) -> ConnectFailure {
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
