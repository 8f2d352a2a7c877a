//! Transport writes per message and the in-flight counters, counted (not
//! timed).
//!
//! - A burst of ready messages goes out in a few transport writes when the
//!   connector has a write buffer (`Mqtt::with_write_buffer`): counted by
//!   a `Connect` wrapper around the TCP transport, against mosquitto.
//! - `Stats::in_flight` and `Stats::acked` follow a broker that holds its
//!   PUBACKs: a hand-written listener (mosquitto always acknowledges),
//!   with more than 8 unacknowledged at once, and the broker's receive
//!   maximum narrowing the window.

mod mosquitto;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aimdb_connectors::mqtt::{Config, Connect, ConnectFailure, Counters, QoS};
use aimdb_connectors::reconnect::{Backoff, Reconnect};
use aimdb_connectors::tokio_io::TcpConnect;
use aimdb_core::codec::Postcard;
use aimdb_core::inbound::Dispatch;
use aimdb_core::outbound;
use aimdb_core::outbound::Routes;
use aimdb_core::record::{Record, Ring};
use aimdb_core::sync::Readiness;
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
use embedded_io_adapters::tokio_1::FromTokio;
use embedded_io_async::{ErrorType, Write};
use mosquitto::{alongside, connector, free_port, read_packet, tcp, until, within, Broker, Sub};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

fn config(client_id: &str) -> Config<'_> {
    let mut c = Config::new(client_id);
    c.reconnect = Reconnect::Never;
    c.backoff = Backoff {
        min: Duration::from_millis(50),
        max: Duration::from_millis(50),
    };
    c
}

/// A `Connect` whose TX half counts the transport writes.
struct Counting {
    inner: TcpConnect,
    writes: Arc<AtomicU32>,
}

struct CountingTx<T> {
    tx: T,
    writes: Arc<AtomicU32>,
}

impl<T: ErrorType> ErrorType for CountingTx<T> {
    type Error = T::Error;
}

impl<T: Write> Write for CountingTx<T> {
    async fn write(&mut self, buf: &[u8]) -> Result<usize, Self::Error> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.tx.write(buf).await
    }

    async fn flush(&mut self) -> Result<(), Self::Error> {
        self.tx.flush().await
    }
}

impl Connect for Counting {
    type Connection<'c> = (
        FromTokio<OwnedReadHalf>,
        CountingTx<FromTokio<OwnedWriteHalf>>,
    );
    type Error = <TcpConnect as Connect>::Error;

    async fn connect(&mut self) -> Result<Self::Connection<'_>, Self::Error> {
        let (rx, tx) = self.inner.connect().await?;
        let writes = self.writes.clone();
        Ok((rx, CountingTx { tx, writes }))
    }

    fn failure(error: &Self::Error) -> ConnectFailure {
        TcpConnect::failure(error)
    }
}

/// Messages in the burst (the ring's capacity: none is lost before the
/// connector runs).
const N: u32 = 64;

/// 64 values of a `Ring` route, all ready when the connection comes up,
/// reach mosquitto in at most 1 + 64 / 32 transport writes: the CONNECT,
/// then one write per burst of at most 32 messages (the connector's burst
/// bound). Without the write buffer, each message is a write of its own
/// (65 writes).
#[tokio::test]
async fn a_burst_of_ready_messages_goes_out_in_a_few_writes() {
    static RING: Record<Cs, Ring<u32, 64>, 1> = Record::new("ring");
    static READY: Readiness<1> = Readiness::new();

    let broker = Broker::anonymous(free_port());
    let mut sub = Sub::start(&broker, "watcher", "burst/#").await;
    let mut ring =
        outbound::Link::new(RING.subscribe().unwrap(), "burst/r", Postcard).qos(QoS::AtMostOnce);
    let mut payload = [0u8; 16];
    let mut b = Routes::<_, 1, 1>::builder(&READY, &mut payload);
    b.link(&mut ring);
    let mut routes = b.build().unwrap();
    let mut inbound = Dispatch::<1, 1>::builder().build().unwrap();
    for v in 0..N {
        RING.write(v);
    }

    let writes = Arc::new(AtomicU32::new(0));
    let connect = Counting {
        inner: tcp(broker.port),
        writes: writes.clone(),
    };
    let counters = Counters::new();
    let (mut rx, mut tx, mut batch) = ([0u8; 256], [0u8; 512], [0u8; 4096]);
    let mqtt = connector(config("aimdb-burst"), &mut rx, &mut tx, connect, &counters);
    let mut mqtt = mqtt.with_write_buffer(&mut batch);

    alongside(mqtt.run(&mut inbound, &mut routes), async {
        let mut got = Vec::new();
        while got.len() < N as usize {
            got.push(sub.next().await);
        }
        // Postcard varints: 0..=63 are one byte.
        let want: Vec<_> = (0..N).map(|v| format!("burst/r {v:02x}")).collect();
        assert_eq!(got, want);
        until("every message counted as sent", || counters.sent() == N).await;
    })
    .await;
    let w = writes.load(Ordering::Relaxed);
    assert_eq!(
        counters.writes(),
        w,
        "the connector counts the writes the transport saw"
    );
    assert!(
        w <= 1 + N / 32,
        "{w} transport writes for the CONNECT and {N} messages ready together"
    );
}

/// The packet identifier of a QoS 1 PUBLISH body: after the topic.
fn packet_id(body: &[u8]) -> [u8; 2] {
    let topic = usize::from(u16::from_be_bytes([body[0], body[1]]));
    [body[2 + topic], body[3 + topic]]
}

/// MQTT 5 CONNACK: no session, success, no properties (the broker's
/// receive maximum is then 65,535).
const CONNACK: [u8; 5] = [0x20, 0x03, 0x00, 0x00, 0x00];

/// A broker that holds its PUBACKs: more than 8 publishes go unacknowledged
/// at once, up to `Config::max_in_flight`; `in_flight` counts them,
/// `acked` what the broker then acknowledges, and the rest go out as the
/// window opens.
#[tokio::test]
async fn a_window_of_twenty_is_held_unacknowledged_and_acked_follows() {
    static RING: Record<Cs, Ring<u32, 32>, 1> = Record::new("ring");
    static READY: Readiness<1> = Readiness::new();
    window_follows_the_brokers_acknowledgements(20, &CONNACK, 20, &RING, &READY).await;
}

/// The broker's receive maximum (CONNACK property 0x21, here 5) narrows
/// the window below `Config::max_in_flight`.
#[tokio::test]
async fn the_brokers_receive_maximum_narrows_the_window() {
    let connack = [0x20, 0x06, 0x00, 0x00, 0x03, 0x21, 0x00, 0x05];
    static RING: Record<Cs, Ring<u32, 32>, 1> = Record::new("ring");
    static READY: Readiness<1> = Readiness::new();
    window_follows_the_brokers_acknowledgements(20, &connack, 5, &RING, &READY).await;
}

/// Each test has its own record and readiness (tests run in parallel).
async fn window_follows_the_brokers_acknowledgements(
    max: u16,
    connack: &[u8],
    window: usize,
    ring: &'static Record<Cs, Ring<u32, 32>, 1>,
    ready: &'static Readiness<1>,
) {
    const CONNECT: u8 = 0x10;
    const PUBLISH_QOS1: u8 = 0x32;
    let total = window + 6;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut link =
        outbound::Link::new(ring.subscribe().unwrap(), "q/r", Postcard).qos(QoS::AtLeastOnce);
    let mut payload = [0u8; 16];
    let mut b = Routes::<_, 1, 1>::builder(ready, &mut payload);
    b.link(&mut link);
    let mut routes = b.build().unwrap();
    let mut inbound = Dispatch::<1, 1>::builder().build().unwrap();
    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 256], [0u8; 1024]);
    let mut c = config("aimdb-window");
    c.keep_alive = None;
    c.ack_timeout = None;
    c.max_in_flight = max;
    let mut mqtt = connector(c, &mut rx, &mut tx, tcp(port), &counters);

    alongside(mqtt.run(&mut inbound, &mut routes), async {
        let (mut s, _) = within("the connection", listener.accept()).await.unwrap();
        let (kind, _) = within("CONNECT", read_packet(&mut s)).await;
        assert_eq!(kind & 0xf0, CONNECT);
        s.write_all(connack).await.unwrap();
        until("connected", || counters.is_connected()).await;
        for v in 0..total as u32 {
            ring.write(v);
        }
        let mut ids = Vec::new();
        for _ in 0..window {
            let (kind, body) = within("a PUBLISH", read_packet(&mut s)).await;
            assert_eq!(kind, PUBLISH_QOS1);
            ids.push(packet_id(&body));
        }
        until("a full window in flight", || {
            counters.in_flight() == window as u32
        })
        .await;
        assert_eq!(counters.acked(), 0);
        assert_eq!(counters.sent(), window as u32, "no more than the window");

        // Acknowledge three: three more go out.
        for id in &ids[..3] {
            s.write_all(&[0x40, 0x02, id[0], id[1]]).await.unwrap();
        }
        until("three acknowledged", || counters.acked() == 3).await;
        for _ in 0..3 {
            let (kind, body) = within("a PUBLISH", read_packet(&mut s)).await;
            assert_eq!(kind, PUBLISH_QOS1);
            ids.push(packet_id(&body));
        }
        until("the window full again", || {
            counters.in_flight() == window as u32
        })
        .await;

        // The rest: acknowledged in one go (a single read may carry
        // them all, and a PUBACK split across reads counts once).
        let mut acks = Vec::new();
        for id in &ids[3..] {
            acks.extend_from_slice(&[0x40, 0x02, id[0], id[1]]);
        }
        let (a, b) = acks.split_at(5);
        s.write_all(a).await.unwrap();
        s.flush().await.unwrap();
        s.write_all(b).await.unwrap();
        // The last three go out, and are acknowledged.
        for _ in 0..3 {
            let (kind, body) = within("the last PUBLISHes", read_packet(&mut s)).await;
            assert_eq!(kind, PUBLISH_QOS1);
            let id = packet_id(&body);
            s.write_all(&[0x40, 0x02, id[0], id[1]]).await.unwrap();
        }
        until("all acknowledged", || counters.acked() == total as u32).await;
        assert_eq!(counters.in_flight(), 0);
        assert_eq!(counters.sent(), total as u32);
    })
    .await;
}
