//! Threaded stress through the framed connector: four writer OS threads,
//! both connectors `tokio::spawn`ed on the multi-thread runtime, framed
//! over a TCP loopback connection; every value arrives exactly once and in
//! order per route.
//!
//! ```text
//!  4 std threads ──write──► 256 Ring records ──Routes──► Framed (side A) ──TCP loopback──►
//!  (64 routes each)          (HostRawMutex)                tokio::spawn
//!
//!  ──► Framed (side B) ──Dispatch──► 256 Ring records ──► checker task
//!      tokio::spawn                   (HostRawMutex)       (publishes per-route credit)
//! ```
//!
//! Why: the other framed tests run each connector on a current-thread
//! runtime with its producer on the same thread. Here the records are
//! written from four threads that are not the connector's, the two
//! connector futures (which must be `Send`, so the default `Routes` and
//! `Dispatch` flavours over `HostRawMutex` records) move between tokio's
//! two workers, and the checker is a third task: every wake crosses
//! threads. The lock, the readiness bitmap's park/mark race and the
//! readers' waker registration all get exercised concurrently.
//!
//! What is asserted:
//!
//! - every route receives `0..ROUNDS`, each value exactly once and in
//!   order (checked value by value as it lands; a `Lagged` is a failure),
//!   and nothing more is left in any reader once side A has hung up and
//!   side B has read the stream to its end;
//! - side A pulled and wrote exactly `ROUTES × ROUNDS` messages and its
//!   `Routes` report no lag; side B accepted exactly that many frames and
//!   dropped none.
//!
//! Writers are paced by credit: the checker publishes per route how many
//! values it has verified, and a writer writes value `v` only once
//! `v < verified + DEPTH`, so neither ring (side A's, drained by `Routes`;
//! side B's, drained by the checker) ever holds more than its capacity.
//! Writers wait by spinning with `std::thread::yield_now`. Every reader
//! (side A's routes and the checker's) is subscribed, and both tables are
//! built, before the connectors are spawned and the writers start: a `Ring`
//! reader starts at the next write, so a route subscribed inside its task
//! could miss the first values (and the credit would then never come).
//!
//! Bounded: `ROUTES × ROUNDS` messages, and the whole test is under a
//! `tokio::time::timeout`. No timing is asserted.
#![cfg(feature = "tokio")]

mod common;

use std::future::poll_fn;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::task::Poll;
use std::time::Duration;

use aimdb_connectors::framed::{Counters, Error, Framed, Stats};
use aimdb_connectors::tokio_io;
use aimdb_core::codec::Postcard;
use aimdb_core::inbound;
use aimdb_core::inbound::Dispatch;
use aimdb_core::outbound::{self, Routes};
use aimdb_core::record::{Reader, Record, RecvError, Ring, TryRecvError};
use aimdb_core::sync::{HostRawMutex, Readiness};
use common::{dispatch_over, leak, routes_over};
use embassy_futures::select::{select, Either};

const ROUTES: usize = 256;
const ROUNDS: u32 = 200;
const TOTAL: u32 = ROUTES as u32 * ROUNDS;
const WRITERS: usize = 4;
const PER_WRITER: usize = ROUTES / WRITERS;
/// Capacity of every ring, and how far a writer may run ahead of the
/// checker on a route.
const DEPTH: usize = 64;
/// Readiness words: 32 routes each.
const W: usize = ROUTES / 32;
const LIMIT: Duration = Duration::from_secs(120);

type Rec = Record<HostRawMutex, Ring<u32, DEPTH>, 1>;
type RecReader = Reader<'static, HostRawMutex, Ring<u32, DEPTH>, 1>;

/// What the checker and the writers share.
struct Progress {
    /// Values verified per route (= the next value expected).
    verified: [AtomicU32; ROUTES],
    /// Set on any failure, so writers waiting for credit give up.
    abort: AtomicBool,
}

/// Sets `abort` if dropped while panicking (a writer's or the checker's
/// assertion), so no thread waits for credit that will never come.
struct AbortOnPanic(&'static Progress);

impl Drop for AbortOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.abort.store(true, Ordering::Relaxed);
        }
    }
}

/// Writer `k`: values `0..ROUNDS` to each of routes `k*64 .. k*64+64`, in
/// order per route, within `DEPTH` of what the checker verified. Returns
/// how many values it wrote, or `None` if the test aborted.
fn writer(k: usize, records: &'static [&'static Rec], p: &'static Progress) -> Option<u32> {
    let _guard = AbortOnPanic(p);
    let mine = k * PER_WRITER..(k + 1) * PER_WRITER;
    let mut written = 0;
    for v in 0..ROUNDS {
        for i in mine.clone() {
            while v >= p.verified[i].load(Ordering::Acquire) + DEPTH as u32 {
                if p.abort.load(Ordering::Relaxed) {
                    return None;
                }
                std::thread::yield_now();
            }
            records[i].write(v);
            written += 1;
        }
    }
    Some(written)
}

/// Verifies every value as it lands and publishes the per-route credit;
/// returns once every route has delivered `0..ROUNDS`, or at the first
/// value out of place.
async fn check(readers: &mut [RecReader], p: &'static Progress) -> Result<(), String> {
    let _guard = AbortOnPanic(p);
    let mut next = [0u32; ROUTES];
    let mut done = 0u32;
    let result = poll_fn(|cx| {
        for (i, r) in readers.iter_mut().enumerate() {
            while let Poll::Ready(got) = r.poll_recv(cx) {
                match got {
                    Ok(v) if v == next[i] && v < ROUNDS => {
                        next[i] += 1;
                        done += 1;
                        p.verified[i].store(next[i], Ordering::Release);
                    }
                    Ok(v) => {
                        return Poll::Ready(Err(format!(
                            "route {i}: got {v}, expected {}",
                            next[i]
                        )))
                    }
                    Err(RecvError::Lagged(n)) => {
                        return Poll::Ready(Err(format!(
                            "route {i}: lagged {n} values at {}",
                            next[i]
                        )))
                    }
                    Err(e) => return Poll::Ready(Err(format!("route {i}: {e}"))),
                }
            }
        }
        if done == TOTAL {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    })
    .await;
    if result.is_err() {
        p.abort.store(true, Ordering::Relaxed);
    }
    result
}

fn records(name: &'static str) -> &'static [&'static Rec] {
    let v: Vec<&'static Rec> = (0..ROUTES).map(|_| leak(Record::new(name))).collect();
    Box::leak(v.into_boxed_slice())
}

fn scratch(n: usize) -> &'static mut [u8] {
    Box::leak(vec![0u8; n].into_boxed_slice())
}

/// Side A's table: one route per writer record, its reader subscribed
/// now (a `Ring` reader starts at the next write, so this must happen
/// before any writer starts).
fn side_a_routes(
    records: &'static [&'static Rec],
    topics: &'static [String],
) -> Routes<'static, &'static Readiness<W>, W, ROUTES> {
    let links: Vec<_> = records
        .iter()
        .zip(topics)
        .map(|(r, t)| outbound::Link::new(r.subscribe().expect("one reader"), t.as_str(), Postcard))
        .collect();
    let links = Box::leak(links.into_boxed_slice());
    let ready: &'static Readiness<W> = leak(Readiness::new());
    routes_over::<_, W, ROUTES>(ready, scratch(16), scratch(16), links)
}

/// Side B's table: topic `i` into checker record `i`.
fn side_b_dispatch(
    records: &'static [&'static Rec],
    topics: &'static [String],
) -> Dispatch<'static, ROUTES, 1> {
    let links: Vec<_> = records
        .iter()
        .map(|r| inbound::Link::new(*r, Postcard))
        .collect();
    dispatch_over::<ROUTES, 1>(topics, Box::leak(links.into_boxed_slice()))
}

/// Side A: publishes the writer records until `stop`; returns its
/// `Routes` counters and what ended it (`None`: stopped).
async fn side_a(
    mut routes: Routes<'static, &'static Readiness<W>, W, ROUTES>,
    stream: tokio::net::TcpStream,
    stats: &'static Counters,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> (aimdb_core::connector::OutboundStats, Option<Error>) {
    // Side A receives nothing.
    let mut inbound = Dispatch::<1, 1>::builder().build().expect("empty dispatch");
    let mut framed = Framed::<64, 512>::with_sizes(stats);
    let (rx, tx) = tokio_io::tcp(stream);
    let ended = match select(framed.run(rx, tx, &mut inbound, &mut routes), stop).await {
        Either::First(e) => Some(e),
        Either::Second(_) => None,
    };
    // The run future, and with it the socket, is dropped here: side B
    // reads to the end of the stream and sees `Closed`.
    (*routes.stats(), ended)
}

/// Side B: dispatches every frame into the checker's records until the
/// stream ends; returns what ended it and how many records were written.
async fn side_b(
    mut inbound: Dispatch<'static, ROUTES, 1>,
    stream: tokio::net::TcpStream,
    stats: &'static Counters,
) -> (Error, u32) {
    // Side B sends nothing.
    let ready: &'static Readiness<1> = leak(Readiness::new());
    let mut outbound = Routes::<_, 1, 1>::builder(ready, scratch(0))
        .written_topics(scratch(0))
        .build()
        .expect("empty routes");
    let mut framed = Framed::<64, 64>::with_sizes(stats);
    let (rx, tx) = tokio_io::tcp(stream);
    let e = framed.run(rx, tx, &mut inbound, &mut outbound).await;
    (e, inbound.stats().delivered)
}

/// What the tasks, the writer threads and the timeout report share
/// (leaked, so `'static`): a timeout says where progress stopped.
struct World {
    progress: Progress,
    topics: Vec<String>,
    a: &'static [&'static Rec],
    b: &'static [&'static Rec],
    a_stats: Counters,
    b_stats: Counters,
}

impl World {
    /// Where each stage stands: values written (side A's records), frames
    /// side A wrote, frames side B accepted, values the checker verified,
    /// and the routes furthest behind.
    fn report(&self) -> String {
        let writes = |rs: &[&Rec]| rs.iter().map(|r| r.writes()).sum::<u64>();
        let verified: Vec<u32> = self
            .progress
            .verified
            .iter()
            .map(|v| v.load(Ordering::Relaxed))
            .collect();
        let mut behind: Vec<(usize, u64, u64, u32)> = (0..ROUTES)
            .map(|i| (i, self.a[i].writes(), self.b[i].writes(), verified[i]))
            .filter(|&(_, w, _, v)| w > u64::from(v))
            .collect();
        behind.truncate(8);
        format!(
            "written {} (of {TOTAL}), side A {:?}, side B {:?}, dispatched {}, verified {}; \
             routes still owed (route, written, dispatched, verified): {behind:?}",
            writes(self.a),
            self.a_stats.snapshot(),
            self.b_stats.snapshot(),
            writes(self.b),
            verified.iter().sum::<u32>(),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_writer_threads_through_spawned_framed_over_tcp() {
    let world: &'static World = leak(World {
        progress: Progress {
            verified: [const { AtomicU32::new(0) }; ROUTES],
            abort: AtomicBool::new(false),
        },
        topics: (0..ROUTES).map(|i| format!("stress/{i}")).collect(),
        a: records("a"),
        b: records("b"),
        a_stats: Counters::new(),
        b_stats: Counters::new(),
    });
    if tokio::time::timeout(LIMIT, run(world)).await.is_err() {
        world.progress.abort.store(true, Ordering::Relaxed);
        panic!("timed out after {LIMIT:?}: {}", world.report());
    }
}

async fn run(world: &'static World) {
    let (progress, topics) = (&world.progress, world.topics.as_slice());
    let (a_records, b_records) = (world.a, world.b);
    let (a_stats, b_stats) = (&world.a_stats, &world.b_stats);
    // Every reader (side A's routes, the checker's) exists before the
    // first write; the tables are built here and moved into the tasks.
    let routes = side_a_routes(a_records, topics);
    let inbound = side_b_dispatch(b_records, topics);
    let mut readers: Vec<RecReader> = b_records
        .iter()
        .map(|r| r.subscribe().expect("one reader"))
        .collect();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let (accepted, connected) =
        tokio::join!(listener.accept(), tokio::net::TcpStream::connect(addr));
    let (b_stream, _) = accepted.expect("accept");
    let a_stream = connected.expect("connect");

    let (stop_a, stopped_a) = tokio::sync::oneshot::channel();
    let mut a = tokio::spawn(side_a(routes, a_stream, a_stats, stopped_a));
    let mut b = tokio::spawn(side_b(inbound, b_stream, b_stats));
    let mut checker = tokio::spawn(async move {
        let r = check(&mut readers, progress).await;
        (r, readers)
    });

    let writers: Vec<_> = (0..WRITERS)
        .map(|k| {
            std::thread::Builder::new()
                .name(format!("writer-{k}"))
                .spawn(move || writer(k, a_records, progress))
                .expect("spawn writer")
        })
        .collect();

    let (checked, mut readers) = tokio::select! {
        c = &mut checker => c.expect("checker task"),
        r = &mut a => panic!("side A ended before the checker: {r:?}"),
        r = &mut b => panic!("side B ended before the checker: {r:?}"),
    };
    if let Err(e) = checked {
        panic!("{e}");
    }

    for (k, w) in writers.into_iter().enumerate() {
        let wrote = tokio::task::spawn_blocking(move || w.join())
            .await
            .expect("join task")
            .unwrap_or_else(|_| panic!("writer {k} panicked"));
        assert_eq!(wrote, Some(PER_WRITER as u32 * ROUNDS), "writer {k}");
    }

    // Side A hangs up; side B reads whatever is still on the wire, then
    // sees the end of the stream.
    stop_a.send(()).expect("side A still running");
    let (routes, ended) = a.await.expect("side A task");
    assert_eq!(ended, None, "side A's transport failed");
    let (why, delivered) = b.await.expect("side B task");
    assert_eq!(why, Error::Closed, "side B ended otherwise than by hang-up");

    // Exactly once: nothing beyond `0..ROUNDS` reached any route.
    for (i, r) in readers.iter_mut().enumerate() {
        assert_eq!(
            r.try_recv(),
            Err(TryRecvError::Empty),
            "route {i}: extra value"
        );
    }
    assert_eq!(routes.sent, TOTAL, "{routes:?}");
    assert_eq!(routes.lagged, 0, "{routes:?}");
    assert_eq!(
        (
            routes.encode_errors,
            routes.topic_too_long,
            routes.topic_invalid
        ),
        (0, 0, 0),
        "{routes:?}"
    );
    let (sa, sb): (Stats, Stats) = (a_stats.snapshot(), b_stats.snapshot());
    assert_eq!(sa.sent, TOTAL, "{sa:?}");
    assert_eq!(sa.dropped, 0, "{sa:?}");
    assert_eq!(sb.errors_in(), 0, "{sb:?}");
    assert_eq!(sb.received, TOTAL, "{sb:?}");
    assert_eq!(delivered, TOTAL);
}
