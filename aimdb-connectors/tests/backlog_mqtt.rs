//! Nothing lost across a broker outage and a device reboot: a stream
//! written at ~1 kHz through a `Ring` of 4 reaches a persistent
//! subscriber whole and in order, through a broker stopped for 600
//! values and a connector dropped and rebuilt (its RAM gone, its backlog
//! file kept) in the middle of the outage.
//!
//! ```text
//!  producer ─► Ring<4> ─┬─ durable route ─► backlog (file) ─► Mqtt::run_durable ─► mosquitto ─► mosquitto_sub -c
//!                       └─ plain route (the control: RAM only)
//! ```
//!
//! The subscriber drops duplicates by the `aimdb-id` user property
//! (`durable::Dedupe`) and must see every value of the durable route
//! exactly once, in order; the plain route, fed the same values, must
//! have lost some (what the backlog is for). Bounded: every wait is
//! `mosquitto::WAIT`.
#![cfg(all(feature = "backlog", feature = "mqtt", feature = "tokio"))]

mod mosquitto;

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::time::Duration;

use aimdb_connectors::backlog::{self, page_cache, Backlog, FileFlash, Full};
use aimdb_connectors::durable::Dedupe;
use aimdb_connectors::mqtt::{parse_id, Config, Counters};
use aimdb_connectors::reconnect::Backoff;
use aimdb_core::codec::Json;
use aimdb_core::inbound::Dispatch;
use aimdb_core::outbound::{self, Routes};
use aimdb_core::record::{Record, Ring};
use aimdb_core::sync::Readiness;
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
use mosquitto::{connector, free_port, tcp, Broker, ClientArgs, Sub, TempDir, WAIT};

const PAGES: u32 = 16;
/// Values before, during and after the outage; the reboot comes after
/// `REBOOT_AT`.
const BEFORE: u32 = 20;
const REBOOT_AT: u32 = 320;
const OUTAGE_END: u32 = 620;
const TOTAL: u32 = 650;

static TEMP: Record<Cs, Ring<u32, 4>, 4> = Record::new("temp");
/// The boot whose routes are subscribed.
static UP: AtomicU32 = AtomicU32::new(0);

fn config() -> Config<'static> {
    let mut c = Config::new("plant-1");
    c.backoff = Backoff {
        min: Duration::from_millis(20),
        max: Duration::from_millis(100),
    };
    c
}

/// One boot of the device: its backlog opened from `file`, its
/// connector run until the future is dropped (the reboot).
async fn device(port: u16, file: &std::path::Path, boot: u32, counters: &backlog::Counters) {
    let flash = <FileFlash>::open(file, PAGES).expect("the backlog file");
    let mut buf = [0u8; 64];
    let cache = page_cache::<16>();
    let range = 0..PAGES * <FileFlash>::PAGE as u32;
    let mut backlog = Backlog::open(
        flash,
        range,
        cache,
        boot,
        Full::RefuseNewest,
        counters,
        &mut buf,
    )
    .await
    .expect("open the backlog");
    // The durable route, and the plain one beside it.
    static DURABLE: Readiness<1> = Readiness::new();
    static PLAIN: Readiness<1> = Readiness::new();
    let mut kept = outbound::Link::new(TEMP.subscribe().unwrap(), "plant/1/temp", Json);
    let mut payload = [0u8; 16];
    let mut b = Routes::<_, 1, 1>::builder(&DURABLE, &mut payload);
    b.link(&mut kept);
    let mut durable_routes = b.build().unwrap();
    let mut raw = outbound::Link::new(TEMP.subscribe().unwrap(), "plant/1/raw", Json);
    let mut payload2 = [0u8; 16];
    let mut b = Routes::<_, 1, 1>::builder(&PLAIN, &mut payload2);
    b.link(&mut raw);
    let mut plain = b.build().unwrap();
    let mut entry = [0u8; 64];
    UP.store(boot, Relaxed);
    let mut durable = backlog::Durable::new(&mut backlog, &mut durable_routes, &mut entry);
    let mut inbound = Dispatch::<1, 1>::builder().build().unwrap();
    let mqtt_counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 256], [0u8; 2048]);
    let mut mqtt = connector(config(), &mut rx, &mut tx, tcp(port), &mqtt_counters);
    let why = mqtt
        .run_durable(
            &mut inbound,
            &mut plain,
            &mut durable,
            core::future::pending(),
        )
        .await;
    panic!("connector stopped: {why}");
}

/// Writes `from..to`, a value per millisecond.
async fn produce(from: u32, to: u32) {
    for v in from..to {
        TEMP.write(v);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Runs `body` beside the device until it completes.
async fn with_device(
    dev: impl core::future::Future<Output = ()>,
    body: impl core::future::Future<Output = ()>,
) {
    tokio::select! {
        biased;
        () = body => {}
        () = dev => unreachable!(),
    }
}

fn broker(dir: &TempDir, port: u16) -> Broker {
    let settings = format!(
        "allow_anonymous true\nlog_type all\npersistence true\npersistence_location {}/\n",
        dir.path().display()
    );
    Broker::start(dir, port, &settings)
}

/// Waits until `counters` says `cond`.
async fn until_stored(
    what: &str,
    counters: &backlog::Counters,
    cond: impl Fn(backlog::Stats) -> bool,
) {
    mosquitto::until(what, || cond(counters.snapshot())).await;
}

#[tokio::test]
async fn a_broker_outage_and_a_reboot_lose_no_durable_value() {
    let dir = TempDir::new("backlog-mqtt");
    let file = dir.path().join("backlog.bin");
    let port = free_port();
    let b = broker(&dir, port);
    // A persistent subscriber: what is published while it reconnects
    // waits for it at the broker.
    let args = ClientArgs::new(&b);
    let opts = ["-V", "5", "-c", "-q", "1", "-F", "%t|%P|%p"];
    let mut sub = Sub::spawn(&b, &args, "consumer", "plant/#", &opts).await;

    let boot1 = backlog::Counters::new();
    let b = {
        let mut b = Some(b);
        with_device(device(port, &file, 1, &boot1), async {
            mosquitto::until("the device up", || UP.load(Relaxed) == 1).await;
            produce(0, BEFORE).await;
            until_stored("the first values delivered", &boot1, |s| {
                s.delivered == BEFORE
            })
            .await;
            // The outage: values pile up in the backlog, the ring laps.
            b.take().unwrap().terminate();
            produce(BEFORE, REBOOT_AT).await;
            until_stored("the outage's values stored", &boot1, |s| {
                s.stored == REBOOT_AT
            })
            .await;
        })
        .await;
        // The device reboots: the connector and its RAM are gone.
        b
    };
    assert!(b.is_none());
    let boot2 = backlog::Counters::new();
    with_device(device(port, &file, 2, &boot2), async {
        until_stored("the backlog found again", &boot2, |s| {
            s.depth == REBOOT_AT - BEFORE
        })
        .await;
        produce(REBOOT_AT, OUTAGE_END).await;
        until_stored("the rest stored", &boot2, |s| {
            s.stored == OUTAGE_END - REBOOT_AT
        })
        .await;
        let _broker = broker(&dir, port);
        produce(OUTAGE_END, TOTAL).await;
        until_stored("the backlog drained", &boot2, |s| {
            s.depth == 0 && s.stored == TOTAL - REBOOT_AT
        })
        .await;
        // Every durable value reaches the subscriber, each once after
        // dedupe, in order.
        let mut dedupe = Dedupe::new();
        let (mut got, mut dups, mut raw) = (Vec::new(), 0, 0u32);
        while got.len() < TOTAL as usize {
            let line = sub.next().await;
            let mut parts = line.splitn(3, '|');
            let (topic, props, value) = (
                parts.next().unwrap(),
                parts.next().unwrap(),
                parts.next().unwrap(),
            );
            if topic == "plant/1/raw" {
                raw += 1;
                continue;
            }
            let id = props.strip_prefix("aimdb-id:").and_then(parse_id);
            let id = id.unwrap_or_else(|| panic!("no aimdb-id on {line:?}"));
            if dedupe.first(id) {
                got.push(value.parse::<u32>().unwrap());
            } else {
                dups += 1;
            }
        }
        assert_eq!(
            got,
            (0..TOTAL).collect::<Vec<_>>(),
            "every value once, in order"
        );
        println!(
            "durable: {TOTAL} values, {dups} duplicates dropped; plain route: {raw} of {TOTAL}"
        );
        assert!(
            raw < TOTAL - 100,
            "the ring alone lost nothing ({raw}): the outage was too short to show anything"
        );
        let s = boot2.snapshot();
        assert_eq!((s.refused, s.malformed, s.flash_errors), (0, 0, 0));
    })
    .await;
    let _ = WAIT;
}
