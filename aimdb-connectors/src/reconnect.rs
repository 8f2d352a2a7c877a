//! Reconnect policy, shared by the connectors that open their own
//! connections ([`Mqtt::run`](crate::mqtt::Mqtt::run) and
//! [`Framed::run_reconnecting`](crate::framed::Framed::run_reconnecting)):
//! whether to try again, how long to wait first, and why a connector
//! stopped trying.

use core::fmt;

/// Whether a dropped or failed connection is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reconnect {
    /// One connection attempt; a failure or a drop ends the run.
    Never,
    /// Retry, giving up after this many failed attempts in a row (a
    /// successful connection resets the count).
    Attempts(u32),
    /// Retry for ever.
    Always,
}

impl Reconnect {
    /// Whether another attempt may follow `failures` consecutive failed
    /// ones.
    pub const fn allows(self, failures: u32) -> bool {
        match self {
            Self::Never => false,
            Self::Attempts(n) => failures < n,
            Self::Always => true,
        }
    }
}

/// Bounded exponential backoff between connection attempts.
///
/// The wait before the `k`-th attempt after a drop is `min_ms · 2^(k-1)`,
/// capped at `max_ms`. The first reconnect also waits `min_ms`, so a broker
/// that accepts and then drops at once is not hammered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// First wait, in milliseconds.
    pub min_ms: u32,
    /// Longest wait, in milliseconds.
    pub max_ms: u32,
}

impl Backoff {
    /// 100 ms doubling up to 5 s.
    pub const DEFAULT: Self = Self {
        min_ms: 100,
        max_ms: 5_000,
    };

    /// The wait before attempt number `attempt` (1 = the first retry).
    pub const fn delay_ms(&self, attempt: u32) -> u32 {
        let shift = if attempt == 0 { 0 } else { attempt - 1 };
        // Past 31 doublings any u32 minimum is saturated anyway.
        let factor = if shift >= 31 { u32::MAX } else { 1u32 << shift };
        let d = self.min_ms.saturating_mul(factor);
        let max = if self.max_ms < self.min_ms {
            self.min_ms
        } else {
            self.max_ms
        };
        if d > max {
            max
        } else {
            d
        }
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Why a reconnecting run ended: the [`Reconnect`] policy allows no
/// further attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stopped {
    /// The connection dropped and reconnecting is disabled
    /// ([`Reconnect::Never`]).
    Disconnected,
    /// This many connection attempts in a row failed.
    ConnectFailed(u32),
}

impl fmt::Display for Stopped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Disconnected => f.write_str("connection dropped; reconnect disabled"),
            Self::ConnectFailed(n) => write!(f, "{n} connection attempt(s) failed in a row"),
        }
    }
}
impl core::error::Error for Stopped {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_and_caps() {
        let b = Backoff::DEFAULT;
        let waits: [u32; 8] = core::array::from_fn(|i| b.delay_ms(i as u32 + 1));
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        assert_eq!(b.delay_ms(0), 100);
        assert_eq!(b.delay_ms(u32::MAX), 5000);
    }

    #[test]
    fn max_below_min_means_min() {
        let b = Backoff {
            min_ms: 300,
            max_ms: 10,
        };
        assert_eq!(b.delay_ms(5), 300);
    }

    #[test]
    fn policy() {
        assert!(!Reconnect::Never.allows(0));
        assert!(Reconnect::Attempts(2).allows(1));
        assert!(!Reconnect::Attempts(2).allows(2));
        assert!(Reconnect::Always.allows(u32::MAX));
    }
}
