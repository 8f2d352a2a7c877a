//! The wire format: `COBS(postcard((topic, payload)) [id]) 0x00`.
//!
//! postcard encodes the tuple `(&str, &[u8])` as `varint(len) topic
//! varint(len) payload`; COBS removes every zero byte from that so a single
//! `0x00` can end the frame.
//!
//! A **tracked** frame ([`encode_tracked`]) carries an [`Id`] after the
//! tuple, postcard varints of its `boot` and `seq`, then the id of the
//! tracked frame its sender sent just before it on this connection, as a
//! postcard `Option` (`0`, or `1` and the two varints): a value from a
//! durable backlog, which the receiver acknowledges, and takes only after
//! the one before it. An **acknowledgement** is a frame with an empty
//! topic, an empty payload and an id (no previous one): every tracked
//! frame up to and including that id arrived (and, at a receiver that
//! holds its acknowledgements, is safe; see [`super::Hold`]). A frame with
//! an empty topic and no id is a keep-alive (see the module above). A peer
//! that predates tracking counts a tracked frame as malformed. A receiver that joins mid-stream, or reads
//! garbage, throws bytes away up to the next `0x00` and is back in step.
//!
//! [`encode`] writes the COBS bytes straight from the pieces (no
//! intermediate postcard buffer, so a connector needs one transmit buffer,
//! not two). [`Decoder`] undoes COBS byte by byte as bytes arrive, in any
//! chunking, into one frame buffer of `N` bytes, and hands out the frame as
//! borrowed `topic` / `payload` slices.

use core::fmt;

use crate::engine::Id;

/// Largest decoded frame (postcard bytes of `(topic, payload)`) the
/// connector's default buffers accept: a 256-byte topic, a 1,024-byte
/// payload and their two length prefixes.
pub const MAX_FRAME: usize = 256 + 1024 + 2 + 3;

/// Bytes on the wire for a decoded frame of `n` bytes: one COBS code byte
/// per started 254-byte block, plus the `0x00` delimiter.
pub const fn encoded_len(n: usize) -> usize {
    n + n / 254 + 1 + 1
}

/// Transmit buffer size that fits any frame of [`MAX_FRAME`] bytes.
pub const MAX_ENCODED: usize = encoded_len(MAX_FRAME);

/// Why a frame could not be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EncodeError {
    /// The output buffer is too small for this frame.
    BufferTooSmall,
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("frame does not fit the transmit buffer")
    }
}

impl core::error::Error for EncodeError {}

/// Why a received frame was dropped. The decoder is back in step at the
/// next delimiter in every case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    /// The frame decodes to more than the decoder's buffer holds.
    Oversized,
    /// The COBS encoding is broken (a block cut short by a delimiter).
    Cobs,
    /// The COBS bytes are fine but do not hold a postcard `(topic,
    /// payload)` with nothing after it.
    Malformed,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Oversized => "frame larger than the receive buffer",
            Self::Cobs => "broken COBS encoding",
            Self::Malformed => "frame is not a postcard (topic, payload)",
        })
    }
}

impl core::error::Error for FrameError {}

/// Encodes one frame of `topic` and `payload` into `out`, delimiter
/// included; returns the number of bytes written.
///
/// # Errors
///
/// [`EncodeError::BufferTooSmall`] when `out` is shorter than
/// [`encoded_len`] of the frame; `out` is then left partly written.
pub fn encode(topic: &str, payload: &[u8], out: &mut [u8]) -> Result<usize, EncodeError> {
    let mut w = CobsWriter::new(out)?;
    w.message(topic, payload)?;
    w.finish()
}

/// Encodes one tracked frame: as [`encode`], with `id` and `prev` (the
/// id of the tracked frame sent before it on this connection, `None` for
/// the first) after the payload. An acknowledgement: an empty `topic` and
/// `payload`, `prev` `None`.
///
/// # Errors
///
/// As [`encode`]; the ids take at most 21 bytes more.
pub fn encode_tracked(
    topic: &str,
    payload: &[u8],
    id: Id,
    prev: Option<Id>,
    out: &mut [u8],
) -> Result<usize, EncodeError> {
    let mut w = CobsWriter::new(out)?;
    w.message(topic, payload)?;
    w.id(id)?;
    match prev {
        None => w.extend(&[0])?,
        Some(p) => {
            w.extend(&[1])?;
            w.id(p)?;
        }
    }
    w.finish()
}

/// Whether an encoded frame (its COBS bytes, the delimiter left out)
/// carries an id: a tracked frame or an acknowledgement.
pub(crate) fn carries_id(cobs: &[u8]) -> bool {
    let mut bytes = Unstuff {
        src: cobs,
        at: 0,
        left: 0,
        code: 0,
    };
    let mut field = || {
        let mut n = 0usize;
        for shift in (0..35).step_by(7) {
            let b = bytes.next()?;
            n |= usize::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                // Skip the field's bytes.
                return (n == 0 || bytes.nth(n - 1).is_some()).then_some(());
            }
        }
        None
    };
    field().is_some() && field().is_some() && bytes.next().is_some()
}

/// The bytes COBS stands for, one at a time.
struct Unstuff<'a> {
    src: &'a [u8],
    at: usize,
    /// Data bytes left in the current block.
    left: u8,
    /// The current block's code (0 before the first).
    code: u8,
}

impl Iterator for Unstuff<'_> {
    type Item = u8;

    fn next(&mut self) -> Option<u8> {
        loop {
            if self.left > 0 {
                self.left -= 1;
                let b = *self.src.get(self.at)?;
                self.at += 1;
                return Some(b);
            }
            let code = *self.src.get(self.at).filter(|&&c| c != 0)?;
            self.at += 1;
            // Every block but the first, and but those after a full one,
            // stands for a zero first.
            let zero = self.code != 0 && self.code != 0xff;
            (self.code, self.left) = (code, code - 1);
            if zero {
                return Some(0);
            }
        }
    }
}

/// postcard's varint (LEB128) for a `usize` length.
fn varint(mut n: usize, buf: &mut [u8; 5]) -> &[u8] {
    let mut i = 0;
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            buf[i] = byte;
            return &buf[..=i];
        }
        buf[i] = byte | 0x80;
        i += 1;
        if i == buf.len() - 1 {
            // Lengths here are bounded by slices; a fifth byte is the last
            // a u32 varint can need.
            buf[i] = n as u8;
            return &buf[..=i];
        }
    }
}

/// COBS encoder writing into a slice as bytes come.
struct CobsWriter<'o> {
    out: &'o mut [u8],
    /// Where the current block's code byte goes.
    code_at: usize,
    /// Next free byte.
    pos: usize,
    /// The current block's code: one more than its data bytes.
    code: u8,
}

impl<'o> CobsWriter<'o> {
    fn new(out: &'o mut [u8]) -> Result<Self, EncodeError> {
        if out.is_empty() {
            return Err(EncodeError::BufferTooSmall);
        }
        Ok(Self {
            out,
            code_at: 0,
            pos: 1,
            code: 1,
        })
    }

    fn extend(&mut self, bytes: &[u8]) -> Result<(), EncodeError> {
        for &b in bytes {
            if b == 0 {
                self.close_block()?;
            } else {
                *self
                    .out
                    .get_mut(self.pos)
                    .ok_or(EncodeError::BufferTooSmall)? = b;
                self.pos += 1;
                self.code += 1;
                if self.code == 0xff {
                    self.close_block()?;
                }
            }
        }
        Ok(())
    }

    /// A frame's fields: the topic and the payload, each after its
    /// length as a varint.
    #[inline(always)]
    fn message(&mut self, topic: &str, payload: &[u8]) -> Result<(), EncodeError> {
        let mut var = [0u8; 5];
        self.extend(varint(topic.len(), &mut var))?;
        self.extend(topic.as_bytes())?;
        self.extend(varint(payload.len(), &mut var))?;
        self.extend(payload)
    }

    /// An id: its boot, then its sequence, as varints.
    fn id(&mut self, id: Id) -> Result<(), EncodeError> {
        let mut var = [0u8; 5];
        self.extend(varint(id.boot as usize, &mut var))?;
        self.extend(varint(id.seq as usize, &mut var))
    }

    fn close_block(&mut self) -> Result<(), EncodeError> {
        self.out[self.code_at] = self.code;
        self.code_at = self.pos;
        if self.pos >= self.out.len() {
            return Err(EncodeError::BufferTooSmall);
        }
        self.pos += 1;
        self.code = 1;
        Ok(())
    }

    fn finish(self) -> Result<usize, EncodeError> {
        self.out[self.code_at] = self.code;
        *self
            .out
            .get_mut(self.pos)
            .ok_or(EncodeError::BufferTooSmall)? = 0;
        Ok(self.pos + 1)
    }
}

/// One decoded frame, borrowed from the [`Decoder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'f> {
    /// Topic bytes as sent (validated later by the dispatcher).
    pub topic: &'f [u8],
    /// Payload bytes.
    pub payload: &'f [u8],
    /// The bytes after the tuple: empty, or the ids of a tracked frame
    /// or an acknowledgement (checked when the frame was decoded).
    trailer: &'f [u8],
}

impl Frame<'_> {
    /// The ids of a tracked frame or an acknowledgement.
    pub fn tracked(&self) -> Option<Tracked> {
        match self.trailer {
            [] => None,
            t => trailer(t).ok(),
        }
    }
}

/// The ids a tracked frame or an acknowledgement carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tracked {
    /// The frame's own (an acknowledgement's: the newest it covers).
    pub id: Id,
    /// The tracked frame its sender sent before it on this connection
    /// (`None`: the first; an acknowledgement names none).
    pub prev: Option<Id>,
}

/// What one [`Decoder::push`] call produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'f> {
    /// All input bytes were taken; no frame ended in them.
    NeedMore,
    /// A frame ended; `usize` bytes of the input were taken.
    Frame(Frame<'f>, usize),
    /// A frame ended but was dropped; `usize` bytes of the input were taken.
    Error(FrameError, usize),
}

/// Streaming COBS + postcard frame decoder with a buffer of `N` bytes.
///
/// Feed it bytes in any chunks with [`Decoder::push`]; each call stops at
/// the end of a frame, so the borrowed [`Frame`] can be dispatched before
/// more input is fed. Errors never leave it out of step: after a broken or
/// oversized frame it decodes the next one normally.
#[derive(Debug)]
pub struct Decoder<const N: usize> {
    buf: [u8; N],
    len: usize,
    /// Data bytes left in the current COBS block.
    remaining: u8,
    /// Code byte of the current block (0 before the first one).
    code: u8,
    /// Dropping everything up to the next delimiter (frame too large).
    discarding: bool,
}

impl<const N: usize> Default for Decoder<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Decoder<N> {
    /// An empty decoder.
    pub const fn new() -> Self {
        Self {
            buf: [0; N],
            len: 0,
            remaining: 0,
            code: 0,
            discarding: false,
        }
    }

    /// Forgets a partly received frame (for example after a reconnect).
    pub fn reset(&mut self) {
        self.len = 0;
        self.remaining = 0;
        self.code = 0;
        self.discarding = false;
    }

    /// Takes bytes from `input` up to and including the first frame
    /// delimiter, and reports what ended there.
    pub fn push(&mut self, input: &[u8]) -> Event<'_> {
        for (i, &b) in input.iter().enumerate() {
            if b == 0 {
                let outcome = self.end_frame();
                return match outcome {
                    None => continue,
                    Some(Ok(len)) => match parse(&self.buf[..len]) {
                        Ok(frame) => Event::Frame(frame, i + 1),
                        Err(e) => Event::Error(e, i + 1),
                    },
                    Some(Err(e)) => Event::Error(e, i + 1),
                };
            }
            if self.discarding {
                continue;
            }
            if self.remaining == 0 {
                // A code byte. Every block but the first, and but those
                // after a full 254-byte block, stands for a zero.
                if self.code != 0 && self.code != 0xff && !self.put(0) {
                    continue;
                }
                self.code = b;
                self.remaining = b - 1;
            } else {
                self.remaining -= 1;
                self.put(b);
            }
        }
        Event::NeedMore
    }

    fn put(&mut self, b: u8) -> bool {
        match self.buf.get_mut(self.len) {
            Some(slot) => {
                *slot = b;
                self.len += 1;
                true
            }
            None => {
                self.discarding = true;
                false
            }
        }
    }

    /// A delimiter arrived: `None` for an empty frame (a stray or leading
    /// delimiter), else the decoded length or why the frame is dropped.
    /// Resets for the next frame either way.
    fn end_frame(&mut self) -> Option<Result<usize, FrameError>> {
        let out = if self.discarding {
            Some(Err(FrameError::Oversized))
        } else if self.code == 0 {
            None
        } else if self.remaining != 0 {
            Some(Err(FrameError::Cobs))
        } else {
            Some(Ok(self.len))
        };
        self.reset();
        out
    }
}

/// Splits a decoded frame into its postcard `(topic, payload)` and the
/// id after it, if any.
fn parse(bytes: &[u8]) -> Result<Frame<'_>, FrameError> {
    let Ok(((topic, payload), rest)) = postcard::take_from_bytes::<(&[u8], &[u8])>(bytes) else {
        return Err(FrameError::Malformed);
    };
    if !rest.is_empty() {
        trailer(rest)?;
    }
    Ok(Frame {
        topic,
        payload,
        trailer: rest,
    })
}

/// The ids after a tracked frame's tuple. Out of line: the untracked
/// frame's path stays as short as it was.
#[inline(never)]
fn trailer(rest: &[u8]) -> Result<Tracked, FrameError> {
    match postcard::take_from_bytes::<(u32, u32, Option<(u32, u32)>)>(rest) {
        Ok(((boot, seq, prev), [])) => Ok(Tracked {
            id: Id { boot, seq },
            prev: prev.map(|(boot, seq)| Id { boot, seq }),
        }),
        _ => Err(FrameError::Malformed),
    }
}

#[cfg(test)]
mod tests;
