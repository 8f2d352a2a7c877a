//! Reconnect policy, shared by the connectors that open their own
//! connections ([`Mqtt::run`](crate::mqtt::Mqtt::run) and
//! [`Framed::run_reconnecting`](crate::framed::Framed::run_reconnecting)):
//! whether to try again, how long to wait first, and why a connector
//! stopped trying.

use core::fmt;
use core::time::Duration;

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
/// The wait before the `k`-th attempt after a drop is `min · 2^(k-1)`,
/// capped at `max`. The first reconnect also waits `min`, so a broker
/// that accepts and then drops at once is not hammered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// First wait.
    pub min: Duration,
    /// Longest wait (taken as `min` if it is shorter).
    pub max: Duration,
}

impl Backoff {
    /// 100 ms doubling up to 5 s.
    pub const DEFAULT: Self = Self {
        min: Duration::from_millis(100),
        max: Duration::from_secs(5),
    };

    /// The wait before attempt number `attempt` (1 = the first retry).
    pub fn delay(&self, attempt: u32) -> Duration {
        let shift = attempt.saturating_sub(1);
        // Past 31 doublings any minimum is past any maximum anyway.
        let factor = 1u32.checked_shl(shift).unwrap_or(u32::MAX);
        self.min.saturating_mul(factor).min(self.max.max(self.min))
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Why a reconnecting run ended: the [`Reconnect`] policy allows no
/// further attempt, or it was asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stopped {
    /// The connection dropped and reconnecting is disabled
    /// ([`Reconnect::Never`]).
    Disconnected,
    /// This many connection attempts in a row failed.
    ConnectFailed(u32),
    /// Stopped on purpose: the stop future given to the run completed.
    Requested,
}

impl fmt::Display for Stopped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Disconnected => f.write_str("connection dropped; reconnect disabled"),
            Self::ConnectFailed(n) => write!(f, "{n} connection attempt(s) failed in a row"),
            Self::Requested => f.write_str("stopped on request"),
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
        let waits: [u128; 8] = core::array::from_fn(|i| b.delay(i as u32 + 1).as_millis());
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        assert_eq!(b.delay(0), Duration::from_millis(100));
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(5));
    }

    #[test]
    fn max_below_min_means_min() {
        let b = Backoff {
            min: Duration::from_millis(300),
            max: Duration::from_millis(10),
        };
        assert_eq!(b.delay(5), Duration::from_millis(300));
    }

    #[test]
    fn policy() {
        assert!(!Reconnect::Never.allows(0));
        assert!(Reconnect::Attempts(2).allows(1));
        assert!(!Reconnect::Attempts(2).allows(2));
        assert!(Reconnect::Always.allows(u32::MAX));
    }
}
