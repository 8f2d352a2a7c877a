//! B1: outbound wake-up latency across route counts (informational).
//!
//! Two same-thread scenarios on a current-thread tokio runtime (one
//! `LocalSet`; the producer is itself a task of that `LocalSet`, so every
//! wake-up in every column is a same-thread task wake), then the
//! cross-thread scenarios and the `host_lock` rows of the [`xthread`]
//! module (a 2-worker multi-thread runtime; see its doc):
//!
//! - **parked**: one busy route (the last) among N, the others idle. The
//!   producer writes one value and waits until the sink has it, so every
//!   pull parks and is woken: no batching at all.
//! - **all_busy**: every route is written each round; the producer waits
//!   until all N messages reached the sink.
//! - **xthread_parked**, **xthread_all_busy**: the same shapes with the
//!   producer on another thread (a plain OS thread, or a task on the other
//!   worker) and the consumers `tokio::spawn`ed; every JSON cell names its
//!   `producer`.
//! - **host_lock**: writer threads on their own records, one connector
//!   draining them: the per-record `HostRawMutex` against the global
//!   critical section.
//!
//! Columns (see docs/BENCHMARKS.md): `task_per_route` (one task per route over
//! `Reader::recv`), `outbound_routes` (one task over `Routes::next`),
//! `select_all` and `stream_map` (one task over N `poll_fn` streams of
//! `Reader::poll_recv`), and `floor` (parked only: a consumer and the
//! producer, each parked on one `AtomicWaker`, handing one value over through
//! a `Cell`).
//!
//! Fairness: every column reads the same record type
//! (`Record<Mx, Latest<u32>, 1>`) through the same `Reader`, encodes the same
//! value with `Postcard` (columns other than `outbound_routes` into their
//! own 16-byte scratch, pre-filled with non-zero bytes; `outbound_routes`
//! into the connector scratch of the shared fixture), and delivers it to the
//! same [`Sink`], which wakes the producer through its one `AtomicWaker` when
//! the awaited count is reached. `floor` does the same encode and sink push;
//! only the hand-off differs (a `Cell` and an `AtomicWaker`, no record, no
//! lock), so it is the cost of two same-thread wakes plus that shared work.
//!
//! Method: every fixture (records, readers, tables, tasks) is built before
//! anything is timed. Each cell is probed once to size its runs (about
//! [`TARGET_RUN_NS`] per run, clamped), its allocations per message are
//! counted in a separate untimed pass (the counter is off while timing),
//! then [`RUNS`] timed runs are interleaved: run 1 of every cell, then
//! run 2, and so on, each after a short untimed warm-up. A cell whose probe
//! says even the minimum run would take over [`SKIP_RUN_NS`] is skipped,
//! with the larger route counts of that column, and the output says so.
//!
//! Column `scan` (all_busy only): one task woken once per round by the last
//! route's reader, then `try_recv` on every other reader. It has no
//! readiness at all and only works because it knows every route was
//! written: the floor of delivering N written records through the same
//! readers, encode and sink. The all_busy bound is read against it.
//!
//! `B1_FILTER=parked/outbound_routes/8` runs only the cells whose
//! `scenario/column/routes` (cross-thread: `scenario/producer/column/routes`,
//! `host_lock` runs unless filtered out by a filter that is not a prefix of
//! `host_lock`) contains the text and `B1_SCALE=20` makes every
//! run 20 times longer (for `perf`/callgrind); either one skips the JSON.
//!
//! Prints the tables, the host and whether each bound held; writes
//! `target/bench-results/b1_outbound_wakeup.json`. Never fails on timing.

use std::cell::{Cell, RefCell};
use std::fmt::Write as _;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::Poll;
use std::time::{Duration, Instant};

#[path = "b1_outbound_wakeup/latency.rs"]
mod latency;
#[path = "b1_outbound_wakeup/xthread.rs"]
mod xthread;

use aimdb_bench::fixtures::{self, Mx, Rec};
use aimdb_bench::timing::{allocs, bound_json, cell_json, short, GatedCounter, Spread, RUNS};
use aimdb_core::codec::{Encode, Postcard};
use aimdb_core::record::{Latest, Reader, RecvError};
use futures::task::AtomicWaker;
use futures::{Stream, StreamExt};
use serde_json::json;
use tokio_stream::StreamMap;

#[global_allocator]
static GLOBAL: GatedCounter = GatedCounter::new();

/// Route counts of the parked scenario (all_busy starts at 8).
const ROUTES: [usize; 6] = [1, 8, 64, 256, 1024, 4096];
/// Aimed-at length of one timed run of one cell.
const TARGET_RUN_NS: f64 = 60e6;
/// Bounds on messages per timed run.
const MIN_MSGS: usize = 1_000;
const MAX_MSGS: usize = 200_000;
/// A cell whose minimum run would take longer than this is skipped.
const SKIP_RUN_NS: f64 = 1.5e9;
/// Messages in the allocation-counting pass (at most).
const ALLOC_MSGS: usize = 5_000;

type RecReader = Reader<'static, Mx, Latest<u32>, 1>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Parked,
    AllBusy,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Self::Parked => "parked",
            Self::AllBusy => "all_busy",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Column {
    TaskPerRoute,
    OutboundRoutes,
    SelectAll,
    StreamMap,
    Floor,
    /// All_busy only: one task woken once per round by the last route's
    /// reader, which then takes every other reader's value with
    /// `try_recv`. No readiness at all: the floor of delivering N written
    /// records through these readers, encode and sink.
    Scan,
}

const COLUMNS: [Column; 6] = [
    Column::TaskPerRoute,
    Column::OutboundRoutes,
    Column::SelectAll,
    Column::StreamMap,
    Column::Floor,
    Column::Scan,
];

impl Column {
    fn name(self) -> &'static str {
        match self {
            Self::TaskPerRoute => "task_per_route",
            Self::OutboundRoutes => "outbound_routes",
            Self::SelectAll => "select_all",
            Self::StreamMap => "stream_map",
            Self::Floor => "floor",
            Self::Scan => "scan",
        }
    }
}

/// The in-memory transport every column delivers to: a count, a copy of
/// the last payload, the topic bytes seen, and the producer's waker slot,
/// woken when the count reaches the producer's target.
struct Sink {
    delivered: Cell<u64>,
    target: Cell<u64>,
    last: RefCell<[u8; 16]>,
    last_len: Cell<usize>,
    topic_bytes: Cell<u64>,
    producer: AtomicWaker,
    /// Per-message latency, recorded only in the latency pass.
    stamp: latency::Stamp,
}

impl Sink {
    fn new() -> Rc<Self> {
        Rc::new(Self {
            delivered: Cell::new(0),
            target: Cell::new(u64::MAX),
            last: RefCell::new([0x5a; 16]),
            last_len: Cell::new(0),
            topic_bytes: Cell::new(0),
            producer: AtomicWaker::new(),
            stamp: latency::Stamp::default(),
        })
    }
}

/// What every column delivers to: the same-thread [`Sink`] here, the
/// thread-safe `XSink` in [`xthread`].
trait Deliver {
    fn push(&self, topic: &str, payload: &[u8]);
}

impl Deliver for Sink {
    fn push(&self, topic: &str, payload: &[u8]) {
        self.stamp.at_push();
        let n = payload.len().min(16);
        self.last.borrow_mut()[..n].copy_from_slice(&payload[..n]);
        self.last_len.set(n);
        self.topic_bytes
            .set(self.topic_bytes.get() + topic.len() as u64);
        let d = self.delivered.get() + 1;
        self.delivered.set(d);
        if d >= self.target.get() {
            self.producer.wake();
        }
    }
}

impl Sink {
    /// Waits until `more` further messages were delivered.
    async fn wait_for(&self, more: u64) {
        let target = self.delivered.get() + more;
        self.target.set(target);
        poll_fn(|cx| {
            if self.delivered.get() >= target {
                return Poll::Ready(());
            }
            self.producer.register(cx.waker());
            if self.delivered.get() >= target {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }
}

/// The `floor` hand-off: one value in a cell, the consumer parked on one
/// waker slot.
struct Handoff {
    value: Cell<Option<u32>>,
    consumer: AtomicWaker,
}

/// Non-zero values with a five-byte postcard encoding.
fn value(seq: u64) -> u32 {
    0x0101_0101u32.wrapping_add(seq as u32) | 0x1000_0000
}

/// A reader as a stream of `(topic, value)`: `poll_fn` over
/// `Reader::poll_recv`, no boxing.
fn reader_stream(
    mut reader: RecReader,
    topic: &'static str,
) -> impl Stream<Item = (&'static str, Result<u32, RecvError>)> + Unpin {
    futures::stream::poll_fn(move |cx| reader.poll_recv(cx).map(|v| Some((topic, v))))
}

fn encode_push<D: Deliver + ?Sized>(
    sink: &D,
    scratch: &mut [u8; 16],
    topic: &str,
    v: Result<u32, RecvError>,
) {
    if let Ok(v) = v {
        if let Ok(n) = Postcard.encode(&v, scratch) {
            sink.push(topic, &scratch[..n]);
        }
    }
}

/// At least `msgs` messages (at least one round), rounded up to whole
/// rounds of `per_round`.
fn whole_rounds(msgs: usize, per_round: usize) -> usize {
    msgs.div_ceil(per_round).max(1) * per_round
}

/// The consumer loops of the columns, shared by the same-thread and the
/// cross-thread cells (`sink` is an `Rc<Sink>` or an `Arc<XSink>`).
mod loops {
    use super::*;
    use std::ops::Deref;

    /// `outbound_routes`: the connector loop.
    pub async fn routes<P: Deref<Target = impl Deliver>>(
        mut routes: Box<fixtures::OutTable>,
        sink: P,
    ) {
        loop {
            let m = routes.next().await;
            sink.push(m.topic, m.payload);
        }
    }

    /// `task_per_route`: one route's task.
    pub async fn per_route<P: Deref<Target = impl Deliver>>(
        mut reader: RecReader,
        topic: &'static str,
        sink: P,
    ) {
        let mut scratch = [0x5au8; 16];
        loop {
            let v = reader.recv().await;
            encode_push(&*sink, &mut scratch, topic, v);
        }
    }

    /// `scan`: woken by the last route's reader, then `try_recv` on every
    /// other reader (the producer writes the routes in order, so the last
    /// write means the round is complete).
    pub fn scan<P: Deref<Target = impl Deliver>>(
        recs: &'static [Rec],
        sink: P,
    ) -> impl std::future::Future<Output = ()> {
        // Subscribed here, before the task is spawned: the producer's first
        // round must find every reader.
        let readers: Vec<RecReader> = recs
            .iter()
            .map(|r| r.subscribe().expect("one reader"))
            .collect();
        scan_readers(readers, fixtures::out_topics(recs.len()), sink)
    }

    async fn scan_readers<P: Deref<Target = impl Deliver>>(
        mut readers: Vec<RecReader>,
        topics: &'static [&'static str],
        sink: P,
    ) {
        let mut scratch = [0x5au8; 16];
        let n = readers.len();
        let (last, rest) = readers.split_last_mut().expect("routes");
        loop {
            let v = last.recv().await;
            for (r, &t) in rest.iter_mut().zip(topics) {
                if let Ok(v) = r.try_recv() {
                    encode_push(&*sink, &mut scratch, t, Ok(v));
                }
            }
            encode_push(&*sink, &mut scratch, topics[n - 1], v);
        }
    }
}

enum Input {
    Records(&'static [Rec]),
    Floor(Rc<Handoff>),
}

struct Bench {
    scenario: Scenario,
    column: Column,
    routes: usize,
    sink: Rc<Sink>,
    input: Input,
    /// Messages per timed run (all_busy: a whole number of rounds).
    msgs: usize,
    skipped: bool,
    samples: Vec<f64>,
    allocs_per_msg: f64,
    seq: u64,
}

/// Builds the fixture of one cell and spawns its tasks on the current
/// `LocalSet`.
fn build(scenario: Scenario, column: Column, n: usize) -> Bench {
    let sink = Sink::new();
    let input = match column {
        Column::OutboundRoutes => {
            let f = fixtures::outbound_static(n);
            tokio::task::spawn_local(loops::routes(f.routes, sink.clone()));
            Input::Records(f.records)
        }
        Column::TaskPerRoute => {
            let recs = fixtures::records(n);
            for (r, &topic) in recs.iter().zip(fixtures::out_topics(n)) {
                let reader = r.subscribe().expect("one reader");
                tokio::task::spawn_local(loops::per_route(reader, topic, sink.clone()));
            }
            Input::Records(recs)
        }
        Column::SelectAll => {
            let recs = fixtures::records(n);
            let streams = recs
                .iter()
                .zip(fixtures::out_topics(n))
                .map(|(r, &t)| reader_stream(r.subscribe().expect("one reader"), t));
            let mut all = futures::stream::select_all(streams);
            let s = sink.clone();
            tokio::task::spawn_local(async move {
                let mut scratch = [0x5au8; 16];
                while let Some((topic, v)) = all.next().await {
                    encode_push(&*s, &mut scratch, topic, v);
                }
            });
            Input::Records(recs)
        }
        Column::StreamMap => {
            let recs = fixtures::records(n);
            let mut map = StreamMap::with_capacity(n);
            for (i, (r, &t)) in recs.iter().zip(fixtures::out_topics(n)).enumerate() {
                map.insert(i, reader_stream(r.subscribe().expect("one reader"), t));
            }
            let s = sink.clone();
            tokio::task::spawn_local(async move {
                let mut scratch = [0x5au8; 16];
                while let Some((_, (topic, v))) = map.next().await {
                    encode_push(&*s, &mut scratch, topic, v);
                }
            });
            Input::Records(recs)
        }
        Column::Scan => {
            let recs = fixtures::records(n);
            tokio::task::spawn_local(loops::scan(recs, sink.clone()));
            Input::Records(recs)
        }
        Column::Floor => {
            let h = Rc::new(Handoff {
                value: Cell::new(None),
                consumer: AtomicWaker::new(),
            });
            let (h2, s) = (h.clone(), sink.clone());
            let topic = fixtures::out_topics(1)[0];
            tokio::task::spawn_local(async move {
                let mut scratch = [0x5au8; 16];
                loop {
                    let v = poll_fn(|cx| {
                        if let Some(v) = h2.value.take() {
                            return Poll::Ready(v);
                        }
                        h2.consumer.register(cx.waker());
                        match h2.value.take() {
                            Some(v) => Poll::Ready(v),
                            None => Poll::Pending,
                        }
                    })
                    .await;
                    encode_push(&*s, &mut scratch, topic, Ok(v));
                }
            });
            Input::Floor(h)
        }
    };
    Bench {
        scenario,
        column,
        routes: n,
        sink,
        input,
        msgs: 0,
        skipped: false,
        samples: Vec::new(),
        allocs_per_msg: f64::NAN,
        seq: 0,
    }
}

impl Bench {
    /// Messages of one all_busy round (1 for parked).
    fn per_round(&self) -> usize {
        match self.scenario {
            Scenario::Parked => 1,
            Scenario::AllBusy => self.routes,
        }
    }

    fn round_up(&self, msgs: usize) -> usize {
        whole_rounds(msgs, self.per_round())
    }

    /// Drives `msgs` messages (whole rounds) through the cell.
    async fn drive(&mut self, msgs: usize) {
        let sink = &*self.sink;
        let seq = &mut self.seq;
        match (&self.input, self.scenario) {
            (Input::Records(recs), Scenario::Parked) => {
                let rec = &recs[recs.len() - 1];
                for _ in 0..msgs {
                    *seq += 1;
                    sink.stamp.before_write();
                    rec.write(value(*seq));
                    sink.wait_for(1).await;
                    sink.stamp.record();
                }
            }
            (Input::Records(recs), Scenario::AllBusy) => {
                let n = recs.len();
                for _ in 0..msgs / n {
                    *seq += 1;
                    let v = value(*seq);
                    for r in recs.iter() {
                        r.write(v);
                    }
                    sink.wait_for(n as u64).await;
                }
            }
            (Input::Floor(h), _) => {
                for _ in 0..msgs {
                    *seq += 1;
                    sink.stamp.before_write();
                    h.value.set(Some(value(*seq)));
                    h.consumer.wake();
                    sink.wait_for(1).await;
                    sink.stamp.record();
                }
            }
        }
    }

    /// ns per message of one timed run of `msgs` messages.
    async fn time(&mut self, msgs: usize) -> f64 {
        let t = Instant::now();
        self.drive(msgs).await;
        t.elapsed().as_nanos() as f64 / msgs as f64
    }

    fn check_sink(&self) {
        let s = &self.sink;
        assert_eq!(
            s.target.get(),
            s.delivered.get(),
            "{} {} {}: sink count",
            self.scenario.name(),
            self.column.name(),
            self.routes
        );
        assert!(s.last_len.get() == 5 && s.last.borrow()[0] != 0);
    }
}

/// `B1_SCALE` (default 1): multiplies the length of every run, for
/// profiling a filtered run.
fn scale() -> f64 {
    std::env::var("B1_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0)
}

/// All cells, or those whose `scenario/column/routes` contains the
/// `B1_FILTER` environment variable (for profiling one cell).
fn cells() -> Vec<(Scenario, Column, usize)> {
    let filter = std::env::var("B1_FILTER").unwrap_or_default();
    let mut v = Vec::new();
    for scenario in [Scenario::Parked, Scenario::AllBusy] {
        for column in COLUMNS {
            for n in ROUTES {
                let skip = match scenario {
                    Scenario::Parked => column == Column::Scan,
                    Scenario::AllBusy => column == Column::Floor || n < 8,
                };
                let id = format!("{}/{}/{n}", scenario.name(), column.name());
                if !skip && id.contains(filter.as_str()) {
                    v.push((scenario, column, n));
                }
            }
        }
    }
    v
}

fn main() {
    let start = Instant::now();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let local = tokio::task::LocalSet::new();
    // The producer is a task of the same LocalSet as the consumers, so a
    // wake-up is a same-thread task wake in every column.
    let (benches, mut notes, control) = rt
        .block_on(local.run_until(local.spawn_local(measure())))
        .expect("measuring task");
    drop(local);
    drop(rt);
    let filter = std::env::var("B1_FILTER").unwrap_or_default();
    let cross = xthread::measure(&filter, scale(), &GLOBAL, &mut notes);
    let locks = if "host_lock".contains(filter.as_str()) || filter.starts_with("host_lock") {
        xthread::measure_locks()
    } else {
        Vec::new()
    };
    let probe = latency::measure_probe(&filter, scale());
    let total = start.elapsed();
    report(&benches, &cross, &locks, &probe, &notes, control, total);
}

async fn measure() -> (Vec<Bench>, Vec<String>, u64) {
    let mut notes = Vec::new();
    let mut benches: Vec<Bench> = cells()
        .into_iter()
        .map(|(s, c, n)| build(s, c, n))
        .collect();
    // Let every spawned task run once and park.
    for _ in 0..2_000 {
        tokio::task::yield_now().await;
    }

    // Probe each cell to size its runs; skip what would be too slow.
    let mut stopped: Vec<(Scenario, Column)> = Vec::new();
    for b in &mut benches {
        if stopped.contains(&(b.scenario, b.column)) {
            b.skipped = true;
            continue;
        }
        let probe = b.round_up(200);
        b.drive(probe).await;
        let ns = b.time(probe).await;
        if ns * MIN_MSGS as f64 > SKIP_RUN_NS {
            b.skipped = true;
            stopped.push((b.scenario, b.column));
            notes.push(format!(
                "{} {}: stopped at {} routes ({} ns/msg in the probe; {} messages per run would take over {:.1} s)",
                b.scenario.name(),
                b.column.name(),
                b.routes,
                short(ns),
                MIN_MSGS,
                SKIP_RUN_NS / 1e9
            ));
            continue;
        }
        let scale = scale();
        let msgs =
            (scale * TARGET_RUN_NS / ns).clamp(MIN_MSGS as f64, scale * MAX_MSGS as f64) as usize;
        b.msgs = b.round_up(msgs);
    }

    // Allocations per message: a separate, untimed pass.
    let control = GLOBAL.control();
    for b in benches.iter_mut().filter(|b| !b.skipped) {
        let msgs = b.round_up(ALLOC_MSGS.min(b.msgs));
        b.drive(b.round_up(100)).await;
        let counting = GLOBAL.start();
        b.drive(msgs).await;
        let s = counting.stop();
        b.allocs_per_msg = allocs(&s) as f64 / msgs as f64;
        b.check_sink();
    }

    // Timed runs, interleaved: run r of every cell, then run r + 1.
    for _ in 0..RUNS {
        for b in benches.iter_mut().filter(|b| !b.skipped) {
            let warm = b.round_up(b.msgs / 20);
            b.drive(warm).await;
            let ns = b.time(b.msgs).await;
            b.samples.push(ns);
        }
    }
    // Latency: a separate pass per parked cell, stamped (see `latency`).
    for b in benches
        .iter_mut()
        .filter(|b| !b.skipped && b.scenario == Scenario::Parked)
    {
        b.sink.stamp.enable(true);
        b.drive(b.msgs).await;
        b.sink.stamp.enable(false);
    }
    for b in benches.iter().filter(|b| !b.skipped) {
        b.check_sink();
    }
    (benches, notes, control)
}

fn find(benches: &[Bench], s: Scenario, c: Column, n: usize) -> Option<&Bench> {
    benches
        .iter()
        .find(|b| b.scenario == s && b.column == c && b.routes == n && !b.skipped)
}

fn median(benches: &[Bench], s: Scenario, c: Column, n: usize) -> Option<f64> {
    find(benches, s, c, n).map(|b| Spread::of(&b.samples).median)
}

struct Bound {
    name: &'static str,
    text: String,
    ratio: f64,
    limit: f64,
    held: bool,
}

/// Worst (largest) ratio `a / b` over `counts`, with per-count detail.
fn worst_ratio(
    benches: &[Bench],
    s: Scenario,
    a: Column,
    b: Column,
    counts: &[usize],
) -> (f64, usize, String) {
    let mut worst = (f64::NAN, 0usize);
    let mut detail = String::new();
    for &n in counts {
        let (Some(x), Some(y)) = (median(benches, s, a, n), median(benches, s, b, n)) else {
            continue;
        };
        let r = x / y;
        let _ = write!(detail, " {n}:{r:.2}");
        if worst.0.is_nan() || r > worst.0 {
            worst = (r, n);
        }
    }
    (worst.0, worst.1, detail)
}

fn bounds(benches: &[Bench]) -> Vec<Bound> {
    use Column::*;
    use Scenario::*;
    let mut v = Vec::new();

    let r1 = match (
        median(benches, Parked, OutboundRoutes, 4096),
        median(benches, Parked, OutboundRoutes, 8),
    ) {
        (Some(a), Some(b)) => a / b,
        _ => f64::NAN,
    };
    v.push(Bound {
        name: "parked_outbound_routes_4096_vs_8",
        text: format!("parked: outbound_routes at 4096 routes / at 8 routes = {r1:.3}"),
        ratio: r1,
        limit: 1.05,
        held: r1 <= 1.05,
    });

    let (r2, n2, d2) = worst_ratio(benches, Parked, OutboundRoutes, TaskPerRoute, &ROUTES);
    v.push(Bound {
        name: "parked_outbound_routes_vs_task_per_route",
        text: format!(
            "parked: outbound_routes / task_per_route, worst {r2:.3} at {n2} routes (per count:{d2})"
        ),
        ratio: r2,
        limit: 1.10,
        held: r2 <= 1.10,
    });

    let (r3, n3, d3) = worst_ratio(benches, Parked, OutboundRoutes, Floor, &ROUTES);
    v.push(Bound {
        name: "parked_outbound_routes_vs_floor",
        text: format!(
            "parked: outbound_routes / floor, worst {r3:.3} at {n3} routes (per count:{d3})"
        ),
        ratio: r3,
        limit: 1.5,
        held: r3 <= 1.5,
    });

    let (r4, n4, d4) = worst_ratio(benches, AllBusy, OutboundRoutes, Scan, &[256, 1024, 4096]);
    let (t4, _, dt4) = worst_ratio(
        benches,
        AllBusy,
        OutboundRoutes,
        TaskPerRoute,
        &[256, 1024, 4096],
    );
    v.push(Bound {
        name: "all_busy_outbound_routes_vs_scan_256_up",
        text: format!(
            "all_busy: outbound_routes / scan at >= 256 routes, worst {r4:.3} at {n4} (per count:{d4}; / task_per_route, worst {t4:.3}:{dt4})"
        ),
        ratio: r4,
        limit: 1.4,
        held: r4 <= 1.4,
    });

    let r5 = benches
        .iter()
        .filter(|b| b.column == OutboundRoutes && !b.skipped)
        .map(|b| b.allocs_per_msg)
        .fold(0.0, f64::max);
    v.push(Bound {
        name: "outbound_routes_zero_allocs",
        text: format!("outbound_routes: allocations per message, max over cells = {r5}"),
        ratio: r5,
        limit: 0.0,
        held: r5 == 0.0,
    });
    v
}

fn table(benches: &[Bench], s: Scenario) -> String {
    let mut t = String::new();
    let title = format!(
        "\n{} — ns/message, median [min-max] of {RUNS} interleaved runs",
        s.name()
    );
    grid(&mut t, benches, s, &title, |b| match b {
        Some(b) => Spread::of(&b.samples).show(),
        None => "skipped".to_string(),
    });
    let title = format!("{} — allocations/message; messages per timed run", s.name());
    grid(&mut t, benches, s, &title, |b| match b {
        Some(b) => format!("{:.3}; {}", b.allocs_per_msg, b.msgs),
        None => "-".to_string(),
    });
    t
}

/// One table of `s`: a row per route count, a column per design, `cell`
/// rendering each measured (or skipped) cell.
fn grid(
    t: &mut String,
    benches: &[Bench],
    s: Scenario,
    title: &str,
    cell: impl Fn(Option<&Bench>) -> String,
) {
    let cols: Vec<Column> = COLUMNS
        .into_iter()
        .filter(|&c| s == Scenario::Parked || c != Column::Floor)
        .collect();
    let counts: Vec<usize> = ROUTES
        .into_iter()
        .filter(|&n| s == Scenario::Parked || n >= 8)
        .collect();
    let names: Vec<&str> = cols.iter().map(|c| c.name()).collect();
    rows(t, title, &names, 26, &counts, |n, i| {
        cell(find(benches, s, cols[i], n))
    });
}

/// One table: `title`, a header of column `names`, then a row per route
/// count with `cell(count, column index)` in each column, right-aligned to
/// `width`.
fn rows(
    t: &mut String,
    title: &str,
    names: &[&str],
    width: usize,
    counts: &[usize],
    cell: impl Fn(usize, usize) -> String,
) {
    let _ = writeln!(t, "{title}");
    let _ = write!(t, "{:>6}", "routes");
    for name in names {
        let _ = write!(t, "  {name:>width$}");
    }
    let _ = writeln!(t);
    for &n in counts {
        let _ = write!(t, "{n:>6}");
        for i in 0..names.len() {
            let _ = write!(t, "  {:>width$}", cell(n, i));
        }
        let _ = writeln!(t);
    }
}

fn report(
    benches: &[Bench],
    cross: &[xthread::Cell],
    locks: &[xthread::LockCell],
    probe: &[latency::PCell],
    notes: &[String],
    control: u64,
    total: Duration,
) {
    let host = aimdb_bench::host();
    println!("b1_outbound_wakeup: current-thread tokio runtime, LocalSet");
    println!("host: {host}");
    print!("{}", table(benches, Scenario::Parked));
    print!("{}", table(benches, Scenario::AllBusy));
    println!(
        "\nfloor has no routes: it is measured once per route-count row so each ratio compares cells run next to each other."
    );
    print!("{}", latency_table(benches));
    print!("{}", xthread_tables(cross));
    print!("{}", xthread_latency_table(cross));
    print!("{}", lock_table(locks));
    print!("{}", probe_tables(probe));
    for n in notes {
        println!("note: {n}");
    }
    if control != 1 {
        println!("WARNING: allocation counter positive control read {control}, not 1: allocs/msg are not trustworthy");
    }

    let mut bounds = bounds(benches);
    bounds.extend(xbounds(cross, locks));
    bounds.extend(latency_bounds(benches, cross, probe));
    println!("\nbounds (ratios of medians from this run; informational, never a failure):");
    for (i, b) in bounds.iter().enumerate() {
        println!(
            "  {}. {} (limit {}): {}",
            i + 1,
            b.text,
            b.limit,
            if b.held { "held" } else { "MISSED" }
        );
    }

    let mut cells: Vec<_> = benches
        .iter()
        .filter(|b| !b.skipped)
        .map(|b| {
            let mut j = cell_json(
                b.scenario.name(),
                b.column.name(),
                b.routes,
                Spread::of(&b.samples),
                b.allocs_per_msg,
            );
            if let Some(p) = b.sink.stamp.percentiles() {
                j["latency"] = p.json();
            }
            j
        })
        .collect();
    for c in cross.iter().filter(|c| !c.skipped) {
        let mut j = cell_json(
            c.scenario.name(),
            c.column.name(),
            c.routes,
            Spread::of(&c.samples),
            c.allocs_per_msg,
        );
        j["producer"] = json!(c.producer.name());
        if let Some(p) = c.sink.stamp.percentiles() {
            j["latency"] = p.json();
        }
        cells.push(j);
    }
    cells.extend(probe.iter().map(latency::probe_json));
    for c in locks {
        // `routes` is the number of writer threads (one record each); the
        // cell is ns per write of one thread; allocations are not counted.
        let mut j = cell_json(
            "host_lock",
            c.column,
            c.threads,
            Spread::of(&c.samples),
            f64::NAN,
        );
        j["allocs_per_msg"] = serde_json::Value::Null;
        j["writer_threads"] = json!(c.threads);
        cells.push(j);
    }
    let bounds_json: Vec<_> = bounds
        .iter()
        .map(|b| bound_json(b.name, b.ratio, b.limit, b.held))
        .collect();
    let doc = json!({
        "bench": "b1_outbound_wakeup",
        "host": host,
        "runs": RUNS,
        "cells": cells,
        "bounds": bounds_json,
    });
    if std::env::var_os("B1_FILTER").is_some() || scale() != 1.0 {
        println!("B1_FILTER or B1_SCALE set: a partial run, JSON not written");
        for b in benches {
            println!(
                "{}/{}/{}: {} messages delivered in all (probe, counting pass, warm-ups and runs)",
                b.scenario.name(),
                b.column.name(),
                b.routes,
                b.sink.delivered.get()
            );
        }
        for c in cross {
            println!("{}: {} samples", c.id(), c.samples.len());
        }
        for c in probe {
            println!("{}: {} passes", c.id(), c.samples.len());
        }
        println!("total runtime {:.1} s", total.as_secs_f64());
        return;
    }
    match aimdb_bench::write_json("b1_outbound_wakeup", &doc) {
        Ok(p) => println!("wrote {}", p.display()),
        Err(e) => eprintln!("writing JSON: {e}"),
    }
    println!("total runtime {:.1} s", total.as_secs_f64());
}

/// The cross-thread tables: one per scenario and producer.
fn xthread_tables(cross: &[xthread::Cell]) -> String {
    use xthread::{Column as X, Producer, Scenario as S};
    let mut t = String::new();
    for s in [S::Parked, S::AllBusy] {
        for p in [Producer::Thread, Producer::Worker] {
            let cols: Vec<X> = xthread::COLUMNS
                .into_iter()
                .filter(|&c| match c {
                    X::Floor => s == S::Parked,
                    X::Scan => s == S::AllBusy,
                    _ => true,
                })
                .collect();
            if !cross.iter().any(|c| c.scenario == s && c.producer == p) {
                continue;
            }
            let title = format!(
                "\n{} (producer: {}) — ns/message, median [min-max] of {RUNS} interleaved runs; allocations/message",
                s.name(),
                p.name()
            );
            let counts: Vec<usize> = ROUTES
                .into_iter()
                .filter(|&n| s == S::Parked || n >= 8)
                .collect();
            let names: Vec<&str> = cols.iter().map(|c| c.name()).collect();
            rows(
                &mut t,
                &title,
                &names,
                30,
                &counts,
                |n, i| match xthread::find(cross, s, p, cols[i], n) {
                    Some(x) => {
                        format!("{}; {:.3}", Spread::of(&x.samples).show(), x.allocs_per_msg)
                    }
                    None => "-".into(),
                },
            );
        }
    }
    t
}

fn lock_table(locks: &[xthread::LockCell]) -> String {
    let mut t = String::new();
    if locks.is_empty() {
        return t;
    }
    let _ = writeln!(
        t,
        "\nhost_lock — ns per write of each writer thread (each on its own record, one connector draining all), median [min-max]"
    );
    for c in locks {
        let m = Spread::of(&c.samples);
        let _ = writeln!(
            t,
            "  {:>16}, {} writer thread(s): {} ns/write, {:.1} M writes/s in all",
            c.column,
            c.threads,
            m.show(),
            c.threads as f64 * 1e3 / m.median
        );
    }
    t
}

/// Worst (largest) ratio of two cross-thread columns over `counts`, both
/// producers.
fn xworst(
    cross: &[xthread::Cell],
    s: xthread::Scenario,
    a: xthread::Column,
    b: xthread::Column,
    counts: &[usize],
) -> (f64, String) {
    let mut worst = f64::NAN;
    let mut detail = String::new();
    for p in [xthread::Producer::Thread, xthread::Producer::Worker] {
        let _ = write!(detail, " {}:", p.name());
        for &n in counts {
            let (Some(x), Some(y)) = (
                xthread::median(cross, s, p, a, n),
                xthread::median(cross, s, p, b, n),
            ) else {
                continue;
            };
            let r = x / y;
            let _ = write!(detail, " {n}:{r:.2}");
            if worst.is_nan() || r > worst {
                worst = r;
            }
        }
    }
    (worst, detail)
}

fn xbounds(cross: &[xthread::Cell], locks: &[xthread::LockCell]) -> Vec<Bound> {
    use xthread::{Column as X, Scenario as S};
    let mut v = Vec::new();
    let mut push = |name: &'static str, what: &str, (r, d): (f64, String), limit: f64| {
        v.push(Bound {
            name,
            text: format!("{what}, worst {r:.3} (per producer and count:{d})"),
            ratio: r,
            limit,
            held: r <= limit,
        });
    };
    let busy = [256, 1024, 4096];
    push(
        "xthread_parked_outbound_routes_vs_task_per_route",
        "xthread_parked: outbound_routes / task_per_route",
        xworst(
            cross,
            S::Parked,
            X::OutboundRoutes,
            X::TaskPerRoute,
            &ROUTES,
        ),
        1.05,
    );
    push(
        "xthread_parked_outbound_routes_thread_vs_task_per_route",
        "xthread_parked: outbound_routes_thread / task_per_route",
        xworst(
            cross,
            S::Parked,
            X::OutboundRoutesThread,
            X::TaskPerRoute,
            &ROUTES,
        ),
        0.8,
    );
    push(
        "xthread_parked_outbound_routes_vs_floor",
        "xthread_parked: outbound_routes / floor",
        xworst(cross, S::Parked, X::OutboundRoutes, X::Floor, &ROUTES),
        1.5,
    );
    push(
        "xthread_parked_outbound_routes_thread_vs_floor",
        "xthread_parked: outbound_routes_thread / floor",
        xworst(cross, S::Parked, X::OutboundRoutesThread, X::Floor, &ROUTES),
        1.5,
    );
    push(
        "xthread_all_busy_outbound_routes_vs_scan_256_up",
        "xthread_all_busy: outbound_routes / scan at >= 256 routes",
        xworst(cross, S::AllBusy, X::OutboundRoutes, X::Scan, &busy),
        1.4,
    );
    push(
        "xthread_all_busy_outbound_routes_vs_task_per_route",
        "xthread_all_busy: outbound_routes / task_per_route (below 1 at every count)",
        xworst(
            cross,
            S::AllBusy,
            X::OutboundRoutes,
            X::TaskPerRoute,
            &ROUTES[1..],
        ),
        1.0,
    );
    let zero = cross
        .iter()
        .filter(|c| !c.skipped && matches!(c.column, X::OutboundRoutes | X::OutboundRoutesThread))
        .map(|c| c.allocs_per_msg)
        .fold(0.0, f64::max);
    v.push(Bound {
        name: "xthread_outbound_routes_zero_allocs",
        text: format!(
            "xthread outbound_routes(_thread): allocations per message (all threads), max over cells = {zero}"
        ),
        ratio: zero,
        limit: 0.0,
        held: zero == 0.0,
    });
    let lock = |col: &str, threads: usize| {
        locks
            .iter()
            .find(|c| c.column == col && c.threads == threads)
            .map(|c| Spread::of(&c.samples).median)
    };
    if let (Some(h2), Some(c2), Some(h1), Some(c1)) = (
        lock("host_raw_mutex", 2),
        lock("critical_section", 2),
        lock("host_raw_mutex", 1),
        lock("critical_section", 1),
    ) {
        // Throughput ratio host / global = ns ratio global / host; the bound
        // is stated as "at most" on the inverse, host / global ns <= 0.1.
        let r = h2 / c2;
        v.push(Bound {
            name: "host_lock_two_writers_throughput_10x",
            text: format!(
                "host_lock, two writer threads: host_raw_mutex ns/write / critical_section = {r:.3} (throughput {:.1} x)",
                c2 / h2
            ),
            ratio: r,
            limit: 0.1,
            held: r <= 0.1,
        });
        let r = h1 / c1;
        v.push(Bound {
            name: "host_lock_one_writer_not_slower",
            text: format!(
                "host_lock, one writer thread: host_raw_mutex ns/write / critical_section = {r:.3}"
            ),
            ratio: r,
            limit: 1.0,
            held: r <= 1.0,
        });
    }
    v
}

/// The same-thread parked cells' latency: p50/p99/p99.9/max per message.
fn latency_table(benches: &[Bench]) -> String {
    let mut t = String::new();
    let title = "\nparked — latency per message (write to sink), p50/p99/p99.9/max ns, from a separate stamped pass";
    grid(&mut t, benches, Scenario::Parked, title, |b| {
        match b.and_then(|b| b.sink.stamp.percentiles()) {
            Some(p) => p.show(),
            None => "-".to_string(),
        }
    });
    t
}

/// The cross-thread parked cells' latency, one table per producer.
fn xthread_latency_table(cross: &[xthread::Cell]) -> String {
    use xthread::{Column as X, Producer, Scenario as S};
    let mut t = String::new();
    for p in [Producer::Thread, Producer::Worker] {
        if !cross
            .iter()
            .any(|c| c.scenario == S::Parked && c.producer == p)
        {
            continue;
        }
        let cols: Vec<X> = xthread::COLUMNS
            .into_iter()
            .filter(|&c| c != X::Scan)
            .collect();
        let title = format!(
            "\nxthread_parked (producer: {}) — latency per message, p50/p99/p99.9/max ns",
            p.name()
        );
        let names: Vec<&str> = cols.iter().map(|c| c.name()).collect();
        rows(&mut t, &title, &names, 30, &ROUTES, |n, i| {
            xthread::find(cross, S::Parked, p, cols[i], n)
                .and_then(|x| x.sink.stamp.percentiles())
                .map_or("-".to_string(), |l| l.show())
        });
    }
    t
}

/// The probe cells: the probe's latency, and ns per message of the rounds.
fn probe_tables(probe: &[latency::PCell]) -> String {
    use latency::{PColumn, Side, LOADS, PCOLUMNS, PROBE_ROUTES};
    let mut t = String::new();
    for side in [Side::Same, Side::Cross] {
        for load in LOADS {
            let cols: Vec<PColumn> = PCOLUMNS.into_iter().filter(|&c| load.has(c)).collect();
            if !probe.iter().any(|c| c.side == side && c.load == load) {
                continue;
            }
            let title = format!(
                "\n{} ({} thread) — probe latency p50/p99/p99.9/max ns; ns/message of the rounds",
                load.scenario(),
                side.name()
            );
            let names: Vec<&str> = cols.iter().map(|c| c.name()).collect();
            rows(&mut t, &title, &names, 40, &PROBE_ROUTES, |n, i| {
                probe
                    .iter()
                    .find(|x| {
                        x.side == side && x.load == load && x.column == cols[i] && x.routes == n
                    })
                    .map_or("-".to_string(), |x| {
                        format!(
                            "{}; {}",
                            x.latency().map_or("-".into(), |p| p.show()),
                            short(Spread::of(&x.samples).median)
                        )
                    })
            });
        }
    }
    t
}

/// The latency bounds of issue-style targets: parked p99 against a task per
/// route (same and cross thread), and the urgent probe under load against
/// the same probe alone; plus, informational, the normal probe's p99
/// beside a task per route's.
fn latency_bounds(
    benches: &[Bench],
    cross: &[xthread::Cell],
    probe: &[latency::PCell],
) -> Vec<Bound> {
    use latency::{Load, PColumn, Side, PROBE_ROUTES};
    let mut v = Vec::new();
    let p99 = |b: Option<&Bench>| {
        b.and_then(|b| b.sink.stamp.percentiles())
            .map(|p| p.p99 as f64)
    };

    let mut detail = String::new();
    let worst = ratios(&mut detail, &ROUTES, |n| {
        (
            p99(find(benches, Scenario::Parked, Column::OutboundRoutes, n)),
            p99(find(benches, Scenario::Parked, Column::TaskPerRoute, n)),
        )
    });
    v.push(Bound {
        name: "parked_p99_outbound_routes_vs_task_per_route",
        text: format!(
            "parked p99: outbound_routes / task_per_route, worst {worst:.3} (per count:{detail})"
        ),
        ratio: worst,
        limit: 1.1,
        held: worst <= 1.1,
    });

    let xp99 = |p: xthread::Producer, c: xthread::Column, n: usize| {
        xthread::find(cross, xthread::Scenario::Parked, p, c, n)
            .and_then(|x| x.sink.stamp.percentiles())
            .map(|l| l.p99 as f64)
    };
    let mut worst = f64::NAN;
    let mut detail = String::new();
    for p in [xthread::Producer::Thread, xthread::Producer::Worker] {
        let _ = write!(detail, " {}:", p.name());
        let w = ratios(&mut detail, &ROUTES, |n| {
            (
                xp99(p, xthread::Column::OutboundRoutes, n),
                xp99(p, xthread::Column::TaskPerRoute, n),
            )
        });
        if worst.is_nan() || w > worst {
            worst = w;
        }
    }
    v.push(Bound {
        name: "xthread_parked_p99_outbound_routes_vs_task_per_route",
        text: format!(
            "xthread_parked p99: outbound_routes / task_per_route, worst {worst:.3} (per producer and count:{detail})"
        ),
        ratio: worst,
        limit: 1.1,
        held: worst <= 1.1,
    });

    let pp99 = |side: Side, load: Load, c: PColumn, n: usize| {
        probe
            .iter()
            .find(|x| x.side == side && x.load == load && x.column == c && x.routes == n)
            .and_then(|x| x.latency())
            .map(|p| p.p99 as f64)
    };
    let r = match (
        pp99(Side::Same, Load::Busy, PColumn::OutboundRoutesUrgent, 4096),
        pp99(Side::Same, Load::Idle, PColumn::OutboundRoutesUrgent, 4096),
    ) {
        (Some(a), Some(b)) => a / b,
        _ => f64::NAN,
    };
    v.push(Bound {
        name: "probe_urgent_4096_busy_vs_idle_p99",
        text: format!(
            "probe_under_load, same thread: urgent probe p99 among 4095 busy routes / alone = {r:.3}"
        ),
        ratio: r,
        limit: 2.0,
        held: r <= 2.0,
    });

    // Informational lines, no limit: per side, each `(label, a, b)` part
    // prints the p99 of probe cell `a` / cell `b` per route count.
    use PColumn::{OutboundRoutes, OutboundRoutesUrgent as Urgent, TaskPerRoute};
    type Part = (&'static str, (Load, PColumn), (Load, PColumn));
    let lines: [(&'static str, &str, &[Part]); 2] = [
        (
            // The urgent probe under load against the same probe written
            // after a delivered busy round (the load's memory traffic, none
            // of its pending routes), and that probe against a task per
            // route's after load.
            "probe_urgent_busy_vs_after_load_p99",
            "probe p99, urgent probe under load / after load, and after load against task_per_route",
            &[
                (" urgent under / after:", (Load::Busy, Urgent), (Load::After, Urgent)),
                (
                    "; after load, urgent / task_per_route:",
                    (Load::After, Urgent),
                    (Load::After, TaskPerRoute),
                ),
            ],
        ),
        (
            "probe_normal_vs_task_per_route_p99",
            "probe_under_load: normal outbound_routes probe p99 / task_per_route p99",
            &[("", (Load::Busy, OutboundRoutes), (Load::Busy, TaskPerRoute))],
        ),
    ];
    for (name, what, parts) in lines {
        let mut detail = String::new();
        for side in [Side::Same, Side::Cross] {
            let _ = write!(detail, " {}:", side.name());
            for &(label, a, b) in parts {
                detail.push_str(label);
                ratios(&mut detail, &PROBE_ROUTES, |n| {
                    (pp99(side, a.0, a.1, n), pp99(side, b.0, b.1, n))
                });
            }
        }
        v.push(Bound {
            name,
            text: format!("{what} (informational, no bound):{detail}"),
            ratio: f64::NAN,
            limit: f64::INFINITY,
            held: true,
        });
    }
    v
}

/// `a / b` for each count where both exist, appended to `detail` as
/// ` count:ratio`; the worst (largest), NaN when none.
fn ratios(
    detail: &mut String,
    counts: &[usize],
    pair: impl Fn(usize) -> (Option<f64>, Option<f64>),
) -> f64 {
    let mut worst = f64::NAN;
    for &n in counts {
        if let (Some(a), Some(b)) = pair(n) {
            let r = a / b;
            let _ = write!(detail, " {n}:{r:.2}");
            if worst.is_nan() || r > worst {
                worst = r;
            }
        }
    }
    worst
}
