//! MQTT 5 wire format: the fixed header, the primitive types and property
//! lists, read from and written into the caller's slices. Only what the
//! client side needs ([`super::session`] builds the packets).

/// Packet types (the fixed header's high nibble).
pub(super) const CONNECT: u8 = 1;
pub(super) const CONNACK: u8 = 2;
pub(super) const PUBLISH: u8 = 3;
pub(super) const PUBACK: u8 = 4;
pub(super) const PUBREC: u8 = 5;
pub(super) const PUBREL: u8 = 6;
pub(super) const PUBCOMP: u8 = 7;
pub(super) const SUBSCRIBE: u8 = 8;
pub(super) const SUBACK: u8 = 9;
pub(super) const PINGREQ: u8 = 12;
pub(super) const PINGRESP: u8 = 13;
pub(super) const DISCONNECT: u8 = 14;

/// Bytes of a variable byte integer (1–4) for `v` (at most 268,435,455).
pub(super) const fn varint_len(v: usize) -> usize {
    match v {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    }
}

/// The largest value a variable byte integer holds: a packet's remaining
/// length is at most this.
pub(super) const VARINT_MAX: usize = 268_435_455;

/// A complete fixed header at the start of `buf`: `(first byte, header
/// length, remaining length)`; `Ok(None)` while more bytes are needed.
pub(super) fn fixed_header(buf: &[u8]) -> Result<Option<(u8, usize, usize)>, Malformed> {
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
    Err(Malformed)
}

/// A packet that does not follow MQTT 5.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Malformed;

/// Reads a packet's body. Every read checks the bounds.
pub(super) struct Reader<'b> {
    buf: &'b [u8],
}

impl<'b> Reader<'b> {
    pub(super) fn new(buf: &'b [u8]) -> Self {
        Self { buf }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// What is left.
    pub(super) fn rest(&self) -> &'b [u8] {
        self.buf
    }

    pub(super) fn take(&mut self, n: usize) -> Result<&'b [u8], Malformed> {
        if n > self.buf.len() {
            return Err(Malformed);
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub(super) fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.take(1)?[0])
    }

    pub(super) fn u16(&mut self) -> Result<u16, Malformed> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub(super) fn u32(&mut self) -> Result<u32, Malformed> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(super) fn varint(&mut self) -> Result<usize, Malformed> {
        let mut v = 0usize;
        for i in 0..4 {
            let b = self.u8()?;
            v |= usize::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Malformed)
    }

    /// Binary data: a two-byte length, then the bytes.
    pub(super) fn binary(&mut self) -> Result<&'b [u8], Malformed> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }

    /// A UTF-8 string: a two-byte length, then the bytes.
    pub(super) fn str(&mut self) -> Result<&'b str, Malformed> {
        core::str::from_utf8(self.binary()?).map_err(|_| Malformed)
    }

    /// A property list: its length, then the properties, returned to be
    /// walked with [`Properties`].
    pub(super) fn properties(&mut self) -> Result<Properties<'b>, Malformed> {
        let n = self.varint()?;
        Ok(Properties(Reader::new(self.take(n)?)))
    }
}

/// A property's value, by the type MQTT 5 (2.2.2.2) gives its identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Value {
    /// A byte, a two- or a four-byte integer, or a variable byte integer.
    Int(u32),
    /// A string, binary data or a string pair (not looked into).
    Bytes,
}

/// Walks a property list.
pub(super) struct Properties<'b>(Reader<'b>);

impl Properties<'_> {
    /// The next property (identifier, value); `Ok(None)` at the end. An
    /// identifier MQTT 5 does not define is malformed.
    pub(super) fn next(&mut self) -> Result<Option<(u8, Value)>, Malformed> {
        if self.0.is_empty() {
            return Ok(None);
        }
        let r = &mut self.0;
        let id = u8::try_from(r.varint()?).map_err(|_| Malformed)?;
        let value = match id {
            0x01 | 0x17 | 0x19 | 0x24 | 0x25 | 0x28 | 0x29 | 0x2a => Value::Int(r.u8()?.into()),
            0x13 | 0x21 | 0x22 | 0x23 => Value::Int(r.u16()?.into()),
            0x02 | 0x11 | 0x18 | 0x27 => Value::Int(r.u32()?),
            0x0b => Value::Int(u32::try_from(r.varint()?).map_err(|_| Malformed)?),
            0x03 | 0x08 | 0x12 | 0x15 | 0x1a | 0x1c | 0x1f => {
                r.str()?;
                Value::Bytes
            }
            0x09 | 0x16 => {
                r.binary()?;
                Value::Bytes
            }
            0x26 => {
                r.str()?;
                r.str()?;
                Value::Bytes
            }
            _ => return Err(Malformed),
        };
        Ok(Some((id, value)))
    }
}

/// Writes a packet into a slice; the caller has checked that it fits
/// ([`packet_len`]), so the slice's bounds are only a backstop.
pub(super) struct Writer<'b> {
    buf: &'b mut [u8],
    at: usize,
}

/// The slice is shorter than the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct NoRoom;

impl<'b> Writer<'b> {
    pub(super) fn new(buf: &'b mut [u8]) -> Self {
        Self { buf, at: 0 }
    }

    /// Bytes written.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.at
    }

    pub(super) fn bytes(&mut self, b: &[u8]) -> Result<(), NoRoom> {
        let end = self.at + b.len();
        self.buf
            .get_mut(self.at..end)
            .ok_or(NoRoom)?
            .copy_from_slice(b);
        self.at = end;
        Ok(())
    }

    pub(super) fn u8(&mut self, v: u8) -> Result<(), NoRoom> {
        self.bytes(&[v])
    }

    pub(super) fn u16(&mut self, v: u16) -> Result<(), NoRoom> {
        self.bytes(&v.to_be_bytes())
    }

    pub(super) fn u32(&mut self, v: u32) -> Result<(), NoRoom> {
        self.bytes(&v.to_be_bytes())
    }

    pub(super) fn varint(&mut self, mut v: usize) -> Result<(), NoRoom> {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                return self.u8(b);
            }
            self.u8(b | 0x80)?;
        }
    }

    /// Binary data or a string: a two-byte length, then the bytes.
    pub(super) fn binary(&mut self, b: &[u8]) -> Result<(), NoRoom> {
        let n = u16::try_from(b.len()).map_err(|_| NoRoom)?;
        self.u16(n)?;
        self.bytes(b)
    }

    /// The fixed header: first byte and remaining length.
    pub(super) fn header(&mut self, first: u8, remaining: usize) -> Result<(), NoRoom> {
        self.u8(first)?;
        self.varint(remaining)
    }
}

/// A whole packet's length for a remaining length of `remaining`.
pub(super) const fn packet_len(remaining: usize) -> usize {
    1 + varint_len(remaining) + remaining
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_every_length_boundary() {
        for v in [
            0, 127, 128, 16_383, 16_384, 2_097_151, 2_097_152, VARINT_MAX,
        ] {
            let mut buf = [0u8; 4];
            let mut w = Writer::new(&mut buf);
            w.varint(v).unwrap();
            assert_eq!(w.len(), varint_len(v), "{v}");
            let n = w.len();
            assert_eq!(Reader::new(&buf[..n]).varint(), Ok(v));
        }
    }

    #[test]
    fn a_fixed_header_needs_all_its_bytes_and_at_most_four_length_bytes() {
        assert_eq!(fixed_header(&[]), Ok(None));
        assert_eq!(fixed_header(&[0x30]), Ok(None));
        assert_eq!(fixed_header(&[0x30, 0x80]), Ok(None));
        assert_eq!(fixed_header(&[0x30, 0xc8, 0x01]), Ok(Some((0x30, 3, 200))));
        assert_eq!(
            fixed_header(&[0x30, 0xff, 0xff, 0xff, 0xff, 0x01]),
            Err(Malformed)
        );
    }

    #[test]
    fn reads_past_the_end_and_unknown_properties_are_malformed() {
        let mut r = Reader::new(&[0x00, 0x05, b'a']);
        assert_eq!(r.str(), Err(Malformed));
        // Receive maximum 20, then an identifier MQTT 5 does not define.
        let mut r = Reader::new(&[0x05, 0x21, 0x00, 0x14, 0x7f, 0x00]);
        let mut p = r.properties().unwrap();
        assert_eq!(p.next(), Ok(Some((0x21, Value::Int(20)))));
        assert_eq!(p.next(), Err(Malformed));
    }
}
