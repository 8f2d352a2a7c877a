//! B1: outbound wake-up latency across route counts (informational).
//!
//! Two same-thread scenarios on a current-thread tokio runtime (one
//! `LocalSet`; the producer is itself a task of that `LocalSet`, so every
//! wake-up in every column is a same-thread task wake), then the
//! cross-thread scenarios and the `host_lock` rows of the [`xthread`]
//! module (a 2-worker multi-thread runtime; see its doc):
//!
//! - **parked**: one busy route (the last) among N, the others idle. The
//!   producer writes one value and waits until the sink has it, so every
//!   pull parks and is woken: no batching at all.
//! - **all_busy**: every route is written each round; the producer waits
//!   until all N messages reached the sink.
//! - **xthread_parked**, **xthread_all_busy**: the same shapes with the
//!   producer on another thread (a plain OS thread, or a task on the other
//!   worker) and the consumers `tokio::spawn`ed; every JSON cell names its
//!   `producer`.
//! - **host_lock**: writer threads on their own records, one connector
//!   draining them: the per-record `HostRawMutex` against the global
//!   critical section.
//!
//! Columns and their fairness rules: `common/cells.rs`. The all_busy ratio
//! is read against `scan`, the floor of delivering N written records through
//! the same readers, encode and sink.
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
//! `B1_FILTER=parked/outbound_routes/8` runs only the cells whose
//! `scenario/column/routes` (cross-thread: `scenario/producer/column/routes`,
//! `host_lock` runs unless filtered out by a filter that is not a prefix of
//! `host_lock`) contains the text and `B1_SCALE=20` makes every
//! run 20 times longer (for `perf`/callgrind); either one skips the JSON.
//!
//! Prints the tables, the host and one table of ratios, each beside its
//! A/A range where there is one (`ratios.rs`); writes
//! `target/bench-results/b1_outbound_wakeup.json`. Never fails on timing.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

#[path = "common/cells.rs"]
mod cells;
#[path = "b1_outbound_wakeup/probe.rs"]
mod probe;
#[path = "b1_outbound_wakeup/ratios.rs"]
mod ratios;
#[path = "b1_outbound_wakeup/xthread.rs"]
mod xthread;

use aimdb_bench::timing::{allocs, cell_json, short, whole_rounds, GatedCounter, Spread, RUNS};
use cells::{Cell, Column, Scenario, COLUMNS};
use serde_json::json;

#[global_allocator]
static GLOBAL: GatedCounter = GatedCounter::new();

/// Route counts of the parked scenario (all_busy starts at 8).
const ROUTES: [usize; 6] = [1, 8, 64, 256, 1024, 4096];
/// Aimed-at length of one timed run of one cell.
const TARGET_RUN_NS: f64 = 60e6;
/// Bounds on messages per timed run.
const MIN_MSGS: usize = 1_000;
const MAX_MSGS: usize = 200_000;
/// A cell whose minimum run would take longer than this is skipped.
const SKIP_RUN_NS: f64 = 1.5e9;
/// Messages in the allocation-counting pass (at most).
const ALLOC_MSGS: usize = 5_000;

/// A cell and its measurements.
struct Bench {
    cell: Cell,
    /// Messages per timed run (all_busy: a whole number of rounds).
    msgs: usize,
    skipped: bool,
    samples: Vec<f64>,
    allocs_per_msg: f64,
}

impl Bench {
    fn new(scenario: Scenario, column: Column, n: usize) -> Self {
        Self {
            cell: cells::build(scenario, column, n),
            msgs: 0,
            skipped: false,
            samples: Vec::new(),
            allocs_per_msg: f64::NAN,
        }
    }

    /// `msgs` rounded up to whole rounds of the cell.
    fn round_up(&self, msgs: usize) -> usize {
        whole_rounds(msgs, self.cell.per_round())
    }

    /// ns per message of one timed run of `msgs` messages.
    async fn time(&mut self, msgs: usize) -> f64 {
        let t = Instant::now();
        self.cell.drive(msgs).await;
        t.elapsed().as_nanos() as f64 / msgs as f64
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
                let id = format!("{}/{}/{n}", scenario.name(), column.name());
                if column.runs_in(scenario) && scenario.runs_at(n) && id.contains(filter.as_str()) {
                    v.push((scenario, column, n));
                }
            }
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
    let (benches, mut notes, control) = rt
        .block_on(local.run_until(local.spawn_local(measure())))
        .expect("measuring task");
    drop(local);
    drop(rt);
    let filter = std::env::var("B1_FILTER").unwrap_or_default();
    let cross = xthread::measure(&filter, scale(), &GLOBAL, &mut notes);
    let locks = if "host_lock".contains(filter.as_str()) || filter.starts_with("host_lock") {
        xthread::measure_locks()
    } else {
        Vec::new()
    };
    let probe = probe::measure_probe(&filter, scale());
    let total = start.elapsed();
    report(&benches, &cross, &locks, &probe, &notes, control, total);
}

async fn measure() -> (Vec<Bench>, Vec<String>, u64) {
    let mut notes = Vec::new();
    let mut benches: Vec<Bench> = cells()
        .into_iter()
        .map(|(s, c, n)| Bench::new(s, c, n))
        .collect();
    // Let every spawned task run once and park.
    for _ in 0..2_000 {
        tokio::task::yield_now().await;
    }

    // Probe each cell to size its runs; skip what would be too slow.
    let mut stopped: Vec<(Scenario, Column)> = Vec::new();
    for b in &mut benches {
        if stopped.contains(&(b.cell.scenario, b.cell.column)) {
            b.skipped = true;
            continue;
        }
        let probe = b.round_up(200);
        b.cell.drive(probe).await;
        let ns = b.time(probe).await;
        if ns * MIN_MSGS as f64 > SKIP_RUN_NS {
            b.skipped = true;
            stopped.push((b.cell.scenario, b.cell.column));
            notes.push(format!(
                "{} {}: stopped at {} routes ({} ns/msg in the probe; {} messages per run would take over {:.1} s)",
                b.cell.scenario.name(),
                b.cell.column.name(),
                b.cell.routes,
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
        b.cell.drive(b.round_up(100)).await;
        let counting = GLOBAL.start();
        b.cell.drive(msgs).await;
        let s = counting.stop();
        b.allocs_per_msg = allocs(&s) as f64 / msgs as f64;
        b.cell.check_sink();
    }

    // Timed runs, interleaved: run r of every cell, then run r + 1.
    for _ in 0..RUNS {
        for b in benches.iter_mut().filter(|b| !b.skipped) {
            let warm = b.round_up(b.msgs / 20);
            b.cell.drive(warm).await;
            let ns = b.time(b.msgs).await;
            b.samples.push(ns);
        }
    }
    // Latency: a separate pass per parked cell, stamped (see `latency`).
    for b in benches
        .iter_mut()
        .filter(|b| !b.skipped && b.cell.scenario == Scenario::Parked)
    {
        b.cell.sink.stamp.enable(true);
        b.cell.drive(b.msgs).await;
        b.cell.sink.stamp.enable(false);
    }
    for b in benches.iter().filter(|b| !b.skipped) {
        b.cell.check_sink();
    }
    (benches, notes, control)
}

fn find(benches: &[Bench], s: Scenario, c: Column, n: usize) -> Option<&Bench> {
    benches
        .iter()
        .find(|b| b.cell.scenario == s && b.cell.column == c && b.cell.routes == n && !b.skipped)
}

fn median(benches: &[Bench], s: Scenario, c: Column, n: usize) -> Option<f64> {
    find(benches, s, c, n).map(|b| Spread::of(&b.samples).median)
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
    let cols: Vec<Column> = COLUMNS.into_iter().filter(|&c| c.runs_in(s)).collect();
    let counts: Vec<usize> = ROUTES.into_iter().filter(|&n| s.runs_at(n)).collect();
    let names: Vec<&str> = cols.iter().map(|c| c.name()).collect();
    rows(t, title, &names, 26, &counts, |n, i| {
        cell(find(benches, s, cols[i], n))
    });
}

/// One table: `title`, a header of column `names`, then a row per route
/// count with `cell(count, column index)` in each column, right-aligned to
/// `width`.
fn rows(
    t: &mut String,
    title: &str,
    names: &[&str],
    width: usize,
    counts: &[usize],
    cell: impl Fn(usize, usize) -> String,
) {
    let _ = writeln!(t, "{title}");
    let _ = write!(t, "{:>6}", "routes");
    for name in names {
        let _ = write!(t, "  {name:>width$}");
    }
    let _ = writeln!(t);
    for &n in counts {
        let _ = write!(t, "{n:>6}");
        for i in 0..names.len() {
            let _ = write!(t, "  {:>width$}", cell(n, i));
        }
        let _ = writeln!(t);
    }
}

fn report(
    benches: &[Bench],
    cross: &[xthread::Cell],
    locks: &[xthread::LockCell],
    probe: &[probe::PCell],
    notes: &[String],
    control: u64,
    total: Duration,
) {
    let host = aimdb_bench::host();
    println!("b1_outbound_wakeup: current-thread tokio runtime, LocalSet");
    println!("host: {host}");
    print!("{}", table(benches, Scenario::Parked));
    print!("{}", table(benches, Scenario::AllBusy));
    println!(
        "\nfloor has no routes: it is measured once per route-count row so each ratio compares cells run next to each other."
    );
    print!("{}", latency_table(benches));
    print!("{}", xthread_tables(cross));
    print!("{}", xthread_latency_table(cross));
    print!("{}", lock_table(locks));
    print!("{}", probe_tables(probe));
    for n in notes {
        println!("note: {n}");
    }
    if control != 1 {
        println!("WARNING: allocation counter positive control read {control}, not 1: allocs/msg are not trustworthy");
    }

    let mut ratios = ratios::same_thread(benches);
    ratios.extend(ratios::cross_thread(cross, locks));
    ratios.extend(ratios::latency(benches, cross, probe));
    ratios.extend(ratios::aa_controls(benches, cross));
    println!(
        "\nratios of this run (medians, p99 where named; reported, never gated: the A/A range beside a ratio is two identical columns of the same run, so a ratio inside it cannot be told from parity):"
    );
    let width = ratios.iter().map(|r| r.name.len()).max().unwrap_or(0);
    for r in &ratios {
        println!("  {:<width$}  {:>7.3}  {}", r.name, r.ratio, r.text);
    }

    let mut cells: Vec<_> = benches
        .iter()
        .filter(|b| !b.skipped)
        .map(|b| {
            let mut j = cell_json(
                b.cell.scenario.name(),
                b.cell.column.name(),
                b.cell.routes,
                Spread::of(&b.samples),
                b.allocs_per_msg,
            );
            if let Some(p) = b.cell.sink.stamp.percentiles() {
                j["latency"] = p.json();
            }
            j
        })
        .collect();
    for c in cross.iter().filter(|c| !c.skipped) {
        let mut j = cell_json(
            xthread::name(c.scenario),
            c.column.name(),
            c.routes,
            Spread::of(&c.samples),
            c.allocs_per_msg,
        );
        j["producer"] = json!(c.producer.name());
        if let Some(p) = c.sink.stamp.percentiles() {
            j["latency"] = p.json();
        }
        cells.push(j);
    }
    cells.extend(probe.iter().map(probe::probe_json));
    for c in locks {
        // `routes` is the number of writer threads (one record each); the
        // cell is ns per write of one thread; allocations are not counted.
        let mut j = cell_json(
            "host_lock",
            c.column,
            c.threads,
            Spread::of(&c.samples),
            f64::NAN,
        );
        j["allocs_per_msg"] = serde_json::Value::Null;
        j["writer_threads"] = json!(c.threads);
        cells.push(j);
    }
    let ratios_json: Vec<_> = ratios
        .iter()
        .map(|r| json!({ "name": r.name, "ratio": r.ratio, "text": r.text }))
        .collect();
    let doc = json!({
        "bench": "b1_outbound_wakeup",
        "host": host,
        "runs": RUNS,
        "cells": cells,
        "ratios": ratios_json,
    });
    if std::env::var_os("B1_FILTER").is_some() || scale() != 1.0 {
        println!("B1_FILTER or B1_SCALE set: a partial run, JSON not written");
        for b in benches {
            println!(
                "{}/{}/{}: {} messages delivered in all (probe, counting pass, warm-ups and runs)",
                b.cell.scenario.name(),
                b.cell.column.name(),
                b.cell.routes,
                b.cell.sink.delivered.get()
            );
        }
        for c in cross {
            println!("{}: {} samples", c.id(), c.samples.len());
        }
        for c in probe {
            println!("{}: {} passes", c.id(), c.samples.len());
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

/// The cross-thread tables: one per scenario and producer.
fn xthread_tables(cross: &[xthread::Cell]) -> String {
    use xthread::{Column as X, Producer, Scenario as S};
    let mut t = String::new();
    for s in [S::Parked, S::AllBusy] {
        for p in [Producer::Thread, Producer::Worker] {
            let cols: Vec<X> = xthread::COLUMNS
                .into_iter()
                .filter(|&c| c.runs_in(s))
                .collect();
            if !cross.iter().any(|c| c.scenario == s && c.producer == p) {
                continue;
            }
            let title = format!(
                "\n{} (producer: {}) — ns/message, median [min-max] of {RUNS} interleaved runs; allocations/message",
                xthread::name(s),
                p.name()
            );
            let counts: Vec<usize> = ROUTES.into_iter().filter(|&n| s.runs_at(n)).collect();
            let names: Vec<&str> = cols.iter().map(|c| c.name()).collect();
            rows(
                &mut t,
                &title,
                &names,
                30,
                &counts,
                |n, i| match xthread::find(cross, s, p, cols[i], n) {
                    Some(x) => {
                        format!("{}; {:.3}", Spread::of(&x.samples).show(), x.allocs_per_msg)
                    }
                    None => "-".into(),
                },
            );
        }
    }
    t
}

fn lock_table(locks: &[xthread::LockCell]) -> String {
    let mut t = String::new();
    if locks.is_empty() {
        return t;
    }
    let _ = writeln!(
        t,
        "\nhost_lock — ns per write of each writer thread (each on its own record, one connector draining all), median [min-max]"
    );
    for c in locks {
        let m = Spread::of(&c.samples);
        let _ = writeln!(
            t,
            "  {:>16}, {} writer thread(s): {} ns/write, {:.1} M writes/s in all",
            c.column,
            c.threads,
            m.show(),
            c.threads as f64 * 1e3 / m.median
        );
    }
    t
}

/// The same-thread parked cells' latency: p50/p99/p99.9/max per message.
fn latency_table(benches: &[Bench]) -> String {
    let mut t = String::new();
    let title = "\nparked — latency per message (write to sink), p50/p99/p99.9/max ns, from a separate stamped pass";
    grid(&mut t, benches, Scenario::Parked, title, |b| {
        match b.and_then(|b| b.cell.sink.stamp.percentiles()) {
            Some(p) => p.show(),
            None => "-".to_string(),
        }
    });
    t
}

/// The cross-thread parked cells' latency, one table per producer.
fn xthread_latency_table(cross: &[xthread::Cell]) -> String {
    use xthread::{Column as X, Producer, Scenario as S};
    let mut t = String::new();
    for p in [Producer::Thread, Producer::Worker] {
        if !cross
            .iter()
            .any(|c| c.scenario == S::Parked && c.producer == p)
        {
            continue;
        }
        let cols: Vec<X> = xthread::COLUMNS
            .into_iter()
            .filter(|&c| c.runs_in(S::Parked))
            .collect();
        let title = format!(
            "\nxthread_parked (producer: {}) — latency per message, p50/p99/p99.9/max ns",
            p.name()
        );
        let names: Vec<&str> = cols.iter().map(|c| c.name()).collect();
        rows(&mut t, &title, &names, 30, &ROUTES, |n, i| {
            xthread::find(cross, S::Parked, p, cols[i], n)
                .and_then(|x| x.sink.stamp.percentiles())
                .map_or("-".to_string(), |l| l.show())
        });
    }
    t
}

/// The probe cells: the probe's latency, and ns per message of the rounds.
fn probe_tables(probe: &[probe::PCell]) -> String {
    use probe::{PColumn, Side, LOADS, PCOLUMNS, PROBE_ROUTES};
    let mut t = String::new();
    for side in [Side::Same, Side::Cross] {
        for load in LOADS {
            let cols: Vec<PColumn> = PCOLUMNS.into_iter().filter(|&c| load.has(c)).collect();
            if !probe.iter().any(|c| c.side == side && c.load == load) {
                continue;
            }
            let title = format!(
                "\n{} ({} thread) — probe latency p50/p99/p99.9/max ns; ns/message of the rounds",
                load.scenario(),
                side.name()
            );
            let names: Vec<&str> = cols.iter().map(|c| c.name()).collect();
            rows(&mut t, &title, &names, 40, &PROBE_ROUTES, |n, i| {
                probe
                    .iter()
                    .find(|x| {
                        x.side == side && x.load == load && x.column == cols[i] && x.routes == n
                    })
                    .map_or("-".to_string(), |x| {
                        format!(
                            "{}; {}",
                            x.latency().map_or("-".into(), |p| p.show()),
                            short(Spread::of(&x.samples).median)
                        )
                    })
            });
        }
    }
    t
}
