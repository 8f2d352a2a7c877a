//! The MQTT connector against a real mosquitto broker.
//!
//! Each test starts its own `mosquitto` (see `mosquitto/mod.rs`: listener
//! on 127.0.0.1 and a free port, anonymous access) and kills it by PID when
//! its guard drops. `mosquitto_sub` / `mosquitto_pub` play the other
//! clients. Every wait is bounded by [`mosquitto::WAIT`]; a timeout fails the test, no
//! test asserts on timing. Without mosquitto installed the tests fail with
//! a message naming the Debian packages (`mosquitto mosquitto-clients`).
//!
//! `MQTT_TEST_RECONNECT=never` runs the connectors with reconnecting
//! disabled: the broker-restart test must then fail (the control that shows
//! it tests reconnection).

mod mosquitto;

use std::cell::Cell;
use std::time::Duration;

use aimdb_connectors::mqtt::{Cause, Config, ConnectFailure, Counters, QoS};
use aimdb_connectors::reconnect::{Backoff, Reconnect, Stopped};
use aimdb_core::codec::Postcard;
use aimdb_core::inbound;
use aimdb_core::inbound::{Dispatch, KeyedLink};
use aimdb_core::outbound;
use aimdb_core::outbound::Routes;
use aimdb_core::record::{Keyed, Latest, Record, Ring};
use aimdb_core::sync::Readiness;
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
use mosquitto::{
    alongside, connector, free_port, publish, read_packet, tcp, until, within, Broker, Gated, Sub,
};
use tokio::io::AsyncWriteExt;

// --------------------------------------------------------------- utilities

fn reconnect_policy() -> Reconnect {
    match std::env::var("MQTT_TEST_RECONNECT").as_deref() {
        Ok("never") => Reconnect::Never,
        _ => Reconnect::Always,
    }
}

fn config(client_id: &str) -> Config<'_> {
    let mut c = Config::new(client_id);
    c.backoff = Backoff {
        min: Duration::from_millis(20),
        max: Duration::from_millis(200),
    };
    c.reconnect = reconnect_policy();
    c.keep_alive = Some(Duration::from_secs(5));
    c
}

/// No outbound routes.
fn no_routes(ready: &'static Readiness<1>) -> Routes<'static, &'static Readiness<1>, 1, 1> {
    Routes::<_, 1, 1>::builder(ready, &mut []).build().unwrap()
}

// ------------------------------------------------------------------- tests

#[tokio::test]
async fn records_published_by_the_connector_reach_mosquitto_sub() {
    static STATUS: Record<Cs, Latest<u32>, 1> = Record::new("status");
    static TEMPS: Record<Cs, Ring<u16, 8>, 1> = Record::new("temps");
    static READY: Readiness<1> = Readiness::new();

    let broker = Broker::anonymous(free_port());
    let mut sub = Sub::start(&broker, "watcher", "dev/#").await;

    let mut status = outbound::Link::new(STATUS.subscribe().unwrap(), "dev/status", Postcard);
    // Status at its kind's QoS 1, temps at QoS 0.
    let mut temps =
        outbound::Link::new(TEMPS.subscribe().unwrap(), "dev/temp", Postcard).qos(QoS::AtMostOnce);
    let mut payload = [0u8; 64];
    let mut b = Routes::<_, 1, 4>::builder(&READY, &mut payload);
    b.link(&mut status).link(&mut temps);
    let mut routes = b.build().unwrap();
    let mut inbound = Dispatch::<1, 1>::builder().build().unwrap();

    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 512], [0u8; 1024]);
    let c = config("aimdb-out");
    let connect = tcp(broker.port);
    let mut mqtt = connector(c, &mut rx, &mut tx, connect, &counters);

    alongside(mqtt.run(&mut inbound, &mut routes), async {
        until("the connector to connect", || counters.is_connected()).await;
        STATUS.write(7);
        for t in [1u16, 2, 300] {
            TEMPS.write(t);
        }
        let mut got = Vec::new();
        while got.len() < 4 {
            got.push(sub.next().await);
        }
        let temps: Vec<_> = got.iter().filter(|l| l.starts_with("dev/temp ")).collect();
        assert_eq!(
            temps,
            ["dev/temp 01", "dev/temp 02", "dev/temp ac02"],
            "{got:?}"
        );
        assert!(got.contains(&"dev/status 07".to_string()), "{got:?}");
    })
    .await;
    let s = counters.snapshot();
    assert_eq!(s.sent, 4, "{s:?}");
    assert_eq!(
        (s.reconnects, s.connect_failures, s.dropped),
        (0, 0, 0),
        "{s:?}"
    );
}

#[tokio::test]
async fn mosquitto_pub_messages_land_in_exact_wildcard_and_keyed_routes() {
    static LED: Record<Cs, Latest<bool>, 1> = Record::new("led");
    static ROOM_TEMPS: Record<Cs, Ring<i16, 8>, 1> = Record::new("room-temps");
    static LOGS: Record<Cs, Ring<u32, 8>, 1> = Record::new("logs");
    static DEVICES: Keyed<Cs, Latest<u32>, 4, 1> = Keyed::new("devices");
    static READY: Readiness<1> = Readiness::new();

    let broker = Broker::anonymous(free_port());

    let mut led = LED.subscribe().unwrap();
    let mut room_temps = ROOM_TEMPS.subscribe().unwrap();
    let mut logs = LOGS.subscribe().unwrap();
    let mut dev9 = DEVICES.claim("dev9").unwrap().subscribe().unwrap();

    let led_link = inbound::Link::new(&LED, Postcard);
    let temp_link = inbound::Link::new(&ROOM_TEMPS, Postcard);
    let log_link = inbound::Link::new(&LOGS, Postcard);
    let dev_link = KeyedLink::new(&DEVICES, Postcard);
    let mut b = Dispatch::<8, 16>::builder();
    b.link("cmd/led", &led_link)
        .link("rooms/+/temp", &temp_link)
        .link("logs/#", &log_link)
        .link_keyed("devices/+/state", 1, &dev_link);
    let mut inbound = b.build().unwrap();

    let mut routes = no_routes(&READY);

    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 512], [0u8; 512]);
    let connect = tcp(broker.port);
    let mut mqtt = connector(config("aimdb-in"), &mut rx, &mut tx, connect, &counters);

    alongside(mqtt.run(&mut inbound, &mut routes), async {
        until("the connector to subscribe", || counters.is_connected()).await;
        // The broker's log arrives through a pipe read by another thread:
        // wait for its subscription lines rather than race them.
        until("the subscriptions in the broker's log", || {
            broker.subscriptions("aimdb-in").len() >= 4
        })
        .await;
        // Exactly the dispatch table's filters, wildcards included.
        let mut subs = broker.subscriptions("aimdb-in");
        subs.sort();
        assert_eq!(
            subs,
            ["cmd/led", "devices/+/state", "logs/#", "rooms/+/temp"],
            "{}",
            broker.log()
        );

        publish(&broker, "cmd/led", &[1]).await;
        assert_eq!(within("cmd/led", led.recv()).await, Ok(true));

        publish(&broker, "rooms/kitchen/temp", &[0x05]).await; // -3, zigzag
        publish(&broker, "rooms/hall/temp", &[0x28]).await; // 20
        assert_eq!(within("rooms/+/temp", room_temps.recv()).await, Ok(-3));
        assert_eq!(within("rooms/+/temp", room_temps.recv()).await, Ok(20));

        publish(&broker, "logs/a/b/c", &[0x2a]).await;
        assert_eq!(within("logs/#", logs.recv()).await, Ok(42));

        publish(&broker, "devices/dev9/state", &[0x09]).await;
        assert_eq!(within("devices/dev9/state", dev9.recv()).await, Ok(9));
        // A key seen for the first time claims its slot.
        publish(&broker, "devices/dev4/state", &[0x04]).await;
        until("key dev4", || {
            DEVICES.get("dev4").is_some_and(|r| r.writes() == 1)
        })
        .await;
    })
    .await;
    let s = counters.snapshot();
    assert_eq!((s.received, s.rejected), (6, 0), "{s:?}");
    assert_eq!(inbound.stats().delivered, 6);
}

#[tokio::test]
async fn malformed_payloads_are_counted_and_rejected_good_ones_still_arrive() {
    static LEVEL: Record<Cs, Ring<u8, 8>, 1> = Record::new("level");
    static FLAG: Record<Cs, Latest<bool>, 1> = Record::new("flag");
    static READY: Readiness<1> = Readiness::new();

    let broker = Broker::anonymous(free_port());
    let mut level = LEVEL.subscribe().unwrap();
    let mut flag = FLAG.subscribe().unwrap();
    let level_link = inbound::Link::new(&LEVEL, Postcard);
    let flag_link = inbound::Link::new(&FLAG, Postcard);
    let mut b = Dispatch::<4, 8>::builder();
    b.link("in/level", &level_link)
        .link("in/flag/+", &flag_link);
    let mut inbound = b.build().unwrap();
    let mut routes = no_routes(&READY);

    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 512], [0u8; 512]);
    let connect = tcp(broker.port);
    let mut mqtt = connector(config("aimdb-bad"), &mut rx, &mut tx, connect, &counters);

    alongside(mqtt.run(&mut inbound, &mut routes), async {
        until("the connector to subscribe", || counters.is_connected()).await;
        publish(&broker, "in/level", &[0x05]).await;
        // A u8 whose varint never ends, and a bool that is neither 0 nor 1.
        publish(&broker, "in/level", &[0xff, 0xff]).await;
        publish(&broker, "in/flag/x", &[0x07]).await;
        publish(&broker, "in/level", &[0x06]).await;
        publish(&broker, "in/flag/x", &[0x01]).await;
        assert_eq!(within("level 5", level.recv()).await, Ok(5));
        assert_eq!(within("level 6", level.recv()).await, Ok(6));
        assert_eq!(within("flag", flag.recv()).await, Ok(true));
        until("5 received", || counters.received() == 5).await;
    })
    .await;
    let s = counters.snapshot();
    assert_eq!((s.received, s.rejected), (5, 2), "{s:?}");
    let st = inbound.stats();
    assert_eq!(st.delivered, 3);
    assert_eq!(st.total_rejected(), 2, "{st:?}");
    // Nothing of the bad payloads reached the records.
    assert_eq!(level.try_recv().ok(), None);
    assert_eq!(LEVEL.writes(), 2);
    assert_eq!(FLAG.writes(), 1);
}

#[tokio::test]
async fn broker_restart_is_survived_resubscribed_and_latest_replayed() {
    static STATE: Record<Cs, Latest<u32>, 1> = Record::new("state");
    static SETPOINT: Record<Cs, Latest<u32>, 1> = Record::new("setpoint");
    static READY: Readiness<1> = Readiness::new();

    let port = free_port();
    let broker = Broker::anonymous(port);
    let mut sub = Sub::start(&broker, "watcher1", "dev/state").await;

    let mut setpoint = SETPOINT.subscribe().unwrap();
    let setpoint_link = inbound::Link::new(&SETPOINT, Postcard);
    let mut b = Dispatch::<2, 2>::builder();
    b.link("cmd/setpoint", &setpoint_link);
    let mut inbound = b.build().unwrap();

    let mut state = outbound::Link::new(STATE.subscribe().unwrap(), "dev/state", Postcard);
    let (mut payload, mut topic) = ([0u8; 16], [0u8; 16]);
    let mut b = Routes::<_, 1, 1>::builder(&READY, &mut payload).written_topics(&mut topic);
    b.link(&mut state);
    let mut routes = b.build().unwrap();

    let counters = Counters::new();
    let gate = Cell::new(true);
    let (mut rx, mut tx) = ([0u8; 512], [0u8; 512]);
    let c = config("aimdb-restart");
    let connect = Gated {
        inner: tcp(port),
        open: || gate.get(),
    };
    let mut mqtt = connector(c, &mut rx, &mut tx, connect, &counters);

    let mut broker = Some(broker);
    alongside(mqtt.run(&mut inbound, &mut routes), async {
        until("the first connection", || counters.is_connected()).await;
        STATE.write(1);
        sub.until("dev/state 01").await;
        publish(broker.as_ref().unwrap(), "cmd/setpoint", &[0x05]).await;
        assert_eq!(within("setpoint 5", setpoint.recv()).await, Ok(5));

        // Restart: kill the broker mid-stream. The gate keeps the connector
        // away from the new broker until a watcher is subscribed there, so
        // the replay cannot race past it.
        gate.set(false);
        drop(sub);
        drop(broker.take());
        until("the drop to be noticed", || !counters.is_connected()).await;
        let broker = Broker::anonymous(port);
        let mut sub = Sub::start(&broker, "watcher2", "dev/state").await;
        gate.set(true);
        until("the reconnection", || {
            counters.is_connected() && counters.reconnects() == 1
        })
        .await;

        // The newest `Latest` value went out again without a new write.
        assert_eq!(STATE.writes(), 1);
        sub.until("dev/state 01").await;
        // Resumed: new writes flow, and the subscription is back.
        STATE.write(2);
        sub.until("dev/state 02").await;
        publish(&broker, "cmd/setpoint", &[0x09]).await;
        assert_eq!(within("setpoint 9", setpoint.recv()).await, Ok(9));
    })
    .await;
    let s = counters.snapshot();
    assert_eq!(s.reconnects, 1, "{s:?}");
    assert!(s.connect_failures >= 1, "the gated attempts failed: {s:?}");
    assert_eq!(s.received, 2, "{s:?}");
    assert!(s.sent >= 3, "{s:?}");
}

#[tokio::test]
async fn reconnecting_disabled_stops_at_the_first_drop() {
    static READY: Readiness<1> = Readiness::new();
    let broker = Broker::anonymous(free_port());
    let mut inbound = Dispatch::<1, 1>::builder().build().unwrap();
    let mut routes = no_routes(&READY);
    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 256], [0u8; 256]);
    let mut c = config("aimdb-once");
    c.reconnect = Reconnect::Never;
    let connect = tcp(broker.port);
    let mut mqtt = connector(c, &mut rx, &mut tx, connect, &counters);
    let mut broker = Some(broker);
    let stopped = within("run to return", async {
        tokio::join!(mqtt.run(&mut inbound, &mut routes), async {
            until("connected", || counters.is_connected()).await;
            drop(broker.take());
        })
        .0
    })
    .await;
    assert_eq!(stopped, Stopped::Disconnected);

    drop(mqtt);

    // Nothing listens now: with attempts limited, run gives up.
    let mut c = config("aimdb-twice");
    c.reconnect = Reconnect::Attempts(3);
    let connect = tcp(free_port());
    let counters = Counters::new();
    let mut mqtt = connector(c, &mut rx, &mut tx, connect, &counters);
    let stopped = within("run to give up", mqtt.run(&mut inbound, &mut routes)).await;
    assert_eq!(stopped, Stopped::ConnectFailed(3));
    assert_eq!(counters.connect_failures(), 3);
    assert_eq!(
        counters.last_error(),
        Some(Cause::Connect(ConnectFailure::Refused)),
        "nothing listens: TCP refused"
    );
}

/// A broker that goes quiet: a missed PINGRESP and a CONNACK that never
/// comes both end in a new connection. (mosquitto always answers, so this
/// side is played by a hand-written listener.)
#[tokio::test]
async fn missed_ping_response_and_missing_connack_lead_to_reconnect() {
    const CONNECT: u8 = 0x10;
    const PINGREQ: u8 = 0xc0;
    // MQTT 5 CONNACK: no session present, success, no properties.
    const CONNACK: [u8; 5] = [0x20, 0x03, 0x00, 0x00, 0x00];
    static READY: Readiness<1> = Readiness::new();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut inbound = Dispatch::<1, 1>::builder().build().unwrap();
    let mut routes = no_routes(&READY);
    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 256], [0u8; 256]);
    let mut c = config("aimdb-quiet");
    c.keep_alive = Some(Duration::from_secs(1));
    c.connect_timeout = Duration::from_millis(500);
    let connect = tcp(port);
    let mut mqtt = connector(c, &mut rx, &mut tx, connect, &counters);

    alongside(mqtt.run(&mut inbound, &mut routes), async {
        // 1: answers CONNECT, then swallows PINGREQs.
        let (mut first, _) = within("connection 1", listener.accept()).await.unwrap();
        let (kind, _) = within("CONNECT", read_packet(&mut first)).await;
        assert_eq!(kind & 0xf0, CONNECT);
        first.write_all(&CONNACK).await.unwrap();
        until("connected", || counters.is_connected()).await;
        let (kind, _) = within("PINGREQ", read_packet(&mut first)).await;
        assert_eq!(kind, PINGREQ);
        until("the missed PINGRESP to drop the connection", || {
            !counters.is_connected()
        })
        .await;
        assert_eq!(counters.last_error(), Some(Cause::Disconnected));

        // 2: accepts TCP, never sends CONNACK.
        let (_second, _) = within("connection 2", listener.accept()).await.unwrap();
        until("the connect timeout", || counters.connect_failures() == 1).await;
        assert_eq!(counters.last_error(), Some(Cause::ConnectTimeout));

        // 3: a working broker again.
        let (mut third, _) = within("connection 3", listener.accept()).await.unwrap();
        let (kind, _) = within("CONNECT", read_packet(&mut third)).await;
        assert_eq!(kind & 0xf0, CONNECT);
        third.write_all(&CONNACK).await.unwrap();
        until("reconnected", || {
            counters.is_connected() && counters.reconnects() == 1
        })
        .await;
        drop(first);
    })
    .await;
}

/// A session that outlives its connection: the fresh first session is
/// closed at once with a DISCONNECT and reopened with Clean Start = 0 (so
/// mosquitto persists it across its own restart); then a broker that stops
/// acknowledging: with a QoS 1 publish unacknowledged, its silence drops
/// the connection after the acknowledgement timeout (keep-alive is off, so
/// nothing else could), and on the resumed session the publish goes out
/// again with the DUP flag. Played by a hand-written listener: mosquitto
/// always acknowledges.
#[tokio::test]
async fn session_reopened_then_silent_broker_dropped_and_the_unacknowledged_publish_resent() {
    const CONNECT: u8 = 0x10;
    const DISCONNECT: u8 = 0xe0;
    const CLEAN_START: u8 = 0x02;
    // A `Latest` route: QoS 1, retained.
    const PUBLISH_QOS1: u8 = 0x33;
    const DUP: u8 = 0x08;
    // MQTT 5 CONNACK: session present or not, success, no properties.
    const CONNACK_FRESH: [u8; 5] = [0x20, 0x03, 0x00, 0x00, 0x00];
    const CONNACK_RESUMED: [u8; 5] = [0x20, 0x03, 0x01, 0x00, 0x00];
    static READY: Readiness<1> = Readiness::new();
    static TEMP: Record<Cs, Latest<u32>, 1> = Record::new("temp");

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut inbound = Dispatch::<1, 1>::builder().build().unwrap();
    let mut temp = outbound::Link::new(TEMP.subscribe().unwrap(), "t/x", Postcard);
    let mut payload = [0u8; 16];
    let mut b = Routes::<_, 1, 1>::builder(&READY, &mut payload);
    b.link(&mut temp);
    let mut routes = b.build().unwrap();
    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 256], [0u8; 512]);
    let mut c = config("aimdb-silent");
    c.keep_alive = None;
    c.ack_timeout = Some(Duration::from_millis(300));
    c.session_expiry = Some(Duration::from_secs(60));
    let mut mqtt = connector(c, &mut rx, &mut tx, tcp(port), &counters);
    // The CONNECT flags byte: after the protocol name (2 + 4 bytes) and
    // the version.
    let flags = |body: &[u8]| body[7];

    alongside(mqtt.run(&mut inbound, &mut routes), async {
        // 1: fresh session, closed and reopened at once.
        let (mut first, _) = within("connection 1", listener.accept()).await.unwrap();
        let (kind, body) = within("CONNECT", read_packet(&mut first)).await;
        assert_eq!(kind & 0xf0, CONNECT);
        assert_ne!(
            flags(&body) & CLEAN_START,
            0,
            "the first connection starts clean"
        );
        first.write_all(&CONNACK_FRESH).await.unwrap();
        let (kind, _) = within("DISCONNECT", read_packet(&mut first)).await;
        assert_eq!(kind, DISCONNECT);

        // 2: resumed; a publish that is never acknowledged.
        let (mut second, _) = within("connection 2", listener.accept()).await.unwrap();
        let (kind, body) = within("CONNECT", read_packet(&mut second)).await;
        assert_eq!(kind & 0xf0, CONNECT);
        assert_eq!(
            flags(&body) & CLEAN_START,
            0,
            "reopened without Clean Start"
        );
        second.write_all(&CONNACK_RESUMED).await.unwrap();
        until("connected", || counters.is_connected()).await;
        assert_eq!(counters.reconnects(), 0, "the reopening is not a reconnect");
        TEMP.write(7);
        let (kind, _) = within("PUBLISH", read_packet(&mut second)).await;
        assert_eq!(kind, PUBLISH_QOS1);
        // No PUBACK, no PINGRESP: silence.
        until("the silence to drop the connection", || {
            !counters.is_connected()
        })
        .await;
        assert_eq!(counters.ack_timeouts(), 1);
        assert_eq!(counters.last_error(), Some(Cause::AckTimeout));

        // 3: resumed; the publish again, marked DUP.
        let (mut third, _) = within("connection 3", listener.accept()).await.unwrap();
        let (kind, body) = within("CONNECT", read_packet(&mut third)).await;
        assert_eq!(kind & 0xf0, CONNECT);
        assert_eq!(flags(&body) & CLEAN_START, 0, "resumes the session");
        third.write_all(&CONNACK_RESUMED).await.unwrap();
        let (kind, body) = within("the PUBLISH again", read_packet(&mut third)).await;
        assert_eq!(kind, PUBLISH_QOS1 | DUP, "resent with DUP");
        assert_eq!(&body[2..5], b"t/x");
        until("reconnected", || counters.reconnects() == 1).await;
        drop((first, second));
    })
    .await;
}
