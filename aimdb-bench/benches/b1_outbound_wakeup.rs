//! B1: outbound wake-up latency across route counts (informational).
//!
//! Two scenarios on a current-thread tokio runtime (one `LocalSet`, since
//! `Routes` is `!Send`; the producer is itself a task of that `LocalSet`,
//! so every wake-up in every column is a same-thread task wake):
//!
//! - **parked**: one busy route (the last) among N, the others idle. The
//!   producer writes one value and waits until the sink has it, so every
//!   pull parks and is woken: no batching at all.
//! - **all_busy**: every route is written each round; the producer waits
//!   until all N messages reached the sink.
//!
//! Columns (see BENCHMARKS.md): `task_per_route` (one task per route over
//! `Reader::recv`), `outbound_routes` (one task over `Routes::next`),
//! `select_all` and `stream_map` (one task over N `poll_fn` streams of
//! `Reader::poll_recv`), and `floor` (parked only: a consumer and the
//! producer, each parked on one `AtomicWaker`, handing one value over through
//! a `Cell`).
//!
//! Fairness: every column reads the same record type
//! (`Record<Cs, Latest<u32>, 1>`) through the same `Reader`, encodes the same
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
//! Diagnostic `scan` (all_busy at 256, 1024 and 4096 routes; stdout only,
//! not a column of BENCHMARKS.md, no JSON cell): one task woken once per
//! round by the last route's reader, then `try_recv` on every other reader.
//! It has no readiness at all and only works because it knows every route
//! was written: the floor of delivering N written records through the same
//! readers, encode and sink, against which the all_busy columns' own cost
//! can be read.
//!
//! `B1_FILTER=parked/outbound_routes/8` runs only the cells whose
//! `scenario/column/routes` contains the text and `B1_SCALE=20` makes every
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

use aimdb_bench::fixtures::{self, Cs, Rec};
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
/// Route counts of the all_busy `scan` diagnostic (those of bound 4).
const SCAN_ROUTES: [usize; 3] = [256, 1024, 4096];
/// Aimed-at length of one timed run of one cell.
const TARGET_RUN_NS: f64 = 60e6;
/// Bounds on messages per timed run.
const MIN_MSGS: usize = 1_000;
const MAX_MSGS: usize = 200_000;
/// A cell whose minimum run would take longer than this is skipped.
const SKIP_RUN_NS: f64 = 1.5e9;
/// Messages in the allocation-counting pass (at most).
const ALLOC_MSGS: usize = 5_000;

type RecReader = Reader<'static, Cs, Latest<u32>, 1>;

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
    /// Diagnostic, all_busy only, not a column of BENCHMARKS.md (no JSON
    /// cell, no bound): one task woken once per round by the last route's
    /// reader, which then takes every other reader's value with
    /// `try_recv`. No readiness at all: the floor of delivering N written
    /// records through these readers, encode and sink.
    Scan,
}

const COLUMNS: [Column; 5] = [
    Column::TaskPerRoute,
    Column::OutboundRoutes,
    Column::SelectAll,
    Column::StreamMap,
    Column::Floor,
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
        })
    }

    fn push(&self, topic: &str, payload: &[u8]) {
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

fn encode_push(sink: &Sink, scratch: &mut [u8; 16], topic: &str, v: Result<u32, RecvError>) {
    if let Ok(v) = v {
        if let Ok(n) = Postcard.encode(&v, scratch) {
            sink.push(topic, &scratch[..n]);
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
            let mut routes = f.routes;
            let s = sink.clone();
            tokio::task::spawn_local(async move {
                loop {
                    let m = routes.next().await;
                    s.push(m.topic, m.payload);
                }
            });
            Input::Records(f.records)
        }
        Column::TaskPerRoute => {
            let recs = fixtures::records(n);
            for (r, &topic) in recs.iter().zip(fixtures::out_topics(n)) {
                let mut reader = r.subscribe().expect("one reader");
                let s = sink.clone();
                tokio::task::spawn_local(async move {
                    let mut scratch = [0x5au8; 16];
                    loop {
                        let v = reader.recv().await;
                        encode_push(&s, &mut scratch, topic, v);
                    }
                });
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
                    encode_push(&s, &mut scratch, topic, v);
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
                    encode_push(&s, &mut scratch, topic, v);
                }
            });
            Input::Records(recs)
        }
        Column::Scan => {
            let recs = fixtures::records(n);
            let topics = fixtures::out_topics(n);
            let mut readers: Vec<RecReader> = recs
                .iter()
                .map(|r| r.subscribe().expect("one reader"))
                .collect();
            let s = sink.clone();
            tokio::task::spawn_local(async move {
                let mut scratch = [0x5au8; 16];
                let (last, rest) = readers.split_last_mut().expect("routes");
                loop {
                    // The producer writes the routes in order: the last
                    // write means the round is complete.
                    let v = last.recv().await;
                    for (r, &t) in rest.iter_mut().zip(topics) {
                        if let Ok(v) = r.try_recv() {
                            encode_push(&s, &mut scratch, t, Ok(v));
                        }
                    }
                    encode_push(&s, &mut scratch, topics[n - 1], v);
                }
            });
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
                    encode_push(&s, &mut scratch, topic, Ok(v));
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

    /// At least `msgs` messages, rounded up to whole rounds.
    fn round_up(&self, msgs: usize) -> usize {
        msgs.div_ceil(self.per_round()).max(1) * self.per_round()
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
                    rec.write(value(*seq));
                    sink.wait_for(1).await;
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
                    h.value.set(Some(value(*seq)));
                    h.consumer.wake();
                    sink.wait_for(1).await;
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
                    Scenario::Parked => false,
                    Scenario::AllBusy => column == Column::Floor || n < 8,
                };
                let id = format!("{}/{}/{n}", scenario.name(), column.name());
                if !skip && id.contains(filter.as_str()) {
                    v.push((scenario, column, n));
                }
            }
        }
    }
    for n in SCAN_ROUTES {
        let id = format!("all_busy/scan/{n}");
        if id.contains(filter.as_str()) {
            v.push((Scenario::AllBusy, Column::Scan, n));
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
    let (benches, notes, control) = rt
        .block_on(local.run_until(local.spawn_local(measure())))
        .expect("measuring task");
    let total = start.elapsed();
    report(&benches, &notes, control, total);
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

    let (r4, n4, d4) = worst_ratio(
        benches,
        AllBusy,
        OutboundRoutes,
        TaskPerRoute,
        &[256, 1024, 4096],
    );
    v.push(Bound {
        name: "all_busy_outbound_routes_vs_task_per_route_256_up",
        text: format!(
            "all_busy: outbound_routes / task_per_route at >= 256 routes, worst {r4:.3} at {n4} (per count:{d4})"
        ),
        ratio: r4,
        limit: 0.5,
        held: r4 <= 0.5,
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
    let _ = writeln!(t, "{title}");
    let _ = write!(t, "{:>6}", "routes");
    for c in &cols {
        let _ = write!(t, "  {:>26}", c.name());
    }
    let _ = writeln!(t);
    for n in ROUTES
        .into_iter()
        .filter(|&n| s == Scenario::Parked || n >= 8)
    {
        let _ = write!(t, "{n:>6}");
        for &c in &cols {
            let _ = write!(t, "  {:>26}", cell(find(benches, s, c, n)));
        }
        let _ = writeln!(t);
    }
}

fn report(benches: &[Bench], notes: &[String], control: u64, total: Duration) {
    let host = aimdb_bench::host();
    println!("b1_outbound_wakeup: current-thread tokio runtime, LocalSet");
    println!("host: {host}");
    print!("{}", table(benches, Scenario::Parked));
    print!("{}", table(benches, Scenario::AllBusy));
    println!(
        "\nfloor has no routes: it is measured once per route-count row so each ratio compares cells run next to each other."
    );
    for n in SCAN_ROUTES {
        let (Some(scan), Some(tpr), Some(ours)) = (
            find(benches, Scenario::AllBusy, Column::Scan, n),
            median(benches, Scenario::AllBusy, Column::TaskPerRoute, n),
            median(benches, Scenario::AllBusy, Column::OutboundRoutes, n),
        ) else {
            continue;
        };
        let m = Spread::of(&scan.samples);
        println!(
            "diagnostic: all_busy scan at {n} routes (one wake per round, then try_recv on every reader; the floor of delivering N written records through these readers; not a column of BENCHMARKS.md): {} ns/msg = {:.3} x task_per_route; outbound_routes = {:.3} x scan; {:.3} allocs/msg",
            m.show(),
            m.median / tpr,
            ours / m.median,
            scan.allocs_per_msg
        );
    }
    for n in notes {
        println!("note: {n}");
    }
    if control != 1 {
        println!("WARNING: allocation counter positive control read {control}, not 1: allocs/msg are not trustworthy");
    }

    let bounds = bounds(benches);
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

    let cells: Vec<_> = benches
        .iter()
        .filter(|b| !b.skipped && b.column != Column::Scan)
        .map(|b| {
            cell_json(
                b.scenario.name(),
                b.column.name(),
                b.routes,
                Spread::of(&b.samples),
                b.allocs_per_msg,
            )
        })
        .collect();
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
        println!("total runtime {:.1} s", total.as_secs_f64());
        return;
    }
    match aimdb_bench::write_json("b1_outbound_wakeup", &doc) {
        Ok(p) => println!("wrote {}", p.display()),
        Err(e) => eprintln!("writing JSON: {e}"),
    }
    println!("total runtime {:.1} s", total.as_secs_f64());
}
