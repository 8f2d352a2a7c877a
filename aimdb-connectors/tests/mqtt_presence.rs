//! Presence against a real mosquitto: the birth on every connection, the
//! will when a connection dies without a goodbye (a killed process, a
//! connection gone silent), the goodbye of a graceful stop, the birth
//! sequence across restarts and reconnects, and the link state a task
//! awaits. `mosquitto_sub` plays the consumer (see `mosquitto/mod.rs`).
#![cfg(all(feature = "mqtt", feature = "tokio"))]

mod mosquitto;

use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aimdb_connectors::mqtt::{Config, Counters, Presence};
use aimdb_connectors::reconnect::{Backoff, Stopped};
use aimdb_core::codec::{Decode, Json};
use aimdb_core::inbound::Dispatch;
use aimdb_core::outbound::Routes;
use aimdb_core::presence::{Cause, LinkState, Status};
use aimdb_core::record::{Latest, Record};
use aimdb_core::sync::Readiness;
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
use mosquitto::{connector, free_port, tcp, Broker, Sub};
use tokio::io::AsyncReadExt;
use tokio::io::AsyncWriteExt;

const TOPIC: &str = "site/dev-7/presence";
const KEEP_ALIVE: Duration = Duration::from_secs(2);

fn config(client_id: &str, first_seq: u64) -> Config<'_> {
    let mut c = Config::new(client_id);
    c.keep_alive = Some(KEEP_ALIVE);
    c.connect_timeout = Duration::from_secs(2);
    c.backoff = Backoff {
        min: Duration::from_millis(20),
        max: Duration::from_millis(200),
    };
    let mut p = Presence::new(TOPIC);
    p.first_seq = first_seq;
    c.presence = Some(p);
    c
}

/// Empty tables (presence needs no route), counters and session buffers.
macro_rules! no_routes {
    ($ready:ident, $inbound:ident, $outbound:ident, $counters:ident, $rx:ident, $tx:ident) => {
        let mut $inbound = Dispatch::<1, 1>::builder().build().unwrap();
        let mut payload = [0u8; 8];
        let mut $outbound = Routes::<_, 1, 1>::builder(&$ready, &mut payload)
            .build()
            .unwrap();
        let $counters = Counters::new();
        let (mut $rx, mut $tx) = ([0u8; 256], [0u8; 512]);
    };
}

/// The next presence payload `sub` prints, parsed as a consumer would
/// (JSON; the will's padding included).
async fn next_state(sub: &mut Sub) -> LinkState {
    let line = sub.next().await;
    let (topic, payload) = line.split_once(' ').expect("topic and payload");
    assert_eq!(topic, TOPIC);
    Json.decode(payload.as_bytes())
        .unwrap_or_else(|e| panic!("presence payload {payload:?} is not the convention's: {e}"))
}

/// `next_state` within `bound`: how soon a death is seen is the point.
async fn next_state_within(sub: &mut Sub, bound: Duration) -> (LinkState, Duration) {
    let t = Instant::now();
    let s = tokio::time::timeout(bound, next_state(sub))
        .await
        .unwrap_or_else(|_| panic!("no presence change within {bound:?}"));
    (s, t.elapsed())
}

/// Runs a connector with presence and no routes until it is killed: the
/// process that the first test starts and SIGKILLs (run only as that
/// child: it reads its broker port and first sequence from the
/// environment).
#[tokio::test]
#[ignore = "the child process of a_killed_process_..., started by it"]
async fn presence_child() {
    let port: u16 = std::env::var("PRESENCE_PORT").unwrap().parse().unwrap();
    let first: u64 = std::env::var("PRESENCE_FIRST_SEQ")
        .unwrap()
        .parse()
        .unwrap();
    static READY: Readiness<1> = Readiness::new();
    no_routes!(READY, inbound, outbound, counters, rx, tx);
    let mut mqtt = connector(
        config("dev-7", first),
        &mut rx,
        &mut tx,
        tcp(port),
        &counters,
    );
    let why = mqtt.run(&mut inbound, &mut outbound).await;
    panic!("connector stopped: {why}");
}

fn child(port: u16, first_seq: u64) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "presence_child", "--nocapture"])
        .env("PRESENCE_PORT", port.to_string())
        .env("PRESENCE_FIRST_SEQ", first_seq.to_string())
        .spawn()
        .expect("start the child connector")
}

/// Kills (SIGKILL) a child this test started.
fn kill(mut c: Child) {
    c.kill().expect("kill the child");
    c.wait().expect("reap the child");
}

/// A process killed without DISCONNECT: its will says `offline` (cause
/// `lost`, the sequence of its birth); restarted with a larger seed, it is
/// born again with a larger sequence, and the old death is recognisably
/// stale next to the new birth.
#[tokio::test]
async fn a_killed_process_is_declared_offline_by_its_will_and_reborn_with_a_larger_seq() {
    let port = free_port();
    let broker = Broker::anonymous(port);
    let mut sub = Sub::text(&broker, "watcher", TOPIC).await;

    let first = child(port, 1_000);
    let born = next_state(&mut sub).await;
    assert_eq!(born, LinkState::online(1_000));
    kill(first);
    let (death, after) = next_state_within(&mut sub, KEEP_ALIVE * 3 / 2).await;
    assert_eq!(death, LinkState::offline(1_000, Cause::Lost));
    eprintln!("will seen {after:?} after SIGKILL");

    let second = child(port, 2_000);
    let reborn = next_state(&mut sub).await;
    assert_eq!(reborn.status, Status::Online);
    assert!(reborn.seq > born.seq, "{reborn:?} after {born:?}");
    // The first process's death, had it arrived late, would be ignored.
    assert!(!death.applies_after(&reborn));
    kill(second);
    assert_eq!(
        next_state(&mut sub).await,
        LinkState::offline(2_000, Cause::Lost)
    );
}

/// A TCP relay to the broker that the test can freeze: while frozen it
/// forwards nothing either way and keeps the sockets open, so the broker
/// hears nothing (no FIN, no PINGREQ): a link gone silent.
async fn relay(broker_port: u16, frozen: Arc<AtomicBool>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else {
                return;
            };
            let Ok(upstream) = tokio::net::TcpStream::connect(("127.0.0.1", broker_port)).await
            else {
                continue;
            };
            let (cr, cw) = client.into_split();
            let (ur, uw) = upstream.into_split();
            tokio::spawn(pipe(cr, uw, frozen.clone()));
            tokio::spawn(pipe(ur, cw, frozen.clone()));
        }
    });
    port
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<AtomicBool>,
) {
    let mut buf = [0u8; 1024];
    // A bounded hold: a frozen relay is released by the test or dropped
    // with it.
    while let Ok(n @ 1..) = from.read(&mut buf).await {
        while frozen.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// How long the broker may take to publish the will of a silent client.
/// MQTT 5 asks for 1.5 × keep-alive; mosquitto 2.0.11 disconnects a
/// silent client only after about 2.5 × (4.8 s for a bare client with a
/// 2 s keep-alive), so the bound here is 3 × keep-alive plus a margin for
/// a loaded machine.
const SILENT_BOUND: Duration = Duration::from_secs(KEEP_ALIVE.as_secs() * 3 + 2);

/// A connection gone silent: the broker publishes the will when its
/// keep-alive check fires (see [`SILENT_BOUND`]); the connector notices (its ping goes unanswered), and when
/// the link is back it reconnects with the next birth sequence. A task
/// awaiting the link record wakes on each change.
#[tokio::test]
async fn a_silent_link_gets_its_will_and_a_new_birth_when_it_is_back() {
    static LINK: Record<Cs, Latest<LinkState>, 1> = Record::new("link");
    static READY: Readiness<1> = Readiness::new();
    let port = free_port();
    let broker = Broker::anonymous(port);
    let mut sub = Sub::text(&broker, "watcher", TOPIC).await;
    let frozen = Arc::new(AtomicBool::new(false));
    let relay_port = relay(port, frozen.clone()).await;

    // The awaiting task: every state it wakes on, until the second birth.
    let mut reader = LINK.subscribe().unwrap();
    let watcher = tokio::spawn(async move {
        let mut seen = Vec::new();
        loop {
            let s = reader.recv().await.unwrap();
            seen.push(s);
            if s == LinkState::online(2) {
                return seen;
            }
        }
    });

    no_routes!(READY, inbound, outbound, counters, rx, tx);
    let mut mqtt = connector(
        config("dev-7", 1),
        &mut rx,
        &mut tx,
        tcp(relay_port),
        &counters,
    )
    .with_link(&LINK);
    let run = mqtt.run(&mut inbound, &mut outbound);
    let body = async {
        assert_eq!(next_state(&mut sub).await, LinkState::online(1));
        frozen.store(true, Ordering::Relaxed);
        let (death, after) = next_state_within(&mut sub, SILENT_BOUND).await;
        assert_eq!(death, LinkState::offline(1, Cause::Lost));
        eprintln!("will seen {after:?} after the link went silent (keep-alive {KEEP_ALIVE:?})");
        // The connector finds out on its own (unanswered ping), then
        // retries until the link is back.
        mosquitto::until("the connector to notice", || {
            LINK.latest().is_some_and(|s| s.status != Status::Online)
        })
        .await;
        frozen.store(false, Ordering::Relaxed);
        assert_eq!(next_state(&mut sub).await, LinkState::online(2));
        mosquitto::until("the link record to say so", || {
            LINK.latest() == Some(LinkState::online(2))
        })
        .await;
    };
    mosquitto::alongside(run, body).await;
    let seen = mosquitto::within("the awaiting task", watcher)
        .await
        .unwrap();
    assert_eq!(
        seen,
        [
            LinkState::connecting(1),
            LinkState::online(1),
            LinkState::offline(1, Cause::Closed),
            LinkState::connecting(2),
            LinkState::online(2),
        ]
    );
}

/// A graceful stop: `offline` with cause `stopped` at once (the clean
/// DISCONNECT suppresses the will, so the connector says it itself), the
/// link record says so, and the run returns `Stopped::Requested`.
#[tokio::test]
async fn a_graceful_stop_publishes_offline_itself() {
    static LINK: Record<Cs, Latest<LinkState>, 1> = Record::new("link");
    static READY: Readiness<1> = Readiness::new();
    let port = free_port();
    let broker = Broker::anonymous(port);
    let mut sub = Sub::text(&broker, "watcher", TOPIC).await;
    no_routes!(READY, inbound, outbound, counters, rx, tx);
    let mut mqtt =
        connector(config("dev-7", 5), &mut rx, &mut tx, tcp(port), &counters).with_link(&LINK);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let stop = async {
        let _ = stop_rx.await;
    };
    let run = mqtt.run_until(&mut inbound, &mut outbound, stop);
    let body = async {
        assert_eq!(next_state(&mut sub).await, LinkState::online(5));
        stop_tx.send(()).unwrap();
        let (bye, after) = next_state_within(&mut sub, KEEP_ALIVE).await;
        assert_eq!(bye, LinkState::offline(5, Cause::Stopped));
        eprintln!("goodbye seen {after:?} after the stop");
    };
    let (why, ()) = tokio::join!(run, body);
    assert_eq!(why, Stopped::Requested);
    assert_eq!(LINK.latest(), Some(LinkState::offline(5, Cause::Stopped)));
    // The broker had a clean DISCONNECT: no will follows the goodbye.
    assert!(
        tokio::time::timeout(KEEP_ALIVE * 2, sub.next())
            .await
            .is_err(),
        "nothing after the goodbye"
    );
}
