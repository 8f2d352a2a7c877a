//! Encoders and decoders between typed values and payload bytes.
//!
//! The default path encodes into a borrowed scratch slice and returns the
//! length ([`Encode`]), so nothing is allocated; [`EncodeOwned`] (feature
//! `alloc`) returns a fresh `Vec<u8>` for transports that want ownership.
//! [`Postcard`] is the default format; [`Json`] (feature `json`) is for
//! hosts. A too-small buffer and malformed input are distinct errors.
//!
//! Plain functions are codecs too: `fn(&T, &mut [u8]) -> Result<usize,
//! EncodeError>` implements [`Encode<T>`] and `fn(&[u8]) -> Result<T,
//! DecodeError>` implements [`Decode<T>`].
#![forbid(unsafe_code)]

use core::fmt;

/// Encoding failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EncodeError {
    /// The output buffer is too small for this value.
    BufferTooSmall,
    /// The value cannot be represented in this format.
    Unsupported,
}

/// Decoding failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// The bytes are not a valid encoding of the type.
    Malformed,
    /// The input ended before the value was complete.
    Truncated,
    /// The value decoded but bytes were left over.
    TrailingBytes,
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::BufferTooSmall => "encode buffer too small",
            Self::Unsupported => "value not representable in this format",
        })
    }
}
impl core::error::Error for EncodeError {}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Malformed => "malformed payload",
            Self::Truncated => "truncated payload",
            Self::TrailingBytes => "trailing bytes after payload",
        })
    }
}
impl core::error::Error for DecodeError {}

/// Encodes `T` into a borrowed buffer.
pub trait Encode<T: ?Sized> {
    /// Writes `value` at the start of `buf`, returning the length written.
    fn encode(&self, value: &T, buf: &mut [u8]) -> Result<usize, EncodeError>;
}

/// Decodes `T` from bytes.
pub trait Decode<T> {
    /// Decodes a whole payload (trailing bytes are an error).
    fn decode(&self, bytes: &[u8]) -> Result<T, DecodeError>;
}

/// Encodes `T` into a freshly allocated buffer (one allocation per value).
#[cfg(feature = "alloc")]
pub trait EncodeOwned<T: ?Sized> {
    /// Encodes `value` into a new `Vec`.
    fn encode_owned(&self, value: &T) -> Result<alloc::vec::Vec<u8>, EncodeError>;
}

impl<T: ?Sized> Encode<T> for fn(&T, &mut [u8]) -> Result<usize, EncodeError> {
    fn encode(&self, value: &T, buf: &mut [u8]) -> Result<usize, EncodeError> {
        self(value, buf)
    }
}

impl<T> Decode<T> for fn(&[u8]) -> Result<T, DecodeError> {
    fn decode(&self, bytes: &[u8]) -> Result<T, DecodeError> {
        self(bytes)
    }
}

/// Bytes passed through unchanged: a `heapless::Vec<u8, N>` is its own
/// payload. For a record that carries messages a node does not read, such
/// as a gateway forwarding remote-access requests and answers between two
/// links. A payload over `N` bytes does not decode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Raw;

impl<const N: usize> Encode<heapless::Vec<u8, N>> for Raw {
    fn encode(&self, value: &heapless::Vec<u8, N>, buf: &mut [u8]) -> Result<usize, EncodeError> {
        buf.get_mut(..value.len())
            .ok_or(EncodeError::BufferTooSmall)?
            .copy_from_slice(value);
        Ok(value.len())
    }
}

impl<const N: usize> Decode<heapless::Vec<u8, N>> for Raw {
    fn decode(&self, bytes: &[u8]) -> Result<heapless::Vec<u8, N>, DecodeError> {
        heapless::Vec::from_slice(bytes).map_err(|_| DecodeError::Malformed)
    }
}

/// The postcard wire format (compact, varint-based, `no_std`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Postcard;

fn postcard_encode_err(e: postcard::Error) -> EncodeError {
    match e {
        postcard::Error::SerializeBufferFull => EncodeError::BufferTooSmall,
        _ => EncodeError::Unsupported,
    }
}

impl<T: serde::Serialize + ?Sized> Encode<T> for Postcard {
    fn encode(&self, value: &T, buf: &mut [u8]) -> Result<usize, EncodeError> {
        postcard::serialize_with_flavor(value, Scratch { buf, len: 0 }).map_err(postcard_encode_err)
    }
}

/// postcard's output into a scratch slice, as `postcard::to_slice` does,
/// except for short runs: postcard writes each varint into a stack buffer
/// a byte at a time and then extends the output with it. `to_slice`'s
/// flavor copies that with `memcpy`, whose overlapping 2- and 4-byte loads
/// of bytes just stored one by one cannot be forwarded from the store
/// buffer (a stall of several ns per field on x86); copied a byte at a
/// time, every load matches its store.
struct Scratch<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl postcard::ser_flavors::Flavor for Scratch<'_> {
    type Output = usize;

    #[inline(always)]
    fn try_push(&mut self, b: u8) -> postcard::Result<()> {
        let slot = self
            .buf
            .get_mut(self.len)
            .ok_or(postcard::Error::SerializeBufferFull)?;
        *slot = b;
        self.len += 1;
        Ok(())
    }

    #[inline(always)]
    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        // A varint is at most 10 bytes.
        if data.len() <= 10 {
            return data.iter().try_for_each(|&b| self.try_push(b));
        }
        let end = self.len + data.len();
        self.buf
            .get_mut(self.len..end)
            .ok_or(postcard::Error::SerializeBufferFull)?
            .copy_from_slice(data);
        self.len = end;
        Ok(())
    }

    fn finalize(self) -> postcard::Result<usize> {
        Ok(self.len)
    }
}

impl Postcard {
    /// Decodes a whole payload (trailing bytes are an error) into a value
    /// that may borrow from it (`&str`, `&[u8]` fields).
    pub fn decode_borrowed<'de, T: serde::Deserialize<'de>>(
        &self,
        bytes: &'de [u8],
    ) -> Result<T, DecodeError> {
        match postcard::take_from_bytes::<T>(bytes) {
            Ok((v, [])) => Ok(v),
            Ok(_) => Err(DecodeError::TrailingBytes),
            Err(postcard::Error::DeserializeUnexpectedEnd) => Err(DecodeError::Truncated),
            Err(_) => Err(DecodeError::Malformed),
        }
    }
}

impl<T: serde::de::DeserializeOwned> Decode<T> for Postcard {
    fn decode(&self, bytes: &[u8]) -> Result<T, DecodeError> {
        self.decode_borrowed(bytes)
    }
}

#[cfg(feature = "alloc")]
impl<T: serde::Serialize + ?Sized> EncodeOwned<T> for Postcard {
    fn encode_owned(&self, value: &T) -> Result<alloc::vec::Vec<u8>, EncodeError> {
        postcard::to_allocvec(value).map_err(postcard_encode_err)
    }
}

/// JSON (hosts; feature `json`), for brokers and tools that speak it.
///
/// ```
/// use aimdb_core::codec::{Decode, Encode, Json};
/// #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
/// struct Setpoint {
///     room: u8,
///     celsius: f32,
/// }
/// let mut buf = [0u8; 64];
/// let n = Json.encode(&Setpoint { room: 2, celsius: 21.5 }, &mut buf).unwrap();
/// assert_eq!(&buf[..n], br#"{"room":2,"celsius":21.5}"#);
/// let back: Setpoint = Json.decode(&buf[..n]).unwrap();
/// assert_eq!(back, Setpoint { room: 2, celsius: 21.5 });
/// // Too small a buffer is an error, never a truncation.
/// assert!(Json.encode(&Setpoint { room: 2, celsius: 21.5 }, &mut buf[..8]).is_err());
/// ```
#[cfg(feature = "json")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Json;

#[cfg(feature = "json")]
impl<T: serde::Serialize + ?Sized> Encode<T> for Json {
    fn encode(&self, value: &T, buf: &mut [u8]) -> Result<usize, EncodeError> {
        let cap = buf.len();
        let mut w: &mut [u8] = buf;
        match serde_json::to_writer(&mut w, value) {
            Ok(()) => Ok(cap - w.len()),
            Err(e) if e.is_io() => Err(EncodeError::BufferTooSmall),
            Err(_) => Err(EncodeError::Unsupported),
        }
    }
}

#[cfg(feature = "json")]
impl<T: serde::de::DeserializeOwned> Decode<T> for Json {
    fn decode(&self, bytes: &[u8]) -> Result<T, DecodeError> {
        serde_json::from_slice(bytes).map_err(|e| {
            if e.is_eof() {
                DecodeError::Truncated
            } else {
                DecodeError::Malformed
            }
        })
    }
}

#[cfg(feature = "json")]
impl<T: serde::Serialize + ?Sized> EncodeOwned<T> for Json {
    fn encode_owned(&self, value: &T) -> Result<alloc::vec::Vec<u8>, EncodeError> {
        serde_json::to_vec(value).map_err(|_| EncodeError::Unsupported)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Reading {
        id: u16,
        celsius: f32,
    }

    #[test]
    fn postcard_roundtrip_and_errors() {
        let r = Reading {
            id: 7,
            celsius: 21.5,
        };
        let mut buf = [0u8; 16];
        let n = Postcard.encode(&r, &mut buf).unwrap();
        let back: Reading = Postcard.decode(&buf[..n]).unwrap();
        assert_eq!(back, r);
        assert_eq!(
            Postcard.encode(&r, &mut buf[..2]),
            Err(EncodeError::BufferTooSmall)
        );
        assert_eq!(
            Decode::<Reading>::decode(&Postcard, &buf[..n - 1]),
            Err(DecodeError::Truncated)
        );
        let mut long = [0u8; 17];
        long[..n].copy_from_slice(&buf[..n]);
        assert_eq!(
            Decode::<Reading>::decode(&Postcard, &long[..n + 1]),
            Err(DecodeError::TrailingBytes)
        );
        // 0xff.. is not a valid varint for the u16 id.
        assert_eq!(
            Decode::<Reading>::decode(&Postcard, &[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]),
            Err(DecodeError::Malformed)
        );
    }

    /// The scratch flavor writes what `postcard::to_slice` writes, for
    /// short runs copied a byte at a time (varints) and long ones copied
    /// whole (a string's bytes), and a full buffer is an error in both.
    #[test]
    fn postcard_scratch_matches_to_slice() {
        #[derive(serde::Serialize)]
        struct Mixed<'a> {
            small: u8,
            wide: u64,
            name: &'a str,
            tag: &'a str,
        }
        let v = Mixed {
            small: 3,
            wide: u64::MAX - 1,
            name: "a name longer than any varint",
            tag: "ok",
        };
        let mut ours = [0x5au8; 64];
        let mut reference = [0x5au8; 64];
        let n = Postcard.encode(&v, &mut ours).unwrap();
        let expected = postcard::to_slice(&v, &mut reference).unwrap();
        assert_eq!(&ours[..n], expected);
        for short in [0, 1, 5, 11, 12, n - 1] {
            assert_eq!(
                Postcard.encode(&v, &mut ours[..short]),
                Err(EncodeError::BufferTooSmall),
                "{short} bytes"
            );
        }
        assert_eq!(Postcard.encode(&v, &mut ours[..n]), Ok(n));
    }

    #[derive(serde::Serialize, Debug)]
    struct Varied {
        flag: bool,
        small: u8,
        signed: i32,
        wide: u64,
        real: f32,
        bytes: std::vec::Vec<u8>,
        text: std::string::String,
        maybe: Option<u16>,
        pair: (i64, [u8; 3]),
    }

    proptest::proptest! {
        /// For any value and any buffer length, `Postcard::encode` (our
        /// flavor) and `postcard::to_slice` agree: the same bytes when it
        /// fits, `BufferTooSmall` exactly when `to_slice` reports a full
        /// buffer. Strings and byte arrays of 0..40 bytes cross the
        /// flavor's 10-byte split between byte-wise and whole copies.
        #[test]
        fn postcard_scratch_agrees_with_to_slice(
            flag: bool,
            small: u8,
            signed: i32,
            wide: u64,
            real: f32,
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..40),
            text in "[a-z\\u{e9}\\u{1F600}]{0,20}",
            maybe: Option<u16>,
            pair: (i64, [u8; 3]),
            len in 0usize..120,
        ) {
            let v = Varied { flag, small, signed, wide, real, bytes, text, maybe, pair };
            let mut ours = [0x5au8; 120];
            let mut reference = [0x5au8; 120];
            let got = Postcard.encode(&v, &mut ours[..len]);
            match postcard::to_slice(&v, &mut reference[..len]) {
                Ok(expected) => {
                    let n = got.expect("fits for to_slice, so for ours");
                    proptest::prop_assert_eq!(&ours[..n], &*expected);
                }
                Err(postcard::Error::SerializeBufferFull) => {
                    proptest::prop_assert_eq!(got, Err(EncodeError::BufferTooSmall));
                }
                Err(e) => proptest::prop_assert!(false, "to_slice: {e:?}"),
            }
        }
    }

    #[cfg(feature = "json")]
    #[test]
    fn json_roundtrip_and_errors() {
        let r = Reading {
            id: 7,
            celsius: 21.5,
        };
        let mut buf = [0u8; 64];
        let n = Json.encode(&r, &mut buf).unwrap();
        assert_eq!(&buf[..n], br#"{"id":7,"celsius":21.5}"#);
        assert_eq!(Json.decode(&buf[..n]), Ok(r));
        assert_eq!(
            Json.encode(
                &Reading {
                    id: 1,
                    celsius: 0.0
                },
                &mut buf[..4]
            ),
            Err(EncodeError::BufferTooSmall)
        );
        assert_eq!(
            Decode::<Reading>::decode(&Json, b"{\"id\":"),
            Err(DecodeError::Truncated)
        );
        assert_eq!(
            Decode::<Reading>::decode(&Json, b"[1,2,x]"),
            Err(DecodeError::Malformed)
        );
    }
}

#[cfg(test)]
mod raw_tests {
    use super::*;

    #[test]
    fn raw_passes_bytes_through_and_refuses_what_does_not_fit() {
        let v: heapless::Vec<u8, 4> = heapless::Vec::from_slice(&[1, 2, 3]).unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(Raw.encode(&v, &mut buf), Ok(3));
        assert_eq!(&buf[..3], &[1, 2, 3]);
        assert_eq!(
            Raw.encode(&v, &mut [0u8; 2]),
            Err(EncodeError::BufferTooSmall)
        );
        let back: heapless::Vec<u8, 4> = Raw.decode(&buf[..3]).unwrap();
        assert_eq!(back, v);
        let over: Result<heapless::Vec<u8, 4>, _> = Raw.decode(&[0; 5]);
        assert_eq!(over, Err(DecodeError::Malformed));
    }
}
