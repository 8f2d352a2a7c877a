//! The MQTT 5 client's sans-I/O engine (`mqtt::Engine`) driven by plain
//! calls, with no runner and no executor, as a broker would see it.
//!
//! Input: a configuration (RX and TX of 24..=623 bytes each, client id,
//! credentials, keep-alive, session expiry, presence with or without a
//! will delay, window, subscription QoS, acknowledgement timeout,
//! reconnect policy), then up to 256 steps: open a connection (when none
//! is live, as the runner does after an end, a reopen or a stop), queue
//! broker bytes (CONNACK with properties, SUBACK, PUBLISH at any QoS with
//! the fixture's topics, acknowledgements, PINGRESP, DISCONNECT, raw
//! bytes, or a well-behaved broker's answers to everything the client
//! wrote so far) and let the engine read up to `n` of them into
//! `io().rx`, run whole round trips with a well-behaved broker, let the transport take `n` bytes of `io().tx` (partial
//! writes included), `received(0)` while `pending()`, offer a message (a
//! topic from a small set, arbitrary payload, QoS, retain, urgent, lag),
//! advance time and `poll` when `poll_at` is due, end the connection with
//! an `IoEnd`, `close`. The runner's accounting (`came_up`, `failed`,
//! `went_down`, `wrote`) follows its rules. At the end a live connection
//! writes everything it holds.
//!
//! Invariants, checked after every step:
//!
//! 1. no heap allocation inside any engine call: a counting global
//!    allocator, the sink's own allocations set apart;
//! 2. counters: each call changes only the counters it may, exactly:
//!    `received` moves by the sink's calls plus `cleared` (an empty
//!    payload is counted `cleared` and never reaches the sink), `rejected`
//!    by the sink's errors, only in `received`; `sent`, `lagged` (the lag
//!    truncated to `u32`) on an accepted offer, `dropped` on a refused
//!    one, nothing on a busy one; `ack_timeouts` exactly when `poll` ends
//!    the connection with `AckTimeout`; `writes` per `wrote`;
//!    `reconnects`, `connect_failures`, `connected` and `last_error` as the
//!    runner's accounting makes them; `transmitted`, `end`, `open` change
//!    none;
//! 3. the sink is the fixture's checked table (`Harness`), so every
//!    dispatch is checked against the model of the records (a refused
//!    frame writes nothing); every dispatch is a PUBLISH of this
//!    connection's inbound bytes, in order, with its exact topic, payload
//!    and retain flag (each at most once); while the connection is up and
//!    stays up, every well-formed QoS 0/1 PUBLISH the engine consumed is
//!    dispatched (or counted `cleared`);
//! 4. output: per connection, the concatenation of everything reported
//!    `transmitted` parses as back-to-back MQTT packets; the first is the
//!    CONNECT, parsed whole (protocol 5, the configured client id,
//!    keep-alive, receive maximum 16, maximum packet size RX, session
//!    expiry, will, credentials; Clean Start on the first connection); after it only
//!    packets a client sends (PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP,
//!    SUBSCRIBE, PINGREQ, DISCONNECT) with their fixed flags and exact
//!    lengths; a SUBSCRIBE is for a fixture filter at most the subscription
//!    QoS; a PUBACK/PUBREC answers a QoS 1/2 PUBLISH and a PUBCOMP a
//!    PUBREL the broker sent on this connection; every other PUBLISH is
//!    the presence or an accepted offer, byte for byte (topic, payload, QoS
//!    at most the offer's, retain only if asked), a QoS 0 one at most once
//!    in all, a QoS 1/2 one at most once per connection, with the same
//!    packet id, DUP set exactly when it was written whole on an earlier
//!    connection; at the end of a live connection the output ends on a
//!    packet boundary (only an end may cut a packet);
//! 5. bounded work: `io().rx` is at most RX, `io().tx` at most the largest
//!    of RX, TX and the 32-byte control queue; once `ended()` is `Some`
//!    the engine lends no buffers, `poll_at` is `None`, and `received` /
//!    `transmitted` (even of bytes it did not lend) change no counter and
//!    dispatch nothing.
//!
//! At the end a last connection to a well-behaved broker comes up and
//! drains: every accepted offer has then been written whole at least once
//! (a new session drops only what an earlier connection wrote).
//!
//! The broker may answer before it has read the CONNECT (its bytes are
//! read whenever the engine lends room). `AIMDB_FUZZ_DEBUG=1` prints the decoded input, `AIMDB_FUZZ_SUMMARY=1` what was reached.
#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use aimdb_connectors::clock::Instant;
use aimdb_connectors::engine::{Engine as _, Failure, IoEnd, Offer};
use aimdb_connectors::mqtt::{self, Cause, Config, Counters, Presence, QoS, Stats, WillDelay};
use aimdb_connectors::reconnect::Reconnect;
use aimdb_core::connector::{DispatchError, FrameSink, InboundStats, Message};
use aimdb_fuzz::fixture::{Harness, Links, Records, Table, ROUTES};
use aimdb_fuzz::TopicIn;
use arbitrary::{Arbitrary, Unstructured};
use embedded_io_async::ErrorKind;
use libfuzzer_sys::fuzz_target;

// ------------------------------------------------- allocation counting

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
    /// Allocations made inside the sink (the model's bookkeeping), set
    /// apart from the engine's.
    static SINK_ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: as for `realloc`.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations of this thread so far, but the sink's.
fn allocs() -> u64 {
    ALLOCS.with(Cell::get) - SINK_ALLOCS.with(Cell::get)
}

/// Evaluates an engine call and asserts it allocated nothing.
macro_rules! quiet {
    ($what:expr, $call:expr) => {{
        let before = allocs();
        let out = $call;
        assert_eq!(allocs(), before, "{} allocated on the heap", $what);
        out
    }};
}

// ---------------------------------------------------------------- sink

/// One call into the sink.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Dispatched {
    topic: Vec<u8>,
    payload: Vec<u8>,
    retained: bool,
    ok: bool,
}

/// The fixture's table, every dispatch checked against its model and
/// logged. (The fixture links no `Mailbox`, so a retained message goes
/// to the same links as any other.)
struct Checked<'t, 'r> {
    table: Table<'t>,
    harness: Harness<'r>,
    log: Vec<Dispatched>,
}

impl Checked<'_, '_> {
    fn step(
        &mut self,
        topic: &[u8],
        payload: &[u8],
        retained: bool,
    ) -> Result<usize, DispatchError> {
        let before = ALLOCS.with(Cell::get);
        let got = self.harness.step(&mut self.table, topic, payload);
        self.log.push(Dispatched {
            topic: topic.to_vec(),
            payload: payload.to_vec(),
            retained,
            ok: got.is_ok(),
        });
        let made = ALLOCS.with(Cell::get) - before;
        SINK_ALLOCS.with(|c| c.set(c.get() + made));
        got
    }
}

impl FrameSink for Checked<'_, '_> {
    fn dispatch(&mut self, topic: &[u8], payload: &[u8]) -> Result<usize, DispatchError> {
        self.step(topic, payload, false)
    }
    fn dispatch_retained(&mut self, topic: &[u8], payload: &[u8]) -> Result<usize, DispatchError> {
        self.step(topic, payload, true)
    }
    fn wants_retained(&self, filter: &str) -> bool {
        self.table.wants_retained(filter)
    }
    fn next_filter(&self, from: usize) -> Option<(usize, &str)> {
        self.table.next_filter(from)
    }
    fn stats(&self) -> &InboundStats {
        self.table.stats()
    }
}

// --------------------------------------------------------------- input

/// Topics offered outbound: short, nested, long.
const OUT_TOPICS: [&str; 4] = [
    "t",
    "dev/7/value",
    "a/b/c",
    "sensors/room-with-a-long-name/temp",
];
const CLIENT_IDS: [&str; 3] = ["fuzz", "", "a-client-id-of-forty-bytes-0123456789abc"];
const PRESENCE: &str = "site/dev-7/presence";
static WILL_DELAY: WillDelay = WillDelay::from_secs(5);

/// Packet types.
const CONNECT: u8 = 1;
const CONNACK: u8 = 2;
const PUBLISH: u8 = 3;
const PUBACK: u8 = 4;
const PUBREC: u8 = 5;
const PUBREL: u8 = 6;
const PUBCOMP: u8 = 7;
const SUBSCRIBE: u8 = 8;
const SUBACK: u8 = 9;
const PINGREQ: u8 = 12;
const PINGRESP: u8 = 13;
const DISCONNECT: u8 = 14;

#[derive(Arbitrary, Debug)]
struct Setup {
    rx: u16,
    tx: u16,
    client: u8,
    credentials: bool,
    /// Seconds.
    keep_alive: Option<u8>,
    /// Seconds.
    session_expiry: Option<u16>,
    /// (QoS, will delay, first sequence).
    presence: Option<(u8, bool, u64)>,
    max_in_flight: u8,
    subscribe_qos: u8,
    /// Milliseconds.
    ack_timeout: Option<u16>,
    never: bool,
}

/// A packet id: one the client used lately (counting back), or any.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Id {
    Recent(u8),
    Lit(u16),
}

#[derive(Arbitrary, Debug)]
enum Prop {
    ReceiveMax(u16),
    MaxQos(u8),
    RetainAvailable(u8),
    MaxPacket(u32),
    ServerKeepAlive(u16),
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
enum Pkt {
    Connack {
        present: bool,
        reason: Option<u8>,
        props: Vec<Prop>,
    },
    Suback {
        id: Id,
        code: u8,
    },
    Publish {
        qos: u8,
        retain: bool,
        dup: bool,
        topic: TopicIn,
        id: Id,
        props: Vec<u8>,
        payload: Vec<u8>,
    },
    Ack {
        kind: u8,
        id: Id,
        reason: Option<u8>,
    },
    Pingresp,
    Disconnect(Option<u8>),
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum End {
    Closed,
    Read(u8),
    Write(u8),
}

#[derive(Arbitrary, Debug)]
enum Op {
    /// A new connection (after an end or a stop).
    Open,
    /// The broker sends this packet (queued until read).
    Broker(Pkt),
    /// A well-behaved broker answers everything written so far.
    Respond {
        present: bool,
    },
    /// Round trips with a well-behaved broker: the transport takes all
    /// of `io().tx`, the broker answers, the engine reads all of it.
    Rounds {
        present: bool,
        rounds: u8,
    },
    /// A read of at most this many queued bytes.
    Read(u16),
    /// The transport takes this share of `io().tx` (scaled to 0..=len).
    Write(u8),
    /// `received(0)`, as the runner calls it while `pending()`.
    Unstall,
    Offer {
        topic: u8,
        tail: Vec<u8>,
        qos: u8,
        retain: bool,
        urgent: bool,
        lagged: u64,
    },
    /// Time passes (milliseconds); `poll` when due.
    Advance(u16),
    End(End),
    /// A stop: the goodbye.
    Close,
    /// After the end: `received`/`transmitted` of bytes never lent.
    Late(u16),
}

#[derive(Arbitrary, Debug)]
struct Input {
    setup: Setup,
    /// Whether the last connection's broker kept the session.
    final_present: bool,
    ops: Vec<Op>,
}

const KINDS: [ErrorKind; 4] = [
    ErrorKind::Other,
    ErrorKind::BrokenPipe,
    ErrorKind::ConnectionReset,
    ErrorKind::TimedOut,
];

fn qos(v: u8) -> QoS {
    match v % 3 {
        0 => QoS::AtMostOnce,
        1 => QoS::AtLeastOnce,
        _ => QoS::ExactlyOnce,
    }
}

// ---------------------------------------------------------- wire bits

fn varint(mut v: usize, out: &mut Vec<u8>) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn packet(first: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![first];
    varint(body.len(), &mut out);
    out.extend_from_slice(body);
    out
}

/// A fixed header at the start of `buf`: (first byte, header length,
/// remaining length); `Ok(None)` while incomplete; `Err` if malformed.
fn fixed_header(buf: &[u8]) -> Result<Option<(u8, usize, usize)>, ()> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    let mut len = 0usize;
    for i in 0..4 {
        let Some(&b) = buf.get(1 + i) else {
            return Ok(None);
        };
        len |= usize::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(Some((first, 2 + i, len)));
        }
    }
    Err(())
}

/// Reads a packet body; every read checks the bounds.
struct Rd<'b>(&'b [u8]);

impl<'b> Rd<'b> {
    fn take(&mut self, n: usize) -> Option<&'b [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        let b = self.take(2)?;
        Some(u16::from_be_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Option<u32> {
        let b = self.take(4)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn varint(&mut self) -> Option<usize> {
        let mut v = 0usize;
        for i in 0..4 {
            let b = self.u8()?;
            v |= usize::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
    fn binary(&mut self) -> Option<&'b [u8]> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }
}

/// A PUBLISH as the engine reads one (its `handle_publish`): topic,
/// packet id, payload, retain, QoS; `None` where the engine ends the
/// connection instead.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Publish {
    topic: Vec<u8>,
    id: u16,
    payload: Vec<u8>,
    retain: bool,
    dup: bool,
    qos: u8,
}

fn parse_publish(first: u8, body: &[u8]) -> Option<Publish> {
    let qos = (first >> 1) & 3;
    if qos == 3 {
        return None;
    }
    let mut r = Rd(body);
    let topic_len = usize::from(r.u16()?);
    let topic = r.take(topic_len)?;
    if topic.is_empty() || core::str::from_utf8(topic).is_err() {
        return None;
    }
    let id = if qos > 0 { r.u16()? } else { 0 };
    let props = r.varint()?;
    r.take(props)?;
    Some(Publish {
        topic: topic.to_vec(),
        id,
        payload: r.0.to_vec(),
        retain: first & 1 != 0,
        dup: first & 8 != 0,
        qos,
    })
}

// --------------------------------------------------------------- model

/// One complete packet.
#[derive(Debug, Clone)]
struct Pk {
    first: u8,
    body: Vec<u8>,
}

impl Pk {
    fn kind(&self) -> u8 {
        self.first >> 4
    }
}

/// Splits `bytes[*at..]` into complete packets; `Err` on a malformed
/// fixed header.
fn split(bytes: &[u8], at: &mut usize, out: &mut Vec<Pk>) -> Result<(), ()> {
    while let Some((first, h, rem)) = fixed_header(&bytes[*at..])? {
        if bytes.len() - *at < h + rem {
            break;
        }
        out.push(Pk {
            first,
            body: bytes[*at + h..*at + h + rem].to_vec(),
        });
        *at += h + rem;
    }
    Ok(())
}

/// One connection, as the broker saw it.
#[derive(Default)]
struct Conn {
    /// Everything reported transmitted, and its complete packets.
    out: Vec<u8>,
    parsed: usize,
    pkts: Vec<Pk>,
    /// Packets a `Respond` answered.
    answered: usize,
    /// Everything the engine was handed, and its complete packets.
    inbound: Vec<u8>,
    in_parsed: usize,
    in_pkts: Vec<Pk>,
    in_broken: bool,
    /// The next inbound packet a dispatch may come from.
    cursor: usize,
    /// Inbound packets the engine has certainly consumed (`None`: not
    /// known, after a stall).
    consumed: Option<usize>,
    /// Cleared publishes counted on this connection.
    cleared: u32,
    up: bool,
    closing: bool,
    /// The runner counted its end.
    settled: bool,
}

/// An accepted offer.
#[derive(Debug)]
struct Offered {
    topic: &'static str,
    payload: Vec<u8>,
    qos: u8,
    retain: bool,
    /// The last connection that wrote it whole, its packet id and QoS.
    written: Option<(usize, u16, u8)>,
}

struct Model {
    now: u64,
    rx_len: usize,
    tx_len: usize,
    client_id: &'static str,
    credentials: bool,
    keep_alive: u16,
    session_expiry: Option<u32>,
    presence: Option<(u8, bool)>,
    subscribe_qos: u8,
    conns: Vec<Conn>,
    /// Bytes from the broker not yet read.
    inbox: Vec<u8>,
    offers: BTreeMap<u16, Offered>,
    next_id: u16,
    /// Packet ids the client used (PUBLISH, SUBSCRIBE), latest last.
    recent: Vec<u16>,
    /// The runner's accounting.
    connected_once: bool,
    connected: bool,
    last_error: Option<Cause>,
    reconnects: u32,
    failures: u32,
    writes: u32,
}

impl Model {
    fn conn(&mut self) -> &mut Conn {
        self.conns.last_mut().expect("opened")
    }

    fn id(&self, id: Id) -> u16 {
        match id {
            Id::Lit(v) => v,
            Id::Recent(k) if !self.recent.is_empty() => {
                let k = usize::from(k) % self.recent.len();
                self.recent[self.recent.len() - 1 - k]
            }
            Id::Recent(k) => u16::from(k),
        }
    }

    fn encode(&self, p: &Pkt) -> Vec<u8> {
        match p {
            Pkt::Connack {
                present,
                reason,
                props,
            } => {
                let mut pr = Vec::new();
                for p in props.iter().take(8) {
                    match p {
                        Prop::ReceiveMax(v) => {
                            pr.push(0x21);
                            pr.extend(v.to_be_bytes());
                        }
                        Prop::MaxQos(v) => pr.extend([0x24, v % 3]),
                        Prop::RetainAvailable(v) => pr.extend([0x25, v % 2]),
                        Prop::MaxPacket(v) => {
                            pr.push(0x27);
                            pr.extend(v.to_be_bytes());
                        }
                        Prop::ServerKeepAlive(v) => {
                            pr.push(0x13);
                            pr.extend(v.to_be_bytes());
                        }
                        Prop::Raw(b) => pr.extend(b.iter().take(16)),
                    }
                }
                let mut body = vec![u8::from(*present), reason.unwrap_or(0)];
                varint(pr.len(), &mut body);
                body.extend(pr);
                packet(CONNACK << 4, &body)
            }
            Pkt::Suback { id, code } => {
                let mut body = self.id(*id).to_be_bytes().to_vec();
                body.extend([0, *code]);
                packet(SUBACK << 4, &body)
            }
            Pkt::Publish {
                qos,
                retain,
                dup,
                topic,
                id,
                props,
                payload,
            } => {
                let qos = qos % 4;
                let topic = topic.bytes();
                let mut body = (topic.len() as u16).to_be_bytes().to_vec();
                body.extend(&topic);
                if qos > 0 {
                    body.extend(self.id(*id).to_be_bytes());
                }
                let props = &props[..props.len().min(16)];
                varint(props.len(), &mut body);
                body.extend(props);
                body.extend(payload.iter().take(600));
                let first = PUBLISH << 4 | u8::from(*dup) << 3 | qos << 1 | u8::from(*retain);
                packet(first, &body)
            }
            Pkt::Ack { kind, id, reason } => {
                let kind = [PUBACK, PUBREC, PUBREL, PUBCOMP][usize::from(kind % 4)];
                let mut body = self.id(*id).to_be_bytes().to_vec();
                body.extend(reason.iter());
                let flags = if kind == PUBREL { 2 } else { 0 };
                packet(kind << 4 | flags, &body)
            }
            Pkt::Pingresp => packet(PINGRESP << 4, &[]),
            Pkt::Disconnect(rc) => packet(DISCONNECT << 4, &rc.iter().copied().collect::<Vec<_>>()),
            Pkt::Raw(b) => b.iter().take(64).copied().collect(),
        }
    }

    /// A well-behaved broker's answers to what this connection wrote and
    /// was not answered yet.
    fn respond(&mut self, present: bool) -> Vec<u8> {
        let c = self.conns.last_mut().expect("opened");
        let mut out = Vec::new();
        for p in &c.pkts[c.answered..] {
            let id = || {
                let b = &p.body;
                u16::from_be_bytes([b[0], b[1]])
            };
            match p.kind() {
                CONNECT => {
                    // Byte 7 of the body: the connect flags.
                    let clean = p.body[7] & 2 != 0;
                    let flags = u8::from(present && !clean);
                    out.extend(packet(CONNACK << 4, &[flags, 0, 0]));
                }
                SUBSCRIBE => {
                    let options = p.body.last().copied().unwrap_or(0);
                    let mut body = id().to_be_bytes().to_vec();
                    body.extend([0, options & 3]);
                    out.extend(packet(SUBACK << 4, &body));
                }
                PUBLISH => match (p.first >> 1) & 3 {
                    0 => {}
                    q => {
                        let topic_len = usize::from(u16::from_be_bytes([p.body[0], p.body[1]]));
                        let at = 2 + topic_len;
                        let pid = &p.body[at..at + 2];
                        let kind = if q == 1 { PUBACK } else { PUBREC };
                        out.extend(packet(kind << 4, pid));
                    }
                },
                PUBREL => out.extend(packet(PUBCOMP << 4, &id().to_be_bytes())),
                PUBREC => out.extend(packet(PUBREL << 4 | 2, &id().to_be_bytes())),
                PINGREQ => out.extend(packet(PINGRESP << 4, &[])),
                _ => {}
            }
        }
        c.answered = c.pkts.len();
        out
    }

    /// The transport took `bytes` of this connection's output: every
    /// packet completed by them is checked.
    fn wrote(&mut self, bytes: &[u8]) {
        let conn_no = self.conns.len() - 1;
        let c = self.conns.last_mut().expect("opened");
        c.out.extend_from_slice(bytes);
        let from = c.pkts.len();
        let mut at = c.parsed;
        if split(&c.out, &mut at, &mut c.pkts).is_err() {
            panic!(
                "the output's fixed header at {at} is malformed: {:02x?}",
                &c.out[at..]
            );
        }
        c.parsed = at;
        let new: Vec<Pk> = c.pkts[from..].to_vec();
        for (i, p) in new.iter().enumerate() {
            self.check_out(conn_no, from + i, p);
        }
    }

    fn check_out(&mut self, conn_no: usize, index: usize, p: &Pk) {
        let kind = p.kind();
        let flags = p.first & 0x0f;
        assert_eq!(
            kind == CONNECT,
            index == 0,
            "the CONNECT comes first, once: packet {index} is {:#04x}",
            p.first
        );
        match kind {
            CONNECT => {
                assert_eq!(flags, 0);
                self.check_connect(conn_no, &p.body);
            }
            PUBLISH => self.check_publish(conn_no, p),
            PUBACK | PUBREC | PUBCOMP | PUBREL => {
                let want = if kind == PUBREL { 2 } else { 0 };
                assert_eq!(flags, want, "flags of {:#04x}", p.first);
                assert_eq!(p.body.len(), 2, "a {kind} is its packet id");
                let id = u16::from_be_bytes([p.body[0], p.body[1]]);
                let c = &self.conns[conn_no];
                let heard = |k: u8, q: Option<u8>| {
                    c.in_pkts.iter().any(|x| {
                        x.kind() == k
                            && q.is_none_or(|q| (x.first >> 1) & 3 == q)
                            && match k {
                                PUBLISH => {
                                    parse_publish(x.first, &x.body).is_some_and(|p| p.id == id)
                                }
                                _ => x.body.get(..2) == Some(&id.to_be_bytes()[..]),
                            }
                    })
                };
                match kind {
                    PUBACK => assert!(
                        heard(PUBLISH, Some(1)),
                        "PUBACK {id} answers no QoS 1 PUBLISH"
                    ),
                    PUBREC => assert!(
                        heard(PUBLISH, Some(2)),
                        "PUBREC {id} answers no QoS 2 PUBLISH"
                    ),
                    PUBCOMP => assert!(heard(PUBREL, None), "PUBCOMP {id} answers no PUBREL"),
                    _ => {}
                }
            }
            SUBSCRIBE => {
                assert_eq!(flags, 2, "SUBSCRIBE flags");
                let mut r = Rd(&p.body);
                let id = r.u16().expect("packet id");
                assert_ne!(id, 0);
                assert_eq!(r.varint(), Some(0), "no properties");
                let filter = r.binary().expect("filter");
                let options = r.u8().expect("options");
                assert!(r.0.is_empty(), "one filter per SUBSCRIBE");
                assert!(
                    ROUTES.iter().any(|s| s.filter.as_bytes() == filter),
                    "a filter of the table: {:?}",
                    String::from_utf8_lossy(filter)
                );
                assert!(
                    options & 3 <= self.subscribe_qos && options & !0x23 == 0,
                    "options {options:#x}"
                );
                self.recent.push(id);
            }
            PINGREQ | DISCONNECT => {
                assert_eq!(flags, 0);
                assert!(p.body.is_empty());
            }
            _ => panic!("a packet a client never sends: {:#04x}", p.first),
        }
    }

    fn check_connect(&mut self, conn_no: usize, body: &[u8]) {
        let mut r = Rd(body);
        assert_eq!(r.binary(), Some(&b"MQTT"[..]));
        assert_eq!(r.u8(), Some(5), "MQTT 5");
        let flags = r.u8().expect("flags");
        assert_eq!(flags & 1, 0, "reserved flag");
        if conn_no == 0 {
            assert_ne!(flags & 2, 0, "the first connection starts clean");
        }
        assert_eq!(r.u16(), Some(self.keep_alive), "keep-alive");
        let props = r.varint().expect("properties");
        let mut p = Rd(r.take(props).expect("properties"));
        assert_eq!((p.u8(), p.u16()), (Some(0x21), Some(16)), "receive maximum");
        let rx = u32::try_from(self.rx_len).unwrap();
        assert_eq!(
            (p.u8(), p.u32()),
            (Some(0x27), Some(rx)),
            "maximum packet size"
        );
        if let Some(s) = self.session_expiry {
            assert_eq!((p.u8(), p.u32()), (Some(0x11), Some(s)), "session expiry");
        }
        assert!(p.0.is_empty());
        assert_eq!(r.binary(), Some(self.client_id.as_bytes()), "client id");
        match self.presence {
            Some((q, delay)) => {
                assert_eq!(flags & 0x3c, 0x24 | q << 3, "will flags");
                let n = r.varint().expect("will properties");
                let mut p = Rd(r.take(n).expect("will properties"));
                if delay {
                    assert_eq!((p.u8(), p.u32()), (Some(0x18), Some(5)));
                }
                assert!(p.0.is_empty());
                assert_eq!(r.binary(), Some(PRESENCE.as_bytes()));
                let will = r.binary().expect("will payload");
                assert_eq!(will.len(), 64);
                assert!(will.starts_with(br#"{"status":"offline","seq":"#));
            }
            None => assert_eq!(flags & 0x3c, 0, "no will"),
        }
        if self.credentials {
            assert_eq!(flags & 0xc0, 0xc0);
            assert_eq!(r.binary(), Some(&b"user"[..]));
            assert_eq!(r.binary(), Some(&b"pass"[..]));
        } else {
            assert_eq!(flags & 0xc0, 0);
        }
        assert!(r.0.is_empty(), "nothing after the CONNECT's fields");
    }

    fn check_publish(&mut self, conn_no: usize, p: &Pk) {
        let got = parse_publish(p.first, &p.body)
            .unwrap_or_else(|| panic!("a malformed PUBLISH: {:#04x} {:02x?}", p.first, p.body));
        if got.qos > 0 {
            self.recent.push(got.id);
        }
        assert!(!got.dup || got.qos > 0, "DUP on QoS 0");
        if got.topic == PRESENCE.as_bytes() {
            let (q, _) = self.presence.expect("presence configured");
            assert!(got.qos <= q, "presence QoS");
            assert!(
                got.payload.starts_with(br#"{"status":""#),
                "presence payload"
            );
            return;
        }
        assert!(got.payload.len() >= 2, "not an offer: {got:?}");
        let id = u16::from_be_bytes([got.payload[0], got.payload[1]]);
        let o = self
            .offers
            .get_mut(&id)
            .unwrap_or_else(|| panic!("a PUBLISH no accepted offer explains: {got:?}"));
        assert_eq!(
            (got.topic.as_slice(), got.payload.as_slice()),
            (o.topic.as_bytes(), o.payload.as_slice()),
            "offer {id} byte for byte"
        );
        assert!(
            got.qos <= o.qos,
            "QoS {} over the offer's {}",
            got.qos,
            o.qos
        );
        assert!(!got.retain || o.retain, "retain not asked for");
        match o.written {
            Some((c, pid, q)) => {
                assert!(
                    got.qos > 0 && q > 0,
                    "a QoS 0 message written twice: {got:?}"
                );
                assert_ne!(c, conn_no, "written twice on one connection: {got:?}");
                assert!(got.dup, "a resend carries DUP: {got:?}");
                assert_eq!((got.id, got.qos), (pid, q), "a resend is the same packet");
            }
            None => assert!(!got.dup, "DUP on a first send: {got:?}"),
        }
        o.written = Some((conn_no, got.id, got.qos));
    }

    /// The engine was handed `bytes`: this connection's inbound packets.
    fn handed(&mut self, bytes: &[u8]) {
        let c = self.conn();
        c.inbound.extend_from_slice(bytes);
        if !c.in_broken {
            let mut at = c.in_parsed;
            c.in_broken = split(&c.inbound, &mut at, &mut c.in_pkts).is_err();
            c.in_parsed = at;
        }
    }
}

// -------------------------------------------------------------- driver

fn snapshot(c: &Counters) -> Stats {
    c.snapshot()
}

/// Asserts that only what `f` says changed between `before` and `after`.
#[track_caller]
fn changes(before: &Stats, after: &Stats, what: &str, f: impl FnOnce(&mut Stats)) {
    let mut want = *before;
    f(&mut want);
    assert_eq!(*after, want, "counters after {what}");
}

/// The runner's accounting after a step: a connection that came up, or
/// one that ended.
fn settle(e: &mut mqtt::Engine<'_>, m: &mut Model, counters: &Counters) {
    let before = snapshot(counters);
    let up = m.conn().up;
    let closing = m.conn().closing;
    if let Some(end) = quiet!("ended", e.ended()) {
        if m.conn().settled {
            return;
        }
        m.conn().settled = true;
        if quiet!("reopen", e.reopen()) {
            // Opened again at once, not counted.
        } else if closing {
            if quiet!("link_seq", e.link_seq()).is_some() {
                quiet!("went_down", e.went_down(None));
                m.connected = false;
            }
        } else if up {
            quiet!("went_down", e.went_down(Some(end)));
            m.connected = false;
            m.last_error = Some(end);
        } else {
            quiet!("failed", e.failed(Failure::Ended(end)));
            m.failures += 1;
            m.last_error = Some(end);
        }
    } else if !up && quiet!("accepting", e.accepting()) {
        m.conn().up = true;
        quiet!("came_up", e.came_up(m.connected_once));
        m.reconnects += u32::from(m.connected_once);
        m.connected_once = true;
        m.connected = true;
    }
    let after = snapshot(counters);
    changes(&before, &after, "the runner's accounting", |s| {
        s.reconnects = m.reconnects;
        s.connect_failures = m.failures;
        s.connected = m.connected;
    });
    assert_eq!(counters.last_error(), m.last_error, "last_error");
}

fn open(e: &mut mqtt::Engine<'_>, m: &mut Model, counters: &Counters) {
    if let Some(c) = m.conns.last_mut() {
        if !c.settled {
            // A stop ended the run (no end): the runner's `stopped`.
            c.settled = true;
            if quiet!("link_seq", e.link_seq()).is_some() {
                quiet!("went_down", e.went_down(None));
                m.connected = false;
            }
        }
    }
    m.conns.push(Conn {
        consumed: Some(0),
        ..Conn::default()
    });
    m.inbox.clear();
    let before = snapshot(counters);
    quiet!("open", e.open(Instant::from_micros(m.now)));
    changes(&before, &snapshot(counters), "open", |s| {
        s.connected = m.connected
    });
}

/// The transport takes `n` bytes of `io().tx`.
fn write(e: &mut mqtt::Engine<'_>, m: &mut Model, counters: &Counters, n: usize) {
    let now = Instant::from_micros(m.now);
    let tx = quiet!("io", e.io()).tx.to_vec();
    assert!(n <= tx.len());
    let before = snapshot(counters);
    quiet!("transmitted", e.transmitted(n, now));
    changes(&before, &snapshot(counters), "transmitted", |_| {});
    if n > 0 {
        quiet!("wrote", e.wrote());
        m.writes = m.writes.wrapping_add(1);
        m.wrote(&tx[..n]);
    }
}

/// `received(n)` of what was copied into `io().rx`, checked.
fn receive(
    e: &mut mqtt::Engine<'_>,
    m: &mut Model,
    sink: &mut Checked<'_, '_>,
    counters: &Counters,
    n: usize,
) {
    let now = Instant::from_micros(m.now);
    let was_up = quiet!("accepting", e.accepting());
    let before = snapshot(counters);
    let calls = sink.log.len();
    quiet!("received", e.received(n, now, sink));
    let after = snapshot(counters);
    let got = sink.log[calls..].to_vec();
    let ended = quiet!("ended", e.ended()).is_some();
    // Received packets may wait for room (or a step for the sink): what
    // was consumed is then not known.
    let pending = quiet!("pending", e.pending());
    let up = quiet!("accepting", e.accepting());

    let errors = got.iter().filter(|d| !d.ok).count() as u32;
    let cleared = after.cleared.wrapping_sub(before.cleared);
    changes(&before, &after, "received", |s| {
        s.received = s.received.wrapping_add(got.len() as u32 + cleared);
        s.rejected = s.rejected.wrapping_add(errors);
        s.cleared = after.cleared;
        s.acked = after.acked;
        s.in_flight = after.in_flight;
    });
    assert!(
        got.iter().all(|d| !d.payload.is_empty()),
        "an empty payload reaches the sink"
    );

    // Every dispatch is a PUBLISH of this connection's input, in order.
    let c = m.conn();
    c.cleared += cleared;
    let empties = c
        .in_pkts
        .iter()
        .filter(|p| p.kind() == PUBLISH)
        .filter_map(|p| parse_publish(p.first, &p.body))
        .filter(|p| p.payload.is_empty())
        .count() as u32;
    assert!(
        c.cleared <= empties,
        "{} cleared of {empties} empty publishes",
        c.cleared
    );
    let from = c.consumed;
    for d in &got {
        let found = c.in_pkts[c.cursor..].iter().position(|p| {
            p.kind() == PUBLISH
                && parse_publish(p.first, &p.body).is_some_and(|x| {
                    (x.topic.as_slice(), x.payload.as_slice(), x.retain)
                        == (d.topic.as_slice(), d.payload.as_slice(), d.retained)
                })
        });
        let Some(k) = found else {
            panic!("a dispatch no PUBLISH explains (in order): {d:?}");
        };
        c.cursor += k + 1;
    }
    // Up before and after: every QoS 0/1 PUBLISH consumed was handed
    // over (or cleared).
    c.consumed = (!ended && !pending).then_some(c.in_pkts.len());
    if let (true, true, false, false, Some(from)) = (was_up, up, ended, pending, from) {
        let due: Vec<Publish> = c.in_pkts[from..]
            .iter()
            .filter(|p| p.kind() == PUBLISH && (p.first >> 1) & 3 < 2)
            .filter_map(|p| parse_publish(p.first, &p.body))
            .collect();
        let mut it = got.iter();
        let mut empty = 0;
        for p in &due {
            if p.payload.is_empty() {
                empty += 1;
                continue;
            }
            assert!(
                it.any(|d| (d.topic.as_slice(), d.payload.as_slice(), d.retained)
                    == (p.topic.as_slice(), p.payload.as_slice(), p.retain)),
                "a QoS {} PUBLISH consumed while up was not dispatched: {p:?}",
                p.qos
            );
        }
        assert!(
            cleared >= empty,
            "{cleared} cleared of {empty} empty QoS 0/1 publishes"
        );
    }
}

fn run(input: &Input) {
    let s = &input.setup;
    let rx_len = 24 + usize::from(s.rx) % 600;
    let tx_len = 24 + usize::from(s.tx) % 600;
    let client_id = CLIENT_IDS[usize::from(s.client) % CLIENT_IDS.len()];
    let mut config = Config::new(client_id);
    config.credentials = s.credentials.then_some(("user", &b"pass"[..]));
    config.keep_alive = s
        .keep_alive
        .map(|v| Duration::from_secs(u64::from(v.max(1))));
    config.session_expiry = s.session_expiry.map(|v| Duration::from_secs(u64::from(v)));
    config.presence = s.presence.map(|(q, delay, first_seq)| {
        let mut p = Presence::new(PRESENCE);
        p.qos = qos(q);
        p.will_delay = delay.then_some(&WILL_DELAY);
        p.first_seq = first_seq;
        p
    });
    config.max_in_flight = u16::from(s.max_in_flight.max(1));
    config.subscribe_qos = qos(s.subscribe_qos);
    config.ack_timeout = s
        .ack_timeout
        .map(|v| Duration::from_millis(u64::from(v.max(1))));
    config.reconnect = if s.never {
        Reconnect::Never
    } else {
        Reconnect::Always
    };

    let records = Records::new();
    let links = Links::new(&records);
    let mut sink = Checked {
        table: links.table(),
        harness: Harness::new(&records),
        log: Vec::new(),
    };
    let counters = Counters::new();
    let (mut rx, mut tx) = (vec![0u8; rx_len], vec![0u8; tx_len]);
    let mut engine =
        mqtt::Engine::new(&config, &mut rx, &mut tx, &counters).expect("a valid config");
    let e = &mut engine;
    let mut m = Model {
        now: 0,
        rx_len,
        tx_len,
        client_id,
        credentials: s.credentials,
        keep_alive: config.keep_alive.map_or(0, |d| d.as_secs() as u16),
        session_expiry: config.session_expiry.map(|d| d.as_secs().max(1) as u32),
        presence: s.presence.map(|(q, d, _)| (q % 3, d)),
        subscribe_qos: s.subscribe_qos % 3,
        conns: Vec::new(),
        inbox: Vec::new(),
        offers: BTreeMap::new(),
        next_id: 0,
        recent: Vec::new(),
        connected_once: false,
        connected: false,
        last_error: None,
        reconnects: 0,
        failures: 0,
        writes: 0,
    };
    open(e, &mut m, &counters);
    settle(e, &mut m, &counters);
    check(e, &mut m, &counters);

    for op in input.ops.iter().take(256) {
        step(e, &mut m, &mut sink, &counters, op);
        settle(e, &mut m, &counters);
        check(e, &mut m, &counters);
    }

    // A live connection writes all it holds, and its output ends on a
    // packet boundary.
    for _ in 0..4 * (rx_len + tx_len) + 64 {
        if quiet!("ended", e.ended()).is_some() {
            break;
        }
        if quiet!("pending", e.pending()) {
            receive(e, &mut m, &mut sink, &counters, 0);
        }
        let n = quiet!("io", e.io()).tx.len();
        if n == 0 {
            break;
        }
        write(e, &mut m, &counters, n);
        settle(e, &mut m, &counters);
        check(e, &mut m, &counters);
    }
    if quiet!("ended", e.ended()).is_none() {
        assert!(quiet!("io", e.io()).tx.is_empty(), "the output drains");
        let c = m.conn();
        assert_eq!(
            c.parsed,
            c.out.len(),
            "a live connection's output ends on a packet boundary: {:02x?}",
            &c.out[c.parsed..]
        );
    }

    // A last connection to a well-behaved broker: every offer accepted and
    // never written goes out on it (a new session drops only what was
    // written before; a resumed one sends that again).
    if quiet!("ended", e.ended()).is_none() && !m.conn().closing {
        quiet!("end", e.end(IoEnd::Closed));
        settle(e, &mut m, &counters);
    }
    let mut up = false;
    for _ in 0..4 {
        open(e, &mut m, &counters);
        settle(e, &mut m, &counters);
        check(e, &mut m, &counters);
        serve(e, &mut m, &mut sink, &counters, input.final_present, 24);
        up = quiet!("accepting", e.accepting());
        if up || quiet!("ended", e.ended()).is_none() {
            break;
        }
    }
    let drained = quiet!("io", e.io()).tx.is_empty() && !quiet!("pending", e.pending());
    if up && drained {
        for (id, o) in &m.offers {
            assert!(
                o.written.is_some(),
                "offer {id} accepted and never written: {o:?}"
            );
        }
    }
    if std::env::var_os("AIMDB_FUZZ_SUMMARY").is_some() {
        let kinds: BTreeSet<u8> = m
            .conns
            .iter()
            .flat_map(|c| c.pkts.iter().map(Pk::kind))
            .collect();
        eprintln!(
            "summary: conns {} up {} final {up} {drained} kinds {kinds:?} {:?}",
            m.conns.len(),
            m.conns.iter().filter(|c| c.up).count(),
            counters.snapshot()
        );
    }
}

/// `rounds` round trips with a well-behaved broker: the transport takes
/// all of `io().tx`, the broker answers all of it, the engine reads all
/// of that.
fn serve(
    e: &mut mqtt::Engine<'_>,
    m: &mut Model,
    sink: &mut Checked<'_, '_>,
    counters: &Counters,
    present: bool,
    rounds: u8,
) {
    for _ in 0..rounds {
        for _ in 0..64 {
            let n = quiet!("io", e.io()).tx.len();
            if n == 0 {
                break;
            }
            write(e, m, counters, n);
        }
        let bytes = m.respond(present);
        m.inbox.extend(bytes);
        for _ in 0..64 {
            if quiet!("pending", e.pending()) {
                receive(e, m, sink, counters, 0);
            }
            if m.inbox.is_empty() {
                break;
            }
            let io = quiet!("io", e.io());
            let n = io.rx.len().min(m.inbox.len());
            if n == 0 {
                break;
            }
            io.rx[..n].copy_from_slice(&m.inbox[..n]);
            let bytes: Vec<u8> = m.inbox.drain(..n).collect();
            m.handed(&bytes);
            receive(e, m, sink, counters, n);
        }
        settle(e, m, counters);
        check(e, m, counters);
    }
}

fn step(
    e: &mut mqtt::Engine<'_>,
    m: &mut Model,
    sink: &mut Checked<'_, '_>,
    counters: &Counters,
    op: &Op,
) {
    let now = Instant::from_micros(m.now);
    let ended = quiet!("ended", e.ended()).is_some();
    match op {
        Op::Open => {
            if ended || m.conn().closing {
                open(e, m, counters);
            }
        }
        Op::Broker(p) => {
            let bytes = m.encode(p);
            if m.inbox.len() < 1 << 16 {
                m.inbox.extend(bytes);
            }
        }
        Op::Respond { present } => {
            let bytes = m.respond(*present);
            m.inbox.extend(bytes);
        }
        Op::Rounds { present, rounds } => serve(e, m, sink, counters, *present, rounds % 16),
        Op::Read(max) => {
            let io = quiet!("io", e.io());
            let n = usize::from(*max).min(io.rx.len()).min(m.inbox.len());
            if n == 0 {
                return;
            }
            io.rx[..n].copy_from_slice(&m.inbox[..n]);
            let bytes: Vec<u8> = m.inbox.drain(..n).collect();
            m.handed(&bytes);
            receive(e, m, sink, counters, n);
        }
        Op::Write(share) => {
            let len = quiet!("io", e.io()).tx.len();
            if len > 0 {
                write(e, m, counters, len * usize::from(*share) / 255);
            }
        }
        Op::Unstall => {
            if quiet!("pending", e.pending()) {
                receive(e, m, sink, counters, 0);
            }
        }
        Op::Offer {
            topic,
            tail,
            qos: q,
            retain,
            urgent,
            lagged,
        } => {
            if !quiet!("accepting", e.accepting()) {
                return;
            }
            let topic = OUT_TOPICS[usize::from(*topic) % OUT_TOPICS.len()];
            m.next_id = m.next_id.wrapping_add(1);
            let mut payload = m.next_id.to_be_bytes().to_vec();
            payload.extend(tail.iter().take(300));
            let message = Message {
                route: 0,
                topic,
                payload: &payload,
                lagged: *lagged,
                qos: qos(*q),
                retain: *retain,
                urgent: *urgent,
            };
            let before = snapshot(counters);
            let got = quiet!("offer", e.offer(&message, now));
            let after = snapshot(counters);
            match got {
                Offer::Accepted => {
                    let admitted = after.in_flight.wrapping_sub(before.in_flight);
                    assert!(admitted <= u32::from(q % 3 > 0), "in_flight +{admitted}");
                    changes(&before, &after, "an accepted offer", |s| {
                        s.sent += 1;
                        s.lagged = s.lagged.wrapping_add(*lagged as u32);
                        s.in_flight = after.in_flight;
                    });
                    // The smallest PUBLISH it can be, with its record head.
                    let rem = 2 + topic.len() + 1 + payload.len();
                    let len = 1 + if rem < 128 { 1 } else { 2 } + rem;
                    assert!(
                        3 + len <= m.tx_len,
                        "a {len}-byte PUBLISH in TX of {}",
                        m.tx_len
                    );
                    m.offers.insert(
                        m.next_id,
                        Offered {
                            topic,
                            payload,
                            qos: q % 3,
                            retain: *retain,
                            written: None,
                        },
                    );
                }
                Offer::TooLarge => changes(&before, &after, "a refused offer", |s| s.dropped += 1),
                Offer::Busy => changes(&before, &after, "a busy offer", |_| {}),
            }
        }
        Op::Advance(ms) => {
            m.now = m.now.saturating_add(u64::from(*ms) * 1000);
            let now = Instant::from_micros(m.now);
            let Some(due) = quiet!("poll_at", e.poll_at()) else {
                return;
            };
            if now < due {
                return;
            }
            let before = snapshot(counters);
            quiet!("poll", e.poll(now));
            let timed_out = quiet!("ended", e.ended()) == Some(Cause::AckTimeout);
            changes(&before, &snapshot(counters), "poll", |s| {
                s.ack_timeouts += u32::from(timed_out)
            });
        }
        Op::End(end) => {
            let k = |i: u8| KINDS[usize::from(i) % KINDS.len()];
            let why = match end {
                End::Closed => IoEnd::Closed,
                End::Read(i) => IoEnd::Read(k(*i)),
                End::Write(i) => IoEnd::Write(k(*i)),
            };
            let first = quiet!("ended", e.ended());
            let before = snapshot(counters);
            quiet!("end", e.end(why));
            changes(&before, &snapshot(counters), "end", |_| {});
            let want = first.unwrap_or(match why {
                IoEnd::Closed => Cause::Disconnected,
                _ => Cause::Transport,
            });
            assert_eq!(
                quiet!("ended", e.ended()),
                Some(want),
                "the first cause stays"
            );
        }
        Op::Close => {
            let c = m.conn();
            if c.up && !c.closing && !ended {
                c.closing = true;
                let before = snapshot(counters);
                quiet!("close", e.close(now));
                let after = snapshot(counters);
                let admitted = after.in_flight.wrapping_sub(before.in_flight);
                assert!(admitted <= 1, "the goodbye admits one publish");
                changes(&before, &after, "close", |s| s.in_flight = after.in_flight);
            }
        }
        Op::Late(k) => {
            if !ended {
                return;
            }
            let before = snapshot(counters);
            let calls = sink.log.len();
            let k = usize::from(*k);
            quiet!("received", e.received(k % (m.rx_len + 1), now, sink));
            quiet!("transmitted", e.transmitted(k % (m.tx_len + 1), now));
            assert_eq!(sink.log.len(), calls, "dispatched after the end");
            changes(&before, &snapshot(counters), "calls after the end", |_| {});
        }
    }
}

/// What holds after every step.
fn check(e: &mut mqtt::Engine<'_>, m: &mut Model, counters: &Counters) {
    let s = snapshot(counters);
    assert_eq!(s.writes, m.writes, "writes");
    assert_eq!(
        (s.reconnects, s.connect_failures, s.connected),
        (m.reconnects, m.failures, m.connected)
    );
    let ended = quiet!("ended", e.ended());
    let io = quiet!("io", e.io());
    let (rx, tx) = (io.rx.len(), io.tx.len());
    assert!(rx <= m.rx_len, "io().rx of {rx} bytes");
    assert!(
        tx <= m.rx_len.max(m.tx_len).max(32),
        "io().tx of {tx} bytes"
    );
    if ended.is_some() {
        assert_eq!((rx, tx), (0, 0), "buffers lent after the end");
        assert_eq!(
            quiet!("poll_at", e.poll_at()),
            None,
            "poll_at after the end"
        );
        assert!(!quiet!("accepting", e.accepting()));
        assert_eq!(quiet!("online", e.online()), None);
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    if std::env::var_os("AIMDB_FUZZ_DEBUG").is_some() {
        eprintln!("{input:#?}");
    }
    run(&input);
});
