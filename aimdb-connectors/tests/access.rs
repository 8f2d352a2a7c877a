//! Access: inbound messages reach only records declared with an inbound
//! link. The inbound `Dispatch` is the allow-list; a record that is only
//! published (an outbound link) cannot be written from the wire, whatever
//! the peer or the broker sends.

use aimdb_connectors::framed::{self, frame, Framed};
use aimdb_connectors::loopback::Pair;
use aimdb_core::codec::Postcard;
use aimdb_core::inbound;
use aimdb_core::inbound::Dispatch;
use aimdb_core::outbound;
use aimdb_core::outbound::Routes;
use aimdb_core::record::{Latest, Record};
use aimdb_core::sync::Readiness;
use embassy_futures::select::{select, Either};
use embassy_sync::blocking_mutex::raw::{CriticalSectionRawMutex as Cs, NoopRawMutex};
use embedded_io_async::Write;

fn leak<T>(v: T) -> &'static mut T {
    Box::leak(Box::new(v))
}

/// The device's routes in both tests: `state` published on `dev/state`
/// (outbound only), `dev/setpoint` delivered into `setpoint`.
fn device_routes(
    state: &'static Record<Cs, Latest<u32>, 2>,
    setpoint: &'static Record<Cs, Latest<u32>, 1>,
    ready: &'static Readiness<1>,
) -> (
    Routes<'static, &'static Readiness<1>, 1, 1>,
    Dispatch<'static, 2, 4>,
) {
    let state_out = leak(outbound::Link::new(
        state.subscribe().unwrap(),
        "dev/state",
        Postcard,
    ));
    let mut b = Routes::<_, 1, 1>::builder(ready, leak([0u8; 16])).written_topics(leak([0u8; 16]));
    b.link(state_out);
    let routes = b.build().unwrap();
    let mut b = Dispatch::<2, 4>::builder();
    b.link("dev/setpoint", leak(inbound::Link::new(setpoint, Postcard)));
    (routes, b.build().unwrap())
}

/// A framed peer writes to the device's outbound-only `state` record (by
/// its published topic, and by wildcards that would match it): every
/// frame is refused and counted, the record keeps the device's own value,
/// and the one inbound record still receives.
#[test]
fn a_framed_peer_cannot_write_an_outbound_only_record() {
    static STATE: Record<Cs, Latest<u32>, 2> = Record::new("state");
    static SETPOINT: Record<Cs, Latest<u32>, 1> = Record::new("setpoint");
    static READY: Readiness<1> = Readiness::new();

    let (mut routes, mut dispatch) = device_routes(&STATE, &SETPOINT, &READY);
    let mut setpoint = SETPOINT.subscribe().unwrap();
    let mut state = STATE.subscribe().unwrap();
    STATE.write(1);
    assert_eq!(state.try_recv(), Ok(1));

    let pair = Pair::<NoopRawMutex, 1024>::new();
    let ((_, mut peer_tx), (rx, tx)) = (pair.a(), pair.b());
    let stats = framed::Counters::new();
    let mut framed = Framed::<64, 128>::with_sizes(&stats);
    let attempts = [
        "dev/state",
        "dev/+",
        "dev/#",
        "#",
        "dev/state/",
        "/dev/state",
    ];
    embassy_futures::block_on(async {
        let run = framed.run(rx, tx, &mut dispatch, &mut routes);
        let peer = async {
            let mut buf = [0u8; 64];
            for t in attempts {
                let n = frame::encode(t, &[99], &mut buf).unwrap();
                peer_tx.write(&buf[..n]).await.unwrap();
            }
            let n = frame::encode("dev/setpoint", &[5], &mut buf).unwrap();
            peer_tx.write(&buf[..n]).await.unwrap();
            assert_eq!(setpoint.recv().await, Ok(5));
        };
        match select(run, peer).await {
            Either::First(e) => panic!("connector stopped: {e}"),
            Either::Second(()) => {}
        }
    });
    assert_eq!(STATE.writes(), 1, "only the device wrote its state");
    assert!(state.try_recv().is_err());
    let d = dispatch.stats();
    assert_eq!(d.delivered, 1, "{d:?}");
    assert_eq!(
        (d.unknown_topic, d.wildcard_in_topic),
        (3, 3),
        "refused, each with its reason: {d:?}"
    );
    assert_eq!(stats.snapshot().rejected, attempts.len() as u32);
}

/// Over MQTT the allow-list is also what the connector subscribes to:
/// exactly the inbound filters. A broker client publishing to the
/// outbound-only record's topic never reaches it.
#[cfg(all(feature = "mqtt", feature = "tokio"))]
#[tokio::test]
async fn a_broker_client_cannot_write_an_outbound_only_record() {
    use aimdb_connectors::mqtt::{Config, Counters};
    use mosquitto::{alongside, connector, free_port, publish, tcp, until, within, Broker, Sub};

    static STATE: Record<Cs, Latest<u32>, 2> = Record::new("state");
    static SETPOINT: Record<Cs, Latest<u32>, 1> = Record::new("setpoint");
    static READY: Readiness<1> = Readiness::new();
    let broker = Broker::anonymous(free_port());
    let mut watcher = Sub::start(&broker, "watcher", "dev/state").await;

    let (mut routes, mut inbound) = device_routes(&STATE, &SETPOINT, &READY);
    let mut setpoint = SETPOINT.subscribe().unwrap();

    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 512], [0u8; 512]);
    let c = Config::new("aimdb-access");
    let mut mqtt = connector(c, &mut rx, &mut tx, tcp(broker.port), &counters);
    STATE.write(1);
    let body = async {
        // The device's own value went out: the connector is up.
        assert_eq!(watcher.next().await, "dev/state 01");
        // The log comes through a pipe another thread reads: wait for it.
        until("the subscription in the broker's log", || {
            !broker.subscriptions("aimdb-access").is_empty()
        })
        .await;
        assert_eq!(broker.subscriptions("aimdb-access"), ["dev/setpoint"]);
        // Another client writes to the state topic: the broker delivers it
        // to the watcher, not to the connector, which never subscribed.
        publish(&broker, "dev/state", &[99]).await;
        assert_eq!(watcher.next().await, "dev/state 63");
        publish(&broker, "dev/setpoint", &[5]).await;
        assert_eq!(within("setpoint", setpoint.recv()).await, Ok(5));
    };
    alongside(mqtt.run(&mut inbound, &mut routes), body).await;
    assert_eq!(STATE.writes(), 1, "only the device wrote its state");
    let s = counters.snapshot();
    assert_eq!((s.received, s.rejected), (1, 0), "{s:?}");
}

#[cfg(all(feature = "mqtt", feature = "tokio"))]
mod mosquitto;
