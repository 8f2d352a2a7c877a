//! The documented resource limits (README "Limits"), each driven past its
//! edge: what is refused is refused with a typed error or a counter, the
//! next good input still works, and memory does not grow.
//!
//! This binary counts the allocations each thread makes, so "memory does
//! not grow" is checked exactly (zero allocations on the connector's
//! thread) as well as by the process's resident set size.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::task::{Context, Poll};

use aimdb_connectors::framed::{self, frame, Framed, MAX_ENCODED, MAX_FRAME};
use aimdb_connectors::loopback::Pair;
use aimdb_core::codec::Postcard;
use aimdb_core::connector::{DispatchError, InboundStats, Message, OutboundStats, QoS, Ready};
use aimdb_core::connector::{FrameSink, MessageSource};
use aimdb_core::inbound;
use aimdb_core::inbound::{Dispatch, KeyedLink};
use aimdb_core::outbound::{self, Routes};
use aimdb_core::record::{Keyed, Latest, Record, Ring, KEY_MAX_LEN};
use aimdb_core::sync::Readiness;
use aimdb_core::topic::MAX_TOPIC_LEN;
use common::{leak, rss_kib};
use embassy_futures::join::join;
use embassy_futures::select::{select, Either};
use embassy_sync::blocking_mutex::raw::{CriticalSectionRawMutex as Cs, NoopRawMutex};
use embedded_io_async::Write;

// ------------------------------------------------- allocation counting

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: as for `realloc`.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made by this thread so far.
fn allocs() -> u64 {
    ALLOCS.with(|c| c.get())
}

// ------------------------------------------------------------- helpers

/// A sink that keeps the topic and payload lengths of what it is given.
#[derive(Default)]
struct Lengths {
    got: Vec<(usize, usize)>,
    stats: InboundStats,
}

impl FrameSink for Lengths {
    fn dispatch(&mut self, topic: &[u8], payload: &[u8]) -> Result<usize, DispatchError> {
        self.got.push((topic.len(), payload.len()));
        Ok(1)
    }
    fn next_filter(&self, _: usize) -> Option<(usize, &str)> {
        None
    }
    fn stats(&self) -> &InboundStats {
        &self.stats
    }
}

/// A source that hands out fixed messages, one per poll.
struct Script {
    msgs: Vec<(String, Vec<u8>)>,
    next: usize,
    stats: OutboundStats,
}

impl MessageSource for Script {
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Ready> {
        if self.next == self.msgs.len() {
            return Poll::Pending;
        }
        self.next += 1;
        Poll::Ready(Ready::new(self.next - 1))
    }
    fn message(&self, ready: Ready) -> Message<'_> {
        let (topic, payload) = &self.msgs[ready.route()];
        Message {
            route: 0,
            topic: topic.as_str(),
            payload: payload.as_slice(),
            lagged: 0,
            qos: QoS::AtMostOnce,
            retain: false,
            urgent: false,
        }
    }
    fn replay_latest(&mut self) {}
    fn stats(&self) -> &OutboundStats {
        &self.stats
    }
}

/// The postcard bytes of `(topic, payload)`: what a frame decodes to.
fn decoded_len(topic: usize, payload: usize) -> usize {
    let var = |n: usize| if n < 128 { 1 } else { 2 };
    var(topic) + topic + var(payload) + payload
}

// --------------------------------------------------------------- tests

/// `MAX_FRAME` decoded bytes (a 256-byte topic and a 1,025-byte payload
/// with their length prefixes) is the largest frame the default buffers
/// take, both ways; one byte more is skipped and counted at the sender,
/// dropped and counted at the receiver, and the next frame goes through.
#[test]
fn frame_size_limit_in_and_out() {
    assert_eq!(decoded_len(MAX_TOPIC_LEN, 1025), MAX_FRAME);
    let topic = "t".repeat(MAX_TOPIC_LEN);
    let msgs = vec![
        (topic.clone(), vec![7u8; 1025]), // exactly MAX_FRAME
        (topic.clone(), vec![7u8; 1026]), // one byte over
        ("small".to_string(), vec![1]),
    ];
    let mut source = Script {
        msgs,
        next: 0,
        stats: OutboundStats::default(),
    };
    let mut sink = Lengths::default();
    let mut none = Lengths::default();
    let pair = Pair::<NoopRawMutex, 8192>::new();
    let ((a_rx, a_tx), (b_rx, b_tx)) = (pair.a(), pair.b());
    let (a_stats, b_stats) = (framed::Counters::new(), framed::Counters::new());
    let mut a = Framed::new(&a_stats);
    let mut b = Framed::new(&b_stats);
    let mut empty = Script {
        msgs: Vec::new(),
        next: 0,
        stats: OutboundStats::default(),
    };
    embassy_futures::block_on(async {
        let send = a.run(a_rx, a_tx, &mut none, &mut source);
        let recv = b.run(b_rx, b_tx, &mut sink, &mut empty);
        let mut peer_tx = pair.a_to_b().writer();
        let done = async {
            // Outbound: the over-long message was skipped at the sender;
            // send it raw to test the receiving side too.
            while a_stats.snapshot().sent < 2 {
                yield_now().await;
            }
            let mut buf = vec![0u8; MAX_ENCODED + 8];
            let n = frame::encode(&topic, &[7u8; 1026], &mut buf).unwrap();
            write_all(&mut peer_tx, &buf[..n]).await;
            let n = frame::encode("after", &[2], &mut buf).unwrap();
            write_all(&mut peer_tx, &buf[..n]).await;
            while b_stats.snapshot().received < 3 {
                yield_now().await;
            }
        };
        match select(join(send, recv), done).await {
            Either::First(_) => panic!("a connector stopped"),
            Either::Second(()) => {}
        }
    });
    assert_eq!(a_stats.snapshot().dropped, 1);
    assert_eq!(
        sink.got,
        [(MAX_TOPIC_LEN, 1025), (5, 1), (5, 1)],
        "largest, small, after"
    );
    assert_eq!(b_stats.snapshot().oversized, 1);
}

async fn yield_now() {
    let mut done = false;
    std::future::poll_fn(|cx| {
        if done {
            return Poll::Ready(());
        }
        done = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await
}

async fn write_all(w: &mut impl Write, mut b: &[u8]) {
    while !b.is_empty() {
        let n = w.write(b).await.unwrap();
        b = &b[n..];
    }
}

/// `MAX_TOPIC_LEN` bytes of topic are accepted; one more is refused with
/// `TopicTooLong` and changes nothing.
#[test]
fn topic_length_limit() {
    let rec: &'static Record<Cs, Ring<u32, 4>, 1> = leak(Record::new("t"));
    let link = inbound::Link::new(rec, Postcard);
    let mut b = Dispatch::<1, 4>::builder();
    b.link("t/#", &link);
    let mut d = b.build().unwrap();
    let max = format!("t/{}", "x".repeat(MAX_TOPIC_LEN - 2));
    let over = format!("{max}x");
    assert_eq!(d.dispatch(max.as_bytes(), &[5]), Ok(1));
    assert_eq!(
        d.dispatch(over.as_bytes(), &[6]),
        Err(DispatchError::TopicTooLong)
    );
    assert_eq!(rec.writes(), 1);
    // A filter longer than the limit is a configuration error.
    let mut b = Dispatch::<1, 4>::builder();
    b.link(&over, &link);
    assert!(b.build().is_err());
}

/// A peer sending 100,000 distinct keys to a keyed route: the first 64
/// claim the fixed table's slots, every other one is refused with
/// `KeyTableFull` (counted), known keys keep working, and the connector's
/// thread allocates nothing while RSS stays put.
#[test]
fn one_hundred_thousand_distinct_keys_fill_the_table_and_memory_stays_flat() {
    const KEYS: u32 = 100_000;
    const CAPACITY: usize = 64;
    static DEVICES: Keyed<Cs, Latest<u32>, CAPACITY, 1> = Keyed::new("devices");
    let link = KeyedLink::new(&DEVICES, Postcard);
    let mut b = Dispatch::<1, 4>::builder();
    b.link_keyed("dev/+/v", 1, &link);
    let mut dispatch = b.build().unwrap();
    let mut none = Routes::<_, 1, 1>::builder(leak(Readiness::<1>::new()), &mut [])
        .build()
        .unwrap();
    let pair = Pair::<NoopRawMutex, 4096>::new();
    let ((_, mut peer_tx), (rx, tx)) = (pair.a(), pair.b());
    let stats = framed::Counters::new();
    let mut framed = Framed::<128, 128>::with_sizes(&stats);

    let rss_before = rss_kib();
    let allocs_before = allocs();
    embassy_futures::block_on(async {
        let run = framed.run(rx, tx, &mut dispatch, &mut none);
        let flood = async {
            let mut topic = [0u8; 32];
            let mut buf = [0u8; 64];
            for k in 0..KEYS {
                let t = fmt_topic(&mut topic, k);
                let n = frame::encode(t, &[(k % 100) as u8], &mut buf).unwrap();
                write_all(&mut peer_tx, &buf[..n]).await;
            }
            // Known keys still land.
            let n = frame::encode("dev/k0/v", &[42], &mut buf).unwrap();
            write_all(&mut peer_tx, &buf[..n]).await;
            while stats.snapshot().received < KEYS + 1 {
                yield_now().await;
            }
        };
        match select(run, flood).await {
            Either::First(e) => panic!("connector stopped: {e}"),
            Either::Second(()) => {}
        }
    });
    let allocated = allocs() - allocs_before;
    let rss_after = rss_kib();
    eprintln!(
        "100,000 keys: {} claimed, {} refused; {allocated} allocations; \
         RSS {rss_before} KiB before, {rss_after} KiB after",
        DEVICES.len(),
        dispatch.stats().key_table_full
    );
    assert_eq!(DEVICES.len(), CAPACITY);
    assert_eq!(dispatch.stats().key_table_full, KEYS - CAPACITY as u32);
    assert_eq!(stats.snapshot().rejected, KEYS - CAPACITY as u32);
    assert_eq!(
        stats.snapshot().received,
        KEYS + 1,
        "received counts the refused too"
    );
    assert_eq!(DEVICES.get("k0").map(|r| r.writes()), Some(2));
    assert_eq!(allocated, 0, "the connector allocated");
    // Zero allocations is the exact check; RSS is the process-level one,
    // with room for the other tests of this binary running alongside (a
    // leak of one allocation per refused key would be several MiB).
    assert!(
        rss_after <= rss_before + 2048,
        "RSS grew from {rss_before} KiB to {rss_after} KiB"
    );
    let long = "k".repeat(KEY_MAX_LEN + 1);
    assert_eq!(
        dispatch.dispatch(format!("dev/{long}/v").as_bytes(), &[1]),
        Err(DispatchError::KeyInvalid)
    );
}

/// `dev/k{n}/v` into `buf`, no allocation.
fn fmt_topic(buf: &mut [u8; 32], n: u32) -> &str {
    use std::io::Write as _;
    let mut cur = std::io::Cursor::new(&mut buf[..]);
    write!(cur, "dev/k{n}/v").unwrap();
    let len = cur.position() as usize;
    std::str::from_utf8(&buf[..len]).unwrap()
}

/// Pending outbound per route is the route's buffer: a `Ring<_, 16>`
/// written 10,000 times while nothing sends keeps the newest 16, and the
/// 9,984 lost are reported exactly, without allocating.
#[test]
fn pending_outbound_per_route_is_the_ring_capacity() {
    let rec: &'static Record<Cs, Ring<u32, 16>, 1> = leak(Record::new("r"));
    let mut link = outbound::Link::new(rec.subscribe().unwrap(), "r", Postcard);
    let (mut payload, mut topic) = ([0u8; 8], [0u8; 8]);
    let mut b = Routes::<_, 1, 1>::builder(leak(Readiness::<1>::new()), &mut payload)
        .written_topics(&mut topic);
    b.link(&mut link);
    let mut routes = b.build().unwrap();
    let mut got = Vec::with_capacity(16);
    let before = allocs();
    for v in 0..10_000 {
        rec.write(v);
    }

    let mut lagged = 0;
    let waker = std::task::Waker::noop();
    let mut cx = Context::from_waker(waker);
    while let Poll::Ready(m) = routes.poll_next(&mut cx) {
        lagged += m.lagged;
        got.push(postcard::from_bytes::<u32>(m.payload).unwrap());
    }
    assert_eq!(allocs() - before, 0);
    assert_eq!(got, (9_984..10_000).collect::<Vec<_>>());
    assert_eq!((lagged, routes.stats().lagged), (9_984, 9_984));
}

// ------------------------------------------------------ MQTT packet size

#[cfg(all(feature = "mqtt", feature = "tokio"))]
mod mosquitto;

/// `n` bytes of `v`'s low byte: a payload of a chosen size.
#[cfg(all(feature = "mqtt", feature = "tokio"))]
fn padded(v: &u32, buf: &mut [u8]) -> Result<usize, aimdb_core::codec::EncodeError> {
    let n = *v as usize;
    let out = buf
        .get_mut(..n)
        .ok_or(aimdb_core::codec::EncodeError::BufferTooSmall)?;
    out.fill(b'x');
    Ok(n)
}

/// The MQTT packet size is bounded by the session buffers given to
/// `Mqtt::new`: an outbound message over the TX buffer is dropped and
/// counted, the connection stays up and the next one goes; the RX size is
/// sent to the broker as the MQTT 5 Maximum Packet Size, so the broker
/// withholds a larger inbound message (it never reaches the connector) and
/// the next one arrives.
#[cfg(all(feature = "mqtt", feature = "tokio"))]
#[tokio::test]
async fn mqtt_packet_size_is_bounded_by_the_session_buffers() {
    use aimdb_connectors::mqtt::{Config, Counters};
    use mosquitto::{alongside, connector, free_port, publish, tcp, until, within, Broker, Sub};

    static OUT: Record<Cs, Ring<u32, 4>, 1> = Record::new("out");
    static IN: Record<Cs, Ring<u8, 4>, 1> = Record::new("in");
    static READY: Readiness<1> = Readiness::new();
    let broker = Broker::anonymous(free_port());
    let mut sub = Sub::start(&broker, "watcher", "big/#").await;

    let encode: fn(&u32, &mut [u8]) -> Result<usize, aimdb_core::codec::EncodeError> = padded;
    let mut out = outbound::Link::new(OUT.subscribe().unwrap(), "big/out", encode);
    let (mut payload, mut topic) = ([0u8; 2048], [0u8; 16]);
    let mut b = Routes::<_, 1, 1>::builder(&READY, &mut payload).written_topics(&mut topic);
    b.link(&mut out);
    let mut routes = b.build().unwrap();
    let in_link = inbound::Link::new(&IN, Postcard);
    let mut b = Dispatch::<1, 2>::builder();
    b.link("big/in", &in_link);
    let mut inbound = b.build().unwrap();
    let mut in_reader = IN.subscribe().unwrap();

    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 256], [0u8; 512]);
    let c = Config::new("aimdb-bounds");
    let mut mqtt = connector(c, &mut rx, &mut tx, tcp(broker.port), &counters);
    let body = async {
        until("connected", || counters.is_connected()).await;
        OUT.write(600); // over the 512-byte TX buffer
        OUT.write(3);
        assert_eq!(sub.next().await, "big/out 787878", "the small one, alone");
        publish(&broker, "big/in", &[b'y'; 1000]).await; // over the 256-byte RX
        publish(&broker, "big/in", &[7]).await;
        assert_eq!(within("inbound", in_reader.recv()).await, Ok(7));
    };
    alongside(mqtt.run(&mut inbound, &mut routes), body).await;
    let s = counters.snapshot();
    assert_eq!(s.dropped, 1, "{s:?}");
    assert_eq!(s.sent, 1, "{s:?}");
    assert_eq!(s.received, 1, "the large one never arrived: {s:?}");
    assert_eq!((s.reconnects, s.rejected), (0, 0), "{s:?}");
    assert_eq!(IN.writes(), 1);
}
