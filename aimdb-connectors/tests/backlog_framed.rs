//! A durable backlog over the framed link: values stored while the peer
//! is away arrive once it is back, through a connection broken with
//! values in flight, and leave the sender's backlog only once the peer
//! acknowledged them — and, with a [`Hold`], only once the peer's
//! application says they are safe.
//!
//! ```text
//!  producer ─► Ring<4> ─► durable route ─► backlog (file) ─► Framed::run_reconnecting_durable ══TCP══► Framed::run ─► GOT
//!                                                                        ▲                                │
//!                                                                        └──────── acknowledgements ◄─────┘ (Hold)
//! ```
//!
//! Every wait is bounded by `WAIT`.
#![cfg(all(feature = "backlog", feature = "tokio"))]

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use aimdb_connectors::backlog::{self, page_cache, Backlog, FileFlash, Full};
use aimdb_connectors::engine::Id;
use aimdb_connectors::framed::{self, Framed, Hold};
use aimdb_connectors::reconnect::Backoff;
use aimdb_connectors::tokio_io::{self, TcpConnect, TokioClock};
use aimdb_core::codec::Postcard;
use aimdb_core::inbound::{self, Dispatch};
use aimdb_core::outbound::{self, Routes};
use aimdb_core::record::{Reader, Record, Ring};
use aimdb_core::sync::Readiness;
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
use tokio::net::TcpListener;

const PAGES: u32 = 16;
const WAIT: Duration = Duration::from_secs(30);

/// The sender's backlog in a fresh file, and its connector run until the
/// future is dropped.
async fn sender(
    values: Reader<'static, Cs, Ring<u32, 4>, 1>,
    ready: &'static Readiness<1>,
    addr: String,
    file: std::path::PathBuf,
    counters: &'static backlog::Counters,
    link: &'static framed::Counters,
    fresh: bool,
) {
    let flash = <FileFlash>::open(&file, PAGES).expect("the backlog file");
    let mut buf = [0u8; 64];
    let cache = page_cache::<16>();
    let range = 0..PAGES * <FileFlash>::PAGE as u32;
    let mut backlog = Backlog::open(
        flash,
        range,
        cache,
        0,
        Full::RefuseNewest,
        counters,
        &mut buf,
    )
    .await
    .expect("open the backlog");
    let mut link_out = outbound::Link::new(values, "t", Postcard);
    let mut payload = [0u8; 16];
    let mut b = Routes::<_, 1, 1>::builder(ready, &mut payload);
    b.link(&mut link_out);
    let mut durable_routes = b.build().unwrap();
    let mut entry = [0u8; 64];
    let durable = backlog::Durable::new(&mut backlog, &mut durable_routes, &mut entry);
    let mut inbound = Dispatch::<1, 1>::builder().build().unwrap();
    let none: &'static Readiness<1> = Box::leak(Box::new(Readiness::new()));
    let mut p = [0u8; 4];
    let mut plain = Routes::<_, 1, 1>::builder(none, &mut p).build().unwrap();
    let mut config = framed::Config::new();
    config.backoff = Backoff {
        min: Duration::from_millis(10),
        max: Duration::from_millis(50),
    };
    if !fresh {
        let mut framed = Framed::new(link).with_config(config);
        framed
            .run_reconnecting_durable(
                TcpConnect::new(addr),
                TokioClock::new(),
                &mut inbound,
                &mut plain,
                durable,
            )
            .await;
        unreachable!("reconnects for ever");
    }
    // A new connector for each connection, the backlog kept (as a
    // device that starts its connector again when a link ends).
    let mut durable = durable;
    loop {
        let Ok(stream) = tokio::net::TcpStream::connect(&addr).await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let (rx, tx) = tokio_io::tcp(stream);
        let mut framed = Framed::new(link);
        framed
            .run_with_clock_durable(
                rx,
                tx,
                TokioClock::new(),
                &mut inbound,
                &mut plain,
                &mut durable,
            )
            .await;
    }
}

/// Waits (bounded) until `done`.
async fn until(what: &str, done: impl Fn() -> bool) {
    let t = tokio::time::Instant::now();
    while !done() {
        assert!(t.elapsed() < WAIT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn temp_file(tag: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("aimdb-{tag}-{}.bin", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

/// The receiving side of one connection: what arrives on `t` goes to
/// `got`; runs until dropped.
async fn receiver(
    listener: &TcpListener,
    got: &'static Record<Cs, Ring<u32, 1024>, 1>,
    counters: &'static framed::Counters,
    hold: Option<&'static (dyn Hold + Sync)>,
) {
    let (stream, _) = listener.accept().await.expect("accept");
    let (rx, tx) = tokio_io::tcp(stream);
    let link = inbound::Link::new(got, Postcard);
    let mut b = Dispatch::<1, 1>::builder();
    b.link("t", &link);
    let mut dispatch = b.build().unwrap();
    let none: &'static Readiness<1> = Box::leak(Box::new(Readiness::new()));
    let mut p = [0u8; 4];
    let mut routes = Routes::<_, 1, 1>::builder(none, &mut p).build().unwrap();
    let mut framed = Framed::new(counters);
    if let Some(h) = hold {
        framed = framed.with_hold(h);
    }
    let _ = framed
        .run_with_clock(rx, tx, TokioClock::new(), &mut dispatch, &mut routes)
        .await;
    std::future::pending::<()>().await;
}

/// Records of one run of [`away_and_back`].
struct Run {
    values: &'static Record<Cs, Ring<u32, 4>, 1>,
    got: &'static Record<Cs, Ring<u32, 1024>, 1>,
    ready: &'static Readiness<1>,
    backlog: &'static backlog::Counters,
    link: &'static framed::Counters,
    peer: &'static framed::Counters,
}

fn run() -> Run {
    Run {
        values: Box::leak(Box::new(Record::new("values"))),
        got: Box::leak(Box::new(Record::new("got"))),
        ready: Box::leak(Box::new(Readiness::new())),
        backlog: Box::leak(Box::new(backlog::Counters::new())),
        link: Box::leak(Box::new(framed::Counters::new())),
        peer: Box::leak(Box::new(framed::Counters::new())),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_stored_while_the_peer_is_away_arrive_once_each_in_order() {
    away_and_back(run(), false).await;
}

/// As a device does on a UART: the connector made anew for each
/// connection, the backlog kept. Values in flight when a connection
/// ended are offered again by the next connector (which knows nothing
/// of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_connector_per_connection_sends_again_what_was_in_flight() {
    away_and_back(run(), true).await;
}

async fn away_and_back(r: Run, fresh: bool) {
    let Run {
        values,
        got: sink,
        ready,
        backlog: stats,
        link,
        peer,
    } = r;
    const N: u32 = 300;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let file = temp_file(if fresh { "framed-fresh" } else { "framed-away" });
    let mut got = sink.subscribe().unwrap();
    let dev = tokio::spawn(sender(
        values.subscribe().unwrap(),
        ready,
        addr,
        file.clone(),
        stats,
        link,
        fresh,
    ));

    // 200 values while nobody accepts: the Ring of 4 alone would keep 4.
    for v in 0..200 {
        values.write(v);
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    until("200 values stored", || stats.snapshot().stored == 200).await;

    // The peer takes some, then the connection breaks with values in
    // flight; the rest arrive on the next one, with 100 more written
    // meanwhile.
    let mut seen = Vec::new();
    tokio::select! {
        () = receiver(&listener, sink, peer, None) => unreachable!(),
        () = async {
            while seen.len() < 50 {
                seen.push(got.recv().await.unwrap());
            }
        } => {}
    }
    let writer = async {
        for v in 200..N {
            values.write(v);
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    };
    tokio::select! {
        () = receiver(&listener, sink, peer, None) => unreachable!(),
        ((), ()) = async {
            tokio::join!(writer, async {
                while seen.last() != Some(&(N - 1)) {
                    seen.push(got.recv().await.unwrap());
                }
            })
        } => {}
    }
    // Every value, in order, once each after dropping repeats of values
    // already seen (a connection ended with them in flight).
    let mut once = Vec::new();
    let mut duplicates = 0;
    for v in seen {
        if once.last().is_some_and(|&l| v <= l) {
            duplicates += 1;
        } else {
            once.push(v);
        }
    }
    assert_eq!(once, (0..N).collect::<Vec<_>>());
    assert!(
        duplicates <= 2 * framed::IN_FLIGHT,
        "{duplicates} duplicates"
    );
    // And each left the sender's backlog once acknowledged.
    until("the backlog drained", || {
        let s = stats.snapshot();
        s.depth == 0 && s.delivered >= N
    })
    .await;
    assert_eq!(stats.snapshot().dropped + stats.snapshot().refused, 0);
    dev.abort();
    let _ = std::fs::remove_file(file);
}

/// A hold that settles up to what the test says, and records the ids it
/// saw.
struct TestHold {
    upto: Mutex<Option<Id>>,
    all: AtomicBool,
    took: Mutex<Vec<Id>>,
}

impl Hold for TestHold {
    fn taking(&self, _topic: &[u8], id: Id) {
        self.took.lock().unwrap().push(id);
    }

    fn took(&self, _id: Id, accepted: bool) {
        assert!(accepted);
    }

    fn settled(&self) -> Option<Id> {
        if self.all.load(Relaxed) {
            return self.took.lock().unwrap().last().copied();
        }
        *self.upto.lock().unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_keeps_values_in_the_senders_backlog_until_they_are_safe() {
    static VALUES: Record<Cs, Ring<u32, 4>, 1> = Record::new("values");
    static GOT: Record<Cs, Ring<u32, 1024>, 1> = Record::new("got");
    static READY: Readiness<1> = Readiness::new();
    static BACKLOG: backlog::Counters = backlog::Counters::new();
    static LINK: framed::Counters = framed::Counters::new();
    static PEER: framed::Counters = framed::Counters::new();
    static HOLD: TestHold = TestHold {
        upto: Mutex::new(None),
        all: AtomicBool::new(false),
        took: Mutex::new(Vec::new()),
    };
    const N: u32 = 50;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let file = temp_file("framed-hold");
    let mut got = GOT.subscribe().unwrap();
    let dev = tokio::spawn(sender(
        VALUES.subscribe().unwrap(),
        &READY,
        addr,
        file.clone(),
        &BACKLOG,
        &LINK,
        false,
    ));
    for v in 0..N {
        VALUES.write(v);
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    until("all stored", || BACKLOG.snapshot().stored == N).await;
    let peer = tokio::spawn(async move { receiver(&listener, &GOT, &PEER, Some(&HOLD)).await });

    // Nothing settled: the peer has what the window lets through, the
    // sender's backlog keeps all of it.
    let window = framed::IN_FLIGHT as u32;
    for v in 0..window {
        assert_eq!(got.recv().await.unwrap(), v);
    }
    until("the peer's hold saw the window", || {
        HOLD.took.lock().unwrap().len() == window as usize
    })
    .await;
    assert_eq!(BACKLOG.snapshot().depth, N);
    assert_eq!(BACKLOG.snapshot().delivered, 0);

    // Settled up to the 5th: those five leave the backlog, no more.
    let fifth = HOLD.took.lock().unwrap()[4];
    *HOLD.upto.lock().unwrap() = Some(fifth);
    until("five delivered", || BACKLOG.snapshot().delivered == 5).await;
    assert_eq!(BACKLOG.snapshot().depth, N - 5);

    // Everything settles as it comes: the rest arrive and leave.
    HOLD.all.store(true, Relaxed);
    for v in window..N {
        assert_eq!(got.recv().await.unwrap(), v);
    }
    until("the backlog drained", || BACKLOG.snapshot().depth == 0).await;
    assert_eq!(BACKLOG.snapshot().delivered, N);
    let ids = HOLD.took.lock().unwrap().clone();
    assert_eq!(
        ids.iter().map(|id| id.seq).collect::<Vec<_>>(),
        (0..N).collect::<Vec<_>>()
    );
    peer.abort();
    dev.abort();
    let _ = std::fs::remove_file(file);
}
