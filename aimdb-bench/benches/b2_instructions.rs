//! B2: CPU instructions per operation under callgrind — a CI gate that a
//! loaded shared host cannot make flaky.
//!
//! The same hot paths as b0 (row names mirror b0 where they overlap), plus
//! the parked pull at 8 and 4096 routes (b1's `outbound_routes` column)
//! and the framed-stream connector's encode and decode of one frame.
//! Each row runs in its own child process under
//! `valgrind --tool=callgrind` (see `aimdb_bench::callgrind`): fixture
//! and [`WARMUP`] operations uncounted, then [`OPS`] and `2 * OPS` counted
//! operations; the difference divided by [`OPS`] is one operation.
//! Operations use values that cycle with period 8, so every batch of 8 costs
//! the same and the two loops are comparable.
//!
//! Without valgrind it says so and exits 0, or fails when `CI` or
//! `AIMDB_BENCH_REQUIRE` is set (`aimdb_bench::tools`).
//! Exits non-zero if a row fails or is missing, a row
//! has no limit, or a row is more than `suite::TOLERANCE` (2 %) over its limit in
//! `data/baselines/b2_instructions.json`, or if a 4096-route parked pull
//! (a normal route, an urgent route: [`FLAT_ROWS`]) costs more than
//! [`FLAT`] more than the 8-route one (flatness is about
//! cost growing with the route count; a larger table that happens to cost
//! a few instructions less is not a regression). Rows more than
//! `suite::IMPROVED` (5 %) under their limit are printed so the limit can be tightened
//! in the same commit.
//!
//! `B2_WRITE_BASELINE=1` rewrites the baseline from this run (commit it with
//! the reason); `B2_FILTER=text` measures only rows containing `text` (no
//! JSON, no missing-row check); `B2_JOBS=n` runs `n` children at a time
//! (default: the core count; counts do not depend on it). Callgrind dumps
//! stay in `target/bench-results/b2_instructions_callgrind/ROW.out.{1,2}` for
//! `callgrind_annotate`.

use std::fmt::Write as _;
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use aimdb_bench::callgrind;
use aimdb_bench::fixtures::{self, leak, payload};
use aimdb_bench::suite::{Extra, Run, Suite};
use aimdb_connectors::framed::frame;
use aimdb_core::codec::Postcard;
use aimdb_core::outbound;
use aimdb_core::outbound::{Routes, TopicWriter, Written};
use aimdb_core::sync::Readiness;
use serde_json::{json, Value};

/// Uncounted operations before the measured loops.
const WARMUP: usize = 256;
/// Operations in the first measured loop (the second runs twice as many).
/// A multiple of 8, the period of every row's inputs.
const OPS: usize = 2000;
/// The 4096-route parked pull may cost this fraction more than the 8-route
/// one.
const FLAT: f64 = 0.02;
/// The row pairs that must stay flat, smaller route count first.
const FLAT_ROWS: [(&str, &str); 2] = [
    ("outbound_routes_parked_8", "outbound_routes_parked_4096"),
    ("outbound_urgent_parked_8", "outbound_urgent_parked_4096"),
];

const BASELINE: &str = "data/baselines/b2_instructions.json";

/// Every row, in report order, and what one operation is.
const ROWS: &[(&str, &str)] = &[
    (
        "inbound_dispatch",
        "dispatch one frame, exact topic, 8 routes",
    ),
    (
        "inbound_dispatch_pattern",
        "dispatch one frame, `+` pattern, 8 routes",
    ),
    (
        "inbound_dispatch_keyed_known",
        "dispatch one frame to a known key, 8 keyed routes",
    ),
    (
        "outbound_next_static_topic",
        "write a record, next() delivers it (static topic)",
    ),
    (
        "outbound_next_written_topic",
        "write a record, next() delivers it (written topic)",
    ),
    (
        "outbound_next_round_robin",
        "next() among 8 ready routes (8 writes every 8 pulls)",
    ),
    (
        "outbound_next_parked",
        "next() parks, a write wakes it, next() delivers (8 routes)",
    ),
    (
        "outbound_routes_parked_8",
        "parked pull, last of 8 routes busy",
    ),
    (
        "outbound_routes_parked_4096",
        "parked pull, last of 4096 routes busy",
    ),
    (
        "outbound_urgent_parked_8",
        "parked pull, the urgent route of 8 busy",
    ),
    (
        "outbound_urgent_parked_4096",
        "parked pull, the urgent route of 4096 busy",
    ),
    (
        "framed_encode",
        "encode one frame (11-byte topic, 2-byte payload)",
    ),
    (
        "framed_decode",
        "decode one whole frame pushed in one chunk",
    ),
];

/// The value written by operation `i`: period 8, two postcard bytes.
fn value(i: usize) -> u32 {
    1000 + (i % 8) as u32
}

/// Polls `fut` once with a no-op waker; it must be ready.
fn ready<F: Future>(fut: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(fut).poll(&mut cx) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("expected a ready future"),
    }
}

/// A waker that records that it was woken.
#[derive(Default)]
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
}

/// The topics of the framed rows, `dev/{k}/value` (11 bytes).
fn frame_topics() -> [&'static str; 8] {
    core::array::from_fn(|k| &*String::leak(format!("dev/{k}/value")))
}

fn written(v: &u32, w: &mut TopicWriter<'_>) -> std::fmt::Result {
    write!(w, "dev/{}/value", v % 100)
}

/// `n` static routes; each operation pulls with nothing ready (the pull
/// registers and parks), writes route `busy`'s record (which wakes the
/// puller) and pulls again (which delivers).
fn parked(n: usize, busy: usize) -> Box<dyn FnMut(usize)> {
    parked_on(fixtures::outbound_static(n), busy)
}

/// [`parked`] over `f`.
fn parked_on(mut f: fixtures::Outbound, busy: usize) -> Box<dyn FnMut(usize)> {
    let flag = Arc::new(Flag::default());
    let waker = Waker::from(flag.clone());
    Box::new(move |i| {
        let mut cx = Context::from_waker(&waker);
        let mut pull = pin!(f.routes.next());
        assert!(pull.as_mut().poll(&mut cx).is_pending(), "parks");
        f.records[busy].write(value(i));
        assert!(flag.0.swap(false, Ordering::Acquire), "woken");
        let Poll::Ready(m) = pull.as_mut().poll(&mut cx) else {
            panic!("ready after the wake");
        };
        assert_eq!(m.route, busy);
        black_box(m.payload);
    })
}

/// The fixture and operation of `row` (built before anything is counted).
fn operation(row: &str) -> Option<Box<dyn FnMut(usize)>> {
    let p = payload(0x0101_0101);
    Some(match row {
        "inbound_dispatch" => {
            let mut f = fixtures::inbound_exact(8);
            Box::new(move |i| {
                f.dispatch
                    .dispatch(&f.topics[i % 8], &p)
                    .expect("exact hit");
            })
        }
        "inbound_dispatch_pattern" => {
            let mut f = fixtures::inbound_pattern(8);
            Box::new(move |i| {
                f.dispatch
                    .dispatch(&f.topics[i % 8], &p)
                    .expect("pattern hit");
            })
        }
        "inbound_dispatch_keyed_known" => {
            let mut f = fixtures::inbound_keyed_known(8);
            Box::new(move |i| {
                f.dispatch
                    .dispatch(&f.topics[i % 8], &p)
                    .expect("known key");
            })
        }
        "outbound_next_static_topic" => {
            let mut f = fixtures::outbound_static(8);
            Box::new(move |i| {
                f.records[0].write(value(i));
                let m = ready(f.routes.next());
                assert_eq!(m.route, 0);
                black_box(m.payload);
            })
        }
        "outbound_next_written_topic" => {
            type WrittenFn = fn(&u32, &mut TopicWriter<'_>) -> std::fmt::Result;
            let recs = fixtures::records(1);
            let ready_bits: &'static Readiness<1> = leak(Readiness::new());
            let link = leak(outbound::Link::new(
                recs[0].subscribe().expect("reader"),
                Written(written as WrittenFn),
                Postcard,
            ));
            let mut b = Routes::<_, 1, 1>::builder(ready_bits, leak([0x5au8; 64]))
                .written_topics(leak([0x5au8; 64]));
            b.link(link);
            let mut routes = b.build().expect("config");
            Box::new(move |i| {
                recs[0].write(value(i));
                let m = ready(routes.next());
                assert!(m.topic.starts_with("dev/"));
                black_box(m.payload);
            })
        }
        "outbound_next_round_robin" => {
            let mut f = fixtures::outbound_static(8);
            Box::new(move |i| {
                if i % 8 == 0 {
                    for (k, r) in f.records.iter().enumerate() {
                        r.write(value(i + k));
                    }
                }
                let m = ready(f.routes.next());
                assert_eq!(m.route, i % 8, "served in rotation");
                black_box(m.payload);
            })
        }
        "outbound_next_parked" => parked(8, 3),
        "outbound_routes_parked_8" => parked(8, 7),
        "outbound_routes_parked_4096" => parked(4096, 4095),
        "outbound_urgent_parked_8" => parked_on(fixtures::outbound_urgent(8), 0),
        "outbound_urgent_parked_4096" => parked_on(fixtures::outbound_urgent(4096), 0),
        "framed_encode" => {
            let topics = frame_topics();
            let payloads: Vec<Vec<u8>> = (0..8).map(|k| payload(value(k))).collect();
            let mut out = [0x5au8; 64];
            Box::new(move |i| {
                let n = frame::encode(topics[i % 8], &payloads[i % 8], &mut out).expect("fits");
                black_box(&out[..n]);
            })
        }
        "framed_decode" => {
            let topics = frame_topics();
            let frames: Vec<Vec<u8>> = (0..8)
                .map(|k| {
                    let mut out = [0x5au8; 64];
                    let n = frame::encode(topics[k], &payload(value(k)), &mut out).expect("fits");
                    out[..n].to_vec()
                })
                .collect();
            let mut decoder = frame::Decoder::<{ frame::MAX_FRAME }>::new();
            Box::new(move |i| {
                let bytes = &frames[i % 8];
                match decoder.push(bytes) {
                    frame::Event::Frame(f, n) => {
                        assert_eq!(n, bytes.len());
                        black_box(f);
                    }
                    e => panic!("expected a frame, got {e:?}"),
                }
            })
        }
        _ => return None,
    })
}

/// The child: measure one row under callgrind.
fn child(row: &str, ops: usize) -> ExitCode {
    let Some(mut op) = operation(row) else {
        eprintln!("unknown row {row}");
        return ExitCode::FAILURE;
    };
    callgrind::run_child(WARMUP, ops, &mut *op);
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    Suite::new("b2_instructions", BASELINE, ROWS, OPS, WARMUP).main(child, flat_rows)
}

/// The [`FLAT_ROWS`] check: the 4096-route parked pull against the 8-route
/// one.
fn flat_rows(run: &Run) -> Extra {
    let mut extra = Extra::default();
    let mut flat = Vec::new();
    for (small_row, large_row) in FLAT_ROWS {
        let (Some(small), Some(large)) = (run.per_op(small_row), run.per_op(large_row)) else {
            continue;
        };
        let ratio = large / small;
        let held = ratio <= 1.0 + FLAT;
        let _ = writeln!(
            extra.text,
            "flat: {large_row} / {small_row} = {ratio:.4} (bound <= 1 + {FLAT}): {}",
            if held { "held" } else { "BROKEN" }
        );
        if !held {
            extra.problems.push(format!(
                "{large_row} costs {:.2} % more than {small_row} (bound {} %)",
                (ratio - 1.0) * 100.0,
                FLAT * 100.0
            ));
        }
        flat.push(
            json!({"rows": [small_row, large_row], "ratio": ratio, "bound": FLAT, "held": held}),
        );
    }
    extra.json.insert("flat".into(), Value::Array(flat));
    extra
}
