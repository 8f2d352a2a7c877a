//! Pins whether the connector futures are `Send`, at compile time: with
//! thread-safe records (`HostRawMutex`, `CriticalSectionRawMutex`) and the
//! default tables, `Framed::run` and `Mqtt::run` can be `tokio::spawn`ed on
//! the multi-thread runtime; with `NoopRawMutex` records (local tables)
//! they cannot. The futures are built and dropped, never polled.

use aimdb_connectors::framed::{self, Framed};
use aimdb_connectors::loopback::Pair;
use aimdb_core::codec::Postcard;
use aimdb_core::inbound;
use aimdb_core::inbound::{Dispatch, LocalDispatch};
use aimdb_core::outbound;
use aimdb_core::outbound::{LocalRoutes, Routes};
use aimdb_core::record::{Latest, Record};
use aimdb_core::sync::{HostRawMutex, Readiness};
use embassy_sync::blocking_mutex::raw::{CriticalSectionRawMutex as Cs, NoopRawMutex};

fn is_send<T: Send>(_: &T) {}

/// Fails to compile if the value's type is `Send`.
macro_rules! assert_not_send {
    ($v:expr) => {{
        trait AmbiguousIfSend<A> {
            fn check(&self) {}
        }
        impl<T: ?Sized> AmbiguousIfSend<()> for T {}
        impl<T: ?Sized + Send> AmbiguousIfSend<u8> for T {}
        AmbiguousIfSend::check(&$v);
    }};
}

fn leak<T>(v: T) -> &'static mut T {
    Box::leak(Box::new(v))
}

type Ready = &'static Readiness<1>;

/// Default tables over records with mutex `M`, all `'static`.
macro_rules! tables {
    ($m:ty) => {{
        let out: &'static Record<$m, Latest<u32>, 1> = leak(Record::new("out"));
        let inn: &'static Record<$m, Latest<u32>, 1> = leak(Record::new("in"));
        let link = leak(outbound::Link::new(
            out.subscribe().unwrap(),
            "t/out",
            Postcard,
        ));
        let mut b = Routes::<Ready, 1, 1>::builder(leak(Readiness::new()), leak([0; 16]))
            .written_topics(leak([0; 16]));
        b.link(link);
        let routes = b.build().unwrap();
        let mut b = Dispatch::<1, 1>::builder();
        b.link("t/in", leak(inbound::Link::new(inn, Postcard)));
        (b.build().unwrap(), routes)
    }};
}

#[test]
fn framed_run_is_send_with_thread_safe_records() {
    let pair: &'static Pair<Cs, 64> = leak(Pair::new());
    let stats: &'static framed::Counters = leak(framed::Counters::new());
    let (mut d, mut r) = tables!(HostRawMutex);
    let mut framed = Framed::<64, 64>::with_sizes(stats);
    let (rx, tx) = pair.a();
    let fut = framed.run(rx, tx, &mut d, &mut r);
    is_send(&fut);
    drop(fut);
    let (mut d, mut r) = tables!(Cs);
    let (rx, tx) = pair.b();
    is_send(&framed.run(rx, tx, &mut d, &mut r));
}

#[test]
fn framed_run_over_local_tables_is_not_send() {
    let pair: &'static Pair<Cs, 64> = leak(Pair::new());
    let stats: &'static framed::Counters = leak(framed::Counters::new());
    let out: &'static Record<NoopRawMutex, Latest<u32>, 1> = leak(Record::new("out"));
    let link = leak(outbound::Link::new(
        out.subscribe().unwrap(),
        "t/out",
        Postcard,
    ));
    let mut b = LocalRoutes::<Ready, 1, 1>::builder(leak(Readiness::new()), leak([0; 16]))
        .written_topics(leak([0; 16]));
    b.link(link);
    let mut routes = b.build().unwrap();
    let mut dispatch = LocalDispatch::<1, 1>::builder().build().unwrap();
    let mut framed = Framed::<64, 64>::with_sizes(stats);
    let (rx, tx) = pair.a();
    assert_not_send!(framed.run(rx, tx, &mut dispatch, &mut routes));
}

#[cfg(all(feature = "mqtt", feature = "tokio"))]
#[test]
fn mqtt_run_over_tcp_is_send_with_thread_safe_records() {
    use aimdb_connectors::mqtt::{Config, Counters, Mqtt};
    use aimdb_connectors::tokio_io::TcpConnect;
    use aimdb_connectors::tokio_io::TokioClock;
    let counters: &'static Counters = leak(Counters::new());
    let (mut d, mut r) = tables!(HostRawMutex);
    let (rx, tx) = (leak([0u8; 256]), leak([0u8; 256]));
    let connect = TcpConnect::new("127.0.0.1:1");
    let mut mqtt = Mqtt::new(
        Config::new("pin"),
        aimdb_connectors::mqtt::Parts {
            connect,
            clock: TokioClock::new(),
            rx,
            tx,
            counters,
        },
    )
    .unwrap();
    let fut = mqtt.run(&mut d, &mut r);
    is_send(&fut);
}

/// The host TLS layer (rustls behind tokio's lock) keeps the MQTT
/// connector `Send`: a service spawns it on the multi-thread runtime.
#[cfg(feature = "tls")]
#[test]
fn mqtt_run_over_host_tls_is_send_with_thread_safe_records() {
    use aimdb_connectors::mqtt::{tls_client_config, Config, Counters, Mqtt, TlsConnect};
    use aimdb_connectors::tokio_io::TokioClock;
    let counters: &'static Counters = leak(Counters::new());
    let (mut d, mut r) = tables!(HostRawMutex);
    let (rx, tx) = (leak([0u8; 256]), leak([0u8; 256]));
    // Any trust store will do: the future is never polled.
    let config = tls_client_config(
        rcgen::generate_simple_self_signed(vec!["localhost".into()])
            .unwrap()
            .cert
            .pem()
            .as_bytes(),
    )
    .unwrap();
    let connect = TlsConnect::new("127.0.0.1:1", "localhost", std::sync::Arc::new(config)).unwrap();
    let mut mqtt = Mqtt::new(
        Config::new("pin"),
        aimdb_connectors::mqtt::Parts {
            connect,
            clock: TokioClock::new(),
            rx,
            tx,
            counters,
        },
    )
    .unwrap();
    let fut = mqtt.run(&mut d, &mut r);
    is_send(&fut);
}

/// The device TLS layer shares its session between the two halves
/// through a `RefCell` (one executor, one poll at a time): the MQTT
/// connector over it is not `Send`, whatever the records. On a host, run
/// it with `tokio_io::run_on_thread`, or use `mqtt::TlsConnect`.
#[cfg(feature = "embedded-tls")]
#[test]
fn mqtt_run_over_device_tls_is_not_send() {
    use aimdb_connectors::mqtt::{Config, Counters, Mqtt};
    use aimdb_connectors::tls::TlsConnect;
    use aimdb_connectors::tokio_io::{TcpConnect, TokioClock};
    let counters: &'static Counters = leak(Counters::new());
    let (mut d, mut r) = tables!(HostRawMutex);
    let (rx, tx) = (leak([0u8; 256]), leak([0u8; 256]));
    let connect = TlsConnect::new(
        TcpConnect::new("127.0.0.1:1"),
        "localhost",
        &[],
        rand_core::OsRng,
        leak([0u8; 64]),
        leak([0u8; 64]),
    );
    let mut mqtt = Mqtt::new(
        Config::new("pin"),
        aimdb_connectors::mqtt::Parts {
            connect,
            clock: TokioClock::new(),
            rx,
            tx,
            counters,
        },
    )
    .unwrap();
    assert_not_send!(mqtt.run(&mut d, &mut r));
}

/// A durable backlog (over a file) beside the routes keeps the MQTT
/// connector `Send`: a host service spawns it as it is.
#[cfg(all(feature = "mqtt", feature = "tokio", feature = "backlog"))]
#[test]
fn mqtt_run_durable_over_a_file_backlog_is_send() {
    use aimdb_connectors::backlog::cache::Cache;
    use aimdb_connectors::backlog::{self, Backlog, FileFlash, Full};
    use aimdb_connectors::mqtt::{Config, Counters, Mqtt};
    use aimdb_connectors::tokio_io::{TcpConnect, TokioClock};
    let counters: &'static Counters = leak(Counters::new());
    let (mut d, mut r) = tables!(HostRawMutex);
    let (_, mut durable_routes) = tables!(HostRawMutex);
    let file = std::env::temp_dir().join(format!("aimdb-send-{}.bin", std::process::id()));
    let flash = <FileFlash>::open(&file, 2).unwrap();
    let bc: &'static backlog::Counters = leak(backlog::Counters::new());
    let mut buf = [0u8; 64];
    let mut bl = futures::executor::block_on(Backlog::open(
        flash,
        0..2 * 4096,
        Cache::new_uncached(),
        0,
        Full::DropOldest,
        bc,
        &mut buf,
    ))
    .unwrap();
    let mut entry = [0u8; 64];
    let mut durable = backlog::Durable::new(&mut bl, &mut durable_routes, &mut entry);
    let (rx, tx) = (leak([0u8; 256]), leak([0u8; 256]));
    let mut mqtt = Mqtt::new(
        Config::new("pin"),
        aimdb_connectors::mqtt::Parts {
            connect: TcpConnect::new("127.0.0.1:1"),
            clock: TokioClock::new(),
            rx,
            tx,
            counters,
        },
    )
    .unwrap();
    let fut = mqtt.run_durable(&mut d, &mut r, &mut durable, core::future::pending());
    is_send(&fut);
    drop(fut);
    let _ = std::fs::remove_file(file);
}
