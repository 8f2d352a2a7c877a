//! Link state and presence: whether a connector's peer is there.
//!
//! A connector reports its link as a [`LinkState`] written to a record the
//! application gives it (a `Latest<LinkState>` record implements
//! [`record::Sink<LinkState>`](crate::record::Sink)). So a task that should
//! act when the link comes up or goes down awaits that record's reader like
//! any other, without polling counters, and the same record can be routed
//! out: linked to an MQTT route with the [`PresenceJson`] codec it becomes a
//! presence topic.
//!
//! # The presence convention
//!
//! A node's presence is one retained topic (by convention
//! `<prefix>/presence`: `status` is too often an application's own topic)
//! whose payload is a small JSON object:
//!
//! ```text
//! {"status":"online","seq":7}
//! {"status":"offline","seq":7,"cause":"lost"}
//! ```
//!
//! - `status` is `online`, `offline` or `connecting`;
//! - `seq` is the **birth sequence**: it grows by one at every new
//!   connection (every birth), and an `offline` carries the `seq` of the
//!   birth it ends. A consumer takes every `online`, and an `offline` only
//!   when its `seq` is that of the `online` it holds
//!   ([`LinkState::applies_after`]): an `offline` with another `seq`
//!   belongs to a connection a newer birth already replaced;
//! - `cause` (only on `offline`) says why, see [`Cause`].
//!
//! JSON parsers accept the payload with trailing spaces, which an MQTT
//! will may carry (its length is fixed when the connection opens).
#![forbid(unsafe_code)]

use core::fmt;

use crate::codec::{Encode, EncodeError};

/// Where a link stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "remote", derive(postcard_schema::Schema))]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Not up yet: the connector is opening the transport or waiting to
    /// hear from its peer.
    #[default]
    Connecting,
    /// Up: the peer is there.
    Online,
    /// Down, for [`LinkState::cause`].
    Offline,
}

/// Why a link went down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "remote", derive(postcard_schema::Schema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Cause {
    /// Stopped on purpose (a graceful stop).
    Stopped,
    /// The peer closed the connection (end of stream, MQTT DISCONNECT).
    Closed,
    /// The transport failed (a read or write error).
    Io,
    /// The peer stayed silent past its timeout (framed heartbeat timeout,
    /// MQTT keep-alive or acknowledgement timeout).
    Silent,
    /// The peer broke the protocol.
    Protocol,
    /// Gone without a goodbye, as the broker saw it: the payload of an
    /// MQTT will.
    Lost,
}

impl Cause {
    /// The name used in the presence payload.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Stopped => "stopped",
            Self::Closed => "closed",
            Self::Io => "io",
            Self::Silent => "silent",
            Self::Protocol => "protocol",
            Self::Lost => "lost",
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A connector's link: its [`Status`], the birth sequence of the current
/// (or last) connection, and why it went down.
///
/// Serialized (serde) as the presence object of the [module
/// docs](self); [`PresenceJson`] writes the same bytes without serde on
/// `no_std`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "remote", derive(postcard_schema::Schema))]
pub struct LinkState {
    /// Up, down or on its way.
    pub status: Status,
    /// Birth sequence: grows by one with each connection that came up;
    /// 0 before the first.
    pub seq: u64,
    /// Why the link is down; `None` unless [`Status::Offline`].
    #[serde(default)]
    pub cause: Option<Cause>,
}

/// Human-readable formats (JSON) leave out a `cause` of `None`, as the
/// presence convention writes it; compact ones (postcard) carry every
/// field, since they have no field names to tell one left out.
impl serde::Serialize for LinkState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let short = s.is_human_readable() && self.cause.is_none();
        let mut st = s.serialize_struct("LinkState", if short { 2 } else { 3 })?;
        st.serialize_field("status", &self.status)?;
        st.serialize_field("seq", &self.seq)?;
        if !short {
            st.serialize_field("cause", &self.cause)?;
        }
        st.end()
    }
}

impl LinkState {
    /// Opening a connection: `seq` is the sequence its birth will carry.
    pub const fn connecting(seq: u64) -> Self {
        Self {
            status: Status::Connecting,
            seq,
            cause: None,
        }
    }

    /// Up, with birth sequence `seq`.
    pub const fn online(seq: u64) -> Self {
        Self {
            status: Status::Online,
            seq,
            cause: None,
        }
    }

    /// Down: the connection of birth `seq` ended for `cause`.
    pub const fn offline(seq: u64, cause: Cause) -> Self {
        Self {
            status: Status::Offline,
            seq,
            cause: Some(cause),
        }
    }

    /// Whether the link is up.
    pub const fn is_online(&self) -> bool {
        matches!(self.status, Status::Online)
    }

    /// Whether a consumer that holds `current` should take `self`, by the
    /// convention's rule: a birth (`online`) or `connecting` always; an
    /// `offline` only if it ends the birth `current` reports (same `seq`)
    /// or the link is not up anyway. A death of an older connection that
    /// arrives after a newer birth is stale. Births are not compared, so a
    /// sequence that restarts (a device that cannot keep it across a
    /// reboot) is still taken.
    pub fn applies_after(&self, current: &LinkState) -> bool {
        match self.status {
            Status::Online | Status::Connecting => true,
            Status::Offline => !current.is_online() || current.seq == self.seq,
        }
    }
}

/// The presence payload codec: [`LinkState`] as the JSON object of the
/// [module docs](self), written without allocation on `no_std`
/// (the same bytes serde's JSON writes; decode on hosts with
/// `codec::Json`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PresenceJson;

impl Encode<LinkState> for PresenceJson {
    fn encode(&self, value: &LinkState, buf: &mut [u8]) -> Result<usize, EncodeError> {
        // By hand rather than with `core::fmt`: on a Cortex-M the
        // formatting machinery costs kilobytes of flash.
        let mut w = Cursor { buf, len: 0 };
        let status: &[u8] = match value.status {
            Status::Connecting => b"connecting",
            Status::Online => b"online",
            Status::Offline => b"offline",
        };
        w.put(br#"{"status":""#)?;
        w.put(status)?;
        w.put(br#"","seq":"#)?;
        w.put_u64(value.seq)?;
        if let Some(c) = value.cause {
            w.put(br#","cause":""#)?;
            w.put(c.as_str().as_bytes())?;
            w.put(b"\"")?;
        }
        w.put(b"}")?;
        Ok(w.len)
    }
}

/// The longest [`PresenceJson`] payload (an offline with a 20-digit `seq`).
pub const PRESENCE_MAX: usize = 72;

/// Writes JSON text into a buffer without `core::fmt`.
pub(crate) struct Cursor<'a> {
    pub(crate) buf: &'a mut [u8],
    pub(crate) len: usize,
}

impl Cursor<'_> {
    pub(crate) fn put(&mut self, s: &[u8]) -> Result<(), EncodeError> {
        let end = self.len + s.len();
        self.buf
            .get_mut(self.len..end)
            .ok_or(EncodeError::BufferTooSmall)?
            .copy_from_slice(s);
        self.len = end;
        Ok(())
    }

    /// `n` in decimal.
    pub(crate) fn put_u64(&mut self, mut n: u64) -> Result<(), EncodeError> {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.put(&digits[at..])
    }

    /// `s` as a JSON string, quotes included.
    #[cfg(feature = "remote")]
    pub(crate) fn put_str(&mut self, s: &str) -> Result<(), EncodeError> {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        self.put(b"\"")?;
        for &b in s.as_bytes() {
            match b {
                b'"' => self.put(b"\\\"")?,
                b'\\' => self.put(b"\\\\")?,
                0..=0x1f => self.put(&[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[usize::from(b >> 4)],
                    HEX[usize::from(b & 15)],
                ])?,
                _ => self.put(&[b])?,
            }
        }
        self.put(b"\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &LinkState) -> std::string::String {
        let mut buf = [0u8; PRESENCE_MAX];
        let n = PresenceJson.encode(s, &mut buf).unwrap();
        std::string::String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    #[test]
    fn presence_payloads_read_as_documented() {
        assert_eq!(
            text(&LinkState::online(7)),
            r#"{"status":"online","seq":7}"#
        );
        assert_eq!(
            text(&LinkState::offline(7, Cause::Lost)),
            r#"{"status":"offline","seq":7,"cause":"lost"}"#
        );
        assert_eq!(
            text(&LinkState::connecting(0)),
            r#"{"status":"connecting","seq":0}"#
        );
    }

    #[test]
    fn the_longest_payload_fits_presence_max() {
        let longest = LinkState::offline(u64::MAX, Cause::Protocol);
        let mut buf = [0u8; PRESENCE_MAX];
        assert!(PresenceJson.encode(&longest, &mut buf).is_ok());
        let mut small = [0u8; 20];
        assert_eq!(
            PresenceJson.encode(&longest, &mut small),
            Err(EncodeError::BufferTooSmall)
        );
    }

    #[test]
    fn a_death_of_an_older_birth_is_stale() {
        let current = LinkState::online(8);
        assert!(!LinkState::offline(7, Cause::Lost).applies_after(&current));
        assert!(LinkState::offline(8, Cause::Lost).applies_after(&current));
        assert!(LinkState::offline(7, Cause::Lost).applies_after(&LinkState::offline(8, Cause::Io)));
        // A restarted sequence is a birth all the same.
        assert!(LinkState::online(1).applies_after(&current));
    }

    #[test]
    fn postcard_carries_every_field() {
        for s in [LinkState::online(3), LinkState::offline(3, Cause::Io)] {
            let mut buf = [0u8; 16];
            let bytes = postcard::to_slice(&s, &mut buf).unwrap();
            assert_eq!(postcard::from_bytes::<LinkState>(bytes).unwrap(), s);
        }
    }

    #[cfg(feature = "json")]
    #[test]
    fn serde_json_writes_and_reads_the_same_bytes() {
        for s in [
            LinkState::online(3),
            LinkState::offline(3, Cause::Silent),
            LinkState::connecting(4),
        ] {
            assert_eq!(serde_json::to_string(&s).unwrap(), text(&s));
            let padded = std::format!("{}        ", text(&s));
            assert_eq!(serde_json::from_str::<LinkState>(&padded).unwrap(), s);
        }
    }
}
