//! The connector's one future: connect, subscribe, serve, reconnect.

use core::future::poll_fn;
use core::task::Poll;

use aimdb_core::inbound::FrameSink;
use aimdb_core::outbound::{self, MessageSource};
use aimdb_core::topic::MAX_TOPIC_LEN;
use embassy_futures::select::{select, Either};
use embedded_hal_async::delay::DelayNs;
use minimq::{
    ConnectEvent, Connection, Io, PubError, Publication, ResourceError, SubscriptionOptions,
    TopicFilter,
};

use super::{Config, Connect, Counters, Mqtt, QoS, Stopped};

/// The connection is gone (or never came up); reconnect.
struct Dropped;

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
    // A publish the last drop interrupted: `source.message()` still holds it.
    let mut retry = false;

    loop {
        let attempt = async {
            let io = connect.connect().await.map_err(|_| Dropped)?;
            let mut conn = session.connect(io).await.map_err(|_| Dropped)?;
            // A resumed broker session kept its subscriptions.
            if conn.connect_event() == ConnectEvent::Connected {
                subscribe_all(&mut conn, sink, config.subscribe_qos, counters).await?;
            }
            Ok(conn)
        };
        // minimq's handshake waits for CONNACK unbounded: bound the whole
        // attempt, so a broker that accepts TCP and says nothing is retried.
        let outcome = match select(attempt, delay.delay_ms(config.connect_timeout_ms)).await {
            Either::First(r) => r,
            Either::Second(()) => Err(Dropped),
        };
        let mut conn = match outcome {
            Ok(conn) => conn,
            Err(Dropped) => {
                counters.bump_connect_failures();
                failures = failures.saturating_add(1);
                if !config.reconnect.allows(failures) {
                    return Stopped::ConnectFailed(failures);
                }
                delay
                    .delay_ms(config.backoff.delay_ms(failures.saturating_add(1)))
                    .await;
                continue;
            }
        };

        failures = 0;
        if connected_once {
            counters.bump_reconnects();
        }
        counters.set_connected(true);
        let served = async {
            if connected_once {
                if retry {
                    let m = source.message();
                    if !m.topic.is_empty() {
                        let qos = config.publish_qos.get(m.route);
                        publish(&mut conn, sink, m, qos, counters).await?;
                    }
                    retry = false;
                }
                // State is re-published: every `Latest` record's newest
                // value goes out again on the new connection.
                source.replay_latest();
            }
            serve(&mut conn, sink, source, config, counters, &mut retry).await
        };
        let Err(Dropped) = served.await;
        counters.set_connected(false);
        connected_once = true;
        drop(conn);

        if !config.reconnect.allows(0) {
            return Stopped::Disconnected;
        }
        delay.delay_ms(config.backoff.delay_ms(1)).await;
    }
}

/// Serves one live connection until it drops.
async fn serve<IO, S, M>(
    conn: &mut Connection<'_, '_, IO>,
    sink: &mut S,
    source: &mut M,
    config: &Config<'_>,
    counters: &Counters,
    retry: &mut bool,
) -> Result<core::convert::Infallible, Dropped>
where
    IO: Io,
    S: FrameSink + ?Sized,
    M: MessageSource + ?Sized,
{
    loop {
        // `poll` first: while records are busy it still runs once per
        // message, so inbound traffic and keep-alive are never starved.
        // Both futures are cancel-safe; the loser is dropped.
        match select(conn.poll(), outbound::next(source)).await {
            Either::First(Ok(Some(p))) => {
                deliver(sink, counters, p.topic(), p.payload());
                // And outbound is not starved by a busy inbound side: after
                // each received message, one ready outbound message goes.
                let ready = poll_fn(|cx| Poll::Ready(source.poll_ready(cx).is_ready())).await;
                if !ready {
                    continue;
                }
            }
            // Acks, pings: internal progress only.
            Either::First(Ok(None)) => continue,
            Either::First(Err(_)) => return Err(Dropped),
            // Taken again below through `message()`, so the borrow of
            // `source` does not outlive this match.
            Either::Second(_) => {}
        }
        let m = source.message();
        let qos = config.publish_qos.get(m.route);
        if publish(conn, sink, m, qos, counters).await.is_err() {
            *retry = true;
            return Err(Dropped);
        }
    }
}

/// Publishes one message, waiting for session capacity (QoS 1/2 in
/// flight) while still receiving.
async fn publish<IO, S>(
    conn: &mut Connection<'_, '_, IO>,
    sink: &mut S,
    m: outbound::Message<'_>,
    qos: QoS,
    counters: &Counters,
) -> Result<(), Dropped>
where
    IO: Io,
    S: FrameSink + ?Sized,
{
    let q = qos.into();
    loop {
        if !conn.can_publish(q) {
            progress(conn, sink, counters).await?;
            continue;
        }
        let r = conn
            .publish(Publication::bytes(m.topic, m.payload).qos(q))
            .await;
        let e = match r {
            Ok(_) => {
                counters.bump_published();
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
                progress(conn, sink, counters).await?;
            }
            // Transient while acknowledged packets still occupy the TX
            // slice; for good once nothing is in flight.
            minimq::Error::Resource(ResourceError::BufferTooSmall)
                if !conn.session().is_publish_quiescent() =>
            {
                progress(conn, sink, counters).await?;
            }
            minimq::Error::Resource(_) | minimq::Error::InvalidRequest => {
                counters.bump_dropped();
                return Ok(());
            }
            _ => return Err(Dropped),
        }
    }
}

/// Waits for any session progress (an ack, a received publish).
async fn progress<IO, S>(
    conn: &mut Connection<'_, '_, IO>,
    sink: &mut S,
    counters: &Counters,
) -> Result<(), Dropped>
where
    IO: Io,
    S: FrameSink + ?Sized,
{
    match conn.poll().await {
        Ok(Some(p)) => {
            deliver(sink, counters, p.topic(), p.payload());
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(_) => Err(Dropped),
    }
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
    let options = SubscriptionOptions::default().maximum_qos(qos.into());
    // `for_each_filter` lends each filter only inside the callback: copy
    // the `index`-th out. Quadratic in the filter count, once per connect.
    for index in 0.. {
        let mut filter = heapless::String::<MAX_TOPIC_LEN>::new();
        let mut k = 0usize;
        let mut found = false;
        sink.for_each_filter(&mut |f| {
            if k == index {
                found = true;
                // Dispatch validated its filters to MAX_TOPIC_LEN.
                let _ = filter.push_str(f);
            }
            k += 1;
        });
        if !found {
            break;
        }
        if filter.is_empty() {
            continue;
        }
        let op = conn
            .subscribe(&[TopicFilter::new(&filter).options(options)], &[])
            .await
            .map_err(|_| Dropped)?;
        while conn.is_pending(&op) {
            progress(conn, sink, counters).await?;
        }
        if !conn.is_complete(&op) {
            return Err(Dropped);
        }
    }
    Ok(())
}

fn deliver<S: FrameSink + ?Sized>(sink: &mut S, counters: &Counters, topic: &str, payload: &[u8]) {
    counters.bump_received();
    if sink.dispatch(topic.as_bytes(), payload).is_err() {
        counters.bump_rejected();
    }
}
