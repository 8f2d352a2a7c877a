//! The MQTT engine driven by plain calls: bytes in, bytes out, no I/O.

use std::vec::Vec;

use aimdb_core::connector::{DispatchError, FrameSink, InboundStats, Message, QoS};

use super::engine::{Engine, Settings};
use super::{Cause, Counters};
use crate::clock::Instant;
use crate::engine::{Engine as _, IoEnd, Offer};

const T0: Instant = Instant::ZERO;
const CONNACK: [u8; 5] = [0x20, 0x03, 0x00, 0x00, 0x00];
const CONNACK_RESUMED: [u8; 5] = [0x20, 0x03, 0x01, 0x00, 0x00];

/// A sink with no filters that keeps every payload dispatched.
#[derive(Default)]
struct Got {
    payloads: Vec<Vec<u8>>,
    stats: InboundStats,
}

impl FrameSink for Got {
    fn dispatch(&mut self, _topic: &[u8], payload: &[u8]) -> Result<usize, DispatchError> {
        self.payloads.push(payload.to_vec());
        Ok(1)
    }
    fn next_filter(&self, _from: usize) -> Option<(usize, &str)> {
        None
    }
    fn stats(&self) -> &InboundStats {
        &self.stats
    }
}

fn settings(session_expiry: u32) -> Settings<'static> {
    Settings {
        client_id: "t",
        credentials: None,
        keep_alive: 0,
        session_expiry,
        presence: None,
        max_in_flight: 8,
        subscribe_qos: QoS::AtLeastOnce,
        ack_timeout: None,
        reopen: false,
    }
}

/// Everything the engine has to write, as the transport took it.
fn drain(e: &mut Engine<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let tx = e.io().tx.to_vec();
        if tx.is_empty() {
            return out;
        }
        e.transmitted(tx.len(), T0);
        out.extend_from_slice(&tx);
    }
}

/// Hands `bytes` to the engine `chunk` bytes per read.
fn feed(e: &mut Engine<'_>, bytes: &[u8], chunk: usize, sink: &mut Got) {
    for c in bytes.chunks(chunk) {
        let rx = e.io().rx;
        assert!(rx.len() >= c.len(), "RX has room");
        rx[..c.len()].copy_from_slice(c);
        e.received(c.len(), T0, sink);
    }
}

/// Opens a connection, writes the CONNECT, reads `connack`: the CONNECT.
fn connect(e: &mut Engine<'_>, connack: &[u8], sink: &mut Got) -> Vec<u8> {
    e.open(T0);
    let connect = drain(e);
    feed(e, connack, connack.len(), sink);
    connect
}

fn message<'m>(payload: &'m [u8], qos: QoS) -> Message<'m> {
    Message {
        route: 0,
        topic: "t",
        payload,
        lagged: 0,
        qos,
        retain: false,
        urgent: false,
    }
}

/// A QoS 2 PUBLISH on "a/b" with packet id `id` and payload `p`.
fn publish_qos2(id: u8, dup: bool, p: &[u8]) -> Vec<u8> {
    let mut v = std::vec![0x34 | u8::from(dup) << 3, (2 + 3 + 2 + 1 + p.len()) as u8];
    v.extend_from_slice(&[0, 3, b'a', b'/', b'b', 0, id, 0]);
    v.extend_from_slice(p);
    v
}

#[test]
fn an_inbound_qos2_publish_is_delivered_once_whatever_the_reads() {
    // PUBLISH id 7, its resend (DUP) before our PUBREC arrived, PUBREL 7,
    // then id 7 again: a new message.
    let mut inbound = publish_qos2(7, false, b"one");
    inbound.extend(publish_qos2(7, true, b"one"));
    inbound.extend_from_slice(&[0x62, 0x02, 0x00, 0x07]);
    inbound.extend(publish_qos2(7, false, b"two"));
    for chunk in 1..=inbound.len() {
        let counters = Counters::new();
        let (mut rx, mut tx) = ([0u8; 64], [0u8; 128]);
        let mut e = Engine::with_settings(settings(0), &mut rx, &mut tx, &counters);
        let mut got = Got::default();
        connect(&mut e, &CONNACK, &mut got);
        assert!(e.accepting(), "up: no filters to subscribe");
        let mut out = Vec::new();
        for c in inbound.chunks(chunk) {
            feed(&mut e, c, chunk, &mut got);
            out.extend(drain(&mut e));
        }
        assert_eq!(
            got.payloads,
            [b"one".to_vec(), b"two".to_vec()],
            "chunk {chunk}"
        );
        // PUBREC, PUBREC, PUBCOMP, PUBREC: each answered, in order.
        let want = [0x50, 2, 0, 7, 0x50, 2, 0, 7, 0x70, 2, 0, 7, 0x50, 2, 0, 7];
        assert_eq!(out, want, "chunk {chunk}");
    }
}

#[test]
fn a_refused_pubrec_ends_the_exchange_and_an_unknown_ack_is_an_error() {
    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 64], [0u8; 128]);
    let mut e = Engine::with_settings(settings(0), &mut rx, &mut tx, &counters);
    let mut got = Got::default();
    connect(&mut e, &CONNACK, &mut got);
    assert_eq!(
        e.offer(&message(b"x", QoS::ExactlyOnce), T0),
        Offer::Accepted
    );
    assert!(!drain(&mut e).is_empty());
    assert_eq!(counters.in_flight(), 1);
    // PUBREC 1 with reason 0x87 (not authorized).
    feed(&mut e, &[0x50, 0x03, 0x00, 0x01, 0x87], 5, &mut got);
    assert_eq!((counters.in_flight(), counters.acked()), (0, 1));
    assert!(drain(&mut e).is_empty(), "no PUBREL for a refused publish");
    // A PUBACK for an id never sent.
    feed(&mut e, &[0x40, 0x02, 0x00, 0x09], 4, &mut got);
    assert_eq!(e.ended(), Some(Cause::Protocol));
}

/// The QoS 1 PUBLISH of `n` on `t` with packet id `id`.
fn qos1(id: u8, n: u8) -> [u8; 9] {
    [0x32, 0x07, 0, 1, b't', 0, id, 0, b'0' + n]
}

#[test]
fn a_full_tx_makes_room_at_the_front_and_still_reconnects() {
    let counters = Counters::new();
    // Five QoS 1 records of 3 + 9 bytes fill 60 of 64 bytes.
    let (mut rx, mut tx) = ([0u8; 64], [0u8; 64]);
    let mut e = Engine::with_settings(settings(60), &mut rx, &mut tx, &counters);
    let mut got = Got::default();
    connect(&mut e, &CONNACK, &mut got);
    for n in 1..=5 {
        let p = [b'0' + n];
        assert_eq!(e.offer(&message(&p, QoS::AtLeastOnce), T0), Offer::Accepted);
        drain(&mut e);
    }
    let p = [b'6'];
    assert_eq!(e.offer(&message(&p, QoS::AtLeastOnce), T0), Offer::Busy);
    for id in 1..=3 {
        feed(&mut e, &[0x40, 0x02, 0x00, id], 4, &mut got);
    }
    // Only 4 bytes are left behind the tail: the two still in flight move
    // to the front to make room for two more.
    for n in 6..=7 {
        let p = [b'0' + n];
        assert_eq!(e.offer(&message(&p, QoS::AtLeastOnce), T0), Offer::Accepted);
        drain(&mut e);
    }
    e.end(IoEnd::Closed);
    // Four records take 48 of TX's 64 bytes; the CONNECT goes in RX.
    let connect_len = connect(&mut e, &CONNACK_RESUMED, &mut got).len();
    assert!(connect_len > 0);
    let mut want = Vec::new();
    for (id, n) in (4..=7).enumerate() {
        let mut p = qos1(id as u8 + 4, n);
        p[0] |= 0x08;
        want.extend_from_slice(&p);
    }
    assert_eq!(drain(&mut e), want);
}

#[test]
fn a_resumed_session_resends_what_is_in_flight_with_dup() {
    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 64], [0u8; 128]);
    let mut e = Engine::with_settings(settings(60), &mut rx, &mut tx, &counters);
    let mut got = Got::default();
    let first = connect(&mut e, &CONNACK, &mut got);
    assert_ne!(first[9] & 0x02, 0, "the first CONNECT starts clean");
    for (p, qos) in [
        (b"1", QoS::AtLeastOnce),
        (b"2", QoS::AtMostOnce),
        (b"3", QoS::AtLeastOnce),
    ] {
        assert_eq!(e.offer(&message(p, qos), T0), Offer::Accepted);
    }
    let sent = drain(&mut e);
    let (one, three) = (qos1(1, 1), qos1(2, 3));
    assert_eq!(&sent[..9], one);
    assert_eq!(&sent[sent.len() - 9..], three);
    e.end(IoEnd::Closed);
    let again = connect(&mut e, &CONNACK_RESUMED, &mut got);
    // Clean Start = 0 in the CONNECT's flags (byte 9).
    assert_eq!(again[9] & 0x02, 0);
    let mut want = one.to_vec();
    want.extend_from_slice(&three);
    want[0] |= 0x08;
    want[9] |= 0x08;
    assert_eq!(drain(&mut e), want);
}

#[test]
fn what_a_dropped_connection_never_wrote_goes_out_on_a_new_session() {
    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 64], [0u8; 128]);
    let mut e = Engine::with_settings(settings(0), &mut rx, &mut tx, &counters);
    let mut got = Got::default();
    connect(&mut e, &CONNACK, &mut got);
    // 1 goes out whole, 2 half, 3 (QoS 0) not at all; then the drop.
    for (p, qos) in [
        (b"1", QoS::AtLeastOnce),
        (b"2", QoS::AtLeastOnce),
        (b"3", QoS::AtMostOnce),
    ] {
        assert_eq!(e.offer(&message(p, qos), T0), Offer::Accepted);
    }
    let n = e.io().tx.len();
    e.transmitted(n, T0);
    e.transmitted(4, T0);
    e.end(IoEnd::Write(embedded_io_async::ErrorKind::BrokenPipe));
    // A new session: 1 was delivered at most once and is gone; 2 and 3
    // were not delivered and go now, whole.
    connect(&mut e, &CONNACK, &mut got);
    let mut want = qos1(2, 2).to_vec();
    want.extend_from_slice(&[0x30, 0x05, 0, 1, b't', 0, b'3']);
    assert_eq!(drain(&mut e), want);
    assert_eq!(counters.in_flight(), 1);
}

#[test]
fn acknowledgements_wait_in_rx_while_the_control_queue_is_full() {
    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 256], [0u8; 64]);
    let mut e = Engine::with_settings(settings(0), &mut rx, &mut tx, &counters);
    let mut got = Got::default();
    connect(&mut e, &CONNACK, &mut got);
    // Twelve QoS 1 publishes in one read: eight PUBACKs fill the queue.
    let mut inbound = Vec::new();
    for id in 1..=12u8 {
        inbound.extend_from_slice(&[0x32, 0x07, 0, 1, b'a', 0, id, 0, id]);
    }
    feed(&mut e, &inbound, inbound.len(), &mut got);
    assert_eq!(got.payloads.len(), 8);
    assert!(e.pending());
    assert!(e.io().rx.is_empty(), "nothing more is read meanwhile");
    let acks = drain(&mut e);
    e.received(0, T0, &mut got);
    assert_eq!(got.payloads.len(), 12);
    let mut all = acks;
    all.extend(drain(&mut e));
    let want: Vec<u8> = (1..=12u8).flat_map(|id| [0x40, 2, 0, id]).collect();
    assert_eq!(all, want);
}

#[test]
fn a_stop_says_goodbye_then_disconnects_even_at_qos_0() {
    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 128], [0u8; 256]);
    let mut presence = super::Presence::new("p");
    presence.qos = QoS::AtMostOnce;
    let mut s = settings(0);
    s.presence = Some(presence);
    let mut e = Engine::with_settings(s, &mut rx, &mut tx, &counters);
    let mut got = Got::default();
    connect(&mut e, &CONNACK, &mut got);
    assert!(e.accepting(), "the birth needs no acknowledgement at QoS 0");
    let birth = drain(&mut e);
    assert!(birth.windows(6).any(|w| w == b"online"));
    e.close(T0);
    // The runner's loop: write what is queued, then let pending steps run.
    let mut out = drain(&mut e);
    for _ in 0..4 {
        if !e.pending() {
            break;
        }
        e.received(0, T0, &mut got);
        out.extend(drain(&mut e));
    }
    assert!(e.closed(), "DISCONNECT written");
    assert!(out.windows(7).any(|w| w == b"stopped"), "the goodbye first");
    assert_eq!(&out[out.len() - 2..], [0xe0, 0x00]);
}

#[test]
fn a_connect_waiting_in_tx_goes_out_whole_before_anything_is_read() {
    let counters = Counters::new();
    // RX (16 bytes) is too short for the CONNECT: it waits in TX.
    let (mut rx, mut tx) = ([0u8; 16], [0u8; 128]);
    let mut e = Engine::with_settings(settings(0), &mut rx, &mut tx, &counters);
    let mut got = Got::default();
    e.open(T0);
    // A broker that answers before it has the CONNECT: a CONNACK and a
    // QoS 1 PUBLISH (whose PUBACK would be a control packet to send),
    // handed over as far as the engine lends room to read.
    let mut early = CONNACK.to_vec();
    early.extend_from_slice(&qos1(9, 1));
    let rx = e.io().rx;
    let n = rx.len().min(early.len());
    rx[..n].copy_from_slice(&early[..n]);
    if n > 0 {
        e.received(n, T0, &mut got);
    }
    let out = drain(&mut e);
    assert_eq!(out[0] >> 4, 1, "the CONNECT goes first");
    let len = 2 + usize::from(out[1]);
    assert!(len > 16 && out.len() >= len, "the CONNECT is out whole");
    assert_eq!(out.len(), len, "nothing goes before the broker is read");
    // Once it is out, the answers are read.
    feed(&mut e, &early, early.len(), &mut got);
    assert_eq!(got.payloads, [b"1".to_vec()]);
    assert_eq!(drain(&mut e), [0x40, 0x02, 0x00, 9], "the PUBACK after it");
}

#[test]
fn tracked_publishes_carry_their_id_and_report_acks_from_the_oldest() {
    use crate::engine::{Delivery, Id};
    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 64], [0u8; 512]);
    // A session that resumes: a resumed broker would let the engine send
    // what was in flight again itself, yet tracked publishes still leave.
    let mut e = Engine::with_settings(settings(60), &mut rx, &mut tx, &counters);
    let mut got = Got::default();
    connect(&mut e, &CONNACK, &mut got);
    for seq in 0..3 {
        let id = Id { boot: 4, seq };
        // QoS 0 routes go at QoS 1: a backlog waits for the PUBACK.
        let m = message(b"v", QoS::AtMostOnce);
        assert_eq!(e.offer_tracked(&m, id, T0), Offer::Accepted);
    }
    let out = drain(&mut e);
    // PUBLISH QoS 1, topic "t", packet id 1, properties: aimdb-id "4:0".
    let mut first = std::vec![0x32, 2 + 1 + 2 + 1 + 16 + 1];
    first.extend_from_slice(&[0, 1, b't', 0, 1, 16, 0x26, 0, 8]);
    first.extend_from_slice(b"aimdb-id");
    first.extend_from_slice(&[0, 3, b'4', b':', b'0', b'v']);
    assert_eq!(&out[..first.len()], &first[..]);
    assert_eq!(out.len(), 3 * first.len());
    // Acks 2 then 1: both count, the oldest first; 3 stays owed.
    feed(&mut e, &[0x40, 2, 0, 2], 4, &mut got);
    assert_eq!(
        e.delivered(),
        Delivery {
            acked: 0,
            lost: false
        }
    );
    feed(&mut e, &[0x40, 2, 0, 1], 4, &mut got);
    assert_eq!(
        e.delivered(),
        Delivery {
            acked: 2,
            lost: false
        }
    );
    // The connection drops; the next one resumes the session. The engine
    // does not send 3 again itself: the backlog offers it (lost).
    e.end(IoEnd::Closed);
    connect(&mut e, &CONNACK_RESUMED, &mut got);
    assert_eq!(
        e.delivered(),
        Delivery {
            acked: 0,
            lost: true
        }
    );
    assert!(
        drain(&mut e).is_empty(),
        "publish 3 is not sent again by the engine"
    );
    assert_eq!(e.delivered(), Delivery::default());
    // An untracked QoS 1 publish in flight across the same drop is resent
    // (DUP) as before.
    assert_eq!(
        e.offer(&message(b"u", QoS::AtLeastOnce), T0),
        Offer::Accepted
    );
    drain(&mut e);
    e.end(IoEnd::Closed);
    connect(&mut e, &CONNACK_RESUMED, &mut got);
    assert_eq!(drain(&mut e)[0], 0x3a, "QoS 1 with DUP");
}
