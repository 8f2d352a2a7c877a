//! The tokio implementation of [`Connect`] (feature `tokio`): the same
//! [`TcpConnect`] the framed connector uses, opening one stream instead of
//! two halves.

use ::tokio::net::TcpStream;
use embedded_io_adapters::tokio_1::FromTokio;

use super::{Connect, ConnectFailure};
use crate::tokio_io::TcpConnect;

impl Connect for TcpConnect {
    type Connection<'c>
        = FromTokio<TcpStream>
    where
        Self: 'c;
    type Error = std::io::Error;

    async fn connect(&mut self) -> Result<Self::Connection<'_>, Self::Error> {
        let stream = TcpStream::connect(self.addr()).await?;
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
