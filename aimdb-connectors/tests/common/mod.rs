//! Shared set-up for the framed-stream tests (and the plain helpers the
//! other tests share: `leak`, `rss_kib`, route and dispatch builders): one
//! "side" is a set of outbound `Ring` records (published) and inbound
//! `Ring` records (filled by dispatch), with the connector wired between
//! them and a transport.
#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use aimdb_connectors::framed::{Counters, Error, Framed};
use aimdb_core::codec::Postcard;
use aimdb_core::inbound;
use aimdb_core::inbound::Dispatch;
use aimdb_core::outbound;
use aimdb_core::outbound::{Route, Routes};
use aimdb_core::record::{Buffer, Reader, Record, Ring};
use aimdb_core::sync::{Readiness, ReadinessHandle};
use embassy_futures::select::{select, Either};
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
use embedded_io_async::{Read, Write};

/// Values a route may hold: sized for the tests' bursts.
pub const DEPTH: usize = 64;
pub type Rec = Record<Cs, Ring<u32, DEPTH>, 1>;
pub type RecReader = Reader<'static, Cs, Ring<u32, DEPTH>, 1>;
/// Bitmap words: up to 256 routes.
pub const W: usize = 8;

/// One end's records and topics.
pub struct Side {
    /// Written by the test's producer, published by the connector.
    pub out: Vec<&'static Rec>,
    pub out_topics: Vec<String>,
    /// Filled by the connector's dispatch, read by the test's checker.
    pub inn: Vec<&'static Rec>,
    pub in_topics: Vec<String>,
    pub ready: &'static Readiness<W>,
}

/// Bound on a test's `block_on`.
pub const LIMIT: Duration = Duration::from_secs(60);

/// Runs `f` on a current-thread runtime (timers enabled), failing the test
/// after [`LIMIT`].
pub fn block_on<F: Future>(f: F) -> F::Output {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    rt.block_on(async {
        tokio::time::timeout(LIMIT, f)
            .await
            .expect("test timed out")
    })
}

pub fn leak<T>(v: T) -> &'static T {
    Box::leak(Box::new(v))
}

/// The process's resident set size (VmRSS), in KiB.
pub fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// One postcard outbound link per record, record `i` on `topics[i]`.
pub fn out_links<'t, B: Buffer, const R: usize>(
    records: &[&'static Record<Cs, B, R>],
    topics: &'t [String],
) -> Vec<outbound::Link<Reader<'static, Cs, B, R>, &'t str, Postcard>> {
    records
        .iter()
        .zip(topics)
        .map(|(r, t)| outbound::Link::new(r.subscribe().expect("one reader"), t.as_str(), Postcard))
        .collect()
}

/// Outbound routes over every link in `links`, in order.
pub fn routes_over<'a, H: ReadinessHandle<W>, const W: usize, const N: usize>(
    ready: H,
    payload: &'a mut [u8],
    topic: &'a mut [u8],
    links: &'a mut [impl Route + Send],
) -> Routes<'a, H, W, N> {
    let mut b = Routes::<_, W, N>::builder(ready, payload).written_topics(topic);
    for l in links {
        b.link(l);
    }
    b.build().expect("outbound config")
}

/// Inbound dispatch of `topics[i]` to `links[i]`.
pub fn dispatch_over<'a, const N: usize, const NODES: usize>(
    topics: &'a [String],
    links: &'a [impl inbound::Route + Sync],
) -> Dispatch<'a, N, NODES> {
    let mut b = Dispatch::<N, NODES>::builder();
    for (t, l) in topics.iter().zip(links) {
        b.link(t, l);
    }
    b.build().expect("inbound config")
}

/// `n` outbound routes on `{out_prefix}/{i}` and `n` inbound routes on
/// `{in_prefix}/{i}`.
pub fn side(out_prefix: &str, in_prefix: &str, n: usize) -> Side {
    Side {
        out: (0..n).map(|_| leak(Record::new("out"))).collect(),
        out_topics: (0..n).map(|i| format!("{out_prefix}/{i}")).collect(),
        inn: (0..n).map(|_| leak(Record::new("in"))).collect(),
        in_topics: (0..n).map(|i| format!("{in_prefix}/{i}")).collect(),
        ready: Box::leak(Box::new(Readiness::new())),
    }
}

impl Side {
    /// One reader per inbound record, taken before any traffic.
    pub fn in_readers(&self) -> Vec<RecReader> {
        self.inn
            .iter()
            .map(|r| r.subscribe().expect("one reader"))
            .collect()
    }

    /// Runs the connector over `rx`/`tx` until `until` completes (its
    /// output is returned) or the transport ends (the error is returned).
    pub async fn run<R: Read, Tx: Write, T>(
        &self,
        rx: R,
        tx: Tx,
        stats: &Counters,
        until: impl Future<Output = T>,
    ) -> Result<T, Error> {
        let mut links = out_links(&self.out, &self.out_topics);
        let (mut payload, mut topic) = ([0u8; 64], [0u8; 64]);
        let mut routes = routes_over::<_, W, 256>(self.ready, &mut payload, &mut topic, &mut links);

        let in_links: Vec<_> = self
            .inn
            .iter()
            .map(|r| inbound::Link::new(*r, Postcard))
            .collect();
        let mut dispatch = dispatch_over::<512, 4>(&self.in_topics, &in_links);

        let mut framed = Framed::<256, 512>::with_sizes(stats);
        let run = framed.run(rx, tx, &mut dispatch, &mut routes);
        // `until` is polled first: when both ends finish together, the peer
        // hanging up must not be mistaken for a transport failure.
        match select(until, run).await {
            Either::First(v) => Ok(v),
            Either::Second(e) => Err(e),
        }
    }
}

/// Writes `rounds` values (0, 1, …) to every record, yielding to the
/// executor after each round.
pub async fn produce(records: &[&'static Rec], rounds: u32) {
    for v in 0..rounds {
        for r in records {
            r.write(v);
        }
        tokio::task::yield_now().await;
    }
}

/// Asserts every reader receives exactly `0..rounds`, in order, then that
/// nothing more is waiting.
pub async fn expect_all(readers: &mut [RecReader], rounds: u32) {
    for (i, reader) in readers.iter_mut().enumerate() {
        for v in 0..rounds {
            assert_eq!(reader.recv().await, Ok(v), "route {i}");
        }
    }
    for (i, reader) in readers.iter_mut().enumerate() {
        assert!(
            reader.try_recv().is_err(),
            "route {i}: an extra value arrived"
        );
    }
}
