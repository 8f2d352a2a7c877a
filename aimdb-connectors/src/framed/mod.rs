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
//! The protocol itself is an [engine](crate::engine), [`Engine`]: codec,
//! heartbeat and outbox as a state machine with no I/O and no clock;
//! [`Framed`] is that engine under the crate's one [runner](crate::runner).
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
//! batch is kept too (its [`Ready`](aimdb_core::connector::Ready) is kept) and
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
//! # Tracked values and acknowledgements
//!
//! The protocol acknowledges the values of a durable backlog (and only
//! those): [`Framed::run_reconnecting_durable`] and
//! [`Framed::run_with_clock_durable`] send a backlog's values as
//! **tracked** frames, each carrying its [`Id`](crate::engine::Id), at
//! most [`IN_FLIGHT`] unacknowledged at a time; a backlog removes a value
//! once the peer acknowledged it, and offers again, oldest first, what
//! was in flight when a connection ended. Every connector acknowledges
//! the tracked frames it receives, one acknowledgement for all that one
//! read brought (they are cumulative), and takes a tracked frame only
//! after the one its sender sent before it (each names its
//! predecessor), so an acknowledgement never covers a frame lost on the
//! way: by default as soon as its
//! dispatcher took them (accepted or rejected: a value the peer can never
//! take must not stop the backlog behind it), or, with a [`Hold`]
//! ([`Framed::with_hold`]), once the application says they are safe — a
//! gateway that acknowledges a device's values only once they are in its
//! own durable backlog. So on this link a tracked value is delivered **at
//! least once**: a duplicate comes only from a connection that ended
//! with values in flight, and carries the same id as the first copy.
//!
//! A stream that never closes (a UART) cannot tell the sender that the
//! peer behind it restarted and lost what was on the way. With the
//! heartbeat on, tracked frames in flight that see no acknowledgement for
//! [`Heartbeat::timeout`] end the run with [`Error::Unacknowledged`]
//! (counted in `unacknowledged`), though the peer is heard: the next
//! connection offers them again. Turn the heartbeat on for a durable
//! backlog over a UART.
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
//! sends none. The heartbeat needs a clock: it runs in
//! [`Framed::run_with_clock`] (one connection, for a UART that stays open)
//! and in [`Framed::run_reconnecting`] (timed by its clock);
//! [`Framed::run`] has no clock and neither sends keep-alives nor times
//! out.
//!
//! A keep-alive is a frame with an **empty topic** whose payload is the
//! postcard varint of the sender's birth sequence. The outbox records
//! which of its frames is a keep-alive (it never guesses from the bytes). Every connector absorbs
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

mod engine;
pub mod frame;

use core::fmt;
use core::time::Duration;

use aimdb_core::connector::{FrameSink, MessageSource};
use aimdb_core::presence::{Cause, LinkState};
use aimdb_core::record::Sink;
use embedded_io_async::{ErrorKind, Read, Write};

use crate::clock::{Clock, Frozen};
use crate::connect::Connect;
use crate::reconnect::{Backoff, Reconnect, Stopped};
use crate::runner::{Drive, Runner, Settings};
pub use engine::{Engine, IN_FLIGHT};
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
    /// Tracked frames stayed unacknowledged for longer than the
    /// heartbeat's [`Heartbeat::timeout`] (module docs: "Tracked values
    /// and acknowledgements").
    Unacknowledged,
}

impl Error {
    /// The [`Cause`] a link state reports for this end.
    pub const fn cause(&self) -> Cause {
        match self {
            Self::Closed => Cause::Closed,
            Self::Read(_) | Self::Write(_) => Cause::Io,
            Self::PeerSilent | Self::Unacknowledged => Cause::Silent,
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
            Self::Unacknowledged => {
                f.write_str("tracked frames unacknowledged past the heartbeat timeout")
            }
        }
    }
}

impl core::error::Error for Error {}

aimdb_core::counter_set! {
    /// Counters of one connector, readable from any task while it runs.
    pub struct Counters;
    /// A copy of [`Counters`] at one moment.
    pub struct Stats {
        /// Frames decoded and handed to the dispatcher, accepted or not.
        received,
        /// Frames written.
        sent,
        /// Bytes read (wrapping).
        bytes_in,
        /// Bytes written (wrapping).
        bytes_out,
        /// Inbound frames over the receive buffer, dropped.
        oversized,
        /// Inbound frames with broken COBS, dropped.
        cobs_errors,
        /// Inbound frames that are not a postcard `(topic, payload)`, dropped.
        malformed,
        /// Of the frames received, those the dispatcher rejected (its stats
        /// say why).
        rejected,
        /// Outbound messages too large for the transmit buffer, skipped.
        dropped,
        /// Values outbound `Ring` routes lost before they could be sent (the
        /// reader fell behind); wraps.
        lagged,
        /// Successful connections after the first one
        /// ([`Framed::run_reconnecting`] only).
        reconnects,
        /// Connection attempts that failed ([`Framed::run_reconnecting`]
        /// only).
        connect_failures,
        /// Keep-alive frames written (not counted in `sent`).
        heartbeats_sent,
        /// Keep-alive frames received (not counted in `received`; never
        /// handed to the dispatcher).
        heartbeats_received,
        /// Runs ended by [`Error::PeerSilent`].
        peer_silent,
        /// Runs ended by [`Error::Unacknowledged`].
        unacknowledged,
        /// Tracked frames received but not taken: the one before them
        /// did not arrive (the sender offers both again).
        out_of_step,
    }
}

impl Stats {
    /// Inbound frames dropped for any reason.
    pub fn errors_in(&self) -> u32 {
        self.oversized + self.cobs_errors + self.malformed + self.rejected
    }
}

/// Where a receiving connector's acknowledgements wait until the
/// application has the tracked values safe (module docs: "Tracked values
/// and acknowledgements").
///
/// The connector reports each tracked frame as it hands it to its
/// dispatcher ([`Hold::taking`], then [`Hold::took`]) and acknowledges,
/// cumulatively, up to what [`Hold::settled`] says, asking again every
/// few milliseconds while something it took is not settled. Calls come
/// from the connector's task; an implementation shares its state with
/// the task that makes the values safe (a gateway's backlog, through
/// `backlog::Origin`), through atomics or a lock.
pub trait Hold {
    /// A tracked frame of `topic` with `id` goes to the dispatcher now
    /// (before any record sees its value).
    fn taking(&self, topic: &[u8], id: crate::engine::Id);

    /// The dispatcher `accepted` that frame, or not (then it will never
    /// be safer than it is: settle it).
    fn took(&self, id: crate::engine::Id, accepted: bool);

    /// The newest id up to which every tracked frame taken is safe (may
    /// be acknowledged); `None`: none yet.
    fn settled(&self) -> Option<crate::engine::Id>;
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

/// The framed-stream connector: the framed [`Engine`] (a receive decoder
/// of `RX` bytes and a transmit buffer of `TX` bytes, kept across
/// reconnects) under the crate's runner.
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
    engine: Engine<'s, RX, TX>,
    runner: Runner<'s>,
    config: Config,
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
            engine: Engine::new(counters, Config::new()),
            runner: Runner::new(),
            config: Config::new(),
        }
    }

    /// The same connector, reconnecting (and with the heartbeat) as
    /// `config` says; the next connection takes `config.first_seq`.
    #[must_use]
    pub fn with_config(mut self, config: Config) -> Self {
        self.engine.set_config(config);
        self.config = config;
        self
    }

    /// The same connector, reporting its link to `link` (a
    /// `Latest<LinkState>` record, say): see the module docs ("Heartbeat
    /// and link state").
    #[must_use]
    pub const fn with_link(mut self, link: &'s (dyn Sink<LinkState> + Sync)) -> Self {
        self.runner.set_link(link);
        self
    }

    /// The same connector, acknowledging the tracked frames it receives
    /// only once `hold` says they are safe (see [`Hold`]).
    #[must_use]
    pub fn with_hold(mut self, hold: &'s (dyn Hold + Sync)) -> Self {
        self.engine.set_hold(hold);
        self
    }

    /// The link state last written (`None` before the first run).
    pub fn link_state(&self) -> Option<LinkState> {
        self.runner.link_state()
    }

    /// The counters.
    pub fn counters(&self) -> &'s Counters {
        self.engine.counters()
    }

    /// Forgets a partly received frame; call before running on a new
    /// connection ([`Self::run_reconnecting`] does). Outbound frames not
    /// yet sent are kept (see the module docs); [`Self::discard_unsent`]
    /// drops them.
    pub fn reset(&mut self) {
        self.engine.reset();
    }

    /// Outbound frames encoded but not (wholly) accepted by the transport:
    /// the next [`Self::run`] sends them first. A message taken from its
    /// route but not encoded yet is not counted.
    pub fn unsent_frames(&self) -> usize {
        self.engine.unsent_frames()
    }

    /// Drops the outbound frames kept for re-sending (for a peer that must
    /// not see them, say after a configuration change).
    pub fn discard_unsent(&mut self) {
        self.engine.discard_unsent();
        self.runner.discard_held();
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
        self.engine.set_mode(false, false);
        let mut d = Drive {
            engine: &mut self.engine,
            clock: &Frozen,
            sink: inbound,
            source: outbound,
            durable: (),
        };
        self.runner.one(&mut d, rx, tx).await
    }

    /// [`Self::run`] with a clock: with [`Config::heartbeat`] set, sends
    /// keep-alives and ends with [`Error::PeerSilent`] when the peer goes
    /// quiet (see the module docs). The single-connection entry point for
    /// a link that is never reopened, such as a UART:
    ///
    /// ```no_run
    /// # async fn f(rx: impl embedded_io_async::Read, tx: impl embedded_io_async::Write,
    /// #     clock: impl aimdb_connectors::clock::Clock,
    /// #     d: &mut dyn aimdb_core::connector::FrameSink,
    /// #     r: &mut dyn aimdb_core::connector::MessageSource) {
    /// use core::time::Duration;
    /// use aimdb_connectors::framed::{Config, Counters, Framed, Heartbeat};
    /// use aimdb_core::presence::LinkState;
    /// use aimdb_core::record::{Latest, Record};
    /// use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
    ///
    /// static STATS: Counters = Counters::new();
    /// static LINK: Record<Cs, Latest<LinkState>, 1> = Record::new("link");
    /// let mut config = Config::new();
    /// config.heartbeat = Some(Heartbeat::new(Duration::from_secs(1), Duration::from_secs(3)));
    /// let mut framed = Framed::new(&STATS).with_config(config).with_link(&LINK);
    /// let why = framed.run_with_clock(rx, tx, clock, d, r).await;
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As [`Self::run`].
    pub async fn run_with_clock<R, W, K, D, S>(
        &mut self,
        rx: R,
        tx: W,
        clock: K,
        inbound: &mut D,
        outbound: &mut S,
    ) -> Error
    where
        R: Read,
        W: Write,
        K: Clock,
        D: FrameSink + ?Sized,
        S: MessageSource + ?Sized,
    {
        self.run_with_clock_durable(rx, tx, clock, inbound, outbound, ())
            .await
    }

    /// [`Self::run_with_clock`] with a durable backlog: `durable`'s
    /// values go as tracked frames and leave it once the peer
    /// acknowledged them (module docs: "Tracked values and
    /// acknowledgements"; `backlog::Durable`, feature `backlog`).
    ///
    /// # Cancel safety
    ///
    /// As [`Self::run`]; the backlog keeps every value not acknowledged.
    pub async fn run_with_clock_durable<R, W, K, D, S, B>(
        &mut self,
        rx: R,
        tx: W,
        clock: K,
        inbound: &mut D,
        outbound: &mut S,
        durable: B,
    ) -> Error
    where
        R: Read,
        W: Write,
        K: Clock,
        D: FrameSink + ?Sized,
        S: MessageSource + ?Sized,
        B: crate::durable::Durable,
    {
        self.engine.set_mode(true, false);
        let mut d = Drive {
            engine: &mut self.engine,
            clock: &clock,
            sink: inbound,
            source: outbound,
            durable,
        };
        self.runner.one(&mut d, rx, tx).await
    }

    /// Connects with `connect`, runs ([`Self::run`]), and after a drop
    /// connects and runs again, until the [`Config::reconnect`] policy
    /// allows no further attempt; the waits come from [`Config::backoff`],
    /// timed by `clock`, which also times the heartbeat
    /// ([`Self::run_with_clock`]). With a link record
    /// ([`Self::with_link`]) it reports `connecting` before each attempt.
    ///
    /// This is the loop every framed user would otherwise write: each new
    /// connection starts with a fresh decoder, and each one after the
    /// first with [`MessageSource::replay_latest`] (state goes out again;
    /// see the module docs for what is re-sent). Failed attempts and
    /// reconnects are counted in [`Counters`] (`connect_failures`,
    /// `reconnects`), and the same rules as [`Mqtt::run`](crate::mqtt)
    /// apply (they share the runner): a failed attempt waits
    /// `backoff.delay(failures + 1)`, a drop waits `backoff.delay(1)`
    /// before the next attempt.
    ///
    /// # Cancel safety
    ///
    /// As [`Self::run`]: dropping the future loses no outbound message.
    pub async fn run_reconnecting<C, K, D, S>(
        &mut self,
        connect: C,
        clock: K,
        inbound: &mut D,
        outbound: &mut S,
    ) -> Stopped
    where
        C: Connect,
        K: Clock,
        D: FrameSink + ?Sized,
        S: MessageSource + ?Sized,
    {
        self.run_reconnecting_durable(connect, clock, inbound, outbound, ())
            .await
    }

    /// [`Self::run_reconnecting`] with a durable backlog: `durable`'s
    /// values are stored as they come, connected or not, go as tracked
    /// frames and leave it once the peer acknowledged them (module docs:
    /// "Tracked values and acknowledgements"; `backlog::Durable`, feature
    /// `backlog`).
    ///
    /// # Cancel safety
    ///
    /// As [`Self::run`]; the backlog keeps every value not acknowledged.
    pub async fn run_reconnecting_durable<C, K, D, S, B>(
        &mut self,
        mut connect: C,
        clock: K,
        inbound: &mut D,
        outbound: &mut S,
        durable: B,
    ) -> Stopped
    where
        C: Connect,
        K: Clock,
        D: FrameSink + ?Sized,
        S: MessageSource + ?Sized,
        B: crate::durable::Durable,
    {
        self.engine.set_mode(true, true);
        let settings = Settings {
            reconnect: self.config.reconnect,
            backoff: self.config.backoff,
            connect_timeout: None,
            close_timeout: Duration::ZERO,
        };
        let mut d = Drive {
            engine: &mut self.engine,
            clock: &clock,
            sink: inbound,
            source: outbound,
            durable,
        };
        let never = core::future::pending::<()>();
        self.runner
            .run(&mut d, &mut connect, &settings, never)
            .await
    }
}

impl<const RX: usize, const TX: usize> fmt::Debug for Framed<'_, RX, TX> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Framed")
            .field("rx", &RX)
            .field("tx", &TX)
            .field("counters", &self.counters().snapshot())
            .finish()
    }
}

#[cfg(feature = "remote")]
crate::counted!(Counters);
