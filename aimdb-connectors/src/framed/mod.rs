//! The framed byte-stream connector: UART, TCP, Unix sockets, pipes —
//! anything with `embedded-io-async` [`Read`] and [`Write`] halves.
//!
//! Written once against the `embedded-io-async` traits: embassy UARTs and
//! embassy-net sockets implement them natively; tokio streams are adapted
//! (feature `tokio`, see [`crate::tokio_io`]); the in-memory
//! [`crate::loopback`] pair implements them for tests and benches.
//!
//! [`Framed::run`] is one future that drives both directions of one
//! connection:
//!
//! - **in**: bytes read from the transport are decoded frame by frame
//!   ([`frame::Decoder`]) and handed to a [`FrameSink`] (an
//!   `InboundDispatch`);
//! - **out**: messages pulled from a [`MessageSource`] (an `OutboundRoutes`)
//!   are encoded into the transmit buffer and written. Messages that are
//!   already ready are batched into one write, up to the buffer's size.
//!
//! Wire format: see [`frame`] (COBS around postcard `(topic, payload)`,
//! `0x00`-delimited). The largest frame is set by the const parameters:
//! `RX` bytes of decoded frame in, `TX` bytes of encoded frames out
//! ([`frame::MAX_FRAME`] and [`frame::MAX_ENCODED`] are the defaults).
//!
//! Bad input never ends the connection: a broken, malformed or oversized
//! frame is counted in [`Stats`] and skipped, a frame the dispatcher
//! rejects is counted there and in the dispatcher's own stats, and the
//! decoder is back in step at the next delimiter. Only transport errors and
//! end-of-stream end [`Framed::run`]; the caller reconnects, calls
//! [`Framed::reset`] and [`MessageSource::replay_latest`], and runs again.
//!
//! No allocation, no task per route, no boxed future.

pub mod frame;

use core::fmt;
use core::future::poll_fn;
use core::pin::pin;
use core::task::Poll;

use aimdb_core::inbound::FrameSink;
use aimdb_core::outbound::MessageSource;
use embassy_futures::select::{select, Either};
use embedded_io_async::{ErrorKind, Read, Write};
use portable_atomic::{AtomicU32, Ordering};

use frame::{Decoder, Event, FrameError};
pub use frame::{MAX_ENCODED, MAX_FRAME};

/// Why [`Framed::run`] ended. Bad frames never end it; only the transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The peer closed the stream (a read returned 0 bytes).
    Closed,
    /// Reading failed.
    Read(ErrorKind),
    /// Writing failed (or wrote 0 bytes).
    Write(ErrorKind),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Closed => f.write_str("connection closed by peer"),
            Self::Read(k) => write!(f, "read failed: {k:?}"),
            Self::Write(k) => write!(f, "write failed: {k:?}"),
        }
    }
}

impl core::error::Error for Error {}

/// Counters of one connector, readable from any task while it runs.
///
/// Each counter has one writer (the connector), so increments are a load
/// and a store: no compare-and-swap needed on Cortex-M0.
#[derive(Debug, Default)]
pub struct Stats {
    frames_in: AtomicU32,
    frames_out: AtomicU32,
    bytes_in: AtomicU32,
    bytes_out: AtomicU32,
    oversized: AtomicU32,
    cobs_errors: AtomicU32,
    malformed: AtomicU32,
    rejected: AtomicU32,
    too_large_out: AtomicU32,
}

/// A copy of [`Stats`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Snapshot {
    /// Frames decoded and accepted by the dispatcher.
    pub frames_in: u32,
    /// Frames written.
    pub frames_out: u32,
    /// Bytes read (wrapping).
    pub bytes_in: u32,
    /// Bytes written (wrapping).
    pub bytes_out: u32,
    /// Inbound frames over the receive buffer, dropped.
    pub oversized: u32,
    /// Inbound frames with broken COBS, dropped.
    pub cobs_errors: u32,
    /// Inbound frames that are not a postcard `(topic, payload)`, dropped.
    pub malformed: u32,
    /// Inbound frames the dispatcher rejected (its stats say why).
    pub rejected: u32,
    /// Outbound messages too large for the transmit buffer, skipped.
    pub too_large_out: u32,
}

impl Snapshot {
    /// Inbound frames dropped for any reason.
    pub fn dropped_in(&self) -> u32 {
        self.oversized + self.cobs_errors + self.malformed + self.rejected
    }
}

fn bump(c: &AtomicU32, by: u32) {
    c.store(
        c.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

impl Stats {
    /// All zero; `const` so it can live in a `static`.
    pub const fn new() -> Self {
        Self {
            frames_in: AtomicU32::new(0),
            frames_out: AtomicU32::new(0),
            bytes_in: AtomicU32::new(0),
            bytes_out: AtomicU32::new(0),
            oversized: AtomicU32::new(0),
            cobs_errors: AtomicU32::new(0),
            malformed: AtomicU32::new(0),
            rejected: AtomicU32::new(0),
            too_large_out: AtomicU32::new(0),
        }
    }

    /// The counters now.
    pub fn snapshot(&self) -> Snapshot {
        let r = |c: &AtomicU32| c.load(Ordering::Relaxed);
        Snapshot {
            frames_in: r(&self.frames_in),
            frames_out: r(&self.frames_out),
            bytes_in: r(&self.bytes_in),
            bytes_out: r(&self.bytes_out),
            oversized: r(&self.oversized),
            cobs_errors: r(&self.cobs_errors),
            malformed: r(&self.malformed),
            rejected: r(&self.rejected),
            too_large_out: r(&self.too_large_out),
        }
    }

    fn frame_error(&self, e: FrameError) {
        bump(
            match e {
                FrameError::Oversized => &self.oversized,
                FrameError::Cobs => &self.cobs_errors,
                _ => &self.malformed,
            },
            1,
        );
    }
}

/// Bytes read from the transport per `read` call.
const READ_CHUNK: usize = 64;

/// The framed-stream connector's state: a receive decoder of `RX` bytes and
/// a transmit buffer of `TX` bytes, kept across reconnects.
///
/// ```
/// use aimdb_connectors::framed::{Framed, Stats};
/// static STATS: Stats = Stats::new();
/// let framed = Framed::<256, 300>::new(&STATS);
/// # let _ = framed;
/// ```
pub struct Framed<'s, const RX: usize = MAX_FRAME, const TX: usize = MAX_ENCODED> {
    decoder: Decoder<RX>,
    tx: [u8; TX],
    rx_chunk: [u8; READ_CHUNK],
    stats: &'s Stats,
}

impl<'s, const RX: usize, const TX: usize> Framed<'s, RX, TX> {
    /// A connector counting into `stats`.
    pub const fn new(stats: &'s Stats) -> Self {
        Self {
            decoder: Decoder::new(),
            tx: [0; TX],
            rx_chunk: [0; READ_CHUNK],
            stats,
        }
    }

    /// The counters.
    pub fn stats(&self) -> &'s Stats {
        self.stats
    }

    /// Forgets a partly received frame; call before running on a new
    /// connection.
    pub fn reset(&mut self) {
        self.decoder.reset();
    }

    /// Drives one connection in both directions until the transport fails
    /// or the peer closes it. Never returns for bad input.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may lose a partly read frame (the decoder
    /// resynchronises) and a partly written batch of outbound frames; the
    /// routes' buffers keep what they promise (`Latest` re-sends with
    /// [`MessageSource::replay_latest`]).
    pub async fn run<R, W, D, S>(
        &mut self,
        rx: R,
        tx: W,
        inbound: &mut D,
        outbound: &mut S,
    ) -> Error
    where
        R: Read,
        W: Write,
        D: FrameSink + ?Sized,
        S: MessageSource + ?Sized,
    {
        let Self {
            decoder,
            tx: tx_buf,
            rx_chunk,
            stats,
        } = self;
        let stats: &Stats = stats;
        let read = pin!(read_loop(rx, decoder, rx_chunk, inbound, stats));
        let write = pin!(write_loop(tx, tx_buf, outbound, stats));
        match select(read, write).await {
            Either::First(e) | Either::Second(e) => e,
        }
    }
}

impl<const RX: usize, const TX: usize> fmt::Debug for Framed<'_, RX, TX> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Framed")
            .field("rx", &RX)
            .field("tx", &TX)
            .field("stats", &self.stats.snapshot())
            .finish()
    }
}

async fn read_loop<R: Read, D: FrameSink + ?Sized, const RX: usize>(
    mut rx: R,
    decoder: &mut Decoder<RX>,
    chunk: &mut [u8; READ_CHUNK],
    inbound: &mut D,
    stats: &Stats,
) -> Error {
    loop {
        let n = match rx.read(chunk).await {
            Ok(0) => return Error::Closed,
            Ok(n) => n,
            Err(e) => return Error::Read(embedded_io_async::Error::kind(&e)),
        };
        bump(&stats.bytes_in, n as u32);
        let mut rest = &chunk[..n];
        loop {
            match decoder.push(rest) {
                Event::NeedMore => break,
                Event::Frame(f, used) => {
                    match inbound.dispatch(f.topic, f.payload) {
                        Ok(_) => bump(&stats.frames_in, 1),
                        Err(_) => bump(&stats.rejected, 1),
                    }
                    rest = &rest[used..];
                }
                Event::Error(e, used) => {
                    stats.frame_error(e);
                    rest = &rest[used..];
                }
            }
        }
    }
}

async fn write_loop<W: Write, S: MessageSource + ?Sized>(
    mut tx: W,
    buf: &mut [u8],
    outbound: &mut S,
    stats: &Stats,
) -> Error {
    loop {
        poll_fn(|cx| outbound.poll_ready(cx)).await;
        let mut len = 0;
        let mut frames = 0;
        loop {
            let m = outbound.message();
            match frame::encode(m.topic, m.payload, &mut buf[len..]) {
                Ok(n) => {
                    len += n;
                    frames += 1;
                }
                Err(_) if len > 0 => {
                    // The batch is full: send it, then this message alone.
                    if let Err(e) = send(&mut tx, &buf[..len], frames, stats).await {
                        return e;
                    }
                    (len, frames) = (0, 0);
                    continue;
                }
                Err(_) => bump(&stats.too_large_out, 1),
            }
            // Batch whatever is ready right now; a pending poll registers
            // this task's waker, which is what the next wait needs anyway.
            let more = poll_fn(|cx| Poll::Ready(outbound.poll_ready(cx).is_ready())).await;
            if !more {
                break;
            }
        }
        if len > 0 {
            if let Err(e) = send(&mut tx, &buf[..len], frames, stats).await {
                return e;
            }
        }
    }
}

async fn send<W: Write>(tx: &mut W, bytes: &[u8], frames: u32, stats: &Stats) -> Result<(), Error> {
    let kind = |e: W::Error| Error::Write(embedded_io_async::Error::kind(&e));
    // Not `write_all`: it panics on a writer that returns `Ok(0)`.
    let mut rest = bytes;
    while !rest.is_empty() {
        match tx.write(rest).await {
            Ok(0) => return Err(Error::Write(ErrorKind::WriteZero)),
            Ok(n) => rest = &rest[n.min(rest.len())..],
            Err(e) => return Err(kind(e)),
        }
    }
    tx.flush().await.map_err(kind)?;
    bump(&stats.bytes_out, bytes.len() as u32);
    bump(&stats.frames_out, frames);
    Ok(())
}
