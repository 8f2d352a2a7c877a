//! `--demo`: an operator on the broker, built from the same connector as
//! the gateway (a second MQTT client): it sends commands to the device and
//! checks what comes back.
//!
//! - each command round-trips: broker → gateway → UART → device, and the
//!   device's status comes back device → gateway → broker;
//! - readings arrive exactly once and in order (consecutive `seq` from the
//!   first one seen: the operator subscribes after the device started).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use aimdb_connectors::mqtt::{Config, Counters, Mqtt, Parts};
use aimdb_connectors::tokio_io::TcpConnect;
use aimdb_connectors::tokio_io::TokioClock;
use aimdb_core::codec::Json;
use aimdb_core::inbound;
use aimdb_core::inbound::{Dispatch, Route};
use aimdb_core::outbound;
use aimdb_core::outbound::Routes;
use aimdb_core::presence::LinkState;
use aimdb_core::record::{Latest, Mailbox, Record, RecvError, Ring};
use aimdb_core::sync::HostRawMutex;
use aimdb_core::sync::Readiness;
use device_protocol::{Command, Reading, Status};

static READINGS: Record<HostRawMutex, Ring<Reading, 1024>, 1> = Record::new("op/readings");
static STATUS: Record<HostRawMutex, Latest<Status>, 1> = Record::new("op/status");
static CMD: Record<HostRawMutex, Mailbox<Command>, 1> = Record::new("op/cmd");
static DEVICE_PRESENCE: Record<HostRawMutex, Latest<LinkState>, 1> =
    Record::new("op/device-presence");
static GATEWAY_PRESENCE: Record<HostRawMutex, Latest<LinkState>, 1> =
    Record::new("op/gateway-presence");
static READY: Readiness<1> = Readiness::new();
static COUNTERS: Counters = Counters::new();

/// What the demo saw.
#[derive(Debug, Default)]
pub struct Report {
    pub round_trips: Vec<(Command, Duration)>,
    pub readings: u32,
    pub first_seq: Option<u32>,
    pub last_seq: Option<u32>,
    /// Readings out of order or repeated (must be 0).
    pub out_of_order: u32,
    /// Readings the broker path lost (`Ring` lag; must be 0).
    pub lost: u64,
    /// Presence changes seen: (`"device"` or `"gateway"`, the state).
    pub presence: Vec<(&'static str, LinkState)>,
}

impl Report {
    pub fn ok(&self, min_readings: u32) -> bool {
        let online = |who| {
            self.presence
                .iter()
                .any(|(w, p)| *w == who && p.is_online())
        };
        self.round_trips.len() == 3
            && online("device")
            && online("gateway")
            && self.readings >= min_readings
            && self.out_of_order == 0
            && self.lost == 0
    }
}

/// Runs the operator script for about `seconds`, then returns what it saw.
pub async fn run(
    broker: SocketAddr,
    credentials: Option<(String, String)>,
    prefix: &str,
    seconds: u64,
    min_readings: u32,
) -> Report {
    let (readings_topic, status_topic) = (format!("{prefix}/readings"), format!("{prefix}/status"));
    let device_presence = format!("{prefix}/presence");
    let gateway_presence = crate::bridge::gateway_presence_topic(prefix);
    let links: [(&str, &(dyn Route + Sync)); 4] = [
        (
            &readings_topic,
            &inbound::Link::new(&READINGS, Json).with_max_payload(256),
        ),
        (
            &status_topic,
            &inbound::Link::new(&STATUS, Json).with_max_payload(256),
        ),
        (
            &device_presence,
            &inbound::Link::new(&DEVICE_PRESENCE, Json).with_max_payload(128),
        ),
        (
            &gateway_presence,
            &inbound::Link::new(&GATEWAY_PRESENCE, Json).with_max_payload(128),
        ),
    ];
    let mut b = Dispatch::<4, 4>::builder();
    for (t, l) in links {
        b.link(t, l);
    }
    let mut dispatch = b.build().expect("operator inbound table");
    let cmd_topic = format!("{prefix}/cmd");
    let mut cmd = outbound::Link::new(CMD.subscribe().expect("reader"), cmd_topic.as_str(), Json);
    let mut payload = [0u8; 128];
    let mut b = Routes::<_, 1, 1>::builder(&READY, &mut payload);
    b.link(&mut cmd);
    let mut routes = b.build().expect("operator outbound table");
    let mut config = Config::new("aimdb-demo-operator");
    config.credentials = credentials
        .as_ref()
        .map(|(u, p)| (u.as_str(), p.as_bytes()));
    let (mut rx, mut tx) = (vec![0u8; 2048], vec![0u8; 4096]);
    let parts = Parts {
        connect: TcpConnect::new(broker),
        clock: TokioClock::new(),
        rx: &mut rx,
        tx: &mut tx,
        counters: &COUNTERS,
    };
    let mut client = Mqtt::new(config, parts).expect("MQTT configuration");

    let mut readings = READINGS.subscribe().expect("reader");
    let mut status = STATUS.subscribe().expect("reader");
    let mut device = DEVICE_PRESENCE.subscribe().expect("reader");
    let mut gateway = GATEWAY_PRESENCE.subscribe().expect("reader");
    let seen = std::sync::Mutex::new(Vec::new());
    // Every presence change, printed as it arrives.
    let watch = async {
        loop {
            let (who, p) = tokio::select! {
                p = device.recv() => ("device", p),
                p = gateway.recv() => ("gateway", p),
            };
            let Ok(p) = p else { continue };
            println!("demo: presence: {who} {p:?}");
            seen.lock().unwrap().push((who, p));
        }
    };
    let script = async {
        let mut report = Report::default();
        let deadline = Instant::now() + Duration::from_secs(seconds);
        // Wait until subscribed (the connector counts itself connected
        // after its SUBACKs).
        while !COUNTERS.is_connected() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let check = |r: Result<Reading, RecvError>, report: &mut Report| match r {
            Ok(r) => {
                report.readings += 1;
                match report.last_seq {
                    Some(last) if r.seq != last + 1 => report.out_of_order += 1,
                    None => report.first_seq = Some(r.seq),
                    _ => {}
                }
                report.last_seq = Some(r.seq);
            }
            Err(RecvError::Lagged(n)) => report.lost += n,
            Err(_) => {}
        };
        for (i, command) in [
            Command::SetLed(true),
            Command::SetInterval(20),
            Command::Ping(4242),
        ]
        .into_iter()
        .enumerate()
        {
            let sent = Instant::now();
            CMD.write(command);
            loop {
                tokio::select! {
                    r = readings.recv() => check(r, &mut report),
                    s = status.recv() => {
                        let Ok(s) = s else { continue };
                        let applied = match command {
                            Command::SetLed(on) => s.led == on,
                            Command::SetInterval(ms) => s.interval_ms == ms,
                            Command::Ping(id) => s.last_ping == id,
                        };
                        if applied {
                            let rtt = sent.elapsed();
                            println!("demo: command {} {command:?} round-tripped in {rtt:?}: {s:?}", i + 1);
                            report.round_trips.push((command, rtt));
                            break;
                        }
                    }
                    _ = tokio::time::sleep_until(deadline.into()) => return report,
                }
            }
        }
        // Then readings until the time is up (and at least the minimum).
        loop {
            tokio::select! {
                r = readings.recv() => check(r, &mut report),
                _ = tokio::time::sleep_until(deadline.into()) => {
                    if report.readings >= min_readings || Instant::now() > deadline + Duration::from_secs(30) {
                        return report;
                    }
                }
            }
        }
    };
    let mut report = tokio::select! {
        report = script => report,
        () = watch => unreachable!("the presence watch never ends"),
        stopped = client.run(&mut dispatch, &mut routes) => {
            eprintln!("demo: operator MQTT client stopped: {stopped}");
            Report::default()
        }
    };
    report.presence = seen.into_inner().unwrap();
    report
}
