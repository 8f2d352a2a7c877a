//! The newcomer's program, as a test against a real mosquitto: on tokio's
//! default multi-thread runtime (what `#[tokio::main]` builds), the MQTT
//! connector is `tokio::spawn`ed and its records are written and read from
//! other threads: a plain OS thread writes a temperature, the test reads
//! the LED the broker's client switched.
//!
//! A second test runs the same connector with `tokio_io::run_on_thread`
//! (the connector as a thread's `block_on` future).

mod mosquitto;

use std::sync::atomic::{AtomicBool, Ordering};

use aimdb_connectors::mqtt::{Config, Counters, Mqtt};
use aimdb_connectors::tokio_io;
use aimdb_connectors::tokio_io::TcpConnect;
use aimdb_connectors::tokio_io::TokioClock;
use aimdb_core::codec::Postcard;
use aimdb_core::inbound;
use aimdb_core::inbound::Dispatch;
use aimdb_core::outbound;
use aimdb_core::outbound::Routes;
use aimdb_core::record::{Latest, Record};
use aimdb_core::sync::{HostRawMutex, Readiness};
use mosquitto::{free_port, publish, until, within, Broker, Sub};

/// The device's records, shared with any thread.
struct Device {
    led: Record<HostRawMutex, Latest<bool>, 2>,
    temp: Record<HostRawMutex, Latest<i16>, 1>,
    ready: Readiness<1>,
    counters: Counters,
}

impl Device {
    const fn new() -> Self {
        Self {
            led: Record::new("led"),
            temp: Record::new("temp"),
            ready: Readiness::new(),
            counters: Counters::new(),
        }
    }
}

/// The connector as a newcomer writes it from the MQTT docs: everything it
/// borrows is built inside the future, over `'static` records.
async fn connector(dev: &'static Device, port: u16, client_id: &'static str) -> String {
    let led = inbound::Link::new(&dev.led, Postcard);
    let mut b = Dispatch::<4, 8>::builder();
    b.link("cmd/led", &led);
    let mut inbound = b.build().unwrap();

    let mut temp = outbound::Link::new(dev.temp.subscribe().unwrap(), "sensors/temp", Postcard);
    let (mut payload, mut topic) = ([0u8; 64], [0u8; 64]);
    let mut b = Routes::<_, 1, 4>::builder(&dev.ready, &mut payload).written_topics(&mut topic);
    b.link(&mut temp);
    let mut outbound = b.build().unwrap();

    let (mut rx, mut tx) = ([0u8; 1024], [0u8; 1024]);
    let config = Config::new(client_id);
    let addr: &'static str = Box::leak(format!("127.0.0.1:{port}").into_boxed_str());
    let connect = TcpConnect::new(addr);
    let mut mqtt = Mqtt::new(
        config,
        aimdb_connectors::mqtt::Parts {
            connect,
            clock: TokioClock::new(),
            rx: &mut rx,
            tx: &mut tx,
            counters: &dev.counters,
        },
    )
    .unwrap();
    let why = mqtt.run(&mut inbound, &mut outbound).await;
    why.to_string()
}

/// Both directions through the broker, with the writer on a plain thread
/// and the reader on the test's task.
async fn exercise(dev: &'static Device, broker: &Broker) {
    let mut sub = Sub::start(broker, "watcher", "sensors/#").await;
    let mut led = dev.led.subscribe().unwrap();
    until("the connector to connect", || dev.counters.is_connected()).await;

    std::thread::spawn(|| dev.temp.write(-40)).join().unwrap();
    // postcard zig-zag: -40 is 0x4f.
    assert_eq!(sub.next().await, "sensors/temp 4f");

    publish(broker, "cmd/led", &[1]).await;
    assert_eq!(within("the LED command", led.recv()).await, Ok(true));
    let s = dev.counters.snapshot();
    assert_eq!((s.sent, s.received, s.rejected), (1, 1, 0), "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawned_mqtt_connector_on_the_multi_thread_runtime() {
    static DEV: Device = Device::new();
    let broker = Broker::anonymous(free_port());
    let port = broker.port;
    // The line this test exists for: the connector future is `Send`.
    let task = tokio::spawn(connector(&DEV, port, "newcomer"));
    exercise(&DEV, &broker).await;
    assert!(!task.is_finished(), "connector stopped early");
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_connector_on_a_thread_of_its_own() {
    static DEV: Device = Device::new();
    static STOP: AtomicBool = AtomicBool::new(false);
    let broker = Broker::anonymous(free_port());
    let port = broker.port;
    let thread = tokio_io::run_on_thread("mqtt", move || async move {
        tokio::select! {
            why = connector(&DEV, port, "threaded") => Some(why),
            () = async {
                while !STOP.load(Ordering::Relaxed) {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
            } => None,
        }
    })
    .unwrap();
    exercise(&DEV, &broker).await;
    STOP.store(true, Ordering::Relaxed);
    let stopped = tokio::task::spawn_blocking(move || thread.join().unwrap())
        .await
        .unwrap();
    assert_eq!(stopped, None, "connector stopped early");
}
