//! tokio streams as `embedded-io-async` halves (feature `tokio`).
//!
//! The connectors are written once against `embedded-io-async`; these
//! helpers split a tokio stream into owned read and write halves wrapped in
//! [`FromTokio`], ready for [`crate::framed::Framed::run`].

pub use embedded_io_adapters::tokio_1::FromTokio;
use tokio::io::{AsyncRead, AsyncWrite, ReadHalf, WriteHalf};
use tokio::net::{tcp, unix, TcpStream, UnixStream};

/// Read and write halves of a TCP stream (no lock between them).
pub fn tcp(
    stream: TcpStream,
) -> (
    FromTokio<tcp::OwnedReadHalf>,
    FromTokio<tcp::OwnedWriteHalf>,
) {
    // Frames are written whole and small; do not let Nagle hold them back.
    let _ = stream.set_nodelay(true);
    let (r, w) = stream.into_split();
    (FromTokio::new(r), FromTokio::new(w))
}

/// Read and write halves of a Unix-domain stream.
pub fn unix(
    stream: UnixStream,
) -> (
    FromTokio<unix::OwnedReadHalf>,
    FromTokio<unix::OwnedWriteHalf>,
) {
    let (r, w) = stream.into_split();
    (FromTokio::new(r), FromTokio::new(w))
}

/// Read and write halves of any tokio stream (a serial port, a pty, a
/// duplex pipe), split through tokio's lock.
pub fn split<T: AsyncRead + AsyncWrite>(
    stream: T,
) -> (FromTokio<ReadHalf<T>>, FromTokio<WriteHalf<T>>) {
    let (r, w) = tokio::io::split(stream);
    (FromTokio::new(r), FromTokio::new(w))
}
