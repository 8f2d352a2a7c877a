//! B0: heap allocations per operation on every hot path — a CI gate.
//!
//! Each row builds its fixture, warms up ([`WARMUP`] operations), resets the
//! counters, runs [`BATCH`] operations on a current-thread tokio runtime and
//! divides. Each row also runs a positive control (one `Vec` allocation
//! through the same counter) so a broken counter cannot pass silently.
//!
//! Exits non-zero if a row differs from [`EXPECTED`], if a row is missing,
//! or if `data/baselines/b0_alloc_connector.json` disagrees with
//! [`EXPECTED`]. The two are changed together, in one commit that says why.

use std::alloc::System;
use std::cell::Cell;
use std::fmt::Write as _;
use std::hint::black_box;
use std::process::ExitCode;
use std::rc::Rc;

use aimdb_bench::fixtures::{self, leak, payload, Mx, Rec};
use aimdb_connectors::framed::{Counters, Framed};
use aimdb_connectors::loopback::Pair;
use aimdb_core::codec::{self, Postcard};
use aimdb_core::inbound;
use aimdb_core::inbound::{Dispatch, KeyedLink};
use aimdb_core::outbound;
use aimdb_core::outbound::{Routes, TopicWriter, Written};
use aimdb_core::record::{Keyed, KeyedVec, Latest, Record, Ring};
use aimdb_core::remote::{proto, Description, Op, Request, Responder};
use aimdb_core::sync::Readiness;
use embassy_sync::blocking_mutex::raw::NoopRawMutex;
use serde_json::json;
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Operations before counting.
const WARMUP: usize = 256;
/// Operations counted.
const BATCH: usize = 1024;

/// Allocations per operation each row must show, and why.
const EXPECTED: &[(&str, u64)] = &[
    ("inbound_dispatch", 0),
    ("inbound_dispatch_pattern", 0),
    ("inbound_dispatch_keyed_known", 0),
    // One `Arc` slot per key on first sighting; the index is reserved.
    ("inbound_dispatch_keyed_new", 1),
    ("inbound_dispatch_keyed_new_fixed", 0),
    ("inbound_dispatch_rejected", 0),
    ("outbound_next_static_topic", 0),
    ("outbound_next_written_topic", 0),
    // The owned serializer returns a fresh `Vec<u8>` per message.
    ("outbound_next_owned", 1),
    ("outbound_next_round_robin", 0),
    ("outbound_next_parked", 0),
    ("outbound_next_urgent", 0),
    ("connector_roundtrip", 0),
    ("remote_get", 0),
    ("remote_list", 0),
    ("remote_watch_update", 0),
];

struct Measured {
    row: &'static str,
    allocs: u64,
    bytes: u64,
    control: u64,
}

fn allocs(s: &stats_alloc::Stats) -> u64 {
    (s.allocations + s.reallocations) as u64
}

/// One allocation through the same counter: must read exactly 1.
fn control() -> u64 {
    let reg = Region::new(GLOBAL);
    black_box(Vec::<u8>::with_capacity(black_box(32)));
    allocs(&reg.change())
}

async fn measure(row: &'static str, mut op: impl AsyncFnMut(usize)) -> Measured {
    for i in 0..WARMUP {
        op(i).await;
    }
    let reg = Region::new(GLOBAL);
    for i in WARMUP..WARMUP + BATCH {
        op(i).await;
    }
    let s = reg.change();
    Measured {
        row,
        allocs: allocs(&s),
        bytes: s.bytes_allocated as u64,
        control: control(),
    }
}

async fn sync_measure(row: &'static str, mut op: impl FnMut(usize)) -> Measured {
    measure(row, async |i| op(i)).await
}

async fn inbound_rows(out: &mut Vec<Measured>) {
    let mut f = fixtures::inbound_exact(8);
    let p = payload(0x0101_0101);
    out.push(
        sync_measure("inbound_dispatch", |i| {
            let t = &f.topics[i % f.topics.len()];
            f.dispatch.dispatch(t, &p).expect("exact hit");
        })
        .await,
    );

    let mut f = fixtures::inbound_pattern(8);
    out.push(
        sync_measure("inbound_dispatch_pattern", |i| {
            let t = &f.topics[i % f.topics.len()];
            f.dispatch.dispatch(t, &p).expect("pattern hit");
        })
        .await,
    );

    let mut f = fixtures::inbound_keyed_known(8);
    out.push(
        sync_measure("inbound_dispatch_keyed_known", |i| {
            let t = &f.topics[i % f.topics.len()];
            f.dispatch.dispatch(t, &p).expect("known key");
        })
        .await,
    );

    // New keys: topics made before counting, one per operation.
    let topics: Vec<Vec<u8>> = (0..WARMUP + BATCH)
        .map(|i| format!("fleet/k{i}/v").into_bytes())
        .collect();
    let growable: &'static KeyedVec<Mx, Latest<u32>, 1> =
        leak(KeyedVec::with_capacity("fleet", WARMUP + BATCH));
    let mut b = Dispatch::<'static, 2, 8>::builder();
    b.link_keyed("fleet/+/v", 1, leak(KeyedLink::new(growable, Postcard)));
    let mut d = b.build().expect("config");
    out.push(
        sync_measure("inbound_dispatch_keyed_new", |i| {
            d.dispatch(&topics[i], &p).expect("new key");
        })
        .await,
    );
    assert_eq!(growable.len(), WARMUP + BATCH);

    let fixed: &'static Keyed<Mx, Latest<u32>, { WARMUP + BATCH }, 1> = leak(Keyed::new("fleet"));
    let mut b = Dispatch::<'static, 2, 8>::builder();
    b.link_keyed("fleet/+/v", 1, leak(KeyedLink::new(fixed, Postcard)));
    let mut d = b.build().expect("config");
    out.push(
        sync_measure("inbound_dispatch_keyed_new_fixed", |i| {
            d.dispatch(&topics[i], &p).expect("new key");
        })
        .await,
    );
    assert_eq!(fixed.len(), WARMUP + BATCH);

    // Every rejection kind in turn.
    let rec: &'static Rec = leak(Record::new("r"));
    let full: &'static Keyed<Mx, Latest<u32>, 1, 1> = leak(Keyed::new("k"));
    let mut b = Dispatch::<'static, 4, 8>::builder();
    b.link(
        "good",
        leak(inbound::Link::new(rec, Postcard).with_max_payload(4)),
    )
    .link_keyed("k/+", 1, leak(KeyedLink::new(full, Postcard)));
    let mut d = b.build().expect("config");
    d.dispatch(b"k/first", &p).expect("fills the table");
    let long = vec![b't'; aimdb_core::topic::MAX_TOPIC_LEN + 1];
    let bad: Vec<(&[u8], Vec<u8>)> = vec![
        (b"nope", p.clone()),
        (b"go\xffod", p.clone()),
        (b"go\0od", p.clone()),
        (b"good/+", p.clone()),
        (&long, p.clone()),
        (b"good", vec![0xff; 3]),
        (b"good", vec![1; 5]),
        (b"k/second", p.clone()),
        (b"k/", p.clone()),
    ];
    out.push(
        sync_measure("inbound_dispatch_rejected", |i| {
            let (t, pl) = &bad[i % bad.len()];
            d.dispatch(t, pl).expect_err("rejected");
        })
        .await,
    );
    assert_eq!(d.stats().total_rejected() as usize, WARMUP + BATCH);
}

fn written(v: &u32, w: &mut TopicWriter<'_>) -> std::fmt::Result {
    write!(w, "dev/{}/value", v % 100)
}

async fn outbound_rows(out: &mut Vec<Measured>) {
    let mut f = fixtures::outbound_static(8);
    out.push(
        measure("outbound_next_static_topic", async |i| {
            f.records[0].write(i as u32);
            let m = f.routes.next().await;
            assert_eq!(m.route, 0);
        })
        .await,
    );

    type WrittenFn = fn(&u32, &mut TopicWriter<'_>) -> std::fmt::Result;
    let recs = fixtures::records(1);
    let ready: &'static Readiness<1> = leak(Readiness::new());
    let link = leak(outbound::Link::new(
        recs[0].subscribe().expect("reader"),
        Written(written as WrittenFn),
        Postcard,
    ));
    let mut b =
        Routes::<_, 1, 1>::builder(ready, leak([0x5au8; 64])).written_topics(leak([0x5au8; 64]));
    b.link(link);
    let mut routes = b.build().expect("config");
    out.push(
        measure("outbound_next_written_topic", async |i| {
            recs[0].write(i as u32);
            let m = routes.next().await;
            assert!(m.topic.starts_with("dev/"));
        })
        .await,
    );

    let recs = fixtures::records(1);
    let ready: &'static Readiness<1> = leak(Readiness::new());
    let link = leak(outbound::Link::owned(
        recs[0].subscribe().expect("reader"),
        "owned",
        Postcard,
    ));
    let mut b =
        Routes::<_, 1, 1>::builder(ready, leak([0x5au8; 64])).written_topics(leak([0x5au8; 64]));
    b.link(link);
    let mut routes = b.build().expect("config");
    out.push(
        measure("outbound_next_owned", async |i| {
            recs[0].write(i as u32);
            let m = routes.next().await;
            assert!(!m.payload.is_empty());
        })
        .await,
    );

    let mut f = fixtures::outbound_static(8);
    out.push(
        measure("outbound_next_round_robin", async |i| {
            if i % 8 == 0 {
                for (k, r) in f.records.iter().enumerate() {
                    r.write((i + k) as u32);
                }
            }
            let m = f.routes.next().await;
            assert_eq!(m.route, i % 8, "served in rotation");
        })
        .await,
    );

    // Urgent: route 0 of 8 is urgent and written every operation while the
    // seven normal routes are kept ready; the operation pulls until the
    // urgent value came out (after a burst, one normal route goes first).
    let mut f = fixtures::outbound_urgent(8);
    out.push(
        measure("outbound_next_urgent", async |i| {
            if i % 8 == 0 {
                for (k, r) in f.records.iter().enumerate().skip(1) {
                    r.write((i + k) as u32);
                }
            }
            f.records[0].write(i as u32);
            loop {
                let m = f.routes.next().await;
                if m.route == 0 {
                    assert!(m.urgent);
                    break;
                }
            }
        })
        .await,
    );

    // Parked: the transport runs in its own task; the producer writes one
    // value and yields until it was pulled, so every pull parks first.
    let f = fixtures::outbound_static(8);
    let pulled = Rc::new(Cell::new(0usize));
    let local = tokio::task::LocalSet::new();
    let mut routes = f.routes;
    let p2 = pulled.clone();
    local.spawn_local(async move {
        loop {
            let m = routes.next().await;
            black_box(m.payload);
            p2.set(p2.get() + 1);
        }
    });
    let rec = &f.records[3];
    let m = local
        .run_until(measure("outbound_next_parked", async |i| {
            rec.write(i as u32);
            while pulled.get() <= i {
                tokio::task::yield_now().await;
            }
        }))
        .await;
    out.push(m);
}

/// Framed stream over the loopback pair, both directions: a value written
/// on side A is published, dispatched into side B's `echo` record, which B
/// publishes back to A's `pong` record. One operation is one round trip:
/// two encodes, two writes, two reads, two decodes, two dispatches.
async fn connector_rows(out: &mut Vec<Measured>) {
    let recs = fixtures::records(3);
    let (ping, echo, pong) = (&recs[0], &recs[1], &recs[2]);
    let pair: &'static Pair<NoopRawMutex, 1024> = leak(Pair::new());
    let mut pong_reader = pong.subscribe().expect("reader");
    let local = tokio::task::LocalSet::new();
    for (end, out_rec, out_topic, in_rec, in_topic) in [
        (pair.a(), ping, "ping", pong, "pong"),
        (pair.b(), echo, "pong", echo, "ping"),
    ] {
        let link = leak(outbound::Link::new(
            out_rec.subscribe().expect("reader"),
            out_topic,
            Postcard,
        ));
        let ready: &'static Readiness<1> = leak(Readiness::new());
        let mut b = Routes::<_, 1, 1>::builder(ready, leak([0x5au8; 64]))
            .written_topics(leak([0x5au8; 64]));
        b.link(link);
        let mut routes = b.build().expect("config");
        let mut b = Dispatch::<'static, 4, 4>::builder();
        b.link(in_topic, leak(inbound::Link::new(in_rec, Postcard)));
        let mut dispatch = b.build().expect("config");
        let framed = leak(Framed::<256, 512>::with_sizes(leak(Counters::new())));
        local.spawn_local(async move {
            let (rx, tx) = end;
            let e = framed.run(rx, tx, &mut dispatch, &mut routes).await;
            panic!("loopback connection ended: {e}");
        });
    }
    let m = local
        .run_until(measure("connector_roundtrip", async |i| {
            ping.write(i as u32);
            assert_eq!(pong_reader.recv().await, Ok(i as u32));
        }))
        .await;
    out.push(m);
}

/// A remote-access request as bytes (passed through by `codec::Raw`).
type Raw = heapless::Vec<u8, 128>;

fn raw(request: &Request<'_>) -> Raw {
    let mut buf = [0u8; 128];
    let bytes = postcard::to_slice(request, &mut buf).expect("request fits");
    Raw::from_slice(bytes).expect("request fits")
}

/// Remote access over the framed loopback: a client's request goes out on
/// `aimdb/req`, the node's responder answers through its own tables, and
/// the answer comes back on `aimdb/rsp`. One operation is one request and
/// its answer, both connectors' work included.
async fn remote_rows(out: &mut Vec<Measured>) {
    let recs = fixtures::records(1);
    let value = &recs[0];
    value.write(7);
    let table: &'static [Description] = leak([Description::of(value)]);
    let responder: &'static Responder<Mx, 64> = leak(Responder::new(table));
    let requests: &'static Record<Mx, Ring<Raw, 4>, 1> = leak(Record::new("req"));
    let answers: &'static Record<Mx, Ring<Raw, 4>, 1> = leak(Record::new("rsp"));
    let mut answer_reader = answers.subscribe().expect("reader");
    let pair: &'static Pair<NoopRawMutex, 1024> = leak(Pair::new());
    let local = tokio::task::LocalSet::new();

    // The node.
    let link = leak(outbound::Link::new(
        responder.requests(),
        proto::RESPONSE,
        responder.answers(),
    ));
    let mut b = Routes::<_, 1, 1>::builder(&*leak(Readiness::<1>::new()), leak([0u8; 256]));
    b.link(link);
    let mut node_routes = b.build().expect("config");
    let mut b = Dispatch::<'static, 4, 4>::builder();
    b.link(proto::REQUEST, responder);
    let mut node_dispatch = b.build().expect("config");
    // The client.
    let link = leak(outbound::Link::new(
        requests.subscribe().expect("reader"),
        proto::REQUEST,
        codec::Raw,
    ));
    let mut b = Routes::<_, 1, 1>::builder(&*leak(Readiness::<1>::new()), leak([0u8; 256]));
    b.link(link);
    let mut client_routes = b.build().expect("config");
    let mut b = Dispatch::<'static, 4, 4>::builder();
    b.link(
        proto::RESPONSE,
        leak(inbound::Link::new(answers, codec::Raw).with_max_payload(128)),
    );
    let mut client_dispatch = b.build().expect("config");

    let (node_end, client_end) = (pair.a(), pair.b());
    let node = leak(Framed::<256, 512>::with_sizes(leak(Counters::new())));
    local.spawn_local(async move {
        let (rx, tx) = node_end;
        let e = node.run(rx, tx, &mut node_dispatch, &mut node_routes).await;
        panic!("loopback connection ended: {e}");
    });
    let client = leak(Framed::<256, 512>::with_sizes(leak(Counters::new())));
    local.spawn_local(async move {
        let (rx, tx) = client_end;
        let e = client
            .run(rx, tx, &mut client_dispatch, &mut client_routes)
            .await;
        panic!("loopback connection ended: {e}");
    });
    let get = raw(&Request {
        id: 1,
        op: Op::Get { record: "bench" },
    });
    let list = raw(&Request {
        id: 2,
        op: Op::List { from: 0 },
    });
    for (row, request) in [("remote_get", get), ("remote_list", list)] {
        let m = local
            .run_until(measure(row, async |_| {
                requests.write(request.clone());
                let answer = answer_reader.recv().await.expect("answer");
                black_box(answer);
            }))
            .await;
        out.push(m);
    }
    // A watch: one operation is a write to the record and the update it
    // brings to the client, through both connectors.
    let watch = raw(&Request {
        id: 3,
        op: Op::Watch {
            record: "bench",
            credit: u32::MAX,
        },
    });
    local
        .run_until(async {
            requests.write(watch);
            answer_reader.recv().await.expect("the watch's first value");
        })
        .await;
    let m = local
        .run_until(measure("remote_watch_update", async |i| {
            value.write(i as u32);
            let answer = answer_reader.recv().await.expect("update");
            black_box(answer);
        }))
        .await;
    out.push(m);
    assert_eq!(responder.stats().malformed, 0);
    assert!(responder.stats().updates > 0, "the watch sent updates");
}

fn check_baseline(problems: &mut Vec<String>) {
    let path = aimdb_bench::workspace_root().join("data/baselines/b0_alloc_connector.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => return problems.push(format!("baseline {}: {e}", path.display())),
    };
    let v: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => return problems.push(format!("baseline is not JSON: {e}")),
    };
    let rows = v["rows"].as_array().cloned().unwrap_or_default();
    let baseline: Vec<(String, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["row"].as_str().unwrap_or("").to_string(),
                r["expected"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect();
    let expected: Vec<(String, u64)> = EXPECTED.iter().map(|(r, e)| (r.to_string(), *e)).collect();
    if baseline != expected {
        problems.push(format!(
            "data/baselines/b0_alloc_connector.json disagrees with EXPECTED:\n  baseline {baseline:?}\n  EXPECTED {expected:?}"
        ));
    }
}

fn main() -> ExitCode {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let mut measured = Vec::new();
    rt.block_on(async {
        inbound_rows(&mut measured).await;
        outbound_rows(&mut measured).await;
        connector_rows(&mut measured).await;
        remote_rows(&mut measured).await;
    });

    let mut problems = Vec::new();
    let mut table = String::new();
    let _ = writeln!(
        table,
        "{:<36} {:>8} {:>14} {:>14}  ok",
        "row", "expected", "allocs/op", "bytes/op"
    );
    let mut rows = Vec::new();
    for &(row, expected) in EXPECTED {
        let Some(m) = measured.iter().find(|m| m.row == row) else {
            problems.push(format!("row {row} is missing"));
            continue;
        };
        let per_op = m.allocs as f64 / BATCH as f64;
        let bytes = m.bytes as f64 / BATCH as f64;
        let ok = m.allocs == expected * BATCH as u64 && m.control == 1;
        if m.control != 1 {
            problems.push(format!(
                "{row}: positive control counted {} allocations, not 1",
                m.control
            ));
        }
        if m.allocs != expected * BATCH as u64 {
            problems.push(format!("{row}: {per_op} allocs/op, expected {expected}"));
        }
        let _ = writeln!(
            table,
            "{row:<36} {expected:>8} {per_op:>14.3} {bytes:>14.1}  {}",
            if ok { "yes" } else { "NO" }
        );
        rows.push(json!({"row": row, "expected": expected, "allocs_per_op": per_op, "bytes_per_op": bytes}));
    }
    for m in &measured {
        if !EXPECTED.iter().any(|(r, _)| *r == m.row) {
            problems.push(format!("row {} is measured but not in EXPECTED", m.row));
        }
    }
    check_baseline(&mut problems);
    print!("{table}");
    let doc =
        json!({"bench": "b0_alloc_connector", "batch": BATCH, "warmup": WARMUP, "rows": rows});
    match aimdb_bench::write_json("b0_alloc_connector", &doc) {
        Ok(p) => println!("wrote {}", p.display()),
        Err(e) => problems.push(format!("writing JSON: {e}")),
    }
    if problems.is_empty() {
        println!("b0_alloc_connector: {} passed, 0 failed", EXPECTED.len());
        ExitCode::SUCCESS
    } else {
        for p in &problems {
            eprintln!("FAIL: {p}");
        }
        println!(
            "b0_alloc_connector: {} passed, {} failed",
            EXPECTED.len() - problems.len().min(EXPECTED.len()),
            problems.len()
        );
        ExitCode::FAILURE
    }
}
