//! The MQTT engine's I/O side: which bytes go out next, what came in.

use aimdb_core::connector::FrameSink;

use super::engine::{Engine, Lent, Phase};
use super::outbox::{Next, AWAIT_PUBACK, AWAIT_PUBCOMP, AWAIT_PUBREC};
use super::packet::{
    fixed_header, Reader, Value, CONNACK, CONNECT, DISCONNECT, PINGRESP, PUBACK, PUBCOMP, PUBLISH,
    PUBREC, PUBREL, SUBACK,
};
use super::{Cause, Counters};
use crate::clock::Instant;
use crate::engine::Io;
use aimdb_core::counters::bump;

/// A packet body's place in RX: `rx[start..end]`.
type Span = (usize, usize);

impl Engine<'_> {
    /// The buffers for the next read and write: the CONNECT first; then
    /// control packets between packets of the outbox.
    #[inline(always)]
    pub(super) fn io_buffers(&mut self) -> Io<'_> {
        let c = &mut self.c;
        c.lent = Lent::Nothing;
        if c.ended.is_some() || c.phase == Phase::Done {
            return Io {
                rx: &mut [],
                tx: &[],
            };
        }
        if c.connect.0 < c.connect.1 {
            // The CONNECT is in RX: nothing is read before it is out.
            c.lent = Lent::Connect;
            return Io {
                rx: &mut [],
                tx: &self.rx[c.connect.0..c.connect.1],
            };
        }
        // An empty outbox (the usual case between messages) needs no walk.
        let mut next = if self.out.idle() {
            Next::Nothing
        } else {
            self.out.next()
        };
        // A PUBREL owed on a resumed session goes through the control
        // queue.
        while let Next::Pubrel(id) = next {
            if !self.queue(PUBREL << 4 | 0x02, id) {
                break;
            }
            self.out.skip();
            next = self.out.next();
        }
        let c = &mut self.c;
        if c.start > 0 {
            self.rx.copy_within(c.start..c.filled, 0);
            c.filled -= c.start;
            c.start = 0;
        }
        // Nothing more is read while complete packets wait for room in
        // the control queue.
        let rx: &mut [u8] = if c.stalled || c.connect_in_tx {
            &mut []
        } else {
            &mut self.rx[c.filled..]
        };
        let ctrl = c.ctrl_sent < c.ctrl_len;
        let tx: &[u8] = match next {
            Next::Packet(a, b) if self.out.mid_packet() || !ctrl => {
                c.lent = Lent::Packet;
                &self.out.tx[a..b]
            }
            _ if ctrl => {
                c.lent = Lent::Ctrl;
                &c.ctrl[c.ctrl_sent..c.ctrl_len]
            }
            _ => &[],
        };
        Io { rx, tx }
    }

    /// `n` bytes of what [`Self::io_buffers`] lent went out.
    pub(super) fn sent(&mut self, n: usize, _now: Instant) {
        if n == 0 || self.c.ended.is_some() {
            return;
        }
        let c = &mut self.c;
        c.wrote = true;
        match c.lent {
            Lent::Connect => c.connect.0 = (c.connect.0 + n).min(c.connect.1),
            Lent::Ctrl => {
                c.ctrl_sent = (c.ctrl_sent + n).min(c.ctrl_len);
                if c.ctrl_sent == c.ctrl_len {
                    (c.ctrl_sent, c.ctrl_len) = (0, 0);
                    c.lent = Lent::Nothing;
                    if c.phase == Phase::Leaving {
                        // The DISCONNECT, queued last, is out.
                        c.phase = Phase::Done;
                        if c.reopen {
                            c.ended = Some(Cause::Disconnected);
                        }
                    }
                }
            }
            Lent::Packet => {
                if let Some(first) = self.out.sent(n) {
                    self.c.lent = Lent::Nothing;
                    if first >> 4 == CONNECT {
                        self.c.connect_in_tx = false;
                    }
                }
            }
            Lent::Nothing => {}
        }
    }

    /// Whether nothing of the outbox waits to be written.
    pub(super) fn out_idle(&mut self) -> bool {
        matches!(self.out.next(), Next::Nothing)
    }

    /// `n` bytes were read into RX: every complete packet is handled.
    pub(super) fn receive<S: FrameSink + ?Sized>(&mut self, n: usize, now: Instant, sink: &mut S) {
        if self.c.ended.is_some() {
            return;
        }
        let c = &mut self.c;
        c.filled = (c.filled + n).min(self.rx.len());
        self.c.stalled = false;
        while self.c.ended.is_none() {
            // Each packet may owe an acknowledgement (4 bytes).
            if !self.ctrl_room() {
                self.c.stalled = true;
                break;
            }
            match self.next_packet() {
                Ok(Some((first, body))) => {
                    if let Err(cause) = self.handle(first, body, now, sink) {
                        self.fail(cause);
                    }
                    self.advance(sink);
                }
                Ok(None) => break,
                Err(cause) => self.fail(cause),
            }
        }
        // Steps that wait for room or for quiescence, not for a packet.
        self.advance(sink);
        if self.c.start == self.c.filled {
            (self.c.start, self.c.filled) = (0, 0);
        }
        if self.c.filled == self.rx.len() && self.c.start == 0 && !self.c.stalled {
            // A packet that can never fit (the broker ignored our maximum).
            self.fail(Cause::Protocol);
        }
        self.liveness(n > 0, now);
    }

    /// The next complete packet in RX, consumed: its first byte and body.
    fn next_packet(&mut self) -> Result<Option<(u8, Span)>, Cause> {
        let c = &mut self.c;
        let held = &self.rx[c.start..c.filled];
        let Some((first, h, rem)) = fixed_header(held).map_err(|_| Cause::Protocol)? else {
            return Ok(None);
        };
        if h + rem > self.rx.len() {
            return Err(Cause::Protocol);
        }
        if held.len() < h + rem {
            return Ok(None);
        }
        let body = (c.start + h, c.start + h + rem);
        c.start += h + rem;
        Ok(Some((first, body)))
    }

    fn handle<S: FrameSink + ?Sized>(
        &mut self,
        first: u8,
        (a, b): (usize, usize),
        now: Instant,
        sink: &mut S,
    ) -> Result<(), Cause> {
        let flags = first & 0x0f;
        let kind = first >> 4;
        if self.c.phase == Phase::Connecting {
            return self.connack(first, (a, b), now);
        }
        if kind == PUBLISH {
            return self.handle_publish(flags, (a, b), sink);
        }
        let mut r = Reader::new(&self.rx[a..b]);
        let malformed = |_| Cause::Protocol;
        match (kind, flags) {
            (PUBACK | PUBREC | PUBCOMP, 0) | (PUBREL, 2) => {
                let id = r.u16().map_err(malformed)?;
                let reason = if r.is_empty() {
                    0
                } else {
                    r.u8().map_err(malformed)?
                };
                self.handle_ack(kind, id, reason)
            }
            (SUBACK, 0) => {
                let id = r.u16().map_err(malformed)?;
                r.properties().map_err(malformed)?;
                let code = r.u8().map_err(malformed)?;
                if self.c.suback != Some(id) {
                    return Err(Cause::Protocol);
                }
                if code >= 0x80 {
                    // Refused: 0x87 not authorized, 0x8f invalid filter, ...
                    return Err(Cause::Refused(code));
                }
                self.c.suback = None;
                Ok(())
            }
            (PINGRESP, 0) => {
                self.c.ping_due = None;
                Ok(())
            }
            (DISCONNECT, 0) => {
                let rc = if r.is_empty() {
                    0
                } else {
                    r.u8().map_err(malformed)?
                };
                Err(if self.c.was_up {
                    Cause::Rejected(rc)
                } else {
                    Cause::Refused(rc)
                })
            }
            _ => Err(Cause::Protocol),
        }
    }

    /// The CONNACK (or a refusal).
    fn connack(&mut self, first: u8, (a, b): (usize, usize), now: Instant) -> Result<(), Cause> {
        let mut r = Reader::new(&self.rx[a..b]);
        let malformed = |_| Cause::Protocol;
        match first >> 4 {
            CONNACK if first & 0x0f == 0 => {}
            DISCONNECT => return Err(Cause::Refused(r.u8().unwrap_or(0))),
            _ => return Err(Cause::Protocol),
        }
        let flags = r.u8().map_err(malformed)?;
        let reason = r.u8().map_err(malformed)?;
        if reason >= 0x80 {
            return Err(Cause::Refused(reason));
        }
        let mut receive_max = u16::MAX;
        let mut keep_alive = self.settings.keep_alive;
        if !r.is_empty() {
            let mut p = r.properties().map_err(malformed)?;
            while let Some((id, v)) = p.next().map_err(malformed)? {
                let Value::Int(v) = v else { continue };
                match id {
                    0x21 if v == 0 => return Err(Cause::Protocol),
                    0x21 => receive_max = v as u16,
                    0x24 => self.c.max_qos = v as u8,
                    0x25 => self.c.retain_ok = v != 0,
                    0x27 => self.c.max_packet = v as usize,
                    0x13 => keep_alive = v as u16,
                    _ => {}
                }
            }
        }
        let clean = !self.resumable;
        let c = &mut self.c;
        c.window = self.settings.max_in_flight.min(receive_max);
        c.keep_alive = (keep_alive > 0).then(|| core::time::Duration::from_secs(keep_alive.into()));
        c.tick = match c.keep_alive {
            Some(interval) => now + interval / 2,
            None => Instant::MAX,
        };
        c.resumed = flags & 1 != 0 && !clean;
        c.reopen = self.settings.reopen && !c.resumed;
        self.settings.reopen = false;
        self.resumable = self.settings.session_expiry > 0;
        self.out.connack(self.c.resumed);
        if !self.c.resumed {
            self.rx_qos2.clear();
        }
        self.counters.set_in_flight(self.out.in_flight);
        self.c.phase = if self.settings.presence.is_some() && !self.c.reopen {
            Phase::Birth { queued: false }
        } else if self.c.resumed {
            Phase::Up
        } else {
            self.c.filters_from = 0;
            Phase::Subscribing
        };
        Ok(())
    }

    /// Out of line: acknowledgements are rarer than publishes, whose
    /// path stays short.
    #[inline(never)]
    fn handle_ack(&mut self, kind: u8, id: u16, reason: u8) -> Result<(), Cause> {
        let out = &mut self.out;
        match kind {
            PUBACK => {
                out.release(out.find(id, AWAIT_PUBACK).ok_or(Cause::Protocol)?);
                self.tracked.ack(id);
                self.counters.ack();
            }
            PUBREC => {
                if let Some(at) = out.find(id, AWAIT_PUBREC) {
                    if reason >= 0x80 {
                        // The broker refused it: the exchange ends here.
                        out.release(at);
                        self.tracked.ack(id);
                        self.counters.ack();
                        return Ok(());
                    }
                    out.tx[at] = AWAIT_PUBCOMP;
                } else if out.find(id, AWAIT_PUBCOMP).is_none() {
                    return Err(Cause::Protocol);
                }
                self.queue(PUBREL << 4 | 0x02, id);
            }
            PUBCOMP => {
                out.release(out.find(id, AWAIT_PUBCOMP).ok_or(Cause::Protocol)?);
                self.tracked.ack(id);
                self.counters.ack();
            }
            // PUBREL: the inbound QoS 2 exchange ends (and is answered even
            // if unknown: it may be a resend after our PUBCOMP was lost).
            _ => {
                if let Some(i) = self.rx_qos2.iter().position(|&x| x == id) {
                    self.rx_qos2.swap_remove(i);
                }
                self.queue(PUBCOMP << 4, id);
            }
        }
        Ok(())
    }

    fn handle_publish<S: FrameSink + ?Sized>(
        &mut self,
        flags: u8,
        (a, b): (usize, usize),
        sink: &mut S,
    ) -> Result<(), Cause> {
        let qos = (flags >> 1) & 3;
        let malformed = |_| Cause::Protocol;
        let mut r = Reader::new(&self.rx[a..b]);
        let topic_len = usize::from(r.u16().map_err(malformed)?);
        let topic = r.take(topic_len).map_err(malformed)?;
        // Topic aliases are not announced, so a topic is never empty.
        if topic.is_empty() || core::str::from_utf8(topic).is_err() {
            return Err(Cause::Protocol);
        }
        let id = if qos > 0 {
            r.u16().map_err(malformed)?
        } else {
            0
        };
        r.properties().map_err(malformed)?;
        let payload_len = r.rest().len();
        let deliver = match qos {
            0 => true,
            1 => {
                self.queue(PUBACK << 4, id);
                true
            }
            2 => {
                let rx = &mut self.rx_qos2;
                let new = !rx.contains(&id);
                if new && rx.push(id).is_err() {
                    // More than the receive maximum we announced.
                    return Err(Cause::Protocol);
                }
                self.queue(PUBREC << 4, id);
                new
            }
            _ => return Err(Cause::Protocol),
        };
        if deliver {
            let topic = &self.rx[a + 2..a + 2 + topic_len];
            let payload = &self.rx[b - payload_len..b];
            dispatch(sink, self.counters, topic, payload, flags & 1 != 0);
        }
        Ok(())
    }
}

/// Hands one received publish to the sink, counted.
fn dispatch<S: FrameSink + ?Sized>(
    sink: &mut S,
    counters: &Counters,
    topic: &[u8],
    payload: &[u8],
    retained: bool,
) {
    bump(&counters.received, 1);
    // An empty payload is how MQTT clears a retained message (subscribers
    // get it, retained or not): not a value, and not a bad one.
    if payload.is_empty() {
        bump(&counters.cleared, 1);
        return;
    }
    let r = if retained {
        sink.dispatch_retained(topic, payload)
    } else {
        sink.dispatch(topic, payload)
    };
    if let Err(e) = r {
        bump(&counters.rejected, 1);
        let n = counters.rejected();
        if crate::log_shim::worth_logging(n) {
            log_warn!(
                "mqtt: rejected a message on {}: {} ({} so far)",
                core::str::from_utf8(topic).unwrap_or("?"),
                e.as_str(),
                n
            );
        }
    }
}
