//! The runner: drives any [`Engine`] over any [`Connect`], one task per
//! connector.
//!
//! What every connector would otherwise write for itself lives here,
//! once:
//!
//! - **connect, reconnect, backoff**: each attempt opens the transport
//!   ([`Connect`]) and starts the engine; a failed attempt waits
//!   [`Backoff::delay`]`(failures + 1)`, a dropped connection
//!   `delay(1)`; [`Reconnect`] says when to give up. The attempt (opening
//!   plus the engine coming up) is bounded by the connect timeout.
//! - **one clock** ([`Clock`]): the engine's timers (`poll_at`), the
//!   timeouts and the backoff all read and sleep on it.
//! - **I/O**: reads, writes and flushes run concurrently (a peer that
//!   writes while we write never deadlocks a small pipe). Each round
//!   polls every pending operation once, so no direction starves the
//!   other; after a wake-up it returns at the first that completed (the
//!   others keep their wakers and are polled again next round). What the
//!   transport takes at once is written in the round that queued it.
//!   Optionally the engine's output is gathered into one buffer
//!   so a burst leaves in one transport write.
//! - **the connector contract's steps** ([`aimdb_core::connector`]): the
//!   outbound pull, in bursts of at most [`BURST`] messages; a message
//!   the engine cannot take now keeps its [`Ready`] and goes first when
//!   it can (across connections too); `replay_latest` on every
//!   connection after the first.
//! - **link state**: `connecting` before each attempt, `online` as the
//!   engine reports it, `offline` with the cause when a connection ends,
//!   `offline`/`stopped` on a stop — each written only when it changes.
//! - **stop**: a stop future ends the run; a connection that is up first
//!   says goodbye ([`Engine::close`]) within the close timeout.
//!
//! The transport's `read` and `write` futures are dropped when another
//! event wins: both must be cancel-safe (no bytes moved by a dropped
//! future), as tokio's streams, embassy-net sockets, embassy's buffered
//! UARTs and this crate's loopback pair are.

use core::future::{poll_fn, Future};
use core::pin::{pin, Pin};
use core::task::{Context, Poll};
use core::time::Duration;

use aimdb_core::connector::{FrameSink, MessageSource, Ready};
use aimdb_core::presence::{self, LinkState};
use aimdb_core::record::Sink;
use embassy_futures::select::{select, select3, Either, Either3};
use embedded_io_async::{Error as _, ErrorKind, Read, Write};

use crate::clock::{Clock, Instant};
use crate::connect::{Connect, Connection};
use crate::durable::Durable;
use crate::engine::{Engine, Failure, IoEnd, Offer};
use crate::reconnect::{Backoff, Reconnect, Stopped};

/// Messages offered in one burst at most; then inbound, timers and the
/// transport get their turn.
pub const BURST: usize = 32;

/// How a reconnecting [`Runner::run`] behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Whether to try again after a failed attempt or a drop.
    pub reconnect: Reconnect,
    /// Waits between attempts.
    pub backoff: Backoff,
    /// Bound on opening the transport plus the engine coming up
    /// ([`Engine::accepting`]); `None`: unbounded.
    pub connect_timeout: Option<Duration>,
    /// Bound on the goodbye after a stop ([`Engine::close`]).
    pub close_timeout: Duration,
}

/// What one run drives: the engine, the clock, the two tables and,
/// optionally, a durable backlog.
#[derive(Debug)]
pub struct Drive<'d, E, K, S: ?Sized, M: ?Sized, D = ()> {
    /// The protocol.
    pub engine: &'d mut E,
    /// The one clock.
    pub clock: &'d K,
    /// Where inbound messages go (an `inbound::Dispatch`).
    pub sink: &'d mut S,
    /// Where outbound messages come from (an `outbound::Routes`).
    pub source: &'d mut M,
    /// The durable routes and their backlog (`backlog::Durable`, by
    /// `&mut`); `()`: none. Their values are stored as they come,
    /// connected or not, offered from storage oldest first, and removed
    /// once the engine reports them delivered ([`crate::durable`]); the
    /// engine must track delivery ([`Engine::TRACKS`]).
    pub durable: D,
}

/// Where the link state goes, and what was last written there.
struct Report<'l> {
    sink: Option<&'l (dyn Sink<LinkState> + Sync)>,
    last: Option<LinkState>,
}

impl Report<'_> {
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

/// Engine output copied out ahead of the transport: `buf[start..end]`
/// is still to be written.
struct Gather<'g> {
    buf: &'g mut [u8],
    start: usize,
    end: usize,
}

impl Gather<'_> {
    /// What to write: with a gather buffer (`on`: the runner gathers)
    /// the gathered bytes, else the engine's own `tx`.
    #[inline(always)]
    fn or<'a>(&'a self, on: bool, tx: &'a [u8]) -> &'a [u8] {
        if on && !self.buf.is_empty() {
            &self.buf[self.start..self.end]
        } else {
            tx
        }
    }

    /// Whether nothing gathered waits (`on`: the runner gathers).
    #[inline(always)]
    fn empty(&self, on: bool) -> bool {
        !on || self.start == self.end
    }
}

/// How a connection ended.
enum Outcome<X> {
    /// The engine or the transport ended it; `up`: it had come up.
    Ended { end: X, up: bool },
    /// It did not come up within the connect timeout.
    TimedOut,
    /// The engine ended it to open it again at once.
    Reopen,
    /// The stop future completed (and the goodbye, if any, is done).
    Stopped,
}

/// The runner's state that outlives a run (keep it beside the engine, in
/// the connector): the held message, the link state, the gather buffer.
///
/// A connector is an engine and a `Runner`; `framed::Framed` is this, in
/// full, plus its configuration:
///
/// ```
/// use aimdb_connectors::clock::Frozen;
/// use aimdb_connectors::framed::{self, Counters};
/// use aimdb_connectors::loopback::Pair;
/// use aimdb_connectors::runner::{Drive, Runner};
/// use aimdb_core::inbound::Dispatch;
/// use aimdb_core::outbound::Routes;
/// use aimdb_core::sync::Readiness;
/// use embassy_sync::blocking_mutex::raw::NoopRawMutex;
///
/// static STATS: Counters = Counters::new();
/// static READY: Readiness<1> = Readiness::new();
/// let mut engine = framed::Engine::<64, 64>::new(&STATS, framed::Config::new());
/// let mut runner = Runner::new();
/// let mut sink = Dispatch::<1, 1>::builder().build().unwrap();
/// let mut p = [0u8; 8];
/// let mut source = Routes::<_, 1, 1>::builder(&READY, &mut p).build().unwrap();
/// let pair = Pair::<NoopRawMutex, 64>::new();
/// let (rx, tx) = pair.a();
/// pair.close();
/// let mut d = Drive { engine: &mut engine, clock: &Frozen, sink: &mut sink, source: &mut source, durable: () };
/// let end = futures::executor::block_on(runner.one(&mut d, rx, tx));
/// assert_eq!(end, framed::Error::Closed);
/// ```
///
/// `GATHER`: whether the runner can gather engine output into a buffer
/// ([`Runner::gathering`], [`Runner::set_gather`]). A type of its own, so
/// a connector that never gathers (`Runner::new`) links none of that
/// code.
pub struct Runner<'l, const GATHER: bool = false> {
    /// A message taken from the source that the engine has not taken.
    held: Option<Ready>,
    link: Report<'l>,
    gather: Gather<'l>,
    /// A connection came up before (so the next one replays).
    connected_once: bool,
    /// The sequence of the last connection that came online.
    last_online: Option<u64>,
}

impl Default for Runner<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const GATHER: bool> core::fmt::Debug for Runner<'_, GATHER> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Runner")
            .field("held", &self.held.is_some())
            .field("link", &self.link.last)
            .finish_non_exhaustive()
    }
}

impl Runner<'_> {
    /// A runner that reports no link state and writes the engine's
    /// output as it comes.
    pub const fn new() -> Self {
        Self::empty()
    }
}

impl<'l> Runner<'l, true> {
    /// A runner that gathers engine output once given a buffer
    /// ([`Self::set_gather`]); until then it writes the output as it
    /// comes, as [`Runner::new`]'s does.
    pub const fn gathering() -> Self {
        Self::empty()
    }

    /// Gathers engine output into `buf` before writing it, so a burst
    /// leaves in one transport write.
    pub fn set_gather(&mut self, buf: &'l mut [u8]) {
        self.gather = Gather {
            buf,
            start: 0,
            end: 0,
        };
    }
}

impl<'l, const GATHER: bool> Runner<'l, GATHER> {
    const fn empty() -> Self {
        Self {
            held: None,
            link: Report {
                sink: None,
                last: None,
            },
            gather: Gather {
                buf: &mut [],
                start: 0,
                end: 0,
            },
            connected_once: false,
            last_online: None,
        }
    }

    /// Reports the link state into `sink` from now on.
    pub const fn set_link(&mut self, sink: &'l (dyn Sink<LinkState> + Sync)) {
        self.link.sink = Some(sink);
    }

    /// Forgets the held message (its value stays in its record).
    pub fn discard_held(&mut self) {
        self.held = None;
    }

    /// The link state last written.
    pub fn link_state(&self) -> Option<LinkState> {
        self.link.last
    }

    /// Opens the engine and drives one connection on `rx`/`tx` until it
    /// ends (no connect, no reconnect, no stop).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future loses nothing the engine holds; a message the
    /// engine could not take yet stays held for the next run.
    pub async fn one<E, K, S, M, D, R, W>(
        &mut self,
        d: &mut Drive<'_, E, K, S, M, D>,
        rx: R,
        tx: W,
    ) -> E::End
    where
        E: Engine,
        K: Clock,
        S: FrameSink + ?Sized,
        M: MessageSource + ?Sized,
        D: Durable,
        R: Read,
        W: Write,
    {
        const { assert!(E::TRACKS || !D::ON, "a backlog needs delivery tracked") };
        d.durable.begin();
        d.engine.open(d.clock.now());
        let stop = pin!(core::future::pending::<()>());
        let limits = Limits::<false> {
            open_until: None,
            close_for: Duration::ZERO,
            counted: false,
        };
        match self.connection(d, (rx, tx), limits, stop).await {
            Outcome::Ended { end, .. } => {
                self.ended(d.engine, end);
                end
            }
            // No timeout, no stop, and no reopen on a single connection.
            Outcome::TimedOut | Outcome::Reopen | Outcome::Stopped => core::future::pending().await,
        }
    }

    /// Connects, drives, and reconnects as `settings` say, until the
    /// policy gives up or `stop` completes.
    ///
    /// # Cancel safety
    ///
    /// As [`Self::one`]; the connection is dropped without a goodbye.
    pub async fn run<E, K, S, M, D, C, F>(
        &mut self,
        d: &mut Drive<'_, E, K, S, M, D>,
        connect: &mut C,
        settings: &Settings,
        stop: F,
    ) -> Stopped
    where
        E: Engine,
        K: Clock,
        S: FrameSink + ?Sized,
        M: MessageSource + ?Sized,
        D: Durable,
        C: Connect,
        F: Future<Output = ()>,
    {
        const { assert!(E::TRACKS || !D::ON, "a backlog needs delivery tracked") };
        d.durable.begin();
        let mut stop = pin!(stop);
        // Failed attempts since the last connection that came up.
        let mut failures = 0u32;
        loop {
            let seq = d.engine.next_seq().unwrap_or(self.link.seq());
            self.link.set(LinkState::connecting(seq));
            let open_until = settings.connect_timeout.map(|t| d.clock.now() + t);
            let until = open_until.unwrap_or(Instant::MAX);
            let opening = select3(connect.connect(), d.clock.sleep_until(until), stop.as_mut());
            // The backlog stores meanwhile (without one, its keeper is a
            // future that never completes and holds nothing).
            let opened = first(select(opening, keeper(&mut d.durable, d.clock)).await);
            let failure = match opened {
                Either3::First(Ok(mut conn)) => {
                    d.engine.open(d.clock.now());
                    let limits = Limits::<true> {
                        open_until,
                        close_for: settings.close_timeout,
                        counted: true,
                    };
                    match self
                        .connection(d, conn.split(), limits, stop.as_mut())
                        .await
                    {
                        Outcome::Reopen => continue,
                        Outcome::Stopped => return self.stopped(d.engine),
                        Outcome::TimedOut => Failure::Timeout,
                        Outcome::Ended { end, up: false } => {
                            self.ended(d.engine, end);
                            Failure::Ended(end)
                        }
                        Outcome::Ended { end, up: true } => {
                            failures = 0;
                            self.ended(d.engine, end);
                            d.engine.went_down(Some(end));
                            log_warn!("{}: connection lost", E::NAME);
                            if !settings.reconnect.allows(0) {
                                return Stopped::Disconnected;
                            }
                            let wait = settings.backoff.delay(1);
                            if Self::backoff(d.clock, wait, stop.as_mut(), &mut d.durable).await {
                                return self.stopped(d.engine);
                            }
                            continue;
                        }
                    }
                }
                Either3::First(Err(e)) => Failure::Connect(C::failure(&e)),
                Either3::Second(()) => Failure::Timeout,
                Either3::Third(()) => return self.stopped(d.engine),
            };
            d.engine.failed(failure);
            failures = failures.saturating_add(1);
            if crate::log_shim::worth_logging(failures) {
                log_warn!("{}: connection attempt {} failed", E::NAME, failures);
            }
            if !settings.reconnect.allows(failures) {
                return Stopped::ConnectFailed(failures);
            }
            let wait = settings.backoff.delay(failures.saturating_add(1));
            if Self::backoff(d.clock, wait, stop.as_mut(), &mut d.durable).await {
                return self.stopped(d.engine);
            }
        }
    }

    /// Waits `wait` (storing durable values meanwhile); `true` if `stop`
    /// completed first.
    async fn backoff<K: Clock, F: Future<Output = ()>, D: Durable>(
        clock: &K,
        wait: Duration,
        stop: Pin<&mut F>,
        durable: &mut D,
    ) -> bool {
        let until = clock.now() + wait;
        let waiting = select(clock.sleep_until(until), stop);
        let waited = first(select(waiting, keeper(durable, clock)).await);
        matches!(waited, Either::Second(()))
    }

    /// A connection ended: `offline` with its cause, if it reports one.
    fn ended<E: Engine>(&mut self, engine: &E, end: E::End) {
        if let Some(seq) = engine.link_seq() {
            self.link.set(LinkState::offline(seq, E::cause(end)));
        }
    }

    /// Stopped on request: the link is down for that reason.
    fn stopped<E: Engine>(&mut self, engine: &mut E) -> Stopped {
        let seq = engine
            .link_seq()
            .or(self.last_online)
            .unwrap_or(self.link.seq());
        if engine.link_seq().is_some() {
            engine.went_down(None);
        }
        self.link
            .set(LinkState::offline(seq, presence::Cause::Stopped));
        Stopped::Requested
    }

    /// The connection came up: counted, and from the second on, state
    /// replayed (the held message still goes first).
    fn came_up<E, K, S, M, D>(&mut self, d: &mut Drive<'_, E, K, S, M, D>, counted: bool)
    where
        E: Engine,
        S: ?Sized,
        M: MessageSource + ?Sized,
    {
        if !counted {
            return;
        }
        let again = self.connected_once;
        self.connected_once = true;
        d.engine.came_up(again);
        log_info!("{}: connected", E::NAME);
        if again {
            d.source.replay_latest();
        }
    }

    /// Offers what is ready, up to [`BURST`] messages; with `asked` (the
    /// source had nothing and holds this task's waker, and the task has
    /// not parked since) only the held message. `true`: the source had
    /// nothing and holds this task's waker.
    fn feed<E, K, S, M, D>(
        &mut self,
        d: &mut Drive<'_, E, K, S, M, D>,
        now: Instant,
        asked: bool,
        cx: &mut Context<'_>,
    ) -> bool
    where
        E: Engine,
        K: Clock,
        S: ?Sized,
        M: MessageSource + ?Sized,
    {
        for _ in 0..BURST {
            if !d.engine.accepting() {
                return asked;
            }
            let ready = match self.held.take() {
                Some(r) => r,
                None if asked => return true,
                // Pending leaves this task's waker with the source.
                None => match d.source.poll_ready(cx) {
                    Poll::Ready(r) => r,
                    Poll::Pending => return true,
                },
            };
            match d.engine.offer(&d.source.message(ready), now) {
                Offer::Accepted | Offer::TooLarge => self.gather(d.engine, now),
                Offer::Busy => {
                    self.held = Some(ready);
                    return asked;
                }
            }
        }
        false
    }

    /// With a gather buffer: moves engine output into it while it has
    /// room.
    #[inline]
    fn gather<E: Engine>(&mut self, engine: &mut E, now: Instant) {
        if GATHER && !self.gather.buf.is_empty() {
            self.gather_out(engine, now);
        }
    }

    fn gather_out<E: Engine>(&mut self, engine: &mut E, now: Instant) {
        let g = &mut self.gather;
        if g.start == g.end {
            (g.start, g.end) = (0, 0);
        }
        while g.end < g.buf.len() {
            let out = engine.io().tx;
            let k = out.len().min(g.buf.len() - g.end);
            if k == 0 {
                break;
            }
            g.buf[g.end..g.end + k].copy_from_slice(&out[..k]);
            g.end += k;
            engine.transmitted(k, now);
        }
    }

    /// Drives one open connection until it ends.
    ///
    /// Each round: the engine's state looked at ([`Self::top`]), what is
    /// ready offered and written, then the wait for the next events
    /// (written out here rather than awaited as a function of its own: a
    /// nested future would cost every round the moves into and out of its
    /// state), which go to the engine ([`Self::handle`]).
    async fn connection<E, K, S, M, D, R, W, F, const RUN: bool>(
        &mut self,
        d: &mut Drive<'_, E, K, S, M, D>,
        (mut rx, mut tx): (R, W),
        limits: Limits<RUN>,
        mut stop: Pin<&mut F>,
    ) -> Outcome<E::End>
    where
        E: Engine,
        K: Clock,
        S: FrameSink + ?Sized,
        M: MessageSource + ?Sized,
        D: Durable,
        R: Read,
        W: Write,
        F: Future<Output = ()>,
    {
        let mut st = Conn::<RUN> {
            online: None,
            up: false,
            closing: None,
            unflushed: false,
            asked: false,
        };
        // One reading of the clock per round: taken when the round's
        // events are in, used until the next wait.
        let mut now = d.clock.now();
        loop {
            if let Some(o) = self.top(d, &mut st, limits.counted(), now) {
                return o;
            }

            // Offering and writing never wait: one poll of the task.
            let wrote = poll_fn(|cx| {
                if D::ON {
                    d.durable.round(d.engine, st.closing().is_none(), now, cx);
                }
                if st.closing().is_none() {
                    st.asked = self.feed(d, now, st.asked, cx);
                }
                self.gather(d.engine, now);
                Poll::Ready(self.write_now(d, &mut tx, &mut st, now, cx))
            })
            .await;
            match self.after_write(d.engine, &st, wrote) {
                Some(true) => return Outcome::Stopped,
                Some(false) => continue,
                None => {}
            }
            let wake = st.wake(d.engine, &limits);
            let mut wait = Wait {
                want: self.held.is_none() && d.engine.accepting() && st.closing().is_none(),
                skip: st.asked,
                looked: false,
                parked: false,
            };
            let ev = {
                let io = d.engine.io();
                let out = self.gather.or(GATHER, io.tx);
                // Only what can complete is polled: no read while the engine
                // lends no room, no write with nothing to write or flush, no
                // timer without a deadline.
                let mut read = pin!((!io.rx.is_empty()).then(|| rx.read(io.rx)));
                let writing = !out.is_empty() || st.unflushed;
                let mut write = pin!(writing.then(|| write_or_flush(&mut tx, out)));
                let clock = d.clock;
                let mut timer = pin!((wake != Instant::MAX).then(|| clock.sleep_until(wake)));
                let mut stop = (RUN && st.closing().is_none()).then_some(stop.as_mut());
                let source = &mut *d.source;
                poll_fn(|cx| {
                    let futures = (read.as_mut(), write.as_mut(), timer.as_mut());
                    wait.poll(cx, source, futures, stop.as_mut(), &mut d.durable)
                })
                .await
            };
            // After a park, a wake may have taken the source's registration.
            st.asked = ev.ready.is_none() && (wait.looked || (!wait.parked && st.asked));
            now = d.clock.now();
            if let Some(o) = self.handle(d, ev, &mut st, &limits, now) {
                return o;
            }
        }
    }

    /// The top of a round: an ended connection's outcome; else the
    /// engine coming up, coming online, or waiting for a call.
    fn top<E, K, S, M, D, const RUN: bool>(
        &mut self,
        d: &mut Drive<'_, E, K, S, M, D>,
        st: &mut Conn<RUN>,
        counted: bool,
        now: Instant,
    ) -> Option<Outcome<E::End>>
    where
        E: Engine,
        S: FrameSink + ?Sized,
        M: MessageSource + ?Sized,
    {
        if let Some(end) = d.engine.ended() {
            return Some(match (d.engine.reopen(), st.closing().is_some()) {
                (true, _) => Outcome::Reopen,
                (false, true) => Outcome::Stopped,
                (false, false) => Outcome::Ended { end, up: st.up },
            });
        }
        if !st.up && d.engine.accepting() {
            st.up = true;
            self.came_up(d, counted);
        }
        let online = d.engine.online();
        if online != st.online {
            st.online = online;
            if let Some(seq) = online {
                self.last_online = Some(seq);
                self.link.set(LinkState::online(seq));
            }
        }
        if d.engine.pending() {
            d.engine.received(0, now, d.sink);
        }
        None
    }

    /// After a round's writes: `Some(true)` when the goodbye is written
    /// and flushed (the stop is done), `Some(false)` to go round again
    /// (the write ended the connection, or made room for the held
    /// message or a waiting step), `None` to wait.
    fn after_write<E: Engine, const RUN: bool>(
        &self,
        engine: &mut E,
        st: &Conn<RUN>,
        wrote: bool,
    ) -> Option<bool> {
        if st.closing().is_some() && engine.closed() && self.drained(engine) && !st.unflushed {
            return Some(true);
        }
        let again = engine.ended().is_some() || wrote && (self.held.is_some() || engine.pending());
        again.then_some(false)
    }

    /// Writes what is queued as long as the transport takes it at once
    /// (a socket or UART with room, the usual case): a message then leaves
    /// in the round that queued it, without a round of waiting. What the
    /// transport does not take at once is left to [`Self::wait`].
    /// `true`: something was written.
    fn write_now<E, K, S, M, D, W, const RUN: bool>(
        &mut self,
        d: &mut Drive<'_, E, K, S, M, D>,
        tx: &mut W,
        st: &mut Conn<RUN>,
        now: Instant,
        cx: &mut Context<'_>,
    ) -> bool
    where
        E: Engine,
        K: Clock,
        S: ?Sized,
        M: ?Sized,
        W: Write,
    {
        let mut wrote_any = false;
        for _ in 0..BURST {
            if d.engine.ended().is_some() {
                return wrote_any;
            }
            let idle = self.gather.empty(GATHER) && !d.engine.has_output();
            let w = if idle {
                if !st.unflushed {
                    return wrote_any;
                }
                match pin!(tx.flush()).poll(cx) {
                    Poll::Ready(r) => Written::Flushed(r.map_err(|e| e.kind())),
                    Poll::Pending => return wrote_any,
                }
            } else {
                let out = self.gather.or(GATHER, d.engine.io().tx);
                if out.is_empty() {
                    // Output that cannot go yet (a protocol step waits).
                    return wrote_any;
                }
                match pin!(tx.write(out)).poll(cx) {
                    Poll::Ready(r) => Written::Wrote(r.map_err(|e| e.kind())),
                    // Nothing taken (the transport's write is cancel-safe).
                    Poll::Pending => return wrote_any,
                }
            };
            wrote_any |= matches!(w, Written::Wrote(Ok(1..)));
            self.written(d, w, st, now);
        }
        wrote_any
    }

    /// Hands a write round's outcome to the engine.
    fn written<E, K, S, M, D, const RUN: bool>(
        &mut self,
        d: &mut Drive<'_, E, K, S, M, D>,
        w: Written,
        st: &mut Conn<RUN>,
        now: Instant,
    ) where
        E: Engine,
        S: ?Sized,
        M: ?Sized,
    {
        match w {
            Written::Wrote(Ok(0)) => d.engine.end(IoEnd::Write(ErrorKind::WriteZero)),
            Written::Wrote(Ok(n)) => {
                d.engine.wrote();
                st.unflushed = true;
                self.transmitted(d.engine, n, now);
            }
            Written::Flushed(Ok(())) => st.unflushed = false,
            Written::Wrote(Err(k)) | Written::Flushed(Err(k)) => d.engine.end(IoEnd::Write(k)),
        }
    }

    /// `n` bytes of what was lent for writing went out.
    fn transmitted<E: Engine>(&mut self, engine: &mut E, n: usize, now: Instant) {
        let g = &mut self.gather;
        if !GATHER || g.buf.is_empty() {
            engine.transmitted(n, now);
        } else {
            g.start = (g.start + n).min(g.end);
        }
    }

    /// Whether nothing is left to write: the engine's output and the
    /// gather buffer are empty.
    fn drained<E: Engine>(&self, engine: &mut E) -> bool {
        self.gather.empty(GATHER) && engine.io().tx.is_empty()
    }

    /// Hands the events to the engine; `Some` when the connection is over
    /// for the runner's own reasons (a timeout, a stop).
    fn handle<E, K, S, M, D, const RUN: bool>(
        &mut self,
        d: &mut Drive<'_, E, K, S, M, D>,
        ev: Events,
        st: &mut Conn<RUN>,
        limits: &Limits<RUN>,
        now: Instant,
    ) -> Option<Outcome<E::End>>
    where
        E: Engine,
        K: Clock,
        S: FrameSink + ?Sized,
        M: ?Sized,
    {
        // The write first: what was lent for it is what the engine still
        // has queued (reading may queue more).
        if let Some(w) = ev.write {
            self.written(d, w, st, now);
        }
        match ev.read {
            Some(Ok(0)) => d.engine.end(IoEnd::Closed),
            Some(Ok(n)) => d.engine.received(n, now, d.sink),
            Some(Err(k)) => d.engine.end(IoEnd::Read(k)),
            None => {}
        }
        if let Some(r) = ev.ready {
            self.held = Some(r);
        }
        if RUN && ev.stop {
            if !st.up {
                return Some(Outcome::Stopped);
            }
            d.engine.close(now);
            st.closing = Some(now + limits.close_for);
        }
        if ev.timer {
            if st.closing().is_some_and(|t| now >= t) {
                log_warn!("{}: stopping without a clean goodbye", E::NAME);
                return Some(Outcome::Stopped);
            }
            if !st.up && limits.open_until().is_some_and(|t| now >= t) {
                return Some(Outcome::TimedOut);
            }
            if d.engine.poll_at().is_some_and(|t| now >= t) {
                d.engine.poll(now);
            }
        }
        None
    }
}

/// Time limits of one connection. `RUN`: a reconnecting run; a single
/// connection ([`Runner::one`]) has no timeout, no stop and is not
/// counted, known at compile time so that none of that code is linked
/// for it.
#[derive(Clone, Copy)]
struct Limits<const RUN: bool> {
    /// The engine must come up by then.
    open_until: Option<Instant>,
    /// The goodbye may take this long.
    close_for: Duration,
    /// Count the connection and replay state when it comes up (a
    /// reconnecting run).
    counted: bool,
}

impl<const RUN: bool> Limits<RUN> {
    /// The engine must come up by then.
    fn open_until(&self) -> Option<Instant> {
        self.open_until.filter(|_| RUN)
    }

    /// Count the connection and replay state when it comes up.
    fn counted(&self) -> bool {
        RUN && self.counted
    }
}

/// One connection's runner state (`RUN`: as [`Limits`]).
struct Conn<const RUN: bool> {
    /// The sequence last reported online in this connection.
    online: Option<u64>,
    up: bool,
    /// A stop came: the goodbye must be done by then.
    closing: Option<Instant>,
    /// Bytes were written since the last flush.
    unflushed: bool,
    /// The source had nothing and holds our waker.
    asked: bool,
}

impl<const RUN: bool> Conn<RUN> {
    /// A stop came: the goodbye must be done by then (only a run stops).
    fn closing(&self) -> Option<Instant> {
        self.closing.filter(|_| RUN)
    }

    /// The next instant the runner must wake for time.
    fn wake<E: Engine>(&self, engine: &E, limits: &Limits<RUN>) -> Instant {
        let mut wake = engine.poll_at().unwrap_or(Instant::MAX);
        if !self.up {
            wake = wake.min(limits.open_until().unwrap_or(Instant::MAX));
        }
        wake.min(self.closing().unwrap_or(Instant::MAX))
    }
}

/// An operation a wait polls, pinned; `None` when it has nothing to do.
type Slot<'a, T> = Pin<&'a mut Option<T>>;

/// One wait's flags (see [`Runner::connection`]).
struct Wait {
    /// The source may be asked for a message.
    want: bool,
    /// The source already holds our waker: not asked before a park.
    skip: bool,
    /// The source was asked in this wait and holds our waker.
    looked: bool,
    /// The task parked in this wait.
    parked: bool,
}

impl Wait {
    /// One poll: the first polls every pending operation and returns all
    /// that completed, so each is polled at least once per round and
    /// none starves; after a wake-up the first that completed is enough
    /// (the ready source, then the read, then the rest: the others'
    /// wakers stay registered and they are polled again next round).
    fn poll<M, RF, RE, WF, TF, F, D>(
        &mut self,
        cx: &mut Context<'_>,
        source: &mut M,
        (read, write, timer): (Slot<'_, RF>, Slot<'_, WF>, Slot<'_, TF>),
        stop: Option<&mut Pin<&mut F>>,
        durable: &mut D,
    ) -> Poll<Events>
    where
        M: MessageSource + ?Sized,
        D: Durable,
        RF: Future<Output = Result<usize, RE>>,
        RE: embedded_io_async::Error,
        WF: Future<Output = Written>,
        TF: Future<Output = ()>,
        F: Future<Output = ()>,
    {
        self.looked = false;
        let mut ev = Events::default();
        if self.want && !core::mem::take(&mut self.skip) {
            match source.poll_ready(cx) {
                Poll::Ready(r) => {
                    ev.ready = Some(r);
                    if self.parked {
                        return Poll::Ready(ev);
                    }
                }
                Poll::Pending => self.looked = true,
            }
        }
        if let Some(Poll::Ready(r)) = read.as_pin_mut().map(|f| f.poll(cx)) {
            ev.read = Some(r.map_err(|e| e.kind()));
            if self.parked {
                return Poll::Ready(ev);
            }
        }
        if let Some(Poll::Ready(r)) = write.as_pin_mut().map(|f| f.poll(cx)) {
            ev.write = Some(r);
        }
        ev.timer = timer.as_pin_mut().is_some_and(|f| f.poll(cx).is_ready());
        if let Some(s) = stop {
            ev.stop = s.as_mut().poll(cx).is_ready();
        }
        // A durable value to store also ends the wait: the round stores it.
        if ev.any() || D::ON && durable.poll_ready(cx).is_ready() {
            Poll::Ready(ev)
        } else {
            self.parked = true;
            Poll::Pending
        }
    }
}

/// What a write round did: bytes written (a flush is then owed), or a
/// flush of earlier writes.
enum Written {
    Wrote(Result<usize, ErrorKind>),
    Flushed(Result<(), ErrorKind>),
}

/// What completed while the runner waited.
#[derive(Default)]
struct Events {
    read: Option<Result<usize, ErrorKind>>,
    write: Option<Written>,
    timer: bool,
    ready: Option<Ready>,
    stop: bool,
}

impl Events {
    fn any(&self) -> bool {
        self.read.is_some()
            || self.write.is_some()
            || self.timer
            || self.ready.is_some()
            || self.stop
    }
}

/// Stores the durable routes' values as they come (a future that never
/// completes; without a backlog it does nothing).
fn keeper<'a, D: Durable, K: Clock>(
    durable: &'a mut D,
    clock: &'a K,
) -> impl Future<Output = core::convert::Infallible> + 'a {
    poll_fn(move |cx| {
        durable.keep(clock.now(), cx);
        Poll::Pending
    })
}

/// The outcome of a wait beside a keeper that never completes.
fn first<T>(e: Either<T, core::convert::Infallible>) -> T {
    match e {
        Either::First(v) => v,
        Either::Second(never) => match never {},
    }
}

/// Writes `out`; with nothing to write, flushes earlier writes (the
/// runner calls it only when there is one or the other). The flush
/// comes once the engine has nothing more to write, so a burst is
/// flushed once.
async fn write_or_flush<W: Write>(tx: &mut W, out: &[u8]) -> Written {
    if out.is_empty() {
        Written::Flushed(tx.flush().await.map_err(|e| e.kind()))
    } else {
        Written::Wrote(tx.write(out).await.map_err(|e| e.kind()))
    }
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use core::future::Future;
    use core::pin::pin;
    use core::task::{Context, Poll, Waker};

    use aimdb_core::codec::Postcard;
    use aimdb_core::inbound::Dispatch;
    use aimdb_core::outbound::{self, Routes};
    use aimdb_core::record::{Latest, Record};
    use aimdb_core::sync::Readiness;
    use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
    use embedded_io_async::{ErrorKind, ErrorType, Read, Write};

    use super::{Drive, Runner};
    use crate::clock::Frozen;
    use crate::framed::{self, Counters};

    /// Reads never complete; writes fail.
    struct Broken;

    impl ErrorType for Broken {
        type Error = ErrorKind;
    }

    impl Read for Broken {
        async fn read(&mut self, _buf: &mut [u8]) -> Result<usize, ErrorKind> {
            core::future::pending().await
        }
    }

    impl Write for Broken {
        async fn write(&mut self, _buf: &[u8]) -> Result<usize, ErrorKind> {
            Err(ErrorKind::BrokenPipe)
        }
        async fn flush(&mut self) -> Result<(), ErrorKind> {
            Ok(())
        }
    }

    /// Polls `fut` at most `n` times with a waker that does nothing.
    fn poll_bounded<F: Future>(fut: F, n: usize) -> Option<F::Output> {
        let mut fut = pin!(fut);
        let mut cx = Context::from_waker(Waker::noop());
        (0..n).find_map(|_| match fut.as_mut().poll(&mut cx) {
            Poll::Ready(v) => Some(v),
            Poll::Pending => None,
        })
    }

    #[test]
    fn a_failed_write_ends_the_connection_with_nothing_to_read() {
        static VALUE: Record<Cs, Latest<u8>, 1> = Record::new("v");
        static READY: Readiness<1> = Readiness::new();
        static STATS: Counters = Counters::new();
        let mut link = outbound::Link::new(VALUE.subscribe().unwrap(), "v", Postcard);
        let mut payload = [0u8; 8];
        let mut b = Routes::<_, 1, 1>::builder(&READY, &mut payload);
        b.link(&mut link);
        let mut source = b.build().unwrap();
        let mut sink = Dispatch::<1, 1>::builder().build().unwrap();
        let mut engine = framed::Engine::<64, 64>::new(&STATS, framed::Config::new());
        let mut runner = Runner::new();
        VALUE.write(7);
        let mut d = Drive {
            engine: &mut engine,
            clock: &Frozen,
            sink: &mut sink,
            source: &mut source,
            durable: (),
        };
        let end = poll_bounded(runner.one(&mut d, Broken, Broken), 16);
        assert_eq!(end, Some(framed::Error::Write(ErrorKind::BrokenPipe)));
    }

    /// The MQTT engine lends nothing once it has ended: the run must end
    /// on the failed write of its CONNECT, not wait for nothing.
    #[cfg(feature = "mqtt")]
    #[test]
    fn a_failed_connect_write_ends_an_mqtt_connection() {
        use crate::mqtt::{self, Cause};
        static STATS: mqtt::Counters = mqtt::Counters::new();
        static READY: Readiness<1> = Readiness::new();
        let (mut rx, mut tx) = ([0u8; 128], [0u8; 128]);
        let config = mqtt::Config::new("t");
        let mut engine = mqtt::Engine::new(&config, &mut rx, &mut tx, &STATS).unwrap();
        let mut sink = Dispatch::<1, 1>::builder().build().unwrap();
        let mut source = Routes::<_, 1, 1>::builder(&READY, &mut []).build().unwrap();
        let mut runner = Runner::new();
        let mut d = Drive {
            engine: &mut engine,
            clock: &Frozen,
            sink: &mut sink,
            source: &mut source,
            durable: (),
        };
        let end = poll_bounded(runner.one(&mut d, Broken, Broken), 16);
        assert_eq!(end, Some(Cause::Transport));
    }
    /// Keeps written bytes until a flush hands them on (a buffered UART
    /// or socket): what is never flushed never arrives. Each flush waits
    /// once before it completes, as a UART draining its buffer does.
    struct Staged<W> {
        inner: W,
        staged: std::vec::Vec<u8>,
        waited: bool,
    }

    impl<W: Write<Error = ErrorKind>> ErrorType for Staged<W> {
        type Error = ErrorKind;
    }

    impl<W: Write<Error = ErrorKind>> Write for Staged<W> {
        async fn write(&mut self, buf: &[u8]) -> Result<usize, ErrorKind> {
            self.staged.extend_from_slice(buf);
            Ok(buf.len())
        }
        async fn flush(&mut self) -> Result<(), ErrorKind> {
            core::future::poll_fn(|cx| {
                if core::mem::replace(&mut self.waited, true) {
                    Poll::Ready(())
                } else {
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
            })
            .await;
            self.waited = false;
            self.inner.write_all(&self.staged).await?;
            self.staged.clear();
            Ok(())
        }
    }

    /// A stop ends the run only once the goodbye is written and flushed:
    /// the broker receives the DISCONNECT.
    #[cfg(feature = "mqtt")]
    #[test]
    fn a_stop_ends_the_run_after_the_goodbye_is_flushed() {
        use core::sync::atomic::{AtomicBool, Ordering};

        use crate::loopback::Pair;
        use crate::mqtt;
        use crate::reconnect::{Backoff, Reconnect, Stopped};

        static PAIR: Pair<Cs, 256> = Pair::new();
        static STATS: mqtt::Counters = mqtt::Counters::new();
        static READY: Readiness<1> = Readiness::new();
        static STOP: AtomicBool = AtomicBool::new(false);
        let (mut rx, mut tx) = ([0u8; 128], [0u8; 128]);
        let mut config = mqtt::Config::new("t");
        // No presence: the goodbye is the DISCONNECT alone.
        config.presence = None;
        let mut engine = mqtt::Engine::new(&config, &mut rx, &mut tx, &STATS).unwrap();
        let mut sink = Dispatch::<1, 1>::builder().build().unwrap();
        let mut source = Routes::<_, 1, 1>::builder(&READY, &mut []).build().unwrap();
        let mut runner = Runner::new();
        let mut d = Drive {
            engine: &mut engine,
            clock: &Frozen,
            sink: &mut sink,
            source: &mut source,
            durable: (),
        };
        let (client_rx, client_tx) = PAIR.a();
        let mut connect = (
            client_rx,
            Staged {
                inner: client_tx,
                staged: std::vec::Vec::new(),
                waited: false,
            },
        );
        let settings = super::Settings {
            reconnect: Reconnect::Never,
            backoff: Backoff::default(),
            connect_timeout: None,
            close_timeout: core::time::Duration::from_secs(5),
        };
        let stop = core::future::poll_fn(|_| {
            if STOP.load(Ordering::Relaxed) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        });
        let mut run = core::pin::pin!(runner.run(&mut d, &mut connect, &settings, stop));
        let mut cx = Context::from_waker(Waker::noop());
        let (mut broker_rx, mut broker_tx) = PAIR.b();
        let mut got = [0u8; 64];
        let mut read_all = |rx: &mut crate::loopback::PipeReader<'static, Cs, 256>| {
            let mut out = std::vec::Vec::new();
            while !PAIR.a_to_b().is_empty() {
                let n = poll_bounded(rx.read(&mut got), 1).unwrap().unwrap();
                out.extend_from_slice(&got[..n]);
            }
            out
        };
        assert!(run.as_mut().poll(&mut cx).is_pending());
        let connect_packet = read_all(&mut broker_rx);
        assert_eq!(
            connect_packet.first().map(|b| b >> 4),
            Some(1),
            "CONNECT flushed"
        );
        // CONNACK: no session, success.
        poll_bounded(broker_tx.write_all(&[0x20, 0x03, 0x00, 0x00, 0x00]), 1)
            .unwrap()
            .unwrap();
        for _ in 0..4 {
            assert!(run.as_mut().poll(&mut cx).is_pending());
        }
        assert!(STATS.is_connected());
        read_all(&mut broker_rx);
        STOP.store(true, Ordering::Relaxed);
        let mut done = None;
        for _ in 0..16 {
            if let Poll::Ready(s) = run.as_mut().poll(&mut cx) {
                done = Some(s);
                break;
            }
        }
        assert_eq!(done, Some(Stopped::Requested));
        let bye = read_all(&mut broker_rx);
        assert_eq!(
            bye.first(),
            Some(&0xe0),
            "the DISCONNECT reached the broker"
        );
    }
}
