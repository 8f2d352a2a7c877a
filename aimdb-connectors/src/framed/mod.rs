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
//!   already ready are batched into one write, up to the buffer's size;
//!   urgent messages ([`Message::urgent`](aimdb_core::connector::Message::urgent))
//!   go ahead of the normal ones in the batch.
//!
//! Wire format: see [`frame`] (COBS around postcard `(topic, payload)`,
//! `0x00`-delimited). The largest frame is set by the const parameters:
//! `RX` bytes of decoded frame in, `TX` bytes of encoded frames out
//! ([`frame::MAX_FRAME`] and [`frame::MAX_ENCODED`] are the defaults).
//!
//! Bad input never ends the connection: a broken, malformed or oversized
//! frame is counted in [`Counters`] and skipped, a frame the dispatcher
//! rejects is counted there and in the dispatcher's own stats, and the
//! decoder is back in step at the next delimiter. Only transport errors,
//! end-of-stream and a silent peer (with the heartbeat, see below) end
//! [`Framed::run`]; the caller reconnects, calls
//! [`Framed::reset`] and [`MessageSource::replay_latest`], and runs again.
//! [`Framed::run_reconnecting`] is that loop, for a [`Connect`] that opens
//! each connection, with the backoff and policy of [`crate::reconnect`].
//!
//! # Outbound frames across a broken connection
//!
//! A frame counts as sent once the transport's `write` has accepted its
//! last byte (its delimiter). Frames the transport has not accepted when a
//! run ends (a write error, the peer closing, or the future dropped) stay
//! in the transmit buffer, and the next [`Framed::run`] sends them first,
//! whole and in their original order, before anything new; a frame whose
//! first bytes did go out is re-sent from its start, after a lone `0x00`
//! so that a peer which kept the fragment drops it as one bad frame (a
//! peer that called [`Framed::reset`] sees an empty frame, which is
//! skipped silently). A message taken from its route that did not fit the
//! batch is kept too (its [`Ready`] is kept) and
//! encoded first on the next run.
//!
//! So on a transport that delivers every byte it accepted (a UART, the
//! in-memory [`crate::loopback`] pair, a TCP connection closed in an
//! orderly way) each outbound message is delivered **exactly once, in
//! order**, across any number of broken connections, provided the route's
//! buffer holds what was written meanwhile (`Ring<N>`: at most `N` values
//! between two pulls; beyond that the oldest are lost and counted exactly,
//! see [`aimdb_core::connector::Message::lagged`]). Bytes a transport
//! accepted and then lost (a TCP reset with data in the kernel's buffers)
//! are not re-sent: this protocol has no acknowledgements. The retained
//! frames are always re-sent on the *same* `Framed` with the *same*
//! message source; the buffer costs no memory beyond the `TX` bytes it
//! already had.
//!
//! # Heartbeat and link state
//!
//! A link can stay quiet for long: a device with nothing to report, or a
//! peer that is gone without closing the stream (a UART never closes). The
//! optional heartbeat ([`Config::heartbeat`], a [`Heartbeat`]) tells the
//! two apart:
//!
//! - after [`Heartbeat::interval`] with nothing written, the connector
//!   writes a **keep-alive** frame, and it writes one at the start of
//!   every connection (a hello), so the peer learns our sequence at once;
//! - a peer from which nothing arrived for longer than
//!   [`Heartbeat::timeout`] is gone: the run ends with
//!   [`Error::PeerSilent`] (counted in `peer_silent`), and
//!   [`Framed::run_reconnecting`] reconnects as after any drop.
//!
//! The heartbeat is **off by default**: a peer that does not send
//! keep-alives would be cut off whenever it is quiet. Turn it on at both
//! ends, with a timeout of at least twice the peer's interval. It costs one
//! keep-alive frame per idle interval, 5 bytes on the wire while the
//! sequence is below 128 (at most 14 bytes); traffic that flows anyway
//! sends none. The heartbeat needs a timer: it runs in
//! [`Framed::run_with_timer`] (one connection, for a UART that stays open)
//! and in [`Framed::run_reconnecting`] (timed by its `delay`);
//! [`Framed::run`] has no timer and neither sends keep-alives nor times
//! out.
//!
//! A keep-alive is a frame with an **empty topic** whose payload is the
//! postcard varint of the sender's birth sequence. Every connector absorbs
//! the keep-alives it receives, whatever its own configuration: they are
//! never handed to the dispatcher (which accepts no empty topic anyway),
//! and are counted apart (`heartbeats_sent`, `heartbeats_received`), not in
//! `sent`, `received` or `rejected`.
//!
//! Given a [`record::Sink<LinkState>`](aimdb_core::record::Sink) (a
//! `Latest<LinkState>` record) with [`Framed::with_link`], the connector
//! reports its link there, so a task that acts on the link awaits the
//! record's reader:
//!
//! - `connecting` before each connection attempt of
//!   [`Framed::run_reconnecting`];
//! - `online` when the link is up: with the heartbeat, when the first
//!   frame from the peer arrives; without it, when the run starts;
//! - `offline` with its [`Cause`] when a run ends: `Closed` at end of
//!   stream, `Io` for a transport error, `Silent` for the heartbeat
//!   timeout.
//!
//! Each state is written only when it changes. The **sequence** in it is
//! the peer's birth sequence once the peer sent one in this connection
//! (so a gateway can publish a device's presence with the device's own
//! sequence), else our own. Our own birth sequence starts at
//! [`Config::first_seq`] (default 1) and grows by one per connection; it
//! starts again when the connector is created (after a reboot) unless the
//! application seeds `first_seq` from storage. A peer whose sequence
//! changes while the link is up (it restarted on a UART that never
//! closed) is reported `online` again with its new sequence.
//!
//! No allocation, no task per route, no boxed future.

pub mod frame;

use core::fmt;
use core::future::poll_fn;
use core::pin::pin;
use core::task::Poll;

use core::time::Duration;

use aimdb_core::connector::{FrameSink, MessageSource, Ready};
use aimdb_core::link::{Cause, LinkState};
use aimdb_core::record::Sink;
use embassy_futures::select::{select3, Either3};
use embedded_hal_async::delay::DelayNs;
use embedded_io_async::{ErrorKind, Read, Write};
use portable_atomic::{AtomicBool, AtomicU32, Ordering};

use crate::connect::Connect;
use crate::reconnect::{millis, wait, Backoff, Reconnect, Stopped};
use frame::{Decoder, Event, FrameError};
pub use frame::{MAX_ENCODED, MAX_FRAME};

/// Why [`Framed::run`] ended. Bad frames never end it; only the transport
/// (or, with the heartbeat, a silent peer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The peer closed the stream (a read returned 0 bytes).
    Closed,
    /// Reading failed.
    Read(ErrorKind),
    /// Writing failed (or wrote 0 bytes).
    Write(ErrorKind),
    /// Nothing came from the peer for longer than the heartbeat's
    /// [`Heartbeat::timeout`].
    PeerSilent,
}

impl Error {
    /// The [`Cause`] a link state reports for this end.
    pub const fn cause(&self) -> Cause {
        match self {
            Self::Closed => Cause::Closed,
            Self::Read(_) | Self::Write(_) => Cause::Io,
            Self::PeerSilent => Cause::Silent,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Closed => f.write_str("connection closed by peer"),
            Self::Read(k) => write!(f, "read failed: {k:?}"),
            Self::Write(k) => write!(f, "write failed: {k:?}"),
            Self::PeerSilent => f.write_str("peer silent past the heartbeat timeout"),
        }
    }
}

impl core::error::Error for Error {}

/// Counters of one connector, readable from any task while it runs.
///
/// Each counter has one writer (the connector), so increments are a load
/// and a store: no compare-and-swap needed on Cortex-M0.
#[derive(Debug, Default)]
pub struct Counters {
    received: AtomicU32,
    sent: AtomicU32,
    bytes_in: AtomicU32,
    bytes_out: AtomicU32,
    oversized: AtomicU32,
    cobs_errors: AtomicU32,
    malformed: AtomicU32,
    rejected: AtomicU32,
    dropped: AtomicU32,
    lagged: AtomicU32,
    reconnects: AtomicU32,
    connect_failures: AtomicU32,
    heartbeats_sent: AtomicU32,
    heartbeats_received: AtomicU32,
    peer_silent: AtomicU32,
}

/// A copy of [`Counters`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Frames decoded and handed to the dispatcher, accepted or not.
    pub received: u32,
    /// Frames written.
    pub sent: u32,
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
    /// Of the frames received, those the dispatcher rejected (its stats
    /// say why).
    pub rejected: u32,
    /// Outbound messages too large for the transmit buffer, skipped.
    pub dropped: u32,
    /// Values outbound `Ring` routes lost before they could be sent (the
    /// reader fell behind); wraps.
    pub lagged: u32,
    /// Successful connections after the first one
    /// ([`Framed::run_reconnecting`] only).
    pub reconnects: u32,
    /// Connection attempts that failed ([`Framed::run_reconnecting`]
    /// only).
    pub connect_failures: u32,
    /// Keep-alive frames written (not counted in `sent`).
    pub heartbeats_sent: u32,
    /// Keep-alive frames received (not counted in `received`; never
    /// handed to the dispatcher).
    pub heartbeats_received: u32,
    /// Runs ended by [`Error::PeerSilent`].
    pub peer_silent: u32,
}

impl Stats {
    /// Inbound frames dropped for any reason.
    pub fn errors_in(&self) -> u32 {
        self.oversized + self.cobs_errors + self.malformed + self.rejected
    }
}

fn bump(c: &AtomicU32, by: u32) {
    c.store(
        c.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

impl Counters {
    /// All zero; `const` so it can live in a `static`.
    pub const fn new() -> Self {
        Self {
            received: AtomicU32::new(0),
            sent: AtomicU32::new(0),
            bytes_in: AtomicU32::new(0),
            bytes_out: AtomicU32::new(0),
            oversized: AtomicU32::new(0),
            cobs_errors: AtomicU32::new(0),
            malformed: AtomicU32::new(0),
            rejected: AtomicU32::new(0),
            dropped: AtomicU32::new(0),
            lagged: AtomicU32::new(0),
            reconnects: AtomicU32::new(0),
            connect_failures: AtomicU32::new(0),
            heartbeats_sent: AtomicU32::new(0),
            heartbeats_received: AtomicU32::new(0),
            peer_silent: AtomicU32::new(0),
        }
    }

    /// The counters now.
    pub fn snapshot(&self) -> Stats {
        let r = |c: &AtomicU32| c.load(Ordering::Relaxed);
        Stats {
            received: r(&self.received),
            sent: r(&self.sent),
            bytes_in: r(&self.bytes_in),
            bytes_out: r(&self.bytes_out),
            oversized: r(&self.oversized),
            cobs_errors: r(&self.cobs_errors),
            malformed: r(&self.malformed),
            rejected: r(&self.rejected),
            dropped: r(&self.dropped),
            lagged: r(&self.lagged),
            reconnects: r(&self.reconnects),
            connect_failures: r(&self.connect_failures),
            heartbeats_sent: r(&self.heartbeats_sent),
            heartbeats_received: r(&self.heartbeats_received),
            peer_silent: r(&self.peer_silent),
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
/// [`Framed::new`] has the default sizes ([`MAX_FRAME`], [`MAX_ENCODED`]);
/// [`Framed::with_sizes`] picks others (a device with little RAM):
///
/// ```
/// use aimdb_connectors::framed::{Framed, Counters};
/// static STATS: Counters = Counters::new();
/// let host = Framed::new(&STATS);
/// let device = Framed::<256, 300>::with_sizes(&STATS);
/// # let _ = (host, device);
/// ```
pub struct Framed<'s, const RX: usize = MAX_FRAME, const TX: usize = MAX_ENCODED> {
    decoder: Decoder<RX>,
    tx: [u8; TX],
    out: Outbox,
    rx_chunk: [u8; READ_CHUNK],
    counters: &'s Counters,
    config: Config,
    link: LinkTrack<'s>,
    /// Our birth sequence for the next connection.
    next_seq: u64,
}

/// The link-state record and what was last written to it.
struct LinkTrack<'s> {
    sink: Option<&'s (dyn Sink<LinkState> + Sync)>,
    last: Option<LinkState>,
}

impl LinkTrack<'_> {
    /// Writes `state` unless it is what the record already holds.
    fn set(&mut self, state: LinkState) {
        if self.last != Some(state) {
            self.last = Some(state);
            if let Some(sink) = self.sink {
                sink.write(state);
            }
        }
    }

    /// The sequence last reported (0 before the first).
    fn seq(&self) -> u64 {
        self.last.map_or(0, |s| s.seq)
    }
}

/// One connection's view of the link: our sequence, the peer's once it
/// sent one, and whether the link was reported online.
struct Conn<'a, 's> {
    track: &'a mut LinkTrack<'s>,
    own: u64,
    peer: Option<u64>,
    online: bool,
}

impl Conn<'_, '_> {
    /// The sequence to report: the peer's if it sent one, else ours.
    fn seq(&self) -> u64 {
        self.peer.unwrap_or(self.own)
    }

    fn go_online(&mut self) {
        self.online = true;
        let seq = self.seq();
        self.track.set(LinkState::online(seq));
    }

    /// A frame arrived; `peer_seq` if it was a keep-alive.
    fn heard(&mut self, peer_seq: Option<u64>) {
        if peer_seq.is_some() {
            self.peer = peer_seq;
        }
        if !self.online || peer_seq.is_some() {
            self.go_online();
        }
    }
}

/// A run's heartbeat: flags between the read, write and timer loops of
/// one run (one task, so load and store suffice).
struct Beat {
    /// Bytes arrived since the last tick.
    heard: AtomicBool,
    /// Bytes were written since the last tick.
    wrote: AtomicBool,
    /// A keep-alive is due: the write loop sends one when idle.
    due: AtomicBool,
}

impl Beat {
    const fn new(hello: bool) -> Self {
        Self {
            heard: AtomicBool::new(false),
            wrote: AtomicBool::new(false),
            due: AtomicBool::new(hello),
        }
    }

    /// Reads and clears a flag.
    fn take(flag: &AtomicBool) -> bool {
        let set = flag.load(Ordering::Relaxed);
        if set {
            flag.store(false, Ordering::Relaxed);
        }
        set
    }
}

/// Keep-alives and the silence timeout: see the module docs ("Heartbeat
/// and link state").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heartbeat {
    /// After this long with nothing written, a keep-alive frame goes out.
    pub interval: Duration,
    /// A peer from which nothing arrived for longer than this is gone:
    /// the run ends with [`Error::PeerSilent`]. Give the peer's interval
    /// at least twice, plus the time its frames take on the wire.
    pub timeout: Duration,
}

impl Heartbeat {
    /// Keep-alive every `interval`, peer gone after `timeout` of silence.
    pub const fn new(interval: Duration, timeout: Duration) -> Self {
        Self { interval, timeout }
    }

    /// The timer loop's tick and the idle ticks for the interval and the
    /// timeout: a quarter of the shorter of the two (at least 1 ms).
    fn ticks(&self) -> (u32, u32, u32) {
        let (i, t) = (millis(self.interval).max(1), millis(self.timeout).max(1));
        let tick = (i.min(t) / 4).max(1);
        (tick, i.div_ceil(tick), t.div_ceil(tick))
    }
}

/// How [`Framed::run_reconnecting`] reconnects, and the heartbeat. Start from
/// [`Config::new`] and set fields (`#[non_exhaustive]`: fields may be
/// added); give it to [`Framed::with_config`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// Whether to reconnect after a failed attempt or a drop.
    pub reconnect: Reconnect,
    /// Waits between connection attempts.
    pub backoff: Backoff,
    /// Keep-alives and the silence timeout; `None` (the default): off.
    /// See the module docs ("Heartbeat and link state").
    pub heartbeat: Option<Heartbeat>,
    /// Our birth sequence for the first connection; each connection after
    /// it takes the next. It starts again from here when the `Framed` is
    /// created (after a reboot, unless the application seeds it from
    /// storage). Default 1.
    pub first_seq: u64,
}

impl Config {
    /// Reconnect for ever, with [`Backoff::DEFAULT`]; no heartbeat; first
    /// birth sequence 1.
    pub const fn new() -> Self {
        Self {
            reconnect: Reconnect::Always,
            backoff: Backoff::DEFAULT,
            heartbeat: None,
            first_seq: 1,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self::new()
    }
}

/// Where the transmit buffer stands; kept across runs so that a broken
/// connection loses no frame the transport did not accept.
#[derive(Debug, Clone, Copy, Default)]
struct Outbox {
    /// Encoded frames in the transmit buffer.
    len: usize,
    /// Of those, bytes the transport accepted.
    sent: usize,
    /// A message taken from its route and not encoded yet (it did not fit
    /// the batch): its proof, which gives the same message again.
    held: Option<Ready>,
    /// A frame was cut off mid-way: send a delimiter before the next one.
    resync: bool,
}

impl<'s> Framed<'s> {
    /// A connector with the default sizes, counting into `counters`. (Defined
    /// on the default sizes only, so `Framed::new(&counters)` needs no type
    /// annotation: const-generic defaults do not apply in expressions.)
    pub const fn new(counters: &'s Counters) -> Self {
        Self::with_sizes(counters)
    }
}

impl<'s, const RX: usize, const TX: usize> Framed<'s, RX, TX> {
    /// A connector with an `RX`-byte receive decoder and a `TX`-byte
    /// transmit buffer, counting into `counters`.
    pub const fn with_sizes(counters: &'s Counters) -> Self {
        Self {
            decoder: Decoder::new(),
            tx: [0; TX],
            out: Outbox {
                len: 0,
                sent: 0,
                held: None,
                resync: false,
            },
            rx_chunk: [0; READ_CHUNK],
            counters,
            config: Config::new(),
            link: LinkTrack {
                sink: None,
                last: None,
            },
            next_seq: 1,
        }
    }

    /// The same connector, reconnecting (and with the heartbeat) as
    /// `config` says; the next connection takes `config.first_seq`.
    #[must_use]
    pub const fn with_config(mut self, config: Config) -> Self {
        self.next_seq = config.first_seq;
        self.config = config;
        self
    }

    /// The same connector, reporting its link to `link` (a
    /// `Latest<LinkState>` record, say): see the module docs ("Heartbeat
    /// and link state").
    #[must_use]
    pub const fn with_link(mut self, link: &'s (dyn Sink<LinkState> + Sync)) -> Self {
        self.link.sink = Some(link);
        self
    }

    /// The link state last written (`None` before the first run).
    pub fn link_state(&self) -> Option<LinkState> {
        self.link.last
    }

    /// The counters.
    pub fn counters(&self) -> &'s Counters {
        self.counters
    }

    /// Forgets a partly received frame; call before running on a new
    /// connection. Outbound frames not yet sent are kept (see the module
    /// docs); [`Self::discard_unsent`] drops them.
    pub fn reset(&mut self) {
        self.decoder.reset();
    }

    /// Outbound frames encoded but not (wholly) accepted by the transport:
    /// the next [`Self::run`] sends them first. A message taken from its
    /// route but not encoded yet is not counted.
    pub fn unsent_frames(&self) -> usize {
        let done = last_delimiter(&self.tx[..self.out.sent]);
        self.tx[done..self.out.len]
            .iter()
            .filter(|&&b| b == 0)
            .count()
    }

    /// Drops the outbound frames kept for re-sending (for a peer that must
    /// not see them, say after a configuration change).
    pub fn discard_unsent(&mut self) {
        self.out = Outbox::default();
    }

    /// Before a run: frames already accepted leave the buffer; a frame cut
    /// off mid-way moves to the front, to go again whole.
    fn resume(&mut self) {
        let out = &mut self.out;
        if out.sent == 0 {
            return;
        }
        // COBS frames hold no zero but their delimiter, so the last zero
        // accepted ends the last frame that went out whole.
        let done = last_delimiter(&self.tx[..out.sent]);
        out.resync |= out.sent > done;
        self.tx.copy_within(done..out.len, 0);
        out.len -= done;
        out.sent = 0;
    }

    /// Before a run: keep-alives left at the front of the buffer by the
    /// last run are dropped (they carry the last connection's sequence);
    /// with `hello`, a keep-alive of `seq` goes first instead.
    fn prepare_keepalives(&mut self, hello: Option<u64>) {
        let out = &mut self.out;
        // A keep-alive is only ever encoded alone or at the front, so only
        // the front can hold one; its COBS starts with code 1 (an empty
        // topic's zero length byte), which no other frame does.
        while out.len > 0 && self.tx[0] == 1 {
            let end = self.tx[..out.len]
                .iter()
                .position(|&b| b == 0)
                .map_or(out.len, |i| i + 1);
            self.tx.copy_within(end..out.len, 0);
            out.len -= end;
        }
        if let Some(seq) = hello {
            if let Ok(n) = encode_keepalive(seq, &mut self.tx[out.len..]) {
                rotate_right(&mut self.tx[..out.len + n], n);
                out.len += n;
            }
        }
    }

    /// Drives one connection in both directions until the transport fails
    /// or the peer closes it. Never returns for bad input.
    ///
    /// Two connectors over the in-memory [`loopback`](crate::loopback)
    /// pair, a value each way:
    ///
    /// ```
    /// use aimdb_connectors::framed::{Counters, Framed};
    /// use aimdb_connectors::loopback::Pair;
    /// use aimdb_core::codec::Postcard;
    /// use aimdb_core::inbound::{self, Dispatch};
    /// use aimdb_core::outbound::{self, Routes};
    /// use aimdb_core::record::{Latest, Record};
    /// use aimdb_core::sync::Readiness;
    /// use embassy_sync::blocking_mutex::raw::{CriticalSectionRawMutex as Cs, NoopRawMutex};
    ///
    /// static PING: Record<Cs, Latest<u8>, 1> = Record::new("ping");
    /// static GOT: Record<Cs, Latest<u8>, 1> = Record::new("got");
    /// static READY_A: Readiness<1> = Readiness::new();
    /// static READY_B: Readiness<1> = Readiness::new();
    /// static COUNT_A: Counters = Counters::new();
    /// static COUNT_B: Counters = Counters::new();
    ///
    /// // Side A publishes PING on `t`; side B writes `t` into GOT.
    /// let mut out = outbound::Link::new(PING.subscribe().unwrap(), "t", Postcard);
    /// let mut p = [0u8; 8];
    /// let mut b = Routes::<_, 1, 1>::builder(&READY_A, &mut p);
    /// b.link(&mut out);
    /// let mut a_out = b.build().unwrap();
    /// let mut a_in = Dispatch::<1, 1>::builder().build().unwrap();
    /// let got = inbound::Link::new(&GOT, Postcard);
    /// let mut b = Dispatch::<1, 1>::builder();
    /// b.link("t", &got);
    /// let mut b_in = b.build().unwrap();
    /// let mut p = [0u8; 8];
    /// let mut b_out = Routes::<_, 1, 1>::builder(&READY_B, &mut p)
    ///     .build()
    ///     .unwrap();
    ///
    /// let pair = Pair::<NoopRawMutex, 256>::new();
    /// let ((a_rx, a_tx), (b_rx, b_tx)) = (pair.a(), pair.b());
    /// let (mut a, mut b) = (Framed::new(&COUNT_A), Framed::new(&COUNT_B));
    /// let mut watch = GOT.subscribe().unwrap();
    /// PING.write(42);
    /// futures::executor::block_on(async {
    ///     let both = embassy_futures::join::join(
    ///         a.run(a_rx, a_tx, &mut a_in, &mut a_out),
    ///         b.run(b_rx, b_tx, &mut b_in, &mut b_out),
    ///     );
    ///     // Run until B has the value (the connectors themselves never end
    ///     // while the pair is open).
    ///     match embassy_futures::select::select(both, watch.recv()).await {
    ///         embassy_futures::select::Either::Second(v) => assert_eq!(v, Ok(42)),
    ///         embassy_futures::select::Either::First(_) => unreachable!("pair closed"),
    ///     }
    /// });
    /// assert_eq!((COUNT_A.snapshot().sent, COUNT_B.snapshot().received), (1, 1));
    /// ```
    ///
    /// Outbound frames left unsent by the previous run go first (see the
    /// module docs).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may lose a partly read frame (the decoder
    /// resynchronises). It loses no outbound message: what was taken from
    /// the routes and not accepted by the transport is sent by the next
    /// run.
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
        self.run_inner(rx, tx, None::<NoTimer>, inbound, outbound)
            .await
    }

    /// [`Self::run`] with a timer: with [`Config::heartbeat`] set, sends
    /// keep-alives and ends with [`Error::PeerSilent`] when the peer goes
    /// quiet (see the module docs). The single-connection entry point for
    /// a link that is never reopened, such as a UART:
    ///
    /// ```no_run
    /// # async fn f(rx: impl embedded_io_async::Read, tx: impl embedded_io_async::Write,
    /// #     delay: impl embedded_hal_async::delay::DelayNs,
    /// #     d: &mut dyn aimdb_core::connector::FrameSink,
    /// #     r: &mut dyn aimdb_core::connector::MessageSource) {
    /// use core::time::Duration;
    /// use aimdb_connectors::framed::{Config, Counters, Framed, Heartbeat};
    /// use aimdb_core::link::LinkState;
    /// use aimdb_core::record::{Latest, Record};
    /// use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
    ///
    /// static STATS: Counters = Counters::new();
    /// static LINK: Record<Cs, Latest<LinkState>, 1> = Record::new("link");
    /// let mut config = Config::new();
    /// config.heartbeat = Some(Heartbeat::new(Duration::from_secs(1), Duration::from_secs(3)));
    /// let mut framed = Framed::new(&STATS).with_config(config).with_link(&LINK);
    /// let why = framed.run_with_timer(rx, tx, delay, d, r).await;
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As [`Self::run`].
    pub async fn run_with_timer<R, W, T, D, S>(
        &mut self,
        rx: R,
        tx: W,
        delay: T,
        inbound: &mut D,
        outbound: &mut S,
    ) -> Error
    where
        R: Read,
        W: Write,
        T: DelayNs,
        D: FrameSink + ?Sized,
        S: MessageSource + ?Sized,
    {
        self.run_inner(rx, tx, Some(delay), inbound, outbound).await
    }

    async fn run_inner<R, W, T, D, S>(
        &mut self,
        rx: R,
        tx: W,
        delay: Option<T>,
        inbound: &mut D,
        outbound: &mut S,
    ) -> Error
    where
        R: Read,
        W: Write,
        T: DelayNs,
        D: FrameSink + ?Sized,
        S: MessageSource + ?Sized,
    {
        let own = self.next_seq;
        self.next_seq = own.wrapping_add(1);
        // The heartbeat runs only with both a configuration and a timer.
        let beat_timer = match (self.config.heartbeat, delay) {
            (Some(hb), Some(d)) => Some((hb, d)),
            _ => None,
        };
        self.resume();
        self.prepare_keepalives(beat_timer.is_some().then_some(own));
        let beat = Beat::new(false);
        let Self {
            decoder,
            tx: tx_buf,
            out,
            rx_chunk,
            counters,
            link,
            ..
        } = self;
        let counters: &Counters = counters;
        let mut conn = Conn {
            track: link,
            own,
            peer: None,
            online: false,
        };
        if beat_timer.is_none() {
            // Without a heartbeat there is nothing to wait for.
            conn.go_online();
        }
        let e = {
            let read = pin!(read_loop(
                rx, decoder, rx_chunk, inbound, counters, &beat, &mut conn
            ));
            let write = pin!(write_loop(tx, tx_buf, out, outbound, counters, &beat, own));
            let timer = pin!(heartbeat_loop(beat_timer, &beat));
            // The timer goes first: `select3` polls all three whenever the
            // task wakes, so the write loop sees a keep-alive fall due in
            // the same pass (no waker needed between them).
            match select3(timer, read, write).await {
                Either3::First(e) | Either3::Second(e) | Either3::Third(e) => e,
            }
        };
        if e == Error::PeerSilent {
            bump(&counters.peer_silent, 1);
        }
        let seq = conn.seq();
        conn.track.set(LinkState::offline(seq, e.cause()));
        e
    }

    /// Connects with `connect`, runs ([`Self::run`]), and after a drop
    /// connects and runs again, until the [`Config::reconnect`] policy
    /// allows no further attempt; the waits come from [`Config::backoff`],
    /// timed by `delay`, which also times the heartbeat
    /// ([`Self::run_with_timer`]). With a link record
    /// ([`Self::with_link`]) it reports `connecting` before each attempt.
    ///
    /// This is the loop every framed user would otherwise write: on each
    /// new connection it calls [`Self::reset`], and on each one after the
    /// first [`MessageSource::replay_latest`] (state goes out again; see
    /// the module docs for what is re-sent). Failed attempts and
    /// reconnects are counted in [`Counters`] (`connect_failures`,
    /// `reconnects`), and the same rules as [`Mqtt::run`](crate::mqtt)
    /// apply: a failed attempt waits `backoff.delay(failures + 1)`, a drop
    /// waits `backoff.delay(1)` before the next attempt.
    ///
    /// # Cancel safety
    ///
    /// As [`Self::run`]: dropping the future loses no outbound message.
    pub async fn run_reconnecting<C, T, D, S>(
        &mut self,
        mut connect: C,
        mut delay: T,
        inbound: &mut D,
        outbound: &mut S,
    ) -> Stopped
    where
        C: Connect,
        T: DelayNs,
        D: FrameSink + ?Sized,
        S: MessageSource + ?Sized,
    {
        let Config {
            reconnect, backoff, ..
        } = self.config;
        // Failed attempts since the last successful connection.
        let mut failures = 0u32;
        let mut connected_once = false;
        loop {
            self.link.set(LinkState::connecting(self.link.seq()));
            let (rx, tx) = match connect.connect().await {
                Ok(halves) => halves,
                Err(_) => {
                    bump(&self.counters.connect_failures, 1);
                    failures = failures.saturating_add(1);
                    if crate::log_shim::worth_logging(failures) {
                        log_warn!("framed: connection attempt {} failed", failures);
                    }
                    if !reconnect.allows(failures) {
                        return Stopped::ConnectFailed(failures);
                    }
                    wait(&mut delay, backoff.delay(failures.saturating_add(1))).await;
                    continue;
                }
            };
            failures = 0;
            self.reset();
            if connected_once {
                bump(&self.counters.reconnects, 1);
                outbound.replay_latest();
            }
            log_info!("framed: connected");
            let _why = self
                .run_inner(rx, tx, Some(&mut delay), inbound, outbound)
                .await;
            log_warn!("framed: connection ended");
            connected_once = true;
            if !reconnect.allows(0) {
                return Stopped::Disconnected;
            }
            wait(&mut delay, backoff.delay(1)).await;
        }
    }
}

impl<const RX: usize, const TX: usize> fmt::Debug for Framed<'_, RX, TX> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Framed")
            .field("rx", &RX)
            .field("tx", &TX)
            .field("counters", &self.counters.snapshot())
            .finish()
    }
}

/// A timer that is never used ([`Framed::run`] has none).
struct NoTimer;

impl DelayNs for NoTimer {
    async fn delay_ns(&mut self, _ns: u32) {
        core::future::pending::<()>().await;
    }
}

/// Ends the run with [`Error::PeerSilent`] when nothing arrived for longer
/// than the timeout; marks a keep-alive due after the interval with
/// nothing written. Counts idle ticks: no clock needed. Without a
/// heartbeat, never ends.
async fn heartbeat_loop<T: DelayNs>(beat_timer: Option<(Heartbeat, T)>, beat: &Beat) -> Error {
    let Some((hb, mut delay)) = beat_timer else {
        return core::future::pending().await;
    };
    let (tick, interval, timeout) = hb.ticks();
    let (mut quiet_out, mut quiet_in) = (0u32, 0u32);
    loop {
        delay.delay_ms(tick).await;
        quiet_out = if Beat::take(&beat.wrote) {
            0
        } else {
            quiet_out + 1
        };
        quiet_in = if Beat::take(&beat.heard) {
            0
        } else {
            quiet_in + 1
        };
        // `quiet_in` idle ticks: silent for at least `quiet_in - 1` ticks.
        if quiet_in > timeout {
            return Error::PeerSilent;
        }
        if quiet_out >= interval {
            beat.due.store(true, Ordering::Relaxed);
            quiet_out = 0;
        }
    }
}

/// Encodes a keep-alive: an empty topic, the postcard varint of `seq`.
fn encode_keepalive(seq: u64, out: &mut [u8]) -> Result<usize, frame::EncodeError> {
    let mut var = [0u8; 10];
    let mut n = seq;
    let mut len = 0;
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            var[len] = byte;
            len += 1;
            break;
        }
        var[len] = byte | 0x80;
        len += 1;
    }
    frame::encode("", &var[..len], out)
}

/// The sequence in a keep-alive's payload (`None` if it holds none).
fn keepalive_seq(payload: &[u8]) -> Option<u64> {
    match postcard::take_from_bytes::<u64>(payload) {
        Ok((seq, [])) => Some(seq),
        _ => None,
    }
}

#[allow(clippy::too_many_arguments)]
async fn read_loop<R: Read, D: FrameSink + ?Sized, const RX: usize>(
    mut rx: R,
    decoder: &mut Decoder<RX>,
    chunk: &mut [u8; READ_CHUNK],
    inbound: &mut D,
    counters: &Counters,
    beat: &Beat,
    conn: &mut Conn<'_, '_>,
) -> Error {
    loop {
        let n = match rx.read(chunk).await {
            Ok(0) => return Error::Closed,
            Ok(n) => n,
            Err(e) => return Error::Read(embedded_io_async::Error::kind(&e)),
        };
        bump(&counters.bytes_in, n as u32);
        beat.heard.store(true, Ordering::Relaxed);
        let mut rest = &chunk[..n];
        loop {
            match decoder.push(rest) {
                Event::NeedMore => break,
                // A keep-alive: absorbed here, never dispatched.
                Event::Frame(f, used) if f.topic.is_empty() => {
                    match keepalive_seq(f.payload) {
                        Some(seq) => {
                            bump(&counters.heartbeats_received, 1);
                            conn.heard(Some(seq));
                        }
                        None => {
                            counters.frame_error(FrameError::Malformed);
                            conn.heard(None);
                        }
                    }
                    rest = &rest[used..];
                }
                Event::Frame(f, used) => {
                    bump(&counters.received, 1);
                    conn.heard(None);
                    if inbound.dispatch(f.topic, f.payload).is_err() {
                        bump(&counters.rejected, 1);
                    }
                    rest = &rest[used..];
                }
                Event::Error(e, used) => {
                    counters.frame_error(e);
                    rest = &rest[used..];
                }
            }
        }
    }
}

/// Index just past the last delimiter in `bytes` (0 if there is none).
fn last_delimiter(bytes: &[u8]) -> usize {
    bytes.iter().rposition(|&b| b == 0).map_or(0, |i| i + 1)
}

async fn write_loop<W: Write, S: MessageSource + ?Sized>(
    mut tx: W,
    buf: &mut [u8],
    out: &mut Outbox,
    outbound: &mut S,
    counters: &Counters,
    beat: &Beat,
    seq: u64,
) -> Error {
    // `out` is updated before every await, so a dropped run leaves it
    // describing exactly what is encoded, accepted and held.
    loop {
        if out.len == 0 && out.held.is_none() {
            // A message, or a keep-alive falling due (the timer loop sets
            // `due` in the same pass of the task, see `run_inner`).
            let next = poll_fn(|cx| {
                if Beat::take(&beat.due) {
                    return Poll::Ready(None);
                }
                outbound.poll_ready(cx).map(Some)
            })
            .await;
            match next {
                Some(ready) => out.held = Some(ready),
                None => {
                    if let Ok(n) = encode_keepalive(seq, buf) {
                        out.len = n;
                    }
                }
            }
        }
        // Batch whatever is ready right now, up to the buffer's size.
        // Urgent frames go ahead of the normal ones of the batch (after
        // frames kept from a broken run, which go first).
        let mut urgent_end = out.len;
        while let Some(ready) = out.held {
            let m = outbound.message(ready);
            let (urgent, lagged) = (m.urgent, m.lagged);
            match frame::encode(m.topic, m.payload, &mut buf[out.len..]) {
                Ok(n) => {
                    if lagged > 0 {
                        bump(&counters.lagged, lagged as u32);
                    }
                    if urgent {
                        // Move the frame just encoded ahead of the normal
                        // frames of this batch.
                        rotate_right(&mut buf[urgent_end..out.len + n], n);
                        urgent_end += n;
                    }
                    out.len += n;
                }
                // The batch is full: send it; this message stays held.
                Err(_) if out.len > 0 => break,
                Err(_) => {
                    if lagged > 0 {
                        bump(&counters.lagged, lagged as u32);
                    }
                    bump(&counters.dropped, 1);
                }
            }
            // A pending poll registers this task's waker, which is what the
            // next wait needs anyway.
            out.held = poll_fn(|cx| {
                Poll::Ready(match outbound.poll_ready(cx) {
                    Poll::Ready(r) => Some(r),
                    Poll::Pending => None,
                })
            })
            .await;
        }
        if out.len > 0 {
            if let Err(e) = send(&mut tx, &buf[..out.len], out, counters, beat).await {
                return e;
            }
            (out.len, out.sent) = (0, 0);
        }
    }
}

/// `bytes.rotate_right(n)` in three reversals through one small
/// out-of-line loop: a fraction of the flash of `slice::rotate_right` or of
/// three inlined `reverse`s, which matters on a device; a batch is at most
/// `TX` bytes.
#[inline(never)]
fn rotate_right(bytes: &mut [u8], n: usize) {
    fn flip(b: &mut [u8]) {
        let len = b.len();
        for i in 0..len / 2 {
            b.swap(i, len - 1 - i);
        }
    }
    flip(bytes);
    let (front, back) = bytes.split_at_mut(n.min(bytes.len()));
    flip(front);
    flip(back);
}

/// Writes `bytes[out.sent..]`, counting each frame when its delimiter is
/// accepted, then flushes.
async fn send<W: Write>(
    tx: &mut W,
    bytes: &[u8],
    out: &mut Outbox,
    counters: &Counters,
    beat: &Beat,
) -> Result<(), Error> {
    let kind = |e: W::Error| Error::Write(embedded_io_async::Error::kind(&e));
    if out.resync {
        match tx.write(&[0]).await {
            Ok(0) => return Err(Error::Write(ErrorKind::WriteZero)),
            Ok(_) => {
                out.resync = false;
                bump(&counters.bytes_out, 1);
            }
            Err(e) => return Err(kind(e)),
        }
    }
    // Not `write_all`: it panics on a writer that returns `Ok(0)`.
    while out.sent < bytes.len() {
        let rest = &bytes[out.sent..];
        match tx.write(rest).await {
            Ok(0) => return Err(Error::Write(ErrorKind::WriteZero)),
            Ok(n) => {
                let n = n.min(rest.len());
                // Each frame whose delimiter went out counts, keep-alives
                // (COBS code 1 first) apart.
                let mut start = last_delimiter(&bytes[..out.sent]);
                let (mut frames, mut keepalives) = (0u32, 0u32);
                for i in out.sent..out.sent + n {
                    if bytes[i] == 0 {
                        if bytes[start] == 1 {
                            keepalives += 1;
                        } else {
                            frames += 1;
                        }
                        start = i + 1;
                    }
                }
                out.sent += n;
                bump(&counters.bytes_out, n as u32);
                bump(&counters.sent, frames);
                bump(&counters.heartbeats_sent, keepalives);
                beat.wrote.store(true, Ordering::Relaxed);
            }
            Err(e) => return Err(kind(e)),
        }
    }
    tx.flush().await.map_err(kind)
}

#[cfg(feature = "remote")]
crate::counted!(Counters);
