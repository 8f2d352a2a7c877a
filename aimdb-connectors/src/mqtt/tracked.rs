//! Tracked publishes: those a durable backlog keeps until the broker
//! acknowledges them. Their packet identifiers in the order offered, so
//! acknowledgements (which MQTT sends in order, but a broker may not)
//! are reported as a count of the oldest; and the `aimdb-id` user
//! property that carries each one's [`Id`] to consumers.

use super::outbox::{Outbox, AWAIT_PUBACK, AWAIT_PUBCOMP};
use crate::engine::{Delivery, Id};

/// Tracked publishes in flight at most.
pub(super) const TRACK: usize = 16;

/// The user property's name.
pub const ID_PROPERTY: &str = "aimdb-id";

/// Bytes of the longest `aimdb-id` property: identifier, two lengths,
/// the name, `boot:seq` in decimal.
pub(super) const PROPERTY_MAX: usize = 1 + 2 + ID_PROPERTY.len() + 2 + 21;

#[derive(Debug, Default)]
pub(super) struct Tracked {
    /// Packet identifiers, oldest first, and whether acknowledged.
    ids: heapless::Deque<(u16, bool), TRACK>,
    acked: u32,
    lost: bool,
}

impl Tracked {
    pub(super) const fn new() -> Self {
        Self {
            ids: heapless::Deque::new(),
            acked: 0,
            lost: false,
        }
    }

    /// Whether any tracked publish is in flight.
    #[inline(always)]
    pub(super) fn any(&self) -> bool {
        !self.ids.is_empty()
    }

    pub(super) fn full(&self) -> bool {
        self.ids.is_full()
    }

    /// A tracked publish went in with `id`; `acked`: it needs no
    /// acknowledgement (QoS 0: delivered as far as it ever will be).
    pub(super) fn push(&mut self, id: u16, acked: bool) {
        // `full` was checked before the publish.
        let _ = self.ids.push_back((id, acked));
        self.settle();
    }

    /// The broker acknowledged `id` (a PUBACK or PUBCOMP). Inline only
    /// the check: the session's receive path stays as it was without a
    /// backlog.
    #[inline(always)]
    pub(super) fn ack(&mut self, id: u16) {
        if !self.ids.is_empty() {
            self.ack_tracked(id);
        }
    }

    #[inline(never)]
    fn ack_tracked(&mut self, id: u16) {
        if let Some(e) = self.ids.iter_mut().find(|e| e.0 == id && !e.1) {
            e.1 = true;
            self.settle();
        }
    }

    /// Counts the acknowledged at the front.
    fn settle(&mut self) {
        while self.ids.front().is_some_and(|e| e.1) {
            self.ids.pop_front();
            self.acked += 1;
        }
    }

    /// A new connection: tracked publishes not acknowledged leave the
    /// outbox (sent or not); the backlog offers them again in order, so
    /// none overtakes another.
    #[inline(never)]
    pub(super) fn forget(&mut self, out: &mut Outbox<'_>) {
        while let Some((id, _)) = self.ids.pop_front() {
            let at = out
                .find(id, AWAIT_PUBACK)
                .or_else(|| out.find(id, AWAIT_PUBCOMP))
                .or_else(|| out.find(id, super::outbox::AWAIT_PUBREC));
            if let Some(at) = at {
                out.release(at);
            }
            self.lost = true;
        }
    }

    pub(super) fn take(&mut self) -> Delivery {
        let d = Delivery {
            acked: self.acked,
            lost: self.lost,
        };
        (self.acked, self.lost) = (0, false);
        d
    }
}

/// Writes the `aimdb-id` user property for `id` into `buf`; its length.
pub(super) fn property(id: Id, buf: &mut [u8; PROPERTY_MAX]) -> usize {
    let mut value = [0u8; 21];
    let mut n = decimal(id.boot, &mut value);
    value[n] = b':';
    n += 1;
    n += decimal(id.seq, &mut value[n..]);
    buf[0] = 0x26;
    let name = ID_PROPERTY.as_bytes();
    buf[1..3].copy_from_slice(&(name.len() as u16).to_be_bytes());
    let mut at = 3 + name.len();
    buf[3..at].copy_from_slice(name);
    buf[at..at + 2].copy_from_slice(&(n as u16).to_be_bytes());
    at += 2;
    buf[at..at + n].copy_from_slice(&value[..n]);
    at + n
}

/// `v` in decimal at the start of `out` (room for 10 digits); digits.
fn decimal(mut v: u32, out: &mut [u8]) -> usize {
    let mut digits = [0u8; 10];
    let mut n = 0;
    loop {
        digits[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for i in 0..n {
        out[i] = digits[n - 1 - i];
    }
    n
}

/// Reads an `aimdb-id` value (`boot:seq`).
pub fn parse_id(value: &str) -> Option<Id> {
    let (boot, seq) = value.split_once(':')?;
    Some(Id {
        boot: boot.parse().ok()?,
        seq: seq.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_property_carries_the_id_in_decimal() {
        let mut buf = [0u8; PROPERTY_MAX];
        for id in [
            Id { boot: 0, seq: 0 },
            Id {
                boot: 7,
                seq: 1_234,
            },
            Id {
                boot: u32::MAX,
                seq: u32::MAX,
            },
        ] {
            let n = property(id, &mut buf);
            assert_eq!(buf[0], 0x26);
            assert_eq!(&buf[1..3], &[0, 8]);
            assert_eq!(&buf[3..11], b"aimdb-id");
            let len = usize::from(u16::from_be_bytes([buf[11], buf[12]]));
            assert_eq!(n, 13 + len);
            let text = core::str::from_utf8(&buf[13..n]).unwrap();
            assert_eq!(text, std::format!("{}:{}", id.boot, id.seq));
            assert_eq!(parse_id(text), Some(id));
        }
        assert_eq!(parse_id("1"), None);
        assert_eq!(parse_id("x:1"), None);
    }

    #[test]
    fn acknowledgements_count_from_the_oldest_whatever_their_order() {
        let mut t = Tracked::new();
        for id in 1..=4 {
            t.push(id, false);
        }
        t.ack(2);
        t.ack(9); // not tracked
        assert_eq!(
            t.take(),
            Delivery {
                acked: 0,
                lost: false
            }
        );
        t.ack(1);
        assert_eq!(
            t.take(),
            Delivery {
                acked: 2,
                lost: false
            }
        );
        t.ack(3);
        t.push(5, true); // QoS 0: nothing to wait for, but after 4
        assert_eq!(
            t.take(),
            Delivery {
                acked: 1,
                lost: false
            }
        );
        t.ack(4);
        assert_eq!(
            t.take(),
            Delivery {
                acked: 2,
                lost: false
            }
        );
    }
}
