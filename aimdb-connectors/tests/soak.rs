//! Soak (ignored in normal runs; `make soak` runs it): 1,000,000 messages
//! across 256 routes, bounded at ten minutes.
//!
//! ```text
//!  device ──framed over TCP, Faulty on its write half──► gateway ──MQTT QoS 1──► mosquitto ──► subscriber
//!  256 Ring<u32, 64>        (split, stalls, closed at      256 Ring<u32, 64>,              (restarted     256 Ring<u32, 64>
//!  routes "dev/{i}"          a random byte every            2 readers: checker and          half-way)      from "soak/{i}"
//!                            connection; reconnects)        the MQTT route "soak/{i}"
//! ```
//!
//! Three threads with their own current-thread runtimes, as three
//! processes would be; the broker is a real mosquitto, killed by PID and
//! started again on the same port once half the messages went through.
//! The producer keeps every route within its Ring's capacity (at most
//! `WINDOW` values ahead of the slower of the two legs).
//!
//! What is asserted:
//!
//! - **framed leg** (device → gateway, faults in the path): every value of
//!   every route arrives **exactly once, in order** (checked value by value
//!   as it lands); nothing lagged; connections were closed by the fault
//!   transport with frames still to send (re-sent on the next one).
//! - **MQTT leg** (gateway → broker → subscriber, QoS 1, broker restart
//!   without persistence): per route, no value arrives out of order
//!   except as a repeat of one already received (QoS 1 re-delivery); the
//!   values lost are only those in flight when the broker died (at most
//!   `WINDOW` × routes in all, the most the pacing lets be in flight);
//!   every route's last value arrives. Lost and
//!   repeated counts are printed.
//! - **memory**: resident set size (VmRSS) at the end is within 8 MiB of
//!   its value after warm-up (10% of the messages); both are printed.
#![cfg(all(feature = "mqtt", feature = "tokio"))]

mod common;
mod mosquitto;

use std::future::{poll_fn, Future};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::task::Poll;
use std::time::{Duration, Instant};

use aimdb_connectors::fault::{Fault, Faulty, Kinds, Plan, Random};
use aimdb_connectors::framed::{self, Error, Framed};
use aimdb_connectors::mqtt::{Config, Counters, QoS};
use aimdb_connectors::reconnect::Backoff;
use aimdb_connectors::tokio_io;
use aimdb_core::codec::Postcard;
use aimdb_core::inbound;
use aimdb_core::inbound::Dispatch;
use aimdb_core::outbound::Routes;
use aimdb_core::record::{Reader, Record, RecvError, Ring};
use aimdb_core::sync::Readiness;
use common::{dispatch_over, leak, out_links, routes_over, rss_kib};
use embassy_futures::select::{select, Either};
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
use mosquitto::{connector, free_port, tcp, Broker, Gated};

const ROUTES: usize = 256;
const TOTAL: usize = 1_000_000;
/// Values per route: 3,907 × 256 = 1,000,192 messages.
const ROUNDS: u32 = TOTAL.div_ceil(ROUTES) as u32;
const DEPTH: usize = 64;
/// Values a route may be ahead of the slower leg: within every Ring.
const WINDOW: u32 = 48;
const LIMIT: Duration = Duration::from_secs(600);
const W: usize = ROUTES / 32;

type Dev = Record<Cs, Ring<u32, DEPTH>, 1>;
type Gw = Record<Cs, Ring<u32, DEPTH>, 2>;
type Sub = Record<Cs, Ring<u32, DEPTH>, 1>;

/// Progress shared by the threads.
struct Shared {
    /// Values the gateway received per route (= the next one expected).
    framed: [AtomicU32; ROUTES],
    /// One past the highest value the subscriber received per route.
    mqtt: [AtomicU32; ROUTES],
    mqtt_lost: AtomicU64,
    mqtt_repeated: AtomicU64,
    framed_total: AtomicU64,
    connections: AtomicU32,
    closed_by_fault: AtomicU32,
    cut_mid_frame: AtomicU32,
    /// The gateway may connect to the broker.
    gate: AtomicBool,
    stop: AtomicBool,
}

static SHARED: Shared = Shared {
    framed: [const { AtomicU32::new(0) }; ROUTES],
    mqtt: [const { AtomicU32::new(0) }; ROUTES],
    mqtt_lost: AtomicU64::new(0),
    mqtt_repeated: AtomicU64::new(0),
    framed_total: AtomicU64::new(0),
    connections: AtomicU32::new(0),
    closed_by_fault: AtomicU32::new(0),
    cut_mid_frame: AtomicU32::new(0),
    gate: AtomicBool::new(true),
    stop: AtomicBool::new(false),
};
static G_MQTT: Counters = Counters::new();
static S_MQTT: Counters = Counters::new();

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Resolves once `stop` is set.
async fn stopped() {
    while !SHARED.stop.load(Relaxed) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `fut` until the soak stops.
async fn until_stop<T>(fut: impl Future<Output = T>) -> Option<T> {
    match select(fut, stopped()).await {
        Either::First(v) => Some(v),
        Either::Second(()) => None,
    }
}

/// Drains `readers` for ever, handing each value to `f(route, value)`;
/// parks on the readers' wakers when all are empty.
async fn drain<B, const R: usize>(
    readers: &mut [Reader<'static, Cs, B, R>],
    mut f: impl FnMut(usize, Result<u32, RecvError>),
) where
    B: aimdb_core::record::Buffer<Item = u32>,
{
    poll_fn(|cx| {
        for (i, r) in readers.iter_mut().enumerate() {
            while let Poll::Ready(v) = r.poll_recv(cx) {
                f(i, v);
            }
        }
        Poll::<()>::Pending
    })
    .await
}

fn config(id: &str) -> Config<'_> {
    let mut c = Config::new(id);
    c.backoff = Backoff {
        min: Duration::from_millis(20),
        max: Duration::from_millis(200),
    };
    c.keep_alive = Some(Duration::from_secs(5));
    c.subscribe_qos = QoS::AtLeastOnce;
    c
}

/// The device: produces, and keeps a framed connection to the gateway up
/// through the fault transport. Returns (lagged, frames out).
fn device(gateway: u16) -> (u64, u32) {
    static READY: Readiness<W> = Readiness::new();
    let outs: Vec<&'static Dev> = (0..ROUTES).map(|_| leak(Record::new("dev"))).collect();
    let topics: Vec<String> = (0..ROUTES).map(|i| format!("dev/{i}")).collect();
    let mut links = out_links(&outs, &topics);
    let (mut payload, mut topic) = ([0u8; 16], [0u8; 16]);
    let mut routes = routes_over::<_, W, ROUTES>(&READY, &mut payload, &mut topic, &mut links);
    let mut nothing = Dispatch::<1, 1>::builder().build().unwrap();
    let stats = framed::Counters::new();
    let mut framed = Framed::<64, 512>::with_sizes(&stats);

    runtime().block_on(async {
        let produce = async {
            for v in 0..ROUNDS {
                for (i, r) in outs.iter().enumerate() {
                    let mut spins = 0u32;
                    loop {
                        let done = SHARED.framed[i]
                            .load(Relaxed)
                            .min(SHARED.mqtt[i].load(Relaxed));
                        if v < done + WINDOW {
                            break;
                        }
                        spins += 1;
                        if spins < 64 {
                            tokio::task::yield_now().await;
                        } else {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    }
                    r.write(v);
                }
                if v % 8 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            stopped().await;
        };
        let link = async {
            let mut seed = 0x5eed_u64;
            loop {
                let Ok(stream) = tokio::net::TcpStream::connect(("127.0.0.1", gateway)).await
                else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let (rx, tx) = tokio_io::tcp(stream);
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                // Closed after 20 kB .. 420 kB, split into pieces of 1..700
                // bytes, with a stall every ~4 kB.
                let close = [Fault::Close {
                    at: 20_000 + (seed >> 33) % 400_000,
                }];
                let plan = Plan::new()
                    .script(&close)
                    .split_random(700, seed)
                    .random(Random {
                        seed,
                        mean_gap: 4096,
                        max_len: 1,
                        kinds: Kinds::DELAY,
                        end: u64::MAX,
                    });
                let mut tx = Faulty::new(tx, plan);
                framed.reset();
                routes.replay_latest();
                SHARED.connections.fetch_add(1, Relaxed);
                let end = framed.run(rx, &mut tx, &mut nothing, &mut routes).await;
                if tx.injected().closed {
                    assert_eq!(end, Error::Write(embedded_io_async::ErrorKind::BrokenPipe));
                    SHARED.closed_by_fault.fetch_add(1, Relaxed);
                    if framed.unsent_frames() > 0 {
                        SHARED.cut_mid_frame.fetch_add(1, Relaxed);
                    }
                }
                // Dropping the halves closes the socket in order: the
                // gateway reads everything sent, then end-of-stream.
            }
        };
        let _ = until_stop(embassy_futures::join::join(produce, link)).await;
    });
    (routes.stats().lagged, stats.snapshot().sent)
}

/// The gateway: framed in from the device (checked exactly once, in
/// order), MQTT out to the broker.
fn gateway(listener: std::net::TcpListener, broker: u16) -> u32 {
    static READY: Readiness<W> = Readiness::new();
    let inns: Vec<&'static Gw> = (0..ROUTES).map(|_| leak(Record::new("gw"))).collect();
    let dev_topics: Vec<String> = (0..ROUTES).map(|i| format!("dev/{i}")).collect();
    let mqtt_topics: Vec<String> = (0..ROUTES).map(|i| format!("soak/{i}")).collect();
    let in_links: Vec<_> = inns
        .iter()
        .map(|r| inbound::Link::new(*r, Postcard))
        .collect();
    let mut dispatch = dispatch_over::<ROUTES, 4>(&dev_topics, &in_links);
    let mut checkers: Vec<_> = inns.iter().map(|r| r.subscribe().unwrap()).collect();
    let mut links = out_links(&inns, &mqtt_topics);
    let (mut payload, mut topic) = ([0u8; 16], [0u8; 16]);
    let mut routes = routes_over::<_, W, ROUTES>(&READY, &mut payload, &mut topic, &mut links);
    let mut none = Routes::<_, 1, 1>::builder(leak(Readiness::<1>::new()), &mut [])
        .build()
        .unwrap();
    let stats = framed::Counters::new();
    let mut framed = Framed::<64, 64>::with_sizes(&stats);
    let (mut rx, mut tx) = (vec![0u8; 2048], vec![0u8; 16 * 1024]);
    let connect = Gated {
        inner: tcp(broker),
        open: || SHARED.gate.load(Relaxed),
    };
    let mut mqtt = connector(config("soak-gateway"), &mut rx, &mut tx, connect, &G_MQTT);

    runtime().block_on(async {
        listener.set_nonblocking(true).unwrap();
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        let accept = async {
            loop {
                let (stream, _) = listener.accept().await.expect("accept");
                framed.reset();
                let (rx, tx) = tokio_io::tcp(stream);
                let _ = framed.run(rx, tx, &mut dispatch, &mut none).await;
            }
        };
        let check = drain(&mut checkers, |i, v| {
            let want = SHARED.framed[i].load(Relaxed);
            assert_eq!(v, Ok(want), "framed leg, route {i}: exactly once, in order");
            SHARED.framed[i].store(want + 1, Relaxed);
            SHARED.framed_total.fetch_add(1, Relaxed);
        });
        let mut empty = Dispatch::<1, 1>::builder().build().unwrap();
        let publish = mqtt.run(&mut empty, &mut routes);
        let _ = until_stop(embassy_futures::join::join3(accept, check, publish)).await;
    });
    let s = stats.snapshot();
    assert_eq!(s.errors_in(), 0, "{s:?}");
    s.received
}

/// The subscriber: MQTT in from the broker, checked for order.
fn subscriber(broker: u16) {
    let inns: Vec<&'static Sub> = (0..ROUTES).map(|_| leak(Record::new("sub"))).collect();
    let topics: Vec<String> = (0..ROUTES).map(|i| format!("soak/{i}")).collect();
    let in_links: Vec<_> = inns
        .iter()
        .map(|r| inbound::Link::new(*r, Postcard))
        .collect();
    let mut dispatch = dispatch_over::<ROUTES, 4>(&topics, &in_links);
    let mut readers: Vec<_> = inns.iter().map(|r| r.subscribe().unwrap()).collect();
    let mut none = Routes::<_, 1, 1>::builder(leak(Readiness::<1>::new()), &mut [])
        .build()
        .unwrap();
    let (mut rx, mut tx) = (vec![0u8; 2048], vec![0u8; 2048]);
    let connect = tcp(broker);
    let mut mqtt = connector(
        config("soak-subscriber"),
        &mut rx,
        &mut tx,
        connect,
        &S_MQTT,
    );
    // Which values each route has seen, to tell a repeat from a reorder.
    let mut seen = vec![vec![false; ROUNDS as usize]; ROUTES];

    runtime().block_on(async {
        let check = drain(&mut readers, |i, v| {
            let v = v.unwrap_or_else(|e| panic!("MQTT leg, route {i}: {e}"));
            let next = SHARED.mqtt[i].load(Relaxed);
            if v >= next {
                SHARED.mqtt_lost.fetch_add(u64::from(v - next), Relaxed);
                SHARED.mqtt[i].store(v + 1, Relaxed);
            } else {
                assert!(
                    seen[i][v as usize],
                    "MQTT leg, route {i}: {v} arrived after {next} and is not a repeat"
                );
                SHARED.mqtt_repeated.fetch_add(1, Relaxed);
            }
            seen[i][v as usize] = true;
        });
        let run = mqtt.run(&mut dispatch, &mut none);
        let _ = until_stop(embassy_futures::join::join(check, run)).await;
    });
}

fn total(a: &[AtomicU32; ROUTES]) -> u64 {
    a.iter().map(|x| u64::from(x.load(Relaxed))).sum()
}

#[test]
#[ignore = "soak: 1,000,000 messages, minutes; run with `make soak`"]
fn one_million_messages_framed_with_faults_and_mqtt_with_a_broker_restart() {
    let started = Instant::now();
    let deadline = started + LIMIT;
    let port = free_port();
    let quiet = "log_type error\nmax_queued_messages 0\nset_tcp_nodelay true\n";
    let mut broker = Some(Broker::anonymous_with(port, quiet));

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let gw_port = listener.local_addr().unwrap().port();
    let threads = [
        std::thread::spawn(move || {
            subscriber(port);
            (0, 0)
        }),
        std::thread::spawn(move || (0, gateway(listener, port))),
        std::thread::spawn(move || device(gw_port)),
    ];
    let wait = |what: &str, cond: &dyn Fn() -> bool| {
        while !cond() {
            assert!(
                threads.iter().all(|t| !t.is_finished()),
                "a soak thread ended early (panicked?) while waiting for {what}"
            );
            assert!(
                Instant::now() < deadline,
                "over {LIMIT:?} waiting for {what}: framed {} MQTT {}",
                total(&SHARED.framed),
                total(&SHARED.mqtt)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let all = (ROUTES * ROUNDS as usize) as u64;

    wait("warm-up", &|| total(&SHARED.mqtt) >= all / 10);
    let rss_start = rss_kib();
    let t_warm = started.elapsed();

    wait("half", &|| total(&SHARED.mqtt) >= all / 2);
    // Restart: the gateway stays away until the subscriber is back, so
    // what it publishes after the restart has a subscriber.
    SHARED.gate.store(false, Relaxed);
    drop(broker.take());
    wait("both to notice", &|| {
        !G_MQTT.is_connected() && !S_MQTT.is_connected()
    });
    broker = Some(Broker::anonymous_with(port, quiet));
    wait("the subscriber to reconnect", &|| {
        S_MQTT.is_connected() && S_MQTT.reconnects() == 1
    });
    SHARED.gate.store(true, Relaxed);
    wait("the gateway to reconnect", &|| {
        G_MQTT.is_connected() && G_MQTT.reconnects() == 1
    });

    wait("every message", &|| {
        SHARED.framed.iter().all(|n| n.load(Relaxed) == ROUNDS)
            && SHARED.mqtt.iter().all(|n| n.load(Relaxed) == ROUNDS)
    });
    let rss_end = rss_kib();
    let elapsed = started.elapsed();
    SHARED.stop.store(true, Relaxed);
    let [s, g, d] = threads.map(|t| t.join().expect("soak thread"));
    drop(broker);
    let (lagged, _) = d;
    let (_, frames_in) = g;
    let _ = s;

    let lost = SHARED.mqtt_lost.load(Relaxed);
    let repeated = SHARED.mqtt_repeated.load(Relaxed);
    let host = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default();
    eprintln!(
        "soak: {all} messages x 2 legs in {elapsed:.1?} (warm-up {t_warm:.1?}) on {host}, {} CPUs\n\
         soak: framed leg: {} connections, {} closed by the fault transport ({} with frames to re-send), \
         exactly once in order\n\
         soak: MQTT leg: broker restarted once; {lost} lost in flight, {repeated} repeated\n\
         soak: RSS after warm-up {rss_start} KiB, at the end {rss_end} KiB",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        SHARED.connections.load(Relaxed),
        SHARED.closed_by_fault.load(Relaxed),
        SHARED.cut_mid_frame.load(Relaxed),
    );
    assert_eq!(
        frames_in as u64, all,
        "framed leg: every frame arrived once"
    );
    assert_eq!(lagged, 0, "the producer stayed within the Rings");
    assert!(SHARED.closed_by_fault.load(Relaxed) >= 3);
    assert!(
        lost <= ROUTES as u64 * u64::from(WINDOW),
        "MQTT leg: lost {lost}, more than was in flight"
    );
    assert!(
        rss_end <= rss_start + 8 * 1024,
        "RSS grew from {rss_start} KiB to {rss_end} KiB"
    );
}
