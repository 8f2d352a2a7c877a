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
//!
//! A framed connector over TCP, `tokio::spawn`ed on the multi-thread
//! runtime with the reconnect loop, and a peer that accepts it (both on
//! loopback):
//!
//! ```
//! use aimdb_connectors::framed::{self, Counters, Framed};
//! use aimdb_connectors::reconnect::Backoff;
//! use aimdb_connectors::tokio_io::{self, TcpConnect, TokioClock};
//! use aimdb_core::codec::Postcard;
//! use aimdb_core::inbound::Dispatch;
//! use aimdb_core::outbound::{self, Routes};
//! use aimdb_core::record::{Latest, Record};
//! use aimdb_core::sync::{HostRawMutex, Readiness};
//! use embedded_io_async::Read;
//! use std::time::Duration;
//!
//! static TEMP: Record<HostRawMutex, Latest<i16>, 1> = Record::new("temp");
//! static READY: Readiness<1> = Readiness::new();
//! static COUNTERS: Counters = Counters::new();
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
//! let connect = TcpConnect::new(listener.local_addr().unwrap());
//!
//! // The tables live as long as the task: leak them at start-up.
//! let link = Box::leak(Box::new(outbound::Link::new(TEMP.subscribe().unwrap(), "temp", Postcard)));
//! let payload = Box::leak(Box::new([0u8; 16]));
//! let mut b = Routes::<_, 1, 1>::builder(&READY, payload);
//! b.link(link);
//! let mut routes = b.build().unwrap();
//! let mut dispatch = Dispatch::<1, 1>::builder().build().unwrap();
//! let mut config = framed::Config::new();
//! config.backoff = Backoff { min: Duration::from_millis(10), max: Duration::from_secs(1) };
//! tokio::spawn(async move {
//!     Framed::new(&COUNTERS)
//!         .with_config(config)
//!         .run_reconnecting(connect, TokioClock::new(), &mut dispatch, &mut routes)
//!         .await
//! });
//!
//! // The peer: accept, read one frame.
//! let (stream, _) = listener.accept().await.unwrap();
//! let (mut rx, _tx) = tokio_io::tcp(stream);
//! TEMP.write(215);
//! let (mut buf, mut dec) = ([0u8; 64], framed::frame::Decoder::<64>::new());
//! loop {
//!     let n = rx.read(&mut buf).await.unwrap();
//!     match dec.push(&buf[..n]) {
//!         framed::frame::Event::NeedMore => continue,
//!         framed::frame::Event::Frame(f, _) => {
//!             assert_eq!((f.topic, f.payload), (&b"temp"[..], &[0xae, 0x03][..]));
//!             break;
//!         }
//!         other => panic!("{other:?}"),
//!     }
//! }
//! # }
//! ```

use core::future::Future;
use core::time::Duration;

use std::path::PathBuf;
use std::string::{String, ToString};

pub use embedded_io_adapters::tokio_1::FromTokio;
use tokio::io::{AsyncRead, AsyncWrite, ReadHalf, WriteHalf};
use tokio::net::{tcp, unix, TcpStream, UnixStream};

use crate::clock::{Clock, Instant};
use crate::connect::{io_failure, Connect, ConnectFailure};

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

/// Connects to a TCP address on every connection attempt:
/// `"host:port"`, `"127.0.0.1:1883"`, `"[::1]:7000"`, or a `SocketAddr`
/// (its text, resolved anew each time, off the async threads for names).
/// Its halves are [`tcp()`]'s (Nagle off), for either connector.
///
/// Owned text rather than a type parameter: a connector future generic
/// over a borrowed address type (`&'static str`) is not provably `Send` to
/// rustc (higher-ranked lifetimes in an `async fn` in a trait), which made
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

    /// The address.
    pub fn addr(&self) -> &str {
        &self.addr
    }
}

impl Connect for TcpConnect {
    type Connection<'c> = (
        FromTokio<tcp::OwnedReadHalf>,
        FromTokio<tcp::OwnedWriteHalf>,
    );
    type Error = std::io::Error;
    async fn connect(&mut self) -> std::io::Result<Self::Connection<'_>> {
        Ok(tcp(TcpStream::connect(self.addr.as_str()).await?))
    }
    fn failure(error: &std::io::Error) -> ConnectFailure {
        io_failure(error)
    }
}

/// Connects to a Unix-domain socket on every attempt of
/// [`Framed::run_reconnecting`](crate::framed::Framed::run_reconnecting).
#[derive(Debug, Clone)]
pub struct UnixConnect {
    path: PathBuf,
}

impl UnixConnect {
    /// Connects to the socket at `path` on every attempt.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }
}

impl Connect for UnixConnect {
    type Connection<'c> = (
        FromTokio<unix::OwnedReadHalf>,
        FromTokio<unix::OwnedWriteHalf>,
    );
    type Error = std::io::Error;
    async fn connect(&mut self) -> std::io::Result<Self::Connection<'_>> {
        Ok(unix(UnixStream::connect(&self.path).await?))
    }
    fn failure(error: &std::io::Error) -> ConnectFailure {
        io_failure(error)
    }
}

/// The connectors' [`Clock`] on tokio's timer: `now` is tokio's
/// `Instant` (so paused time in tests applies), sleeps are tokio sleeps.
/// Instants count from the clock's creation; copies share it.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    epoch: tokio::time::Instant,
}

impl TokioClock {
    /// A clock starting now.
    pub fn new() -> Self {
        Self {
            epoch: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Instant {
        let us = self.epoch.elapsed().as_micros();
        Instant::from_micros(u64::try_from(us).unwrap_or(u64::MAX))
    }
    async fn sleep_until(&self, at: Instant) {
        match self
            .epoch
            .checked_add(Duration::from_micros(at.as_micros()))
        {
            Some(t) if at != Instant::MAX => tokio::time::sleep_until(t).await,
            _ => core::future::pending().await,
        }
    }
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
