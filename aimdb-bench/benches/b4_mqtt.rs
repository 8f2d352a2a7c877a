//! B4: this project's MQTT connector against rumqttc, the client a host
//! user would pick (informational: reported, never gated).
//!
//! ```text
//!  publisher thread (ours | rumqttc | ...) ──TCP──► mosquitto ──TCP──► subscriber thread (rumqttc, QoS 0 on b4/#)
//!  producer + client, one task                (the bench's)       counts each round's messages
//! ```
//!
//! Both publishers send the same messages (an 8-byte postcard `u64`:
//! round tag and sequence number) on the same topics (`b4/0` ..
//! `b4/{routes-1}`, written in turn) through one mosquitto the bench
//! starts on loopback, in four scenarios: QoS 0 and 1, 1 and 64 routes.
//! How each publisher is built and paced: `b4_mqtt/publishers.rs`; the
//! broker: `b4_mqtt/broker.rs`; the subscriber: `b4_mqtt/subscriber.rs`.
//!
//! At QoS 1 three more publishers run in the same rounds, reported in a
//! table of their own against `ours`: `ours-aa` (`ours` again, the A/A
//! control: a ratio inside its distance from 1 cannot be told from
//! parity), `ours+backlog` (our connector with the routes through a
//! durable backlog in a file: every message stored, read back, sent and
//! removed at its PUBACK) and `ours+drain` (the round's messages stored
//! in the backlog before the round, drained from the go signal).
//!
//! Method: one untimed warm-up round per client, then `B4_ROUNDS`
//! interleaved rounds (round 1 of every scenario and client, then round 2,
//! ...; which client goes first alternates). Each round starts a fresh
//! publisher, waits until it is connected, then times from the go signal:
//!
//! - **msg/s**: messages received / (last one received − go), so the rate
//!   is the rate at which messages got through, and a loss cannot flatter
//!   it;
//! - **CPU/msg**: CPU time of the publishing side over the round (every
//!   thread of this process but the main thread and the subscriber's: the
//!   publisher's thread and any helper a client starts, such as
//!   embassy-time's timer thread, the clock of our connector's timers on
//!   hosts) / the messages published;
//! - **broker CPU %**: mosquitto's CPU time over the round / its wall time
//!   (100 % = one core; at about 100 % the broker is the limit, and the
//!   report says so);
//! - **lost**: messages published and never received (a round ends when
//!   all arrived, or 2 s after the last one arrived once the publisher
//!   handed over everything, or at the round's time bound; a round
//!   stopped there is reported as timed out, not as lost).
//!
//! Environment: `B4_MESSAGES` per round (default 150,000), `B4_ROUNDS`
//! (default 3), `B4_ROUND_TIMEOUT_S` (default 10 s + 1 s per 5,000
//! messages; a round past it is stopped, reported as timed out and left
//! out of the medians). `B4_FILTER=ours/qos0/1` runs only the cells whose
//! `client/qosQ/routes` contains the text (for a profiler; no JSON).
//! Prints one table and writes `target/bench-results/b4_mqtt.json`.
//! Without mosquitto it says so and exits 0, or fails when `CI` or
//! `AIMDB_BENCH_REQUIRE` is set (`aimdb_bench::tools`); otherwise it exits
//! non-zero only when the bench itself cannot run (a client that never
//! connects).

#[path = "b4_mqtt/broker.rs"]
mod broker;
#[path = "b4_mqtt/publishers.rs"]
mod publishers;
#[path = "b4_mqtt/subscriber.rs"]
mod subscriber;

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aimdb_bench::timing::Spread;
use aimdb_bench::tools::{self, Tool};
use broker::{threads_cpu, Broker};
use publishers::{Client, Job};
use serde_json::{json, Value};
use subscriber::Subscriber;

/// (QoS 1, routes) of each scenario, in report order.
const SCENARIOS: [(bool, usize); 4] = [(false, 1), (false, 64), (true, 1), (true, 64)];
const CLIENTS: [Client; 5] = [
    Client::Ours,
    Client::Rumqttc,
    Client::OursAa,
    Client::OursBacklog,
    Client::OursDrain,
];
/// The QoS 1 publishers reported against `ours` in a table of their own.
const AGAINST_OURS: [Client; 3] = [Client::OursAa, Client::OursBacklog, Client::OursDrain];
/// Bound on a client's connection (and the subscriber's SUBACK).
const CONNECT_WAIT: Duration = Duration::from_secs(15);
/// A round whose publisher handed over everything ends once nothing new
/// arrived for this long.
const QUIET: Duration = Duration::from_secs(2);

struct Settings {
    msgs: u32,
    rounds: usize,
    timeout: Duration,
    /// Runs only the cells whose `client/qosQ/routes` contains it.
    filter: Option<String>,
}

impl Settings {
    /// Whether `B4_FILTER` (if set) selects this cell, and the client
    /// runs at this QoS.
    fn selects(&self, client: Client, qos1: bool, routes: usize) -> bool {
        if !qos1 && !client.qos0() {
            return false;
        }
        let id = format!("{}/qos{}/{routes}", client.name(), u8::from(qos1));
        self.filter.as_deref().is_none_or(|f| id.contains(f))
    }
}

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn settings() -> Settings {
    let msgs = env("B4_MESSAGES").unwrap_or(150_000u32).max(64);
    Settings {
        msgs,
        rounds: env("B4_ROUNDS").unwrap_or(3usize).max(1),
        timeout: Duration::from_secs(
            env("B4_ROUND_TIMEOUT_S").unwrap_or(10 + u64::from(msgs) / 5_000),
        ),
        filter: env("B4_FILTER"),
    }
}

fn scenario_name(qos1: bool, routes: usize) -> String {
    let s = if routes == 1 { "" } else { "s" };
    format!("QoS {}, {routes} route{s}", u8::from(qos1))
}

/// One round of one client in one scenario.
#[derive(Debug, Clone)]
struct Sample {
    rate: f64,
    cpu_ns_per_msg: f64,
    publisher_thread_ns: u64,
    helper_threads_ns: u64,
    broker_pct: f64,
    subscriber_pct: f64,
    received: u64,
    lost: u64,
    duplicates: u64,
    seconds: f64,
    timed_out: bool,
    report: publishers::Report,
}

impl Sample {
    fn json(&self) -> Value {
        json!({
            "msgs_per_s": self.rate,
            "cpu_ns_per_msg": self.cpu_ns_per_msg,
            "publisher_thread_ns": self.publisher_thread_ns,
            "helper_threads_ns": self.helper_threads_ns,
            "broker_cpu_pct": self.broker_pct,
            "subscriber_cpu_pct": self.subscriber_pct,
            "received": self.received,
            "lost": self.lost,
            "duplicates": self.duplicates,
            "seconds": self.seconds,
            "timed_out": self.timed_out,
            "lagged": self.report.lagged,
            "dropped": self.report.dropped,
            "connection_errors": self.report.errors,
            "last_error": self.report.last_error,
            "transport_writes": self.report.writes,
        })
    }
}

/// Runs one round: start the publisher, time from go until every message
/// arrived (or the round ended otherwise), stop it.
fn round(broker: &Broker, sub: &Subscriber, job: Job, timeout: Duration) -> Result<Sample, String> {
    let tally = sub.tally();
    tally.begin(job.tag);
    let mut p = publishers::start(job, CONNECT_WAIT)?;
    // Every thread of this process but these two is the publishing side.
    let me = std::process::id();

    let pub0 = threads_cpu(me);
    let broker0 = broker.cpu_ns();
    let t0 = Instant::now();
    let start_ns = tally.now_ns();
    p.go();

    let n = u64::from(job.msgs);
    let deadline = t0 + timeout;
    let (mut seen, mut quiet) = (0, Instant::now());
    let timed_out = loop {
        std::thread::sleep(Duration::from_millis(2));
        let got = tally.received();
        if got >= n {
            break false;
        }
        if Instant::now() > deadline {
            break true;
        }
        if got != seen || !p.produced() {
            (seen, quiet) = (got, Instant::now());
        } else if quiet.elapsed() > QUIET {
            break false;
        }
    };
    let wall = t0.elapsed().as_secs_f64();
    let pub1 = threads_cpu(me);
    let broker1 = broker.cpu_ns();
    let ran = |tid: u32| {
        pub1.get(&tid)
            .map_or(0, |&ns| ns.saturating_sub(pub0.get(&tid).map_or(0, |&b| b)))
    };
    let publisher_thread_ns = ran(p.tid);
    let helper_threads_ns = pub1
        .keys()
        .filter(|&&t| t != me && t != sub.tid && t != p.tid)
        .map(|&t| ran(t))
        .sum::<u64>();
    let report = p.finish();

    let received = tally.received();
    let seconds = tally.last_ns().saturating_sub(start_ns) as f64 / 1e9;
    Ok(Sample {
        rate: if seconds > 0.0 {
            received as f64 / seconds
        } else {
            0.0
        },
        cpu_ns_per_msg: (publisher_thread_ns + helper_threads_ns) as f64 / n as f64,
        publisher_thread_ns,
        helper_threads_ns,
        broker_pct: broker1.saturating_sub(broker0) as f64 / 1e9 / wall * 100.0,
        subscriber_pct: ran(sub.tid) as f64 / 1e9 / wall * 100.0,
        received,
        lost: n.saturating_sub(received),
        duplicates: tally.duplicates(),
        seconds,
        timed_out,
        report,
    })
}

/// Every round of one client in one scenario.
struct Cell {
    qos1: bool,
    routes: usize,
    client: Client,
    samples: Vec<Sample>,
}

impl Cell {
    /// Rounds that finished in time.
    fn done(&self) -> impl Iterator<Item = &Sample> {
        self.samples.iter().filter(|s| !s.timed_out)
    }

    fn spread(&self, f: impl Fn(&Sample) -> f64) -> Option<Spread> {
        let v: Vec<f64> = self.done().map(f).collect();
        (!v.is_empty()).then(|| Spread::of(&v))
    }

    /// Lost in the rounds that finished in time (a timed-out round's
    /// missing messages may only have been late).
    fn lost(&self) -> u64 {
        self.done().map(|s| s.lost).sum()
    }

    fn timed_out(&self) -> usize {
        self.samples.iter().filter(|s| s.timed_out).count()
    }

    fn json(&self) -> Value {
        let spread = |f: fn(&Sample) -> f64| {
            self.spread(f)
                .map(|s| json!({"median": s.median, "min": s.min, "max": s.max}))
        };
        json!({
            "scenario": format!("qos{}", u8::from(self.qos1)),
            "qos": u8::from(self.qos1),
            "routes": self.routes,
            "client": self.client.name(),
            "msgs_per_s": spread(|s| s.rate),
            "cpu_ns_per_msg": spread(|s| s.cpu_ns_per_msg),
            "broker_cpu_pct": spread(|s| s.broker_pct),
            "subscriber_cpu_pct": spread(|s| s.subscriber_pct),
            "lost": self.lost(),
            "timed_out_rounds": self.timed_out(),
            "rounds": self.samples.iter().map(Sample::json).collect::<Vec<_>>(),
        })
    }
}

fn main() -> ExitCode {
    if let Some(exit) = tools::require("b4_mqtt", &[Tool::Mosquitto]) {
        return exit;
    }
    let started = Instant::now();
    let set = settings();
    let load = broker::load_average();
    let broker = match Broker::start() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("b4_mqtt: not run: {e}");
            return ExitCode::FAILURE;
        }
    };
    let sub = match Subscriber::start(broker.port, set.msgs, CONNECT_WAIT) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("b4_mqtt: not run: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut cells: Vec<Cell> = SCENARIOS
        .iter()
        .flat_map(|&(qos1, routes)| {
            CLIENTS.iter().map(move |&client| Cell {
                qos1,
                routes,
                client,
                samples: Vec::new(),
            })
        })
        .collect();

    let mut tag = 0u32;
    let mut job = |client, qos1, routes, msgs| {
        tag += 1;
        Job {
            client,
            qos1,
            routes,
            msgs,
            tag,
            port: broker.port,
        }
    };
    // Warm-up: every client through every path once, untimed.
    let wanted = |client| SCENARIOS.iter().any(|&(q, n)| set.selects(client, q, n));
    for client in CLIENTS.into_iter().filter(|&c| wanted(c)) {
        let warm = job(client, true, publishers::MAX_ROUTES, set.msgs / 10);
        if let Err(e) = round(&broker, &sub, warm, set.timeout) {
            eprintln!("b4_mqtt: not run: warm-up: {e}");
            return ExitCode::FAILURE;
        }
    }
    for r in 0..set.rounds {
        for &(qos1, routes) in &SCENARIOS {
            let mut order = CLIENTS;
            if r % 2 == 1 {
                order.reverse();
            }
            for client in order {
                if !set.selects(client, qos1, routes) {
                    continue;
                }
                let j = job(client, qos1, routes, set.msgs);
                let sample = match round(&broker, &sub, j, set.timeout) {
                    Ok(s) => s,
                    Err(e) => {
                        eprintln!("b4_mqtt: stopped: {e}");
                        return ExitCode::FAILURE;
                    }
                };
                let cell = cells
                    .iter_mut()
                    .find(|c| c.qos1 == qos1 && c.routes == routes && c.client == client)
                    .expect("every cell exists");
                cell.samples.push(sample);
            }
        }
    }
    let stale = sub.tally().stale();
    drop(sub);
    let log = broker.log();
    let version = Broker::version();
    drop(broker);
    report(
        &set,
        &cells,
        &version,
        &load,
        stale,
        &log,
        started.elapsed(),
    );
    ExitCode::SUCCESS
}

/// The QoS 1 table of [`AGAINST_OURS`]: each beside `ours` of the same
/// rounds, the A/A control first.
fn against_ours(t: &mut String, cells: &[Cell], ratios: &mut Vec<Value>) {
    let ran = |c: &Cell| !c.samples.is_empty();
    if !SCENARIOS
        .iter()
        .any(|&(q, n)| AGAINST_OURS.iter().any(|&c| q && ran(cell(cells, q, n, c))))
    {
        return;
    }
    let _ = writeln!(
        t,
        "\n| scenario | publisher | msg/s | / ours | CPU/msg | broker CPU % | lost |"
    );
    let _ = writeln!(t, "| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    let med = |c: &Cell, f: fn(&Sample) -> f64| c.spread(f).map(|s| s.median);
    for &(qos1, routes) in SCENARIOS.iter().filter(|s| s.0) {
        let ours = cell(cells, qos1, routes, Client::Ours);
        for c in AGAINST_OURS.map(|c| cell(cells, qos1, routes, c)) {
            if !ran(c) {
                continue;
            }
            let ratio = match (med(c, |s| s.rate), med(ours, |s| s.rate)) {
                (Some(a), Some(b)) if b > 0.0 => Some(a / b),
                _ => None,
            };
            ratios.push(json!({
                "qos": u8::from(qos1),
                "routes": routes,
                "client": c.client.name(),
                "over_ours": ratio,
            }));
            let show = match c.spread(|s| s.rate) {
                Some(s) => format!("{} [{}-{}]", rate(s.median), rate(s.min), rate(s.max)),
                None => "timed out".to_string(),
            };
            let _ = writeln!(
                t,
                "| {} | {} | {} | {} | {} | {} | {} |",
                scenario_name(qos1, routes),
                c.client.name(),
                show,
                ratio.map_or("-".into(), |x| format!("{x:.2}")),
                med(c, |s| s.cpu_ns_per_msg).map_or("-".into(), |v| format!("{:.2} µs", v / 1e3)),
                med(c, |s| s.broker_pct).map_or("-".into(), |v| format!("{v:.0}")),
                c.lost()
            );
        }
    }
    let _ = writeln!(
        t,
        "\n/ ours: msg/s median over `ours`'s median in the same rounds. ours-aa is `ours` \
         again (A/A control): its distance from 1 is this run's noise. ours+backlog: every \
         message stored in a file backlog, read back, sent, removed at its PUBACK; \
         ours+drain: the round's messages stored before the round, drained from go."
    );
}

/// `153.2k`.
fn rate(x: f64) -> String {
    format!("{:.1}k", x / 1e3)
}

fn cell(cells: &[Cell], qos1: bool, routes: usize, client: Client) -> &Cell {
    cells
        .iter()
        .find(|c| c.qos1 == qos1 && c.routes == routes && c.client == client)
        .expect("every cell exists")
}

fn report(
    set: &Settings,
    cells: &[Cell],
    mosquitto: &str,
    load: &str,
    stale: u64,
    broker_log: &str,
    total: Duration,
) {
    let host = aimdb_bench::host();
    let mut t = String::new();
    let _ = writeln!(t, "b4_mqtt");
    let _ = writeln!(
        t,
        "host: {host}; load average at start {load}; {mosquitto} on 127.0.0.1"
    );
    let _ = writeln!(
        t,
        "{} messages of 8 bytes per round, {} interleaved rounds per cell: median [min-max]",
        set.msgs, set.rounds
    );
    let _ = writeln!(
        t,
        "\n| scenario | ours msg/s | rumqttc msg/s | ratio | CPU/msg ours | CPU/msg rumqttc | broker CPU % | lost |"
    );
    let _ = writeln!(
        t,
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let mut notes = Vec::new();
    let mut ratios = Vec::new();
    for &(qos1, routes) in &SCENARIOS {
        let (o, r) = (
            cell(cells, qos1, routes, Client::Ours),
            cell(cells, qos1, routes, Client::Rumqttc),
        );
        let show = |c: &Cell| match c.spread(|s| s.rate) {
            Some(s) => format!("{} [{}-{}]", rate(s.median), rate(s.min), rate(s.max)),
            None if c.samples.is_empty() => "-".to_string(),
            None => "timed out".to_string(),
        };
        let med = |c: &Cell, f: fn(&Sample) -> f64| c.spread(f).map(|s| s.median);
        let ratio = match (med(o, |s| s.rate), med(r, |s| s.rate)) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        };
        ratios.push(json!({"qos": u8::from(qos1), "routes": routes, "ours_over_rumqttc": ratio}));
        let us = |c: &Cell| {
            med(c, |s| s.cpu_ns_per_msg).map_or("-".into(), |v| format!("{:.2} µs", v / 1e3))
        };
        let pct = |c: &Cell| med(c, |s| s.broker_pct).map_or("-".into(), |v| format!("{v:.0}"));
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {} | {} | {} / {} | {} / {} |",
            scenario_name(qos1, routes),
            show(o),
            show(r),
            ratio.map_or("-".into(), |x| format!("{x:.2}")),
            us(o),
            us(r),
            pct(o),
            pct(r),
            o.lost(),
            r.lost()
        );
        for c in cells
            .iter()
            .filter(|c| c.qos1 == qos1 && c.routes == routes)
        {
            if let Some(b) = med(c, |s| s.broker_pct).filter(|&b| b >= 90.0) {
                notes.push(format!(
                    "{}, {}: the broker was the limit ({b:.0} % of a core)",
                    scenario_name(qos1, routes),
                    c.client.name()
                ));
            }
            if c.timed_out() > 0 {
                notes.push(format!(
                    "{}, {}: {} round(s) timed out (past {:?}), left out of the medians",
                    scenario_name(qos1, routes),
                    c.client.name(),
                    c.timed_out(),
                    set.timeout
                ));
            }
            for s in &c.samples {
                if s.report.lagged + s.report.dropped + s.report.errors > 0 {
                    notes.push(format!(
                        "{}, {}: lagged {}, dropped {}, connection errors {} ({})",
                        scenario_name(qos1, routes),
                        c.client.name(),
                        s.report.lagged,
                        s.report.dropped,
                        s.report.errors,
                        s.report.last_error.as_deref().unwrap_or("")
                    ));
                }
            }
        }
        let writes = |s: &Sample| match s.report.writes {
            Some(w) if s.received > 0 => w as f64 / s.received as f64,
            _ => f64::NAN,
        };
        if let Some(w) = med(o, writes).filter(|w| w.is_finite()) {
            notes.push(format!(
                "{}, ours: {w:.3} transport writes per message",
                scenario_name(qos1, routes)
            ));
        }
        let sub = |c: &Cell| med(c, |s| s.subscriber_pct).map_or("-".into(), |v| format!("{v:.0}"));
        if o.done().chain(r.done()).next().is_none() {
            continue;
        }
        notes.push(format!(
            "{}: the subscriber used {} / {} % of a core (ours / rumqttc)",
            scenario_name(qos1, routes),
            sub(o),
            sub(r)
        ));
    }
    against_ours(&mut t, cells, &mut ratios);
    let _ = writeln!(
        t,
        "\nratio: ours / rumqttc msg/s (medians). CPU/msg: the publishing side's CPU time \
         per message (median). broker CPU %: of one core (median, ours / rumqttc). lost: \
         over the rounds that finished in time (ours / rumqttc)."
    );
    for n in &notes {
        let _ = writeln!(t, "{n}");
    }
    if stale > 0 {
        let _ = writeln!(t, "{stale} messages arrived after their round had ended");
    }
    if !broker_log.trim().is_empty() {
        let _ = writeln!(t, "broker log:\n{}", broker_log.trim_end());
    }
    print!("{t}");

    let unix_time = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let doc = json!({
        "bench": "b4_mqtt",
        "host": host,
        "load_average_at_start": load,
        "broker": mosquitto,
        "unix_time": unix_time,
        "messages": set.msgs,
        "payload_bytes": 8,
        "rounds": set.rounds,
        "round_timeout_s": set.timeout.as_secs(),
        "window": publishers::WINDOW,
        "cells": cells.iter().map(Cell::json).collect::<Vec<_>>(),
        "ratios": ratios,
        "stale_messages": stale,
        "total_s": total.as_secs_f64(),
    });
    if set.filter.is_none() {
        match aimdb_bench::write_json("b4_mqtt", &doc) {
            Ok(p) => println!("wrote {}", p.display()),
            Err(e) => eprintln!("writing JSON: {e}"),
        }
    }
    println!("total runtime {:.1} s", total.as_secs_f64());
}
