//! The MQTT 5 client as an [engine](crate::engine): the session over the
//! caller's two slices, with no I/O and no clock.
//!
//! - **RX** holds inbound bytes; a PUBLISH is dispatched in place (topic
//!   and payload borrowed from it). CONNECT announces RX's length as the
//!   maximum packet size, so a broker never sends more than fits. While
//!   the CONNECT waits to be written it is built in RX (idle until the
//!   CONNACK), since what a resumable session keeps in flight may fill TX.
//! - **TX** is the outbox ([`outbox`](super::outbox)): every packet to send
//!   and each QoS 1/2 PUBLISH until acknowledged, in send order.
//! - Acknowledgements, PINGREQ and DISCONNECT go through a 32-byte control
//!   queue, written ahead of the outbox between its packets.
//!
//! A connection goes through its phases in [`Engine::received`]: the
//! CONNACK; the birth (presence) acknowledged; one SUBSCRIBE per filter of
//! the sink, each waiting for its SUBACK (not on a resumed session); then
//! up. Every step is a plain function call, which is how the fuzz target
//! drives it.

use core::time::Duration;

use aimdb_core::codec::Encode;
use aimdb_core::connector::{FrameSink, Message, QoS};
use aimdb_core::presence::{self, LinkState, PresenceJson, PRESENCE_MAX};
use aimdb_core::topic::MAX_TOPIC_LEN;

use super::counters::Counters;
use super::outbox::{Outbox, AWAIT_PUBACK, AWAIT_PUBREC, HEAD, ONCE};
use super::packet::{
    packet_len, Writer, CONNECT, DISCONNECT, PINGREQ, PUBLISH, SUBSCRIBE, VARINT_MAX,
};
use super::tracked::{self, Tracked};
use super::{Cause, Presence};
use crate::clock::Instant;
use crate::engine::{Delivery, Failure, Id, Io, IoEnd, Offer};
use aimdb_core::counters::bump;

/// Inbound QoS 2 publishes we have PUBREC'd and await PUBREL for, at most:
/// CONNECT announces it as our receive maximum.
pub(super) const RX_MAX: usize = 16;

/// How long a PINGREQ may go unanswered.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// Control packets (4 bytes at most each) queued for writing.
const CTRL: usize = 32;

/// Length of the will payload: the longest offline presence payload with
/// cause `lost`, padded with spaces. Fixed, so a will's bytes do not
/// depend on the sequence's digits.
pub(super) const WILL_LEN: usize = 64;

/// What the engine is built with (from the connector's `Config`).
#[derive(Clone, Copy)]
pub(super) struct Settings<'a> {
    pub client_id: &'a str,
    pub credentials: Option<(&'a str, &'a [u8])>,
    /// Seconds; 0: none.
    pub keep_alive: u16,
    /// Seconds; 0: the session ends with the connection.
    pub session_expiry: u32,
    pub presence: Option<Presence<'a>>,
    /// QoS 1/2 publishes unacknowledged at most (1 ..= 65,534).
    pub max_in_flight: u16,
    pub subscribe_qos: QoS,
    pub ack_timeout: Option<Duration>,
    /// Open a fresh first session once more with Clean Start = 0 (see
    /// [`Engine::new`]).
    pub reopen: bool,
}

/// Where a connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// CONNECT queued or sent; waiting for the CONNACK.
    Connecting,
    /// The birth is queued (or waits for room) and must be acknowledged.
    Birth { queued: bool },
    /// A SUBSCRIBE is out; its SUBACK is awaited.
    Subscribing,
    /// Serving.
    Up,
    /// Stopping: the goodbye presence, then quiescence, then DISCONNECT.
    Bye { queued: bool },
    /// DISCONNECT queued; the connection ends once it is written.
    Leaving,
    /// The goodbye is written (or the connection ended).
    Done,
}

/// What [`Engine::io`](crate::engine::Engine::io) lent for writing last,
/// so `transmitted` knows what went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lent {
    Nothing,
    Connect,
    Ctrl,
    Packet,
}

/// The state of one connection.
pub(super) struct Conn {
    pub(super) lent: Lent,
    pub(super) phase: Phase,
    /// Unprocessed inbound bytes: `rx[start..filled]`.
    pub(super) start: usize,
    pub(super) filled: usize,
    /// The CONNECT waiting in RX: `rx[sent..len]`.
    pub(super) connect: (usize, usize),
    /// Control packets to write: `ctrl[sent..len]`.
    pub(super) ctrl: [u8; CTRL],
    pub(super) ctrl_len: usize,
    pub(super) ctrl_sent: usize,
    /// In flight at most: ours and the broker's receive maximum.
    pub(super) window: u16,
    /// The broker's maximum QoS, maximum packet size, retain support.
    pub(super) max_qos: u8,
    pub(super) max_packet: usize,
    pub(super) retain_ok: bool,
    /// Keep-alive: each `tick` (half the interval apart), a PINGREQ goes
    /// out unless something was written since the last one.
    pub(super) keep_alive: Option<Duration>,
    pub(super) tick: Instant,
    pub(super) wrote: bool,
    pub(super) ping_due: Option<Instant>,
    /// The SUBSCRIBE awaiting its SUBACK, and where the sink's filters
    /// continue.
    pub(super) suback: Option<u16>,
    pub(super) filters_from: usize,
    pub(super) resumed: bool,
    /// Since when acknowledgements are owed with nothing heard.
    pub(super) owed_since: Option<Instant>,
    pub(super) ended: Option<Cause>,
    /// This connection came up (and so reports `offline` when it ends).
    pub(super) was_up: bool,
    /// This connection ends to open again at once.
    pub(super) reopen: bool,
    /// Complete packets wait in RX for room in the control queue.
    pub(super) stalled: bool,
    /// The CONNECT waits in TX (RX was too short for it): nothing is read
    /// before it is out, so no answer can move the session ahead of it.
    pub(super) connect_in_tx: bool,
    /// This connection's birth sequence.
    pub(super) birth: u64,
}

impl Conn {
    const fn new() -> Self {
        Self {
            lent: Lent::Nothing,
            phase: Phase::Done,
            start: 0,
            filled: 0,
            connect: (0, 0),
            ctrl: [0; CTRL],
            ctrl_len: 0,
            ctrl_sent: 0,
            window: 0,
            max_qos: 2,
            max_packet: VARINT_MAX + 5,
            retain_ok: true,
            keep_alive: None,
            tick: Instant::MAX,
            wrote: false,
            ping_due: None,
            suback: None,
            filters_from: 0,
            resumed: false,
            owed_since: None,
            ended: None,
            was_up: false,
            reopen: false,
            stalled: false,
            connect_in_tx: false,
            birth: 0,
        }
    }
}

/// Why a publish was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PubError {
    /// The window or TX is full of what is in flight: wait for acks.
    Busy,
    /// Larger than TX holds or the broker accepts.
    TooLarge,
}

/// The MQTT 5 session as a state machine: see the module docs.
///
/// Built by [`Mqtt::new`](super::Mqtt::new) and driven by its runner; on
/// its own, [`Engine::new`] takes the connector's [`Config`](super::Config)
/// and the two slices.
pub struct Engine<'a> {
    pub(super) rx: &'a mut [u8],
    pub(super) out: Outbox<'a>,
    pub(super) settings: Settings<'a>,
    pub(super) counters: &'a Counters,
    /// Inbound QoS 2 packet identifiers awaiting PUBREL.
    pub(super) rx_qos2: heapless::Vec<u16, RX_MAX>,
    /// A connection succeeded with a session expiry: the next CONNECT asks
    /// to resume (Clean Start = 0).
    pub(super) resumable: bool,
    /// The birth sequence of the last connection that came up.
    pub(super) seq: u64,
    pub(super) c: Conn,
    /// Publishes a durable backlog waits to see acknowledged (last: the
    /// hot fields keep the short offsets a Cortex-M0 loads with).
    pub(super) tracked: Tracked,
}

impl<'a> Engine<'a> {
    pub(super) fn with_settings(
        settings: Settings<'a>,
        rx: &'a mut [u8],
        tx: &'a mut [u8],
        counters: &'a Counters,
    ) -> Self {
        let seq = settings.presence.map_or(0, |p| p.first_seq.wrapping_sub(1));
        Self {
            rx,
            out: Outbox::new(tx),
            settings,
            counters,
            rx_qos2: heapless::Vec::new(),
            resumable: false,
            seq,
            c: Conn::new(),
            tracked: Tracked::new(),
        }
    }

    /// The birth sequence of the coming connection.
    fn next(&self) -> u64 {
        self.seq.wrapping_add(1)
    }

    /// Ends the connection with `cause` (the first cause stays).
    pub(super) fn fail(&mut self, cause: Cause) {
        if self.c.ended.is_none() {
            self.c.ended = Some(cause);
        }
    }

    /// Queues a 4-byte control packet (`first`, packet id); `false` if
    /// the queue is full.
    pub(super) fn queue(&mut self, first: u8, id: u16) -> bool {
        let [hi, lo] = id.to_be_bytes();
        self.queue_bytes(&[first, 2, hi, lo])
    }

    fn queue_bytes(&mut self, bytes: &[u8]) -> bool {
        let c = &mut self.c;
        if c.ctrl_sent > 0 && c.ctrl_len + bytes.len() > CTRL {
            // Between writes: what is left moves to the front.
            c.ctrl.copy_within(c.ctrl_sent..c.ctrl_len, 0);
            c.ctrl_len -= c.ctrl_sent;
            c.ctrl_sent = 0;
        }
        let at = c.ctrl_len;
        match c.ctrl.get_mut(at..at + bytes.len()) {
            Some(slot) => {
                slot.copy_from_slice(bytes);
                c.ctrl_len += bytes.len();
                true
            }
            None => false,
        }
    }

    /// Queues one PUBLISH in TX. QoS 1/2: kept until acknowledged. A QoS
    /// above the broker's maximum goes at its maximum; a retain flag the
    /// broker does not support is dropped.
    #[inline(always)]
    pub(super) fn publish(
        &mut self,
        topic: &str,
        payload: &[u8],
        qos: QoS,
        retain: bool,
    ) -> Result<(), PubError> {
        self.publish_with(topic, payload, qos, retain, &[])
    }

    /// [`Self::publish`] with `props` as the PUBLISH's properties
    /// (fewer than 128 bytes).
    fn publish_with(
        &mut self,
        topic: &str,
        payload: &[u8],
        qos: QoS,
        retain: bool,
        props: &[u8],
    ) -> Result<(), PubError> {
        let q = (qos as u8).min(self.c.max_qos);
        if q > 0 && self.out.in_flight >= self.c.window {
            return Err(PubError::Busy);
        }
        let remaining =
            2 + topic.len() + if q > 0 { 2 } else { 0 } + 1 + props.len() + payload.len();
        let len = packet_len(remaining);
        if topic.len() > usize::from(u16::MAX) || remaining > VARINT_MAX || len > self.c.max_packet
        {
            return Err(PubError::TooLarge);
        }
        let busy = self.out.tail > 0;
        let id = if q > 0 { self.out.next_id() } else { 0 };
        let retain = retain && self.c.retain_ok;
        let Some(record) = self.out.scratch(HEAD + len).get_mut(..HEAD + len) else {
            // Room comes back as packets go out and acknowledgements come.
            return Err(if busy {
                PubError::Busy
            } else {
                PubError::TooLarge
            });
        };
        let mut w = Writer::new(&mut record[HEAD..]);
        // Fits: `len` was checked against the slice.
        let _ = (|| {
            w.header(PUBLISH << 4 | q << 1 | u8::from(retain), remaining)?;
            w.binary(topic.as_bytes())?;
            if q > 0 {
                w.u16(id)?;
            }
            w.u8(props.len() as u8)?;
            w.bytes(props)?;
            w.bytes(payload)
        })();
        let state = match q {
            0 => ONCE,
            1 => AWAIT_PUBACK,
            _ => AWAIT_PUBREC,
        };
        if q > 0 {
            self.out.take_id();
        }
        self.out.push(state, id, len);
        if q > 0 {
            self.counters.admit();
        }
        Ok(())
    }

    /// Queues the presence `state` (retained, at the presence QoS).
    /// `Ok(false)`: no room yet.
    fn announce(&mut self, state: LinkState) -> Result<bool, Cause> {
        let Some(p) = self.settings.presence else {
            return Ok(true);
        };
        let mut buf = [0u8; PRESENCE_MAX];
        // PRESENCE_MAX holds every presence payload.
        let n = PresenceJson.encode(&state, &mut buf).unwrap_or(0);
        match self.publish(p.topic, &buf[..n], p.qos, true) {
            Ok(()) => Ok(true),
            Err(PubError::Busy) => Ok(false),
            // TX cannot hold a presence publish.
            Err(PubError::TooLarge) => Err(Cause::Protocol),
        }
    }

    /// Whether the control queue has room for one more acknowledgement.
    pub(super) fn ctrl_room(&self) -> bool {
        CTRL - (self.c.ctrl_len - self.c.ctrl_sent) >= 4
    }

    /// Moves the connection on after inbound progress: the birth, the
    /// subscriptions, the goodbye.
    #[inline(always)]
    pub(super) fn advance<S: FrameSink + ?Sized>(&mut self, sink: &mut S) {
        if self.c.phase == Phase::Up && self.c.was_up {
            // Serving: no step waits.
            return;
        }
        self.steps(sink);
    }

    /// The steps of [`Self::advance`] until the phase stays.
    fn steps<S: FrameSink + ?Sized>(&mut self, sink: &mut S) {
        loop {
            let before = self.c.phase;
            if let Err(cause) = self.step(sink) {
                self.fail(cause);
                return;
            }
            if self.c.phase == Phase::Up && !self.c.was_up {
                self.c.was_up = true;
                self.seq = self.c.birth;
            }
            if self.c.phase == before || self.c.ended.is_some() {
                return;
            }
        }
    }

    /// One phase step; the phase changes when it is done.
    fn step<S: FrameSink + ?Sized>(&mut self, sink: &mut S) -> Result<(), Cause> {
        let quiet = self.out.in_flight == 0;
        match self.c.phase {
            Phase::Birth { queued: false } => {
                let birth = LinkState::online(self.c.birth);
                self.announce_then(birth, Phase::Birth { queued: true })?;
            }
            Phase::Birth { queued: true } if quiet => {
                self.c.phase = if self.c.resumed {
                    Phase::Up
                } else {
                    self.c.filters_from = 0;
                    Phase::Subscribing
                };
                if self.c.phase == Phase::Subscribing {
                    self.subscribe_next(sink)?;
                }
            }
            Phase::Subscribing if self.c.suback.is_none() => self.subscribe_next(sink)?,
            Phase::Bye { queued: false } => {
                let bye = LinkState::offline(self.c.birth, presence::Cause::Stopped);
                self.announce_then(bye, Phase::Bye { queued: true })?;
            }
            Phase::Bye { queued: true } if quiet => self.leave_when_idle(),
            _ => {}
        }
        Ok(())
    }

    /// Queues the presence `state`, and once it is queued moves to
    /// `next`.
    fn announce_then(&mut self, state: LinkState, next: Phase) -> Result<(), Cause> {
        if self.announce(state)? {
            self.c.phase = next;
        }
        Ok(())
    }

    /// Queues the DISCONNECT once everything queued before it went out.
    fn leave_when_idle(&mut self) {
        if self.out_idle() {
            self.leave();
        }
    }

    /// Queues the DISCONNECT: the connection ends once it is written.
    fn leave(&mut self) {
        if self.queue_bytes(&[DISCONNECT << 4, 0]) {
            self.c.phase = Phase::Leaving;
        }
    }

    /// Sends the SUBSCRIBE for the sink's next filter, or moves on when
    /// there is none left.
    fn subscribe_next<S: FrameSink + ?Sized>(&mut self, sink: &mut S) -> Result<(), Cause> {
        // Subscription options: the maximum QoS, and for filters none of
        // whose links applies retained messages (commands) retain
        // handling 2: the broker is asked not to send them; one that sends
        // them anyway is ignored by `dispatch_retained`.
        let options = self.settings.subscribe_qos as u8;
        loop {
            let mut filter = heapless::String::<MAX_TOPIC_LEN>::new();
            let Some((next, f)) = sink.next_filter(self.c.filters_from) else {
                self.subscribed();
                return Ok(());
            };
            self.c.filters_from = next;
            // Dispatch validated its filters to MAX_TOPIC_LEN.
            if filter.push_str(f).is_err() || filter.is_empty() {
                continue;
            }
            let options = if sink.wants_retained(&filter) {
                options
            } else {
                options | 2 << 4
            };
            return self.subscribe(&filter, options);
        }
    }

    /// Every filter is subscribed: up, or (reopening a fresh first
    /// session) DISCONNECT and connect again.
    fn subscribed(&mut self) {
        if self.c.reopen {
            self.leave();
        } else {
            self.c.phase = Phase::Up;
        }
    }

    /// Queues a SUBSCRIBE for one filter with these options.
    fn subscribe(&mut self, filter: &str, options: u8) -> Result<(), Cause> {
        let id = self.out.take_id();
        let remaining = 2 + 1 + 2 + filter.len() + 1;
        let len = packet_len(remaining);
        let scratch = self.out.scratch(HEAD + len);
        let w = scratch
            .get_mut(HEAD..HEAD + len)
            .ok_or(Cause::Disconnected)?;
        let mut w = Writer::new(w);
        (|| {
            w.header(SUBSCRIBE << 4 | 0x02, remaining)?;
            w.u16(id)?;
            w.u8(0)?;
            w.binary(filter.as_bytes())?;
            w.u8(options)
        })()
        .map_err(|_| Cause::Disconnected)?;
        self.out.push(ONCE, id, len);
        self.c.suback = Some(id);
        Ok(())
    }

    /// Restarts the acknowledgement clock if the broker said something,
    /// starts or stops it as acknowledgements become owed or settled.
    pub(super) fn liveness(&mut self, heard: bool, now: Instant) {
        if self.out.in_flight == 0 {
            self.c.owed_since = None;
        } else if heard || self.c.owed_since.is_none() {
            self.c.owed_since = Some(now);
        }
    }

    /// When the next keep-alive event is due: a tick or the PINGRESP
    /// deadline.
    fn keep_alive_due(&self) -> Option<Instant> {
        match self.c.ping_due {
            Some(due) => Some(due.min(self.c.tick)),
            None => self.c.keep_alive.map(|_| self.c.tick),
        }
    }

    fn keep_alive_tick(&mut self, now: Instant) {
        if self.c.ping_due.is_some_and(|due| now >= due) {
            return self.fail(Cause::Disconnected);
        }
        let Some(interval) = self.c.keep_alive else {
            return;
        };
        if now >= self.c.tick {
            let quiet = !core::mem::take(&mut self.c.wrote);
            if quiet && self.c.ping_due.is_none() && self.queue_bytes(&[PINGREQ << 4, 0]) {
                self.c.ping_due = Some(now + PING_TIMEOUT);
            }
            self.c.tick = now + interval / 2;
        }
    }

    /// The CONNECT for this connection, queued in RX (or in TX when RX is
    /// too short).
    fn queue_connect(&mut self) -> Result<(), Cause> {
        let clean = !self.resumable;
        let will = will_payload(self.c.birth);
        let will: &[u8] = if self.settings.presence.is_some() {
            &will
        } else {
            &[]
        };
        let rx_len = self.rx.len();
        if let Some(len) = encode_connect(&self.settings, clean, rx_len, will, self.rx) {
            self.c.connect = (0, len);
            return Ok(());
        }
        let scratch = self.out.scratch(usize::MAX);
        let len = scratch
            .get_mut(HEAD..)
            .and_then(|b| encode_connect(&self.settings, clean, rx_len, will, b))
            .ok_or(Cause::Disconnected)?;
        self.out.push(ONCE, 0, len);
        self.c.connect_in_tx = true;
        Ok(())
    }
}

/// The will payload of the connection with birth sequence `seq`.
pub(super) fn will_payload(seq: u64) -> [u8; WILL_LEN] {
    let mut out = [b' '; WILL_LEN];
    // 64 bytes hold the longest `lost` payload (45 + 20 digits fit: see
    // the unit test); padding stays spaces.
    let _ = PresenceJson.encode(&LinkState::offline(seq, presence::Cause::Lost), &mut out);
    out
}

/// Encodes CONNECT at the start of `buf`: its length, `None` if it does
/// not fit.
fn encode_connect(
    s: &Settings<'_>,
    clean: bool,
    rx_len: usize,
    will_payload: &[u8],
    buf: &mut [u8],
) -> Option<usize> {
    let expiry = if s.session_expiry > 0 { 5 } else { 0 };
    // Receive maximum, maximum packet size, session expiry.
    let props = 3 + 5 + expiry;
    let mut remaining = 10 + super::packet::varint_len(props) + props + 2 + s.client_id.len();
    let will = s
        .presence
        .map(|p| (p.topic, p.qos, p.will_delay.map(|d| d.0)));
    let will_props = will.map_or(0, |(_, _, d)| if d.is_some() { 5 } else { 0 });
    if let Some((topic, _, _)) = will {
        remaining += super::packet::varint_len(will_props)
            + will_props
            + 2
            + topic.len()
            + 2
            + will_payload.len();
    }
    if let Some((user, password)) = s.credentials {
        remaining += 2 + user.len() + 2 + password.len();
    }
    let len = packet_len(remaining);
    let mut w = Writer::new(buf.get_mut(..len)?);
    let mut flags = u8::from(clean) << 1;
    if let Some((_, qos, _)) = will {
        flags |= 0x04 | (qos as u8) << 3 | 0x20;
    }
    if s.credentials.is_some() {
        flags |= 0xc0;
    }
    (|| {
        w.header(CONNECT << 4, remaining)?;
        w.binary(b"MQTT")?;
        w.u8(5)?;
        w.u8(flags)?;
        w.u16(s.keep_alive)?;
        w.varint(props)?;
        w.u8(0x21)?;
        w.u16(RX_MAX as u16)?;
        w.u8(0x27)?;
        w.u32(u32::try_from(rx_len).unwrap_or(u32::MAX))?;
        if s.session_expiry > 0 {
            w.u8(0x11)?;
            w.u32(s.session_expiry)?;
        }
        w.binary(s.client_id.as_bytes())?;
        if let Some((topic, _, delay)) = will {
            w.varint(will_props)?;
            if let Some(d) = delay {
                w.u8(0x18)?;
                w.u32(d)?;
            }
            w.binary(topic.as_bytes())?;
            w.binary(will_payload)?;
        }
        if let Some((user, password)) = s.credentials {
            w.binary(user.as_bytes())?;
            w.binary(password)?;
        }
        Ok::<(), super::packet::NoRoom>(())
    })()
    .ok()?;
    Some(len)
}

impl crate::engine::Engine for Engine<'_> {
    type End = Cause;
    const NAME: &'static str = "mqtt";

    fn open(&mut self, now: Instant) {
        self.c = Conn::new();
        self.c.phase = Phase::Connecting;
        self.c.birth = self.next();
        self.c.reopen = self.settings.reopen;
        self.c.tick = now;
        if self.tracked.any() {
            self.tracked.forget(&mut self.out);
        }
        self.out.open();
        if let Err(cause) = self.queue_connect() {
            self.fail(cause);
        }
    }

    #[inline(always)]
    fn io(&mut self) -> Io<'_> {
        self.io_buffers()
    }

    fn received<S: FrameSink + ?Sized>(&mut self, n: usize, now: Instant, sink: &mut S) {
        self.receive(n, now, sink);
    }

    fn transmitted(&mut self, n: usize, now: Instant) {
        self.sent(n, now);
    }

    fn accepting(&self) -> bool {
        self.c.phase == Phase::Up && self.c.ended.is_none()
    }

    fn offer(&mut self, m: &Message<'_>, now: Instant) -> Offer {
        match self.publish(m.topic, m.payload, m.qos, m.retain) {
            Ok(()) => {
                bump(&self.counters.sent, 1);
                self.counters.add_lagged(m.lagged);
                self.liveness(false, now);
                Offer::Accepted
            }
            Err(PubError::Busy) => Offer::Busy,
            Err(PubError::TooLarge) => {
                bump(&self.counters.dropped, 1);
                Offer::TooLarge
            }
        }
    }

    const TRACKS: bool = true;

    /// At QoS 1 at least (a backlog waits for the PUBACK), with the
    /// `aimdb-id` user property; busy while 16 tracked publishes are in
    /// flight. A broker whose maximum QoS is 0 acknowledges nothing: the
    /// message counts as delivered once queued.
    fn offer_tracked(&mut self, m: &Message<'_>, id: Id, now: Instant) -> Offer {
        if self.tracked.full() {
            return Offer::Busy;
        }
        let mut prop = [0u8; tracked::PROPERTY_MAX];
        let n = tracked::property(id, &mut prop);
        let qos = if m.qos == QoS::AtMostOnce {
            QoS::AtLeastOnce
        } else {
            m.qos
        };
        let pid = self.out.next_id();
        match self.publish_with(m.topic, m.payload, qos, m.retain, &prop[..n]) {
            Ok(()) => {
                bump(&self.counters.sent, 1);
                self.tracked.push(pid, self.c.max_qos == 0);
                self.liveness(false, now);
                Offer::Accepted
            }
            Err(PubError::Busy) => Offer::Busy,
            Err(PubError::TooLarge) => {
                bump(&self.counters.dropped, 1);
                Offer::TooLarge
            }
        }
    }

    fn delivered(&mut self) -> Delivery {
        self.tracked.take()
    }

    #[inline(always)]
    fn poll_at(&self) -> Option<Instant> {
        if self.c.ended.is_some() || self.c.phase == Phase::Connecting {
            return None;
        }
        let owed = match (self.settings.ack_timeout, self.c.owed_since) {
            (Some(t), Some(since)) => Some(since + t),
            _ => None,
        };
        match (self.keep_alive_due(), owed) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn poll(&mut self, now: Instant) {
        if self.c.ended.is_some() {
            return;
        }
        if let (Some(t), Some(since)) = (self.settings.ack_timeout, self.c.owed_since) {
            if now >= since + t {
                bump(&self.counters.ack_timeouts, 1);
                return self.fail(Cause::AckTimeout);
            }
        }
        self.keep_alive_tick(now);
    }

    fn end(&mut self, why: IoEnd) {
        self.fail(match why {
            IoEnd::Closed => Cause::Disconnected,
            IoEnd::Read(_) | IoEnd::Write(_) => Cause::Transport,
        });
    }

    fn ended(&self) -> Option<Cause> {
        self.c.ended
    }

    fn reopen(&self) -> bool {
        self.c.reopen && self.c.phase == Phase::Done
    }

    fn close(&mut self, _now: Instant) {
        if self.c.phase == Phase::Up {
            self.c.phase = Phase::Bye { queued: false };
            let mut none = NoSink(Default::default());
            self.advance(&mut none);
        } else {
            self.c.phase = Phase::Done;
        }
    }

    fn closed(&self) -> bool {
        self.c.phase == Phase::Done
    }

    fn online(&self) -> Option<u64> {
        (self.c.was_up && self.c.ended.is_none() && self.c.phase != Phase::Done)
            .then_some(self.c.birth)
    }

    fn link_seq(&self) -> Option<u64> {
        self.c.was_up.then_some(self.c.birth)
    }

    fn next_seq(&self) -> Option<u64> {
        Some(self.next())
    }

    fn pending(&self) -> bool {
        let quiet = self.out.in_flight == 0;
        self.c.ended.is_none()
            && (self.c.stalled
                || match self.c.phase {
                    Phase::Birth { queued } | Phase::Bye { queued } => !queued || quiet,
                    _ => false,
                })
    }

    fn cause(end: Cause) -> presence::Cause {
        match end {
            Cause::Transport => presence::Cause::Io,
            Cause::Protocol => presence::Cause::Protocol,
            Cause::AckTimeout => presence::Cause::Silent,
            _ => presence::Cause::Closed,
        }
    }

    fn failed(&mut self, why: Failure<Cause>) {
        let cause = match why {
            Failure::Connect(f) => Cause::Connect(f),
            Failure::Timeout => Cause::ConnectTimeout,
            Failure::Ended(c) => c,
        };
        bump(&self.counters.connect_failures, 1);
        self.counters.set_last_error(cause);
        if crate::log_shim::worth_logging(self.counters.connect_failures()) {
            log_warn!("mqtt: connection attempt failed: {}", cause);
        }
    }

    fn came_up(&mut self, again: bool) {
        if again {
            bump(&self.counters.reconnects, 1);
        }
        self.counters.set_connected(true);
    }

    fn went_down(&mut self, why: Option<Cause>) {
        self.counters.set_connected(false);
        if let Some(cause) = why {
            self.counters.set_last_error(cause);
            log_warn!("mqtt: connection lost: {}", cause);
        }
    }

    fn wrote(&mut self) {
        bump(&self.counters.writes, 1);
    }

    fn has_output(&self) -> bool {
        let c = &self.c;
        c.connect.0 < c.connect.1 || c.ctrl_sent < c.ctrl_len || self.out.has_next()
    }
}

/// A sink with no filters, for steps that never dispatch (the goodbye).
struct NoSink(aimdb_core::connector::InboundStats);

impl FrameSink for NoSink {
    fn dispatch(
        &mut self,
        _topic: &[u8],
        _payload: &[u8],
    ) -> Result<usize, aimdb_core::connector::DispatchError> {
        Err(aimdb_core::connector::DispatchError::UnknownTopic)
    }
    fn next_filter(&self, _from: usize) -> Option<(usize, &str)> {
        None
    }
    fn stats(&self) -> &aimdb_core::connector::InboundStats {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_will_payload_fits_and_is_padded_with_spaces() {
        let p = will_payload(u64::MAX);
        let text = core::str::from_utf8(&p).unwrap();
        let json = r#"{"status":"offline","seq":18446744073709551615,"cause":"lost"}"#;
        assert_eq!(text.trim_end(), json);
        assert!(text[json.len()..].bytes().all(|b| b == b' '));
    }
}
