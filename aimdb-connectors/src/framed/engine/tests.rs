//! Tracked frames between two engines, bytes moved by hand so a frame
//! can be lost on the way: the receiver takes no frame after a gap, so
//! its cumulative acknowledgement never covers the lost one, and the
//! sender, hearing the peer but no acknowledgement, ends the run and
//! offers the flight again.

use core::time::Duration;
use std::vec::Vec;

use aimdb_core::codec::Postcard;
use aimdb_core::connector::QoS;
use aimdb_core::inbound::{self, Dispatch};
use aimdb_core::record::{Reader, Record, Ring};
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;

use super::*;
use crate::engine::Engine as _;

type Side = Engine<'static, 64, 256>;

const BEAT: Heartbeat = Heartbeat::new(Duration::from_secs(1), Duration::from_secs(3));

fn side(counters: &'static Counters) -> Side {
    let mut config = Config::new();
    config.heartbeat = Some(BEAT);
    let mut e = Side::new(counters, config);
    e.set_mode(true, false);
    e
}

fn at(ms: u64) -> Instant {
    Instant::from_micros(ms * 1000)
}

fn value(v: &[u8; 1]) -> Message<'_> {
    Message {
        route: 0,
        topic: "t",
        payload: v,
        lagged: 0,
        qos: QoS::AtLeastOnce,
        retain: false,
        urgent: false,
    }
}

/// What `from` has to write, as whole frames (delimiters kept), all
/// taken as written.
fn frames(from: &mut Side, now: Instant) -> Vec<Vec<u8>> {
    let bytes = from.io().tx.to_vec();
    from.transmitted(bytes.len(), now);
    bytes
        .split_inclusive(|&b| b == 0)
        .map(<[u8]>::to_vec)
        .collect()
}

fn deliver<S: FrameSink + ?Sized>(to: &mut Side, frames: &[Vec<u8>], now: Instant, sink: &mut S) {
    for f in frames {
        let io = to.io();
        io.rx[..f.len()].copy_from_slice(f);
        to.received(f.len(), now, sink);
    }
}

fn drain(r: &mut Reader<'static, Cs, Ring<u8, 16>, 1>) -> Vec<u8> {
    core::iter::from_fn(|| r.try_recv().ok()).collect()
}

fn id(seq: u32) -> Id {
    Id { boot: 1, seq }
}

#[test]
fn a_frame_lost_mid_flight_is_never_acknowledged_and_goes_again() {
    static S: Counters = Counters::new();
    static R: Counters = Counters::new();
    static GOT: Record<Cs, Ring<u8, 16>, 1> = Record::new("got");
    let mut got = GOT.subscribe().unwrap();
    let link = inbound::Link::new(&GOT, Postcard);
    let mut b = Dispatch::<1, 1>::builder();
    b.link("t", &link);
    let mut sink = b.build().unwrap();
    let mut none = Dispatch::<1, 1>::builder().build().unwrap();
    let (mut s, mut r) = (side(&S), side(&R));
    s.open(at(0));
    r.open(at(0));
    deliver(&mut s, &frames(&mut r, at(0)), at(0), &mut none);

    // Four values in flight; the second is lost on the way.
    for v in 0..4u8 {
        assert_eq!(
            s.offer_tracked(&value(&[v]), id(v.into()), at(1)),
            Offer::Accepted
        );
    }
    let mut wire = frames(&mut s, at(1));
    let hello = wire.remove(0);
    assert!(!frame::carries_id(&hello[..hello.len() - 1]));
    assert_eq!(wire.len(), 4);
    wire.remove(1);
    deliver(&mut r, &[hello], at(2), &mut sink);
    deliver(&mut r, &wire, at(2), &mut sink);

    // The receiver took the first only, and acknowledges it alone.
    assert_eq!(drain(&mut got), [0]);
    assert_eq!(R.snapshot().out_of_step, 2);
    deliver(&mut s, &frames(&mut r, at(2)), at(3), &mut none);
    assert_eq!(s.delivered().acked, 1);

    // Heard all along (keep-alives), but no acknowledgement for the
    // heartbeat's timeout: the run ends, and the next offers the flight
    // again, the first frame naming no predecessor.
    for t in (1000..=3003).step_by(1000) {
        deliver(&mut s, &frames(&mut r, at(t)), at(t), &mut none);
        r.poll(at(t));
        s.poll(at(t));
    }
    assert_eq!(s.ended(), None);
    s.poll(at(3004));
    assert_eq!(s.ended(), Some(Error::Unacknowledged));
    assert_eq!(S.snapshot().unacknowledged, 1);
    s.open(at(3005));
    assert!(s.delivered().lost);
    for v in 1..4u8 {
        assert_eq!(
            s.offer_tracked(&value(&[v]), id(v.into()), at(3005)),
            Offer::Accepted
        );
    }
    deliver(&mut r, &frames(&mut s, at(3005)), at(3006), &mut sink);
    assert_eq!(drain(&mut got), [1, 2, 3]);
    deliver(&mut s, &frames(&mut r, at(3006)), at(3007), &mut none);
    assert_eq!(s.delivered().acked, 3);
}
