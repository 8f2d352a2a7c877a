//! The framed protocol's sans-I/O engine (`framed::Engine`) driven by plain
//! calls, with no runner and no executor, against a model of its outbox,
//! its heartbeat and its counters.
//!
//! Input: an engine size (two `RX`/`TX` pairs), a heartbeat (or none) and
//! a first birth sequence, then up to 256 steps: open a connection (when
//! none is live; optionally forgetting a partly received frame, as
//! `run_reconnecting` does), queue bytes from the peer (good frames on the
//! fixture's topics, keep-alives, raw bytes, delimiters) and let the
//! engine read up to `n` of them into `io().rx`, let the transport take
//! `n` bytes of `io().tx` (partial writes included), offer a message (a
//! topic from a small set, arbitrary payload, QoS, retain, urgent, lag),
//! advance time and `poll` when `poll_at` is due, end the connection with
//! an `IoEnd`. At the end a connection takes everything the engine holds.
//!
//! Invariants, checked after every step:
//!
//! 1. no heap allocation inside any engine call (`open`, `io`, `received`,
//!    `transmitted`, `offer`, `poll_at`, `poll`, `end`, ...): a counting
//!    global allocator, the sink's own allocations set apart;
//! 2. every counter equals the model's, exactly: a reference `Decoder` of
//!    the engine's `RX` fed the same bytes says which frames are handed to
//!    the sink (`received`, in order, with their exact topic and payload),
//!    which are keep-alives (`heartbeats_received`, or `malformed` when
//!    the payload is no sequence) and which land in `oversized`,
//!    `cobs_errors`, `malformed`; `rejected` equals the sink's errors;
//!    `bytes_in`/`bytes_out` the bytes read and written; `lagged`,
//!    `dropped` the offers; `reconnects` the opens after the first;
//!    `peer_silent` the heartbeat timeouts;
//! 3. the sink is the fixture's checked table (`Harness`): every dispatch
//!    is checked against the model of the records, so a refused frame
//!    writes nothing;
//! 4. output, per connection, decoded with a fresh `Decoder`: only whole
//!    frames; a lone `0x00` exactly as the first byte after a connection
//!    that cut a frame off (and then `io().tx` is that byte alone); every
//!    keep-alive carries this connection's birth sequence; the message
//!    frames are exactly the accepted offers, each once across all
//!    connections, in the model's order: a normal message after every
//!    message accepted before it, an urgent one after the earlier urgent
//!    ones, the frame being written and the frames kept from an earlier
//!    connection, and ahead of the normal ones not yet started; `sent`
//!    counts the message frames whose delimiter went out, `heartbeats_sent`
//!    the keep-alives; an offer is `TooLarge` exactly when the frame
//!    exceeds `TX` and the outbox is empty (never `Accepted` then), `Busy`
//!    only when the outbox is not empty, and `Busy` changes nothing;
//! 5. bounded work: `io().tx` is at most `TX` bytes, `io().rx` at most 64;
//!    after `ended()` is `Some`, `received` changes no counter and
//!    dispatches nothing, and `accepting()` is false; `poll_at`,
//!    `online`, `link_seq` and `ended` are the model's exactly, and a due
//!    `poll` ends the connection `PeerSilent` exactly when nothing was
//!    read for longer than the timeout, else queues exactly one keep-alive
//!    (of this connection's sequence) when nothing was written for the
//!    interval and the outbox is empty, else nothing.
//!
//! At the end every accepted message has been written once, and
//! `unsent_frames()` is 0.
//!
//! After the end the engine lends nothing and a `transmitted` changes no
//! counter. `AIMDB_FUZZ_DEBUG=1` prints the decoded input, `AIMDB_FUZZ_SUMMARY=1`
//! the counters at the end.
#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::VecDeque;
use std::time::Duration;

use aimdb_connectors::clock::Instant;
use aimdb_connectors::engine::{Engine as _, IoEnd, Offer};
use aimdb_connectors::framed::frame::{encode, Decoder, Event, FrameError};
use aimdb_connectors::framed::{self, Counters, Error, Heartbeat, Stats};
use aimdb_core::connector::{DispatchError, FrameSink, InboundStats, Message, QoS};
use aimdb_fuzz::fixture::{Harness, Links, Records, Table};
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

/// The fixture's table, every dispatch checked against its model and
/// logged.
struct Checked<'t, 'r> {
    table: Table<'t>,
    harness: Harness<'r>,
    /// (topic, payload, accepted) of each dispatch.
    log: Vec<(Vec<u8>, Vec<u8>, bool)>,
}

impl FrameSink for Checked<'_, '_> {
    fn dispatch(&mut self, topic: &[u8], payload: &[u8]) -> Result<usize, DispatchError> {
        let before = ALLOCS.with(Cell::get);
        let got = self.harness.step(&mut self.table, topic, payload);
        self.log
            .push((topic.to_vec(), payload.to_vec(), got.is_ok()));
        let made = ALLOCS.with(Cell::get) - before;
        SINK_ALLOCS.with(|c| c.set(c.get() + made));
        got
    }
    fn next_filter(&self, from: usize) -> Option<(usize, &str)> {
        self.table.next_filter(from)
    }
    fn stats(&self) -> &InboundStats {
        self.table.stats()
    }
}

// --------------------------------------------------------------- input

/// Topics offered outbound: short, nested, and one that fills a small TX.
const OUT_TOPICS: [&str; 4] = [
    "t",
    "dev/7/value",
    "a/b/c",
    "sensors/room-with-a-long-name/temp",
];

#[derive(Arbitrary, Debug)]
enum Peer {
    /// A good frame (its topic through the fixture's pieces).
    Frame {
        topic: TopicIn,
        payload: Vec<u8>,
    },
    /// A keep-alive with this sequence.
    KeepAlive(u64),
    /// An empty topic with an arbitrary payload (a bad keep-alive, mostly).
    Empty(Vec<u8>),
    Raw(Vec<u8>),
    Delimiter,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum End {
    Closed,
    Read(u8),
    Write(u8),
}

#[derive(Arbitrary, Debug)]
enum Op {
    /// A new connection (only when none is live).
    Open {
        reset: bool,
    },
    /// The peer sends these bytes (queued until read).
    Peer(Peer),
    /// A read of at most this many queued bytes.
    Read(u8),
    /// The transport takes this share of `io().tx` (scaled to 0..=len).
    Write(u8),
    Offer {
        topic: u8,
        tail: Vec<u8>,
        qos: u8,
        retain: bool,
        urgent: bool,
        lagged: u64,
    },
    /// Time passes (microseconds); `poll` when due.
    Advance(u32),
    End(End),
}

#[derive(Arbitrary, Debug)]
struct Input {
    small: bool,
    /// (interval ms, timeout ms).
    heartbeat: Option<(u16, u16)>,
    first_seq: u64,
    ops: Vec<Op>,
}

const KINDS: [ErrorKind; 5] = [
    ErrorKind::Other,
    ErrorKind::BrokenPipe,
    ErrorKind::ConnectionReset,
    ErrorKind::TimedOut,
    ErrorKind::Interrupted,
];

fn io_end(e: End) -> (IoEnd, Error) {
    let k = |i: u8| KINDS[usize::from(i) % KINDS.len()];
    match e {
        End::Closed => (IoEnd::Closed, Error::Closed),
        End::Read(i) => (IoEnd::Read(k(i)), Error::Read(k(i))),
        End::Write(i) => (IoEnd::Write(k(i)), Error::Write(k(i))),
    }
}

/// The postcard varint of `v` (a keep-alive's payload).
fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

/// The frame of (`topic`, `payload`) on the wire.
fn wire(topic: &str, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; 2 * (topic.len() + payload.len()) + 16];
    let n = encode(topic, payload, &mut buf).expect("room");
    buf.truncate(n);
    buf
}

/// A keep-alive's sequence: the whole payload one postcard `u64`.
fn keepalive_seq(payload: &[u8]) -> Option<u64> {
    match postcard::take_from_bytes::<u64>(payload) {
        Ok((seq, [])) => Some(seq),
        _ => None,
    }
}

// --------------------------------------------------------------- model

/// An accepted message, not yet written whole.
#[derive(Debug, Clone)]
struct Sent {
    id: u16,
    topic: &'static str,
    payload: Vec<u8>,
    urgent: bool,
}

/// The largest frame the output decoder takes (every `TX` here is less).
const OUT_DECODE: usize = 1024;

struct Model<const RX: usize> {
    stats: Stats,
    now: u64,
    heartbeat: Option<Heartbeat>,
    first_seq: u64,
    opens: u64,
    ended: Option<Error>,
    own: u64,
    peer: Option<u64>,
    online: bool,
    heard_at: Instant,
    wrote_at: Instant,

    /// Bytes the peer sent, not yet read.
    inbox: VecDeque<u8>,
    /// The engine's decoder, mirrored.
    rx: Box<Decoder<RX>>,

    /// Accepted messages in the order they must go out.
    queue: VecDeque<Sent>,
    /// Urgent messages go in at or after this index of `queue`.
    urgent_end: usize,
    /// This connection's output since its last delimiter.
    partial: Vec<u8>,
    /// This connection wrote nothing yet.
    fresh: bool,
    /// A frame was cut off: the next connection starts with a lone 0x00.
    resync: bool,
    out: Box<Decoder<OUT_DECODE>>,
    next_id: u16,
}

impl<const RX: usize> Model<RX> {
    /// The frame being written is a message (`queue[0]`), not a
    /// keep-alive: a keep-alive's COBS starts with 0x01 (its topic is
    /// empty), a message's with more.
    fn started(&self) -> bool {
        self.partial.first().is_some_and(|&b| b != 0x01)
    }

    fn open(&mut self, now: u64) {
        self.opens += 1;
        self.own = self.first_seq.wrapping_add(self.opens - 1);
        self.ended = None;
        self.peer = None;
        self.online = self.heartbeat.is_none();
        self.heard_at = Instant::from_micros(now);
        self.wrote_at = Instant::from_micros(now);
        if !self.partial.is_empty() {
            self.resync = true;
        }
        self.partial.clear();
        self.fresh = true;
        *self.out = Decoder::new();
        self.urgent_end = self.queue.len();
    }

    /// The transport took `bytes` of this connection's output.
    fn wrote(&mut self, bytes: &[u8]) {
        for (i, &b) in bytes.iter().enumerate() {
            let first = core::mem::replace(&mut self.fresh, false);
            if b == 0 && self.partial.is_empty() {
                assert!(
                    first && self.resync,
                    "a lone delimiter only begins a connection after a cut-off frame"
                );
                self.resync = false;
                assert!(matches!(self.out.push(&[0]), Event::NeedMore));
                continue;
            }
            assert!(
                !(first && self.resync),
                "after a cut-off frame the next connection starts with a lone 0x00"
            );
            if b != 0 {
                self.partial.push(b);
                assert!(matches!(self.out.push(&[b]), Event::NeedMore));
                continue;
            }
            self.partial.clear();
            let (topic, payload) = match self.out.push(&[0]) {
                Event::Frame(f, 1) => (f.topic.to_vec(), f.payload.to_vec()),
                other => panic!("byte {i} of a write ends no whole frame: {other:?}"),
            };
            if topic.is_empty() {
                assert_eq!(
                    keepalive_seq(&payload),
                    Some(self.own),
                    "a keep-alive carries this connection's birth sequence"
                );
                self.stats.heartbeats_sent += 1;
                continue;
            }
            let m = self.queue.pop_front().unwrap_or_else(|| {
                panic!("a frame no accepted offer explains: {topic:?} {payload:?}")
            });
            assert_eq!(
                (topic.as_slice(), payload.as_slice()),
                (m.topic.as_bytes(), m.payload.as_slice()),
                "message {} (urgent {}) is the next in order",
                m.id,
                m.urgent
            );
            self.urgent_end = self.urgent_end.saturating_sub(1);
            self.stats.sent += 1;
        }
    }

    /// What the engine must do with `bytes` read: the frames for the sink
    /// (`None`: a frame with an id came, which the model does not follow).
    fn read(&mut self, mut bytes: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut frames = Vec::new();
        self.stats.bytes_in = self.stats.bytes_in.wrapping_add(bytes.len() as u32);
        while !bytes.is_empty() {
            let (used, heard) = match self.rx.push(bytes) {
                Event::NeedMore => break,
                Event::Frame(f, _) if f.tracked().is_some() => return None,
                Event::Frame(f, used) if f.topic.is_empty() => {
                    match keepalive_seq(f.payload) {
                        Some(seq) => {
                            self.stats.heartbeats_received += 1;
                            self.peer = Some(seq);
                        }
                        None => self.stats.malformed += 1,
                    }
                    (used, true)
                }
                Event::Frame(f, used) => {
                    self.stats.received += 1;
                    frames.push((f.topic.to_vec(), f.payload.to_vec()));
                    (used, true)
                }
                Event::Error(e, used) => {
                    match e {
                        FrameError::Oversized => self.stats.oversized += 1,
                        FrameError::Cobs => self.stats.cobs_errors += 1,
                        _ => self.stats.malformed += 1,
                    }
                    (used, false)
                }
            };
            self.online |= heard;
            bytes = &bytes[used..];
        }
        Some(frames)
    }

    /// When `poll` is due: the heartbeat's silence deadline, and while
    /// the outbox is empty its next keep-alive.
    fn poll_at(&self, idle: bool) -> Option<Instant> {
        let hb = self.heartbeat.filter(|_| self.ended.is_none())?;
        let silent = self.heard_at + hb.timeout + Duration::from_micros(1);
        Some(if idle {
            silent.min(self.wrote_at + hb.interval)
        } else {
            silent
        })
    }
}

// -------------------------------------------------------------- driver

/// Opens a connection as the runner does, and counts it come up.
fn open<const RX: usize, const TX: usize>(
    e: &mut framed::Engine<'_, RX, TX>,
    m: &mut Model<RX>,
    reset: bool,
) {
    if reset {
        quiet!("reset", e.reset());
        m.rx.reset();
    }
    quiet!("open", e.open(Instant::from_micros(m.now)));
    m.open(m.now);
    assert!(quiet!("accepting", e.accepting()), "up once open");
    quiet!("came_up", e.came_up(m.opens > 1));
    m.stats.reconnects += u32::from(m.opens > 1);
}

/// The transport takes `n` bytes of `io().tx` (`n` at most its length).
fn write<const RX: usize, const TX: usize>(
    e: &mut framed::Engine<'_, RX, TX>,
    m: &mut Model<RX>,
    n: usize,
) {
    let now = Instant::from_micros(m.now);
    let tx = quiet!("io", e.io()).tx.to_vec();
    assert!(n <= tx.len());
    if m.resync && m.fresh && !tx.is_empty() {
        assert_eq!(tx, [0], "the lone delimiter goes alone");
    }
    quiet!("transmitted", e.transmitted(n, now));
    if n > 0 {
        quiet!("wrote", e.wrote());
        m.wrote(&tx[..n]);
        m.wrote_at = now;
        m.stats.bytes_out = m.stats.bytes_out.wrapping_add(n as u32);
    }
}

fn run<const RX: usize, const TX: usize>(input: &Input) {
    let heartbeat = input.heartbeat.map(|(i, t)| {
        Heartbeat::new(
            Duration::from_millis(u64::from(i.max(1))),
            Duration::from_millis(u64::from(t.max(1))),
        )
    });
    let mut config = framed::Config::new();
    config.heartbeat = heartbeat;
    config.first_seq = input.first_seq;

    let records = Records::new();
    let links = Links::new(&records);
    let mut sink = Checked {
        table: links.table(),
        harness: Harness::new(&records),
        log: Vec::new(),
    };
    let counters = Counters::new();
    let mut engine = Box::new(framed::Engine::<RX, TX>::new(&counters, config));
    let e = &mut *engine;
    let mut m = Model::<RX> {
        stats: counters.snapshot(),
        now: 0,
        heartbeat,
        first_seq: input.first_seq,
        opens: 0,
        ended: None,
        own: 0,
        peer: None,
        online: false,
        heard_at: Instant::ZERO,
        wrote_at: Instant::ZERO,
        inbox: VecDeque::new(),
        rx: Box::new(Decoder::new()),
        queue: VecDeque::new(),
        urgent_end: 0,
        partial: Vec::new(),
        fresh: true,
        resync: false,
        out: Box::new(Decoder::new()),
        next_id: 0,
    };

    open(e, &mut m, false);

    for op in input.ops.iter().take(256) {
        if step(e, &mut m, &mut sink, op) == Scope::Tracked {
            // Tracked frames and acknowledgements are outside the model
            // (the engine's unit tests cover them): the run ends here.
            return;
        }
        check(e, &mut m, &counters);
    }

    // Everything the engine holds goes out, on a new connection if need be.
    if m.ended.is_some() {
        open(e, &mut m, false);
    }
    for _ in 0..4 * TX + 8 {
        let n = quiet!("io", e.io()).tx.len();
        if n == 0 {
            break;
        }
        write(e, &mut m, n);
        check(e, &mut m, &counters);
    }
    assert!(quiet!("io", e.io()).tx.is_empty(), "the outbox drains");
    assert!(
        m.queue.is_empty(),
        "accepted and never written: {:?}",
        m.queue
    );
    assert!(m.partial.is_empty(), "nothing is left half-written");
    assert_eq!(quiet!("unsent_frames", e.unsent_frames()), 0);
    if std::env::var_os("AIMDB_FUZZ_SUMMARY").is_some() {
        eprintln!("summary: opens {} {:?}", m.opens, m.stats);
    }
}

/// Whether a step stayed within what the model knows.
#[derive(PartialEq)]
enum Scope {
    Modelled,
    /// The peer's bytes held a frame with an id.
    Tracked,
}

fn step<const RX: usize, const TX: usize>(
    e: &mut framed::Engine<'_, RX, TX>,
    m: &mut Model<RX>,
    sink: &mut Checked<'_, '_>,
    op: &Op,
) -> Scope {
    let now = Instant::from_micros(m.now);
    match op {
        Op::Open { reset } => {
            if m.ended.is_some() {
                open(e, m, *reset);
            }
        }
        Op::Peer(p) => {
            let bytes = match p {
                Peer::Frame { topic, payload } => {
                    // COBS of postcard `(topic, payload)`: the topic need
                    // not be text here.
                    let plain = postcard::to_allocvec(&(topic.bytes(), payload)).expect("postcard");
                    let mut out = cobs(&plain);
                    out.push(0);
                    out
                }
                Peer::KeepAlive(seq) => wire("", &varint(*seq)),
                Peer::Empty(p) => wire("", p),
                Peer::Raw(b) => b.clone(),
                Peer::Delimiter => vec![0],
            };
            if m.inbox.len() < 1 << 16 {
                m.inbox.extend(bytes);
            }
        }
        Op::Read(max) => {
            let io = quiet!("io", e.io());
            let n = usize::from(*max).min(io.rx.len()).min(m.inbox.len());
            if n == 0 {
                return Scope::Modelled;
            }
            let bytes: Vec<u8> = m.inbox.drain(..n).collect();
            io.rx[..n].copy_from_slice(&bytes);
            let calls = sink.log.len();
            quiet!("received", e.received(n, now, sink));
            let got = &sink.log[calls..];
            if m.ended.is_some() {
                // The connection is over: the bytes are lost.
                assert!(got.is_empty(), "dispatched after the end");
                return Scope::Modelled;
            }
            m.heard_at = now;
            let Some(want) = m.read(&bytes) else {
                return Scope::Tracked;
            };
            let frames: Vec<_> = got.iter().map(|(t, p, _)| (t.clone(), p.clone())).collect();
            assert_eq!(frames, want, "the sink gets exactly the decoded frames");
            m.stats.rejected += got.iter().filter(|(.., ok)| !ok).count() as u32;
        }
        Op::Write(share) => {
            let len = quiet!("io", e.io()).tx.len();
            let n = len * usize::from(*share) / 255;
            if m.ended.is_some() {
                assert_eq!(len, 0, "nothing is lent after the end");
                quiet!("transmitted", e.transmitted(n.max(1), now));
                assert_eq!(counters_of(e), m.stats, "transmitted after the end");
                return Scope::Modelled;
            }
            if len > 0 {
                write(e, m, n);
            }
        }
        Op::Offer {
            topic,
            tail,
            qos,
            retain,
            urgent,
            lagged,
        } => {
            if !quiet!("accepting", e.accepting()) {
                return Scope::Modelled;
            }
            let topic = OUT_TOPICS[usize::from(*topic) % OUT_TOPICS.len()];
            m.next_id = m.next_id.wrapping_add(1);
            let mut payload = m.next_id.to_be_bytes().to_vec();
            payload.extend(tail.iter().take(96));
            let message = Message {
                route: 0,
                topic,
                payload: &payload,
                lagged: *lagged,
                qos: match qos % 3 {
                    0 => QoS::AtMostOnce,
                    1 => QoS::AtLeastOnce,
                    _ => QoS::ExactlyOnce,
                },
                retain: *retain,
                urgent: *urgent,
            };
            let len = wire(topic, &payload).len();
            let before = quiet!("io", e.io()).tx.to_vec();
            // No frame in the outbox (a lone delimiter may still be due).
            let empty = quiet!("unsent_frames", e.unsent_frames()) == 0;
            let got = quiet!("offer", e.offer(&message, now));
            let lag = (*lagged).min(u64::from(u32::MAX)) as u32;
            match got {
                Offer::Accepted => {
                    assert!(len <= TX, "a {len}-byte frame accepted into {TX} bytes");
                    m.stats.lagged = m.stats.lagged.wrapping_add(lag);
                    let sent = Sent {
                        id: m.next_id,
                        topic,
                        payload,
                        urgent: *urgent,
                    };
                    if *urgent {
                        let at = m
                            .urgent_end
                            .max(usize::from(m.started()))
                            .min(m.queue.len());
                        m.queue.insert(at, sent);
                        m.urgent_end = at + 1;
                    } else {
                        m.queue.push_back(sent);
                    }
                }
                Offer::TooLarge => {
                    assert!(empty && len > TX, "TooLarge: {len} bytes, empty {empty}");
                    m.stats.lagged = m.stats.lagged.wrapping_add(lag);
                    m.stats.dropped += 1;
                }
                Offer::Busy => {
                    assert!(!empty, "Busy with an empty outbox ({len} bytes)");
                    assert_eq!(quiet!("io", e.io()).tx, before, "Busy changes nothing");
                }
            }
        }
        Op::Advance(us) => {
            m.now = m.now.saturating_add(u64::from(*us));
            let now = Instant::from_micros(m.now);
            let Some(due) = quiet!("poll_at", e.poll_at()) else {
                return Scope::Modelled;
            };
            if now < due {
                return Scope::Modelled;
            }
            let idle = quiet!("io", e.io()).tx.is_empty();
            quiet!("poll", e.poll(now));
            let hb = m.heartbeat.expect("poll_at only with a heartbeat");
            if now > m.heard_at + hb.timeout {
                m.ended = Some(Error::PeerSilent);
                m.stats.peer_silent += 1;
            } else {
                let tx = quiet!("io", e.io()).tx.to_vec();
                if idle && now >= m.wrote_at + hb.interval {
                    assert_eq!(tx, wire("", &varint(m.own)), "a keep-alive is queued");
                } else {
                    assert_eq!(tx.is_empty(), idle, "nothing else is queued");
                }
            }
        }
        Op::End(end) => {
            let (why, error) = io_end(*end);
            quiet!("end", e.end(why));
            m.ended.get_or_insert(error);
        }
    }
    Scope::Modelled
}

fn counters_of<const RX: usize, const TX: usize>(e: &framed::Engine<'_, RX, TX>) -> Stats {
    e.counters().snapshot()
}

/// COBS of `plain` (for frames whose topic is not text).
fn cobs(plain: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8];
    let mut code_at = 0;
    let mut code = 1u8;
    for &b in plain {
        if b == 0 {
            out[code_at] = code;
            code_at = out.len();
            out.push(0);
            code = 1;
            continue;
        }
        out.push(b);
        code += 1;
        if code == 0xff {
            out[code_at] = code;
            code_at = out.len();
            out.push(0);
            code = 1;
        }
    }
    out[code_at] = code;
    out
}

/// Everything the model knows, against the engine.
fn check<const RX: usize, const TX: usize>(
    e: &mut framed::Engine<'_, RX, TX>,
    m: &mut Model<RX>,
    counters: &Counters,
) {
    assert_eq!(counters.snapshot(), m.stats, "counters");
    assert_eq!(quiet!("ended", e.ended()), m.ended, "ended");
    let live = m.ended.is_none();
    assert_eq!(quiet!("accepting", e.accepting()), live, "accepting");
    let seq = m.peer.unwrap_or(m.own);
    assert_eq!(
        quiet!("online", e.online()),
        (m.online && live).then_some(seq),
        "online"
    );
    assert_eq!(quiet!("link_seq", e.link_seq()), Some(seq), "link_seq");
    let io = quiet!("io", e.io());
    assert!(io.tx.len() <= TX, "io().tx of {} bytes", io.tx.len());
    if live {
        assert!(
            !io.rx.is_empty() && io.rx.len() <= 64,
            "io().rx of {} bytes",
            io.rx.len()
        );
    } else {
        assert!(io.rx.is_empty() && io.tx.is_empty(), "lent after the end");
    }
    let idle = io.tx.is_empty();
    assert_eq!(quiet!("poll_at", e.poll_at()), m.poll_at(idle), "poll_at");
    let unsent = quiet!("unsent_frames", e.unsent_frames());
    assert!(
        (m.queue.len()..=m.queue.len() + 1).contains(&unsent),
        "unsent_frames {unsent}, model {}",
        m.queue.len()
    );
}

fuzz_target!(|data: &[u8]| {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    if std::env::var_os("AIMDB_FUZZ_DEBUG").is_some() {
        eprintln!("{input:#?}");
    }
    if input.small {
        run::<48, 40>(&input);
    } else {
        run::<160, 200>(&input);
    }
});
