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
///
/// A wait is converted to ticks in 32-bit arithmetic, at most
/// [`u32::MAX`]` / (TICK_HZ / gcd(TICK_HZ, 10⁶))` microseconds at a time
/// (over an hour at 1 kHz or 1 MHz ticks, 8.3 s at 32.768 kHz; a longer
/// wait wakes once per step): a firmware links no 64-bit division for it.
#[cfg(feature = "embassy-time")]
#[derive(Debug, Clone, Copy, Default)]
pub struct EmbassyClock;

#[cfg(feature = "embassy-time")]
impl EmbassyClock {
    /// Ticks per microsecond as a reduced fraction `NUM / DEN` (a tick
    /// rate whose fraction does not fit 32 bits fails to compile).
    const NUM: u32 = fit(embassy_time::TICK_HZ / gcd(embassy_time::TICK_HZ, 1_000_000));
    const DEN: u32 = fit(1_000_000 / gcd(embassy_time::TICK_HZ, 1_000_000));
}

#[cfg(feature = "embassy-time")]
impl Clock for EmbassyClock {
    // Out of line: the runner reads the clock in several places, each a
    // copy of the driver call and the conversion otherwise.
    #[inline(never)]
    fn now(&self) -> Instant {
        let ticks = embassy_time::Instant::now().as_ticks();
        Instant(mul_u64_u32(ticks, Self::DEN) / u64::from(Self::NUM))
    }
    async fn sleep_until(&self, at: Instant) {
        if at == Instant::MAX {
            return core::future::pending().await;
        }
        loop {
            let now = self.now();
            if now >= at {
                return;
            }
            let ticks = ticks_ceil(at.0 - now.0, Self::NUM, Self::DEN);
            embassy_time::Timer::after_ticks(u64::from(ticks)).await;
        }
    }
}

/// `a * b`, wrapping, as embassy's `as_micros` takes it. The clock is read
/// every round, and a Cortex-M0 has no 64-bit multiply (its library
/// routine costs about 40 instructions a call): there a factor of at most
/// 16 bits goes through [`mul_by_halves`].
#[cfg(feature = "embassy-time")]
#[inline(always)]
fn mul_u64_u32(a: u64, b: u32) -> u64 {
    if cfg!(all(
        target_feature = "thumb-mode",
        not(target_feature = "thumb2")
    )) && b <= 0xffff
    {
        mul_by_halves(a, b)
    } else {
        a.wrapping_mul(u64::from(b))
    }
}

/// `a * b`, wrapping, for a `b` of at most 16 bits, in three 32-bit
/// multiplications: the low word in 16-bit halves, so no product
/// overflows 32 bits.
#[cfg(any(feature = "embassy-time", test))]
#[inline(always)]
fn mul_by_halves(a: u64, b: u32) -> u64 {
    let (hi, lo) = ((a >> 32) as u32, a as u32);
    (u64::from(hi.wrapping_mul(b)) << 32)
        .wrapping_add(u64::from((lo >> 16) * b) << 16)
        .wrapping_add(u64::from((lo & 0xffff) * b))
}

/// The ticks (`num / den` per microsecond) covering `us` microseconds,
/// rounded up, for at most as many microseconds as fit in 32-bit
/// arithmetic (`u32::MAX / num`).
#[cfg(any(feature = "embassy-time", test))]
fn ticks_ceil(us: u64, num: u32, den: u32) -> u32 {
    let step = us.min(u64::from(u32::MAX / num)) as u32;
    (step * num).div_ceil(den)
}

#[cfg(feature = "embassy-time")]
const fn fit(v: u64) -> u32 {
    assert!(v <= u32::MAX as u64, "tick rate fraction over 32 bits");
    v as u32
}

#[cfg(feature = "embassy-time")]
const fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_in_ticks_covers_the_microseconds_and_stays_in_32_bits() {
        // 32.768 kHz (512 / 15625 ticks per µs): 100 µs is 3.3 ticks.
        assert_eq!(ticks_ceil(100, 512, 15_625), 4);
        assert_eq!(ticks_ceil(15_625, 512, 15_625), 512);
        // 1 kHz: 1 µs is one tick; 2,500 µs three.
        assert_eq!(ticks_ceil(1, 1, 1_000), 1);
        assert_eq!(ticks_ceil(2_500, 1, 1_000), 3);
        // A wait too long for 32 bits is one step of at most
        // u32::MAX / 512 µs (8.39 s at 32.768 kHz).
        let step = u64::from(u32::MAX / 512);
        assert_eq!(
            ticks_ceil(u64::MAX - 1, 512, 15_625),
            ticks_ceil(step, 512, 15_625)
        );
        assert_eq!(ticks_ceil(step, 512, 15_625), 274_878);
        assert_eq!(ticks_ceil(0, 512, 15_625), 0);
    }

    #[test]
    fn a_product_by_halves_is_the_wrapping_product() {
        let values = [
            0,
            1,
            999,
            0xffff,
            0x1_0000,
            u64::from(u32::MAX),
            1 << 40,
            u64::MAX,
        ];
        for a in values {
            for b in [0, 1, 512, 1_000, 15_625, 0xffff] {
                assert_eq!(
                    mul_by_halves(a, b),
                    a.wrapping_mul(u64::from(b)),
                    "{a} * {b}"
                );
            }
        }
    }

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
