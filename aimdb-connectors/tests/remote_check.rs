//! The schema check over the framed loopback pair: a node describes its
//! records and answers remote requests; a host links one of them through
//! a `Checked` link and a `Verifier`. With the host's type equal to the
//! node's, values arrive once the check matched; with a deliberately
//! changed struct the check reports a mismatch, the dispatch counts
//! `SchemaMismatch`, and no value reaches the host's record.

mod common;

use std::fmt::Debug;
use std::time::Duration;

use aimdb_connectors::framed::{Counters, Framed};
use aimdb_connectors::loopback::Pair;
use aimdb_core::codec::Postcard;
use aimdb_core::connector::InboundStats;
use aimdb_core::inbound;
use aimdb_core::inbound::Dispatch;
use aimdb_core::outbound;
use aimdb_core::outbound::Routes;
use aimdb_core::presence::LinkState;
use aimdb_core::record::{Latest, Record, Ring};
use aimdb_core::remote::{
    proto, schema_hash, Check, Checked, Description, Responder, Verdict, Verifier, VerifierStats,
};
use aimdb_core::sync::Readiness;
use common::{block_on, leak};
use embassy_futures::join::join;
use embassy_futures::select::{select, Either};
use embassy_sync::blocking_mutex::raw::{CriticalSectionRawMutex as Cs, NoopRawMutex};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The node's type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, postcard_schema::Schema)]
struct Reading {
    seq: u32,
    centi: i32,
}

mod changed {
    /// The host's deliberately changed copy: one field more.
    #[derive(
        Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, postcard_schema::Schema,
    )]
    pub struct Reading {
        pub seq: u32,
        pub centi: i32,
        pub extra: u8,
    }

    /// A changed copy whose values still decode from the node's bytes,
    /// wrongly: `centi`'s zig-zag varint read as unsigned.
    #[derive(
        Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, postcard_schema::Schema,
    )]
    pub struct Unsigned {
        pub seq: u32,
        pub centi: u32,
    }
}

/// Filler records before `readings`, so the check reads two pages.
const FILLER: usize = 9;

type HostRec<T> = Record<Cs, Ring<T, 8>, 1>;

/// What a run leaves to look at.
struct Outcome<T> {
    verdict: Verdict,
    verifier: VerifierStats,
    inbound: InboundStats,
    /// Values the host's record received.
    received: Vec<T>,
    writes: u64,
}

/// What `work` sees while both connectors run.
struct Probe {
    /// The node's record.
    node: &'static Record<Cs, Ring<Reading, 8>, 1>,
    /// The host's check.
    check: &'static (dyn Check + Sync),
    /// The host's inbound counters.
    inbound: &'static inbound::Counters,
    /// Writes into the host's record.
    host_writes: Box<dyn Fn() -> u64>,
}

/// Runs a node and a host over the loopback pair; `work` runs while both
/// connectors do.
fn run<T, F>(work: F) -> Outcome<T>
where
    T: postcard_schema::Schema + DeserializeOwned + Clone + Debug + Send + 'static,
    F: AsyncFnOnce(&'static Probe),
{
    // The node: filler records, then `readings`, described and routed.
    let readings: &'static Record<Cs, Ring<Reading, 8>, 1> = leak(Record::new("readings"));
    let mut table = Vec::new();
    for i in 0..FILLER {
        let name: &'static str = Box::leak(format!("filler{i}").into_boxed_str());
        let r: &'static Record<Cs, Latest<u8>, 1> = leak(Record::new(name));
        table.push(Description::of(r));
    }
    table.push(Description::of(readings).topics(&["dev/readings"]));
    let table: &'static [Description] = Box::leak(table.into_boxed_slice());
    let responder: &'static Responder<Cs, 64> = leak(Responder::new(table));

    let data = Box::leak(Box::new(outbound::Link::new(
        readings.subscribe().expect("reader"),
        "dev/readings",
        Postcard,
    )));
    let answers = Box::leak(Box::new(outbound::Link::new(
        responder.requests(),
        proto::RESPONSE,
        responder.answers(),
    )));
    let mut b =
        Routes::<_, 1, 2>::builder(leak(Readiness::<1>::new()), Box::leak(Box::new([0u8; 512])));
    b.link(data).link(answers);
    let mut node_routes = b.build().expect("node outbound");
    let mut b = Dispatch::<'static, 4, 4>::builder();
    b.link(proto::REQUEST, responder);
    let mut node_dispatch = b.build().expect("node inbound");

    // The host: its record behind a checked link, and the verifier.
    let host: &'static HostRec<T> = leak(Record::new("host_readings"));
    let mut host_reader = host.subscribe().expect("reader");
    let link_state: &'static Record<Cs, Latest<LinkState>, 1> = leak(Record::new("link"));
    let checked = leak(Checked::new("readings", inbound::Link::new(host, Postcard)));
    assert_eq!(checked.expected(), schema_hash::<T>());
    let checks: &'static [&'static (dyn Check + Sync)] = leak([checked as _]);
    let verifier: &'static Verifier<'static, Cs> = leak(Verifier::new(checks, 0x5c00_0000));
    let asks = Box::leak(Box::new(outbound::Link::new(
        verifier.asks(link_state.subscribe().expect("reader")),
        proto::REQUEST,
        Postcard,
    )));
    let mut b =
        Routes::<_, 1, 1>::builder(leak(Readiness::<1>::new()), Box::leak(Box::new([0u8; 64])));
    b.link(asks);
    let mut host_routes = b.build().expect("host outbound");
    let counters = leak(inbound::Counters::new());
    let mut b = Dispatch::<'static, 4, 4>::builder();
    b.link("dev/readings", checked)
        .link(proto::RESPONSE, verifier)
        .counters(counters);
    let mut host_dispatch = b.build().expect("host inbound");

    let pair: &'static Pair<NoopRawMutex, 1024> = leak(Pair::new());
    let ((node_rx, node_tx), (host_rx, host_tx)) = (pair.a(), pair.b());
    let mut node = Framed::<512, 1024>::with_sizes(leak(Counters::new()));
    let mut host_framed =
        Framed::<512, 1024>::with_sizes(leak(Counters::new())).with_link(link_state);

    block_on(async {
        let connectors = join(
            node.run(node_rx, node_tx, &mut node_dispatch, &mut node_routes),
            host_framed.run(host_rx, host_tx, &mut host_dispatch, &mut host_routes),
        );
        let probe = leak(Probe {
            node: readings,
            check: checked,
            inbound: counters,
            host_writes: Box::new(|| host.writes()),
        });
        match select(connectors, work(probe)).await {
            Either::First((e, _)) => panic!("a connection ended: {e}"),
            Either::Second(()) => {}
        }
    });
    let mut received = Vec::new();
    while let Ok(v) = host_reader.try_recv() {
        received.push(v);
    }
    Outcome {
        verdict: checked.verdict(),
        verifier: verifier.stats(),
        inbound: counters.snapshot(),
        received,
        writes: host.writes(),
    }
}

/// Waits (bounded by `block_on`'s limit) until `done`.
async fn until(mut done: impl FnMut() -> bool) {
    while !done() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn value(seq: u32) -> Reading {
    Reading {
        seq,
        centi: 2150 + seq as i32,
    }
}

#[test]
fn same_type_matches_and_values_arrive() {
    let out = run::<Reading, _>(async |p| {
        until(|| p.check.verdict() != Verdict::Unverified).await;
        assert_eq!(p.check.verdict(), Verdict::Match);
        for seq in 1..=3 {
            p.node.write(value(seq));
        }
        until(|| (p.host_writes)() == 3).await;
    });
    assert_eq!(out.verdict, Verdict::Match);
    assert_eq!(out.verifier.checks, 1, "{:?}", out.verifier);
    assert_eq!(out.verifier.asked, 2, "two pages: {:?}", out.verifier);
    assert_eq!(out.verifier.mismatches, 0, "{:?}", out.verifier);
    assert_eq!(out.inbound.schema_mismatch, 0, "{:?}", out.inbound);
    assert_eq!(out.inbound.schema_unverified, 0, "{:?}", out.inbound);
    assert_eq!(out.received, vec![value(1), value(2), value(3)]);
    assert_eq!(out.writes, 3);
}

/// The host links `readings` as `T`, whose schema is not the node's.
fn mismatch<T>()
where
    T: postcard_schema::Schema + DeserializeOwned + Clone + Debug + Send + 'static,
{
    assert_ne!(schema_hash::<Reading>(), schema_hash::<T>());
    let out = run::<T, _>(async |p| {
        until(|| p.check.verdict() != Verdict::Unverified).await;
        assert_eq!(p.check.verdict(), Verdict::Mismatch);
        for seq in 1..=3 {
            p.node.write(value(seq));
        }
        // Wait until each value was handled one way or the other.
        until(|| p.inbound.snapshot().total_rejected() + (p.host_writes)() as u32 >= 3).await;
    });
    assert_eq!(
        out.writes, 0,
        "no value decoded as the changed type: {:?}",
        out.received
    );
    assert_eq!(out.verdict, Verdict::Mismatch);
    assert_eq!(out.verifier.checks, 1, "{:?}", out.verifier);
    assert_eq!(out.verifier.mismatches, 1, "{:?}", out.verifier);
    assert_eq!(out.inbound.schema_mismatch, 3, "{:?}", out.inbound);
    assert_eq!(
        out.inbound.malformed_payload, 0,
        "refused unread: {:?}",
        out.inbound
    );
}

#[test]
fn changed_struct_is_a_mismatch_and_no_value_is_decoded() {
    mismatch::<changed::Reading>();
}

#[test]
fn changed_struct_that_would_decode_is_refused_too() {
    mismatch::<changed::Unsigned>();
}
