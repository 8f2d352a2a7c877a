//! B3: instructions per operation on the Cortex-M itself — a CI gate that
//! no host can blur.
//!
//! Builds the `b3` firmware of `examples/firmware-qemu` for the Cortex-M3
//! (`thumbv7m-none-eabi`) and the Cortex-M0 (`thumbv6m-none-eabi`, no
//! compare-and-swap: portable-atomic's critical-section path) with
//! `scripts/firmware.sh b3`, and runs each **twice** under QEMU with
//! `-icount shift=0,sleep=off`, where virtual time advances one step per
//! executed instruction, so the firmware's SysTick counts instructions.
//! The firmware prints raw tick counts (a calibration row: a loop of its
//! own `CAL_INSTR` instructions longer in the second batch; and, per row, the
//! ticks of `OPS` and of `2 * OPS` operations); this binary turns them into
//! instructions per operation:
//!
//! ```text
//! instr/op = (ticks(2 * OPS) - ticks(OPS)) / OPS * CAL_INSTR / (cal_ticks(2 * CAL) - cal_ticks(CAL))
//! ```
//!
//! Without `qemu-system-arm` or a Cortex-M toolchain (either route of
//! `scripts/firmware.sh`) it says which is missing and exits 0, or fails
//! when `CI` or `AIMDB_BENCH_REQUIRE` is set (`aimdb_bench::tools`).
//! Exits non-zero if the firmware fails or is missing, the two runs of a
//! CPU differ in any count, a row is missing, a row has no limit, or a row
//! is more than [`TOLERANCE`] over its limit in
//! `data/baselines/b3_on_target.json`. The targets of [`TARGETS`] are
//! printed (within or above; informational), as are the upstream cycle figures the record
//! rows compare with.
//!
//! `B3_WRITE_BASELINE=1` rewrites the baseline from this run (commit it
//! with the reason). `B3_NO_ICOUNT=1` runs QEMU without instruction
//! counting (virtual time is then host time): the gate must fail, which
//! shows the determinism check works.
//!
//! What it cannot see: QEMU counts instructions, not cycles — no pipeline,
//! no flash wait states, no bus contention, and every instruction counts
//! one (a `ldm` of 8 registers as much as a `nop`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use aimdb_bench::gate;
use aimdb_bench::tools::{self, Tool};
use serde_json::{json, Value};

/// A row fails when it is more than this fraction over its limit.
const TOLERANCE: f64 = 0.02;
/// A row this fraction under its limit is reported as improved.
const IMPROVED: f64 = 0.05;
const BASELINE: &str = "data/baselines/b3_on_target.json";
/// QEMU's instruction counting: 2^0 ns of virtual time per instruction,
/// and no real-time sleep when the CPU idles.
const ICOUNT: &str = "shift=0,sleep=off";
/// Seconds before a QEMU run counts as hung.
const QEMU_TIMEOUT_S: &str = "60";

/// The CPUs, as QEMU names them.
const CPUS: &[&str] = &["cortex-m3", "cortex-m0"];

/// Every row the firmware prints, in its order, and what one operation is.
const ROWS: &[(&str, &str)] = &[
    (
        "latest_write_read",
        "write the device's `Latest<Status>`, read it back",
    ),
    (
        "ring_write_read",
        "write the device's `Ring<Reading, 32>`, read it back",
    ),
    (
        "mailbox_write_take",
        "write the device's `Mailbox<Command>`, take it",
    ),
    (
        "ring_write_read_4_readers",
        "write a `Ring<Reading, 32>`, each of 4 readers reads it",
    ),
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
        "write a record, next() delivers it (static topic, postcard)",
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
        "outbound_next_written_topic",
        "write a record, next() delivers it (written topic)",
    ),
    (
        "framed_encode",
        "encode one frame (11-byte topic, 5-byte payload)",
    ),
    (
        "framed_decode",
        "decode one whole frame pushed in one chunk",
    ),
    (
        "remote_get",
        "the device's responder answers a `get` of its readings (decode the request, encode the newest value)",
    ),
    (
        "remote_describe",
        "the device's responder answers a `describe` of its readings (the schema included)",
    ),
    (
        "mqtt_publish",
        "write a record, the MQTT connector publishes it (QoS 0) into an in-memory stream, the fake broker reads it",
    ),
    (
        "mqtt_receive",
        "a QoS 0 PUBLISH in the in-memory stream, the MQTT connector dispatches it into a record, read back",
    ),
    (
        "mqtt_publish_tls",
        "mqtt_publish over TLS 1.3 (embedded-tls, AES-128-GCM): one record per message",
    ),
    (
        "backlog_store",
        "store one reading in a durable backlog on flash (RAM as flash, 1 KiB pages, caches on)",
    ),
    (
        "backlog_replay",
        "read the oldest stored reading back, hand it out, remove it once acknowledged",
    ),
];

/// Targets (cpu, row, at most instructions per operation, what it is).
const TARGETS: &[(&str, &str, f64, &str)] = &[
    (
        "cortex-m3",
        "latest_write_read",
        400.0,
        "a record write + read through Latest",
    ),
    (
        "cortex-m3",
        "outbound_next_static_topic",
        1000.0,
        "write -> next() -> static topic -> postcard encode",
    ),
];

/// The upstream AimDB project's published DWT CYCCNT figures (STM32H563 at
/// 250 MHz, cycles per message through the record alone): a reference
/// beside our instruction counts, not a measurement of ours.
const UPSTREAM_CYCLES: &[(&str, f64)] = &[
    ("latest_write_read", 2009.0),
    ("ring_write_read", 2013.0),
    ("mailbox_write_take", 1661.0),
    ("ring_write_read_4_readers", 6239.0),
];

/// One run's counts.
#[derive(Debug, PartialEq)]
struct Run {
    /// Calibration: the instructions between its two batches, and the
    /// ticks of each.
    cal: (u64, u64, u64),
    /// Per row: name, ops, ticks for ops, ticks for 2 * ops.
    rows: Vec<(String, u64, u64, u64)>,
}

impl Run {
    /// Instructions per SysTick tick, from the calibration.
    fn instr_per_tick(&self) -> Result<f64, String> {
        let (cal, small, large) = self.cal;
        if large <= small {
            return Err(format!(
                "calibration ticks {small} then {large}: no time passed"
            ));
        }
        Ok(cal as f64 / (large - small) as f64)
    }
}

fn parse(out: &str) -> Result<Run, String> {
    let mut cal = None;
    let mut rows = Vec::new();
    let mut ended = false;
    for line in out.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| -> Result<u64, String> {
            f.get(i)
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("malformed line {line:?}"))
        };
        match f.first().copied() {
            Some("B3CAL") => cal = Some((num(1)?, num(2)?, num(3)?)),
            Some("B3") => {
                let name = f.get(1).ok_or_else(|| format!("malformed line {line:?}"))?;
                rows.push((name.to_string(), num(2)?, num(3)?, num(4)?));
            }
            Some("B3END") => ended = true,
            _ => {}
        }
    }
    if !ended {
        return Err("the firmware did not reach B3END".into());
    }
    Ok(Run {
        cal: cal.ok_or("no calibration line")?,
        rows,
    })
}

/// Builds the firmware for `cpu`: (ELFs, toolchain). `b3`, and `b3-tls`
/// (the TLS row: its handshake's stack and a second connector would not
/// fit `b3`, see its source).
fn build(cpu: &str) -> Result<(Vec<PathBuf>, String), String> {
    let script = aimdb_bench::workspace_root().join("scripts/firmware.sh");
    let out = Command::new("bash")
        .arg(&script)
        .args(["b3", "--cpu", cpu])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("{}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "building the b3 firmware for {cpu}: {}",
            out.status
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k))
            .map(str::to_string)
            .ok_or_else(|| format!("scripts/firmware.sh b3 printed no `{k}` line"))
    };
    let elfs: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| l.strip_prefix("elf="))
        .map(PathBuf::from)
        .collect();
    if elfs.is_empty() {
        return Err("scripts/firmware.sh b3 printed no `elf=` line".into());
    }
    Ok((elfs, field("rustc=")?))
}

/// Runs the firmware once under QEMU; its semihosting output.
fn qemu(cpu: &str, elf: &PathBuf, icount: bool) -> Result<String, String> {
    let mut cmd = Command::new("timeout");
    cmd.args([QEMU_TIMEOUT_S, "qemu-system-arm", "-cpu", cpu])
        .args(["-machine", "lm3s6965evb", "-nographic", "-monitor", "none"])
        .args(["-semihosting-config", "enable=on,target=native"]);
    if icount {
        cmd.args(["-icount", ICOUNT]);
    }
    let out = cmd
        .arg("-kernel")
        .arg(elf)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("qemu-system-arm: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "b3 firmware on {cpu} ended with {}:\n{text}",
            out.status
        ));
    }
    Ok(text)
}

struct Measured {
    cpu: &'static str,
    toolchain: String,
    run: Run,
    per_op: Vec<(String, f64)>,
}

/// Builds, runs each binary twice, checks the runs agree, converts (each
/// binary's rows with its own calibration), and puts the rows together.
fn measure(cpu: &'static str, icount: bool) -> Result<Measured, String> {
    let (elfs, toolchain) = build(cpu)?;
    let mut all: Option<Run> = None;
    let mut per_op = Vec::new();
    for elf in &elfs {
        let first = parse(&qemu(cpu, elf, icount)?)?;
        let second = parse(&qemu(cpu, elf, icount)?)?;
        if first != second {
            let mut diff = Vec::new();
            if first.cal != second.cal {
                diff.push(format!("calibration {:?} vs {:?}", first.cal, second.cal));
            }
            for (a, b) in first.rows.iter().zip(&second.rows) {
                if a != b {
                    diff.push(format!("{}: ticks {} {} vs {} {}", a.0, a.2, a.3, b.2, b.3));
                }
            }
            return Err(format!(
                "{cpu}, {}: the two runs differ (is QEMU counting instructions?): {}",
                elf.display(),
                diff.join("; ")
            ));
        }
        let ipt = first.instr_per_tick()?;
        per_op.extend(first.rows.iter().map(|(name, ops, small, large)| {
            let ticks = large.saturating_sub(*small) as f64;
            (format!("{cpu}/{name}"), ticks * ipt / *ops as f64)
        }));
        match &mut all {
            None => all = Some(first),
            Some(run) => run.rows.extend(first.rows),
        }
    }
    Ok(Measured {
        cpu,
        toolchain,
        run: all.ok_or("no firmware built")?,
        per_op,
    })
}

fn baseline_path() -> PathBuf {
    aimdb_bench::workspace_root().join(BASELINE)
}

fn write_baseline(all: &[Measured]) -> Result<(), String> {
    let rows: Vec<Value> = all
        .iter()
        .flat_map(|m| {
            m.per_op.iter().map(|(row, per_op)| {
                json!({
                    "row": row,
                    "instructions_per_op": (per_op * 100.0).round() / 100.0,
                    "toolchain": m.toolchain,
                })
            })
        })
        .collect();
    let doc = json!({
        "bench": "b3_on_target",
        "note": "Instruction limits per operation on the Cortex-M3 and -M0 under QEMU (lm3s6965evb, -icount shift=0,sleep=off); a row more than 2 % over its limit fails `make b3`. Regenerate with `B3_WRITE_BASELINE=1 cargo bench -p aimdb-bench --bench b3_on_target` and commit with the reason. Counts hold for the toolchain named per row.",
        "qemu": qemu_version(),
        "icount": ICOUNT,
        "rows": rows,
    });
    let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())? + "\n";
    std::fs::write(baseline_path(), text).map_err(|e| format!("{BASELINE}: {e}"))
}

fn qemu_version() -> String {
    Command::new("qemu-system-arm")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

fn main() -> ExitCode {
    if let Some(exit) = tools::require("b3_on_target", &[Tool::Qemu, Tool::CortexM]) {
        return exit;
    }
    let started = Instant::now();
    let write = std::env::var_os("B3_WRITE_BASELINE").is_some_and(|v| v == "1");
    let icount = std::env::var_os("B3_NO_ICOUNT").is_none_or(|v| v != "1");
    if !icount {
        println!("B3_NO_ICOUNT=1: QEMU runs without instruction counting; the gate must fail");
    }
    let mut problems = Vec::new();
    let mut all = Vec::new();
    for &cpu in CPUS {
        match measure(cpu, icount) {
            Ok(m) => all.push(m),
            Err(e) => problems.push(e),
        }
    }
    if write && problems.is_empty() {
        match write_baseline(&all) {
            Ok(()) => println!("wrote {BASELINE} from this run"),
            Err(e) => problems.push(e),
        }
    }
    let limits = gate::load(&baseline_path(), "toolchain").unwrap_or_else(|e| {
        problems.push(format!("baseline: {e}"));
        BTreeMap::new()
    });
    let expected: Vec<String> = CPUS
        .iter()
        .flat_map(|cpu| ROWS.iter().map(move |(r, _)| format!("{cpu}/{r}")))
        .collect();
    let measured: Vec<(String, f64)> = all.iter().flat_map(|m| m.per_op.clone()).collect();
    let toolchain = all
        .first()
        .map_or("unknown".to_string(), |m| m.toolchain.clone());
    let rules = gate::Rules {
        tolerance: TOLERANCE,
        improved: IMPROVED,
        baseline: BASELINE,
        rewrite_hint: "B3_WRITE_BASELINE=1 adds it",
        toolchain: &toolchain,
    };
    let verdict = gate::check(&measured, &limits, Some(&expected), &rules);
    problems.extend(verdict.problems.iter().cloned());
    verdict.print(&rules);

    let per = |row: &str| measured.iter().find(|(r, _)| r == row).map(|m| m.1);
    let mut targets = Vec::new();
    for &(cpu, row, bound, what) in TARGETS {
        let key = format!("{cpu}/{row}");
        let got = per(&key);
        let held = got.is_some_and(|g| g <= bound);
        println!(
            "target: {key} <= {bound} instructions ({what}): {} ({}; informational, the gate is the limits above)",
            got.map_or("-".into(), |g| format!("{g:.2}")),
            if held { "within" } else { "above" }
        );
        targets.push(json!({"row": key, "bound": bound, "measured": got, "held": held}));
    }
    let mut upstream = Vec::new();
    println!("record rows beside the upstream AimDB figures (DWT cycles on an STM32H563, record path only; not our measurement):");
    for &(row, cycles) in UPSTREAM_CYCLES {
        let m3 = per(&format!("cortex-m3/{row}"));
        let m0 = per(&format!("cortex-m0/{row}"));
        println!(
            "  {row:<28} M3 {:>8} instr   M0 {:>8} instr   upstream {cycles:>6} cycles",
            m3.map_or("-".into(), |v| format!("{v:.1}")),
            m0.map_or("-".into(), |v| format!("{v:.1}")),
        );
        upstream.push(json!({"row": row, "upstream_cycles": cycles, "cortex_m3_instructions": m3, "cortex_m0_instructions": m0}));
    }
    for m in &all {
        let ipt = m.run.instr_per_tick().unwrap_or(f64::NAN);
        println!(
            "{}: {}; SysTick {:.3} MHz of virtual time = {ipt:.3} instructions per tick",
            m.cpu,
            m.toolchain,
            1e3 / ipt
        );
    }
    println!("{}; icount {ICOUNT}", qemu_version());

    let rows: Vec<Value> = verdict
        .rows
        .iter()
        .map(|c| {
            let (cpu, name) = c.row.split_once('/').unwrap_or(("", &c.row));
            let ticks = all
                .iter()
                .find(|m| m.cpu == cpu)
                .and_then(|m| m.run.rows.iter().find(|r| r.0 == name))
                .map(|r| json!({"ops": r.1, "ticks": [r.2, r.3]}));
            let what = ROWS.iter().find(|r| r.0 == name).map(|r| r.1);
            json!({
                "row": c.row,
                "cpu": cpu,
                "what": what,
                "instructions_per_op": c.per_op,
                "limit": c.limit,
                "vs_limit_pct": c.delta.map(|d| d * 100.0),
                "status": c.status,
                "raw": ticks,
            })
        })
        .collect();
    let calibration: Vec<Value> = all
        .iter()
        .map(|m| {
            let ipt = m.run.instr_per_tick().unwrap_or(f64::NAN);
            json!({
                "cpu": m.cpu,
                "instructions": m.run.cal.0,
                "ticks": [m.run.cal.1, m.run.cal.2],
                "instructions_per_tick": ipt,
                "systick_hz": 1e9 / ipt,
            })
        })
        .collect();
    let doc = json!({
        "bench": "b3_on_target",
        "host": aimdb_bench::host(),
        "qemu": qemu_version(),
        "icount": if icount { ICOUNT } else { "off" },
        "toolchain": toolchain,
        "tolerance_pct": TOLERANCE * 100.0,
        "calibration": calibration,
        "rows": rows,
        "targets": targets,
        "upstream": upstream,
    });
    match aimdb_bench::write_json("b3_on_target", &doc) {
        Ok(p) => println!("wrote {}", p.display()),
        Err(e) => problems.push(format!("writing JSON: {e}")),
    }

    gate::finish(
        "b3_on_target",
        &format!("{} rows passed, both runs identical,", measured.len()),
        &problems,
        started,
    )
}
