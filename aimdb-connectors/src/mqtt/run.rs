//! The connector's one future: connect, subscribe, serve, reconnect.

use core::future::poll_fn;
use core::task::Poll;

use aimdb_core::connector::{FrameSink, Message, MessageSource, Ready};
use aimdb_core::topic::MAX_TOPIC_LEN;
use embassy_futures::select::{select, select3, Either, Either3};
use embassy_time::{Duration, Instant, Timer};
use embedded_hal_async::delay::DelayNs;
use embedded_io_async::{ErrorType, Read, Write};
use minimq::{
    ConnectEvent, Connection, InboundPublish, Io, PubError, Publication, ResourceError,
    RetainHandling, SubscriptionOptions, TopicFilter,
};
use portable_atomic::{AtomicU32, Ordering};

use super::{minimq_qos, Cause, Config, Connect, Counters, Mqtt, QoS};
use crate::connect::Duplex;
use crate::reconnect::{wait, Reconnect, Stopped};

/// The connection is gone (or never came up), and why; reconnect.
struct Dropped(Cause);

/// The transport, counting reads that returned data (the connector's only
/// way to tell that the broker said something: minimq's `poll` also
/// returns after its own writes). A count, not a clock: an `AtomicU32`
/// with one writer needs no read-modify-write, so this works on
/// `thumbv6m`, and keeps the connector future `Send`.
struct Heard<'h, IO> {
    io: IO,
    reads: &'h AtomicU32,
}

impl<IO: ErrorType> ErrorType for Heard<'_, IO> {
    type Error = IO::Error;
}

impl<IO: Read> Read for Heard<'_, IO> {
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize, Self::Error> {
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
        self.io.write(buf).await
    }

    async fn flush(&mut self) -> Result<(), Self::Error> {
        self.io.flush().await
    }
}

/// The acknowledgement timeout: while QoS 1/2 publishes wait for their
/// acknowledgement, the broker must send *something* (an ack, a publish, a
/// PINGRESP) at least every `timeout`, or the connection is taken for dead.
///
/// Keep-alive alone does not notice a dead link while we publish: every
/// write counts as activity, so no PINGREQ goes out until the in-flight
/// window is full and then the PINGRESP wait is minimq's fixed 5 s. On a
/// stream that cannot report a close (a UART bridged to TCP, a half-open
/// socket) that is several seconds of values written into nothing.
///
/// What counts as hearing from the broker is bytes read from the transport
/// ([`Heard`]); minimq's `poll` also returns after its own writes.
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
            timeout: config
                .ack_timeout
                .map(|d| Duration::from_micros(u64::try_from(d.as_micros()).unwrap_or(u64::MAX))),
            reads,
            seen_reads: reads.load(Ordering::Relaxed),
            owed_since: None,
        }
    }

    /// Call after each publish and each return of `poll`: restarts the
    /// clock if the broker sent anything, starts or stops it as
    /// acknowledgements become owed or settled.
    fn update<IO: Io>(&mut self, conn: &Connection<'_, '_, IO>) {
        let reads = self.reads.load(Ordering::Relaxed);
        let heard = reads != self.seen_reads;
        self.seen_reads = reads;
        if conn.session().is_publish_quiescent() {
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

pub(super) async fn run<C, D, S, M>(
    mqtt: &mut Mqtt<'_, C, D>,
    sink: &mut S,
    source: &mut M,
) -> Stopped
where
    C: Connect,
    D: DelayNs,
    S: FrameSink + ?Sized,
    M: MessageSource + ?Sized,
{
    let Mqtt {
        session,
        connect,
        delay,
        config,
        counters,
    } = mqtt;
    let counters: &Counters = counters;
    // Failed attempts since the last successful connection.
    let mut failures = 0u32;
    let mut connected_once = false;
    // A publish the last drop interrupted: its message is still intact.
    let mut retry: Option<Ready> = None;
    // Reads with data on the current transport (see `Heard`).
    let reads = AtomicU32::new(0);
    // minimq opens the first connection after boot with Clean Start = 1
    // (it has no session yet, and no option to ask for one). mosquitto (2.0,
    // checked with `mosquitto_sub -V mqttv5 -x 300`) then keeps the session
    // for its expiry while it runs, but does not restore it after its own
    // restart: it persists resumable sessions only when the latest CONNECT
    // had Clean Start = 0. So with a session expiry, a fresh first session
    // is closed at once with a normal DISCONNECT (the broker keeps it) and
    // reopened with Clean Start = 0, once per run. Not with
    // `Reconnect::Never`: there is no second connection to resume it on.
    let mut reopen = config.session_expiry.is_some() && config.reconnect != Reconnect::Never;

    loop {
        let attempt = async {
            let (rx, tx) = connect
                .connect()
                .await
                .map_err(|e| Dropped(Cause::Connect(C::failure(&e))))?;
            let io = Heard {
                io: Duplex { rx, tx },
                reads: &reads,
            };
            let mut conn = session
                .connect(io)
                .await
                .map_err(|e| Dropped(Cause::of(&e, true)))?;
            // A resumed broker session kept its subscriptions.
            if conn.connect_event() == ConnectEvent::Connected {
                subscribe_all(&mut conn, sink, config.subscribe_qos, counters).await?;
                // Subscribed first: the reopened session keeps them.
                if core::mem::take(&mut reopen) {
                    conn.disconnect()
                        .await
                        .map_err(|e| Dropped(Cause::of(&e, false)))?;
                    return Ok(None);
                }
            }
            reopen = false;
            Ok(Some(conn))
        };
        // minimq's handshake waits for CONNACK unbounded: bound the whole
        // attempt, so a broker that accepts TCP and says nothing is retried.
        let outcome = match select(attempt, wait(delay, config.connect_timeout)).await {
            Either::First(r) => r,
            Either::Second(()) => Err(Dropped(Cause::ConnectTimeout)),
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
                wait(delay, config.backoff.delay(failures.saturating_add(1))).await;
                continue;
            }
        };

        failures = 0;
        if connected_once {
            counters.bump_reconnects();
        }
        counters.set_connected(true);
        log_info!(
            "mqtt: connected ({} session)",
            if conn.connect_event() == ConnectEvent::Reconnected {
                "resumed"
            } else {
                "new"
            }
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
            serve(
                &mut conn, sink, source, config, counters, &reads, &mut retry,
            )
            .await
        };
        let Err(Dropped(cause)) = served.await;
        counters.set_connected(false);
        counters.set_last_error(cause);
        log_warn!("mqtt: connection lost: {}", cause);
        connected_once = true;
        drop(conn);

        if !config.reconnect.allows(0) {
            return Stopped::Disconnected;
        }
        wait(delay, config.backoff.delay(1)).await;
    }
}

/// Serves one live connection until it drops.
async fn serve<IO, S, M>(
    conn: &mut Connection<'_, '_, IO>,
    sink: &mut S,
    source: &mut M,
    config: &Config<'_>,
    counters: &Counters,
    reads: &AtomicU32,
    retry: &mut Option<Ready>,
) -> Result<core::convert::Infallible, Dropped>
where
    IO: Io,
    S: FrameSink + ?Sized,
    M: MessageSource + ?Sized,
{
    let mut live = Liveness::new(config, reads);
    // A resumed session may start with replayed publishes in flight.
    live.update(conn);
    loop {
        // `poll` first: while records are busy it still runs once per
        // message, so inbound traffic and keep-alive are never starved.
        // All three futures are cancel-safe; the losers are dropped.
        let ready = poll_fn(|cx| source.poll_ready(cx));
        let event = select3(conn.poll(), ready, live.expired()).await;
        let event = match event {
            Either3::First(r) => Either::First(r),
            Either3::Second(m) => Either::Second(m),
            Either3::Third(()) => {
                counters.bump_ack_timeouts();
                return Err(Dropped(Cause::AckTimeout));
            }
        };
        let ready = match event {
            Either::First(Ok(Some(p))) => {
                deliver(sink, counters, &p);
                live.update(conn);
                // And outbound is not starved by a busy inbound side: after
                // each received message, one ready outbound message goes.
                let now = poll_fn(|cx| {
                    Poll::Ready(match source.poll_ready(cx) {
                        Poll::Ready(r) => Some(r),
                        Poll::Pending => None,
                    })
                });
                match now.await {
                    Some(r) => r,
                    None => continue,
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
        let m = source.message(ready);
        if let Err(d) = publish(conn, sink, m, counters, &mut live).await {
            *retry = Some(ready);
            return Err(d);
        }
    }
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
    IO: Io,
    S: FrameSink + ?Sized,
{
    let q = minimq_qos(m.qos);
    loop {
        if !conn.can_publish(q) {
            progress(conn, sink, counters, Some(live)).await?;
            continue;
        }
        let r = conn
            .publish({
                let p = Publication::bytes(m.topic, m.payload).qos(q);
                if m.retain {
                    p.retain()
                } else {
                    p
                }
            })
            .await;
        let e = match r {
            Ok(_) => {
                counters.bump_sent();
                counters.add_lagged(m.lagged);
                live.update(conn);
                return Ok(());
            }
            Err(PubError::Session(e)) => e,
            // A byte slice always serializes.
            Err(PubError::Payload(_)) => {
                counters.bump_dropped();
                return Ok(());
            }
        };
        match e {
            minimq::Error::NotReady | minimq::Error::Resource(ResourceError::InflightExhausted) => {
                progress(conn, sink, counters, Some(live)).await?;
            }
            // Transient while acknowledged packets still occupy the TX
            // slice; for good once nothing is in flight.
            minimq::Error::Resource(ResourceError::BufferTooSmall)
                if !conn.session().is_publish_quiescent() =>
            {
                progress(conn, sink, counters, Some(live)).await?;
            }
            minimq::Error::Resource(_) | minimq::Error::InvalidRequest => {
                counters.bump_dropped();
                return Ok(());
            }
            e => return Err(Dropped(Cause::of(&e, false))),
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
    IO: Io,
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
    IO: Io,
    S: FrameSink + ?Sized,
{
    let options = SubscriptionOptions::default().maximum_qos(minimq_qos(qos));
    // Filters none of whose links applies retained messages (commands):
    // the broker is asked not to send them (MQTT 5 retain handling 2);
    // one that sends them anyway is ignored by `dispatch_retained`.
    let no_retained = options.retain_behavior(RetainHandling::Never);
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
        let op = conn
            .subscribe(
                &[
                    TopicFilter::new(&filter).options(if sink.wants_retained(&filter) {
                        options
                    } else {
                        no_retained
                    }),
                ],
                &[],
            )
            .await
            .map_err(|e| Dropped(Cause::of(&e, true)))?;
        while conn.is_pending(&op) {
            progress(conn, sink, counters, None).await?;
        }
        if !conn.is_complete(&op) {
            // SUBACK with a failure code (not kept by minimq): 0x80,
            // "unspecified error".
            return Err(Dropped(Cause::Refused(0x80)));
        }
    }
    Ok(())
}

fn deliver<S: FrameSink + ?Sized>(sink: &mut S, counters: &Counters, p: &InboundPublish<'_>) {
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
