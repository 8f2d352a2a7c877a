//! The **probe_under_load** scenario of `b1_outbound_wakeup`
//! ([`measure_probe`]): `N - 1` routes written every round (as
//! `all_busy`) and one probe route written last in each round, stamped;
//! the latency of the probe alone is recorded (histograms and stamps:
//! `aimdb_bench::latency`). Columns: `task_per_route`, `outbound_routes`
//! (the probe is the last, normal route), `outbound_routes_urgent` (the
//! probe is route 0, linked urgent) and `select_all`; `probe_idle` is the
//! same fixture with the other routes never written (the reference for the
//! urgent bound), and `probe_after_load` the same fixture with the other
//! routes written and *delivered* before the probe is written (the busy
//! round's memory traffic without its pending routes: what separates the
//! two is the cache, not the pull; columns `task_per_route` and
//! `outbound_routes_urgent`, both probing route 0, the one whose memory
//! the round touched first). Same thread (producer and consumers on one
//! `LocalSet`) and cross thread (producer on a plain OS thread, consumers
//! `tokio::spawn`ed on a 2-worker runtime).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::cells::{encode_push, loops, reader_stream, value, Deliver};
use aimdb_bench::fixtures::{self, Rec};
use aimdb_bench::latency::{histogram, now_ns, record, Percentiles};
use aimdb_bench::timing::{Spread, RUNS};
use futures::StreamExt;
use hdrhistogram::Histogram;
use serde_json::{json, Value};

use super::xthread::Tally;

// ------------------------------------------------------- probe_under_load

/// Route counts of the probe scenario.
pub const PROBE_ROUTES: [usize; 5] = [8, 64, 256, 1024, 4096];
/// Aimed-at length of one pass.
const PASS_NS: f64 = 30e6;
const MIN_ROUNDS: usize = 50;
const MAX_ROUNDS: usize = 5_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Load {
    /// The other routes are written every round.
    Busy,
    /// Only the probe is written (the reference).
    Idle,
    /// The other routes are written and delivered, then the probe is
    /// written alone (a diagnostic: the load's cache footprint, none of
    /// its pending routes).
    After,
}

/// Every load, in table order.
pub const LOADS: [Load; 3] = [Load::Busy, Load::Idle, Load::After];

impl Load {
    pub fn scenario(self) -> &'static str {
        match self {
            Self::Busy => "probe_under_load",
            Self::Idle => "probe_idle",
            Self::After => "probe_after_load",
        }
    }

    /// Whether `column` is measured under this load.
    pub fn has(self, column: PColumn) -> bool {
        match self {
            Self::Busy => true,
            // The idle reference is the urgent probe alone.
            Self::Idle => column == PColumn::OutboundRoutesUrgent,
            Self::After => matches!(
                column,
                PColumn::OutboundRoutesUrgent | PColumn::TaskPerRoute
            ),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Same,
    Cross,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Self::Same => "same",
            Self::Cross => "cross",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PColumn {
    TaskPerRoute,
    OutboundRoutes,
    OutboundRoutesUrgent,
    SelectAll,
}

pub const PCOLUMNS: [PColumn; 4] = [
    PColumn::TaskPerRoute,
    PColumn::OutboundRoutes,
    PColumn::OutboundRoutesUrgent,
    PColumn::SelectAll,
];

impl PColumn {
    pub fn name(self) -> &'static str {
        match self {
            Self::TaskPerRoute => "task_per_route",
            Self::OutboundRoutes => "outbound_routes",
            Self::OutboundRoutesUrgent => "outbound_routes_urgent",
            Self::SelectAll => "select_all",
        }
    }
}

/// The probe cells' sink: a count the producer waits for, and the probe's
/// latency (only pushes on the probe topic are timed).
pub struct PSink {
    tally: Tally,
    probe_topic: usize,
    stamp: AtomicU64,
    pushed: AtomicU64,
    hist: Mutex<Histogram<u64>>,
}

impl Deliver for PSink {
    fn push(&self, topic: &str, _payload: &[u8]) {
        if topic.as_ptr() as usize == self.probe_topic && self.stamp.load(Ordering::Acquire) != 0 {
            self.pushed.store(now_ns(), Ordering::Release);
        }
        self.tally.arrived();
    }
}

/// One probe cell.
pub struct PCell {
    pub load: Load,
    pub side: Side,
    pub column: PColumn,
    pub routes: usize,
    sink: Arc<PSink>,
    records: &'static [Rec],
    probe: usize,
    rounds: usize,
    seq: u64,
    /// ns per message of each pass.
    pub samples: Vec<f64>,
}

impl PCell {
    pub fn id(&self) -> String {
        format!(
            "{}/{}/{}/{}",
            self.load.scenario(),
            self.side.name(),
            self.column.name(),
            self.routes
        )
    }

    pub fn latency(&self) -> Option<Percentiles> {
        Percentiles::of(&self.hist())
    }

    fn hist(&self) -> std::sync::MutexGuard<'_, Histogram<u64>> {
        self.sink.hist.lock().expect("histogram")
    }

    /// `rounds` rounds: the busy routes (unless idle; after load, waiting
    /// until they are delivered), then the stamped probe, then wait for the
    /// round. ns per message.
    async fn drive(&mut self, rounds: usize, stamp: bool) -> f64 {
        let per_round = match self.load {
            Load::Busy | Load::After => self.records.len() as u64,
            Load::Idle => 1,
        };
        let sink = &*self.sink;
        let t = Instant::now();
        for _ in 0..rounds {
            self.seq += 1;
            let v = value(self.seq);
            // After load, the busy routes are a round of their own.
            let mut target = sink.tally.expect(match self.load {
                Load::After => per_round - 1,
                _ => per_round,
            });
            if self.load != Load::Idle {
                for (i, r) in self.records.iter().enumerate() {
                    if i != self.probe {
                        r.write(v);
                    }
                }
            }
            if self.load == Load::After {
                sink.tally.wait(target).await;
                target = sink.tally.expect(1);
            }
            if stamp {
                sink.stamp.store(now_ns(), Ordering::Release);
            }
            self.records[self.probe].write(v);
            sink.tally.wait(target).await;
            if stamp {
                record(&sink.hist, &sink.stamp, &sink.pushed);
            }
        }
        t.elapsed().as_nanos() as f64 / (rounds as u64 * per_round) as f64
    }

    fn check(&self) {
        self.sink.tally.check(&self.id());
    }
}

/// A consumer future for `spawn`.
type Task = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Builds one cell; its consumers are spawned with `spawn`.
fn build(load: Load, side: Side, column: PColumn, n: usize, spawn: &dyn Fn(Task)) -> PCell {
    let topics = fixtures::out_topics(n);
    let (routes, records, probe) = match column {
        PColumn::OutboundRoutesUrgent => {
            let f = fixtures::outbound_urgent(n);
            (Some(f.routes), f.records, 0)
        }
        PColumn::OutboundRoutes => {
            let f = fixtures::outbound_static(n);
            (Some(f.routes), f.records, n - 1)
        }
        // After load, a task per route probes route 0 as the urgent column
        // does: the route whose memory the round touched first, so both
        // wake the coldest route.
        PColumn::TaskPerRoute if load == Load::After => (None, fixtures::records(n), 0),
        PColumn::TaskPerRoute | PColumn::SelectAll => (None, fixtures::records(n), n - 1),
    };
    // The probe's pushes are told apart by the topic's address: the table's
    // own string for the outbound columns, `topics` for the others.
    let probe_topic = match &routes {
        Some(r) => r
            .route(probe)
            .and_then(|l| l.fixed_topic())
            .expect("static topic")
            .as_ptr() as usize,
        None => topics[probe].as_ptr() as usize,
    };
    let sink = Arc::new(PSink {
        tally: Tally::default(),
        probe_topic,
        stamp: AtomicU64::new(0),
        pushed: AtomicU64::new(0),
        hist: Mutex::new(histogram()),
    });
    match (column, routes) {
        (PColumn::OutboundRoutes | PColumn::OutboundRoutesUrgent, Some(routes)) => {
            spawn(Box::pin(loops::routes(routes, sink.clone())));
        }
        (PColumn::TaskPerRoute, _) => {
            for (r, &topic) in records.iter().zip(topics) {
                let reader = r.subscribe().expect("one reader");
                spawn(Box::pin(loops::per_route(reader, topic, sink.clone())));
            }
        }
        (PColumn::SelectAll, _) => {
            let streams = records
                .iter()
                .zip(topics)
                .map(|(r, &t)| reader_stream(r.subscribe().expect("one reader"), t));
            let mut all = futures::stream::select_all(streams);
            let s = sink.clone();
            spawn(Box::pin(async move {
                let mut scratch = [0x5au8; 16];
                while let Some((topic, v)) = all.next().await {
                    encode_push(&*s, &mut scratch, topic, v);
                }
            }));
        }
        _ => unreachable!("outbound columns have a table"),
    }
    PCell {
        load,
        side,
        column,
        routes: n,
        sink,
        records,
        probe,
        rounds: 0,
        seq: 0,
        samples: Vec::new(),
    }
}

fn selected(filter: &str, side: Side) -> Vec<(Load, PColumn, usize)> {
    let mut v = Vec::new();
    for load in LOADS {
        for column in PCOLUMNS {
            if !load.has(column) {
                continue;
            }
            for n in PROBE_ROUTES {
                let id = format!("{}/{}/{}/{n}", load.scenario(), side.name(), column.name());
                if id.contains(filter) {
                    v.push((load, column, n));
                }
            }
        }
    }
    v
}

/// Sizes every cell's passes (about [`PASS_NS`] each), then runs [`RUNS`]
/// interleaved passes (run 1 of every cell, then run 2, ...), each after an
/// untimed warm-up; only the timed passes are stamped. The producer is
/// whoever awaits this: a task of the same `LocalSet`, or a plain thread
/// blocking on it.
async fn passes(cells: &mut [PCell], scale: f64) {
    for c in cells.iter_mut() {
        c.drive(10, false).await;
        let ns = c.drive(20, false).await;
        let per_round = ns
            * match c.load {
                Load::Busy | Load::After => c.routes as f64,
                Load::Idle => 1.0,
            };
        c.rounds = (scale * PASS_NS / per_round).clamp(MIN_ROUNDS as f64, scale * MAX_ROUNDS as f64)
            as usize;
    }
    for _ in 0..RUNS {
        for c in cells.iter_mut() {
            c.drive(c.rounds / 10 + 1, false).await;
            let ns = c.drive(c.rounds, true).await;
            c.samples.push(ns);
        }
    }
    for c in cells.iter() {
        c.check();
    }
}

/// Every selected probe cell, same thread then cross thread.
pub fn measure_probe(filter: &str, scale: f64) -> Vec<PCell> {
    let mut all = Vec::new();

    // Same thread: one LocalSet on a current-thread runtime, the producer a
    // task of it.
    let same = selected(filter, Side::Same);
    if !same.is_empty() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let local = tokio::task::LocalSet::new();
        let cells = local.block_on(&rt, async {
            let mut cells: Vec<PCell> = same
                .into_iter()
                .map(|(l, c, n)| {
                    build(l, Side::Same, c, n, &|f| {
                        tokio::task::spawn_local(f);
                    })
                })
                .collect();
            // Let every consumer run once and park.
            for _ in 0..2_000 {
                tokio::task::yield_now().await;
            }
            passes(&mut cells, scale).await;
            cells
        });
        all.extend(cells);
    }

    // Cross thread: consumers on a 2-worker runtime, the producer this
    // plain OS thread.
    let cross = selected(filter, Side::Cross);
    if !cross.is_empty() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("multi-thread runtime");
        let handle = rt.handle().clone();
        let mut cells: Vec<PCell> = cross
            .into_iter()
            .map(|(l, c, n)| {
                build(l, Side::Cross, c, n, &|f| {
                    handle.spawn(f);
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(200));
        futures::executor::block_on(passes(&mut cells, scale));
        all.extend(cells);
        // The consumers park for ever: leak the runtime.
        std::mem::forget(rt);
    }
    all
}

/// The JSON cell of a probe measurement.
pub fn probe_json(c: &PCell) -> Value {
    let s = Spread::of(&c.samples);
    let mut j =
        aimdb_bench::timing::cell_json(c.load.scenario(), c.column.name(), c.routes, s, f64::NAN);
    j["allocs_per_msg"] = Value::Null;
    j["thread"] = json!(c.side.name());
    j["probe_route"] = json!(c.probe);
    j["latency"] = c.latency().map_or(Value::Null, |p| p.json());
    j
}
