//! tokio streams as `embedded-io-async` halves, and a connector on a
//! thread of its own (feature `tokio`).
//!
//! The connectors are written once against `embedded-io-async`; these
//! helpers split a tokio stream into owned read and write halves wrapped in
//! [`FromTokio`], ready for [`crate::framed::Framed::run`].
//!
//! Where a connector runs (see aimdb-core's "Threading model"):
//!
//! - `tokio::spawn` on the multi-thread runtime (the default): the tables
//!   and the future are `Send` when the records are (`HostRawMutex`,
//!   `CriticalSectionRawMutex`);
//! - [`run_on_thread`]: the connector is the `block_on` future of a
//!   current-thread runtime on a thread of its own. Writes from other
//!   threads wake that thread directly, with no run queue between them
//!   and no other task on it; the future need not be `Send` (it is built
//!   on that thread), so this also runs connectors over local tables;
//! - a `LocalSet`, for connectors over `NoopRawMutex` records that share a
//!   thread with their writers.

use core::future::Future;

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

/// Runs the future `make` returns as the `block_on` future of a
/// current-thread tokio runtime (I/O and timers enabled) on a new thread
/// called `name`; the handle's `join` returns its output.
///
/// `make` runs on the new thread, so the future it builds (a connector and
/// the tables it borrows) need not be `Send`; only `make` and the output
/// cross threads. Tasks the future spawns run on the same thread.
///
/// ```
/// # fn main() -> std::io::Result<()> {
/// let h = aimdb_connectors::tokio_io::run_on_thread("connector", || async {
///     tokio::time::sleep(std::time::Duration::from_millis(1)).await;
///     7
/// })?;
/// assert_eq!(h.join().unwrap(), 7);
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// The runtime or the thread could not be created.
pub fn run_on_thread<F, Fut>(
    name: &str,
    make: F,
) -> std::io::Result<std::thread::JoinHandle<Fut::Output>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future,
    Fut::Output: Send + 'static,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || rt.block_on(make()))
}
