//! B2 cells: b1's same-thread cells counted in instructions under
//! callgrind, tokio included, so the ratios b1 reports in time can be
//! read on a host whose timings a neighbour can blur.
//!
//! Each row is one cell of `b1_outbound_wakeup` (`common/cells.rs`, the
//! code b1 times): its tasks are spawned on a `LocalSet` and run until they
//! park; one operation is then one message (parked) or one round (all_busy)
//! driven by the producer, run as the future of one `LocalSet::block_on`.
//! `cell_driver` counts that `block_on` with nothing to drive; the
//! comparison subtracts it, so a ratio compares what each design costs per
//! message, the executor's task wakes and polls included. The producer is
//! the `block_on` future here and a task in b1, so the absolute figures
//! are not b1's; the columns share every part but the design.
//!
//! A binary of its own rather than rows of `b2_instructions`: compiled
//! beside b2's fixtures, these cells (more callers of `Record::take` in one
//! binary) change how LLVM inlines the routes b2 gates, and so b2's
//! counts.
//!
//! Gated like b2 (`data/baselines/b2_cells.json`, 2 %): a cell that
//! costs more is a regression of the library or of its use of tokio
//! (`Cargo.lock` pins tokio). Four ratios between cells gate too, in
//! instructions per message (deterministic, unlike b1's times of the same
//! cells): parked `outbound_routes` / `task_per_route` <= 1.10, parked
//! `outbound_routes` / `floor` <= 1.25, `outbound_routes` at 4096 routes /
//! at 8 <= 1.02, all_busy `outbound_routes` / `task_per_route` <= 0.75.
//! Same environment as b2 (`B2_FILTER`,
//! `B2_WRITE_BASELINE`, `B2_JOBS`); dumps in
//! `target/bench-results/b2_cells_callgrind/`.

#[path = "common/cells.rs"]
mod cells;

use std::fmt::Write as _;
use std::process::ExitCode;

use aimdb_bench::callgrind;
use aimdb_bench::suite::{Extra, Run, Suite};
use cells::{Column, Scenario, COLUMNS};
use serde_json::{json, Value};

/// Uncounted operations before the measured loops.
const WARMUP: usize = 64;
/// Operations in the first measured loop (the second runs twice as many).
const OPS: usize = 500;

const BASELINE: &str = "data/baselines/b2_cells.json";

/// The row prefix of a cell.
const PREFIX: &str = "cell_";
/// The row that counts the driver alone.
const DRIVER: &str = "cell_driver";

/// Every row, in report order, and what one operation is.
const ROWS: &[(&str, &str)] = &[
    (DRIVER, "LocalSet::block_on of a ready future"),
    (
        "cell_parked_task_per_route_8",
        "parked/task_per_route/8: one message, driver included",
    ),
    (
        "cell_parked_outbound_routes_8",
        "parked/outbound_routes/8: one message, driver included",
    ),
    (
        "cell_parked_floor_8",
        "parked/floor/8: one message, driver included",
    ),
    (
        "cell_parked_outbound_routes_4096",
        "parked/outbound_routes/4096: one message, driver included",
    ),
    (
        "cell_all_busy_task_per_route_256",
        "all_busy/task_per_route/256: one round of 256, driver included",
    ),
    (
        "cell_all_busy_outbound_routes_256",
        "all_busy/outbound_routes/256: one round of 256, driver included",
    ),
    (
        "cell_all_busy_scan_256",
        "all_busy/scan/256: one round of 256, driver included",
    ),
];

/// The comparisons: (scenario, routes, the column, against, the bound on
/// the ratio in instructions per message, whether the bound gates). Each
/// gated ratio past its bound fails the run; the informational one is
/// printed beside them.
const RATIOS: [(Scenario, usize, Column, usize, Column, f64, bool); 5] = [
    // A shared pull costs at most 10 % more than a task per route, when
    // every message parks and is woken.
    (
        Scenario::Parked,
        8,
        Column::OutboundRoutes,
        8,
        Column::TaskPerRoute,
        1.10,
        true,
    ),
    // ... and at most 25 % more than two bare waker slots ping-ponging.
    (
        Scenario::Parked,
        8,
        Column::OutboundRoutes,
        8,
        Column::Floor,
        1.25,
        true,
    ),
    // Flat in the route count.
    (
        Scenario::Parked,
        4096,
        Column::OutboundRoutes,
        8,
        Column::OutboundRoutes,
        1.02,
        true,
    ),
    // One wake drains many routes: well under a task per route.
    (
        Scenario::AllBusy,
        256,
        Column::OutboundRoutes,
        256,
        Column::TaskPerRoute,
        0.75,
        true,
    ),
    // The floor of delivering every record through the same readers,
    // without any readiness: what a waker per route costs on top.
    (
        Scenario::AllBusy,
        256,
        Column::OutboundRoutes,
        256,
        Column::Scan,
        f64::INFINITY,
        false,
    ),
];

/// The row name of a cell.
fn row(scenario: Scenario, column: Column, n: usize) -> String {
    format!("{PREFIX}{}_{}_{n}", scenario.name(), column.name())
}

/// The scenario, column and route count a row names.
fn parse(row: &str) -> Option<(Scenario, Column, usize)> {
    let rest = row.strip_prefix(PREFIX)?;
    let scenario = [Scenario::Parked, Scenario::AllBusy]
        .into_iter()
        .find(|s| rest.starts_with(&format!("{}_", s.name())))?;
    let rest = &rest[scenario.name().len() + 1..];
    let (column, n) = rest.rsplit_once('_')?;
    let column = COLUMNS.into_iter().find(|c| c.name() == column)?;
    let n = n.parse().ok()?;
    (column.runs_in(scenario) && scenario.runs_at(n)).then_some((scenario, column, n))
}

/// The child: build the row's cell, run it under callgrind, check the
/// sink got exactly what was driven.
fn child(name: &str, ops: usize) -> ExitCode {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let local = tokio::task::LocalSet::new();
    if name == DRIVER {
        callgrind::run_child(WARMUP, ops, &mut |_| local.block_on(&rt, async {}));
        return ExitCode::SUCCESS;
    }
    let Some((scenario, column, n)) = parse(name) else {
        eprintln!("unknown row {name}");
        return ExitCode::FAILURE;
    };
    let mut cell = {
        let _in_local = local.enter();
        cells::build(scenario, column, n)
    };
    // Let every spawned task run once and park.
    local.block_on(&rt, async {
        for _ in 0..2_000 {
            tokio::task::yield_now().await;
        }
    });
    let per_op = cell.per_round();
    callgrind::run_child(WARMUP, ops, &mut |_| {
        local.block_on(&rt, cell.drive(per_op))
    });
    cell.check_sink();
    ExitCode::SUCCESS
}

/// Instructions per message of each compared cell, the driver's count
/// subtracted, and the [`RATIOS`].
fn compare(run: &Run) -> Extra {
    let mut extra = Extra::default();
    let Some(driver) = run.per_op(DRIVER) else {
        return extra;
    };
    let per_msg = |s: Scenario, c: Column, n: usize| {
        let msgs = match s {
            Scenario::Parked => 1.0,
            Scenario::AllBusy => n as f64,
        };
        run.per_op(&row(s, c, n)).map(|x| (x - driver) / msgs)
    };
    let _ = writeln!(
        extra.text,
        "instructions per message, tokio included, the driver's {driver:.0} per operation subtracted:"
    );
    let mut cmp = Vec::new();
    for (s, n, a, m, b, limit, gated) in RATIOS {
        let (Some(x), Some(y)) = (per_msg(s, a, n), per_msg(s, b, m)) else {
            continue;
        };
        let ratio = x / y;
        let verdict = if !gated {
            String::from("informational")
        } else if ratio <= limit {
            format!("<= {limit}: held")
        } else {
            format!("<= {limit}: EXCEEDED")
        };
        let line = format!(
            "{}: {}/{n} {x:.1} / {}/{m} {y:.1} = {ratio:.3} ({verdict})",
            s.name(),
            a.name(),
            b.name()
        );
        let _ = writeln!(extra.text, "  {line}");
        if gated && ratio > limit {
            extra.problems.push(line);
        }
        cmp.push(json!({
            "scenario": s.name(),
            "column": a.name(),
            "routes": n,
            "against": b.name(),
            "against_routes": m,
            "instructions_per_msg": x,
            "against_instructions_per_msg": y,
            "ratio": ratio,
            "bound": gated.then_some(limit),
        }));
    }
    extra.json.insert("driver".into(), json!(driver));
    extra.json.insert("ratios".into(), Value::Array(cmp));
    extra
}

fn main() -> ExitCode {
    Suite::new("b2_cells", BASELINE, ROWS, OPS, WARMUP).main(child, compare)
}
