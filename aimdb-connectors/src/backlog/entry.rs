//! One backlog entry as it lies in flash: a fixed head, the topic, the
//! payload.
//!
//! ```text
//!  0      2      6      10     14     15      16        16+t
//!  route  boot   seq    at_ms  flags  topic   topic     payload
//!  u16    u32    u32    u32    u8     len u8  t bytes   rest
//! ```
//!
//! All little-endian. The flash store checks each entry's integrity
//! (sequential-storage's CRC); this layer checks its shape, so an entry
//! written by another layout is refused with a typed error, never read
//! as a value.

use aimdb_core::connector::{Message, QoS};

/// Bytes before the topic.
pub const HEAD: usize = 16;

/// Flags byte: the message's QoS in bits 0–1, retain in bit 2, urgent in
/// bit 3.
const RETAIN: u8 = 1 << 2;
const URGENT: u8 = 1 << 3;

/// Where an entry came from: what a consumer needs to drop a duplicate
/// (`boot`, `seq`) and to tell its age (`at_ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// The node's boot sequence when the value was stored.
    pub boot: u32,
    /// The value's sequence within that boot (from 0, one per value
    /// stored).
    pub seq: u32,
    /// The runner's clock, in milliseconds (wrapping), when it was
    /// stored.
    pub at_ms: u32,
}

/// A stored value, read back: borrowed from the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry<'b> {
    /// The route it was pulled from (declaration order).
    pub route: u16,
    /// Its identity and age.
    pub stamp: Stamp,
    /// The topic it goes to.
    pub topic: &'b str,
    /// Its encoded payload.
    pub payload: &'b [u8],
    /// The route's QoS.
    pub qos: QoS,
    /// The route's retain flag.
    pub retain: bool,
    /// The route's urgency.
    pub urgent: bool,
}

impl<'b> Entry<'b> {
    /// The entry as an outbound message (no lag: a backlog loses nothing
    /// it took).
    pub fn message(&self) -> Message<'b> {
        Message {
            route: self.route as usize,
            topic: self.topic,
            payload: self.payload,
            lagged: 0,
            qos: self.qos,
            retain: self.retain,
            urgent: self.urgent,
        }
    }
}

/// Why an entry could not be written or read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Topic over 255 bytes, route over `u16`, or the whole over the
    /// buffer.
    TooLarge,
    /// Bytes that are not an entry of this layout.
    Malformed,
}

/// Bytes an entry for `m` takes.
pub fn len(m: &Message<'_>) -> usize {
    HEAD + m.topic.len() + m.payload.len()
}

/// Writes `m` with `stamp` into `buf`; the entry's length.
pub fn encode(m: &Message<'_>, stamp: Stamp, buf: &mut [u8]) -> Result<usize, Shape> {
    let n = len(m);
    let (Ok(route), Ok(t)) = (u16::try_from(m.route), u8::try_from(m.topic.len())) else {
        return Err(Shape::TooLarge);
    };
    let Some(out) = buf.get_mut(..n) else {
        return Err(Shape::TooLarge);
    };
    out[0..2].copy_from_slice(&route.to_le_bytes());
    out[2..6].copy_from_slice(&stamp.boot.to_le_bytes());
    out[6..10].copy_from_slice(&stamp.seq.to_le_bytes());
    out[10..14].copy_from_slice(&stamp.at_ms.to_le_bytes());
    let qos = match m.qos {
        QoS::AtMostOnce => 0,
        QoS::AtLeastOnce => 1,
        QoS::ExactlyOnce => 2,
    };
    out[14] = qos | if m.retain { RETAIN } else { 0 } | if m.urgent { URGENT } else { 0 };
    out[15] = t;
    out[HEAD..HEAD + m.topic.len()].copy_from_slice(m.topic.as_bytes());
    out[HEAD + m.topic.len()..].copy_from_slice(m.payload);
    Ok(n)
}

/// Reads an entry back.
pub fn decode(b: &[u8]) -> Result<Entry<'_>, Shape> {
    if b.len() < HEAD {
        return Err(Shape::Malformed);
    }
    let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let flags = b[14];
    let qos = match flags & 0b11 {
        0 => QoS::AtMostOnce,
        1 => QoS::AtLeastOnce,
        2 => QoS::ExactlyOnce,
        _ => return Err(Shape::Malformed),
    };
    if flags & !(0b11 | RETAIN | URGENT) != 0 {
        return Err(Shape::Malformed);
    }
    let t = usize::from(b[15]);
    let topic = b.get(HEAD..HEAD + t).ok_or(Shape::Malformed)?;
    let topic = core::str::from_utf8(topic).map_err(|_| Shape::Malformed)?;
    Ok(Entry {
        route: u16::from_le_bytes([b[0], b[1]]),
        stamp: Stamp {
            boot: u32_at(2),
            seq: u32_at(6),
            at_ms: u32_at(10),
        },
        topic,
        payload: &b[HEAD + t..],
        qos,
        retain: flags & RETAIN != 0,
        urgent: flags & URGENT != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg<'a>(topic: &'a str, payload: &'a [u8]) -> Message<'a> {
        Message {
            route: 3,
            topic,
            payload,
            lagged: 7,
            qos: QoS::AtLeastOnce,
            retain: true,
            urgent: false,
        }
    }

    #[test]
    fn an_entry_reads_back_as_written() {
        let stamp = Stamp {
            boot: 9,
            seq: 0x0102_0304,
            at_ms: u32::MAX,
        };
        let mut buf = [0u8; 64];
        let n = encode(&msg("sensors/t", &[1, 2, 3]), stamp, &mut buf).unwrap();
        assert_eq!(n, HEAD + 9 + 3);
        let e = decode(&buf[..n]).unwrap();
        assert_eq!(e.route, 3);
        assert_eq!(e.stamp, stamp);
        assert_eq!((e.topic, e.payload), ("sensors/t", &[1u8, 2, 3][..]));
        assert_eq!((e.qos, e.retain, e.urgent), (QoS::AtLeastOnce, true, false));
        // Lag is not stored: a backlog loses nothing it took.
        assert_eq!(e.message().lagged, 0);
    }

    #[test]
    fn bad_shapes_are_refused() {
        let stamp = Stamp {
            boot: 0,
            seq: 0,
            at_ms: 0,
        };
        let mut small = [0u8; HEAD + 2];
        assert_eq!(
            encode(&msg("abc", &[]), stamp, &mut small),
            Err(Shape::TooLarge)
        );
        let long = "x".repeat(256);
        let mut big = [0u8; 400];
        assert_eq!(
            encode(&msg(&long, &[]), stamp, &mut big),
            Err(Shape::TooLarge)
        );
        assert_eq!(decode(&[0u8; HEAD - 1]), Err(Shape::Malformed));
        let n = encode(&msg("abc", &[1]), stamp, &mut big).unwrap();
        let mut bad = big;
        bad[15] = 200; // topic longer than the entry
        assert_eq!(decode(&bad[..n]), Err(Shape::Malformed));
        let mut bad = big;
        bad[14] = 0x80; // unknown flag
        assert_eq!(decode(&bad[..n]), Err(Shape::Malformed));
        let mut bad = big;
        bad[HEAD] = 0xff; // not UTF-8
        assert_eq!(decode(&bad[..n]), Err(Shape::Malformed));
    }
}
