//! MQTT semantics by record kind, against a real mosquitto: state is
//! retained for late subscribers, streams and commands are not; a retained
//! command is not executed by a connector that starts after it; clearing a
//! retained message is not a rejection; commands replaced before they were
//! taken are counted. `mosquitto_sub` / `mosquitto_pub` play the other
//! clients (see `mosquitto/mod.rs`).
#![cfg(all(feature = "mqtt", feature = "tokio"))]

mod mosquitto;

use aimdb_connectors::mqtt::{Config, Counters, QoS};
use aimdb_connectors::reconnect::Backoff;
use aimdb_core::codec::Postcard;
use aimdb_core::inbound;
use aimdb_core::inbound::Dispatch;
use aimdb_core::outbound;
use aimdb_core::outbound::Routes;
use aimdb_core::record::{Latest, Mailbox, Record, Ring, TryRecvError};
use aimdb_core::sync::Readiness;
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
use mosquitto::{
    alongside, connector, free_port, publish, publish_retained, tcp, until, Broker, Sub,
};
use std::time::Duration;

fn config(client_id: &str) -> Config<'_> {
    let mut c = Config::new(client_id);
    c.backoff = Backoff {
        min: Duration::from_millis(20),
        max: Duration::from_millis(200),
    };
    c
}

/// A `Latest` route publishes retained: a subscriber that arrives after the
/// value went out still gets it. A `Ring` route does not retain.
#[tokio::test]
async fn latest_state_is_retained_for_late_subscribers_streams_are_not() {
    static STATE: Record<Cs, Latest<u32>, 1> = Record::new("state");
    static STREAM: Record<Cs, Ring<u32, 8>, 1> = Record::new("stream");
    static READY: Readiness<1> = Readiness::new();

    let port = free_port();
    let broker = Broker::anonymous(port);
    let mut early = Sub::start(&broker, "early", "kind/#").await;
    let mut inbound = Dispatch::<1, 1>::builder().build().unwrap();
    let mut state = outbound::Link::new(STATE.subscribe().unwrap(), "kind/state", Postcard);
    let mut stream = outbound::Link::new(STREAM.subscribe().unwrap(), "kind/stream", Postcard);
    let mut payload = [0u8; 16];
    let mut b = Routes::<_, 1, 2>::builder(&READY, &mut payload);
    b.link(&mut state).link(&mut stream);
    let mut routes = b.build().unwrap();
    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 256], [0u8; 512]);
    let mut mqtt = connector(
        config("aimdb-kinds"),
        &mut rx,
        &mut tx,
        tcp(port),
        &counters,
    );

    alongside(mqtt.run(&mut inbound, &mut routes), async {
        until("connected", || counters.is_connected()).await;
        STATE.write(21);
        STREAM.write(7);
        // Both reached the broker (an early subscriber saw them).
        let mut got = vec![early.next().await, early.next().await];
        got.sort();
        assert_eq!(got, ["kind/state 15", "kind/stream 07"]);

        let mut late = Sub::start(&broker, "late", "kind/#").await;
        assert_eq!(late.next().await, "kind/state 15", "state is retained");
        STREAM.write(8);
        // The next line is the live stream value, not a retained one.
        assert_eq!(
            late.next().await,
            "kind/stream 08",
            "streams are not retained"
        );
    })
    .await;
}

/// Each route publishes at the QoS of its link (its kind's default unless
/// the link sets one), whatever its position: a route linked in between
/// changes no other route's QoS. The subscriber asks for QoS 2, so each
/// message arrives at the QoS it was published with.
#[tokio::test]
async fn each_route_publishes_at_its_links_qos_whatever_its_position() {
    static STATE: Record<Cs, Latest<u32>, 2> = Record::new("state");
    static STREAM: Record<Cs, Ring<u32, 8>, 2> = Record::new("stream");
    static CMD: Record<Cs, Mailbox<u32>, 2> = Record::new("cmd");
    static MIDDLE: Record<Cs, Latest<u32>, 1> = Record::new("middle");
    static READY: Readiness<1> = Readiness::new();

    let port = free_port();
    let broker = Broker::anonymous(port);
    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 256], [0u8; 1024]);

    // Run 1: state (kind default), stream at 0, command at 2.
    {
        let mut sub = Sub::qos(&broker, "qos-1", "q1/#").await;
        let mut state = outbound::Link::new(STATE.subscribe().unwrap(), "q1/state", Postcard);
        let mut stream = outbound::Link::new(STREAM.subscribe().unwrap(), "q1/stream", Postcard)
            .qos(QoS::AtMostOnce);
        let mut cmd =
            outbound::Link::new(CMD.subscribe().unwrap(), "q1/cmd", Postcard).qos(QoS::ExactlyOnce);
        let mut payload = [0u8; 16];
        let mut b = Routes::<_, 1, 4>::builder(&READY, &mut payload);
        b.link(&mut state).link(&mut stream).link(&mut cmd);
        let mut routes = b.build().unwrap();
        let mut inbound = Dispatch::<1, 1>::builder().build().unwrap();
        let mut mqtt = connector(config("aimdb-qos"), &mut rx, &mut tx, tcp(port), &counters);
        alongside(mqtt.run(&mut inbound, &mut routes), async {
            until("connected", || counters.is_connected()).await;
            STATE.write(1);
            STREAM.write(2);
            CMD.write(3);
            let mut got = vec![sub.next().await, sub.next().await, sub.next().await];
            got.sort();
            assert_eq!(got, ["q1/cmd 2", "q1/state 1", "q1/stream 0"]);
        })
        .await;
    }

    // Run 2: the same links, with a route at QoS 2 linked between state
    // and stream.
    let mut sub = Sub::qos(&broker, "qos-2", "q2/#").await;
    let mut state = outbound::Link::new(STATE.subscribe().unwrap(), "q2/state", Postcard);
    let mut middle = outbound::Link::new(MIDDLE.subscribe().unwrap(), "q2/middle", Postcard)
        .qos(QoS::ExactlyOnce);
    let mut stream = outbound::Link::new(STREAM.subscribe().unwrap(), "q2/stream", Postcard)
        .qos(QoS::AtMostOnce);
    let mut cmd =
        outbound::Link::new(CMD.subscribe().unwrap(), "q2/cmd", Postcard).qos(QoS::ExactlyOnce);
    let mut payload = [0u8; 16];
    let mut b = Routes::<_, 1, 4>::builder(&READY, &mut payload);
    b.link(&mut state)
        .link(&mut middle)
        .link(&mut stream)
        .link(&mut cmd);
    let mut routes = b.build().unwrap();
    let mut inbound = Dispatch::<1, 1>::builder().build().unwrap();
    let mut mqtt = connector(config("aimdb-qos"), &mut rx, &mut tx, tcp(port), &counters);
    alongside(mqtt.run(&mut inbound, &mut routes), async {
        until("connected", || counters.is_connected()).await;
        MIDDLE.write(4);
        STREAM.write(5);
        CMD.write(6);
        // The state's current value goes out on its own (a new table
        // delivers every `Latest` record's value).
        let mut got: Vec<String> = Vec::new();
        for _ in 0..4 {
            got.push(sub.next().await);
        }
        got.sort();
        assert_eq!(
            got,
            ["q2/cmd 2", "q2/middle 2", "q2/state 1", "q2/stream 0"]
        );
    })
    .await;
}

/// A command kept by the broker (published retained before the connector
/// started) is not executed; retained state is applied; clearing the
/// retained command (an empty retained payload) is counted as `cleared`,
/// not rejected; live commands run as always.
#[tokio::test]
async fn a_retained_command_is_not_run_at_start_and_clearing_it_is_not_a_rejection() {
    static CMD: Record<Cs, Mailbox<u32>, 1> = Record::new("cmd");
    static SETPOINT: Record<Cs, Latest<u32>, 1> = Record::new("setpoint");
    static READY: Readiness<1> = Readiness::new();

    let port = free_port();
    let broker = Broker::anonymous(port);
    // Left on the broker "minutes ago": a command and a setpoint.
    publish_retained(&broker, "dev/cmd", &[0x07]).await;
    publish_retained(&broker, "dev/setpoint", &[0x05]).await;

    let mut cmds = CMD.subscribe().unwrap();
    let mut setpoint = SETPOINT.subscribe().unwrap();
    let (cmd_in, sp_in) = (
        inbound::Link::new(&CMD, Postcard),
        inbound::Link::new(&SETPOINT, Postcard),
    );
    let mut b = Dispatch::<2, 2>::builder();
    b.link("dev/cmd", &cmd_in).link("dev/setpoint", &sp_in);
    let mut inbound = b.build().unwrap();
    let mut routes = Routes::<_, 1, 1>::builder(&READY, &mut []).build().unwrap();
    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 256], [0u8; 256]);
    let mut mqtt = connector(
        config("aimdb-device"),
        &mut rx,
        &mut tx,
        tcp(port),
        &counters,
    );

    alongside(mqtt.run(&mut inbound, &mut routes), async {
        until("the retained setpoint applied", || SETPOINT.writes() == 1).await;
        assert_eq!(setpoint.try_recv(), Ok(5));
        // A live command after the subscription: the first one the mailbox
        // ever sees.
        publish(&broker, "dev/cmd", &[0x09]).await;
        until("the live command", || CMD.writes() >= 1).await;
        assert_eq!(cmds.try_recv(), Ok(9));
        assert_eq!(CMD.writes(), 1, "the retained command was never written");
        // Clear the retained command: subscribers get an empty payload.
        publish_retained(&broker, "dev/cmd", &[]).await;
        until("the clear", || counters.cleared() == 1).await;
        assert_eq!(counters.rejected(), 0, "a clear is not a bad payload");
        assert_eq!(cmds.try_recv(), Err(TryRecvError::Empty));
    })
    .await;
    let log = broker.log();
    assert!(
        log.contains("dev/cmd") && log.contains("aimdb-device"),
        "the broker saw the subscription:\n{log}"
    );
}

/// 20 commands in one burst while the consumer is busy: `Mailbox` keeps
/// the last (latest wins) and counts the 19 it replaced.
#[tokio::test]
async fn commands_replaced_before_they_were_taken_are_counted() {
    static CMD: Record<Cs, Mailbox<u32>, 1> = Record::new("cmd");
    static READY: Readiness<1> = Readiness::new();

    let port = free_port();
    let broker = Broker::anonymous(port);
    let mut cmds = CMD.subscribe().unwrap();
    let cmd_in = inbound::Link::new(&CMD, Postcard);
    let mut b = Dispatch::<1, 1>::builder();
    b.link("dev/cmd", &cmd_in);
    let mut inbound = b.build().unwrap();
    let mut routes = Routes::<_, 1, 1>::builder(&READY, &mut []).build().unwrap();
    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 256], [0u8; 256]);
    let mut mqtt = connector(config("aimdb-busy"), &mut rx, &mut tx, tcp(port), &counters);

    alongside(mqtt.run(&mut inbound, &mut routes), async {
        until("connected", || counters.is_connected()).await;
        broker.wait_log("Sending SUBACK to aimdb-busy").await;
        for v in 1..=20u8 {
            publish(&broker, "dev/cmd", &[v]).await;
        }
        until("all 20 received", || counters.received() == 20).await;
        assert_eq!(CMD.writes(), 20);
        assert_eq!(CMD.replaced(), 19, "the 19 overwritten are visible");
        assert_eq!(cmds.try_recv(), Ok(20), "latest wins");
    })
    .await;
}

/// An urgent route goes out before the normal routes that were ready with
/// it: the connector publishes in pull order, and a pull serves urgent
/// routes first.
#[tokio::test]
async fn an_urgent_route_is_published_before_the_ready_normal_ones() {
    const NORMAL: usize = 40;
    static STOP: Record<Cs, Latest<u8>, 1> = Record::new("stop");
    static READY: Readiness<2> = Readiness::new();
    let normal: &'static [Record<Cs, Ring<u8, 4>, 1>] = Box::leak(
        (0..NORMAL)
            .map(|_| Record::new("n"))
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    let topics: Vec<String> = (0..NORMAL).map(|i| format!("prio/n{i:02}")).collect();

    let port = free_port();
    let broker = Broker::anonymous(port);
    let mut sub = Sub::start(&broker, "prio-sub", "prio/#").await;
    let mut inbound = Dispatch::<1, 1>::builder().build().unwrap();
    let mut stop = outbound::Link::new(STOP.subscribe().unwrap(), "prio/stop", Postcard);
    let mut links: Vec<_> = normal
        .iter()
        .zip(&topics)
        .map(|(r, t)| outbound::Link::new(r.subscribe().unwrap(), t.as_str(), Postcard))
        .collect();
    let mut payload = [0u8; 16];
    let mut b = Routes::<_, 2, 64>::builder(&READY, &mut payload);
    b.link_urgent(&mut stop);
    for l in &mut links {
        b.link(l);
    }
    let mut routes = b.build().unwrap();
    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 256], [0u8; 2048]);
    let mut mqtt = connector(config("aimdb-prio"), &mut rx, &mut tx, tcp(port), &counters);

    alongside(mqtt.run(&mut inbound, &mut routes), async {
        until("connected", || counters.is_connected()).await;
        // All ready at once, the urgent one written last.
        for r in normal {
            r.write(1);
        }
        STOP.write(1);
        let first = sub.next().await;
        assert_eq!(first, "prio/stop 01", "urgent first");
        let mut rest = Vec::new();
        for _ in 0..NORMAL {
            rest.push(sub.next().await);
        }
        rest.sort();
        let want: Vec<String> = topics.iter().map(|t| format!("{t} 01")).collect();
        assert_eq!(rest, want, "then every normal route once");
    })
    .await;
}
