//! The MQTT device end to end (`make e2e`, after the framed demo): the
//! `device-mqtt` firmware under QEMU, its UART0 connected straight to a
//! mosquitto this program starts (persistence on, loopback, a free port),
//! checked from outside with mosquitto's own clients — no aimdb code on
//! the checking side:
//!
//! 1. readings reach `mosquitto_sub` (QoS 1, a persistent session) exactly
//!    once and in order, from sequence number 0 — at the broker restart,
//!    QoS 1 lets a reading in flight arrive twice: counted, never a gap;
//!    a reading that does not arrive must be one the device counted as
//!    `lagged` (its readings `Ring` overflowed while the broker was out of
//!    reach, e.g. a first connection slowed by a loaded host);
//! 2. each command published with `mosquitto_pub` is applied, and the
//!    status comes back;
//! 3. malformed command payloads are counted by the device (its `dev/link`
//!    record's `rejected`) and change nothing;
//! 4. mosquitto is restarted mid-run (SIGTERM, same port): the device
//!    reconnects (`reconnects` in `dev/link`), its subscription holds (a
//!    command sent after the restart is applied), and readings resume with
//!    none lost;
//! 5. presence: the device's birth on `dev/presence` at the start, a new
//!    birth with a larger sequence after the restart, and its will
//!    (`offline`, cause `lost`, the last birth's sequence) when QEMU is
//!    killed;
//! 6. the `aimdb` tool (nothing of the device's types): `nodes` lists the
//!    device online, then offline after the kill; `ls` lists its records;
//!    `set cmd` is applied (the status comes back on MQTT); `set` on the
//!    read-only status exits 5 and changes nothing; the retained manifest
//!    is read by a plain `mosquitto_sub`; a malformed request is answered
//!    `Malformed` and counted (`stats`); `watch` decodes readings with
//!    their rate; `stats` shows the MQTT connector online.
//!
//! With `--tls` the firmware is `device-mqtt-tls`: the broker gets a TLS
//! 1.3 listener with a certificate for `localhost` from a CA made for the
//! run (rcgen), the device's UART goes to it and the device checks the
//! certificate against that CA (read from QEMU's directory); every check
//! above runs as it is, the observer on the plain listener.
//! `--tls-wrong-ca` gives the device another CA: the run must fail.
//!
//! Payloads are postcard, the device link's encoding (`device_protocol`),
//! but presence, which is JSON;
//! `mosquitto_sub` prints them as hex (`-F '%t %x'`) and this program
//! decodes them. Exits 0 only if every check held.
//!
//! ```text
//! mqtt-device-e2e --qemu FIRMWARE.elf [--min-readings N] [--tls | --tls-wrong-ca]
//! ```

use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use aimdb_core::codec::{Decode, Json};
use aimdb_core::presence::{Cause, LinkState};
use device_protocol::{topics, Command, LinkStats, Reading, Status};
use gateway::{broker, pki, qemu};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command as Process};
use tokio::sync::mpsc;

/// The observer's MQTT client id (its session persists across the
/// broker restart).
const OBSERVER: &str = "aimdb-e2e-observer";
/// A topic only this program uses: a message on it that comes back shows
/// the observer's subscriptions are in place.
const PROBE: &str = "e2e/probe";
/// The most QoS 1 publishes the device can have in flight (mosquitto's
/// default receive maximum): the most re-deliveries a restart can cause.
const IN_FLIGHT_MAX: usize = 20;
/// Bound on every wait.
const WAIT: Duration = Duration::from_secs(20);

/// Malformed command payloads, each one rejected for its own reason.
const MALFORMED: &[(&str, &[u8])] = &[
    ("unknown Command variant", &[0x07, 0x01]),
    ("truncated Ping", &[0x02]),
    ("not a bool", &[0x00, 0x05]),
    (
        "over the 8-byte limit",
        &[0x02, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
    ),
];

/// What the observer saw, in arrival order.
#[derive(Default)]
struct Seen {
    readings: Vec<u32>,
    statuses: Vec<Status>,
    link: Option<LinkStats>,
    /// The device's presence payloads (births and deaths).
    presence: Vec<LinkState>,
    probes: u32,
    undecodable: Vec<String>,
}

impl Seen {
    fn status(&self) -> Option<Status> {
        self.statuses.last().copied()
    }

    /// The device's births so far.
    fn births(&self) -> impl Iterator<Item = &LinkState> {
        self.presence.iter().filter(|p| p.is_online())
    }
}

enum Line {
    Reading(Reading),
    Status(Status),
    Link(LinkStats),
    Presence(LinkState),
    Probe,
    Undecodable(String),
}

fn hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn parse(line: &str) -> Option<Line> {
    let (topic, payload) = line.split_once(' ')?;
    if topic == PROBE {
        return Some(Line::Probe);
    }
    let bytes = hex(payload.trim());
    let bad = || Line::Undecodable(line.to_string());
    Some(match topic {
        topics::READINGS => bytes
            .and_then(|b| postcard::from_bytes(&b).ok())
            .map_or_else(bad, Line::Reading),
        topics::STATUS => bytes
            .and_then(|b| postcard::from_bytes(&b).ok())
            .map_or_else(bad, Line::Status),
        topics::LINK => bytes
            .and_then(|b| postcard::from_bytes(&b).ok())
            .map_or_else(bad, Line::Link),
        // JSON, the presence convention (the will padded with spaces).
        topics::PRESENCE => bytes
            .and_then(|b| Json.decode(&b).ok())
            .map_or_else(bad, Line::Presence),
        _ => return None,
    })
}

/// `mosquitto_sub` on the device's topics, its lines decoded.
struct Observer {
    _child: Child,
    lines: mpsc::UnboundedReceiver<Line>,
    seen: Seen,
    /// The device under QEMU, once started: a wait fails at once if it
    /// exits (the firmware exits when its connector gives up).
    device: Option<Child>,
}

impl Observer {
    fn start(port: u16) -> Result<Self, String> {
        let mut child = Process::new("mosquitto_sub")
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(["-V", "mqttv311", "-c", "-i", OBSERVER, "-q", "1"])
            .args([
                "-t",
                topics::READINGS,
                "-t",
                topics::STATUS,
                "-t",
                topics::LINK,
                "-t",
                topics::PRESENCE,
            ])
            .args(["-t", PROBE])
            .args(["-F", "%t %x"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                format!("mosquitto_sub: {e} (Debian package mosquitto-clients; make deps)")
            })?;
        let out = child.stdout.take().ok_or("mosquitto_sub: no stdout")?;
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut out = BufReader::new(out).lines();
            while let Ok(Some(line)) = out.next_line().await {
                if let Some(l) = parse(&line) {
                    if tx.send(l).is_err() {
                        break;
                    }
                }
            }
        });
        Ok(Self {
            _child: child,
            lines,
            seen: Seen::default(),
            device: None,
        })
    }

    fn take(&mut self, line: Line) {
        let s = &mut self.seen;
        match line {
            Line::Reading(r) => s.readings.push(r.seq),
            Line::Status(st) => s.statuses.push(st),
            Line::Link(l) => s.link = Some(l),
            Line::Presence(p) => s.presence.push(p),
            Line::Probe => s.probes += 1,
            Line::Undecodable(l) => s.undecodable.push(l),
        }
    }

    /// Takes lines until `done` holds; fails after [`WAIT`].
    async fn until(&mut self, what: &str, done: impl Fn(&Seen) -> bool) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + WAIT;
        while !done(&self.seen) {
            if let Some(Ok(Some(status))) = self.device.as_mut().map(|d| d.try_wait()) {
                return Err(format!(
                    "the device firmware exited ({status}) while waiting for {what}"
                ));
            }
            let step = deadline.min(tokio::time::Instant::now() + Duration::from_millis(200));
            match tokio::time::timeout_at(step, self.lines.recv()).await {
                Ok(Some(line)) => self.take(line),
                Ok(None) => return Err(format!("mosquitto_sub ended while waiting for {what}")),
                Err(_) if tokio::time::Instant::now() >= deadline => {
                    return Err(format!("no {what} within {} s", WAIT.as_secs()))
                }
                Err(_) => {}
            }
        }
        Ok(())
    }

    /// Takes whatever arrives during `d`.
    async fn drain(&mut self, d: Duration) {
        let deadline = tokio::time::Instant::now() + d;
        while let Ok(Some(line)) = tokio::time::timeout_at(deadline, self.lines.recv()).await {
            self.take(line);
        }
    }
}

/// Publishes `payload` on the command topic with `mosquitto_pub` (QoS 1).
async fn publish(port: u16, payload: &[u8]) -> Result<(), String> {
    publish_on(port, topics::CMD, payload).await
}

/// Publishes `payload` on `topic` with `mosquitto_pub` (QoS 1).
async fn publish_on(port: u16, topic: &str, payload: &[u8]) -> Result<(), String> {
    let mut child = Process::new("mosquitto_pub")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-q", "1", "-t", topic, "-s"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("mosquitto_pub: {e}"))?;
    let mut stdin = child.stdin.take().ok_or("mosquitto_pub: no stdin")?;
    stdin
        .write_all(payload)
        .await
        .map_err(|e| format!("mosquitto_pub stdin: {e}"))?;
    drop(stdin);
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .map_err(|_| "mosquitto_pub did not finish".to_string())?
        .map_err(|e| format!("mosquitto_pub: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("mosquitto_pub: {status}"))
    }
}

/// Runs the `aimdb` tool (built beside this program) against the broker
/// on `port`: its exit code and standard output.
async fn aimdb(port: u16, args: &[&str]) -> Result<(i32, String), String> {
    let tool = std::env::current_exe()
        .map_err(|e| e.to_string())?
        .with_file_name("aimdb");
    let run = Process::new(&tool)
        .args(["--mqtt", &format!("mqtt://127.0.0.1:{port}")])
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(WAIT, run)
        .await
        .map_err(|_| format!("aimdb {args:?} did not finish"))?
        .map_err(|e| {
            format!(
                "{}: {e} (cargo build --release -p aimdb-cli)",
                tool.display()
            )
        })?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("e2e: $ aimdb {}\n{}", args.join(" "), stdout.trim_end());
    if !out.stderr.is_empty() {
        println!("{}", String::from_utf8_lossy(&out.stderr).trim_end());
    }
    Ok((out.status.code().unwrap_or(-1), stdout))
}

/// One message on `topic` as hex, read with `mosquitto_sub` (retained
/// only if `retained`) within [`WAIT`]. `poke` runs at once and every
/// half second until the message came: mosquitto_sub cannot say when it
/// has subscribed, so a request is repeated rather than timed.
async fn one_message<F, Fut>(
    port: u16,
    topic: &str,
    retained: bool,
    poke: F,
) -> Result<Vec<u8>, String>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let mut cmd = Process::new("mosquitto_sub");
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-t", topic, "-C", "1", "-W", &WAIT.as_secs().to_string()])
        .args(["-F", "%x"]);
    if retained {
        cmd.arg("--retained-only");
    }
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("mosquitto_sub: {e}"))?;
    let out = child.wait_with_output();
    tokio::pin!(out);
    let deadline = tokio::time::Instant::now() + WAIT + Duration::from_secs(1);
    let out = loop {
        poke().await?;
        tokio::select! {
            o = &mut out => break o.map_err(|e| format!("mosquitto_sub: {e}"))?,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("mosquitto_sub on {topic} did not finish"));
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    hex(text.trim()).ok_or_else(|| format!("nothing on {topic}: {text:?}"))
}

/// The remote-access checks beyond `ls` and `set`: the retained manifest
/// as a plain MQTT client sees it, a malformed request answered and
/// counted, `watch` decoding readings with their rate, and `stats` with
/// the connector's link state.
async fn looking_inside(port: u16) -> Result<(), String> {
    use aimdb_core::remote::proto::{Body, Host, Response};
    use aimdb_core::remote::RequestError;

    // The manifest, retained: no aimdb code needed to read it.
    let manifest = one_message(port, topics::MQTT_MANIFEST, true, || async { Ok(()) }).await?;
    let m: serde_json::Value = serde_json::from_slice(&manifest).map_err(|e| {
        format!(
            "manifest is not JSON ({e}): {:?}",
            String::from_utf8_lossy(&manifest)
        )
    })?;
    let records = m["records"].as_array().cloned().unwrap_or_default();
    let find = |n: &str| records.iter().find(|r| r["name"] == n).cloned();
    let readings = find("readings").ok_or("manifest without readings")?;
    let cmd = find("cmd").ok_or("manifest without cmd")?;
    if readings["kind"] != "ring"
        || readings["topics"] != serde_json::json!([topics::READINGS])
        || readings["schema_hash"].as_str().map(str::len) != Some(16)
        || cmd["writable"] != true
        || records.len() != 6
    {
        return Err(format!("manifest: {m}"));
    }
    println!(
        "e2e: manifest retained on {} ({} bytes, {} records)",
        topics::MQTT_MANIFEST,
        manifest.len(),
        records.len()
    );

    // A malformed request (id 77, an op no version has): answered with a
    // typed error under its id, and counted.
    let answer = one_message(port, topics::MQTT_REMOTE_RSP, false, || {
        publish_on(port, topics::MQTT_REMOTE_REQ, &[77, 0x7f])
    })
    .await?;
    let r: Response<Body<'_, Host>> = postcard::from_bytes(&answer).map_err(|e| e.to_string())?;
    if (r.id, &r.result) != (77, &Err(RequestError::Malformed)) {
        return Err(format!("malformed request answered {r:?}"));
    }
    let (code, out) = aimdb(port, &["--node", "dev", "stats", "--json"]).await?;
    let stats: serde_json::Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
    let malformed = stats["responder"]["malformed"].as_u64().unwrap_or(0);
    let mqtt = stats["connectors"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == "mqtt")
        .cloned()
        .unwrap_or_default();
    if code != 0 || malformed < 1 || mqtt["link"]["status"] != "online" {
        return Err(format!("aimdb stats exited {code}: {stats}"));
    }
    println!(
        "e2e: a malformed request answered Malformed and counted ({malformed}); mqtt link online"
    );

    // watch: readings decoded from the schema, with their rate.
    let (code, out) = aimdb(
        port,
        &[
            "--node",
            "dev",
            "--json",
            "watch",
            "readings",
            "status",
            "--seconds",
            "2",
        ],
    )
    .await?;
    let samples: Vec<serde_json::Value> = out
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let last = samples.last().cloned().unwrap_or_default();
    let r = &last["records"]["readings"];
    let first_seq = samples
        .first()
        .and_then(|s| s["records"]["readings"]["value"]["seq"].as_u64());
    let last_seq = r["value"]["seq"].as_u64();
    if code != 0
        || samples.len() < 2
        || r["rate"].as_f64().is_none_or(|x| x <= 0.0)
        || r["value"]["centi_celsius"].as_i64().is_none()
        || last_seq <= first_seq
        || last["records"]["status"]["value"]["led"]
            .as_bool()
            .is_none()
    {
        return Err(format!("aimdb watch exited {code}: {out}"));
    }
    println!(
        "e2e: aimdb watch: readings at {} /s, seq {first_seq:?} -> {last_seq:?}",
        r["rate"]
    );
    Ok(())
}

/// The device's status in `aimdb nodes --json`.
async fn node_status(port: u16) -> Result<String, String> {
    let (code, out) = aimdb(port, &["nodes", "--json"]).await?;
    if code != 0 {
        return Err(format!("aimdb nodes exited {code}"));
    }
    let nodes: serde_json::Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
    Ok(nodes
        .as_array()
        .into_iter()
        .flatten()
        .find(|n| n["node"] == "dev" && n["role"] == "node")
        .and_then(|n| n["status"].as_str())
        .unwrap_or("absent")
        .to_string())
}

/// Sends `cmd` and waits for the status that shows it applied.
async fn command(
    obs: &mut Observer,
    port: u16,
    cmd: Command,
    applied: impl Fn(&Status) -> bool,
) -> Result<Status, String> {
    let before = obs.seen.status().map_or(0, |s| s.commands);
    let mut buf = [0u8; 16];
    let bytes = postcard::to_slice(&cmd, &mut buf).map_err(|e| e.to_string())?;
    let sent = Instant::now();
    publish(port, bytes).await?;
    obs.until(&format!("the status after {cmd:?}"), |s| {
        s.status().is_some_and(|st| st.commands > before)
    })
    .await?;
    let st = obs.seen.status().ok_or("no status")?;
    if st.commands != before + 1 || !applied(&st) {
        return Err(format!(
            "{cmd:?} gave status {st:?} (before: {before} commands)"
        ));
    }
    println!(
        "e2e: {cmd:?} applied, status back in {:.0?}: {st:?}",
        sent.elapsed()
    );
    Ok(st)
}

struct Args {
    elf: PathBuf,
    min_readings: usize,
    /// The device speaks TLS (`device-mqtt-tls`): its UART goes to the
    /// broker's TLS listener.
    tls: bool,
    /// With `tls`: the device is given another CA than the broker's, so
    /// the run must fail (it shows the device checks the broker).
    wrong_ca: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut elf = None;
    let mut min_readings = 60;
    let (mut tls, mut wrong_ca) = (false, false);
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        if a == "--tls" || a == "--tls-wrong-ca" {
            tls = true;
            wrong_ca = a == "--tls-wrong-ca";
            continue;
        }
        let mut value = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--qemu" => elf = Some(PathBuf::from(value()?)),
            "--min-readings" => {
                min_readings = value()?
                    .parse()
                    .map_err(|e| format!("--min-readings: {e}"))?
            }
            _ => return Err(format!("unknown argument {a}\n{USAGE}")),
        }
    }
    Ok(Args {
        elf: elf.ok_or(USAGE)?,
        min_readings,
        tls,
        wrong_ca,
    })
}

const USAGE: &str =
    "usage: mqtt-device-e2e --qemu FIRMWARE.elf [--min-readings N] [--tls | --tls-wrong-ca]";

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
    match run(&args).await {
        Ok(summary) => {
            println!(
                "mqtt-device-e2e: passed in {:.1} s: {summary}",
                started.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mqtt-device-e2e: FAIL: {e}");
            println!(
                "mqtt-device-e2e: failed after {:.1} s",
                started.elapsed().as_secs_f64()
            );
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

async fn run(args: &Args) -> Result<String, String> {
    let dir = RunDir(std::env::temp_dir().join(format!("aimdb-e2e-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).map_err(|e| format!("{}: {e}", dir.0.display()))?;
    let mut broker = if args.tls {
        // The CA goes where the firmware reads it (QEMU's directory).
        let pki = pki::make(&dir.0)?;
        let device_ca = if args.wrong_ca {
            let other = dir.0.join("other");
            std::fs::create_dir_all(&other).map_err(|e| format!("{}: {e}", other.display()))?;
            pki::make(&other)?.ca_der
        } else {
            pki.ca_der.clone()
        };
        std::fs::copy(&device_ca, dir.0.join("aimdb-broker-ca.der"))
            .map_err(|e| format!("copying the CA: {e}"))?;
        broker::start_persistent_tls(&pki.tls)?
    } else {
        broker::start_persistent()?
    };
    let port = broker.addr().port();
    println!(
        "e2e: mosquitto pid {} on 127.0.0.1:{port}{}, persistence on",
        broker.pid(),
        broker
            .tls_addr()
            .map_or(String::new(), |a| format!(", TLS 1.3 on {a}"))
    );
    let mut obs = Observer::start(port)?;
    // Probe until one comes back: then the observer is subscribed.
    let deadline = Instant::now() + WAIT;
    while obs.seen.probes == 0 {
        if Instant::now() > deadline {
            return Err("the observer never received a probe".into());
        }
        publish_on(port, PROBE, b"probe").await?;
        obs.drain(Duration::from_millis(100)).await;
    }

    let device_port = broker.tls_addr().map_or(port, |a| a.port());
    let serial = format!("tcp:127.0.0.1:{device_port},reconnect=1");
    let device = qemu::spawn_in(&args.elf, &serial, Some(&dir.0))
        .map_err(|e| format!("cannot start qemu-system-arm: {e}"))?;
    println!(
        "e2e: QEMU pid {} running {}, UART0 = -serial {serial}",
        device.id().unwrap_or(0),
        args.elf.display()
    );
    obs.device = Some(device);

    // 1. Up: the boot status and readings flowing.
    obs.until("the boot status, 10 readings and the birth", |s| {
        s.status().is_some() && s.readings.len() >= 10 && s.births().count() > 0
    })
    .await?;
    let first_birth = *obs.seen.births().next().ok_or("no birth")?;
    println!("e2e: device born on {}: {first_birth:?}", topics::PRESENCE);

    // 2. Commands round-trip.
    command(&mut obs, port, Command::SetLed(true), |s| s.led).await?;
    command(&mut obs, port, Command::Ping(4242), |s| s.last_ping == 4242).await?;

    // Looking inside, with the `aimdb` tool and nothing of the device's
    // types: the node is listed online, its records described, a command
    // set remotely is applied, a read-only record refuses.
    let online = node_status(port).await?;
    if online != "online" {
        return Err(format!("aimdb nodes: the device is {online}"));
    }
    let (code, listed) = aimdb(port, &["--node", "dev", "ls", "--json"]).await?;
    let names: Vec<String> = serde_json::from_str::<serde_json::Value>(&listed)
        .map_err(|e| e.to_string())?
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str().map(String::from))
        .collect();
    if code != 0
        || !["readings", "status", "cmd"]
            .iter()
            .all(|n| names.iter().any(|m| m == n))
    {
        return Err(format!("aimdb ls exited {code} listing {names:?}"));
    }
    let before = obs.seen.status().map_or(0, |s| s.commands);
    let (code, _) = aimdb(port, &["--node", "dev", "set", "cmd", r#"{"Ping":777}"#]).await?;
    if code != 0 {
        return Err(format!("aimdb set cmd exited {code}"));
    }
    obs.until("the status after aimdb set cmd", |s| {
        s.status().is_some_and(|st| st.commands > before)
    })
    .await?;
    if obs.seen.status().map(|s| s.last_ping) != Some(777) {
        return Err(format!("aimdb set cmd gave {:?}", obs.seen.status()));
    }
    let statuses = obs.seen.statuses.len();
    let forged = r#"{"led":true,"interval_ms":1,"commands":0,"last_ping":1}"#;
    let (code, _) = aimdb(port, &["--node", "dev", "set", "status", forged]).await?;
    if code != 5 {
        return Err(format!(
            "aimdb set on the read-only status exited {code}, not 5"
        ));
    }
    obs.drain(Duration::from_millis(300)).await;
    if obs.seen.statuses[statuses..]
        .iter()
        .any(|s| s.last_ping == 1)
    {
        return Err("a refused set changed the status".into());
    }
    println!(
        "e2e: aimdb: device online, records listed, cmd set and applied, read-only status refused"
    );
    looking_inside(port).await?;

    // 3. Malformed payloads: counted, nothing changes.
    let status_before = obs.seen.status();
    let statuses_before = obs.seen.statuses.len();
    let rejected_before = obs.seen.link.map_or(0, |l| l.rejected);
    for (why, bytes) in MALFORMED {
        publish(port, bytes).await?;
        println!("e2e: sent a malformed command ({why}): {bytes:02x?}");
    }
    let want = rejected_before + MALFORMED.len() as u32;
    obs.until("the device's count of rejected payloads", |s| {
        s.link.is_some_and(|l| l.rejected >= want)
    })
    .await?;
    // A good command after them: it must be the next one applied, so
    // nothing in between changed the status.
    command(&mut obs, port, Command::SetLed(false), |s| !s.led).await?;
    let rejected = obs.seen.link.map_or(0, |l| l.rejected);
    if rejected != want {
        return Err(format!(
            "device rejected {rejected} payloads, expected {want}"
        ));
    }
    // Between the last good status and the one SetLed(false) produced,
    // only re-sends of the same status may have arrived.
    let after = obs.seen.statuses.len() - 1;
    let changed: Vec<_> = obs.seen.statuses[statuses_before..after]
        .iter()
        .filter(|s| Some(**s) != status_before)
        .collect();
    if !changed.is_empty() {
        return Err(format!(
            "malformed payloads changed the status: {changed:?}"
        ));
    }
    println!(
        "e2e: {} malformed payloads rejected and counted by the device, status unchanged",
        MALFORMED.len()
    );

    // 4. Broker restart.
    let at_restart = obs.seen.readings.len();
    let reconnects_before = obs.seen.link.map_or(0, |l| l.reconnects);
    broker.restart()?;
    let restarted = Instant::now();
    println!(
        "e2e: mosquitto restarted (SIGTERM, now pid {}) after {at_restart} readings",
        broker.pid()
    );
    obs.until("the device's reconnect and its new birth", |s| {
        s.link.is_some_and(|l| l.reconnects > reconnects_before)
            && s.births().any(|b| b.seq > first_birth.seq)
    })
    .await?;
    let rebirth = *obs.seen.births().last().ok_or("no birth")?;
    println!(
        "e2e: device reconnected {:.1?} after the restart: {:?}",
        restarted.elapsed(),
        obs.seen.link
    );
    command(&mut obs, port, Command::SetInterval(50), |s| {
        s.interval_ms == 50
    })
    .await?;
    let min = args.min_readings.max(at_restart + 60);
    obs.until(&format!("{min} readings"), |s| s.readings.len() >= min)
        .await?;

    // Stop the device (SIGKILL: no goodbye), then take what is still on
    // its way; its will must say it is gone, with its last birth's
    // sequence.
    if let Some(mut device) = obs.device.take() {
        device
            .kill()
            .await
            .map_err(|e| format!("stopping QEMU: {e}"))?;
    }
    let killed = Instant::now();
    let last_birth = *obs.seen.births().last().ok_or("no birth")?;
    let death = LinkState::offline(last_birth.seq, Cause::Lost);
    obs.until("the device's will", |s| s.presence.last() == Some(&death))
        .await?;
    println!(
        "e2e: device will seen {:.0?} after QEMU was killed: {death:?}",
        killed.elapsed()
    );
    let gone = node_status(port).await?;
    if gone != "offline" {
        return Err(format!("aimdb nodes after the kill: the device is {gone}"));
    }
    obs.drain(Duration::from_millis(500)).await;

    let seqs = &obs.seen.readings;
    let link = obs.seen.link.unwrap_or_default();
    let mut problems = Vec::new();
    let order = check_order(seqs, at_restart, link.lagged);
    let redelivered = order.redelivered;
    problems.extend(order.problems);
    if !obs.seen.undecodable.is_empty() {
        problems.push(format!("undecodable: {:?}", obs.seen.undecodable));
    }
    if !problems.is_empty() {
        return Err(format!(
            "readings not exactly once in order ({} seen): {}",
            seqs.len(),
            problems.join("; ")
        ));
    }
    Ok(format!(
        "{} readings (seq {}..={}) in order, none lost but the {} the device \
         counted as lagged, across a broker restart ({redelivered} QoS 1 \
         re-deliveries of readings in flight at the restart); 4 commands \
         applied; {} malformed payloads rejected; presence: born {} then {} \
         (after the restart), will at its death; device link {link:?}",
        seqs.len(),
        seqs.first().copied().unwrap_or(0),
        order.highest.unwrap_or(0),
        link.lagged,
        MALFORMED.len(),
        first_birth.seq,
        rebirth.seq,
    ))
}

/// What [`check_order`] found.
#[derive(Debug, Default)]
struct Order {
    /// Highest sequence number seen.
    highest: Option<u32>,
    /// Readings seen again (QoS 1 re-deliveries after the restart).
    redelivered: usize,
    /// Everything that breaks "exactly once, in order".
    problems: Vec<String>,
}

/// Checks the readings `seqs` (in arrival order; the first `at_restart`
/// arrived before the broker restart) against "exactly once and in order
/// from 0". QoS 1 allows a reading in flight at the broker restart to
/// arrive twice (the broker forwarded it but its PUBACK was lost with the
/// connection; the resumed session sends it again): such re-deliveries are
/// counted, allowed only after the restart and only of readings already
/// seen, at most [`IN_FLIGHT_MAX`], and never hide a gap. A gap is a loss
/// unless the device counted it: a readings `Ring` that overflows while
/// the broker is out of reach (a slow first connection on a loaded host)
/// drops its oldest readings and says how many, and the device reports
/// that count as `lagged`. Every missing reading must be one of those,
/// exactly.
fn check_order(seqs: &[u32], at_restart: usize, lagged: u32) -> Order {
    let mut o = Order::default();
    let mut gaps = Vec::new();
    let mut missing = 0u64;
    for (i, &seq) in seqs.iter().enumerate() {
        let skipped = match o.highest {
            None => seq,
            Some(h) if seq <= h => {
                if i < at_restart {
                    o.problems
                        .push(format!("#{i}: seq {seq} again before the restart"));
                }
                o.redelivered += 1;
                continue;
            }
            Some(h) => seq - h - 1,
        };
        if skipped > 0 {
            gaps.push(format!("#{i}: seq {seq}, {skipped} missing before it"));
            missing += u64::from(skipped);
        }
        o.highest = Some(seq);
    }
    if missing != u64::from(lagged) {
        let gaps = if gaps.is_empty() {
            "no gap".to_string()
        } else {
            gaps.join(", ")
        };
        o.problems.push(format!(
            "{missing} readings missing ({gaps}), the device counted {lagged} lagged"
        ));
    }
    if o.redelivered > IN_FLIGHT_MAX {
        o.problems.push(format!(
            "{} re-deliveries: more than could have been in flight ({IN_FLIGHT_MAX})",
            o.redelivered
        ));
    }
    o
}

#[cfg(test)]
mod tests {
    use super::check_order;

    #[test]
    fn every_reading_once_in_order_passes() {
        let o = check_order(&[0, 1, 2, 3], 2, 0);
        assert!(o.problems.is_empty(), "{:?}", o.problems);
        assert_eq!((o.highest, o.redelivered), (Some(3), 0));
    }

    #[test]
    fn gaps_pass_only_when_the_device_counted_them_as_lagged() {
        // seq 0 overwritten in the ring at a slow start, 5 and 6 later.
        let seqs = [1, 2, 3, 4, 7, 8];
        assert!(check_order(&seqs, 3, 3).problems.is_empty());
        for lagged in [0, 1, 2, 4] {
            let o = check_order(&seqs, 3, lagged);
            assert_eq!(o.problems.len(), 1, "lagged {lagged}: {:?}", o.problems);
            assert!(
                o.problems[0].starts_with("3 readings missing"),
                "{:?}",
                o.problems
            );
        }
        // Lag the observer never saw as a gap is a miscount too.
        assert_eq!(check_order(&[0, 1, 2], 1, 1).problems.len(), 1);
    }

    #[test]
    fn redelivery_is_allowed_after_the_restart_only() {
        let after = check_order(&[0, 1, 2, 1, 2, 3], 3, 0);
        assert!(after.problems.is_empty(), "{:?}", after.problems);
        assert_eq!(after.redelivered, 2);
        let before = check_order(&[0, 1, 1, 2], 3, 0);
        assert_eq!(before.problems, ["#2: seq 1 again before the restart"]);
    }

    #[test]
    fn a_redelivery_does_not_hide_a_gap() {
        // 3 is lost after the restart; 2 arrives again in its place.
        let o = check_order(&[0, 1, 2, 2, 4], 3, 0);
        assert_eq!(o.redelivered, 1);
        assert_eq!(o.problems.len(), 1, "{:?}", o.problems);
        assert!(
            o.problems[0].contains("#4: seq 4, 1 missing"),
            "{:?}",
            o.problems
        );
    }

    #[test]
    fn more_redeliveries_than_can_be_in_flight_fail() {
        let mut seqs: Vec<u32> = (0..30).collect();
        seqs.extend(0..30);
        let o = check_order(&seqs, 30, 0);
        assert_eq!(o.problems.len(), 1, "{:?}", o.problems);
        assert!(
            o.problems[0].starts_with("30 re-deliveries"),
            "{:?}",
            o.problems
        );
    }
}
