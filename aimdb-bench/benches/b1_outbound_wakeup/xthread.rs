//! The cross-thread scenarios of `b1_outbound_wakeup`, and the `host_lock`
//! rows.
//!
//! `xthread_parked` and `xthread_all_busy` are the same two shapes as the
//! same-thread scenarios, but the consumers run on a 2-worker multi-thread
//! tokio runtime and the producer is either a plain OS thread (`thread`)
//! or a task spawned on that runtime (`worker`; tokio decides which worker
//! runs it). Columns:
//!
//! - `task_per_route`: one `tokio::spawn`ed task per route over
//!   `Reader::recv`;
//! - `task_per_route_control` (parked): a second, identical
//!   `task_per_route` fixture, the A/A control (see `cells::Column::Control`);
//! - `outbound_routes`: the connector loop over `Routes::next`,
//!   `tokio::spawn`ed;
//! - `outbound_routes_thread`: the same loop as the `block_on` future of
//!   a thread of its own (`aimdb_connectors::tokio_io::run_on_thread`);
//! - `floor` (parked): one value handed over through one `AtomicWaker` to
//!   one spawned task;
//! - `scan` (all_busy): one spawned task woken once per round by the last
//!   route's reader, which then `try_recv`s every other reader.
//!
//! Every column encodes with `Postcard` and pushes into the same
//! thread-safe [`XSink`], which wakes the producer through one
//! `AtomicWaker` when the count it waits for is reached.
//!
//! `host_lock`: one or two OS threads, each writing its own `Latest`
//! record as fast as it can, while one spawned connector drains both
//! through `Routes`; records over [`HostRawMutex`] against records over
//! `CriticalSectionRawMutex` (critical-section's global std lock). The
//! cell is nanoseconds per write of one thread (all threads write the same
//! count at once), so throughput ratios are inverse ratios of the cells.
//! The `_no_reader` columns (diagnostic, no bound) are the same writes with
//! no reader ever armed: the lock and the push alone.

use std::future::poll_fn;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::task::Poll;
use std::time::Instant;

use aimdb_bench::fixtures::{self, leak, Rec};
use aimdb_bench::timing::{allocs, short, whole_rounds, GatedCounter, Spread, RUNS};
use aimdb_connectors::tokio_io::run_on_thread;
use aimdb_core::codec::Postcard;
use aimdb_core::outbound;
use aimdb_core::outbound::Routes;
use aimdb_core::record::{Latest, Record};
use aimdb_core::sync::{HostRawMutex, Readiness};
use embassy_sync::blocking_mutex::raw::{CriticalSectionRawMutex, RawMutex};
use futures::task::AtomicWaker;
use tokio::runtime::Runtime;

use crate::cells::{encode_push, loops, value, Deliver};
use aimdb_bench::latency::Stamp;

use super::{MAX_MSGS, MIN_MSGS, ROUTES, SKIP_RUN_NS};

/// Aimed-at length of one timed cross-thread run.
const TARGET_RUN_NS: f64 = 40e6;
/// Messages in the allocation-counting pass (at most).
const ALLOC_MSGS: usize = 2_000;
/// Writes per thread per timed `host_lock` run.
const LOCK_WRITES: u64 = 400_000;

/// The same two shapes as the same-thread cells, across threads.
pub use crate::cells::Scenario;

/// A cross-thread scenario's name in tables and JSON.
pub fn name(s: Scenario) -> &'static str {
    match s {
        Scenario::Parked => "xthread_parked",
        Scenario::AllBusy => "xthread_all_busy",
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Producer {
    Thread,
    Worker,
}

impl Producer {
    pub fn name(self) -> &'static str {
        match self {
            Self::Thread => "thread",
            Self::Worker => "worker",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    TaskPerRoute,
    Control,
    OutboundRoutes,
    OutboundRoutesThread,
    Floor,
    Scan,
}

pub const COLUMNS: [Column; 6] = [
    Column::TaskPerRoute,
    Column::Control,
    Column::OutboundRoutes,
    Column::OutboundRoutesThread,
    Column::Floor,
    Column::Scan,
];

impl Column {
    pub fn name(self) -> &'static str {
        match self {
            Self::TaskPerRoute => "task_per_route",
            Self::Control => "task_per_route_control",
            Self::OutboundRoutes => "outbound_routes",
            Self::OutboundRoutesThread => "outbound_routes_thread",
            Self::Floor => "floor",
            Self::Scan => "scan",
        }
    }

    pub fn runs_in(self, s: Scenario) -> bool {
        match self {
            Self::Floor | Self::Control => s == Scenario::Parked,
            Self::Scan => s == Scenario::AllBusy,
            _ => true,
        }
    }
}

/// Messages delivered against the count a producer waits for, and the
/// producer's waker: the thread-safe sinks' common half.
#[derive(Default)]
pub struct Tally {
    delivered: AtomicU64,
    target: AtomicU64,
    producer: AtomicWaker,
}

impl Tally {
    /// One message delivered; wakes the producer when its count is reached.
    pub fn arrived(&self) {
        let d = self.delivered.fetch_add(1, Ordering::AcqRel) + 1;
        if d >= self.target.load(Ordering::Acquire) {
            self.producer.wake();
        }
    }

    /// Announces `more` messages before they are written; returns the
    /// count to wait for. Only the producer calls it.
    pub fn expect(&self, more: u64) -> u64 {
        let t = self.target.load(Ordering::Relaxed) + more;
        self.target.store(t, Ordering::Release);
        t
    }

    /// Waits until `target` messages were delivered in all.
    pub async fn wait(&self, target: u64) {
        poll_fn(|cx| {
            if self.delivered.load(Ordering::Acquire) >= target {
                return Poll::Ready(());
            }
            self.producer.register(cx.waker());
            if self.delivered.load(Ordering::Acquire) >= target {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }

    /// Panics unless every announced message was delivered.
    pub fn check(&self, what: &str) {
        assert_eq!(
            self.target.load(Ordering::Acquire),
            self.delivered.load(Ordering::Acquire),
            "{what}: sink count"
        );
    }
}

/// The thread-safe sink: a count, the last payload's first bytes, the
/// count the producer waits for and its waker.
pub struct XSink {
    tally: Tally,
    last: AtomicU64,
    last_len: AtomicUsize,
    topic_len: AtomicUsize,
    /// Per-message latency, recorded only in the latency pass.
    pub stamp: Stamp,
}

impl XSink {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            tally: Tally::default(),
            last: AtomicU64::new(0),
            last_len: AtomicUsize::new(0),
            topic_len: AtomicUsize::new(0),
            stamp: Stamp::default(),
        })
    }
}

impl Deliver for XSink {
    fn push(&self, topic: &str, payload: &[u8]) {
        self.stamp.at_push();
        let mut x = 0u64;
        for (i, b) in payload.iter().take(8).enumerate() {
            x |= u64::from(*b) << (8 * i);
        }
        self.last.store(x, Ordering::Relaxed);
        self.last_len.store(payload.len(), Ordering::Relaxed);
        self.topic_len.store(topic.len(), Ordering::Relaxed);
        self.tally.arrived();
    }
}

impl XSink {
    fn expect(&self, more: u64) -> u64 {
        self.tally.expect(more)
    }

    async fn wait(&self, target: u64) {
        self.tally.wait(target).await;
    }
}

/// The `floor` hand-off: one value slot (0 = empty), one waker slot.
pub struct Handoff {
    value: AtomicU64,
    consumer: AtomicWaker,
}

#[derive(Clone)]
enum Input {
    Records(&'static [Rec]),
    Floor(Arc<Handoff>),
}

pub struct Cell {
    pub scenario: Scenario,
    pub producer: Producer,
    pub column: Column,
    pub routes: usize,
    pub sink: Arc<XSink>,
    input: Input,
    msgs: usize,
    pub skipped: bool,
    pub samples: Vec<f64>,
    pub allocs_per_msg: f64,
    seq: Arc<AtomicU64>,
}

/// Spawns the consumer side of one cell on `rt` (or its own thread).
fn build(rt: &Runtime, scenario: Scenario, producer: Producer, column: Column, n: usize) -> Cell {
    let sink = XSink::new();
    let input = match column {
        Column::OutboundRoutes | Column::OutboundRoutesThread => {
            let f = fixtures::outbound_static(n);
            let run = loops::routes(f.routes, sink.clone());
            if column == Column::OutboundRoutes {
                rt.spawn(run);
            } else {
                run_on_thread("b1-connector", move || run).expect("connector thread");
            }
            Input::Records(f.records)
        }
        Column::TaskPerRoute | Column::Control => {
            let recs = fixtures::records(n);
            for (r, &topic) in recs.iter().zip(fixtures::out_topics(n)) {
                let reader = r.subscribe().expect("one reader");
                rt.spawn(loops::per_route(reader, topic, sink.clone()));
            }
            Input::Records(recs)
        }
        Column::Scan => {
            let recs = fixtures::records(n);
            rt.spawn(loops::scan(recs, sink.clone()));
            Input::Records(recs)
        }
        Column::Floor => {
            let h = Arc::new(Handoff {
                value: AtomicU64::new(0),
                consumer: AtomicWaker::new(),
            });
            let (h2, s) = (h.clone(), sink.clone());
            let topic = fixtures::out_topics(1)[0];
            rt.spawn(async move {
                let mut scratch = [0x5au8; 16];
                loop {
                    let v = poll_fn(|cx| {
                        let v = h2.value.swap(0, Ordering::AcqRel);
                        if v != 0 {
                            return Poll::Ready(v);
                        }
                        h2.consumer.register(cx.waker());
                        match h2.value.swap(0, Ordering::AcqRel) {
                            0 => Poll::Pending,
                            v => Poll::Ready(v),
                        }
                    })
                    .await;
                    encode_push(&*s, &mut scratch, topic, Ok(v as u32));
                }
            });
            Input::Floor(h)
        }
    };
    Cell {
        scenario,
        producer,
        column,
        routes: n,
        sink,
        input,
        msgs: 0,
        skipped: false,
        samples: Vec::new(),
        allocs_per_msg: f64::NAN,
        seq: Arc::new(AtomicU64::new(0)),
    }
}

/// Drives `msgs` messages (whole rounds) into a cell: the producer's side,
/// the same for both producers.
async fn drive(
    scenario: Scenario,
    input: Input,
    sink: Arc<XSink>,
    seq: Arc<AtomicU64>,
    msgs: usize,
) {
    let mut s = seq.load(Ordering::Relaxed);
    match (input, scenario) {
        (Input::Records(recs), Scenario::Parked) => {
            let rec = &recs[recs.len() - 1];
            for _ in 0..msgs {
                s += 1;
                let t = sink.expect(1);
                sink.stamp.before_write();
                rec.write(value(s));
                sink.wait(t).await;
                sink.stamp.record();
            }
        }
        (Input::Records(recs), Scenario::AllBusy) => {
            let n = recs.len();
            for _ in 0..msgs / n {
                s += 1;
                let v = value(s);
                let t = sink.expect(n as u64);
                for r in recs {
                    r.write(v);
                }
                sink.wait(t).await;
            }
        }
        (Input::Floor(h), _) => {
            for _ in 0..msgs {
                s += 1;
                let t = sink.expect(1);
                sink.stamp.before_write();
                h.value.store(u64::from(value(s)), Ordering::Release);
                h.consumer.wake();
                sink.wait(t).await;
                sink.stamp.record();
            }
        }
    }
    seq.store(s, Ordering::Relaxed);
}

impl Cell {
    fn round_up(&self, msgs: usize) -> usize {
        let per_round = if self.scenario == Scenario::Parked {
            1
        } else {
            self.routes
        };
        whole_rounds(msgs, per_round)
    }

    pub fn id(&self) -> String {
        format!(
            "{}/{}/{}/{}",
            name(self.scenario),
            self.producer.name(),
            self.column.name(),
            self.routes
        )
    }

    /// `warm` untimed messages, then `msgs` timed: ns per message, measured
    /// by the producer itself (a thread or task started for the run).
    fn run(
        &self,
        rt: &Runtime,
        warm: usize,
        msgs: usize,
        gate: Option<&'static GatedCounter>,
    ) -> (f64, u64) {
        let (scenario, input, sink, seq) = (
            self.scenario,
            self.input.clone(),
            self.sink.clone(),
            self.seq.clone(),
        );
        let work = async move {
            if warm > 0 {
                drive(scenario, input.clone(), sink.clone(), seq.clone(), warm).await;
            }
            let counting = gate.map(|g| g.start());
            let t = Instant::now();
            drive(scenario, input, sink, seq, msgs).await;
            let ns = t.elapsed().as_nanos() as f64 / msgs as f64;
            (ns, counting.map_or(0, |c| allocs(&c.stop())))
        };
        match self.producer {
            Producer::Thread => std::thread::scope(|s| {
                s.spawn(|| futures::executor::block_on(work))
                    .join()
                    .expect("producer thread")
            }),
            Producer::Worker => rt.block_on(rt.spawn(work)).expect("producer task"),
        }
    }

    fn check_sink(&self) {
        let s = &self.sink;
        s.tally.check(&self.id());
        assert!(s.last_len.load(Ordering::Relaxed) == 5 && s.last.load(Ordering::Relaxed) != 0);
        assert!(s.topic_len.load(Ordering::Relaxed) > 0);
    }
}

/// The cells `B1_FILTER` selects (see the bench's doc).
fn selected(filter: &str) -> Vec<(Scenario, Producer, Column, usize)> {
    let mut v = Vec::new();
    for scenario in [Scenario::Parked, Scenario::AllBusy] {
        for producer in [Producer::Thread, Producer::Worker] {
            for column in COLUMNS.into_iter().filter(|c| c.runs_in(scenario)) {
                for n in ROUTES {
                    if !scenario.runs_at(n) {
                        continue;
                    }
                    let id = format!(
                        "{}/{}/{}/{n}",
                        name(scenario),
                        producer.name(),
                        column.name()
                    );
                    if id.contains(filter) {
                        v.push((scenario, producer, column, n));
                    }
                }
            }
        }
    }
    v
}

/// Builds, probes, counts and times every selected cross-thread cell.
pub fn measure(
    filter: &str,
    scale: f64,
    gate: &'static GatedCounter,
    notes: &mut Vec<String>,
) -> Vec<Cell> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("multi-thread runtime");
    let mut cells: Vec<Cell> = selected(filter)
        .into_iter()
        .map(|(s, p, c, n)| build(&rt, s, p, c, n))
        .collect();
    // Let every consumer run once and park.
    std::thread::sleep(std::time::Duration::from_millis(200));

    let mut stopped = Vec::new();
    for c in &mut cells {
        let key = (c.scenario, c.producer, c.column);
        if stopped.contains(&key) {
            c.skipped = true;
            continue;
        }
        let probe = c.round_up(200);
        let (ns, _) = c.run(&rt, probe, probe, None);
        if ns * MIN_MSGS as f64 > SKIP_RUN_NS {
            c.skipped = true;
            stopped.push(key);
            notes.push(format!(
                "{}: stopped ({} ns/msg in the probe)",
                c.id(),
                short(ns)
            ));
            continue;
        }
        let msgs = (scale * TARGET_RUN_NS / ns).clamp(MIN_MSGS as f64, scale * MAX_MSGS as f64);
        c.msgs = c.round_up(msgs as usize);
    }

    // Allocations per message, counted over every thread, untimed.
    for c in cells.iter_mut().filter(|c| !c.skipped) {
        let msgs = c.round_up(ALLOC_MSGS.min(c.msgs));
        let (_, n) = c.run(&rt, c.round_up(100), msgs, Some(gate));
        c.allocs_per_msg = n as f64 / msgs as f64;
        c.check_sink();
    }

    for _ in 0..RUNS {
        for c in cells.iter_mut().filter(|c| !c.skipped) {
            let warm = c.round_up(c.msgs / 20);
            let (ns, _) = c.run(&rt, warm, c.msgs, None);
            c.samples.push(ns);
        }
    }
    // Latency: a separate, stamped pass per parked cell.
    for c in cells
        .iter()
        .filter(|c| !c.skipped && c.scenario == Scenario::Parked)
    {
        c.sink.stamp.enable(true);
        c.run(&rt, 0, c.msgs, None);
        c.sink.stamp.enable(false);
    }
    for c in cells.iter().filter(|c| !c.skipped) {
        c.check_sink();
    }
    // The consumers park for ever; the runtime is leaked rather than
    // dropped under them (and the connector threads keep running).
    std::mem::forget(rt);
    cells
}

pub fn find(cells: &[Cell], s: Scenario, p: Producer, c: Column, n: usize) -> Option<&Cell> {
    cells.iter().find(|x| {
        x.scenario == s && x.producer == p && x.column == c && x.routes == n && !x.skipped
    })
}

pub fn median(cells: &[Cell], s: Scenario, p: Producer, c: Column, n: usize) -> Option<f64> {
    find(cells, s, p, c, n).map(|x| Spread::of(&x.samples).median)
}

// ------------------------------------------------------------- host_lock

/// A value on cache lines of its own (128 bytes: x86-64 prefetches lines
/// in pairs).
#[repr(align(128))]
struct Padded<T>(T);

/// One `host_lock` cell: `threads` writers over records with mutex `name`.
pub struct LockCell {
    pub column: &'static str,
    pub threads: usize,
    pub samples: Vec<f64>,
    run: Box<dyn Fn() -> f64>,
}

/// `threads` records over `M`, one connector (spawned on `rt`) draining
/// them, and a closure that times `LOCK_WRITES` writes on each of
/// `threads` threads at once.
fn lock_cell<M: RawMutex + Send + Sync + 'static>(
    rt: &Runtime,
    column: &'static str,
    threads: usize,
    drain: bool,
) -> LockCell {
    // Each record on cache lines of its own: two records in one line would
    // measure false sharing between the writers, not the lock.
    let recs: &'static [Padded<Record<M, Latest<u32>, 1>>] = Box::leak(
        (0..threads)
            .map(|_| Padded(Record::new("lock")))
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    let ready: &'static Readiness<1> = leak(Readiness::new());
    let mut b =
        Routes::<_, 1, 2>::builder(ready, leak([0x5au8; 16])).written_topics(leak([0x5au8; 16]));
    for (Padded(r), &t) in recs.iter().zip(fixtures::out_topics(threads)) {
        b.link(leak(outbound::Link::new(
            r.subscribe().expect("reader"),
            t,
            Postcard,
        )));
    }
    let mut routes = b.build().expect("host_lock routes");
    if drain {
        rt.spawn(async move {
            loop {
                let m = routes.next().await;
                std::hint::black_box(m.payload);
            }
        });
    } else {
        // Diagnostic: no reader is ever armed, so a write is the lock and
        // the push alone (the readers stay subscribed inside the links).
        std::mem::forget(routes);
    }
    let run = move || {
        let start = Barrier::new(threads + 1);
        let go = AtomicBool::new(false);
        std::thread::scope(|s| {
            for Padded(r) in recs {
                let (start, go) = (&start, &go);
                s.spawn(move || {
                    start.wait();
                    while !go.load(Ordering::Acquire) {}
                    for i in 0..LOCK_WRITES {
                        r.write(value(i));
                    }
                });
            }
            start.wait();
            let t = Instant::now();
            go.store(true, Ordering::Release);
            // The scope joins every writer before returning.
            t
        })
        .elapsed()
        .as_nanos() as f64
            / LOCK_WRITES as f64
    };
    LockCell {
        column,
        threads,
        samples: Vec::new(),
        run: Box::new(run),
    }
}

/// Times the `host_lock` cells, interleaved.
pub fn measure_locks() -> Vec<LockCell> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("multi-thread runtime");
    let mut cells = Vec::new();
    for threads in [1, 2] {
        cells.push(lock_cell::<HostRawMutex>(
            &rt,
            "host_raw_mutex",
            threads,
            true,
        ));
        cells.push(lock_cell::<CriticalSectionRawMutex>(
            &rt,
            "critical_section",
            threads,
            true,
        ));
        let name = "host_raw_mutex_no_reader";
        cells.push(lock_cell::<HostRawMutex>(&rt, name, threads, false));
        let name = "critical_section_no_reader";
        cells.push(lock_cell::<CriticalSectionRawMutex>(
            &rt, name, threads, false,
        ));
    }
    for c in &cells {
        (c.run)(); // warm-up
    }
    for _ in 0..RUNS {
        for c in &mut cells {
            let ns = (c.run)();
            c.samples.push(ns);
        }
    }
    std::mem::forget(rt);
    cells
}
