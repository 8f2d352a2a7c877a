//! The ratios `b1_outbound_wakeup` reports: ours against the other designs,
//! as ratios of medians (and of p99s for latency) from one run, each beside
//! the A/A range of two identical columns of the same run where there is
//! one. Reported, never a failure: timing on a shared host cannot hold a
//! bound tighter than its own noise; the deterministic counterparts gate
//! in `b2_cells`.

use std::fmt::Write as _;

use crate::cells::{Column, Scenario};
use aimdb_bench::timing::Spread;

use super::{find, median, probe, xthread, Bench, ROUTES};

/// One ratio: its name (the JSON key), what it reads with its per-count
/// detail and A/A range, and its worst value over the counts.
pub struct Ratio {
    pub name: &'static str,
    pub text: String,
    pub ratio: f64,
}

/// Worst (largest) ratio `a / b` over `counts`, with per-count detail.
fn worst_ratio(
    benches: &[Bench],
    s: Scenario,
    a: Column,
    b: Column,
    counts: &[usize],
) -> (f64, usize, String) {
    let mut worst = (f64::NAN, 0usize);
    let mut detail = String::new();
    for &n in counts {
        let (Some(x), Some(y)) = (median(benches, s, a, n), median(benches, s, b, n)) else {
            continue;
        };
        let r = x / y;
        let _ = write!(detail, " {n}:{r:.2}");
        if worst.0.is_nan() || r > worst.0 {
            worst = (r, n);
        }
    }
    (worst.0, worst.1, detail)
}

/// The A/A control: the range (lowest, highest) of `a / b` over the
/// counts where both exist, for two columns that run the same design;
/// `None` when no count has both.
fn spread(pairs: impl Iterator<Item = (Option<f64>, Option<f64>)>) -> Option<(f64, f64)> {
    pairs
        .filter_map(|(a, b)| Some(a? / b?))
        .fold(None, |acc, r| match acc {
            None => Some((r, r)),
            Some((lo, hi)) => Some((lo.min(r), hi.max(r))),
        })
}

/// The A/A part of a ratio's text, around `ranges` (nothing when empty).
fn aa_tag(ranges: &str) -> String {
    if ranges.is_empty() {
        return String::new();
    }
    format!(" [A/A control, task_per_route_control / task_per_route: {ranges}]")
}

/// ` [A/A …: lo–hi]` for a ratio's text, or nothing without a control.
fn aa(range: Option<(f64, f64)>) -> String {
    aa_tag(&range.map_or(String::new(), |(lo, hi)| format!("{lo:.2}-{hi:.2}")))
}

/// The same-thread parked A/A range over every count, of the figure `f`
/// reads from a cell (a median or a p99).
fn aa_same(f: impl Fn(Column, usize) -> Option<f64>) -> Option<(f64, f64)> {
    spread(
        ROUTES
            .iter()
            .map(|&n| (f(Column::Control, n), f(Column::TaskPerRoute, n))),
    )
}

/// The cross-thread parked A/A range of producer `p` over every count.
fn aa_cross(
    p: xthread::Producer,
    f: impl Fn(xthread::Producer, xthread::Column, usize) -> Option<f64>,
) -> Option<(f64, f64)> {
    use xthread::Column as X;
    spread(
        ROUTES
            .iter()
            .map(|&n| (f(p, X::Control, n), f(p, X::TaskPerRoute, n))),
    )
}

/// ` [A/A control, …: thread lo–hi, worker lo–hi]` for a cross-thread
/// ratio's text.
fn aa_producers(f: impl Fn(xthread::Producer, xthread::Column, usize) -> Option<f64>) -> String {
    let mut t = String::new();
    for p in [xthread::Producer::Thread, xthread::Producer::Worker] {
        if let Some((lo, hi)) = aa_cross(p, &f) {
            let sep = if t.is_empty() { "" } else { ", " };
            let _ = write!(t, "{sep}{} {lo:.2}-{hi:.2}", p.name());
        }
    }
    aa_tag(&t)
}

/// The figure an A/A range is read on.
#[derive(Clone, Copy)]
enum Figure {
    Median,
    P99,
}

impl Figure {
    fn name(self) -> &'static str {
        match self {
            Self::Median => "medians",
            Self::P99 => "p99",
        }
    }

    /// The figure of a same-thread parked cell.
    fn same(self, benches: &[Bench], c: Column, n: usize) -> Option<f64> {
        match self {
            Self::Median => median(benches, Scenario::Parked, c, n),
            Self::P99 => find(benches, Scenario::Parked, c, n)
                .and_then(|b| b.cell.sink.stamp.percentiles())
                .map(|p| p.p99 as f64),
        }
    }

    /// The figure of a cross-thread parked cell.
    fn cross(
        self,
        cross: &[xthread::Cell],
        p: xthread::Producer,
        c: xthread::Column,
        n: usize,
    ) -> Option<f64> {
        let s = xthread::Scenario::Parked;
        match self {
            Self::Median => xthread::median(cross, s, p, c, n),
            Self::P99 => xthread::find(cross, s, p, c, n)
                .and_then(|x| x.sink.stamp.percentiles())
                .map(|l| l.p99 as f64),
        }
    }
}

/// The A/A controls on their own lines (informational): per scenario and
/// figure, the range of `task_per_route_control / task_per_route` over the
/// counts, and as `ratio` the largest factor between the two identical
/// columns, `max(hi, 1 / lo)`. A parity ratio that reads inside that
/// factor cannot be told from parity in this run.
pub fn aa_controls(benches: &[Bench], cross: &[xthread::Cell]) -> Vec<Ratio> {
    use xthread::Producer::{Thread, Worker};
    use Figure::{Median, P99};
    let same = [
        ("aa_control_parked_median", Median),
        ("aa_control_parked_p99", P99),
    ]
    .map(|(name, f)| {
        let what = format!("parked, {}", f.name());
        (name, what, aa_same(|c, n| f.same(benches, c, n)))
    });
    let xthread = [
        ("aa_control_xthread_parked_thread_median", Thread, Median),
        ("aa_control_xthread_parked_worker_median", Worker, Median),
        ("aa_control_xthread_parked_thread_p99", Thread, P99),
        ("aa_control_xthread_parked_worker_p99", Worker, P99),
    ]
    .map(|(name, p, f)| {
        let what = format!("xthread_parked (producer: {}), {}", p.name(), f.name());
        (name, what, aa_cross(p, |p, c, n| f.cross(cross, p, c, n)))
    });
    same.into_iter()
        .chain(xthread)
        .filter_map(|(name, what, range)| {
            let (lo, hi) = range?;
            let factor = hi.max(1.0 / lo);
            Some(Ratio {
                name,
                text: format!(
                    "A/A control, {what}: task_per_route_control / task_per_route {lo:.3}-{hi:.3} over the counts, two identical columns {factor:.3} x apart at most "
                ),
                ratio: factor,
            })
        })
        .collect()
}

pub fn same_thread(benches: &[Bench]) -> Vec<Ratio> {
    use Column::*;
    use Scenario::*;
    let mut v = Vec::new();

    let r1 = match (
        median(benches, Parked, OutboundRoutes, 4096),
        median(benches, Parked, OutboundRoutes, 8),
    ) {
        (Some(a), Some(b)) => a / b,
        _ => f64::NAN,
    };
    // The same ratio of a task per route, whose wake touches no table:
    // what the larger fixture's memory alone costs in this run.
    let t1 = match (
        median(benches, Parked, TaskPerRoute, 4096),
        median(benches, Parked, TaskPerRoute, 8),
    ) {
        (Some(a), Some(b)) => format!(" [task_per_route 4096 / 8 in this run: {:.3}]", a / b),
        _ => String::new(),
    };
    v.push(Ratio {
        name: "parked_outbound_routes_4096_vs_8",
        text: format!("parked: outbound_routes at 4096 routes / at 8 routes = {r1:.3}{t1}"),
        ratio: r1,
    });

    let (r2, n2, d2) = worst_ratio(benches, Parked, OutboundRoutes, TaskPerRoute, &ROUTES);
    v.push(Ratio {
        name: "parked_outbound_routes_vs_task_per_route",
        text: format!(
            "parked: outbound_routes / task_per_route, worst {r2:.3} at {n2} routes (per count:{d2}){}",
            aa(aa_same(|c, n| Figure::Median.same(benches, c, n)))
        ),
        ratio: r2,
    });

    let (r3, n3, d3) = worst_ratio(benches, Parked, OutboundRoutes, Floor, &ROUTES);
    v.push(Ratio {
        name: "parked_outbound_routes_vs_floor",
        text: format!(
            "parked: outbound_routes / floor, worst {r3:.3} at {n3} routes (per count:{d3})"
        ),
        ratio: r3,
    });

    let (r4, n4, d4) = worst_ratio(benches, AllBusy, OutboundRoutes, Scan, &[256, 1024, 4096]);
    let (t4, _, dt4) = worst_ratio(
        benches,
        AllBusy,
        OutboundRoutes,
        TaskPerRoute,
        &[256, 1024, 4096],
    );
    v.push(Ratio {
        name: "all_busy_outbound_routes_vs_scan_256_up",
        text: format!(
            "all_busy: outbound_routes / scan at >= 256 routes, worst {r4:.3} at {n4} (per count:{d4}; / task_per_route, worst {t4:.3}:{dt4})"
        ),
        ratio: r4,
    });

    let r5 = benches
        .iter()
        .filter(|b| b.cell.column == OutboundRoutes && !b.skipped)
        .map(|b| b.allocs_per_msg)
        .fold(0.0, f64::max);
    v.push(Ratio {
        name: "outbound_routes_zero_allocs",
        text: format!("outbound_routes: allocations per message, max over cells = {r5}"),
        ratio: r5,
    });
    v
}

/// Worst (largest) ratio of two cross-thread columns over `counts`, both
/// producers.
fn xworst(
    cross: &[xthread::Cell],
    s: xthread::Scenario,
    a: xthread::Column,
    b: xthread::Column,
    counts: &[usize],
) -> (f64, String) {
    let mut worst = f64::NAN;
    let mut detail = String::new();
    for p in [xthread::Producer::Thread, xthread::Producer::Worker] {
        let _ = write!(detail, " {}:", p.name());
        for &n in counts {
            let (Some(x), Some(y)) = (
                xthread::median(cross, s, p, a, n),
                xthread::median(cross, s, p, b, n),
            ) else {
                continue;
            };
            let r = x / y;
            let _ = write!(detail, " {n}:{r:.2}");
            if worst.is_nan() || r > worst {
                worst = r;
            }
        }
    }
    (worst, detail)
}

pub fn cross_thread(cross: &[xthread::Cell], locks: &[xthread::LockCell]) -> Vec<Ratio> {
    use xthread::{Column as X, Scenario as S};
    let mut v = Vec::new();
    let mut push = |name: &'static str, what: &str, (r, d): (f64, String)| {
        v.push(Ratio {
            name,
            text: format!("{what}, worst {r:.3} (per producer and count:{d})"),
            ratio: r,
        });
    };
    let busy = [256, 1024, 4096];
    let control = aa_producers(|p, c, n| Figure::Median.cross(cross, p, c, n));
    push(
        "xthread_parked_outbound_routes_vs_task_per_route",
        &format!("xthread_parked: outbound_routes / task_per_route{control}"),
        xworst(
            cross,
            S::Parked,
            X::OutboundRoutes,
            X::TaskPerRoute,
            &ROUTES,
        ),
    );
    push(
        "xthread_parked_outbound_routes_thread_vs_task_per_route",
        &format!("xthread_parked: outbound_routes_thread / task_per_route{control}"),
        xworst(
            cross,
            S::Parked,
            X::OutboundRoutesThread,
            X::TaskPerRoute,
            &ROUTES,
        ),
    );
    push(
        "xthread_parked_outbound_routes_vs_floor",
        "xthread_parked: outbound_routes / floor",
        xworst(cross, S::Parked, X::OutboundRoutes, X::Floor, &ROUTES),
    );
    push(
        "xthread_parked_outbound_routes_thread_vs_floor",
        "xthread_parked: outbound_routes_thread / floor",
        xworst(cross, S::Parked, X::OutboundRoutesThread, X::Floor, &ROUTES),
    );
    push(
        "xthread_all_busy_outbound_routes_vs_scan_256_up",
        "xthread_all_busy: outbound_routes / scan at >= 256 routes",
        xworst(cross, S::AllBusy, X::OutboundRoutes, X::Scan, &busy),
    );
    push(
        "xthread_all_busy_outbound_routes_vs_task_per_route",
        "xthread_all_busy: outbound_routes / task_per_route",
        xworst(
            cross,
            S::AllBusy,
            X::OutboundRoutes,
            X::TaskPerRoute,
            &ROUTES[1..],
        ),
    );
    let zero = cross
        .iter()
        .filter(|c| !c.skipped && matches!(c.column, X::OutboundRoutes | X::OutboundRoutesThread))
        .map(|c| c.allocs_per_msg)
        .fold(0.0, f64::max);
    v.push(Ratio {
        name: "xthread_outbound_routes_zero_allocs",
        text: format!(
            "xthread outbound_routes(_thread): allocations per message (all threads), max over cells = {zero}"
        ),
        ratio: zero,
    });
    let lock = |col: &str, threads: usize| {
        locks
            .iter()
            .find(|c| c.column == col && c.threads == threads)
            .map(|c| Spread::of(&c.samples).median)
    };
    if let (Some(h2), Some(c2), Some(h1), Some(c1)) = (
        lock("host_raw_mutex", 2),
        lock("critical_section", 2),
        lock("host_raw_mutex", 1),
        lock("critical_section", 1),
    ) {
        // Throughput ratio host / global = ns ratio global / host; reported
        // as host / global ns per write, so lower is better.
        let r = h2 / c2;
        v.push(Ratio {
            name: "host_lock_two_writers",
            text: format!(
                "host_lock, two writer threads: host_raw_mutex ns/write / critical_section = {r:.3} (throughput {:.1} x)",
                c2 / h2
            ),
            ratio: r,
        });
        let r = h1 / c1;
        v.push(Ratio {
            name: "host_lock_one_writer",
            text: format!(
                "host_lock, one writer thread: host_raw_mutex ns/write / critical_section = {r:.3}"
            ),
            ratio: r,
        });
    }
    v
}

/// The latency ratios: parked p99 against a task per
/// route (same and cross thread), and the urgent probe under load against
/// the same probe alone; plus, informational, the normal probe's p99
/// beside a task per route's.
pub fn latency(benches: &[Bench], cross: &[xthread::Cell], probe: &[probe::PCell]) -> Vec<Ratio> {
    use probe::{Load, PColumn, Side, PROBE_ROUTES};
    let mut v = Vec::new();
    let p99 = |c, n| Figure::P99.same(benches, c, n);
    let xp99 = |p, c, n| Figure::P99.cross(cross, p, c, n);

    let mut detail = String::new();
    let worst = ratios(&mut detail, &ROUTES, |n| {
        (p99(Column::OutboundRoutes, n), p99(Column::TaskPerRoute, n))
    });
    let control = aa(aa_same(p99));
    v.push(Ratio {
        name: "parked_p99_outbound_routes_vs_task_per_route",
        text: format!(
            "parked p99: outbound_routes / task_per_route, worst {worst:.3} (per count:{detail}){control}"
        ),
        ratio: worst,
    });

    let mut worst = f64::NAN;
    let mut detail = String::new();
    for p in [xthread::Producer::Thread, xthread::Producer::Worker] {
        let _ = write!(detail, " {}:", p.name());
        let w = ratios(&mut detail, &ROUTES, |n| {
            (
                xp99(p, xthread::Column::OutboundRoutes, n),
                xp99(p, xthread::Column::TaskPerRoute, n),
            )
        });
        if worst.is_nan() || w > worst {
            worst = w;
        }
    }
    let control = aa_producers(xp99);
    v.push(Ratio {
        name: "xthread_parked_p99_outbound_routes_vs_task_per_route",
        text: format!(
            "xthread_parked p99: outbound_routes / task_per_route, worst {worst:.3} (per producer and count:{detail}){control}"
        ),
        ratio: worst,
    });

    let pp99 = |side: Side, load: Load, c: PColumn, n: usize| {
        probe
            .iter()
            .find(|x| x.side == side && x.load == load && x.column == c && x.routes == n)
            .and_then(|x| x.latency())
            .map(|p| p.p99 as f64)
    };
    let r = match (
        pp99(Side::Same, Load::Busy, PColumn::OutboundRoutesUrgent, 4096),
        pp99(Side::Same, Load::Idle, PColumn::OutboundRoutesUrgent, 4096),
    ) {
        (Some(a), Some(b)) => a / b,
        _ => f64::NAN,
    };
    v.push(Ratio {
        name: "probe_urgent_4096_busy_vs_idle_p99",
        text: format!(
            "probe_under_load, same thread: urgent probe p99 among 4095 busy routes / alone = {r:.3}"
        ),
        ratio: r,
    });

    // Informational lines, no limit: per side, each `(label, a, b)` part
    // prints the p99 of probe cell `a` / cell `b` per route count.
    use PColumn::{OutboundRoutes, OutboundRoutesUrgent as Urgent, TaskPerRoute};
    type Part = (&'static str, (Load, PColumn), (Load, PColumn));
    let lines: [(&'static str, &str, &[Part]); 2] = [
        (
            // The urgent probe under load against the same probe written
            // after a delivered busy round (the load's memory traffic, none
            // of its pending routes), and that probe against a task per
            // route's after load.
            "probe_urgent_busy_vs_after_load_p99",
            "probe p99, urgent probe under load / after load, and after load against task_per_route",
            &[
                (" urgent under / after:", (Load::Busy, Urgent), (Load::After, Urgent)),
                (
                    "; after load, urgent / task_per_route:",
                    (Load::After, Urgent),
                    (Load::After, TaskPerRoute),
                ),
            ],
        ),
        (
            "probe_normal_vs_task_per_route_p99",
            "probe_under_load: normal outbound_routes probe p99 / task_per_route p99",
            &[("", (Load::Busy, OutboundRoutes), (Load::Busy, TaskPerRoute))],
        ),
    ];
    for (name, what, parts) in lines {
        let mut detail = String::new();
        for side in [Side::Same, Side::Cross] {
            let _ = write!(detail, " {}:", side.name());
            for &(label, a, b) in parts {
                detail.push_str(label);
                ratios(&mut detail, &PROBE_ROUTES, |n| {
                    (pp99(side, a.0, a.1, n), pp99(side, b.0, b.1, n))
                });
            }
        }
        v.push(Ratio {
            name,
            text: format!("{what} :{detail}"),
            ratio: f64::NAN,
        });
    }
    v
}

/// `a / b` for each count where both exist, appended to `detail` as
/// ` count:ratio`; the worst (largest), NaN when none.
fn ratios(
    detail: &mut String,
    counts: &[usize],
    pair: impl Fn(usize) -> (Option<f64>, Option<f64>),
) -> f64 {
    let mut worst = f64::NAN;
    for &n in counts {
        if let (Some(a), Some(b)) = pair(n) {
            let r = a / b;
            let _ = write!(detail, " {n}:{r:.2}");
            if worst.is_nan() || r > worst {
                worst = r;
            }
        }
    }
    worst
}
