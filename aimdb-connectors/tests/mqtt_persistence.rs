//! Nothing lost across a broker restart: 20,000 QoS 1 messages (1,000,000
//! in `make soak`: `MQTT_PERSIST_TOTAL`) from one
//! connector to another through a mosquitto with persistence, both with a
//! session that outlives the connection (`Config::session_expiry_secs`),
//! the broker restarted half-way.
//!
//! ```text
//!  producer ─► Ring ─► publisher (Mqtt::run, QoS 1) ─► mosquitto ─► subscriber (Mqtt::run) ─► collector
//!                                                 restarted half-way
//! ```
//!
//! - **graceful** (SIGTERM: mosquitto saves its sessions, the subscriber's
//!   queue and its in-flight messages): **0 lost** on either leg; QoS 1
//!   re-deliveries (a message whose PUBACK died with the connection) are
//!   allowed and counted.
//! - **killed** (SIGKILL: only what the last autosave wrote survives; this
//!   broker autosaves every second): what is lost is reported, and it
//!   never exceeds what could be in flight — the producer keeps at most
//!   `WINDOW` values ahead of the collector.
//!
//! The producer paces itself so its `Ring` never laps (no loss before the
//! publisher). Bounded: every wait is `mosquitto::WAIT`.
#![cfg(all(feature = "mqtt", feature = "tokio"))]

mod mosquitto;

use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use aimdb_connectors::mqtt::{Config, Counters, QoS};
use aimdb_connectors::reconnect::Backoff;
use aimdb_core::codec::Postcard;
use aimdb_core::inbound;
use aimdb_core::inbound::Dispatch;
use aimdb_core::outbound;
use aimdb_core::outbound::Routes;
use aimdb_core::record::{Record, Ring, Sink};
use aimdb_core::sync::{HostRawMutex, Readiness};
use mosquitto::{connector, free_port, tcp, until, Broker, TempDir, WAIT};

/// Messages per run: 20,000 (`make test`), or `MQTT_PERSIST_TOTAL`
/// (`make soak` runs 1,000,000).
fn total() -> u32 {
    std::env::var("MQTT_PERSIST_TOTAL")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}
/// Most values the producer runs ahead of the collector.
const WINDOW: u32 = 256;
const DEPTH: usize = 1024;

/// The subscriber's end: every value received, in arrival order.
struct Collector {
    name: &'static str,
    seen: Mutex<Vec<u32>>,
}

impl Sink<u32> for Collector {
    fn name(&self) -> &'static str {
        self.name
    }
    fn write(&self, value: u32) {
        self.seen.lock().unwrap().push(value);
    }
}

impl Collector {
    fn len(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
    /// (distinct values seen, re-deliveries, values of 0..total never seen)
    fn tally(&self) -> (usize, usize, Vec<u32>) {
        let seen = self.seen.lock().unwrap();
        let mut got = vec![0u32; total() as usize];
        for &v in seen.iter() {
            got[v as usize] += 1;
        }
        let distinct = got.iter().filter(|&&n| n > 0).count();
        let missing = (0..total()).filter(|&v| got[v as usize] == 0).collect();
        (distinct, seen.len() - distinct, missing)
    }
}

fn config(id: &str) -> Config<'_> {
    let mut c = Config::new(id);
    c.backoff = Backoff {
        min: Duration::from_millis(20),
        max: Duration::from_millis(200),
    };
    c.subscribe_qos = QoS::AtLeastOnce;
    c.session_expiry = Some(Duration::from_secs(600));
    c.keep_alive = Some(Duration::from_secs(5));
    c
}

fn broker(dir: &TempDir, port: u16) -> Broker {
    let settings = format!(
        "allow_anonymous true\npersistence true\npersistence_location {}/\n\
         autosave_interval 1\nlog_type error\nlog_type warning\nlog_type notice",
        dir.path().display()
    );
    Broker::start(dir, port, &settings)
}

enum Restart {
    Graceful,
    Killed,
}

/// Runs the whole exchange; returns the collector.
async fn run(restart: Restart, tag: &str) -> &'static Collector {
    let collector: &'static Collector = Box::leak(Box::new(Collector {
        name: "collector",
        seen: Mutex::new(Vec::new()),
    }));
    let stream: &'static Record<HostRawMutex, Ring<u32, DEPTH>, 1> =
        Box::leak(Box::new(Record::new("stream")));
    let ready_pub: &'static Readiness<1> = Box::leak(Box::new(Readiness::new()));
    let ready_sub: &'static Readiness<1> = Box::leak(Box::new(Readiness::new()));

    let dir = TempDir::new(&format!("persist-{tag}"));
    let port = free_port();
    let mut b = Some(broker(&dir, port));

    // Publisher: the stream out on soak/stream, QoS 1.
    let mut no_in = Dispatch::<1, 1>::builder().build().unwrap();
    let mut out = outbound::Link::new(stream.subscribe().unwrap(), "soak/stream", Postcard);
    let mut payload = [0u8; 16];
    let mut rb = Routes::<_, 1, 1>::builder(ready_pub, &mut payload);
    rb.link(&mut out);
    let mut routes = rb.build().unwrap();
    let pub_counters = Counters::new();
    let (mut prx, mut ptx) = ([0u8; 256], [0u8; 4096]);
    let pub_id = format!("aimdb-pub-{tag}");
    let mut publisher = connector(
        config(&pub_id),
        &mut prx,
        &mut ptx,
        tcp(port),
        &pub_counters,
    );

    // Subscriber: soak/stream into the collector.
    let link = inbound::Link::new(collector, Postcard);
    let mut db = Dispatch::<1, 1>::builder();
    db.link("soak/stream", &link);
    let mut inbound = db.build().unwrap();
    let mut no_out = Routes::<_, 1, 1>::builder(ready_sub, &mut [])
        .build()
        .unwrap();
    let sub_counters = Counters::new();
    let (mut srx, mut stx) = ([0u8; 256], [0u8; 512]);
    let sub_id = format!("aimdb-sub-{tag}");
    let mut subscriber = connector(
        config(&sub_id),
        &mut srx,
        &mut stx,
        tcp(port),
        &sub_counters,
    );

    let started = Instant::now();
    let (total, restart_at) = (total(), total() as usize / 2);
    let body = async {
        until("both connected", || {
            pub_counters.is_connected() && sub_counters.is_connected()
        })
        .await;
        let mut restarted = false;
        for v in 0..total {
            // Keep within WINDOW of the collector (the Ring never laps).
            // After the restart the window widens by WINDOW: values a
            // killed broker lost (at most WINDOW, asserted at the end)
            // never arrive. 2 × WINDOW is still within DEPTH.
            let window = if restarted { 2 * WINDOW } else { WINDOW };
            if v >= window {
                let need = (v - window) as usize;
                until("the collector to catch up", || collector.len() > need).await;
            }
            stream.write(v);
            if !restarted && collector.len() >= restart_at {
                restarted = true;
                let old = b.take().unwrap();
                match restart {
                    Restart::Graceful => old.terminate(),
                    Restart::Killed => drop(old), // SIGKILL, by PID
                }
                b = Some(broker(&dir, port));
                // Nothing new until the subscriber is back: a killed
                // broker may have lost its subscription, and what is
                // published before it subscribes again reaches no one.
                // (What the broker held at the kill is at most WINDOW.)
                until("the subscriber back", || {
                    sub_counters.reconnects() >= 1 && sub_counters.is_connected()
                })
                .await;
            }
        }
        // Everything written is out of the Ring; wait for what can still
        // arrive: all of it when nothing was lost, else until quiet.
        let (mut last, mut quiet) = (collector.len(), Instant::now());
        while collector.tally().0 < total as usize
            && quiet.elapsed() < std::time::Duration::from_secs(3)
        {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            if collector.len() != last {
                (last, quiet) = (collector.len(), Instant::now());
            }
        }
    };
    // 60 s per 20,000 messages, at most 10 minutes.
    let bound = (WAIT * 4 * total.div_ceil(20_000)).min(std::time::Duration::from_secs(600));
    tokio::time::timeout(bound, async {
        tokio::select! {
            biased;
            () = body => {}
            why = publisher.run(&mut no_in, &mut routes) => panic!("publisher stopped: {why}"),
            why = subscriber.run(&mut inbound, &mut no_out) => panic!("subscriber stopped: {why}"),
        }
    })
    .await
    .expect("the exchange finished in time");
    let (distinct, repeats, missing) = collector.tally();
    println!(
        "{tag}: {total} sent, {distinct} distinct received, {repeats} QoS 1 re-deliveries, {} lost, in {:.1} s; publisher {:?}; subscriber {:?}",
        missing.len(),
        started.elapsed().as_secs_f64(),
        pub_counters.snapshot(),
        sub_counters.snapshot()
    );
    assert!(pub_counters.reconnects() >= 1 && sub_counters.reconnects() >= 1);
    collector
}

#[tokio::test]
async fn graceful_broker_restart_loses_nothing_at_qos1_on_either_leg() {
    let c = run(Restart::Graceful, "graceful").await;
    let (distinct, repeats, missing) = c.tally();
    assert!(
        missing.is_empty(),
        "lost across a graceful restart: {missing:?}"
    );
    assert_eq!(distinct, total() as usize);
    // Re-deliveries are what QoS 1 allows; they are bounded by what can be
    // unacknowledged at once.
    assert!(repeats <= 2 * WINDOW as usize, "{repeats} re-deliveries");
}

#[tokio::test]
async fn killed_broker_loses_at_most_what_was_in_flight() {
    let c = run(Restart::Killed, "killed").await;
    let (_, _, missing) = c.tally();
    assert!(
        missing.len() <= WINDOW as usize,
        "lost {} > the {WINDOW} values that can be in flight: {missing:?}",
        missing.len()
    );
    println!(
        "killed: lost {} (what the broker accepted after its last autosave, at most 1 s, and had not delivered)",
        missing.len()
    );
}
