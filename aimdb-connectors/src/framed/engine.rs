//! The framed protocol as an [engine](crate::engine): codec, heartbeat and
//! outbox, with no I/O and no clock.

use aimdb_core::connector::{FrameSink, Message};
use aimdb_core::presence::Cause;

use super::frame::{self, Decoder, Event, FrameError};
use super::{Config, Counters, Error, Heartbeat, Hold, MAX_ENCODED, MAX_FRAME};
use crate::clock::Instant;
use crate::engine::{Delivery, Failure, Id, Io, IoEnd, Offer};
use aimdb_core::counters::bump;

/// Bytes read from the transport per `read` call.
const READ_CHUNK: usize = 64;

/// The framed protocol's state: a receive decoder of `RX` bytes and a
/// transmit buffer (the outbox) of `TX` bytes, kept across connections.
///
/// Driven by [`Framed`](super::Framed) through the [runner](crate::runner);
/// on its own it is a plain state machine (bytes and time in, bytes
/// out), which is how the fuzz target drives it:
///
/// ```
/// use aimdb_connectors::clock::Instant;
/// use aimdb_connectors::engine::Engine as _;
/// use aimdb_connectors::framed::{frame, Config, Counters, Engine};
/// use aimdb_core::inbound::Dispatch;
///
/// static STATS: Counters = Counters::new();
/// let mut engine = Engine::<64, 64>::new(&STATS, Config::new());
/// let mut sink = Dispatch::<1, 1>::builder().build().unwrap();
/// engine.open(Instant::ZERO);
/// let mut wire = [0u8; 16];
/// let n = frame::encode("t", b"x", &mut wire).unwrap();
/// engine.io().rx[..n].copy_from_slice(&wire[..n]);
/// engine.received(n, Instant::ZERO, &mut sink);
/// // One frame, handed to the sink (which knows no topic `t`).
/// assert_eq!((STATS.snapshot().received, STATS.snapshot().rejected), (1, 1));
/// ```
pub struct Engine<'s, const RX: usize = MAX_FRAME, const TX: usize = MAX_ENCODED> {
    decoder: Decoder<RX>,
    chunk: [u8; READ_CHUNK],
    tx: [u8; TX],
    out: Outbox,
    counters: &'s Counters,
    heartbeat: Option<Heartbeat>,
    /// Keep time this connection (a clock is there): the heartbeat runs.
    timed: bool,
    /// Each connection is a new stream: forget a partly received frame
    /// when one opens (not on a UART that stays open across runs).
    fresh: bool,
    /// Our birth sequence for the next connection.
    next_seq: u64,
    conn: Conn,
    /// Tracked frames sent and not yet acknowledged.
    flight: Flight,
    /// Acknowledgements owed to the peer.
    owed: Owed,
    /// Where acknowledgements wait until the application has the values
    /// safe; `None`: acknowledged once the sink took them.
    hold: Option<&'s (dyn Hold + Sync)>,
}

/// Tracked frames in flight at most: more wait in their backlog. Eight
/// readings are some 160 bytes, a UART's few milliseconds, and each read
/// at the peer acknowledges what it brought.
pub const IN_FLIGHT: usize = 8;

/// How often a held acknowledgement is looked at again.
const HOLD_POLL: core::time::Duration = core::time::Duration::from_millis(10);

/// Tracked frames sent, oldest first, until acknowledged.
#[derive(Debug, Clone, Copy)]
struct Flight {
    ids: [Id; IN_FLIGHT],
    head: u8,
    len: u8,
    /// Acknowledged since the last [`crate::engine::Engine::delivered`].
    acked: u32,
    /// A connection ended with tracked frames in flight.
    lost: bool,
    /// When the flight last moved: its first frame offered, or an
    /// acknowledgement. With the heartbeat on, a flight that has not moved
    /// for its timeout ends the connection.
    moved_at: Instant,
    /// The last tracked frame queued this connection (the next one names
    /// it, so the peer takes none after a gap).
    last: Option<Id>,
}

/// The receiving side of tracking: the newest tracked frame taken and the
/// newest acknowledgement queued, this connection.
#[derive(Debug, Clone, Copy)]
struct Owed {
    taken: Option<Id>,
    queued: Option<Id>,
    /// When to ask the hold again (a frame taken is not settled yet).
    check_at: Option<Instant>,
}

impl Owed {
    /// Nothing taken, nothing owed: a connection's start.
    const NONE: Self = Self {
        taken: None,
        queued: None,
        check_at: None,
    };
}

/// Where the transmit buffer stands; kept across connections so that a
/// broken one loses no frame the transport did not accept.
#[derive(Debug, Clone, Copy, Default)]
struct Outbox {
    /// Encoded frames in the transmit buffer.
    len: usize,
    /// Of those, bytes the transport accepted.
    sent: usize,
    /// A frame was cut off mid-way: a lone delimiter goes before the next.
    resync: bool,
    /// Urgent frames go in at or after this offset (after frames kept
    /// from the last connection, the hello, and earlier urgent frames).
    urgent_end: usize,
    /// The keep-alive frame in the buffer, if any (`start..end`): at most
    /// one, at the front of what is unsent.
    keepalive: Option<(usize, usize)>,
}

/// One connection's view of the link.
#[derive(Debug, Clone, Copy)]
struct Conn {
    /// Opened at least once (so there is a sequence to report).
    opened: bool,
    own: u64,
    peer: Option<u64>,
    online: bool,
    /// The heartbeat runs this connection.
    beating: bool,
    heard_at: Instant,
    wrote_at: Instant,
    ended: Option<Error>,
}

/// The one byte that ends a frame cut off mid-way.
const DELIMITER: &[u8] = &[0];

impl<'s, const RX: usize, const TX: usize> Engine<'s, RX, TX> {
    /// An engine counting into `counters`, with `config`'s heartbeat and
    /// first birth sequence.
    pub const fn new(counters: &'s Counters, config: Config) -> Self {
        Self {
            decoder: Decoder::new(),
            chunk: [0; READ_CHUNK],
            tx: [0; TX],
            out: Outbox {
                len: 0,
                sent: 0,
                resync: false,
                urgent_end: 0,
                keepalive: None,
            },
            counters,
            heartbeat: config.heartbeat,
            timed: true,
            fresh: false,
            next_seq: config.first_seq,
            conn: Conn {
                opened: false,
                own: 0,
                peer: None,
                online: false,
                beating: false,
                heard_at: Instant::ZERO,
                wrote_at: Instant::ZERO,
                ended: None,
            },
            flight: Flight {
                ids: [Id { boot: 0, seq: 0 }; IN_FLIGHT],
                head: 0,
                len: 0,
                acked: 0,
                lost: false,
                moved_at: Instant::from_micros(0),
                last: None,
            },
            owed: Owed::NONE,
            hold: None,
        }
    }

    pub(super) fn set_hold(&mut self, hold: &'s (dyn Hold + Sync)) {
        self.hold = Some(hold);
    }

    /// The peer acknowledged every tracked frame up to `id`.
    fn acked(&mut self, id: Id, now: Instant) {
        let f = &mut self.flight;
        while f.len > 0 && f.ids[f.head as usize] <= id {
            f.head = (f.head + 1) % IN_FLIGHT as u8;
            f.len -= 1;
            f.acked += 1;
            f.moved_at = now;
        }
    }

    /// Drops the tracked frames and acknowledgements (frames with an id)
    /// from the transmit buffer, which holds whole frames only (before a
    /// connection, after [`Self::resume`]).
    #[inline(never)]
    fn drop_tracked(&mut self) {
        let (mut at, mut len) = (0, self.out.len);
        while let Some(i) = self.tx[at..len].iter().position(|&b| b == 0) {
            let end = at + i + 1;
            if frame::carries_id(&self.tx[at..end - 1]) {
                self.tx.copy_within(end..len, at);
                len -= end - at;
            } else {
                at = end;
            }
        }
        self.out.len = len;
    }

    /// Queues the acknowledgement owed, if any and if it fits.
    fn settle(&mut self, now: Instant) {
        let o = &mut self.owed;
        let due = match self.hold {
            None => o.taken,
            Some(hold) => {
                let settled = hold.settled();
                o.check_at = (settled != o.taken).then(|| after(now, HOLD_POLL));
                settled
            }
        };
        let Some(id) = due.filter(|&d| Some(d) != o.queued) else {
            return;
        };
        let len = self.out.len;
        if let Ok(n) = frame::encode_tracked("", &[], id, None, &mut self.tx[len..]) {
            self.out.len += n;
            self.owed.queued = Some(id);
        }
    }

    /// The counters.
    pub fn counters(&self) -> &'s Counters {
        self.counters
    }

    pub(super) fn set_config(&mut self, config: Config) {
        self.heartbeat = config.heartbeat;
        self.next_seq = config.first_seq;
    }

    /// Whether the next connections keep time (the heartbeat needs it)
    /// and are new streams (a partly received frame is dropped).
    pub(super) fn set_mode(&mut self, timed: bool, fresh: bool) {
        self.timed = timed;
        self.fresh = fresh;
    }

    /// Forgets a partly received frame.
    pub fn reset(&mut self) {
        self.decoder.reset();
    }

    /// Frames encoded but not (wholly) accepted by the transport: the
    /// next connection sends them first.
    pub fn unsent_frames(&self) -> usize {
        let done = last_delimiter(&self.tx[..self.out.sent]);
        self.tx[done..self.out.len]
            .iter()
            .filter(|&&b| b == 0)
            .count()
    }

    /// Drops the outbound frames kept for re-sending.
    pub fn discard_unsent(&mut self) {
        self.out = Outbox::default();
    }

    /// Before a connection: frames already accepted leave the buffer; a
    /// frame cut off mid-way moves to the front, to go again whole; a
    /// keep-alive of the last connection is dropped (it carries its
    /// sequence).
    fn resume(&mut self) {
        let out = &mut self.out;
        // COBS frames hold no zero but their delimiter, so the last zero
        // accepted ends the last frame that went out whole.
        let done = last_delimiter(&self.tx[..out.sent]);
        out.resync |= out.sent > done;
        self.tx.copy_within(done..out.len, 0);
        out.len -= done;
        out.sent = 0;
        if let Some((a, b)) = out.keepalive.take() {
            if a >= done {
                let (a, b) = (a - done, b - done);
                self.tx.copy_within(b..out.len, a);
                out.len -= b - a;
            }
        }
    }

    /// Queues a keep-alive of `seq` at the front of what is unsent.
    fn queue_keepalive(&mut self, seq: u64) {
        let out = &mut self.out;
        let at = out.sent;
        if let Ok(n) = encode_keepalive(seq, &mut self.tx[out.len..]) {
            rotate_right(&mut self.tx[at..out.len + n], n);
            out.len += n;
            out.keepalive = Some((at, at + n));
            // Everything from `at` moved right by `n`, the kept frames too.
            out.urgent_end = out.urgent_end.max(at) + n;
        }
    }

    /// The first frame boundary at or after what the transport accepted:
    /// bytes before it are (partly) on their way and stay where they are.
    fn first_unstarted(&self) -> usize {
        let sent = self.out.sent;
        if sent == 0 || self.tx[sent - 1] == 0 {
            return sent;
        }
        self.tx[sent..self.out.len]
            .iter()
            .position(|&b| b == 0)
            .map_or(self.out.len, |i| sent + i + 1)
    }

    /// Encodes `m` (tracked with `id`) into the transmit buffer.
    fn put(&mut self, m: &Message<'_>, id: Option<Id>) -> Offer {
        let len = self.out.len;
        let lagged = m.lagged.min(u64::from(u32::MAX)) as u32;
        let encoded = match id {
            None => frame::encode(m.topic, m.payload, &mut self.tx[len..]),
            Some(id) => {
                let prev = self.flight.last;
                frame::encode_tracked(m.topic, m.payload, id, prev, &mut self.tx[len..])
            }
        };
        match encoded {
            Ok(n) => {
                bump(&self.counters.lagged, lagged);
                if m.urgent {
                    // Ahead of the normal frames not yet started.
                    let lo = self.out.urgent_end.max(self.first_unstarted()).min(len);
                    rotate_right(&mut self.tx[lo..len + n], n);
                    self.out.urgent_end = lo + n;
                }
                self.out.len += n;
                Offer::Accepted
            }
            // Full: send what is there first.
            Err(_) if len > 0 => Offer::Busy,
            Err(_) => {
                bump(&self.counters.lagged, lagged);
                bump(&self.counters.dropped, 1);
                Offer::TooLarge
            }
        }
    }

    /// When the heartbeat next needs the engine polled.
    fn heartbeat_at(&self) -> Option<Instant> {
        let c = &self.conn;
        let hb = self.heartbeat.filter(|_| c.beating && c.ended.is_none())?;
        // Silent for longer than the timeout: a microsecond past it.
        let silent = after(
            after(c.heard_at, hb.timeout),
            core::time::Duration::from_micros(1),
        );
        let idle = self.out.len == 0 && !self.out.resync;
        let due = if idle {
            silent.min(after(c.wrote_at, hb.interval))
        } else {
            silent
        };
        Some(match self.flight.len {
            0 => due,
            _ => due.min(after(
                after(self.flight.moved_at, hb.timeout),
                core::time::Duration::from_micros(1),
            )),
        })
    }

    fn end_with(&mut self, e: Error) {
        if self.conn.ended.is_none() {
            match e {
                Error::PeerSilent => bump(&self.counters.peer_silent, 1),
                Error::Unacknowledged => bump(&self.counters.unacknowledged, 1),
                _ => {}
            }
            self.conn.ended = Some(e);
        }
    }

    /// A frame arrived; `peer_seq` if it was a keep-alive.
    fn heard(&mut self, peer_seq: Option<u64>) {
        if peer_seq.is_some() {
            self.conn.peer = peer_seq;
        }
        self.conn.online = true;
    }

    fn frame_error(&self, e: FrameError) {
        let c = &self.counters;
        bump(
            match e {
                FrameError::Oversized => &c.oversized,
                FrameError::Cobs => &c.cobs_errors,
                _ => &c.malformed,
            },
            1,
        );
    }
}

impl<const RX: usize, const TX: usize> crate::engine::Engine for Engine<'_, RX, TX> {
    type End = Error;
    const NAME: &'static str = "framed";

    fn open(&mut self, now: Instant) {
        let own = self.next_seq;
        self.next_seq = own.wrapping_add(1);
        let beating = self.timed && self.heartbeat.is_some();
        if self.fresh {
            self.decoder.reset();
        }
        self.resume();
        self.out.urgent_end = self.out.len;
        // Acknowledgements of the last connection may be lost: what was in
        // flight is offered again, from the backlog and in order, so the
        // copies kept in the transmit buffer go (they would arrive ahead of
        // older values offered again, and an acknowledgement, cumulative,
        // would cover those before they arrived).
        if self.flight.len > 0 {
            self.flight.len = 0;
            self.flight.lost = true;
            self.drop_tracked();
        }
        self.flight.last = None;
        self.owed = Owed::NONE;
        if beating {
            // The hello: the peer learns our sequence at once.
            self.queue_keepalive(own);
        }
        self.conn = Conn {
            opened: true,
            own,
            peer: None,
            // Without a heartbeat there is nothing to wait for.
            online: !beating,
            beating,
            heard_at: now,
            wrote_at: now,
            ended: None,
        };
    }

    fn io(&mut self) -> Io<'_> {
        if self.conn.ended.is_some() {
            return Io {
                rx: &mut [],
                tx: &[],
            };
        }
        let out = &self.out;
        let tx: &[u8] = if out.resync {
            DELIMITER
        } else {
            &self.tx[out.sent..out.len]
        };
        Io {
            rx: &mut self.chunk,
            tx,
        }
    }

    fn received<S: FrameSink + ?Sized>(&mut self, n: usize, now: Instant, sink: &mut S) {
        if self.conn.ended.is_some() {
            return;
        }
        let n = n.min(READ_CHUNK);
        bump(&self.counters.bytes_in, n as u32);
        self.conn.heard_at = now;
        let mut at = 0;
        let mut tracked = false;
        while at < n {
            // The decoder borrows the frame out of itself: copy what the
            // event says, then act.
            let (used, what) = match self.decoder.push(&self.chunk[at..n]) {
                Event::NeedMore => break,
                Event::Frame(f, used) if f.topic.is_empty() => match f.tracked() {
                    None => (used, Got::Keepalive(keepalive_seq(f.payload))),
                    Some(t) if f.payload.is_empty() => (used, Got::Ack(t.id)),
                    Some(_) => (used, Got::Bad(FrameError::Malformed)),
                },
                // A tracked frame whose predecessor is not the last one
                // taken: one went missing (a peer restarted behind a
                // stream that stayed open, bytes lost on a UART). Taking
                // it would have the cumulative acknowledgement cover the
                // missing one; the sender offers both again when no
                // acknowledgement comes.
                Event::Frame(f, used)
                    if f.tracked()
                        .is_some_and(|t| t.prev.is_some_and(|p| Some(p) != self.owed.taken)) =>
                {
                    (used, Got::OutOfStep)
                }
                Event::Frame(f, used) => {
                    bump(&self.counters.received, 1);
                    let id = f.tracked().map(|t| t.id);
                    let hold = self.hold.zip(id);
                    if let Some((hold, id)) = hold {
                        hold.taking(f.topic, id);
                    }
                    let ok = sink.dispatch(f.topic, f.payload).is_ok();
                    if let Some((hold, id)) = hold {
                        hold.took(id, ok);
                    }
                    if id.is_some() {
                        self.owed.taken = id;
                    }
                    (
                        used,
                        Got::Frame {
                            ok,
                            tracked: id.is_some(),
                        },
                    )
                }
                Event::Error(e, used) => (used, Got::Bad(e)),
            };
            at += used;
            match what {
                Got::Keepalive(Some(seq)) => {
                    bump(&self.counters.heartbeats_received, 1);
                    self.heard(Some(seq));
                }
                Got::Keepalive(None) => {
                    self.frame_error(FrameError::Malformed);
                    self.heard(None);
                }
                Got::Frame { ok, tracked: t } => {
                    if !ok {
                        bump(&self.counters.rejected, 1);
                    }
                    self.heard(None);
                    tracked |= t;
                }
                Got::Ack(id) => {
                    self.acked(id, now);
                    self.heard(None);
                }
                Got::Bad(e) => self.frame_error(e),
                Got::OutOfStep => {
                    bump(&self.counters.out_of_step, 1);
                    self.heard(None);
                }
            }
        }
        if tracked || self.owed.check_at.is_some() {
            self.settle(now);
        }
    }

    fn transmitted(&mut self, n: usize, now: Instant) {
        let out = &mut self.out;
        if n == 0 || self.conn.ended.is_some() {
            return;
        }
        self.conn.wrote_at = now;
        if out.resync {
            out.resync = false;
            bump(&self.counters.bytes_out, 1);
            return;
        }
        let n = n.min(out.len - out.sent);
        // Each frame whose delimiter went out counts; the keep-alive's
        // apart.
        let (mut frames, mut keepalives) = (0u32, 0u32);
        for i in out.sent..out.sent + n {
            if self.tx[i] == 0 {
                if out.keepalive.is_some_and(|(_, b)| b == i + 1) {
                    keepalives += 1;
                } else {
                    frames += 1;
                }
            }
        }
        out.sent += n;
        bump(&self.counters.bytes_out, n as u32);
        bump(&self.counters.sent, frames);
        bump(&self.counters.heartbeats_sent, keepalives);
        if out.keepalive.is_some_and(|(_, b)| b <= out.sent) {
            out.keepalive = None;
        }
        if out.sent == out.len {
            *out = Outbox::default();
        }
        // An acknowledgement that found no room has some now.
        if self.owed.taken != self.owed.queued {
            self.settle(now);
        }
    }

    fn accepting(&self) -> bool {
        self.conn.opened && self.conn.ended.is_none()
    }

    fn has_output(&self) -> bool {
        self.out.resync || self.out.sent < self.out.len
    }

    fn offer(&mut self, m: &Message<'_>, _now: Instant) -> Offer {
        self.put(m, None)
    }

    const TRACKS: bool = true;

    fn offer_tracked(&mut self, m: &Message<'_>, id: Id, now: Instant) -> Offer {
        let f = &self.flight;
        if f.len as usize == IN_FLIGHT {
            return Offer::Busy;
        }
        let offer = self.put(m, Some(id));
        if offer == Offer::Accepted {
            let f = &mut self.flight;
            f.ids[(f.head as usize + f.len as usize) % IN_FLIGHT] = id;
            if f.len == 0 {
                f.moved_at = now;
            }
            f.len += 1;
            f.last = Some(id);
        }
        offer
    }

    fn delivered(&mut self) -> Delivery {
        let f = &mut self.flight;
        let d = Delivery {
            acked: f.acked,
            lost: f.lost,
        };
        (f.acked, f.lost) = (0, false);
        d
    }

    fn poll_at(&self) -> Option<Instant> {
        let hb = self.heartbeat_at();
        match (hb, self.owed.check_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn poll(&mut self, now: Instant) {
        if self.owed.check_at.is_some_and(|t| now >= t) {
            self.settle(now);
        }
        let Some(due) = self.heartbeat_at() else {
            return;
        };
        if now < due {
            return;
        }
        let Some(hb) = self.heartbeat else { return };
        if now > after(self.conn.heard_at, hb.timeout) {
            self.end_with(Error::PeerSilent);
        } else if self.flight.len > 0 && now > after(self.flight.moved_at, hb.timeout) {
            // Heard, but not acknowledged: what is in flight was lost on
            // the way (a peer that restarted behind a UART, which never
            // closes). A new connection offers it again.
            self.end_with(Error::Unacknowledged);
        } else if self.out.len == 0 && now >= after(self.conn.wrote_at, hb.interval) {
            self.queue_keepalive(self.conn.own);
        }
    }

    fn end(&mut self, why: IoEnd) {
        self.end_with(match why {
            IoEnd::Closed => Error::Closed,
            IoEnd::Read(k) => Error::Read(k),
            IoEnd::Write(k) => Error::Write(k),
        });
    }

    fn ended(&self) -> Option<Error> {
        self.conn.ended
    }

    fn online(&self) -> Option<u64> {
        let c = &self.conn;
        (c.online && c.ended.is_none()).then(|| c.peer.unwrap_or(c.own))
    }

    fn link_seq(&self) -> Option<u64> {
        let c = &self.conn;
        c.opened.then(|| c.peer.unwrap_or(c.own))
    }

    fn cause(end: Error) -> Cause {
        end.cause()
    }

    fn failed(&mut self, _why: Failure<Error>) {
        bump(&self.counters.connect_failures, 1);
    }

    fn came_up(&mut self, again: bool) {
        if again {
            bump(&self.counters.reconnects, 1);
        }
    }

    fn went_down(&mut self, _why: Option<Error>) {}
}

/// What a decoder event was, once the frame's borrow has ended.
enum Got {
    Keepalive(Option<u64>),
    /// A frame the sink took (`ok`) or refused, `tracked` if it carried
    /// an id.
    Frame {
        ok: bool,
        tracked: bool,
    },
    /// An acknowledgement.
    Ack(Id),
    /// A tracked frame not taken: the one before it did not arrive.
    OutOfStep,
    Bad(FrameError),
}

/// Encodes a keep-alive: an empty topic, the postcard varint of `seq`.
fn encode_keepalive(seq: u64, out: &mut [u8]) -> Result<usize, frame::EncodeError> {
    let mut var = [0u8; 10];
    let mut n = seq;
    let mut len = 0;
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            var[len] = byte;
            len += 1;
            break;
        }
        var[len] = byte | 0x80;
        len += 1;
    }
    frame::encode("", &var[..len], out)
}

/// `t + d`: out of line, as the heartbeat's deadlines take it in several
/// places (each a multiplication and a division inline).
#[inline(never)]
fn after(t: Instant, d: core::time::Duration) -> Instant {
    t + d
}

/// The sequence in a keep-alive's payload (`None` if it holds none).
fn keepalive_seq(payload: &[u8]) -> Option<u64> {
    match postcard::take_from_bytes::<u64>(payload) {
        Ok((seq, [])) => Some(seq),
        _ => None,
    }
}

/// Index just past the last delimiter in `bytes` (0 if there is none).
fn last_delimiter(bytes: &[u8]) -> usize {
    bytes.iter().rposition(|&b| b == 0).map_or(0, |i| i + 1)
}

/// `bytes.rotate_right(n)` in three reversals through one small
/// out-of-line loop: a fraction of the flash of `slice::rotate_right` or of
/// three inlined `reverse`s, which matters on a device; a batch is at most
/// `TX` bytes.
#[inline(never)]
fn rotate_right(bytes: &mut [u8], n: usize) {
    fn flip(b: &mut [u8]) {
        let len = b.len();
        for i in 0..len / 2 {
            b.swap(i, len - 1 - i);
        }
    }
    flip(bytes);
    let (front, back) = bytes.split_at_mut(n.min(bytes.len()));
    flip(front);
    flip(back);
}

#[cfg(test)]
mod tests;
