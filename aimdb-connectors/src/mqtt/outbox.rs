//! The TX slice as the session's outbox: every packet to send, and each
//! QoS 1/2 PUBLISH until it is acknowledged, as records in send order.
//!
//! A record is a 3-byte head (state, packet identifier) and the packet.
//! A cursor walks the records as the transport takes their bytes: a
//! packet that only goes once (QoS 0, SUBSCRIBE) is done when written; an
//! unacknowledged PUBLISH stays (a resumed session sends it again with
//! DUP set). Packet identifiers are handed out in order and records are
//! kept in send order, so the live identifiers always lie in one span
//! shorter than the identifier space: the next one is never in use.

use super::packet::{fixed_header, PUBLISH};

/// Record states (byte 0 of a record head).
pub(super) const DONE: u8 = 0;
pub(super) const AWAIT_PUBACK: u8 = 1;
pub(super) const AWAIT_PUBREC: u8 = 2;
pub(super) const AWAIT_PUBCOMP: u8 = 3;
/// Sent once, then done: QoS 0 PUBLISH, SUBSCRIBE, a CONNECT that did
/// not fit RX.
pub(super) const ONCE: u8 = 4;
/// Bytes before each packet: state, packet identifier.
pub(super) const HEAD: usize = 3;

/// What the cursor found to send.
pub(super) enum Next {
    /// `tx[a..b]`: (the rest of) a packet.
    Packet(usize, usize),
    /// A PUBREL for this packet identifier (a resumed QoS 2 exchange).
    Pubrel(u16),
    /// Nothing.
    Nothing,
}

pub(super) struct Outbox<'a> {
    pub(super) tx: &'a mut [u8],
    /// Records: `tx[head..tail]`.
    pub(super) head: usize,
    pub(super) tail: usize,
    /// Records awaiting an acknowledgement.
    pub(super) in_flight: u16,
    next_id: u16,
    /// The record being written and how many of its packet's bytes went.
    rec: usize,
    off: usize,
    /// Records before this were sent on an earlier connection: a resumed
    /// session sends them again (PUBREL for those awaiting PUBCOMP).
    resend_end: usize,
    /// The end of the record at the cursor, once [`Self::next`] found it
    /// has a packet to send (0: not known).
    rec_end: usize,
    /// The current connection got its CONNACK (the cursor walks what it
    /// sends); before it, nothing of the outbox is written.
    sending: bool,
}

impl<'a> Outbox<'a> {
    pub(super) fn new(tx: &'a mut [u8]) -> Self {
        Self {
            tx,
            head: 0,
            tail: 0,
            in_flight: 0,
            next_id: 1,
            rec: 0,
            off: 0,
            resend_end: 0,
            rec_end: 0,
            sending: false,
        }
    }

    /// The record at `at`: (state, packet id, record length).
    pub(super) fn record(&self, at: usize) -> (u8, u16, usize) {
        let t = &self.tx[at..];
        let len = match fixed_header(&t[HEAD..]) {
            Ok(Some((_, h, rem))) => h + rem,
            // Records are packets this session encoded.
            _ => 0,
        };
        (t[0], u16::from_be_bytes([t[1], t[2]]), HEAD + len)
    }

    /// The live record with packet id `id`, if in state `state`.
    pub(super) fn find(&self, id: u16, state: u8) -> Option<usize> {
        let mut at = self.head;
        while at < self.tail {
            let (s, i, len) = self.record(at);
            if matches!(s, AWAIT_PUBACK..=AWAIT_PUBCOMP) && i == id {
                return (s == state).then_some(at);
            }
            at += len;
        }
        None
    }

    /// Marks the record at `at` done (acknowledged if it was in flight),
    /// and drops done records from the front.
    pub(super) fn release(&mut self, at: usize) {
        if matches!(self.tx[at], AWAIT_PUBACK..=AWAIT_PUBCOMP) {
            self.in_flight -= 1;
        }
        self.tx[at] = DONE;
        self.drop_done_front();
    }

    /// Drops done records from the front.
    fn drop_done_front(&mut self) {
        while self.head < self.tail && self.tx[self.head] == DONE {
            self.head += self.record(self.head).2;
        }
        if self.rec < self.head {
            self.rec = self.head;
            self.rec_end = 0;
        }
        self.resend_end = self.resend_end.max(self.head);
        if self.head == self.tail {
            (self.head, self.tail, self.rec, self.off, self.resend_end) = (0, 0, 0, 0, 0);
            self.rec_end = 0;
        }
    }

    /// The packet identifier [`Self::take_id`] hands out next.
    pub(super) fn next_id(&self) -> u16 {
        self.next_id
    }

    pub(super) fn take_id(&mut self) -> u16 {
        let id = self.next_id;
        self.next_id = self.next_id.checked_add(1).unwrap_or(1);
        id
    }

    /// Free TX from the tail on; the records move to the front only when
    /// fewer than `need` bytes are free (so not on every publish).
    pub(super) fn scratch(&mut self, need: usize) -> &mut [u8] {
        if self.head > 0 && self.tx.len() - self.tail < need {
            let h = self.head;
            self.tx.copy_within(h..self.tail, 0);
            self.tail -= h;
            self.rec -= h;
            self.rec_end = self.rec_end.saturating_sub(h);
            self.resend_end = self.resend_end.saturating_sub(h);
            self.head = 0;
        }
        &mut self.tx[self.tail..]
    }

    /// Appends the record just encoded at the tail (`len` packet bytes
    /// after its head) in `state`.
    pub(super) fn push(&mut self, state: u8, id: u16, len: usize) {
        let [hi, lo] = id.to_be_bytes();
        let t = self.tail;
        self.tx[t..t + HEAD].copy_from_slice(&[state, hi, lo]);
        self.tail += HEAD + len;
        if self.rec == t {
            // The cursor stands on it: its end is known without parsing.
            self.rec_end = self.tail;
        }
        if matches!(state, AWAIT_PUBACK..=AWAIT_PUBCOMP) {
            self.in_flight += 1;
        }
    }

    /// What to send next: the cursor skips records that have nothing to
    /// send.
    pub(super) fn next(&mut self) -> Next {
        if self.rec_end > self.rec
            && matches!(self.tx[self.rec], AWAIT_PUBACK | AWAIT_PUBREC | ONCE)
        {
            return Next::Packet(self.rec + HEAD + self.off, self.rec_end);
        }
        while self.rec < self.tail {
            let (state, id, len) = self.record(self.rec);
            let resend = self.rec < self.resend_end;
            match state {
                AWAIT_PUBACK | AWAIT_PUBREC | ONCE => {
                    self.rec_end = self.rec + len;
                    return Next::Packet(self.rec + HEAD + self.off, self.rec_end);
                }
                AWAIT_PUBCOMP if resend && self.off == 0 => return Next::Pubrel(id),
                _ => {
                    self.rec += len;
                    self.off = 0;
                }
            }
        }
        Next::Nothing
    }

    /// `n` bytes of what [`Self::next`] gave went out. `Some(first)`: a
    /// packet was finished, with this first byte (a QoS 0 PUBLISH is then
    /// done).
    pub(super) fn sent(&mut self, n: usize) -> Option<u8> {
        if self.rec_end <= self.rec {
            self.rec_end = self.rec + self.record(self.rec).2;
        }
        self.off += n;
        if self.rec + HEAD + self.off < self.rec_end {
            return None;
        }
        let at = self.rec;
        let first = self.tx[at + HEAD];
        let state = self.tx[at];
        self.rec = self.rec_end;
        self.off = 0;
        if state == ONCE {
            if at == self.head && self.rec == self.tail {
                // The only record, done: the outbox is empty.
                (self.head, self.tail, self.rec, self.resend_end) = (0, 0, 0, 0);
            } else {
                self.release(at);
            }
        }
        self.rec_end = 0;
        Some(first)
    }

    /// Moves the cursor past the record it stands on (its PUBREL was
    /// queued instead).
    pub(super) fn skip(&mut self) {
        if self.rec < self.tail {
            self.rec += self.record(self.rec).2;
            self.off = 0;
            self.rec_end = 0;
        }
    }

    /// Whether [`Self::next`] has nothing to return: no record at or
    /// after the cursor (and none it stands on).
    #[inline(always)]
    pub(super) fn idle(&self) -> bool {
        self.rec_end <= self.rec && self.rec >= self.tail
    }

    /// Whether the cursor has records ahead (some may have nothing to
    /// send).
    pub(super) fn has_next(&self) -> bool {
        self.rec < self.tail
    }

    /// Whether a packet is part-way out (nothing else may go before its
    /// end).
    pub(super) fn mid_packet(&self) -> bool {
        self.off > 0
    }

    /// A new connection: packets that go once and belong to the last
    /// connection (SUBSCRIBE, CONNECT) are dropped; a packet cut off
    /// mid-way goes again whole; nothing is sent until [`Self::connack`].
    pub(super) fn open(&mut self) {
        // Where the last connection's writing stopped: records before
        // were written whole.
        // A connection that ended before its CONNACK wrote nothing of
        // the outbox: what the one before it wrote still stands.
        let written = if self.sending {
            self.rec
        } else {
            self.resend_end
        };
        self.sending = false;
        self.off = 0;
        let mut at = self.head;
        while at < self.tail {
            let (state, _, len) = self.record(at);
            if state == ONCE && self.tx[at + HEAD] >> 4 != PUBLISH {
                self.release_keep_order(at);
            }
            at += len;
        }
        self.resend_end = written.max(self.head);
        self.rec = self.tail;
        self.rec_end = 0;
    }

    /// Marks a record done without moving anything (used while walking).
    fn release_keep_order(&mut self, at: usize) {
        if matches!(self.tx[at], AWAIT_PUBACK..=AWAIT_PUBCOMP) {
            self.in_flight -= 1;
        }
        self.tx[at] = DONE;
    }

    /// The CONNACK came. Resumed: what was in flight goes again (DUP),
    /// then what was never sent. A new session: what was sent before is
    /// gone (the broker kept nothing), what was not is sent now.
    pub(super) fn connack(&mut self, resumed: bool) {
        let mut at = self.head;
        while at < self.resend_end {
            let (state, _, len) = self.record(at);
            match state {
                AWAIT_PUBACK | AWAIT_PUBREC if resumed => self.tx[at + HEAD] |= 0x08,
                AWAIT_PUBACK..=AWAIT_PUBCOMP if !resumed => self.release_keep_order(at),
                _ => {}
            }
            at += len;
        }
        self.drop_done_front();
        self.rec = self.head;
        self.rec_end = 0;
        self.sending = true;
        if !resumed {
            self.resend_end = self.head;
        }
    }
}
