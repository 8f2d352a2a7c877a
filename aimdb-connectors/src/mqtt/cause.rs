//! Why the last connection attempt failed or the last connection ended.

use core::fmt;

use crate::connect::ConnectFailure;

/// Why the connector last failed to connect or lost its connection:
/// [`Counters::last_error`](super::Counters::last_error), readable from
/// anywhere while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Cause {
    /// Opening the transport failed ([`Connect::failure`](crate::Connect::failure)
    /// says how).
    Connect(ConnectFailure),
    /// The transport opened but CONNACK (or a SUBACK) did not come within
    /// [`Config::connect_timeout`](super::Config::connect_timeout).
    ConnectTimeout,
    /// The broker refused the connection: the CONNACK reason code (0x86 bad
    /// user name or password, 0x87 not authorized, …).
    Refused(u8),
    /// The broker ended the connection with this reason code.
    Rejected(u8),
    /// The connection dropped: the broker closed it (end of stream), no
    /// PINGRESP came in time (keep-alive), or a CONNECT or SUBSCRIBE does
    /// not fit the TX slice.
    Disconnected,
    /// An I/O error on the open connection.
    Transport,
    /// The broker sent an invalid packet.
    Protocol,
    /// The broker stayed silent past
    /// [`Config::ack_timeout`](super::Config::ack_timeout) while
    /// publishes awaited acknowledgement.
    AckTimeout,
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Connect(c) => write!(f, "connect failed: {c}"),
            Self::ConnectTimeout => f.write_str("no CONNACK within the connect timeout"),
            Self::Refused(rc) => write!(f, "broker refused the connection (reason {rc:#04x})"),
            Self::Rejected(rc) => write!(f, "broker ended the connection (reason {rc:#04x})"),
            Self::Disconnected => f.write_str("connection lost (keep-alive timeout or closed)"),
            Self::Transport => f.write_str("I/O error"),
            Self::Protocol => f.write_str("invalid packet from the broker"),
            Self::AckTimeout => {
                f.write_str("broker silent while publishes awaited acknowledgement")
            }
        }
    }
}

impl Cause {
    /// Packs into a non-zero `u32` (0 means none) for an atomic.
    pub(super) fn pack(self) -> u32 {
        let (tag, detail) = match self {
            Self::Connect(c) => (1, c as u32),
            Self::ConnectTimeout => (2, 0),
            Self::Refused(rc) => (3, u32::from(rc)),
            Self::Rejected(rc) => (4, u32::from(rc)),
            Self::Disconnected => (5, 0),
            Self::Transport => (6, 0),
            Self::Protocol => (7, 0),
            Self::AckTimeout => (8, 0),
        };
        tag | detail << 8
    }

    pub(super) fn unpack(v: u32) -> Option<Self> {
        let detail = (v >> 8) as u8;
        Some(match v & 0xff {
            1 => Self::Connect(match detail {
                0 => ConnectFailure::Refused,
                1 => ConnectFailure::TimedOut,
                2 => ConnectFailure::Unreachable,
                3 => ConnectFailure::Tls,
                _ => ConnectFailure::Other,
            }),
            2 => Self::ConnectTimeout,
            3 => Self::Refused(detail),
            4 => Self::Rejected(detail),
            5 => Self::Disconnected,
            6 => Self::Transport,
            7 => Self::Protocol,
            8 => Self::AckTimeout,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cause_round_trips_through_its_packing() {
        let all = [
            Cause::Connect(ConnectFailure::Refused),
            Cause::Connect(ConnectFailure::TimedOut),
            Cause::Connect(ConnectFailure::Unreachable),
            Cause::Connect(ConnectFailure::Tls),
            Cause::Connect(ConnectFailure::Other),
            Cause::ConnectTimeout,
            Cause::Refused(0x86),
            Cause::Rejected(0x8e),
            Cause::Disconnected,
            Cause::Transport,
            Cause::Protocol,
            Cause::AckTimeout,
        ];
        for c in all {
            assert_ne!(c.pack(), 0);
            assert_eq!(Cause::unpack(c.pack()), Some(c));
        }
        assert_eq!(Cause::unpack(0), None);
    }
}
