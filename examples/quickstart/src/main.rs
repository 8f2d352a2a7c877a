//! Quickstart: a "device" and a "host" in one process, each with its own
//! records, connected by an in-memory frame pipe.
//!
//! ```text
//!  device: TEMPS (Ring) ──► outbound::Routes ──► pipe ──► inbound::Dispatch ──► host: readings (keyed by device id)
//!  device: STATUS (Latest) ─┘                                              └──► host: status
//!  device: CMD (Mailbox) ◄── inbound::Dispatch ◄── pipe ◄── outbound::Routes ◄── host: COMMAND (Mailbox)
//! ```
//!
//! The device publishes ten readings, the host sends one command, the device
//! applies it and answers with its status. Run with
//! `cargo run -p quickstart` (`make quickstart`; CI runs it).

use std::fmt::Write as _;
use std::time::Duration;

use aimdb_core::codec::Postcard;
use aimdb_core::inbound;
use aimdb_core::inbound::{Dispatch, KeyedLink};
use aimdb_core::outbound;
use aimdb_core::outbound::{Routes, TopicWriter, Written};
use aimdb_core::record::{KeyedVec, Latest, Mailbox, Reader, Record, Ring};
use aimdb_core::sync::Readiness;
// The per-record host lock: records written from any tokio worker.
use aimdb_core::sync::HostRawMutex;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct Reading {
    device: u16,
    seq: u32,
    centi_celsius: i32,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
enum Command {
    SetLed(bool),
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct Status {
    led: bool,
    commands: u32,
}

// Device side: what firmware would keep in statics.
static TEMPS: Record<HostRawMutex, Ring<Reading, 16>, 1> = Record::new("temps");
static STATUS: Record<HostRawMutex, Latest<Status>, 1> = Record::new("status");
static CMD: Record<HostRawMutex, Mailbox<Command>, 1> = Record::new("cmd");
static DEVICE_READY: Readiness<1> = Readiness::new();

// Host side.
static COMMAND: Record<HostRawMutex, Mailbox<Command>, 1> = Record::new("command");
static HOST_STATUS: Record<HostRawMutex, Latest<Status>, 1> = Record::new("host-status");
static HOST_READY: Readiness<1> = Readiness::new();

type Frame = (String, Vec<u8>);

fn reading_topic(r: &Reading, w: &mut TopicWriter<'_>) -> std::fmt::Result {
    write!(w, "sensors/dev{}/temp", r.device)
}

type Temps = Reader<'static, HostRawMutex, Ring<Reading, 16>, 1>;
type StatusReader = Reader<'static, HostRawMutex, Latest<Status>, 1>;

/// The device's connector task: one future driving both directions. Its
/// readers are subscribed by the caller before the application starts
/// writing (a `Ring` reader sees the values written after it subscribed).
async fn device(
    tx: mpsc::Sender<Frame>,
    mut rx: mpsc::Receiver<Frame>,
    (temps, status): (Temps, StatusReader),
) {
    let mut temps = outbound::Link::new(temps, Written::new(reading_topic), Postcard);
    let mut status = outbound::Link::new(status, "status/dev7", Postcard);
    let (mut payload, mut topic) = ([0u8; 64], [0u8; 64]);
    let mut b = Routes::<_, 1, 4>::builder(&DEVICE_READY, &mut payload).written_topics(&mut topic);
    b.link(&mut temps).link(&mut status);
    let mut out = b.build().expect("outbound config");

    let cmd_link = inbound::Link::new(&CMD, Postcard);
    let mut b = Dispatch::<4, 8>::builder();
    b.link("cmd/dev7", &cmd_link);
    let mut inbound = b.build().expect("inbound config");

    loop {
        tokio::select! {
            m = out.next() => {
                if tx.send((m.topic.to_string(), m.payload.to_vec())).await.is_err() {
                    break;
                }
            }
            f = rx.recv() => match f {
                Some((t, p)) => { let _ = inbound.dispatch(t.as_bytes(), &p); }
                None => break,
            },
        }
    }
}

/// The device's application: sensor loop and command handler.
async fn device_app() {
    let mut cmds = CMD.subscribe().expect("reader");
    let mut st = Status {
        led: false,
        commands: 0,
    };
    STATUS.write(st.clone());
    for seq in 0..10 {
        TEMPS.write(Reading {
            device: 7,
            seq,
            centi_celsius: 2150 + seq as i32 * 3,
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if let Ok(Command::SetLed(on)) = cmds.recv().await {
        st.led = on;
        st.commands += 1;
        STATUS.write(st);
    }
}

// tokio's default multi-thread runtime: each connector is a spawned task,
// its tables built inside it over `static` (or leaked) records.
#[tokio::main]
async fn main() {
    let (dev_tx, host_rx) = mpsc::channel::<Frame>(32);
    let (host_tx, dev_rx) = mpsc::channel::<Frame>(32);

    let readings: &'static KeyedVec<HostRawMutex, Ring<Reading, 16>, 1> =
        Box::leak(Box::new(KeyedVec::with_capacity("readings", 8)));
    let host_task = tokio::spawn(async move {
        let (mut payload, mut topic) = ([0u8; 64], [0u8; 64]);
        let mut cmd_out =
            outbound::Link::new(COMMAND.subscribe().expect("reader"), "cmd/dev7", Postcard);
        let mut b =
            Routes::<_, 1, 2>::builder(&HOST_READY, &mut payload).written_topics(&mut topic);
        b.link(&mut cmd_out);
        let mut out = b.build().expect("outbound config");

        let temp_link = KeyedLink::new(readings, Postcard);
        let status_link = inbound::Link::new(&HOST_STATUS, Postcard);
        let mut b = Dispatch::<4, 8>::builder();
        b.link_keyed("sensors/+/temp", 1, &temp_link)
            .link("status/dev7", &status_link);
        let mut inbound = b.build().expect("inbound config");
        let mut host_rx = host_rx;
        let mut status = HOST_STATUS.subscribe().expect("reader");
        let mut received = 0u32;
        loop {
            tokio::select! {
                m = out.next() => {
                    println!("host   -> {} ({} bytes)", m.topic, m.payload.len());
                    let _ = host_tx.send((m.topic.to_string(), m.payload.to_vec())).await;
                }
                Some((t, p)) = host_rx.recv() => {
                    match inbound.dispatch(t.as_bytes(), &p) {
                        Ok(_) => received += 1,
                        Err(e) => println!("host   rejected {t}: {e}"),
                    }
                    if t.starts_with("sensors/") && readings.get("dev7").map(|d| d.record().writes()) == Some(10) {
                        println!("host   <- 10 readings from dev7; sending SetLed(true)");
                        COMMAND.write(Command::SetLed(true));
                    }
                    if let Ok(s) = status.try_recv() {
                        println!("host   <- status {s:?}");
                        if s.commands == 1 {
                            return (received, inbound.stats().total_rejected(), s);
                        }
                    }
                }
            }
        }
    });

    let readers = (
        TEMPS.subscribe().expect("reader"),
        STATUS.subscribe().expect("reader"),
    );
    let dev = tokio::spawn(device(dev_tx, dev_rx, readers));
    let app = tokio::spawn(device_app());
    let (received, rejected, status) = tokio::time::timeout(Duration::from_secs(10), host_task)
        .await
        .expect("demo finished in time")
        .expect("host task");
    app.await.expect("device app");
    dev.abort();

    let dev7 = readings.get("dev7").expect("device 7 seen");
    println!("--- summary ---");
    println!("frames received by host: {received} (rejected: {rejected})");
    println!(
        "devices seen: {}, readings written for dev7: {}",
        readings.len(),
        dev7.record().writes()
    );
    println!("device status after command: {status:?}");
    assert!(status.led, "the command round-tripped");
    println!("demo: OK");
}
