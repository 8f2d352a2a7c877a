//! `make tap`: the device app over a real TCP/IP stack, end to end. In a
//! network namespace it creates (and removes) itself, with addresses only
//! inside it:
//!
//! ```text
//!  namespace aimdb-tap-PID
//!  ┌───────────────────────────────────────────────────────────────┐
//!  │ mosquitto on 10.42.0.1:1883, TLS :8883 ── Linux IP stack ── TAP (10.42.0.1/24)
//!  │ mosquitto_sub / mosquitto_pub (the checks)          │ frames  │
//!  │ device-tap: device-app ── embassy-net 10.42.0.2 ────┘         │
//!  └───────────────────────────────────────────────────────────────┘
//! ```
//!
//! The device speaks MQTT over TLS 1.3 (embedded-tls on embassy-net) to
//! the broker's TLS listener, whose certificate (for `broker.aimdb.test`,
//! signed by a CA made with `openssl` for this run only) it checks; the
//! observer uses the plain listener.
//!
//! 1. readings reach `mosquitto_sub`, in order, and the boot status;
//! 2. a `Command` published on `dev/cmd` with `mosquitto_pub` comes back
//!    as a changed `Status` (two commands: `Ping(id)`, `SetLed(true)`).
//!
//! Bounded: every wait has a deadline, and a watchdog thread tears down
//! and exits 1 after [`TOTAL`] whatever the main thread is doing. Teardown
//! (on success, failure, panic or watchdog): the processes started here
//! killed by PID, the TAP device deleted, the namespace deleted, the
//! temporary directory removed. A namespace left by a run that was killed
//! outright (`aimdb-tap-PID` whose PID is gone) is removed at the start.
//! Needs root (namespaces, TAP), `ip` (iproute2), mosquitto and
//! mosquitto-clients.
//!
//! ```text
//! tap-e2e --device PATH/TO/device-tap [--device-broker A.B.C.D:PORT]
//! ```
//!
//! `--device-broker` points the device somewhere else than the broker
//! (an address inside the namespace): the run must then fail, which
//! shows that the checks need the device's connection.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command as Process, ExitCode, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use device_protocol::{topics, Command, Reading, Status};

/// The namespace's side of the TAP device: the broker listens here.
const HOST_CIDR: &str = "10.42.0.1/24";
const BROKER_IP: &str = "10.42.0.1";
const BROKER_PORT: u16 = 1883;
/// The broker's TLS listener: the device's.
const BROKER_TLS_PORT: u16 = 8883;
/// The name on the broker's certificate, which the device checks.
const BROKER_NAME: &str = "broker.aimdb.test";
/// The device's embassy-net address.
const DEVICE_CIDR: &str = "10.42.0.2/24";
const TAP: &str = "aimdb-tap0";
const NS_PREFIX: &str = "aimdb-tap-";
/// A topic only this program uses: the observer is subscribed once a
/// probe published on it comes back.
const PROBE: &str = "tap/probe";
/// Bound on each wait.
const WAIT: Duration = Duration::from_secs(20);
/// Bound on the whole run (the watchdog).
const TOTAL: Duration = Duration::from_secs(60);
/// Readings to see before the commands.
const MIN_READINGS: usize = 10;

/// What must be undone, whatever happens: shared with the watchdog.
#[derive(Default)]
struct Teardown {
    ns: Option<String>,
    tap: bool,
    children: Vec<(&'static str, Child)>,
    dir: Option<PathBuf>,
}

impl Teardown {
    /// Idempotent: each step runs once.
    fn run(&mut self) {
        for (what, mut child) in self.children.drain(..).rev() {
            let pid = child.id();
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
                let _ = child.wait();
                println!("tap-e2e: teardown: killed {what} (pid {pid})");
            }
        }
        if let Some(ns) = self.ns.take() {
            if std::mem::take(&mut self.tap) {
                let _ = ip(&["-n", &ns, "tuntap", "del", "dev", TAP, "mode", "tap"]);
            }
            match ip(&["netns", "delete", &ns]) {
                Ok(()) => println!("tap-e2e: teardown: TAP {TAP} and namespace {ns} deleted"),
                Err(e) => eprintln!("tap-e2e: teardown: {e}"),
            }
        }
        if let Some(dir) = self.dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Runs teardown on drop (return, `?`, panic).
struct Guard(Arc<Mutex<Teardown>>);

impl Guard {
    fn with<R>(&self, f: impl FnOnce(&mut Teardown) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.with(Teardown::run);
    }
}

/// `ip ARGS`, failing with its stderr.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Process::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip {}: {e} (package iproute2)", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A command run inside namespace `ns`.
fn in_ns(ns: &str, program: impl AsRef<std::ffi::OsStr>) -> Process {
    let mut p = Process::new("ip");
    p.args(["netns", "exec", ns]).arg(program);
    p
}

/// Removes namespaces of earlier runs whose process is gone (a run killed
/// with SIGKILL could not tear down), with what still runs in them.
fn remove_stale() {
    let Ok(out) = Process::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(pid) = name.strip_prefix(NS_PREFIX) else {
            continue;
        };
        if pid.parse::<u32>().is_err() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if let Ok(out) = Process::new("ip").args(["netns", "pids", name]).output() {
            for p in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Process::new("kill").args(["-9", p]).status();
            }
        }
        let _ = ip(&["-n", name, "tuntap", "del", "dev", TAP, "mode", "tap"]);
        let _ = ip(&["netns", "delete", name]);
        let _ = std::fs::remove_dir_all(std::env::temp_dir().join(name));
        println!("tap-e2e: removed the namespace {name} of an earlier run");
    }
}

enum Line {
    Reading(Reading),
    Status(Status),
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
    let bytes = hex(payload.trim());
    let bad = || Line::Undecodable(line.to_string());
    Some(match topic {
        PROBE => Line::Probe,
        topics::READINGS => bytes
            .and_then(|b| postcard::from_bytes(&b).ok())
            .map_or_else(bad, Line::Reading),
        topics::STATUS => bytes
            .and_then(|b| postcard::from_bytes(&b).ok())
            .map_or_else(bad, Line::Status),
        _ => return None,
    })
}

#[derive(Default)]
struct Seen {
    readings: Vec<u32>,
    statuses: Vec<Status>,
    probes: u32,
    undecodable: Vec<String>,
}

struct Observer {
    lines: Receiver<Line>,
    seen: Seen,
}

impl Observer {
    fn take(&mut self, line: Line) {
        let s = &mut self.seen;
        match line {
            Line::Reading(r) => s.readings.push(r.seq),
            Line::Status(st) => s.statuses.push(st),
            Line::Probe => s.probes += 1,
            Line::Undecodable(l) => s.undecodable.push(l),
        }
    }

    /// Takes lines until `done` holds; fails after [`WAIT`], or at once if
    /// `device` (when running) exits.
    fn until(
        &mut self,
        what: &str,
        device: Option<&Arc<Mutex<Teardown>>>,
        done: impl Fn(&Seen) -> bool,
    ) -> Result<(), String> {
        let deadline = Instant::now() + WAIT;
        while !done(&self.seen) {
            if let Some(t) = device {
                let mut t = t.lock().unwrap_or_else(|p| p.into_inner());
                if let Some((_, c)) = t.children.iter_mut().find(|(w, _)| *w == "device-tap") {
                    if let Ok(Some(status)) = c.try_wait() {
                        return Err(format!(
                            "device-tap exited ({status}) while waiting for {what}"
                        ));
                    }
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(format!("no {what} within {} s", WAIT.as_secs()));
            }
            match self
                .lines
                .recv_timeout((deadline - now).min(Duration::from_millis(200)))
            {
                Ok(line) => self.take(line),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(format!("mosquitto_sub ended while waiting for {what}"))
                }
            }
        }
        Ok(())
    }

    fn drain(&mut self, d: Duration) {
        let deadline = Instant::now() + d;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) => self.take(line),
                Err(_) => break,
            }
        }
    }
}

/// A CA and the broker's certificate for [`BROKER_NAME`] (ECDSA P-256),
/// made with `openssl` in `dir` for this run: `ca.pem`, `ca.der` (the
/// device's copy), `broker.pem`, `broker.key`.
fn pki(dir: &Path) -> Result<(), String> {
    let run = |args: &[&str]| -> Result<(), String> {
        let out = Process::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("openssl: {e} (Debian package openssl)"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "openssl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    };
    let p256 = [
        "ecparam",
        "-name",
        "prime256v1",
        "-genkey",
        "-noout",
        "-out",
    ];
    run(&[&p256[..], &["ca.key"]].concat())?;
    run(&[
        "req",
        "-x509",
        "-new",
        "-key",
        "ca.key",
        "-subj",
        "/CN=aimdb tap CA",
        "-days",
        "2",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign",
        "-out",
        "ca.pem",
    ])?;
    run(&["x509", "-in", "ca.pem", "-outform", "der", "-out", "ca.der"])?;
    run(&[&p256[..], &["broker.key"]].concat())?;
    let subject = format!("/CN={BROKER_NAME}");
    let san = format!("subjectAltName=DNS:{BROKER_NAME}");
    run(&[
        "req",
        "-x509",
        "-new",
        "-key",
        "broker.key",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-subj",
        &subject,
        "-days",
        "2",
        "-addext",
        &san,
        "-addext",
        "basicConstraints=critical,CA:FALSE",
        "-out",
        "broker.pem",
    ])
}

/// `mosquitto_pub` in the namespace, QoS 1, bounded by [`WAIT`].
fn publish(ns: &str, topic: &str, payload: &[u8]) -> Result<(), String> {
    let mut child = in_ns(ns, "mosquitto_pub")
        .args(["-h", BROKER_IP, "-p", &BROKER_PORT.to_string()])
        .args(["-q", "1", "-t", topic, "-s"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("mosquitto_pub: {e}"))?;
    let written = child
        .stdin
        .take()
        .ok_or("mosquitto_pub: no stdin".to_string())
        .and_then(|mut s| s.write_all(payload).map_err(|e| e.to_string()));
    let deadline = Instant::now() + WAIT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("mosquitto_pub did not finish".into());
            }
        }
    };
    written?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("mosquitto_pub: {status}"))
    }
}

/// Sends `cmd` and waits for the status that shows it applied.
fn command(
    obs: &mut Observer,
    ns: &str,
    teardown: &Arc<Mutex<Teardown>>,
    cmd: Command,
    applied: impl Fn(&Status) -> bool,
) -> Result<Duration, String> {
    let before = obs.seen.statuses.last().map_or(0, |s| s.commands);
    let mut buf = [0u8; 16];
    let bytes = postcard::to_slice(&cmd, &mut buf).map_err(|e| e.to_string())?;
    let sent = Instant::now();
    publish(ns, topics::CMD, bytes)?;
    obs.until(&format!("status after {cmd:?}"), Some(teardown), |s| {
        s.statuses.last().is_some_and(|st| st.commands > before)
    })?;
    let rtt = sent.elapsed();
    let st = obs.seen.statuses.last().copied().ok_or("no status")?;
    if st.commands != before + 1 || !applied(&st) {
        return Err(format!(
            "{cmd:?} gave status {st:?} (before: {before} commands)"
        ));
    }
    println!("tap-e2e: {cmd:?} round trip {rtt:.1?}: {st:?}");
    Ok(rtt)
}

struct Args {
    device: PathBuf,
    device_broker: String,
}

const USAGE: &str = "usage: tap-e2e --device PATH/TO/device-tap [--device-broker A.B.C.D:PORT]";

fn parse_args() -> Result<Args, String> {
    let mut device = None;
    let mut device_broker = format!("{BROKER_IP}:{BROKER_TLS_PORT}");
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let value = it.next().ok_or(format!("{a} needs a value\n{USAGE}"))?;
        match a.as_str() {
            "--device" => device = Some(PathBuf::from(value)),
            "--device-broker" => device_broker = value,
            _ => return Err(format!("unknown argument {a}\n{USAGE}")),
        }
    }
    Ok(Args {
        device: device.ok_or(USAGE)?,
        device_broker,
    })
}

fn main() -> ExitCode {
    let started = Instant::now();
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let teardown = Arc::new(Mutex::new(Teardown::default()));
    {
        // The watchdog: past TOTAL, tear down from here and exit.
        let teardown = Arc::clone(&teardown);
        std::thread::spawn(move || {
            std::thread::sleep(TOTAL);
            eprintln!("tap-e2e: FAIL: still running after {} s", TOTAL.as_secs());
            teardown.lock().unwrap_or_else(|p| p.into_inner()).run();
            std::process::exit(1);
        });
    }
    let result = run(&args, Guard(Arc::clone(&teardown)));
    match result {
        Ok(summary) => {
            println!(
                "tap-e2e: passed in {:.1} s: {summary}",
                started.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tap-e2e: FAIL: {e}");
            println!(
                "tap-e2e: failed after {:.1} s",
                started.elapsed().as_secs_f64()
            );
            ExitCode::FAILURE
        }
    }
}

/// Everything after argument parsing; `guard` tears down when it returns.
fn run(args: &Args, guard: Guard) -> Result<String, String> {
    let device = std::fs::canonicalize(&args.device)
        .map_err(|e| format!("{}: {e}", args.device.display()))?;
    remove_stale();

    // 1. The namespace, the TAP device in it, the broker.
    let t0 = Instant::now();
    let ns = format!("{NS_PREFIX}{}", std::process::id());
    ip(&["netns", "add", &ns])?;
    guard.with(|t| t.ns = Some(ns.clone()));
    ip(&["-n", &ns, "link", "set", "lo", "up"])?;
    ip(&["-n", &ns, "tuntap", "add", "dev", TAP, "mode", "tap"])?;
    guard.with(|t| t.tap = true);
    ip(&["-n", &ns, "addr", "add", HOST_CIDR, "dev", TAP])?;
    ip(&["-n", &ns, "link", "set", TAP, "up"])?;

    // Named as the namespace, so `remove_stale` finds it too.
    let dir = std::env::temp_dir().join(&ns);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    guard.with(|t| t.dir = Some(dir.clone()));
    pki(&dir)?;
    let conf = dir.join("mosquitto.conf");
    let file = |name: &str| dir.join(name).display().to_string();
    std::fs::write(
        &conf,
        format!(
            "user root\nper_listener_settings false\nallow_anonymous true\npersistence false\n\
             listener {BROKER_PORT} {BROKER_IP}\n\
             listener {BROKER_TLS_PORT} {BROKER_IP}\ncafile {}\ncertfile {}\nkeyfile {}\n\
             tls_version tlsv1.3\n",
            file("ca.pem"),
            file("broker.pem"),
            file("broker.key"),
        ),
    )
    .map_err(|e| format!("{}: {e}", conf.display()))?;
    let log = std::fs::File::create(dir.join("mosquitto.log")).map_err(|e| e.to_string())?;
    let broker = in_ns(&ns, "/usr/sbin/mosquitto")
        .arg("-c")
        .arg(&conf)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .spawn()
        .map_err(|e| format!("mosquitto: {e} (Debian package mosquitto; make deps)"))?;
    // `ip netns exec` execs the program: this PID is mosquitto's.
    let broker_pid = broker.id();
    guard.with(|t| t.children.push(("mosquitto", broker)));
    println!("tap-e2e: namespace {ns}, {TAP} {HOST_CIDR}, mosquitto pid {broker_pid} on {BROKER_IP}:{BROKER_PORT}");

    // 2. The observer, started once the broker takes a publish (it exits
    // if it cannot connect), and subscribed once a probe comes back.
    let deadline = Instant::now() + WAIT;
    while let Err(e) = publish(&ns, PROBE, b"probe") {
        if Instant::now() > deadline {
            return Err(format!("mosquitto not reachable in {ns} ({e})"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut sub = in_ns(&ns, "mosquitto_sub")
        .args(["-h", BROKER_IP, "-p", &BROKER_PORT.to_string()])
        .args(["-V", "mqttv311", "-q", "1"])
        .args(["-t", topics::READINGS, "-t", topics::STATUS, "-t", PROBE])
        .args(["-F", "%t %x"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("mosquitto_sub: {e} (Debian package mosquitto-clients)"))?;
    let out = sub.stdout.take().ok_or("mosquitto_sub: no stdout")?;
    guard.with(|t| t.children.push(("mosquitto_sub", sub)));
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if let Some(l) = parse(&line) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        }
    });
    let mut obs = Observer {
        lines,
        seen: Seen::default(),
    };
    let deadline = Instant::now() + WAIT;
    while obs.seen.probes == 0 {
        if Instant::now() > deadline {
            return Err("the observer never received a probe".into());
        }
        publish(&ns, PROBE, b"probe")?;
        obs.drain(Duration::from_millis(100));
    }
    let setup = t0.elapsed();

    // 3. The device.
    let t1 = Instant::now();
    let dev = in_ns(&ns, &device)
        .args([
            "--tap",
            TAP,
            "--address",
            DEVICE_CIDR,
            "--broker",
            &args.device_broker,
            "--tls-ca",
            &dir.join("ca.der").display().to_string(),
            "--tls-name",
            BROKER_NAME,
        ])
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| format!("{}: {e}", device.display()))?;
    println!(
        "tap-e2e: device-tap pid {} ({DEVICE_CIDR} on {TAP}, broker {})",
        dev.id(),
        args.device_broker
    );
    guard.with(|t| t.children.push(("device-tap", dev)));
    let teardown = &guard.0;
    obs.until(
        &format!("boot status and {MIN_READINGS} readings"),
        Some(teardown),
        |s| !s.statuses.is_empty() && s.readings.len() >= MIN_READINGS,
    )?;
    let first = t1.elapsed();
    println!(
        "tap-e2e: device up: {} readings and the boot status {:.1?} after start",
        obs.seen.readings.len(),
        first
    );

    // 4. Commands round trip.
    let id = std::process::id();
    let ping = command(&mut obs, &ns, teardown, Command::Ping(id), |s| {
        s.last_ping == id
    })?;
    let led = command(&mut obs, &ns, teardown, Command::SetLed(true), |s| s.led)?;

    // 5. Readings in order, nothing undecodable.
    obs.drain(Duration::from_millis(200));
    let seqs = &obs.seen.readings;
    if let Some(w) = seqs.windows(2).find(|w| w[1] <= w[0]) {
        return Err(format!(
            "readings out of order: seq {} after {}",
            w[1], w[0]
        ));
    }
    if !obs.seen.undecodable.is_empty() {
        return Err(format!("undecodable: {:?}", obs.seen.undecodable));
    }
    Ok(format!(
        "namespace and broker up in {setup:.1?}; device connected and publishing in {first:.1?}; \
         {} readings (seq {}..={}) in order; Ping and SetLed round trips {ping:.1?} and {led:.1?}",
        seqs.len(),
        seqs.first().copied().unwrap_or(0),
        seqs.last().copied().unwrap_or(0),
    ))
}
