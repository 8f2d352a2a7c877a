//! Nothing lost through a long broker outage with a device reset in the
//! middle of it (`make e2e`): the `device-mqtt-backlog` firmware under
//! QEMU (a Cortex-M3, no heap), its readings stored in flash as they are
//! written and removed once the broker acknowledged them; its flash is a
//! host file (QEMU emulates no flash writes), so a QEMU killed and
//! started again on the same file is a reset that keeps the flash.
//!
//! 1. The device publishes a reading every 100 ms to a mosquitto with
//!    persistence; a persistent `mosquitto_sub` (MQTT 5, QoS 1) collects
//!    them with their `aimdb-id` user property.
//! 2. The broker stops (SIGTERM) for `--outage` seconds (40 by default:
//!    100 times the span of the device's readings `Ring`, 4 readings at
//!    10 Hz).
//! 3. Half-way, QEMU is killed (SIGKILL) and started again on the same
//!    flash: boot 1, RAM gone, readings counting from 0 again.
//! 4. The broker comes back; the run waits until boot 1's readings have
//!    caught up with the device.
//!
//! Checks, with the duplicates dropped by `aimdb-id`
//! (`durable::Dedupe`): per boot, the readings seen are 0, 1, 2, … with
//! no gap and in order; boot 0's reach at least the newest reading its
//! flash held when it was killed (read from a copy of the flash file
//! with the same backlog code on the host). The duplicates are reported.
//! And `aimdb stats` shows the device's backlog drained, nothing dropped,
//! no flash error.
//!
//! With `--gateway GATEWAY` the same outage runs behind the gateway: the
//! framed `device-backlog` firmware under QEMU, its readings on its flash
//! until the gateway (with `--backlog`) has them in its file; the device
//! reset a third of the way in, the gateway SIGKILLed and started again
//! two thirds in (the device running on). The readings carry the
//! device's ids to the broker: per device boot they are unbroken, and
//! boot 0's reach past the newest its flash held at the reset.
//!
//! ```text
//! outage-e2e --qemu device-mqtt-backlog.elf [--outage SECONDS]
//! outage-e2e --gateway target/release/gateway --qemu device-backlog.elf [--outage SECONDS]
//! ```

use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use aimdb_connectors::backlog::cache::Cache;
use aimdb_connectors::backlog::{Backlog, Counters, FileFlash, Full};
use aimdb_connectors::durable::Dedupe;
use aimdb_connectors::engine::Id;
use aimdb_connectors::mqtt::parse_id;
use device_protocol::{topics, Reading};
use gateway::{broker, qemu};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command as Process};

/// The device's flash file: 64 pages of 1 KiB for the backlog, 2 for
/// its boot counter (`device-mqtt-backlog`'s layout).
const PAGE: usize = 1024;
const BACKLOG_PAGES: u32 = 64;
const FLASH_BYTES: usize = 66 * PAGE;
/// Readings per second the device writes.
const RATE: f64 = 10.0;
/// Bound on every wait for the device or the observer.
const WAIT: Duration = Duration::from_secs(60);

struct Args {
    elf: PathBuf,
    outage: u64,
    /// The gateway binary: the framed device behind it, its backlog the
    /// gateway's (`--gateway`).
    gateway: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut elf = None;
    let mut outage = 40;
    let mut gateway = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--qemu" => elf = Some(PathBuf::from(value()?)),
            "--outage" => outage = value()?.parse().map_err(|e| format!("--outage: {e}"))?,
            "--gateway" => gateway = Some(PathBuf::from(value()?)),
            _ => return Err(format!("unknown argument {a}\n{USAGE}")),
        }
    }
    Ok(Args {
        elf: elf.ok_or(USAGE)?,
        outage,
        gateway,
    })
}

const USAGE: &str = "usage: outage-e2e --qemu FIRMWARE.elf [--outage SECONDS] [--gateway GATEWAY]";

#[tokio::main]
async fn main() -> ExitCode {
    let started = Instant::now();
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let outcome = match &args.gateway {
        Some(gateway) => behind_gateway(&args, gateway).await,
        None => run(&args).await,
    };
    match outcome {
        Ok(summary) => {
            println!(
                "outage-e2e: passed in {:.1} s: {summary}",
                started.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("outage-e2e: FAIL: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A directory of the run, removed on drop.
struct RunDir(PathBuf);

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What the observer has seen, per boot: readings in arrival order after
/// dedupe, and the duplicates dropped.
#[derive(Default)]
struct Seen {
    boots: Vec<Vec<u32>>,
    duplicates: u32,
    dedupe: Dedupe,
}

impl Seen {
    fn add(&mut self, id: Id, reading: Reading) {
        if !self.dedupe.first(id) {
            self.duplicates += 1;
            return;
        }
        let b = id.boot as usize;
        if self.boots.len() <= b {
            self.boots.resize(b + 1, Vec::new());
        }
        self.boots[b].push(reading.seq);
    }

    fn last(&self, boot: usize) -> Option<u32> {
        self.boots.get(boot).and_then(|r| r.last().copied())
    }
}

/// `mosquitto_sub` on the readings, MQTT 5, a persistent session.
struct Observer {
    child: Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    seen: Seen,
    /// Payloads are JSON (the gateway's), else postcard (the device's).
    json: bool,
}

impl Observer {
    fn start(port: u16, topic: &str, json: bool) -> Result<Self, String> {
        let format = if json { "%P|%p" } else { "%P|%x" };
        let mut child = Process::new("mosquitto_sub")
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(["-V", "5", "-c", "-i", "outage-observer", "-q", "1"])
            .args(["-t", topic, "-F", format])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start mosquitto_sub: {e}"))?;
        let out = child.stdout.take().ok_or("no observer output")?;
        Ok(Self {
            child,
            lines: BufReader::new(out).lines(),
            seen: Seen::default(),
            json,
        })
    }

    /// Reads lines until `done` holds; fails after [`WAIT`].
    async fn until(&mut self, what: &str, done: impl Fn(&Seen) -> bool) -> Result<(), String> {
        let deadline = Instant::now() + WAIT;
        while !done(&self.seen) {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match tokio::time::timeout(left, self.lines.next_line()).await {
                Ok(Ok(Some(l))) => l,
                Ok(other) => return Err(format!("mosquitto_sub ended: {other:?}")),
                Err(_) => {
                    return Err(format!(
                        "no {what} within {WAIT:?}; {} duplicates, per boot (count, first, \
                         last): {:?}",
                        self.seen.duplicates,
                        self.seen
                            .boots
                            .iter()
                            .map(|r| (r.len(), r.first(), r.last()))
                            .collect::<Vec<_>>()
                    ))
                }
            };
            let (id, reading) = parse(&line, self.json)?;
            self.seen.add(id, reading);
        }
        Ok(())
    }
}

/// `aimdb-id:B:S|payload` into the id and the reading (the payload JSON,
/// or postcard in hex).
fn parse(line: &str, json: bool) -> Result<(Id, Reading), String> {
    let (props, hex) = line.split_once('|').ok_or(format!("odd line {line:?}"))?;
    let id = props
        .strip_prefix("aimdb-id:")
        .and_then(parse_id)
        .ok_or(format!("no aimdb-id in {line:?}"))?;
    if json {
        let v: serde_json::Value =
            serde_json::from_str(hex).map_err(|e| format!("{line:?}: {e}"))?;
        let seq = v["seq"].as_u64().ok_or(format!("no seq in {line:?}"))? as u32;
        return Ok((
            id,
            Reading {
                seq,
                centi_celsius: 0,
            },
        ));
    }
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{line:?}: {e}"))?;
    let reading = postcard::from_bytes(&bytes).map_err(|e| format!("{line:?}: {e}"))?;
    Ok((id, reading))
}

/// The newest reading of `boot` in a copy of the device's flash (read
/// with the backlog code the device runs, over the file).
fn newest_in_flash(flash: &Path, boot: u32) -> Result<Option<u32>, String> {
    let copy = flash.with_extension("inspect");
    std::fs::copy(flash, &copy).map_err(|e| format!("copying the flash: {e}"))?;
    let file = FileFlash::<PAGE>::open(&copy, 66).map_err(|e| format!("{e}"))?;
    let counters = Counters::new();
    let mut buf = [0u8; 64];
    let range = 0..BACKLOG_PAGES * PAGE as u32;
    futures::executor::block_on(async {
        let mut b = Backlog::open(
            file,
            range,
            Cache::new_uncached(),
            0,
            Full::DropOldest,
            &counters,
            &mut buf,
        )
        .await
        .map_err(|e| format!("reading the flash: {e}"))?;
        let mut newest = None;
        while let Some(e) = b.next(&mut buf).await.map_err(|e| e.to_string())? {
            if e.stamp.boot == boot {
                let r: Reading = postcard::from_bytes(e.payload).map_err(|e| e.to_string())?;
                newest = newest.max(Some(r.seq));
            }
            b.sent();
        }
        Ok(newest)
    })
}

/// The device's backlog as `aimdb stats --json` shows it, once it has
/// drained (no more than the last 2 s of readings stored, nothing
/// dropped, no flash error); fails after [`WAIT`].
async fn backlog_stats(port: u16) -> Result<String, String> {
    let tool = std::env::current_exe()
        .map_err(|e| e.to_string())?
        .with_file_name("aimdb");
    let deadline = Instant::now() + WAIT;
    loop {
        let out = Process::new(&tool)
            .args(["--mqtt", &format!("mqtt://127.0.0.1:{port}")])
            .args(["--node", "dev", "--json", "stats"])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|e| {
                format!(
                    "{}: {e} (cargo build --release -p aimdb-cli)",
                    tool.display()
                )
            })?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let b = v["connectors"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["name"] == "mqtt")
            .map(|c| c["backlog"].clone())
            .unwrap_or_default();
        let n = |k: &str| b[k].as_u64();
        if b.is_object() && n("dropped") == Some(0) && n("flash_errors") == Some(0) {
            // Drained: what is left is what the last few readings are
            // (stored, in flight).
            if n("depth") <= Some(20) {
                return Ok(b.to_string());
            }
        } else if b.is_object() {
            return Err(format!("aimdb stats: the backlog refused or failed: {b}"));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "aimdb stats never showed the backlog drained: {v} ({}{})",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The newest reading of `boot` in a copy of the gateway's backlog file
/// (4 KiB pages, 256 of them, JSON payloads).
fn newest_in_gateway_file(file: &Path, boot: u32) -> Result<Option<u32>, String> {
    let copy = file.with_extension("inspect");
    std::fs::copy(file, &copy).map_err(|e| format!("copying the backlog: {e}"))?;
    let flash = <FileFlash>::open(&copy, 258).map_err(|e| format!("{e}"))?;
    let counters = Counters::new();
    let mut buf = [0u8; 512];
    futures::executor::block_on(async {
        let mut b = Backlog::open(
            flash,
            0..256 * 4096,
            Cache::new_uncached(),
            0,
            Full::DropOldest,
            &counters,
            &mut buf,
        )
        .await
        .map_err(|e| format!("reading the backlog: {e}"))?;
        let mut newest = None;
        while let Some(e) = b.next(&mut buf).await.map_err(|e| e.to_string())? {
            if e.stamp.boot == boot {
                let v: serde_json::Value =
                    serde_json::from_slice(e.payload).map_err(|e| e.to_string())?;
                newest = newest.max(v["seq"].as_u64().map(|s| s as u32));
            }
            b.sent();
        }
        Ok(newest)
    })
}

/// The same outage behind the gateway: the framed `device-backlog`
/// under QEMU (its readings durable on its flash file until the gateway
/// acknowledged them, which the gateway does once they are in its own
/// backlog file), connecting to the gateway (`--listen`, `--backlog`),
/// the broker behind it stopped. A quarter of the way in, the gateway is
/// SIGKILLed; half-way, with the gateway still away and the readings
/// since held in the device's flash, the device is reset (QEMU killed
/// and started again on its flash); three quarters in, the gateway
/// starts again on its file. The readings keep the device's ids end to
/// end: per device boot they are 0, 1, 2, … with no gap, and boot 0's
/// reach past the newest its flash held at the reset.
async fn behind_gateway(args: &Args, gateway: &Path) -> Result<String, String> {
    let dir = RunDir(std::env::temp_dir().join(format!("aimdb-outage-gw-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).map_err(|e| format!("{}: {e}", dir.0.display()))?;
    let file = dir.0.join("gateway-backlog.bin");
    let flash = dir.0.join("backlog.bin");
    std::fs::write(&flash, vec![0xffu8; FLASH_BYTES]).map_err(|e| format!("{e}"))?;
    let mut broker = broker::start_persistent()?;
    let port = broker.addr().port();
    let prefix = "aimdb/outage";
    let mut obs = Observer::start(port, &format!("{prefix}/readings"), true)?;
    // The gateway listens on a free loopback port, the same one after its
    // restart; QEMU connects to it and reconnects when it goes.
    let listen = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("a free port: {e}"))?
        .to_string();
    let spawn_gateway = || {
        Process::new(gateway)
            .args(["--listen", &listen])
            .args([
                "--broker",
                &format!("mqtt://127.0.0.1:{port}"),
                "--prefix",
                prefix,
            ])
            .arg("--backlog")
            .arg(&file)
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", gateway.display()))
    };
    let serial = format!("tcp:{listen},reconnect=1");
    let spawn_device = || {
        qemu::spawn_in(&args.elf, &serial, Some(&dir.0))
            .map_err(|e| format!("cannot start qemu-system-arm: {e}"))
    };
    let mut gw = spawn_gateway()?;
    let mut device = spawn_device()?;
    obs.until("20 readings through the gateway", |s| {
        s.last(0).is_some_and(|l| l >= 20)
    })
    .await?;
    broker.stop()?;
    let outage = Duration::from_secs(args.outage);
    let down = Instant::now();

    // The gateway SIGKILLed: the device runs on, its readings held in
    // its flash.
    tokio::time::sleep(outage / 4).await;
    kill(&mut gw, "the gateway").await?;
    let in_gateway = newest_in_gateway_file(&file, 0)?;
    println!(
        "outage-e2e: gateway SIGKILLed after {:.1?}; boot 0's newest reading in its file: \
         {in_gateway:?}",
        down.elapsed()
    );

    // The device reset while the gateway is away, its flash kept.
    tokio::time::sleep((outage / 2).saturating_sub(down.elapsed())).await;
    let in_flash = reset(&mut device, &flash, down).await?;
    let mut device = spawn_device()?;
    let boot1 = Instant::now();

    // The gateway back, on its file.
    tokio::time::sleep((outage * 3 / 4).saturating_sub(down.elapsed())).await;
    let mut gw = spawn_gateway()?;
    println!(
        "outage-e2e: gateway started again after {:.1?}",
        down.elapsed()
    );

    tokio::time::sleep(outage.saturating_sub(down.elapsed())).await;
    broker.resume()?;
    let back = Instant::now();
    // Everything boot 1 wrote during the outage, and some after.
    let written = (boot1.elapsed().as_secs_f64() * RATE) as u32;
    obs.until("device boot 1 caught up", |s| {
        s.last(1).is_some_and(|l| l >= written + 10)
    })
    .await?;
    let drained = back.elapsed();
    let _ = gw.start_kill();
    let _ = device.start_kill();
    let seen = &obs.seen;
    let (boot0, newest) = unbroken_through_reset(seen, in_flash)?;
    let in_gateway = in_gateway.ok_or("the gateway stored nothing of boot 0")?;
    let _ = obs.child.start_kill();
    Ok(format!(
        "behind the gateway: device boot 0 readings 0..{boot0} (the gateway's file held up to \
         {in_gateway} at its SIGKILL, the device's flash up to {newest} at its reset), boot 1: \
         0..{}, caught up {drained:.1?} after the broker came back; every reading once \
         and in order, {} duplicates dropped, through a {outage:?} outage",
        seen.boots.get(1).map_or(0, Vec::len),
        seen.duplicates
    ))
}

/// SIGKILLs `child` (`what`, for the error) and reaps it.
async fn kill(child: &mut Child, what: &str) -> Result<(), String> {
    child
        .start_kill()
        .map_err(|e| format!("killing {what}: {e}"))?;
    child
        .wait()
        .await
        .map_err(|e| format!("reaping {what}: {e}"))?;
    Ok(())
}

/// The device's reset `down.elapsed()` into the outage: QEMU killed, its
/// `flash` file kept. Returns boot 0's newest reading in that flash.
async fn reset(device: &mut Child, flash: &Path, down: Instant) -> Result<Option<u32>, String> {
    kill(device, "QEMU").await?;
    let in_flash = newest_in_flash(flash, 0)?;
    println!(
        "outage-e2e: device reset after {:.1?}; boot 0's newest reading in its flash: {in_flash:?}",
        down.elapsed()
    );
    Ok(in_flash)
}

/// Checks that every boot's readings arrived unbroken and that boot 0's
/// went past the newest its flash held at the reset (`in_flash`), so the
/// readings stored during the outage arrived; returns boot 0's count and
/// that newest.
fn unbroken_through_reset(seen: &Seen, in_flash: Option<u32>) -> Result<(u32, u32), String> {
    for (boot, seqs) in seen.boots.iter().enumerate() {
        unbroken(boot, seqs)?;
    }
    let boot0 = seen.boots.first().map_or(0, Vec::len) as u32;
    let newest = in_flash.ok_or("device boot 0 stored nothing during the outage")?;
    if boot0 <= newest {
        return Err(format!(
            "device boot 0: readings 0..{boot0} arrived, but its flash held up to {newest}"
        ));
    }
    Ok((boot0, newest))
}

/// Checks that `seqs` is 0, 1, 2, … with no gap.
fn unbroken(boot: usize, seqs: &[u32]) -> Result<(), String> {
    match seqs.iter().enumerate().find(|(i, s)| **s != *i as u32) {
        None => Ok(()),
        Some((i, s)) => Err(format!(
            "boot {boot}: reading {s} where {i} belongs (seen: {:?}…)",
            &seqs[i.saturating_sub(3)..(i + 3).min(seqs.len())]
        )),
    }
}

async fn run(args: &Args) -> Result<String, String> {
    let dir = RunDir(std::env::temp_dir().join(format!("aimdb-outage-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).map_err(|e| format!("{}: {e}", dir.0.display()))?;
    let flash = dir.0.join("backlog.bin");
    std::fs::write(&flash, vec![0xffu8; FLASH_BYTES]).map_err(|e| format!("{e}"))?;
    let mut broker = broker::start_persistent()?;
    let port = broker.addr().port();
    let mut obs = Observer::start(port, topics::READINGS, false)?;
    let serial = format!("tcp:127.0.0.1:{port},reconnect=1");
    let spawn = || {
        qemu::spawn_in(&args.elf, &serial, Some(&dir.0))
            .map_err(|e| format!("cannot start qemu-system-arm: {e}"))
    };
    let mut device = spawn()?;
    println!(
        "outage-e2e: mosquitto on {port}, QEMU pid {}",
        device.id().unwrap_or(0)
    );

    // 1. Readings flow.
    obs.until("20 readings", |s| s.last(0).is_some_and(|l| l >= 20))
        .await?;
    // 2. The outage.
    broker.stop()?;
    let outage = Duration::from_secs(args.outage);
    println!("outage-e2e: broker stopped for {outage:?}");
    let down = Instant::now();
    tokio::time::sleep(outage / 2).await;
    // 3. The reset: QEMU killed, its flash kept.
    let stored = reset(&mut device, &flash, down).await?;
    device = spawn()?;
    tokio::time::sleep(outage.saturating_sub(down.elapsed())).await;
    // 4. The broker back; boot 1 catches up with the device.
    broker.resume()?;
    let back = Instant::now();
    let behind = (outage / 2).as_secs_f64() * RATE;
    println!("outage-e2e: broker back after {:.1?}", down.elapsed());
    obs.until("boot 1 caught up", |s| {
        s.last(1).is_some_and(|l| f64::from(l) >= behind + 20.0)
    })
    .await?;
    let drained = back.elapsed();
    // The operator's view: the backlog in `aimdb stats`, drained.
    let backlog = backlog_stats(port).await?;
    let _ = device.start_kill();

    let seen = &obs.seen;
    let (boot0, newest) = unbroken_through_reset(seen, stored)?;
    let _ = obs.child.start_kill();
    Ok(format!(
        "aimdb stats: backlog {backlog}; boot 0: readings 0..{boot0} (its flash held up to {newest} at the reset), \
         boot 1: 0..{} caught up {drained:.1?} after the broker came back; every \
         reading once and in order, {} duplicates dropped, through a {outage:?} outage",
        seen.boots.get(1).map_or(0, Vec::len),
        seen.duplicates
    ))
}
