//! B1: inbound dispatch cost across route counts (informational).
//!
//! ns/message of `Dispatch::dispatch` for `exact`, `pattern` and
//! `keyed_known` routes at 1, 8, 64, 256, 1024 and 4096 declared routes,
//! over the shared fixtures (`inbound_exact`, `inbound_pattern`,
//! `inbound_keyed_known`: `Latest<u32>` records, postcard payloads, one
//! topic per route). Each run cycles through the topics in order, so every
//! route is hit; the payload is the same non-zero postcard `u32` in every
//! column.
//!
//! Method as in `b1_outbound_wakeup`: fixtures built before anything is
//! timed; each cell probed once to size its runs; allocations counted in a
//! separate untimed pass (the counter is off while timing); [`RUNS`] timed
//! runs interleaved across all cells, each after a short warm-up.
//!
//! Prints the table, the host, and the ratios of this run: exact dispatch
//! at 4096 routes against 8 (a table lookup should not grow with the
//! route count) beside the A/A range of [`CONTROL`], a second exact
//! fixture timed the same way, and what pattern and keyed dispatch cost
//! relative to exact; writes `target/bench-results/b1_inbound_dispatch.json`.
//! Reported, never a failure: timing on a shared host cannot hold a bound
//! tighter than its own noise (b2 gates the instruction counts).

use std::fmt::Write as _;
use std::hint::black_box;
use std::time::Instant;

use aimdb_bench::fixtures::{self, payload, Inbound};
use aimdb_bench::timing::{allocs, cell_json, GatedCounter, Spread, RUNS};
use serde_json::json;

#[global_allocator]
static GLOBAL: GatedCounter = GatedCounter::new();

const ROUTES: [usize; 6] = [1, 8, 64, 256, 1024, 4096];
const COLUMNS: [&str; 3] = ["exact", "pattern", "keyed_known"];
/// The A/A control: a second `exact` fixture at every route count, built
/// and timed the same way. Its ratio to `exact` is what two identical
/// columns read in this run, the noise a ratio of the run carries.
const CONTROL: &str = "exact_control";
/// Diagnostic (stdout only, not a JSON cell): the 4096-route exact table
/// with only 8 of its topics hit (every 512th), which separates the cost of
/// the table's size from the cost of touching 4096 different routes,
/// records and topic strings.
const HOT8: &str = "exact_4096_routes_8_topics";
/// Aimed-at length of one timed run of one cell.
const TARGET_RUN_NS: f64 = 40e6;
const MIN_MSGS: usize = 20_000;
const MAX_MSGS: usize = 1_000_000;
/// Messages in the allocation-counting pass.
const ALLOC_MSGS: usize = 8_192;

struct Bench {
    /// `exact`, `pattern`, `keyed_known` or [`CONTROL`]; [`HOT8`] for the
    /// diagnostic.
    column: &'static str,
    routes: usize,
    f: Inbound,
    payload: Vec<u8>,
    /// Next topic to send.
    next: usize,
    msgs: usize,
    samples: Vec<f64>,
    allocs_per_msg: f64,
}

impl Bench {
    fn new(column: &'static str, n: usize) -> Self {
        let f = match column {
            "exact" | CONTROL => fixtures::inbound_exact(n),
            HOT8 => {
                let mut f = fixtures::inbound_exact(n);
                f.topics = f.topics.iter().step_by(n / 8).cloned().collect();
                f
            }
            "pattern" => fixtures::inbound_pattern(n),
            _ => fixtures::inbound_keyed_known(n),
        };
        Self {
            column,
            routes: n,
            f,
            payload: payload(0x0101_0101),
            next: 0,
            msgs: 0,
            samples: Vec::new(),
            allocs_per_msg: f64::NAN,
        }
    }

    /// Dispatches `msgs` frames, cycling through the topics; returns how
    /// many were delivered.
    fn drive(&mut self, msgs: usize) -> usize {
        let topics = &self.f.topics;
        let d = &mut self.f.dispatch;
        let p = &self.payload[..];
        let mut k = self.next;
        let mut ok = 0;
        for _ in 0..msgs {
            let t = &topics[k];
            k += 1;
            if k == topics.len() {
                k = 0;
            }
            ok += black_box(d.dispatch(black_box(t), p)).is_ok() as usize;
        }
        self.next = k;
        ok
    }

    fn time(&mut self, msgs: usize) -> f64 {
        let t = Instant::now();
        black_box(self.drive(msgs));
        t.elapsed().as_nanos() as f64 / msgs as f64
    }
}

fn main() {
    let start = Instant::now();
    let mut benches: Vec<Bench> = COLUMNS
        .iter()
        .chain([&CONTROL])
        .flat_map(|&c| ROUTES.iter().map(move |&n| Bench::new(c, n)))
        .chain([Bench::new(HOT8, 4096)])
        .collect();

    // Probe to size runs.
    for b in &mut benches {
        b.drive(2_000);
        let ns = b.time(2_000);
        b.msgs = (TARGET_RUN_NS / ns).clamp(MIN_MSGS as f64, MAX_MSGS as f64) as usize;
    }

    // Allocations: a separate, untimed pass, which also checks delivery.
    let control = GLOBAL.control();
    for b in &mut benches {
        let counting = GLOBAL.start();
        let ok = b.drive(ALLOC_MSGS);
        let s = counting.stop();
        assert_eq!(
            ok, ALLOC_MSGS,
            "{} {}: every frame delivered",
            b.column, b.routes
        );
        b.allocs_per_msg = allocs(&s) as f64 / ALLOC_MSGS as f64;
    }
    for b in &benches {
        if let Some(r) = b.f.records.first() {
            assert!(r.writes() > 0, "records written");
        }
    }

    // Timed runs, interleaved.
    for _ in 0..RUNS {
        for b in &mut benches {
            let warm = b.msgs / 20;
            b.drive(warm);
            let ns = b.time(b.msgs);
            b.samples.push(ns);
        }
    }
    let total = start.elapsed();
    report(&benches, control, total.as_secs_f64());
}

fn median(benches: &[Bench], c: &str, n: usize) -> f64 {
    benches
        .iter()
        .find(|b| b.column == c && b.routes == n)
        .map_or(f64::NAN, |b| Spread::of(&b.samples).median)
}

fn report(benches: &[Bench], control: u64, total: f64) {
    let host = aimdb_bench::host();
    let mut t = String::new();
    let _ = writeln!(t, "b1_inbound_dispatch");
    let _ = writeln!(t, "host: {host}");
    let _ = writeln!(
        t,
        "\nns/message, median [min-max] of {RUNS} interleaved runs; allocs/msg; messages per run"
    );
    let _ = write!(t, "{:>6}", "routes");
    for c in COLUMNS {
        let _ = write!(t, "  {:>36}", c);
    }
    let _ = writeln!(t);
    for n in ROUTES {
        let _ = write!(t, "{n:>6}");
        for c in COLUMNS {
            let b = benches
                .iter()
                .find(|b| b.column == c && b.routes == n)
                .expect("cell");
            let cell = format!(
                "{}  {:.3}  {}",
                Spread::of(&b.samples).show(),
                b.allocs_per_msg,
                b.msgs
            );
            let _ = write!(t, "  {cell:>36}");
        }
        let _ = writeln!(t);
    }
    print!("{t}");
    if control != 1 {
        println!("WARNING: allocation counter positive control read {control}, not 1: allocs/msg are not trustworthy");
    }

    let r = median(benches, "exact", 4096) / median(benches, "exact", 8);
    let (lo, hi) = ROUTES
        .iter()
        .map(|&n| median(benches, CONTROL, n) / median(benches, "exact", n))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
            (lo.min(x), hi.max(x))
        });
    let text = format!(
        "exact at 4096 routes / exact at 8 routes = {r:.3} [A/A control, {CONTROL} / exact: {lo:.2}-{hi:.2} over the counts]"
    );
    println!(
        "\nratios of this run (medians; reported, never gated: a ratio inside the A/A range cannot be told from 1):"
    );
    println!("  exact_4096_vs_8  {r:>7.3}  {text}");
    let hot = median(benches, HOT8, 4096);
    println!(
        "diagnostic: exact, 4096-route table, only 8 of its topics hit (every 512th; \
         every fixture topic is 14 bytes): {} ns/msg = {:.3} x exact at 8 routes",
        aimdb_bench::timing::short(hot),
        hot / median(benches, "exact", 8)
    );
    for c in ["pattern", "keyed_known"] {
        let mut line = format!("{c} / exact, per route count:");
        for n in ROUTES {
            let _ = write!(
                line,
                " {n}:{:.2}x",
                median(benches, c, n) / median(benches, "exact", n)
            );
        }
        println!("{line}");
    }

    let cells: Vec<_> = benches
        .iter()
        .filter(|b| b.column != HOT8)
        .map(|b| {
            cell_json(
                "dispatch",
                b.column,
                b.routes,
                Spread::of(&b.samples),
                b.allocs_per_msg,
            )
        })
        .collect();
    let doc = json!({
        "bench": "b1_inbound_dispatch",
        "host": host,
        "runs": RUNS,
        "cells": cells,
        "ratios": [json!({ "name": "exact_4096_vs_8", "ratio": r, "text": text })],
    });
    match aimdb_bench::write_json("b1_inbound_dispatch", &doc) {
        Ok(p) => println!("wrote {}", p.display()),
        Err(e) => eprintln!("writing JSON: {e}"),
    }
    println!("total runtime {total:.1} s");
}
