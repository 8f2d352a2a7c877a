//! The framed-stream connector over the in-memory loopback pair.

mod common;

use aimdb_connectors::framed::{frame, Counters, Error, Framed};
use aimdb_connectors::loopback::Pair;
use aimdb_core::codec::Postcard;
use aimdb_core::connector::{Message, QoS, Ready};
use aimdb_core::inbound;
use aimdb_core::inbound::Dispatch;
use aimdb_core::outbound;
use aimdb_core::outbound::Routes;
use aimdb_core::record::{Latest, Record, Ring};
use aimdb_core::sync::Readiness;
use common::{block_on, expect_all, produce, side};
use embassy_futures::join::join;
use embassy_sync::blocking_mutex::raw::{CriticalSectionRawMutex as Cs, NoopRawMutex};
use embedded_io_async::{Read, Write};

#[test]
fn many_routes_both_ways_arrive_exactly_once_in_order() {
    const ROUTES: usize = 256;
    const ROUNDS: u32 = 48;
    let a = side("a2b", "b2a", ROUTES);
    let b = side("b2a", "a2b", ROUTES);
    let (mut a_in, mut b_in) = (a.in_readers(), b.in_readers());
    let pair = Pair::<NoopRawMutex, 1024>::new();
    let ((a_rx, a_tx), (b_rx, b_tx)) = (pair.a(), pair.b());
    let (a_stats, b_stats) = (Counters::new(), Counters::new());

    block_on(async {
        // A side may stop only when both have received everything: its own
        // values could still be in flight to the other side.
        let both = tokio::sync::Barrier::new(2);
        let a_work = async {
            join(produce(&a.out, ROUNDS), expect_all(&mut a_in, ROUNDS)).await;
            both.wait().await;
        };
        let b_work = async {
            join(produce(&b.out, ROUNDS), expect_all(&mut b_in, ROUNDS)).await;
            both.wait().await;
        };
        let (ra, rb) = join(
            a.run(a_rx, a_tx, &a_stats, a_work),
            b.run(b_rx, b_tx, &b_stats, b_work),
        )
        .await;
        ra.expect("side a transport");
        rb.expect("side b transport");
    });
    let total = ROUTES as u32 * ROUNDS;
    for s in [a_stats.snapshot(), b_stats.snapshot()] {
        assert_eq!(s.received, total);
        assert_eq!(s.sent, total);
        assert_eq!(s.errors_in(), 0);
    }
}

static TEMP: Record<Cs, Ring<i32, 8>, 1> = Record::new("temp");
static STATUS: Record<Cs, Latest<u8>, 1> = Record::new("status");

#[test]
fn bad_frames_are_counted_skipped_and_the_next_good_frame_lands() {
    let mut temp_reader = TEMP.subscribe().unwrap();
    let temp_link = inbound::Link::new(&TEMP, Postcard);
    let mut b = Dispatch::<8, 4>::builder();
    b.link("sensors/temp", &temp_link);
    let mut dispatch = b.build().unwrap();
    let ready = Readiness::<1>::new();
    let ready: &'static Readiness<1> = Box::leak(Box::new(ready));
    let (mut payload, mut topic) = ([0u8; 16], [0u8; 16]);
    let mut routes = Routes::<_, 1, 1>::builder(ready, &mut payload)
        .written_topics(&mut topic)
        .build()
        .unwrap();

    let pair = Pair::<NoopRawMutex, 4096>::new();
    let ((_, mut peer_tx), (rx, tx)) = (pair.a(), pair.b());
    let stats = Counters::new();
    let mut framed = Framed::<64, 128>::with_sizes(&stats);

    let mut wire = Vec::new();
    let frame = |wire: &mut Vec<u8>, t: &str, p: &[u8]| {
        let mut buf = [0u8; 256];
        let n = frame::encode(t, p, &mut buf).unwrap();
        wire.extend_from_slice(&buf[..n]);
    };
    frame(
        &mut wire,
        "sensors/temp",
        &postcard::to_allocvec(&17i32).unwrap(),
    ); // good
    frame(&mut wire, "sensors/unknown", &[2]); // unknown topic: rejected by dispatch
    frame(
        &mut wire,
        "sensors/temp",
        &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
    ); // bad payload
    frame(&mut wire, "sensors/+", &[2]); // wildcard in a published topic
    frame(&mut wire, "sensors/temp", &[7u8; 100]); // over the 64-byte receive buffer
    wire.extend_from_slice(&[9, 1, 2, 0]); // broken COBS
    wire.extend_from_slice(&[3, 3, b'a', 0]); // COBS fine, not a tuple
    wire.extend_from_slice(&[0x55; 300]); // noise, no delimiter...
    wire.push(0); // ...ended here (oversized)
    frame(
        &mut wire,
        "sensors/temp",
        &postcard::to_allocvec(&-4i32).unwrap(),
    ); // good

    block_on(async {
        let feed = async {
            // Odd-sized writes so frames straddle reads.
            for piece in wire.chunks(7) {
                peer_tx.write(piece).await.unwrap();
            }
        };
        let check = async {
            assert_eq!(temp_reader.recv().await, Ok(17));
            assert_eq!(temp_reader.recv().await, Ok(-4));
        };
        let run = framed.run(rx, tx, &mut dispatch, &mut routes);
        match embassy_futures::select::select(run, join(feed, check)).await {
            embassy_futures::select::Either::First(e) => panic!("connection ended: {e}"),
            embassy_futures::select::Either::Second(_) => {}
        }
    });
    let s = stats.snapshot();
    assert_eq!(
        s.received, 5,
        "2 good frames and 3 the dispatcher rejected: {s:?}"
    );
    assert_eq!(s.rejected, 3, "{s:?}");
    assert_eq!(s.oversized, 2, "{s:?}");
    assert_eq!(s.cobs_errors, 1, "{s:?}");
    assert_eq!(s.malformed, 1, "{s:?}");
    let d = dispatch.stats();
    assert_eq!(d.delivered, 2, "{d:?}");
    assert!(
        temp_reader.try_recv().is_err(),
        "no value from a rejected frame"
    );
}

#[test]
fn closed_transport_ends_the_run_and_latest_is_replayed_after_reconnect() {
    let status_link = outbound::Link::new(STATUS.subscribe().unwrap(), "status", Postcard);
    let mut status_link = status_link;
    let ready: &'static Readiness<1> = Box::leak(Box::new(Readiness::new()));
    let (mut payload, mut topic) = ([0u8; 16], [0u8; 16]);
    let mut b = Routes::<_, 1, 1>::builder(ready, &mut payload).written_topics(&mut topic);
    b.link(&mut status_link);
    let mut routes = b.build().unwrap();
    let mut dispatch = Dispatch::<1, 1>::builder().build().unwrap();

    let pair = Pair::<NoopRawMutex, 256>::new();
    let stats = Counters::new();
    let mut framed = Framed::<64, 128>::with_sizes(&stats);

    STATUS.write(5);
    block_on(async {
        // First connection: the value goes out, then the peer hangs up.
        let (peer_rx, _) = pair.a();
        let (rx, tx) = pair.b();
        let run = framed.run(rx, tx, &mut dispatch, &mut routes);
        let peer = async {
            let got = read_one(peer_rx).await;
            pair.close();
            got
        };
        let (end, got) = join(run, peer).await;
        assert_eq!(end, Error::Closed);
        assert_eq!(got, (b"status".to_vec(), vec![5]));

        // Reconnect: nothing new was written, yet the newest status is
        // published again.
        pair.reopen();
        framed.reset();
        routes.replay_latest();
        let (peer_rx, _) = pair.a();
        let (rx, tx) = pair.b();
        let run = framed.run(rx, tx, &mut dispatch, &mut routes);
        match embassy_futures::select::select(run, read_one(peer_rx)).await {
            embassy_futures::select::Either::First(e) => panic!("ended: {e}"),
            embassy_futures::select::Either::Second(got) => {
                assert_eq!(got, (b"status".to_vec(), vec![5]))
            }
        }
    });
    assert_eq!(stats.snapshot().sent, 2);
}

/// Reads until one whole frame arrived.
async fn read_one(mut rx: impl Read) -> (Vec<u8>, Vec<u8>) {
    let mut dec = frame::Decoder::<64>::new();
    let mut buf = [0u8; 64];
    loop {
        let n = rx.read(&mut buf).await.unwrap();
        if let frame::Event::Frame(f, _) = dec.push(&buf[..n]) {
            return (f.topic.to_vec(), f.payload.to_vec());
        }
    }
}

/// Messages handed out one per poll, all ready at once, each with its
/// urgency.
struct Urgency {
    msgs: Vec<(&'static str, bool)>,
    next: usize,
    stats: aimdb_core::connector::OutboundStats,
}

impl aimdb_core::connector::MessageSource for Urgency {
    fn poll_ready(&mut self, _: &mut core::task::Context<'_>) -> core::task::Poll<Ready> {
        if self.next == self.msgs.len() {
            return core::task::Poll::Pending;
        }
        self.next += 1;
        core::task::Poll::Ready(Ready::new(self.next - 1))
    }
    fn message(&self, ready: Ready) -> Message<'_> {
        let (topic, urgent) = self.msgs[ready.route()];
        Message {
            route: ready.route(),
            topic,
            payload: &[1],
            lagged: 0,
            qos: QoS::AtMostOnce,
            retain: false,
            urgent,
        }
    }
    fn replay_latest(&mut self) {}
    fn stats(&self) -> &aimdb_core::connector::OutboundStats {
        &self.stats
    }
}

#[test]
fn urgent_messages_go_ahead_of_normal_ones_in_a_batch() {
    let pair = Pair::<NoopRawMutex, 256>::new();
    let counters = Counters::new();
    let mut framed = Framed::<64, 128>::with_sizes(&counters);
    let mut source = Urgency {
        msgs: vec![
            ("n1", false),
            ("n2", false),
            ("u1", true),
            ("n3", false),
            ("u2", true),
        ],
        next: 0,
        stats: aimdb_core::connector::OutboundStats::default(),
    };
    let mut dispatch = inbound::LocalDispatch::<1, 1>::builder().build().unwrap();
    let (rx, tx) = pair.b();
    let (mut peer_rx, _) = pair.a();
    let topics = block_on(async {
        let run = framed.run(rx, tx, &mut dispatch, &mut source);
        let peer = async {
            let mut dec = frame::Decoder::<64>::new();
            let mut held = Vec::new();
            let mut topics = Vec::new();
            while topics.len() < 5 {
                let mut buf = [0u8; 64];
                let n = peer_rx.read(&mut buf).await.unwrap();
                held.extend_from_slice(&buf[..n]);
                loop {
                    let (got, used) = match dec.push(&held) {
                        frame::Event::Frame(f, used) => (Some(f.topic.to_vec()), used),
                        frame::Event::NeedMore => (None, held.len()),
                        frame::Event::Error(e, _) => panic!("{e:?}"),
                    };
                    held.drain(..used);
                    match got {
                        Some(t) => topics.push(String::from_utf8(t).unwrap()),
                        None => break,
                    }
                }
            }
            topics
        };
        match embassy_futures::select::select(run, peer).await {
            embassy_futures::select::Either::First(e) => panic!("ended: {e}"),
            embassy_futures::select::Either::Second(t) => t,
        }
    });
    assert_eq!(
        topics,
        ["u1", "u2", "n1", "n2", "n3"],
        "one batch, urgent first"
    );
    assert_eq!(counters.snapshot().sent, 5);
}
