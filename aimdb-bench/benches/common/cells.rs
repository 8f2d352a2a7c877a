//! The same-thread columns of `b1_outbound_wakeup`.
//!
//! A module the bench binaries include (`#[path]`), not part of the bench
//! library: the generic library code it runs (the outbound pull, the
//! record reads) is then compiled inside the binary that runs it, as a
//! user's crate compiles it, and its presence does not change how the
//! bench library's own fixtures are compiled (in the library, more callers
//! of `Record::take` keep the fixtures' routes from inlining `take`, which
//! changes what b2's outbound rows count).
//!
//! Columns (see `docs/BENCHMARKS.md`): `task_per_route` (one task per route
//! over `Reader::recv`), `task_per_route_control` (parked only: a second,
//! identical `task_per_route` fixture, the A/A control), `outbound_routes`
//! (one task over `Routes::next`), `select_all` and `stream_map` (one task over N `poll_fn` streams of
//! `Reader::poll_recv`), `floor` (parked only: a consumer and the
//! producer, each parked on one `AtomicWaker`, handing one value over
//! through a `Cell`) and `scan` (all_busy only: one task woken once per
//! round by the last route's reader, then `try_recv` on every other
//! reader: no readiness at all, the floor of delivering N written records
//! through the same readers, encode and sink).
//!
//! Fairness: every column reads the same record type
//! (`Record<Mx, Latest<u32>, 1>`) through the same `Reader`, encodes the
//! same value with `Postcard` (columns other than `outbound_routes` into
//! their own 16-byte scratch, pre-filled with non-zero bytes;
//! `outbound_routes` into the connector scratch of the shared fixture),
//! and delivers it to the same [`Sink`], which wakes the producer through
//! its one `AtomicWaker` when the awaited count is reached. `floor` does
//! the same encode and sink push; only the hand-off differs (a `Cell` and
//! an `AtomicWaker`, no record, no lock), so it is the cost of two
//! same-thread wakes plus that shared work.
//!
//! The consumer loops ([`loops`]), [`Deliver`], [`value`] and
//! [`encode_push`] are shared with b1's cross-thread and probe cells.

use std::cell::{Cell as StdCell, RefCell};
use std::future::poll_fn;
use std::rc::Rc;
use std::task::Poll;

use aimdb_core::codec::{Encode, Postcard};
use aimdb_core::record::{Latest, Reader, RecvError};
use futures::task::AtomicWaker;
use futures::{Stream, StreamExt};
use tokio_stream::StreamMap;

use aimdb_bench::fixtures::{self, Mx, Rec};
use aimdb_bench::latency::Stamp;

/// The reader every column reads through.
pub type RecReader = Reader<'static, Mx, Latest<u32>, 1>;

/// The shape of a same-thread cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// One busy route (the last) among N, the others idle; the producer
    /// writes one value and waits until the sink has it.
    Parked,
    /// Every route written each round; the producer waits until all N
    /// messages reached the sink.
    AllBusy,
}

impl Scenario {
    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Self::Parked => "parked",
            Self::AllBusy => "all_busy",
        }
    }

    /// Whether the scenario runs at `n` routes (all_busy from 8: with fewer
    /// a round is too short to batch anything).
    pub fn runs_at(self, n: usize) -> bool {
        self == Self::Parked || n >= 8
    }
}

/// A design under test (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    /// One task per route over `Reader::recv`.
    TaskPerRoute,
    /// Parked only: a second `TaskPerRoute` fixture, built and run the same
    /// way (its own records, readers and tasks). Its ratio to
    /// `task_per_route` is what two identical designs read in this run: the
    /// spread a parity ratio of the same run has to be read against.
    Control,
    /// One task over `Routes::next`.
    OutboundRoutes,
    /// One task over `futures::stream::select_all` of N reader streams.
    SelectAll,
    /// One task over a `tokio_stream::StreamMap` of N reader streams.
    StreamMap,
    /// Parked only: one value handed over through a `Cell` and an
    /// `AtomicWaker` (two same-thread wakes, no record).
    Floor,
    /// All_busy only: one task woken once per round by the last route's
    /// reader, which then takes every other reader's value with
    /// `try_recv`. No readiness at all: the floor of delivering N written
    /// records through these readers, encode and sink.
    Scan,
}

/// Every column, in table order.
pub const COLUMNS: [Column; 7] = [
    Column::TaskPerRoute,
    Column::Control,
    Column::OutboundRoutes,
    Column::SelectAll,
    Column::StreamMap,
    Column::Floor,
    Column::Scan,
];

impl Column {
    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Self::TaskPerRoute => "task_per_route",
            Self::Control => "task_per_route_control",
            Self::OutboundRoutes => "outbound_routes",
            Self::SelectAll => "select_all",
            Self::StreamMap => "stream_map",
            Self::Floor => "floor",
            Self::Scan => "scan",
        }
    }

    /// Whether the column has cells in scenario `s`.
    pub fn runs_in(self, s: Scenario) -> bool {
        match s {
            Scenario::Parked => self != Self::Scan,
            Scenario::AllBusy => !matches!(self, Self::Floor | Self::Control),
        }
    }
}

/// The in-memory transport every column delivers to: a count, a copy of
/// the last payload, the topic bytes seen, and the producer's waker slot,
/// woken when the count reaches the producer's target.
pub struct Sink {
    /// Messages pushed so far.
    pub delivered: StdCell<u64>,
    /// The count at which the producer is woken.
    pub target: StdCell<u64>,
    /// The last payload pushed.
    pub last: RefCell<[u8; 16]>,
    /// Its length.
    pub last_len: StdCell<usize>,
    /// Topic bytes seen (so the topic is read, not skipped).
    pub topic_bytes: StdCell<u64>,
    producer: AtomicWaker,
    /// Per-message latency, recorded only in the latency pass.
    pub stamp: Stamp,
}

impl Sink {
    /// An empty sink.
    pub fn new() -> Rc<Self> {
        Rc::new(Self {
            delivered: StdCell::new(0),
            target: StdCell::new(u64::MAX),
            last: RefCell::new([0x5a; 16]),
            last_len: StdCell::new(0),
            topic_bytes: StdCell::new(0),
            producer: AtomicWaker::new(),
            stamp: Stamp::default(),
        })
    }
}

/// What every column delivers to: the same-thread [`Sink`] here, a
/// thread-safe sink in b1's cross-thread cells.
pub trait Deliver {
    /// Delivers one message.
    fn push(&self, topic: &str, payload: &[u8]);
}

impl Deliver for Sink {
    #[inline]
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
    #[inline]
    pub async fn wait_for(&self, more: u64) {
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
pub struct Handoff {
    value: StdCell<Option<u32>>,
    consumer: AtomicWaker,
}

/// Non-zero values with a five-byte postcard encoding.
#[inline]
pub fn value(seq: u64) -> u32 {
    0x0101_0101u32.wrapping_add(seq as u32) | 0x1000_0000
}

/// A reader as a stream of `(topic, value)`: `poll_fn` over
/// `Reader::poll_recv`, no boxing.
pub fn reader_stream(
    mut reader: RecReader,
    topic: &'static str,
) -> impl Stream<Item = (&'static str, Result<u32, RecvError>)> + Unpin {
    futures::stream::poll_fn(move |cx| reader.poll_recv(cx).map(|v| Some((topic, v))))
}

/// Encodes `v` (if it is a value) into `scratch` and pushes it.
#[inline]
pub fn encode_push<D: Deliver + ?Sized>(
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

/// The consumer loops of the columns, shared by the same-thread and the
/// cross-thread cells (`sink` is an `Rc<Sink>` or an `Arc<XSink>`).
pub mod loops {
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

/// One same-thread cell of `b1_outbound_wakeup`: the fixture of one
/// column at one route count, its tasks spawned on the current `LocalSet`,
/// and the producer's side ([`Self::drive`]).
pub struct Cell {
    pub scenario: Scenario,
    pub column: Column,
    pub routes: usize,
    pub sink: Rc<Sink>,
    input: Input,
    seq: u64,
}

/// Builds the fixture of one cell and spawns its tasks on the current
/// `LocalSet`.
pub fn build(scenario: Scenario, column: Column, n: usize) -> Cell {
    let sink = Sink::new();
    let input = match column {
        Column::OutboundRoutes => {
            let f = fixtures::outbound_static(n);
            tokio::task::spawn_local(loops::routes(f.routes, sink.clone()));
            Input::Records(f.records)
        }
        Column::TaskPerRoute | Column::Control => {
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
                value: StdCell::new(None),
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
    Cell {
        scenario,
        column,
        routes: n,
        sink,
        input,
        seq: 0,
    }
}

impl Cell {
    /// Messages of one all_busy round (1 for parked).
    pub fn per_round(&self) -> usize {
        match self.scenario {
            Scenario::Parked => 1,
            Scenario::AllBusy => self.routes,
        }
    }

    /// Drives `msgs` messages (whole rounds) through the cell.
    pub async fn drive(&mut self, msgs: usize) {
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

    /// Panics unless the sink got exactly what was awaited, with a
    /// five-byte payload.
    pub fn check_sink(&self) {
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
