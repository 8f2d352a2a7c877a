//! The gateway: bridges the demo device's UART to MQTT.
//!
//! ```text
//!  QEMU (device firmware) ══UART0 over TCP══► gateway ══MQTT══► broker (a mosquitto it starts, or --broker)
//! ```
//!
//! The device side is the same framed-stream connector the firmware runs
//! (`aimdb_connectors::framed`), here over a tokio `TcpStream`; the MQTT
//! side is `aimdb_connectors::mqtt`. Each runs as one task spawned on
//! tokio's multi-thread runtime: one task per connector, not per route.
//!
//! Usage:
//!
//! ```text
//! gateway [--qemu FIRMWARE.elf | --listen ADDR | --serial HOST:PORT]
//!         [--broker mqtt://HOST:PORT] [--username U --password P]
//!         [--tls-ca CA.pem [--tls-server-name NAME]]
//!         [--prefix aimdb/dev7] [--seconds N] [--demo] [--min-readings N]
//!         [--backlog FILE]
//! ```
//!
//! - `--qemu ELF`: start the firmware under QEMU, its UART0 connected to a
//!   loopback port the gateway listens on (killed on exit);
//! - `--listen ADDR`: wait for a device (e.g. QEMU started by hand with
//!   `-serial tcp:ADDR`); `--serial HOST:PORT`: connect to one that
//!   listens (`-serial tcp::PORT,server=on`);
//! - without `--broker`, the gateway starts mosquitto on a free loopback
//!   port;
//! - `--tls-ca CA.pem`: TLS to the `--broker`, trusting the CA
//!   certificate(s) in the PEM file; the broker's certificate must be valid
//!   for `--tls-server-name` (default: the `--broker` host). The port
//!   defaults to 8883. Not with `--demo` (its operator client speaks plain
//!   MQTT);
//! - `--demo`: also run an operator client that sends three commands and
//!   checks readings; exits 0 only if every check held;
//! - `--seconds N`: stop after N seconds (default: run until Ctrl-C).
//! - `--backlog FILE`: the readings go through a durable backlog in FILE
//!   (1 MiB, made on first use): stored as they arrive, published from it
//!   and removed once the broker acknowledged them, so a broker outage or
//!   a gateway killed and restarted loses none it stored. Each reading
//!   then carries the `aimdb-id` user property: the device's own id when
//!   the device sends it from its backlog (`device-backlog`; the gateway
//!   then acknowledges a reading to the device only once it is in FILE),
//!   else the gateway's (its boot, a sequence).

mod bridge;
mod manifest;
mod operator;

use gateway::{broker, qemu};

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bridge::DeviceLink;

struct Args {
    qemu: Option<PathBuf>,
    listen: Option<String>,
    serial: Option<String>,
    broker: Option<String>,
    username: Option<String>,
    password: Option<String>,
    tls_ca: Option<PathBuf>,
    tls_server_name: Option<String>,
    prefix: String,
    seconds: Option<u64>,
    demo: bool,
    min_readings: u32,
    backlog: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        qemu: None,
        listen: None,
        serial: None,
        broker: None,
        username: None,
        password: None,
        tls_ca: None,
        tls_server_name: None,
        prefix: "aimdb/dev7".into(),
        seconds: None,
        demo: false,
        min_readings: 20,
        backlog: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--qemu" => a.qemu = Some(value()?.into()),
            "--listen" => a.listen = Some(value()?),
            "--serial" => a.serial = Some(value()?),
            "--broker" => a.broker = Some(value()?),
            "--username" => a.username = Some(value()?),
            "--password" => a.password = Some(value()?),
            "--tls-ca" => a.tls_ca = Some(value()?.into()),
            "--backlog" => a.backlog = Some(value()?.into()),
            "--tls-server-name" => a.tls_server_name = Some(value()?),
            "--prefix" => a.prefix = value()?,
            "--seconds" => {
                a.seconds = Some(value()?.parse().map_err(|e| format!("--seconds: {e}"))?)
            }
            "--min-readings" => {
                a.min_readings = value()?
                    .parse()
                    .map_err(|e| format!("--min-readings: {e}"))?
            }
            "--demo" => a.demo = true,
            "-h" | "--help" => {
                println!("{}", USAGE);
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    let sources = [a.qemu.is_some(), a.listen.is_some(), a.serial.is_some()];
    if sources.iter().filter(|s| **s).count() != 1 {
        return Err(format!(
            "give exactly one of --qemu, --listen, --serial\n{USAGE}"
        ));
    }
    if a.username.is_some() != a.password.is_some() {
        return Err("--username and --password go together".into());
    }
    if a.tls_ca.is_some() && a.broker.is_none() {
        return Err("--tls-ca needs --broker (the broker the gateway starts has no TLS)".into());
    }
    if a.tls_ca.is_some() && a.demo {
        return Err("--tls-ca and --demo: the demo operator speaks plain MQTT".into());
    }
    if a.tls_server_name.is_some() && a.tls_ca.is_none() {
        return Err("--tls-server-name goes with --tls-ca".into());
    }
    Ok(a)
}

const USAGE: &str = "usage: gateway [--qemu ELF | --listen ADDR | --serial HOST:PORT] \
[--broker mqtt://HOST:PORT] [--username U --password P] \
[--tls-ca CA.pem [--tls-server-name NAME]] [--prefix P] [--seconds N] [--demo] [--min-readings N] [--backlog FILE]";

fn broker_hostport(url: &str) -> &str {
    url.strip_prefix("mqtt://").unwrap_or(url)
}

fn broker_addr(url: &str, default_port: u16) -> Result<SocketAddr, String> {
    let hostport = broker_hostport(url);
    let hostport = if hostport.contains(':') {
        hostport.to_string()
    } else {
        format!("{hostport}:{default_port}")
    };
    hostport
        .to_socket_addrs()
        .map_err(|e| format!("--broker {url}: {e}"))?
        .next()
        .ok_or(format!("--broker {url}: no address"))
}

/// The TLS transport for `--tls-ca`: the CA file and the server name
/// (`--tls-server-name`, else the `--broker` host).
fn tls_connect(
    args: &Args,
    ca: &std::path::Path,
    addr: SocketAddr,
) -> Result<aimdb_connectors::mqtt::TlsConnect, String> {
    let pem = std::fs::read(ca).map_err(|e| format!("--tls-ca {}: {e}", ca.display()))?;
    let name = match &args.tls_server_name {
        Some(n) => n.clone(),
        None => {
            let hostport = broker_hostport(args.broker.as_deref().unwrap_or_default());
            // `host`, `host:port`, `[v6]:port`.
            let host = match hostport.rsplit_once(':') {
                Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok() => h,
                _ => hostport,
            };
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .to_string()
        }
    };
    aimdb_connectors::mqtt::TlsConnect::with_ca_pem(addr, &name, &pem)
        .map_err(|e| format!("--tls-ca {} / server name {name:?}: {e}", ca.display()))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("gateway: {e}");
            return ExitCode::from(2);
        }
    };
    // tokio's default multi-thread runtime: each connector is one spawned
    // task (its tables and links are built inside it, over `static`
    // records with a per-record host lock), and the records are written
    // from whichever worker runs the other side.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(run(args))
}

async fn run(args: Args) -> ExitCode {
    let default_port = if args.tls_ca.is_some() { 8883 } else { 1883 };
    // Without `--broker`, a mosquitto child; it lives (and is stopped by
    // its PID) with this guard.
    let mut _broker = None;
    let addr = match &args.broker {
        Some(url) => broker_addr(url, default_port),
        None => broker::start().map(|b| {
            let a = b.addr();
            _broker = Some(b);
            a
        }),
    };
    let addr = match addr {
        Ok(a) => a,
        Err(e) => {
            eprintln!("gateway: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "gateway: MQTT broker {addr} ({}), topics {}/{{readings,status,cmd,presence,gateway/presence}}",
        if args.broker.is_some() {
            "external"
        } else {
            "mosquitto started by the gateway"
        },
        args.prefix
    );
    let credentials = args.username.clone().zip(args.password.clone());
    let tls = match &args.tls_ca {
        None => None,
        Some(ca) => match tls_connect(&args, ca, addr) {
            Ok(t) => {
                println!(
                    "gateway: TLS to the broker, CA {}, server name {}",
                    ca.display(),
                    t.server_name().to_str()
                );
                Some(t)
            }
            Err(e) => {
                eprintln!("gateway: {e}");
                return ExitCode::FAILURE;
            }
        },
    };

    let mut _qemu = None;
    let link = if let Some(elf) = &args.qemu {
        let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("gateway: device listener: {e}");
                return ExitCode::FAILURE;
            }
        };
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
        match qemu::spawn(elf, port) {
            Ok(child) => {
                println!(
                    "gateway: QEMU pid {} running {}, UART0 → 127.0.0.1:{port}",
                    child.id().unwrap_or(0),
                    elf.display()
                );
                _qemu = Some(child);
            }
            Err(e) => {
                eprintln!("gateway: cannot start qemu-system-arm: {e}");
                return ExitCode::FAILURE;
            }
        }
        DeviceLink::Listen(listener)
    } else if let Some(addr) = &args.listen {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => DeviceLink::Listen(l),
            Err(e) => {
                eprintln!("gateway: --listen {addr}: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        DeviceLink::Connect(args.serial.clone().unwrap_or_default())
    };

    let (device_readers, mqtt_readers, (relay_link, relay_answers)) =
        bridge::Readers::subscribe().split();
    tokio::spawn(bridge::device(link, device_readers, args.backlog.is_some()));
    tokio::spawn(manifest::relay(relay_link, relay_answers));
    let mqtt_broker = bridge::Broker {
        addr,
        credentials: credentials.clone(),
        prefix: args.prefix.clone(),
        tls,
        backlog: args.backlog.clone(),
    };
    // Stopped on purpose at exit: the gateway says `offline` itself.
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mqtt_task = tokio::spawn(async move {
        let stop = async {
            let _ = stopped.await;
        };
        let why = bridge::mqtt(mqtt_broker, mqtt_readers, stop).await;
        eprintln!("gateway: MQTT connector stopped: {why}");
    });
    tokio::spawn(async {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut notices = bridge::Notices::new();
        tick.tick().await;
        loop {
            tick.tick().await;
            for line in notices.poll() {
                println!("gateway: {line}");
            }
            println!("gateway: {}", bridge::status_line());
        }
    });

    let started = Instant::now();
    let code = if args.demo {
        let seconds = args.seconds.unwrap_or(5);
        let report =
            operator::run(addr, credentials, &args.prefix, seconds, args.min_readings).await;
        let ok = report.ok(args.min_readings);
        println!(
            "demo: {} command round trips, {} readings at the operator (seq {}..={}), {} out of order, {} lost",
            report.round_trips.len(),
            report.readings,
            report.first_seq.map_or("-".into(), |s| s.to_string()),
            report.last_seq.map_or("-".into(), |s| s.to_string()),
            report.out_of_order,
            report.lost,
        );
        // Looking inside: the `aimdb` tool against the device, through
        // this gateway, from its descriptions alone.
        let looked = look_inside(addr, &args.prefix).await;
        if ok && looked {
            ExitCode::SUCCESS
        } else {
            eprintln!("demo: FAILED (need 3 round trips, the device and the gateway seen online, at least {} readings, none out of order or lost, and `aimdb ls` and `aimdb watch` to succeed)", args.min_readings);
            ExitCode::FAILURE
        }
    } else {
        match args.seconds {
            Some(s) => tokio::time::sleep(Duration::from_secs(s)).await,
            None => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
        ExitCode::SUCCESS
    };
    println!(
        "gateway: after {:.1} s: {}",
        started.elapsed().as_secs_f64(),
        bridge::status_line()
    );
    let _ = stop.send(());
    if tokio::time::timeout(Duration::from_secs(6), mqtt_task)
        .await
        .is_err()
    {
        eprintln!("gateway: the MQTT connector did not stop within 6 s");
    }
    if let Some(mut child) = _qemu.take() {
        let _ = child.kill().await;
    }
    code
}

/// Runs `aimdb nodes`, `aimdb ls` and a two-second `aimdb watch` against
/// the device behind `prefix` and prints them; whether all succeeded and
/// the device's manifest (published by this gateway) lists its records.
/// The tool is the `aimdb` binary built beside this one (`cargo build
/// --release -p aimdb-cli`; `make demo` does).
async fn look_inside(broker: SocketAddr, prefix: &str) -> bool {
    let Ok(exe) = std::env::current_exe() else {
        return false;
    };
    let tool = exe.with_file_name("aimdb");
    let url = format!("mqtt://{broker}");
    let mut all = true;
    // The manifest, read the way `aimdb nodes` reads it.
    let nodes = tokio::process::Command::new(&tool)
        .args(["--mqtt", &url, "--json", "nodes"])
        .kill_on_drop(true)
        .output();
    let records = match tokio::time::timeout(Duration::from_secs(20), nodes).await {
        Ok(Ok(o)) => serde_json::from_slice::<serde_json::Value>(&o.stdout)
            .ok()
            .and_then(|v| {
                v.as_array()?
                    .iter()
                    .find(|n| n["node"] == prefix && n["role"] == "node")
                    .map(|n| n["manifest"]["records"].as_array().map_or(0, Vec::len))
            })
            .unwrap_or(0),
        _ => 0,
    };
    if records == 0 {
        eprintln!("demo: no manifest for {prefix} in `aimdb nodes --json`");
        all = false;
    }
    for args in [
        &["nodes"][..],
        &["ls"][..],
        &["watch", "--seconds", "2", "readings", "status"][..],
    ] {
        let node: &[&str] = if args[0] == "nodes" {
            &[]
        } else {
            &["--node", prefix]
        };
        println!(
            "demo: $ aimdb {}{}",
            node.iter().map(|a| format!("{a} ")).collect::<String>(),
            args.join(" ")
        );
        let run = tokio::process::Command::new(&tool)
            .args(["--mqtt", &url])
            .args(node)
            .args(args)
            .kill_on_drop(true)
            .status();
        match tokio::time::timeout(Duration::from_secs(20), run).await {
            Ok(Ok(status)) if status.success() => {}
            Ok(Ok(status)) => {
                eprintln!("demo: aimdb {}: {status}", args[0]);
                all = false;
            }
            Ok(Err(e)) => {
                eprintln!("demo: cannot run {}: {e}", tool.display());
                all = false;
            }
            Err(_) => {
                eprintln!("demo: aimdb {} did not finish within 20 s", args[0]);
                all = false;
            }
        }
    }
    all
}
