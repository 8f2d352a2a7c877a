//! The one clock a connector reads: the time now, and a wait until a
//! deadline.
//!
//! Engines take the time as an argument and say when they next need it
//! ([`Engine::poll_at`](crate::engine::Engine::poll_at)); the
//! [runner](crate::runner) reads this clock and sleeps on it — for
//! keep-alives, heartbeats, acknowledgement and connect timeouts and the
//! backoff between attempts alike. Nothing in this crate reads a global
//! time driver, so a host needs none and a firmware passes the one it has:
//!
//! | clock | where | feature |
//! | --- | --- | --- |
//! | [`EmbassyClock`] | embassy-time's driver (the firmware's) | `embassy-time` |
//! | `tokio_io::TokioClock` | tokio's timer (paused time in tests too) | `tokio` |
//!
//! A clock of one's own (a board timer, a simulation) implements
//! [`Clock`]: a monotonic [`Instant`] and a future that completes at or
//! after a given one.

use core::future::Future;
use core::ops::Add;
use core::time::Duration;

/// A point in time on a [`Clock`]: microseconds since the clock's own
/// start. Only differences mean anything, and only between instants of
/// the same clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Instant(u64);

impl Instant {
    /// The clock's start.
    pub const ZERO: Self = Self(0);
    /// Never: a deadline that does not come.
    pub const MAX: Self = Self(u64::MAX);

    /// `us` microseconds after the clock's start.
    pub const fn from_micros(us: u64) -> Self {
        Self(us)
    }

    /// Microseconds since the clock's start.
    pub const fn as_micros(self) -> u64 {
        self.0
    }

    /// How long after `earlier` this is; zero if it is not later.
    pub const fn saturating_duration_since(self, earlier: Self) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }
}

/// `self + d`, saturating at [`Instant::MAX`] (a deadline too far to
/// represent does not come).
impl Add<Duration> for Instant {
    type Output = Self;
    fn add(self, d: Duration) -> Self {
        // In u64 (not `as_micros`' u128, which costs a firmware 128-bit
        // arithmetic routines).
        let us = d
            .as_secs()
            .saturating_mul(1_000_000)
            .saturating_add(u64::from(d.subsec_micros()));
        Self(self.0.saturating_add(us))
    }
}

/// What a connector keeps time with.
///
/// `sleep_until` takes `&self`, so the runner can wait on several
/// deadlines at once (an engine's next timer and a stop request, say).
///
/// # Cancel safety
///
/// The future of [`Clock::sleep_until`] may be dropped at any time; a
/// new one for the same deadline must complete as the first would have.
// `async fn` in a public trait: see `Connect` for the `Send` story (a
// concrete clock's future is `Send` where its type is).
pub trait Clock {
    /// The time now.
    fn now(&self) -> Instant;
    /// Completes at or after `at` (at once if `at` has passed; never for
    /// [`Instant::MAX`]).
    fn sleep_until(&self, at: Instant) -> impl Future<Output = ()>;
}

impl<K: Clock + ?Sized> Clock for &K {
    fn now(&self) -> Instant {
        (**self).now()
    }
    fn sleep_until(&self, at: Instant) -> impl Future<Output = ()> {
        (**self).sleep_until(at)
    }
}

/// A clock that stands still and never wakes: for a connection that
/// keeps no time (`Framed::run`: no heartbeat, no timeouts).
#[derive(Debug, Clone, Copy, Default)]
pub struct Frozen;

impl Clock for Frozen {
    fn now(&self) -> Instant {
        Instant::ZERO
    }
    async fn sleep_until(&self, _at: Instant) {
        core::future::pending::<()>().await;
    }
}

/// embassy-time's clock: the firmware's time driver (feature
/// `embassy-time`). Instants are embassy's, in microseconds.
#[cfg(feature = "embassy-time")]
#[derive(Debug, Clone, Copy, Default)]
pub struct EmbassyClock;

#[cfg(feature = "embassy-time")]
impl Clock for EmbassyClock {
    fn now(&self) -> Instant {
        Instant(embassy_time::Instant::now().as_micros())
    }
    async fn sleep_until(&self, at: Instant) {
        if at == Instant::MAX {
            return core::future::pending().await;
        }
        embassy_time::Timer::at(embassy_time::Instant::from_micros(at.0)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adding_saturates_and_differences_do_not_go_negative() {
        let t = Instant::from_micros(1_000);
        assert_eq!((t + Duration::from_millis(2)).as_micros(), 3_000);
        assert_eq!(t + Duration::MAX, Instant::MAX);
        assert_eq!(Instant::MAX + Duration::from_secs(1), Instant::MAX);
        assert_eq!(t.saturating_duration_since(Instant::MAX), Duration::ZERO);
        assert_eq!(
            (t + Duration::from_micros(7)).saturating_duration_since(t),
            Duration::from_micros(7)
        );
    }
}
