//! Shared set-up for the framed-stream tests: one "side" is a set of
//! outbound `Ring` records (published) and inbound `Ring` records (filled
//! by dispatch), with the connector wired between them and a transport.
#![allow(dead_code)]

use std::future::Future;

use aimdb_connectors::framed::{Error, Framed, Stats};
use aimdb_core::codec::Postcard;
use aimdb_core::inbound::{Dispatch, Link as InLink};
use aimdb_core::outbound::{Link as OutLink, Routes};
use aimdb_core::record::{Reader, Record, Ring};
use aimdb_core::sync::Readiness;
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

fn leak(name: &'static str) -> &'static Rec {
    Box::leak(Box::new(Record::new(name)))
}

/// `n` outbound routes on `{out_prefix}/{i}` and `n` inbound routes on
/// `{in_prefix}/{i}`.
pub fn side(out_prefix: &str, in_prefix: &str, n: usize) -> Side {
    Side {
        out: (0..n).map(|_| leak("out")).collect(),
        out_topics: (0..n).map(|i| format!("{out_prefix}/{i}")).collect(),
        inn: (0..n).map(|_| leak("in")).collect(),
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
        stats: &Stats,
        until: impl Future<Output = T>,
    ) -> Result<T, Error> {
        let mut links: Vec<_> = self
            .out
            .iter()
            .zip(&self.out_topics)
            .map(|(r, t)| OutLink::new(r.subscribe().expect("one reader"), t.as_str(), Postcard))
            .collect();
        let (mut payload, mut topic) = ([0u8; 64], [0u8; 64]);
        let mut b = Routes::<_, W, 256>::builder(self.ready, &mut payload, &mut topic);
        for l in &mut links {
            b.link(l);
        }
        let mut routes = b.build().expect("outbound config");

        let in_links: Vec<_> = self.inn.iter().map(|r| InLink::new(*r, Postcard)).collect();
        let mut b = Dispatch::<512, 4>::builder();
        for (t, l) in self.in_topics.iter().zip(&in_links) {
            b.link(t, l);
        }
        let mut dispatch = b.build().expect("inbound config");

        let mut framed = Framed::<256, 512>::new(stats);
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
