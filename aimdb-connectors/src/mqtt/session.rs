//! The MQTT 5 client session, in the caller's two slices and a few dozen
//! bytes of its own: no heap, no table sized at compile time.
//!
//! - **RX** holds inbound bytes; a PUBLISH is handed out in place (topic
//!   and payload borrowed from it). CONNECT announces its length as the
//!   maximum packet size, so a broker never sends more than fits.
//! - **TX** holds, in send order, each QoS 1/2 PUBLISH until it is
//!   acknowledged (a 3-byte record head: state and packet identifier, then
//!   the packet as sent, so a resumed session re-sends it byte for byte
//!   with DUP set), and after them the packet being encoded. How many are
//!   in flight is bounded by [`Settings::max_in_flight`] and the broker's
//!   receive maximum, how many bytes by the slice.
//! - Acknowledgements, PINGREQ and the QoS 2 handshake go through a
//!   32-byte control queue written before anything else and before any
//!   read, with a cursor, so [`Connection::poll`] may be dropped at any
//!   await without splitting a packet on the wire.
//!
//! Packet identifiers are handed out in order and records are kept in send
//! order, so the live identifiers always lie in one span shorter than the
//! identifier space (the window is below 65,535): the next one is never in
//! use, and no search is needed.

use embassy_futures::select::{select, Either};
use embassy_time::{Duration, Instant, Timer};
use embedded_io_async::{Read, Write};

use super::counters::Counters;
use super::packet::{
    fixed_header, packet_len, varint_len, Malformed, Reader, Value, Writer, CONNACK, CONNECT,
    DISCONNECT, PINGREQ, PINGRESP, PUBACK, PUBCOMP, PUBLISH, PUBREC, PUBREL, SUBACK, SUBSCRIBE,
    VARINT_MAX,
};
use super::QoS;

/// Why a session operation failed; every one ends the connection.
#[derive(Debug)]
pub(super) enum Error<E> {
    /// The transport failed.
    Transport(E),
    /// End of stream, or a transport that took no bytes.
    Closed,
    /// The broker sent a packet MQTT 5 does not allow here.
    Protocol,
    /// CONNACK with this failure reason code.
    Refused(u8),
    /// The broker sent DISCONNECT with this reason code.
    Rejected(u8),
    /// No PINGRESP in time.
    PingTimeout,
    /// A CONNECT or SUBSCRIBE does not fit the TX slice.
    NoRoom,
}

impl<E> From<Malformed> for Error<E> {
    fn from(_: Malformed) -> Self {
        Self::Protocol
    }
}

/// Why a publish did not go out.
#[derive(Debug)]
pub(super) enum PubError<E> {
    /// The window or the TX slice is full of what is in flight: progress
    /// ([`Connection::poll`]) and try again.
    Busy,
    /// The packet can never go: larger than the TX slice holds or the
    /// broker accepts.
    TooLarge,
    /// The connection failed.
    Session(Error<E>),
}

/// What a session is built with (from the connector's `Config`).
#[derive(Clone, Copy)]
pub(super) struct Settings<'a> {
    pub client_id: &'a str,
    pub credentials: Option<(&'a str, &'a [u8])>,
    /// Seconds; 0: none.
    pub keep_alive: u16,
    /// Seconds; 0: the session ends with the connection.
    pub session_expiry: u32,
    pub will: Option<WillSettings<'a>>,
    /// QoS 1/2 publishes unacknowledged at most (1 ..= 65,534).
    pub max_in_flight: u16,
}

/// The will's fixed parts; its payload is given per connection.
#[derive(Clone, Copy)]
pub(super) struct WillSettings<'a> {
    pub topic: &'a str,
    pub qos: QoS,
    pub delay: Option<u32>,
}

/// Record states in TX (byte 0 of a record head).
const DONE: u8 = 0;
const AWAIT_PUBACK: u8 = 1;
const AWAIT_PUBREC: u8 = 2;
const AWAIT_PUBCOMP: u8 = 3;
/// Bytes before each retained packet: state, packet identifier.
const HEAD: usize = 3;

/// Inbound QoS 2 publishes we have PUBREC'd and await PUBREL for, at most:
/// CONNECT announces it as our receive maximum.
const RX_MAX: usize = 16;

/// How long a PINGREQ may go unanswered.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// Control packets (4 bytes at most each) queued for writing.
const CTRL: usize = 32;

/// The state that outlives a connection: the settings, the slices, what
/// is in flight, and whether the broker holds a session to resume.
pub(super) struct Session<'a> {
    rx: &'a mut [u8],
    tx: &'a mut [u8],
    settings: Settings<'a>,
    counters: &'a Counters,
    /// In-flight records: `tx[head..tail]`.
    head: usize,
    tail: usize,
    /// Records not yet done.
    in_flight: u16,
    next_id: u16,
    /// Inbound QoS 2 packet identifiers awaiting PUBREL.
    rx_qos2: heapless::Vec<u16, RX_MAX>,
    /// A connection succeeded with a session expiry: the next CONNECT asks
    /// to resume (Clean Start = 0).
    resumable: bool,
}

impl<'a> Session<'a> {
    pub(super) fn new(
        settings: Settings<'a>,
        rx: &'a mut [u8],
        tx: &'a mut [u8],
        counters: &'a Counters,
    ) -> Self {
        Self {
            rx,
            tx,
            settings,
            counters,
            head: 0,
            tail: 0,
            in_flight: 0,
            next_id: 1,
            rx_qos2: heapless::Vec::new(),
            resumable: false,
        }
    }

    /// Opens a connection on `io`: CONNECT (its will carrying
    /// `will_payload`), CONNACK, and on a resumed session what was in
    /// flight sent again. Not bounded in time: the caller is.
    pub(super) async fn connect<IO: Read + Write>(
        &mut self,
        io: IO,
        will_payload: &[u8],
    ) -> Result<Connection<'_, 'a, IO>, Error<IO::Error>> {
        let mut c = Connection {
            s: self,
            io,
            start: 0,
            filled: 0,
            ctrl: [0; CTRL],
            ctrl_len: 0,
            ctrl_sent: 0,
            window: 0,
            max_qos: 2,
            max_packet: VARINT_MAX + 5,
            retain_ok: true,
            keep_alive: None,
            tick: Instant::MIN,
            wrote: false,
            ping_due: None,
            suback: None,
            resumed: false,
        };
        c.handshake(will_payload).await?;
        Ok(c)
    }

    fn clear_in_flight(&mut self) {
        self.head = 0;
        self.tail = 0;
        self.in_flight = 0;
        self.rx_qos2.clear();
    }

    /// The record at `at`: (state, packet id, record length).
    fn record(&self, at: usize) -> (u8, u16, usize) {
        let t = &self.tx[at..];
        let len = match fixed_header(&t[HEAD..]) {
            Ok(Some((_, h, rem))) => h + rem,
            // Records are packets this session encoded.
            _ => 0,
        };
        (t[0], u16::from_be_bytes([t[1], t[2]]), HEAD + len)
    }

    /// The live record with packet id `id`, if in state `state`.
    fn find(&self, id: u16, state: u8) -> Option<usize> {
        let mut at = self.head;
        while at < self.tail {
            let (s, i, len) = self.record(at);
            if s != DONE && i == id {
                return (s == state).then_some(at);
            }
            at += len;
        }
        None
    }

    /// Marks the record at `at` done, and drops done records from the
    /// front.
    fn release(&mut self, at: usize) {
        self.tx[at] = DONE;
        self.in_flight -= 1;
        self.counters.ack();
        while self.head < self.tail && self.tx[self.head] == DONE {
            self.head += self.record(self.head).2;
        }
        if self.head == self.tail {
            self.head = 0;
            self.tail = 0;
        }
    }

    fn take_id(&mut self) -> u16 {
        let id = self.next_id;
        self.next_id = self.next_id.checked_add(1).unwrap_or(1);
        id
    }

    /// Free TX from the tail on; the records move to the front only when
    /// fewer than `need` bytes are free (so not on every publish).
    fn scratch(&mut self, need: usize) -> &mut [u8] {
        if self.head > 0 && self.tx.len() - self.tail < need {
            self.tx.copy_within(self.head..self.tail, 0);
            self.tail -= self.head;
            self.head = 0;
        }
        &mut self.tx[self.tail..]
    }
}

/// A publish received: topic and payload borrowed from the RX slice.
pub(super) struct Inbound<'r> {
    topic: &'r str,
    payload: &'r [u8],
    retained: bool,
}

impl<'r> Inbound<'r> {
    pub(super) fn topic(&self) -> &'r str {
        self.topic
    }

    pub(super) fn payload(&self) -> &'r [u8] {
        self.payload
    }

    pub(super) fn retained(&self) -> bool {
        self.retained
    }
}

/// What one inbound packet was, for `poll`.
enum Handled {
    /// A publish to hand out: offsets in RX.
    Publish {
        topic: (usize, usize),
        payload: (usize, usize),
        retained: bool,
    },
    /// Anything else (an ack, a PINGRESP, a duplicate).
    Progress,
}

/// One open connection of a [`Session`].
pub(super) struct Connection<'s, 'a, IO> {
    s: &'s mut Session<'a>,
    io: IO,
    /// Unprocessed inbound bytes: `rx[start..filled]`.
    start: usize,
    filled: usize,
    /// Control packets to write: `ctrl[ctrl_sent..ctrl_len]`.
    ctrl: [u8; CTRL],
    ctrl_len: usize,
    ctrl_sent: usize,
    /// In flight at most: ours and the broker's receive maximum.
    window: u16,
    /// The broker's maximum QoS, maximum packet size, retain support.
    max_qos: u8,
    max_packet: usize,
    retain_ok: bool,
    /// Keep-alive: each `tick` (half the interval apart), a PINGREQ goes
    /// out unless something was written since the last one.
    keep_alive: Option<Duration>,
    tick: Instant,
    wrote: bool,
    ping_due: Option<Instant>,
    /// The SUBACK reason code for the subscription in progress: `Some(None)`
    /// while awaited.
    suback: Option<(u16, Option<u8>)>,
    resumed: bool,
}

/// Writes all of `buf`; a transport that takes nothing is closed.
async fn write_all<IO: Write>(io: &mut IO, mut buf: &[u8]) -> Result<(), Error<IO::Error>> {
    while !buf.is_empty() {
        match io.write(buf).await.map_err(Error::Transport)? {
            0 => return Err(Error::Closed),
            n => buf = &buf[n..],
        }
    }
    Ok(())
}

impl<'a, IO: Read + Write> Connection<'_, 'a, IO> {
    /// Whether the broker resumed the session (CONNACK session present).
    pub(super) fn resumed(&self) -> bool {
        self.resumed
    }

    /// Whether nothing is in flight.
    pub(super) fn is_quiescent(&self) -> bool {
        self.s.in_flight == 0
    }

    /// Whether a publish at `qos` would find room in the window (bytes
    /// are checked by [`Self::publish`]).
    pub(super) fn can_publish(&self, qos: QoS) -> bool {
        qos == QoS::AtMostOnce || self.s.in_flight < self.window
    }

    async fn handshake(&mut self, will_payload: &[u8]) -> Result<(), Error<IO::Error>> {
        let clean = !self.s.resumable;
        let settings = self.s.settings;
        let rx_len = self.s.rx.len();
        // The CONNECT is built in RX, idle until the CONNACK arrives: the
        // records a resumable session keeps in flight may fill TX. TX's
        // free tail serves when RX is the smaller.
        if let Some((first, len)) =
            encode_connect(&settings, clean, rx_len, will_payload, self.s.rx)
        {
            write_all(&mut self.io, &self.s.rx[first..first + len]).await?;
            self.wrote = true;
            self.io.flush().await.map_err(Error::Transport)?;
        } else {
            let scratch = self.s.scratch(usize::MAX);
            let (first, len) = encode_connect(&settings, clean, rx_len, will_payload, scratch)
                .ok_or(Error::NoRoom)?;
            let tail = self.s.tail;
            self.send(tail + first, tail + first + len).await?;
        }
        // CONNACK first; anything after it stays in RX.
        let (first, h, rem) = loop {
            if let Some(hdr) = fixed_header(&self.s.rx[..self.filled])? {
                if hdr.1 + hdr.2 > self.s.rx.len() {
                    return Err(Error::Protocol);
                }
                if self.filled >= hdr.1 + hdr.2 {
                    break hdr;
                }
            }
            self.read().await?;
        };
        let mut r = Reader::new(&self.s.rx[h..h + rem]);
        match first >> 4 {
            CONNACK if first & 0x0f == 0 => {}
            DISCONNECT => return Err(Error::Rejected(r.u8().unwrap_or(0))),
            _ => return Err(Error::Protocol),
        }
        let flags = r.u8()?;
        let reason = r.u8()?;
        if reason >= 0x80 {
            return Err(Error::Refused(reason));
        }
        let mut receive_max = u16::MAX;
        let mut keep_alive = self.s.settings.keep_alive;
        if !r.is_empty() {
            let mut p = r.properties()?;
            while let Some((id, v)) = p.next()? {
                let Value::Int(v) = v else { continue };
                match id {
                    0x21 if v == 0 => return Err(Error::Protocol),
                    0x21 => receive_max = v as u16,
                    0x24 => self.max_qos = v as u8,
                    0x25 => self.retain_ok = v != 0,
                    0x27 => self.max_packet = v as usize,
                    0x13 => keep_alive = v as u16,
                    _ => {}
                }
            }
        }
        self.start = h + rem;
        self.window = self.s.settings.max_in_flight.min(receive_max);
        self.keep_alive = (keep_alive > 0).then(|| Duration::from_secs(keep_alive.into()));
        self.resumed = flags & 1 != 0 && !clean;
        self.s.resumable = self.s.settings.session_expiry > 0;
        self.tick = match self.keep_alive {
            Some(interval) => Instant::now() + half(interval),
            None => Instant::MAX,
        };
        if !self.resumed {
            self.s.clear_in_flight();
            return Ok(());
        }
        // Resumed: what was in flight goes again, in order.
        let mut at = self.s.head;
        while at < self.s.tail {
            let (state, id, len) = self.s.record(at);
            match state {
                AWAIT_PUBACK | AWAIT_PUBREC => {
                    self.s.tx[at + HEAD] |= 0x08;
                    self.send(at + HEAD, at + len).await?;
                }
                AWAIT_PUBCOMP => {
                    self.queue(PUBREL << 4 | 0x02, id);
                    self.flush_ctrl().await?;
                }
                _ => {}
            }
            at += len;
        }
        Ok(())
    }

    /// Writes `tx[a..b]` (after the control queue) and flushes.
    async fn send(&mut self, a: usize, b: usize) -> Result<(), Error<IO::Error>> {
        self.write_ctrl().await?;
        write_all(&mut self.io, &self.s.tx[a..b]).await?;
        self.wrote = true;
        self.io.flush().await.map_err(Error::Transport)
    }

    /// Queues a 4-byte control packet (`first`, packet id). The caller has
    /// made room ([`Self::ctrl_room`]).
    fn queue(&mut self, first: u8, id: u16) {
        let [hi, lo] = id.to_be_bytes();
        let at = self.ctrl_len;
        if let Some(slot) = self.ctrl.get_mut(at..at + 4) {
            slot.copy_from_slice(&[first, 2, hi, lo]);
            self.ctrl_len += 4;
        }
    }

    fn ctrl_room(&self) -> bool {
        self.ctrl_len + 4 <= CTRL
    }

    /// Writes the queued control packets; the cursor makes it safe to
    /// drop at any await.
    async fn write_ctrl(&mut self) -> Result<(), Error<IO::Error>> {
        while self.ctrl_sent < self.ctrl_len {
            let n = self
                .io
                .write(&self.ctrl[self.ctrl_sent..self.ctrl_len])
                .await
                .map_err(Error::Transport)?;
            if n == 0 {
                return Err(Error::Closed);
            }
            self.ctrl_sent += n;
            self.wrote = true;
        }
        self.ctrl_len = 0;
        self.ctrl_sent = 0;
        Ok(())
    }

    async fn flush_ctrl(&mut self) -> Result<(), Error<IO::Error>> {
        if self.ctrl_len > 0 {
            self.write_ctrl().await?;
            self.io.flush().await.map_err(Error::Transport)?;
        }
        Ok(())
    }

    /// Reads more inbound bytes into RX (moving what is held to the
    /// front first).
    async fn read(&mut self) -> Result<(), Error<IO::Error>> {
        if self.start > 0 {
            self.s.rx.copy_within(self.start..self.filled, 0);
            self.filled -= self.start;
            self.start = 0;
        }
        if self.filled == self.s.rx.len() {
            return Err(Error::Protocol);
        }
        match self.io.read(&mut self.s.rx[self.filled..]).await {
            Ok(0) => Err(Error::Closed),
            Ok(n) => {
                self.filled += n;
                Ok(())
            }
            Err(e) => Err(Error::Transport(e)),
        }
    }

    /// When the next keep-alive event is due: a tick or the PINGRESP
    /// deadline; `None`: never.
    fn keep_alive_due(&self) -> Option<Instant> {
        match self.ping_due {
            Some(due) => Some(due.min(self.tick)),
            None => self.keep_alive.map(|_| self.tick),
        }
    }

    fn keep_alive_tick(&mut self) -> Result<(), Error<IO::Error>> {
        let now = Instant::now();
        if self.ping_due.is_some_and(|due| now >= due) {
            return Err(Error::PingTimeout);
        }
        let Some(interval) = self.keep_alive else {
            return Ok(());
        };
        if now >= self.tick {
            if !core::mem::take(&mut self.wrote) && self.ping_due.is_none() && self.ctrl_room() {
                let at = self.ctrl_len;
                self.ctrl[at..at + 2].copy_from_slice(&[PINGREQ << 4, 0]);
                self.ctrl_len += 2;
                self.ping_due = Some(now + PING_TIMEOUT);
            }
            self.tick = now + half(interval);
        }
        Ok(())
    }

    /// Drives the connection until a publish arrives (`Some`) or some
    /// progress was made (an acknowledgement, a PINGRESP: `None`), writing
    /// the acknowledgements and keep-alive pings owed.
    ///
    /// Cancel-safe: it may be dropped at any await; a later call goes on
    /// where it stopped, and no packet is split or lost.
    pub(super) async fn poll(&mut self) -> Result<Option<Inbound<'_>>, Error<IO::Error>> {
        let mut progress = false;
        let handled = loop {
            if !self.ctrl_room() {
                self.flush_ctrl().await?;
            }
            match self.next_packet()? {
                Some(Handled::Progress) => {
                    progress = true;
                    continue;
                }
                Some(p) => break p,
                None => {}
            }
            self.flush_ctrl().await?;
            if progress {
                return Ok(None);
            }
            let due = self.keep_alive_due();
            match select(self.read(), at(due)).await {
                Either::First(r) => r?,
                Either::Second(()) => self.keep_alive_tick()?,
            }
        };
        let Handled::Publish {
            topic,
            payload,
            retained,
        } = handled
        else {
            return Ok(None);
        };
        let rx = &self.s.rx;
        Ok(Some(Inbound {
            // Checked as UTF-8 when the packet was handled.
            topic: core::str::from_utf8(&rx[topic.0..topic.1]).unwrap_or(""),
            payload: &rx[payload.0..payload.1],
            retained,
        }))
    }

    /// Handles the next complete inbound packet held in RX, if any, and
    /// consumes it (a publish's bytes stay in RX until the next read).
    fn next_packet(&mut self) -> Result<Option<Handled>, Error<IO::Error>> {
        let held = &self.s.rx[self.start..self.filled];
        let Some((first, h, rem)) = fixed_header(held)? else {
            return Ok(None);
        };
        if h + rem > self.s.rx.len() {
            return Err(Error::Protocol);
        }
        if held.len() < h + rem {
            return Ok(None);
        }
        let body = (self.start + h, self.start + h + rem);
        self.start += h + rem;
        self.handle(first, body).map(Some)
    }

    fn handle(&mut self, first: u8, (a, b): (usize, usize)) -> Result<Handled, Error<IO::Error>> {
        let flags = first & 0x0f;
        let kind = first >> 4;
        if kind == PUBLISH {
            return self.handle_publish(flags, a, b);
        }
        let mut r = Reader::new(&self.s.rx[a..b]);
        match (kind, flags) {
            (PUBACK | PUBREC | PUBCOMP, 0) | (PUBREL, 2) => {
                let id = r.u16()?;
                let reason = if r.is_empty() { 0 } else { r.u8()? };
                self.handle_ack(kind, id, reason)?;
            }
            (SUBACK, 0) => {
                let id = r.u16()?;
                r.properties()?;
                let code = r.u8()?;
                match &mut self.suback {
                    Some((pending, got @ None)) if *pending == id => *got = Some(code),
                    _ => return Err(Error::Protocol),
                }
            }
            (PINGRESP, 0) => self.ping_due = None,
            (DISCONNECT, 0) => return Err(Error::Rejected(if r.is_empty() { 0 } else { r.u8()? })),
            _ => return Err(Error::Protocol),
        }
        Ok(Handled::Progress)
    }

    fn handle_ack(&mut self, kind: u8, id: u16, reason: u8) -> Result<(), Error<IO::Error>> {
        let s = &mut *self.s;
        match kind {
            PUBACK => s.release(s.find(id, AWAIT_PUBACK).ok_or(Error::Protocol)?),
            PUBREC => {
                if let Some(at) = s.find(id, AWAIT_PUBREC) {
                    if reason >= 0x80 {
                        // The broker refused it: the exchange ends here.
                        s.release(at);
                        return Ok(());
                    }
                    s.tx[at] = AWAIT_PUBCOMP;
                } else if s.find(id, AWAIT_PUBCOMP).is_none() {
                    return Err(Error::Protocol);
                }
                self.queue(PUBREL << 4 | 0x02, id);
            }
            PUBCOMP => s.release(s.find(id, AWAIT_PUBCOMP).ok_or(Error::Protocol)?),
            // PUBREL: the inbound QoS 2 exchange ends (and is answered even
            // if unknown: it may be a resend after our PUBCOMP was lost).
            _ => {
                if let Some(i) = s.rx_qos2.iter().position(|&x| x == id) {
                    s.rx_qos2.swap_remove(i);
                }
                self.queue(PUBCOMP << 4, id);
            }
        }
        Ok(())
    }

    fn handle_publish(
        &mut self,
        flags: u8,
        a: usize,
        b: usize,
    ) -> Result<Handled, Error<IO::Error>> {
        let qos = (flags >> 1) & 3;
        let mut r = Reader::new(&self.s.rx[a..b]);
        let topic_len = usize::from(r.u16()?);
        let topic = r.take(topic_len)?;
        // Topic aliases are not announced, so a topic is never empty.
        if topic.is_empty() || core::str::from_utf8(topic).is_err() {
            return Err(Error::Protocol);
        }
        let id = if qos > 0 { r.u16()? } else { 0 };
        r.properties()?;
        let payload_len = r.rest().len();
        let topic = (a + 2, a + 2 + topic_len);
        let payload = (b - payload_len, b);
        let deliver = match qos {
            0 => true,
            1 => {
                self.queue(PUBACK << 4, id);
                true
            }
            2 => {
                let rx = &mut self.s.rx_qos2;
                let new = !rx.contains(&id);
                if new && rx.push(id).is_err() {
                    // More than the receive maximum we announced.
                    return Err(Error::Protocol);
                }
                self.queue(PUBREC << 4, id);
                new
            }
            _ => return Err(Error::Protocol),
        };
        Ok(if deliver {
            Handled::Publish {
                topic,
                payload,
                retained: flags & 1 != 0,
            }
        } else {
            Handled::Progress
        })
    }

    /// Publishes one message. QoS 1/2: kept in TX until acknowledged
    /// (re-sent on a resumed session). A QoS above the broker's maximum
    /// goes at its maximum; a retain flag the broker does not support is
    /// dropped.
    pub(super) async fn publish(
        &mut self,
        topic: &str,
        payload: &[u8],
        qos: QoS,
        retain: bool,
    ) -> Result<(), PubError<IO::Error>> {
        let q = (qos as u8).min(self.max_qos);
        if q > 0 && self.s.in_flight >= self.window {
            return Err(PubError::Busy);
        }
        let remaining = 2 + topic.len() + if q > 0 { 2 } else { 0 } + 1 + payload.len();
        let len = packet_len(remaining);
        if topic.len() > usize::from(u16::MAX) || remaining > VARINT_MAX || len > self.max_packet {
            return Err(PubError::TooLarge);
        }
        if HEAD + len > self.s.scratch(HEAD + len).len() {
            // Room comes back as acknowledgements arrive.
            return Err(if self.s.tail > 0 {
                PubError::Busy
            } else {
                PubError::TooLarge
            });
        }
        let id = if q > 0 { self.s.take_id() } else { 0 };
        let [hi, lo] = id.to_be_bytes();
        let state = match q {
            0 => DONE,
            1 => AWAIT_PUBACK,
            _ => AWAIT_PUBREC,
        };
        let scratch = self.s.scratch(HEAD + len);
        scratch[..HEAD].copy_from_slice(&[state, hi, lo]);
        let mut w = Writer::new(&mut scratch[HEAD..HEAD + len]);
        let retain = retain && self.retain_ok;
        // Fits: `len` was checked against the slice.
        let _ = (|| {
            w.header(PUBLISH << 4 | q << 1 | u8::from(retain), remaining)?;
            w.binary(topic.as_bytes())?;
            if q > 0 {
                w.u16(id)?;
            }
            w.u8(0)?;
            w.bytes(payload)
        })();
        let at = self.s.tail;
        self.send(at + HEAD, at + HEAD + len)
            .await
            .map_err(PubError::Session)?;
        if q > 0 {
            self.s.tail += HEAD + len;
            self.s.in_flight += 1;
            self.s.counters.admit();
        }
        Ok(())
    }

    /// Sends a SUBSCRIBE for one filter with these subscription options
    /// (maximum QoS, retain handling); [`Self::suback`] then tells the
    /// outcome.
    pub(super) async fn subscribe(
        &mut self,
        filter: &str,
        options: u8,
    ) -> Result<(), Error<IO::Error>> {
        let id = self.s.take_id();
        let remaining = 2 + 1 + 2 + filter.len() + 1;
        let len = packet_len(remaining);
        let scratch = self.s.scratch(len);
        let mut w = Writer::new(scratch.get_mut(..len).ok_or(Error::NoRoom)?);
        (|| {
            w.header(SUBSCRIBE << 4 | 0x02, remaining)?;
            w.u16(id)?;
            w.u8(0)?;
            w.binary(filter.as_bytes())?;
            w.u8(options)
        })()
        .map_err(|_| Error::NoRoom)?;
        self.suback = Some((id, None));
        let at = self.s.tail;
        self.send(at, at + len).await
    }

    /// The SUBACK reason code of the last subscription: `None` while it
    /// is awaited.
    pub(super) fn suback(&self) -> Option<u8> {
        self.suback.and_then(|(_, code)| code)
    }

    /// A normal DISCONNECT: the broker drops the will and keeps the
    /// session for its expiry.
    pub(super) async fn disconnect(&mut self) -> Result<(), Error<IO::Error>> {
        self.write_ctrl().await?;
        write_all(&mut self.io, &[DISCONNECT << 4, 0]).await?;
        self.io.flush().await.map_err(Error::Transport)
    }
}

/// Resolves at `due`; never for `None`.
async fn at(due: Option<Instant>) {
    match due {
        Some(t) => Timer::at(t).await,
        None => core::future::pending().await,
    }
}

/// Half a keep-alive interval: how often a tick checks for silence.
fn half(d: Duration) -> Duration {
    Duration::from_ticks(d.as_ticks() / 2)
}

/// Encodes CONNECT into `buf`: `(offset, length)`, `None` if it does not
/// fit.
fn encode_connect(
    s: &Settings<'_>,
    clean: bool,
    rx_len: usize,
    will_payload: &[u8],
    buf: &mut [u8],
) -> Option<(usize, usize)> {
    let expiry = if s.session_expiry > 0 { 5 } else { 0 };
    // Receive maximum, maximum packet size, session expiry.
    let props = 3 + 5 + expiry;
    let mut remaining = 10 + varint_len(props) + props + 2 + s.client_id.len();
    let will_props = s.will.map_or(0, |w| if w.delay.is_some() { 5 } else { 0 });
    if let Some(w) = &s.will {
        remaining +=
            varint_len(will_props) + will_props + 2 + w.topic.len() + 2 + will_payload.len();
    }
    if let Some((user, password)) = s.credentials {
        remaining += 2 + user.len() + 2 + password.len();
    }
    let len = packet_len(remaining);
    let mut w = Writer::new(buf.get_mut(..len)?);
    let mut flags = u8::from(clean) << 1;
    if let Some(will) = &s.will {
        flags |= 0x04 | (will.qos as u8) << 3 | 0x20;
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
        if let Some(will) = &s.will {
            w.varint(will_props)?;
            if let Some(d) = will.delay {
                w.u8(0x18)?;
                w.u32(d)?;
            }
            w.binary(will.topic.as_bytes())?;
            w.binary(will_payload)?;
        }
        if let Some((user, password)) = s.credentials {
            w.binary(user.as_bytes())?;
            w.binary(password)?;
        }
        Ok::<(), super::packet::NoRoom>(())
    })()
    .ok()?;
    Some((0, len))
}

// The clock (keep-alive) needs a time driver: the host clock of `tokio`.
#[cfg(all(test, feature = "tokio"))]
mod tests {
    use super::*;
    use std::vec::Vec;

    /// Inbound bytes handed out `chunk` at a time; writes collected.
    struct Script {
        inbound: Vec<u8>,
        at: usize,
        chunk: usize,
        out: Vec<u8>,
    }

    impl embedded_io_async::ErrorType for Script {
        type Error = core::convert::Infallible;
    }

    impl Read for Script {
        async fn read(&mut self, buf: &mut [u8]) -> Result<usize, Self::Error> {
            let n = self.chunk.min(buf.len()).min(self.inbound.len() - self.at);
            buf[..n].copy_from_slice(&self.inbound[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    impl Write for Script {
        async fn write(&mut self, buf: &[u8]) -> Result<usize, Self::Error> {
            self.out.extend_from_slice(buf);
            Ok(buf.len())
        }

        async fn flush(&mut self) -> Result<(), Self::Error> {
            Ok(())
        }
    }

    fn settings(session_expiry: u32) -> Settings<'static> {
        Settings {
            client_id: "t",
            credentials: None,
            keep_alive: 0,
            session_expiry,
            will: None,
            max_in_flight: 8,
        }
    }

    const CONNACK: [u8; 5] = [0x20, 0x03, 0x00, 0x00, 0x00];
    const CONNACK_RESUMED: [u8; 5] = [0x20, 0x03, 0x01, 0x00, 0x00];

    /// A QoS 2 PUBLISH on "a/b" with packet id `id` and payload `p`.
    fn publish_qos2(id: u8, dup: bool, p: &[u8]) -> Vec<u8> {
        let mut v = std::vec![0x34 | u8::from(dup) << 3, (2 + 3 + 2 + 1 + p.len()) as u8];
        v.extend_from_slice(&[0, 3, b'a', b'/', b'b', 0, id, 0]);
        v.extend_from_slice(p);
        v
    }

    /// Runs `inbound` (after a CONNACK) through `poll` until it is used
    /// up, `chunk` bytes per read: the payloads delivered, what was
    /// written after the CONNECT.
    fn drive(inbound: &[u8], chunk: usize) -> (Vec<Vec<u8>>, Vec<u8>) {
        let counters = Counters::new();
        let (mut rx, mut tx) = ([0u8; 64], [0u8; 128]);
        let mut s = Session::new(settings(0), &mut rx, &mut tx, &counters);
        let mut script = CONNACK.to_vec();
        script.extend_from_slice(inbound);
        let io = Script {
            inbound: script,
            at: 0,
            chunk,
            out: Vec::new(),
        };
        futures::executor::block_on(async {
            let mut c = s.connect(io, &[]).await.unwrap();
            let connect_len = c.io.out.len();
            let mut got = Vec::new();
            loop {
                match c.poll().await {
                    Ok(Some(p)) => got.push(p.payload().to_vec()),
                    Ok(None) => {}
                    // End of the script.
                    Err(Error::Closed) => break,
                    Err(e) => panic!("{e:?}"),
                }
            }
            (got, c.io.out.split_off(connect_len))
        })
    }

    #[test]
    fn an_inbound_qos2_publish_is_delivered_once_whatever_the_reads() {
        // PUBLISH id 7, its resend (DUP) before our PUBREC arrived, PUBREL
        // 7, then id 7 again: a new message.
        let mut inbound = publish_qos2(7, false, b"one");
        inbound.extend(publish_qos2(7, true, b"one"));
        inbound.extend_from_slice(&[0x62, 0x02, 0x00, 0x07]);
        inbound.extend(publish_qos2(7, false, b"two"));
        for chunk in 1..=inbound.len() + 5 {
            let (got, out) = drive(&inbound, chunk);
            assert_eq!(got, [b"one".to_vec(), b"two".to_vec()], "chunk {chunk}");
            // PUBREC, PUBREC, PUBCOMP, PUBREC: each answered, in order.
            let want = [0x50, 2, 0, 7, 0x50, 2, 0, 7, 0x70, 2, 0, 7, 0x50, 2, 0, 7];
            assert_eq!(out, want, "chunk {chunk}");
        }
    }

    #[test]
    fn a_refused_pubrec_ends_the_exchange_and_an_unknown_ack_is_an_error() {
        let counters = Counters::new();
        let (mut rx, mut tx) = ([0u8; 64], [0u8; 128]);
        let mut s = Session::new(settings(0), &mut rx, &mut tx, &counters);
        // PUBREC 1 with reason 0x87 (not authorized), then a PUBACK for
        // an id never sent.
        let mut script = CONNACK.to_vec();
        script.extend_from_slice(&[0x50, 0x03, 0x00, 0x01, 0x87, 0x40, 0x02, 0x00, 0x09]);
        let io = Script {
            inbound: script,
            at: 0,
            // The CONNACK, then one packet per read.
            chunk: 5,
            out: Vec::new(),
        };
        futures::executor::block_on(async {
            let mut c = s.connect(io, &[]).await.unwrap();
            c.publish("t", b"x", QoS::ExactlyOnce, false).await.unwrap();
            assert!(!c.is_quiescent());
            let before = c.io.out.len();
            assert!(matches!(c.poll().await, Ok(None)));
            assert!(c.is_quiescent());
            assert_eq!(counters.acked(), 1);
            // No PUBREL for a refused publish.
            assert_eq!(c.io.out.len(), before);
            assert!(matches!(c.poll().await, Err(Error::Protocol)));
        });
    }

    #[test]
    fn a_full_tx_makes_room_at_the_front_and_still_reconnects() {
        let counters = Counters::new();
        // Five QoS 1 records of 3 + 9 bytes fill 60 of 64 bytes.
        let (mut rx, mut tx) = ([0u8; 64], [0u8; 64]);
        let mut s = Session::new(settings(60), &mut rx, &mut tx, &counters);
        let mut script = CONNACK.to_vec();
        for id in 1..=3 {
            script.extend_from_slice(&[0x40, 0x02, 0x00, id]);
        }
        let io = |inbound: Vec<u8>| Script {
            inbound,
            at: 0,
            chunk: 5,
            out: Vec::new(),
        };
        let publish = |n: u8| [0x32, 0x07, 0, 1, b't', 0, n, 0, b'0' + n];
        futures::executor::block_on(async {
            let mut c = s.connect(io(script), &[]).await.unwrap();
            for n in 1..=5 {
                let p = [b'0' + n];
                c.publish("t", &p, QoS::AtLeastOnce, false).await.unwrap();
            }
            while counters.acked() < 3 {
                c.poll().await.unwrap();
            }
            // Only 4 bytes are left behind the tail: the two still in
            // flight move to the front to make room for two more.
            for n in 6..=7 {
                let p = [b'0' + n];
                c.publish("t", &p, QoS::AtLeastOnce, false).await.unwrap();
            }
        });
        // Four records take 48 of TX's 64 bytes, too few for the CONNECT.
        futures::executor::block_on(async {
            let c = s.connect(io(CONNACK_RESUMED.to_vec()), &[]).await.unwrap();
            let connect_len = usize::from(c.io.out[1]) + 2;
            let mut want = Vec::new();
            for n in 4..=7 {
                let mut p = publish(n);
                p[0] |= 0x08;
                want.extend_from_slice(&p);
            }
            assert_eq!(&c.io.out[connect_len..], want);
        });
    }

    #[test]
    fn a_resumed_session_resends_what_is_in_flight_with_dup() {
        let counters = Counters::new();
        let (mut rx, mut tx) = ([0u8; 64], [0u8; 128]);
        let mut s = Session::new(settings(60), &mut rx, &mut tx, &counters);
        let io = |inbound: &[u8]| Script {
            inbound: inbound.to_vec(),
            at: 0,
            chunk: 64,
            out: Vec::new(),
        };
        let first = futures::executor::block_on(async {
            let mut c = s.connect(io(&CONNACK), &[]).await.unwrap();
            assert!(!c.resumed());
            let start = c.io.out.len();
            c.publish("t", b"1", QoS::AtLeastOnce, false).await.unwrap();
            c.publish("t", b"2", QoS::AtMostOnce, false).await.unwrap();
            c.publish("t", b"3", QoS::AtLeastOnce, false).await.unwrap();
            c.io.out.split_off(start)
        });
        // 1 (id 1), 2 (QoS 0), 3 (id 2).
        let one = [0x32, 0x07, 0, 1, b't', 0, 1, 0, b'1'];
        let three = [0x32, 0x07, 0, 1, b't', 0, 2, 0, b'3'];
        assert_eq!(&first[..9], one);
        assert_eq!(&first[first.len() - 9..], three);
        futures::executor::block_on(async {
            let c = s.connect(io(&CONNACK_RESUMED), &[]).await.unwrap();
            assert!(c.resumed());
            // Clean Start = 0 in the CONNECT's flags (byte 9).
            assert_eq!(c.io.out[9] & 0x02, 0);
            let connect_len = usize::from(c.io.out[1]) + 2;
            let mut want = one.to_vec();
            want.extend_from_slice(&three);
            want[0] |= 0x08;
            want[9] |= 0x08;
            assert_eq!(&c.io.out[connect_len..], want);
        });
    }
}
