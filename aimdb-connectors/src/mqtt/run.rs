//! The connector's one future: connect, subscribe, serve, reconnect.

use core::future::{poll_fn, Future};
use core::pin::{pin, Pin};
use core::task::Poll;

use aimdb_core::connector::{FrameSink, Message, MessageSource, Ready};
use aimdb_core::topic::MAX_TOPIC_LEN;
use embassy_futures::select::{select, select3, select4, Either, Either3, Either4};
use embassy_time::{Duration, Instant, Timer};
use embedded_hal_async::delay::DelayNs;
use embedded_io_async::{ErrorType, Read, Write};
use portable_atomic::{AtomicBool, AtomicU32, Ordering};

use super::session::{Connection, Inbound, PubError};
use super::{Cause, Config, Connect, Counters, Mqtt, Presence, QoS};
use crate::connect::Duplex;
use crate::reconnect::{wait, Reconnect, Stopped};
use aimdb_core::codec::Encode;
use aimdb_core::link::{self, LinkState, PresenceJson, PRESENCE_MAX};
use aimdb_core::record::Sink;

/// The connection is gone (or never came up), and why; reconnect.
struct Dropped(Cause);

/// Length of the will payload: the longest offline presence payload with
/// cause `lost`, padded with spaces. Fixed, so a will's bytes do not
/// depend on the sequence's digits.
const WILL_LEN: usize = 64;

/// The will payload of the connection with birth sequence `seq`.
fn will_payload(seq: u64) -> [u8; WILL_LEN] {
    let mut out = [b' '; WILL_LEN];
    // 64 bytes hold the longest `lost` payload (45 + 20 digits fit: see
    // the unit test); padding stays spaces.
    let _ = PresenceJson.encode(&LinkState::offline(seq, link::Cause::Lost), &mut out);
    out
}

/// The transport as the session sees it. It
///
/// - counts reads that returned data (the connector's only way to tell
///   that the broker said something: `poll` also returns after its own
///   writes). A count, not a clock: an `AtomicU32` with one writer needs
///   no read-modify-write, so this works on `thumbv6m`, and keeps the
///   connector future `Send`;
/// - counts transport writes into [`Counters`];
/// - with a write buffer ([`Mqtt::with_write_buffer`]), gathers writes in
///   it ([`Batch`]) while `hold` is set, and writes them out at the first
///   flush without `hold`, or before any read: the session reads only
///   when it waits for the broker, which must have seen them first.
struct Heard<'h, IO> {
    io: IO,
    reads: &'h AtomicU32,
    counters: &'h Counters,
    batch: Batch<'h>,
    hold: &'h AtomicBool,
}

/// Bytes written into the batch buffer and not yet to the transport:
/// `buf[start..end]`. `start` moves with each transport write, so a
/// write cancelled half-way resumes where it stopped.
struct Batch<'b> {
    buf: &'b mut [u8],
    start: usize,
    end: usize,
    /// Written out of the buffer since the transport's last flush.
    unflushed: bool,
}

impl<'b> Batch<'b> {
    fn new(buf: &'b mut [u8]) -> Self {
        Self {
            buf,
            start: 0,
            end: 0,
            unflushed: false,
        }
    }
}

impl<IO: ErrorType> ErrorType for Heard<'_, IO> {
    type Error = IO::Error;
}

impl<IO: Write> Heard<'_, IO> {
    /// Writes the batch out. `false`: the transport took nothing (against
    /// its contract; the caller reports it as the transport closing).
    async fn drain(&mut self) -> Result<bool, IO::Error> {
        let b = &mut self.batch;
        while b.start < b.end {
            let n = self.io.write(&b.buf[b.start..b.end]).await?;
            if n == 0 {
                return Ok(false);
            }
            self.counters.bump_writes();
            b.start += n;
            b.unflushed = true;
        }
        b.start = 0;
        b.end = 0;
        Ok(true)
    }

    /// One write straight to the transport (the batch is empty).
    async fn direct(&mut self, buf: &[u8]) -> Result<usize, IO::Error> {
        let n = self.io.write(buf).await?;
        self.counters.bump_writes();
        self.batch.unflushed = true;
        Ok(n)
    }
}

impl<IO: Read + Write> Read for Heard<'_, IO> {
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize, Self::Error> {
        // The broker answers only what it has seen.
        if self.batch.end > 0 && !self.drain().await? {
            return Ok(0);
        }
        if self.batch.unflushed {
            self.io.flush().await?;
            self.batch.unflushed = false;
        }
        let n = self.io.read(buf).await?;
        if n > 0 {
            let r = self.reads.load(Ordering::Relaxed);
            self.reads.store(r.wrapping_add(1), Ordering::Relaxed);
        }
        Ok(n)
    }
}

impl<IO: Write> Write for Heard<'_, IO> {
    async fn write(&mut self, buf: &[u8]) -> Result<usize, Self::Error> {
        let cap = self.batch.buf.len();
        if cap == 0 {
            // No write buffer: each write goes through.
            let n = self.io.write(buf).await?;
            self.counters.bump_writes();
            return Ok(n);
        }
        if self.batch.end + buf.len() > cap {
            if !self.drain().await? {
                return Ok(0);
            }
            if buf.len() >= cap {
                return self.direct(buf).await;
            }
        }
        let b = &mut self.batch;
        b.buf[b.end..b.end + buf.len()].copy_from_slice(buf);
        b.end += buf.len();
        Ok(buf.len())
    }

    async fn flush(&mut self) -> Result<(), Self::Error> {
        if self.batch.end > 0 {
            if self.hold.load(Ordering::Relaxed) {
                return Ok(());
            }
            if !self.drain().await? {
                // Reported by the next read, as the transport closing.
                return Ok(());
            }
        }
        self.batch.unflushed = false;
        self.io.flush().await
    }
}

/// The acknowledgement timeout: while QoS 1/2 publishes wait for their
/// acknowledgement, the broker must send *something* (an ack, a publish, a
/// PINGRESP) at least every `timeout`, or the connection is taken for dead.
///
/// Keep-alive alone does not notice a dead link while we publish: every
/// write counts as activity, so no PINGREQ goes out until the in-flight
/// window is full and then the PINGRESP wait is 5 s. On a
/// stream that cannot report a close (a UART bridged to TCP, a half-open
/// socket) that is several seconds of values written into nothing.
///
/// What counts as hearing from the broker is bytes read from the transport
/// ([`Heard`]); `poll` also returns after its own writes.
struct Liveness<'h> {
    timeout: Option<Duration>,
    reads: &'h AtomicU32,
    /// `reads` when last looked at.
    seen_reads: u32,
    /// Since when acknowledgements have been owed with nothing heard.
    owed_since: Option<Instant>,
}

impl<'h> Liveness<'h> {
    fn new(config: &Config<'_>, reads: &'h AtomicU32) -> Self {
        Self {
            timeout: config.ack_timeout.map(to_embassy),
            reads,
            seen_reads: reads.load(Ordering::Relaxed),
            owed_since: None,
        }
    }

    /// Call after each publish and each return of `poll`: restarts the
    /// clock if the broker sent anything, starts or stops it as
    /// acknowledgements become owed or settled.
    fn update<IO: Read + Write>(&mut self, conn: &Connection<'_, '_, IO>) {
        let reads = self.reads.load(Ordering::Relaxed);
        let heard = reads != self.seen_reads;
        self.seen_reads = reads;
        if conn.is_quiescent() {
            self.owed_since = None;
        } else if heard || self.owed_since.is_none() {
            self.owed_since = Some(Instant::now());
        }
    }

    /// Resolves when the broker has been silent too long with
    /// acknowledgements owed; never while none are owed.
    async fn expired(&self) {
        match (self.timeout, self.owed_since) {
            (Some(t), Some(since)) => Timer::at(since + t).await,
            _ => core::future::pending().await,
        }
    }
}

/// Where a link is reported, if anywhere; each state written once.
struct Report<'l> {
    sink: Option<&'l (dyn Sink<LinkState> + Sync)>,
    last: Option<LinkState>,
}

impl Report<'_> {
    fn set(&mut self, state: LinkState) {
        if let Some(sink) = self.sink {
            if self.last != Some(state) {
                self.last = Some(state);
                sink.write(state);
            }
        }
    }
}

/// The link-state cause for why a connection ended.
fn link_cause(cause: Cause) -> link::Cause {
    match cause {
        Cause::Transport => link::Cause::Io,
        Cause::Protocol => link::Cause::Protocol,
        Cause::AckTimeout => link::Cause::Silent,
        _ => link::Cause::Closed,
    }
}

pub(super) async fn run<C, D, S, M, F>(
    mqtt: &mut Mqtt<'_, C, D>,
    sink: &mut S,
    source: &mut M,
    stop: F,
) -> Stopped
where
    C: Connect,
    D: DelayNs,
    S: FrameSink + ?Sized,
    M: MessageSource + ?Sized,
    F: Future<Output = ()>,
{
    let Mqtt {
        session,
        connect,
        delay,
        config,
        counters,
        link: link_sink,
        seq,
        batch,
    } = mqtt;
    let counters: &Counters = counters;
    let mut stop = pin!(stop);
    let mut report = Report {
        sink: *link_sink,
        last: None,
    };
    // Failed attempts since the last successful connection.
    let mut failures = 0u32;
    let mut connected_once = false;
    // A publish the last drop interrupted: its message is still intact.
    let mut retry: Option<Ready> = None;
    // Reads with data on the current transport (see `Heard`).
    let reads = AtomicU32::new(0);
    // Set while a burst of ready messages is published (see `serve`).
    let hold = AtomicBool::new(false);
    // The first connection after boot opens with Clean Start = 1 (there is
    // no session state to resume yet). mosquitto (2.0,
    // checked with `mosquitto_sub -V mqttv5 -x 300`) then keeps the session
    // for its expiry while it runs, but does not restore it after its own
    // restart: it persists resumable sessions only when the latest CONNECT
    // had Clean Start = 0. So with a session expiry, a fresh first session
    // is closed at once with a normal DISCONNECT (the broker keeps it) and
    // reopened with Clean Start = 0, once per run. Not with
    // `Reconnect::Never`: there is no second connection to resume it on.
    let mut reopen = config.session_expiry.is_some() && config.reconnect != Reconnect::Never;

    loop {
        // The birth sequence this connection gets if it comes up.
        let next = seq.wrapping_add(1);
        report.set(LinkState::connecting(next));
        // Outside the transport (a reference in it): a connection's future
        // and its buffers stay small on the steady path.
        let will = will_payload(next);
        let presence = config.presence;
        let attempt = async {
            let (rx, tx) = connect
                .connect()
                .await
                .map_err(|e| Dropped(Cause::Connect(C::failure(&e))))?;
            let io = Heard {
                io: Duplex { rx, tx },
                reads: &reads,
                counters,
                batch: Batch::new(batch),
                hold: &hold,
            };
            let will: &[u8] = if presence.is_some() { &will } else { &[] };
            let mut conn = session
                .connect(io, will)
                .await
                .map_err(|e| Dropped(Cause::of(&e, true)))?;
            let fresh = !conn.resumed();
            if fresh {
                counters.clear_in_flight();
            }
            if fresh && reopen {
                // Subscribed first: the reopened session keeps them.
                subscribe_all(&mut conn, sink, config.subscribe_qos, counters).await?;
                reopen = false;
                conn.disconnect()
                    .await
                    .map_err(|e| Dropped(Cause::of(&e, false)))?;
                return Ok(None);
            }
            reopen = false;
            // The birth before anything else.
            if let Some(p) = &presence {
                announce(&mut conn, sink, p, LinkState::online(next), counters).await?;
            }
            // A resumed broker session kept its subscriptions.
            if fresh {
                subscribe_all(&mut conn, sink, config.subscribe_qos, counters).await?;
            }
            Ok(Some(conn))
        };
        // The handshake waits for CONNACK unbounded: bound the whole
        // attempt, so a broker that accepts TCP and says nothing is retried.
        let outcome =
            match select3(attempt, wait(delay, config.connect_timeout), stop.as_mut()).await {
                Either3::First(r) => r,
                Either3::Second(()) => Err(Dropped(Cause::ConnectTimeout)),
                Either3::Third(()) => return stopped(&mut report, *seq),
            };
        let mut conn = match outcome {
            Ok(Some(conn)) => conn,
            // Reopened (see `reopen`): connect again at once.
            Ok(None) => continue,
            Err(Dropped(cause)) => {
                counters.bump_connect_failures();
                counters.set_last_error(cause);
                failures = failures.saturating_add(1);
                if crate::log_shim::worth_logging(failures) {
                    log_warn!("mqtt: connection attempt {} failed: {}", failures, cause);
                }
                if !config.reconnect.allows(failures) {
                    return Stopped::ConnectFailed(failures);
                }
                let backoff = wait(delay, config.backoff.delay(failures.saturating_add(1)));
                if let Either::Second(()) = select(backoff, stop.as_mut()).await {
                    return stopped(&mut report, *seq);
                }
                continue;
            }
        };

        *seq = next;
        failures = 0;
        if connected_once {
            counters.bump_reconnects();
        }
        counters.set_connected(true);
        report.set(LinkState::online(next));
        log_info!(
            "mqtt: connected ({} session)",
            if conn.resumed() { "resumed" } else { "new" }
        );
        let served = async {
            if connected_once {
                if let Some(ready) = retry.take() {
                    let mut live = Liveness::new(config, &reads);
                    let m = source.message(ready);
                    if let Err(d) = publish(&mut conn, sink, m, counters, &mut live).await {
                        retry = Some(ready);
                        return Err(d);
                    }
                }
                // State is re-published: every `Latest` record's newest
                // value goes out again on the new connection.
                source.replay_latest();
            }
            let r = serve(
                &mut conn,
                sink,
                source,
                config,
                counters,
                (&reads, &hold),
                &mut retry,
                stop.as_mut(),
            )
            .await;
            hold.store(false, Ordering::Relaxed);
            r
        };
        let cause = match served.await {
            Ok(()) => {
                goodbye(&mut conn, sink, config, counters, next).await;
                counters.set_connected(false);
                return stopped(&mut report, next);
            }
            Err(Dropped(cause)) => cause,
        };
        counters.set_connected(false);
        counters.set_last_error(cause);
        report.set(LinkState::offline(next, link_cause(cause)));
        log_warn!("mqtt: connection lost: {}", cause);
        connected_once = true;
        drop(conn);

        if !config.reconnect.allows(0) {
            return Stopped::Disconnected;
        }
        let backoff = wait(delay, config.backoff.delay(1));
        if let Either::Second(()) = select(backoff, stop.as_mut()).await {
            return stopped(&mut report, *seq);
        }
    }
}

/// Stopped on request: the link is down for that reason.
fn stopped(report: &mut Report<'_>, seq: u64) -> Stopped {
    report.set(LinkState::offline(seq, link::Cause::Stopped));
    Stopped::Requested
}

/// Publishes `state` on the presence topic (retained) and, at QoS 1/2,
/// waits for the broker's acknowledgement.
async fn announce<IO, S>(
    conn: &mut Connection<'_, '_, IO>,
    sink: &mut S,
    presence: &Presence<'_>,
    state: LinkState,
    counters: &Counters,
) -> Result<(), Dropped>
where
    IO: Read + Write,
    S: FrameSink + ?Sized,
{
    let mut buf = [0u8; PRESENCE_MAX];
    // PRESENCE_MAX holds every presence payload.
    let n = PresenceJson.encode(&state, &mut buf).unwrap_or(0);
    loop {
        match conn
            .publish(presence.topic, &buf[..n], presence.qos, true)
            .await
        {
            Ok(()) => break,
            Err(PubError::Busy) => progress(conn, sink, counters, None).await?,
            Err(PubError::Session(e)) => return Err(Dropped(Cause::of(&e, false))),
            // The TX slice cannot hold a presence publish.
            Err(PubError::TooLarge) => return Err(Dropped(Cause::Protocol)),
        }
    }
    while !conn.is_quiescent() {
        progress(conn, sink, counters, None).await?;
    }
    Ok(())
}

/// A stop on purpose: the offline presence (the DISCONNECT suppresses the
/// will), what is in flight acknowledged, then a normal DISCONNECT; all
/// within the connect timeout.
async fn goodbye<IO, S>(
    conn: &mut Connection<'_, '_, IO>,
    sink: &mut S,
    config: &Config<'_>,
    counters: &Counters,
    seq: u64,
) where
    IO: Read + Write,
    S: FrameSink + ?Sized,
{
    let polite = async {
        if let Some(p) = &config.presence {
            let bye = LinkState::offline(seq, link::Cause::Stopped);
            announce(conn, sink, p, bye, counters).await?;
        }
        while !conn.is_quiescent() {
            progress(conn, sink, counters, None).await?;
        }
        conn.disconnect()
            .await
            .map_err(|e| Dropped(Cause::of(&e, false)))
    };
    if let Either::First(Err(Dropped(cause))) =
        select(polite, Timer::after(to_embassy(config.connect_timeout))).await
    {
        log_warn!("mqtt: stopping without a clean goodbye: {}", cause);
    }
}

fn to_embassy(d: core::time::Duration) -> Duration {
    Duration::from_micros(u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Serves one live connection until it drops (`Err`) or `stop` completes
/// (`Ok`).
#[allow(clippy::too_many_arguments)]
async fn serve<IO, S, M, F>(
    conn: &mut Connection<'_, '_, IO>,
    sink: &mut S,
    source: &mut M,
    config: &Config<'_>,
    counters: &Counters,
    (reads, hold): (&AtomicU32, &AtomicBool),
    retry: &mut Option<Ready>,
    mut stop: Pin<&mut F>,
) -> Result<(), Dropped>
where
    IO: Read + Write,
    S: FrameSink + ?Sized,
    M: MessageSource + ?Sized,
    F: Future<Output = ()>,
{
    let mut live = Liveness::new(config, reads);
    // A resumed session may start with replayed publishes in flight.
    live.update(conn);
    // The source was just polled with this task's waker and had nothing
    // (`now_ready`): the waker is registered, so the next poll of `ready`
    // can wait for it rather than look again. A write since then has
    // woken the task, and the poll after that looks.
    let mut asked = false;
    loop {
        // `poll` first: while records are busy it still runs once per
        // message, so inbound traffic and keep-alive are never starved.
        // All three futures are cancel-safe; the losers are dropped.
        let mut skip = core::mem::take(&mut asked);
        let ready = poll_fn(|cx| {
            if core::mem::take(&mut skip) {
                return Poll::Pending;
            }
            source.poll_ready(cx)
        });
        let event = select4(conn.poll(), ready, live.expired(), stop.as_mut()).await;
        let event = match event {
            Either4::First(r) => Either::First(r),
            Either4::Second(m) => Either::Second(m),
            Either4::Third(()) => {
                counters.bump_ack_timeouts();
                return Err(Dropped(Cause::AckTimeout));
            }
            Either4::Fourth(()) => return Ok(()),
        };
        let ready = match event {
            Either::First(Ok(Some(p))) => {
                deliver(sink, counters, &p);
                live.update(conn);
                // And outbound is not starved by a busy inbound side: after
                // each received message, what is ready goes.
                match now_ready(source).await {
                    Some(r) => r,
                    None => {
                        asked = true;
                        continue;
                    }
                }
            }
            // Acks, pings: internal progress only.
            Either::First(Ok(None)) => {
                live.update(conn);
                continue;
            }
            Either::First(Err(e)) => return Err(Dropped(Cause::of(&e, false))),
            Either::Second(r) => r,
        };
        // A burst: what is ready now goes out without parking in between,
        // gathered into few transport writes (`Heard`), up to `BURST`
        // messages; then inbound and keep-alive get their turn.
        hold.store(true, Ordering::Relaxed);
        let mut ready = ready;
        for n in 1..=BURST {
            let m = source.message(ready);
            if let Err(d) = publish(conn, sink, m, counters, &mut live).await {
                *retry = Some(ready);
                return Err(d);
            }
            // A `Ready` taken is a message owed: ask only if it can go now.
            if n == BURST {
                break;
            }
            match now_ready(source).await {
                Some(r) => ready = r,
                None => {
                    asked = true;
                    break;
                }
            }
        }
        // The next `poll` writes the gathered bytes before it reads.
        hold.store(false, Ordering::Relaxed);
    }
}

/// Messages published in one burst at most.
const BURST: usize = 32;

/// The next ready message if one is ready now; never parks.
async fn now_ready<M: MessageSource + ?Sized>(source: &mut M) -> Option<Ready> {
    poll_fn(|cx| {
        Poll::Ready(match source.poll_ready(cx) {
            Poll::Ready(r) => Some(r),
            Poll::Pending => None,
        })
    })
    .await
}

/// Publishes one message, waiting for session capacity (QoS 1/2 in
/// flight) while still receiving.
async fn publish<IO, S>(
    conn: &mut Connection<'_, '_, IO>,
    sink: &mut S,
    m: Message<'_>,
    counters: &Counters,
    live: &mut Liveness<'_>,
) -> Result<(), Dropped>
where
    IO: Read + Write,
    S: FrameSink + ?Sized,
{
    loop {
        if !conn.can_publish(m.qos) {
            progress(conn, sink, counters, Some(live)).await?;
            continue;
        }
        match conn.publish(m.topic, m.payload, m.qos, m.retain).await {
            Ok(()) => {
                counters.bump_sent();
                counters.add_lagged(m.lagged);
                live.update(conn);
                return Ok(());
            }
            // Room comes back as acknowledgements arrive.
            Err(PubError::Busy) => progress(conn, sink, counters, Some(live)).await?,
            Err(PubError::TooLarge) => {
                counters.bump_dropped();
                return Ok(());
            }
            Err(PubError::Session(e)) => return Err(Dropped(Cause::of(&e, false))),
        }
    }
}

/// Waits for any session progress (an ack, a received publish); with
/// `live`, gives up when the broker stays silent past the acknowledgement
/// timeout.
async fn progress<IO, S>(
    conn: &mut Connection<'_, '_, IO>,
    sink: &mut S,
    counters: &Counters,
    live: Option<&mut Liveness<'_>>,
) -> Result<(), Dropped>
where
    IO: Read + Write,
    S: FrameSink + ?Sized,
{
    let polled = match &live {
        Some(l) => match select(conn.poll(), l.expired()).await {
            Either::First(r) => r,
            Either::Second(()) => {
                counters.bump_ack_timeouts();
                return Err(Dropped(Cause::AckTimeout));
            }
        },
        None => conn.poll().await,
    };
    let r = match polled {
        Ok(Some(p)) => {
            deliver(sink, counters, &p);
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(e) => Err(Dropped(Cause::of(&e, false))),
    };
    if let (Ok(()), Some(l)) = (&r, live) {
        l.update(conn);
    }
    r
}

/// Subscribes to every filter of `sink`, one SUBSCRIBE each, waiting for
/// its SUBACK (publishes arriving meanwhile are dispatched).
async fn subscribe_all<IO, S>(
    conn: &mut Connection<'_, '_, IO>,
    sink: &mut S,
    qos: QoS,
    counters: &Counters,
) -> Result<(), Dropped>
where
    IO: Read + Write,
    S: FrameSink + ?Sized,
{
    // Subscription options: the maximum QoS, and for filters none of whose
    // links applies retained messages (commands) retain handling 2: the
    // broker is asked not to send them; one that sends them anyway is
    // ignored by `dispatch_retained`.
    let options = qos as u8;
    let no_retained = options | 2 << 4;
    // Copied out of the table so the borrow ends before the SUBSCRIBE is
    // awaited; `next_filter` resumes where the last one was found, so the
    // whole enumeration is linear in the route count.
    let mut from = 0;
    loop {
        let mut filter = heapless::String::<MAX_TOPIC_LEN>::new();
        let Some((next, f)) = sink.next_filter(from) else {
            break;
        };
        from = next;
        // Dispatch validated its filters to MAX_TOPIC_LEN.
        if filter.push_str(f).is_err() || filter.is_empty() {
            continue;
        }
        let options = if sink.wants_retained(&filter) {
            options
        } else {
            no_retained
        };
        conn.subscribe(&filter, options)
            .await
            .map_err(|e| Dropped(Cause::of(&e, true)))?;
        let code = loop {
            match conn.suback() {
                Some(code) => break code,
                None => progress(conn, sink, counters, None).await?,
            }
        };
        if code >= 0x80 {
            // Refused: 0x87 not authorized, 0x8f invalid filter, ...
            return Err(Dropped(Cause::Refused(code)));
        }
    }
    Ok(())
}

fn deliver<S: FrameSink + ?Sized>(sink: &mut S, counters: &Counters, p: &Inbound<'_>) {
    counters.bump_received();
    // An empty payload is how MQTT clears a retained message (subscribers
    // get it, retained or not): not a value, and not a bad one.
    if p.payload().is_empty() {
        counters.bump_cleared();
        return;
    }
    let (topic, payload) = (p.topic().as_bytes(), p.payload());
    let r = if p.retained() {
        sink.dispatch_retained(topic, payload)
    } else {
        sink.dispatch(topic, payload)
    };
    if let Err(e) = r {
        counters.bump_rejected();
        let n = counters.rejected();
        if crate::log_shim::worth_logging(n) {
            log_warn!(
                "mqtt: rejected a message on {}: {} ({} so far)",
                p.topic(),
                e.as_str(),
                n
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_will_payload_fits_and_is_padded_with_spaces() {
        let p = will_payload(u64::MAX);
        let text = core::str::from_utf8(&p).unwrap();
        let json = r#"{"status":"offline","seq":18446744073709551615,"cause":"lost"}"#;
        assert_eq!(text.trim_end(), json);
        assert!(text[json.len()..].bytes().all(|b| b == b' '));
    }
}
