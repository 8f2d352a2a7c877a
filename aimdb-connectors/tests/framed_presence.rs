//! The framed connector's heartbeat and link state: keep-alives, the
//! silence timeout, and the `LinkState` record a task awaits.
//!
//! Two connectors over the in-memory loopback pair, timed by tokio (short
//! intervals); every wait is bounded and fails only on its timeout.

mod common;

use std::collections::VecDeque;
use std::future::Future;
use std::time::Duration;

use aimdb_connectors::fault::{Fault, Faulty, Plan};
use aimdb_connectors::framed::{Config, Counters, Error, Framed, Heartbeat};
use aimdb_connectors::loopback::{Pair, PipeReader, PipeWriter};
use aimdb_connectors::tokio_io::TokioClock;
use aimdb_core::codec::Postcard;
use aimdb_core::inbound::{self, Dispatch};
use aimdb_core::outbound::{self, Routes};
use aimdb_core::presence::{Cause, LinkState};
use aimdb_core::record::{Latest, Record, Ring};
use aimdb_core::sync::Readiness;
use common::leak;
use embassy_futures::select::{select, Either};
use embassy_sync::blocking_mutex::raw::{CriticalSectionRawMutex as Cs, NoopRawMutex};

type P = Pair<NoopRawMutex, 1024>;
type LinkLog = Record<Cs, Ring<LinkState, 32>, 1>;

/// Runs `f` on a current-thread runtime, failing after 20 s.
fn bounded<F: Future>(f: F) -> F::Output {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(20), f)
            .await
            .expect("test timed out")
    })
}

/// Heartbeat on: a keep-alive after 10 ms idle, the peer gone after 40 ms
/// of silence; first birth sequence `seq`.
fn config(seq: u64) -> Config {
    let mut c = Config::new();
    c.heartbeat = Some(Heartbeat::new(
        Duration::from_millis(10),
        Duration::from_millis(40),
    ));
    c.first_seq = seq;
    c.backoff.min = Duration::from_millis(1);
    c
}

fn no_dispatch() -> Dispatch<'static, 1, 1> {
    Dispatch::<1, 1>::builder().build().unwrap()
}

fn no_routes() -> Routes<'static, &'static Readiness<1>, 1, 1> {
    Routes::<_, 1, 1>::builder(leak(Readiness::new()), &mut [])
        .build()
        .unwrap()
}

/// Hands out the scripted pairs' `a` ends, one per connection.
struct Conns(VecDeque<&'static P>);

impl aimdb_connectors::Connect for Conns {
    type Connection<'c> = (
        PipeReader<'static, NoopRawMutex, 1024>,
        PipeWriter<'static, NoopRawMutex, 1024>,
    );
    type Error = &'static str;
    async fn connect(&mut self) -> Result<Self::Connection<'_>, Self::Error> {
        self.0
            .pop_front()
            .map(|p| p.a())
            .ok_or("no more connections")
    }
}

/// Waits until `f` holds, checking every millisecond.
async fn until(mut f: impl FnMut() -> bool) {
    while !f() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// (a) The peer's writes stall (the fault transport holds every byte after
/// its hello): our side reports the link offline with cause `Silent`,
/// `run_reconnecting` reconnects, and once the peer runs again the link
/// is back online, with the peer's new sequence.
#[test]
fn a_stalled_peer_goes_silent_and_the_link_comes_back() {
    let log: &'static LinkLog = leak(Record::new("link"));
    let mut reader = log.subscribe().unwrap();
    let (first, second): (&'static P, &'static P) = (leak(P::new()), leak(P::new()));
    let (a_stats, b_stats) = (Counters::new(), Counters::new());
    let mut a = Framed::<64, 128>::with_sizes(&a_stats)
        .with_config(config(1))
        .with_link(log);
    let mut b = Framed::<64, 128>::with_sizes(&b_stats).with_config(config(7));
    let (mut a_in, mut a_out, mut b_in, mut b_out) =
        (no_dispatch(), no_routes(), no_dispatch(), no_routes());
    // B's hello (5 bytes) passes, then its writes stall for good.
    const STALL: &[Fault] = &[Fault::Delay {
        at: 5,
        polls: u32::MAX,
    }];

    let seen = bounded(async {
        let run = a.run_reconnecting(
            Conns(VecDeque::from([first, second])),
            TokioClock::new(),
            &mut a_in,
            &mut a_out,
        );
        let test = async {
            let mut seen = Vec::new();
            // The task awaiting the link record: it wakes on each change.
            let (rx, tx) = first.b();
            let stalled = b.run_with_clock(
                rx,
                Faulty::new(tx, Plan::new().script(STALL)),
                TokioClock::new(),
                &mut b_in,
                &mut b_out,
            );
            let down = async {
                loop {
                    let s = reader.recv().await.unwrap();
                    seen.push(s);
                    if s.cause.is_some() {
                        return;
                    }
                }
            };
            match select(stalled, down).await {
                Either::First(e) => panic!("the stalled side ended first: {e}"),
                Either::Second(()) => {}
            }
            // The stall ends: the peer runs again (a new connection).
            let (rx, tx) = second.b();
            let again = b.run_with_clock(rx, tx, TokioClock::new(), &mut b_in, &mut b_out);
            let up = async {
                loop {
                    let s = reader.recv().await.unwrap();
                    seen.push(s);
                    if s.is_online() {
                        return;
                    }
                }
            };
            match select(again, up).await {
                Either::First(e) => panic!("the peer ended: {e}"),
                Either::Second(()) => {}
            }
            seen
        };
        match select(run, test).await {
            Either::First(s) => panic!("run_reconnecting stopped: {s}"),
            Either::Second(seen) => seen,
        }
    });

    assert_eq!(
        seen,
        [
            LinkState::connecting(0),
            LinkState::online(7),
            LinkState::offline(7, Cause::Silent),
            LinkState::connecting(7),
            LinkState::online(8),
        ]
    );
    let s = a_stats.snapshot();
    assert_eq!((s.peer_silent, s.reconnects), (1, 1), "{s:?}");
}

/// (b) Keep-alives are absorbed by the receiving connector, heartbeat or
/// not: never dispatched, never rejected, counted on both sides apart from
/// the data frames.
#[test]
fn keepalives_are_counted_and_never_dispatched() {
    let out: &'static Record<Cs, Latest<u32>, 1> = leak(Record::new("out"));
    let got: &'static Record<Cs, Latest<u32>, 1> = leak(Record::new("got"));
    let mut got_reader = got.subscribe().unwrap();
    let link = Box::leak(Box::new(outbound::Link::new(
        out.subscribe().unwrap(),
        "t",
        Postcard,
    )));
    let mut b = Routes::<_, 1, 1>::builder(leak(Readiness::new()), Box::leak(Box::new([0u8; 16])));
    b.link(link);
    let mut a_out = b.build().unwrap();
    let mut b_in = Dispatch::<1, 1>::builder();
    b_in.link("t", leak(inbound::Link::new(got, Postcard)));
    let mut b_in = b_in.build().unwrap();
    let (mut a_in, mut b_out) = (no_dispatch(), no_routes());
    let (a_stats, b_stats) = (Counters::new(), Counters::new());
    // A with the heartbeat; B without (it must absorb A's keep-alives
    // all the same).
    let mut a = Framed::<64, 128>::with_sizes(&a_stats).with_config(config(1));
    let mut b = Framed::<64, 128>::with_sizes(&b_stats);
    let pair = P::new();
    let ((a_rx, a_tx), (b_rx, b_tx)) = (pair.a(), pair.b());

    out.write(5);
    bounded(async {
        let runs = embassy_futures::join::join(
            a.run_with_clock(a_rx, a_tx, TokioClock::new(), &mut a_in, &mut a_out),
            b.run(b_rx, b_tx, &mut b_in, &mut b_out),
        );
        let watch = async {
            assert_eq!(got_reader.recv().await, Ok(5));
            // The hello and at least three idle keep-alives sent, and all
            // of A's bytes read by B.
            until(|| {
                let (sa, sb) = (a_stats.snapshot(), b_stats.snapshot());
                sa.heartbeats_sent >= 4 && sb.bytes_in == sa.bytes_out
            })
            .await;
        };
        match select(runs, watch).await {
            Either::First(_) => panic!("a connector ended"),
            Either::Second(()) => {}
        }
    });

    let (sa, sb) = (a_stats.snapshot(), b_stats.snapshot());
    assert_eq!(sa.sent, 1, "only the value counts as sent: {sa:?}");
    assert!(sa.heartbeats_sent >= 4, "{sa:?}");
    assert_eq!(sb.received, 1, "only the value was dispatched: {sb:?}");
    assert_eq!(sb.errors_in(), 0, "{sb:?}");
    assert!(sb.heartbeats_received >= 4, "{sb:?}");
    let d = b_in.stats();
    assert_eq!(d.delivered, 1, "{d:?}");
    assert_eq!((d.invalid_topic, d.unknown_topic), (0, 0), "{d:?}");
}

/// (c) A task awaiting a `Latest<LinkState>` record wakes when the link
/// comes up and again when it goes down (the peer stops: silence).
#[test]
fn a_task_awaiting_the_link_record_wakes_on_up_and_on_down() {
    static LINK: Record<Cs, Latest<LinkState>, 1> = Record::new("link");
    let mut reader = LINK.subscribe().unwrap();
    let (a_stats, b_stats) = (Counters::new(), Counters::new());
    let mut a = Framed::<64, 128>::with_sizes(&a_stats)
        .with_config(config(1))
        .with_link(&LINK);
    let mut b = Framed::<64, 128>::with_sizes(&b_stats).with_config(config(3));
    let (mut a_in, mut a_out, mut b_in, mut b_out) =
        (no_dispatch(), no_routes(), no_dispatch(), no_routes());
    let pair = P::new();
    let ((a_rx, a_tx), (b_rx, b_tx)) = (pair.a(), pair.b());

    let (up, down, end) = bounded(async {
        let a_run = a.run_with_clock(a_rx, a_tx, TokioClock::new(), &mut a_in, &mut a_out);
        let test = async {
            let peer = b.run_with_clock(b_rx, b_tx, TokioClock::new(), &mut b_in, &mut b_out);
            let up = match select(peer, reader.recv()).await {
                Either::First(e) => panic!("the peer ended: {e}"),
                Either::Second(s) => s.unwrap(),
            };
            // The peer stops (its run is dropped; the pair stays open).
            let down = reader.recv().await.unwrap();
            (up, down)
        };
        let (end, (up, down)) = embassy_futures::join::join(a_run, test).await;
        (up, down, end)
    });
    assert_eq!(up, LinkState::online(3));
    assert_eq!(down, LinkState::offline(3, Cause::Silent));
    assert_eq!(end, Error::PeerSilent);
    assert_eq!(a.link_state(), Some(down));
    assert_eq!(a_stats.snapshot().peer_silent, 1);
}

/// Without a heartbeat the link is online as soon as the run starts, and
/// offline with cause `Closed` when the peer closes.
#[test]
fn without_heartbeat_the_link_is_up_for_the_run() {
    let log: &'static LinkLog = leak(Record::new("link"));
    let mut reader = log.subscribe().unwrap();
    let a_stats = Counters::new();
    let mut a = Framed::<64, 128>::with_sizes(&a_stats).with_link(log);
    let (mut a_in, mut a_out) = (no_dispatch(), no_routes());
    let pair = P::new();
    let (a_rx, a_tx) = pair.a();
    let (up, down) = bounded(async {
        let run = a.run(a_rx, a_tx, &mut a_in, &mut a_out);
        let test = async {
            let up = reader.recv().await.unwrap();
            pair.close();
            (up, reader.recv().await.unwrap())
        };
        embassy_futures::join::join(run, test).await.1
    });
    assert_eq!(up, LinkState::online(1));
    assert_eq!(down, LinkState::offline(1, Cause::Closed));
}

/// (d) The link state carries the peer's sequence (from its keep-alives),
/// and a peer that restarts on a link that never closed (a device
/// rebooting on a UART) shows its new sequence.
#[test]
fn the_link_state_carries_the_peers_sequence() {
    let log: &'static LinkLog = leak(Record::new("link"));
    let mut reader = log.subscribe().unwrap();
    let b_log: &'static LinkLog = leak(Record::new("b-link"));
    let mut b_reader = b_log.subscribe().unwrap();
    let (a_stats, b_stats) = (Counters::new(), Counters::new());
    let mut a = Framed::<64, 128>::with_sizes(&a_stats)
        .with_config(config(1))
        .with_link(log);
    let mut b = Framed::<64, 128>::with_sizes(&b_stats)
        .with_config(config(41))
        .with_link(b_log);
    let (mut a_in, mut a_out, mut b_in, mut b_out) =
        (no_dispatch(), no_routes(), no_dispatch(), no_routes());
    let pair = P::new();
    let ((a_rx, a_tx), (b_rx, b_tx)) = (pair.a(), pair.b());
    let (b_rx2, b_tx2) = pair.b();

    let (seen, b_seen) = bounded(async {
        let a_run = a.run_with_clock(a_rx, a_tx, TokioClock::new(), &mut a_in, &mut a_out);
        let test = async {
            let mut seen = Vec::new();
            let peer = b.run_with_clock(b_rx, b_tx, TokioClock::new(), &mut b_in, &mut b_out);
            let first = async {
                seen.push(reader.recv().await.unwrap());
                // B sees A's sequence too.
                b_reader.recv().await.unwrap()
            };
            let b_seen = match select(peer, first).await {
                Either::First(e) => panic!("the peer ended: {e}"),
                Either::Second(s) => s,
            };
            // B restarts on the same, still open, pair: its next birth.
            let peer = b.run_with_clock(b_rx2, b_tx2, TokioClock::new(), &mut b_in, &mut b_out);
            let next = async { reader.recv().await.unwrap() };
            match select(peer, next).await {
                Either::First(e) => panic!("the peer ended: {e}"),
                Either::Second(s) => seen.push(s),
            }
            pair.close();
            (seen, b_seen)
        };
        let (end, r) = embassy_futures::join::join(a_run, test).await;
        assert_eq!(end, Error::Closed);
        r
    });
    assert_eq!(seen, [LinkState::online(41), LinkState::online(42)]);
    assert_eq!(b_seen, LinkState::online(1));
    let mut last = None;
    while let Ok(s) = reader.try_recv() {
        last = Some(s);
    }
    assert_eq!(last, Some(LinkState::offline(42, Cause::Closed)));
    let s = a_stats.snapshot();
    assert_eq!(s.errors_in(), 0, "{s:?}");
}
