//! embassy-time's clock on a host (feature `tokio` with `mqtt` or
//! `embassy-net`): the time driver the MQTT session and embassy-net read their time
//! from, and the timer queue behind `embassy_time::Timer`.
//!
//! Why not embassy-time's own `std` driver: its `now()` takes the same
//! global lock as every timer registration and its alarm thread, and
//! the MQTT session registers its keep-alive deadline on every poll, that
//! is, for every message. With two connectors on two tokio
//! worker threads the lock is contended and each registration can wake
//! the alarm thread: several futex calls and a context switch per
//! message. Here `now()` reads a monotonic clock without a lock, and the
//! alarm thread is woken only when a deadline earlier than the one it
//! sleeps until is registered.
//!
//! It is the program's one embassy-time driver: do not also turn on
//! `embassy-time`'s `std` feature (the link fails with two). Ticks are
//! microseconds (embassy-time's default tick rate).

use core::task::Waker;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use embassy_time_driver::Driver;
use embassy_time_queue_utils::queue_generic::ConstGenericQueue;

/// Tasks with a timer at once (more: the earliest is woken early, and
/// re-registers when it next waits).
const TIMERS: usize = 64;

struct HostClock {
    zero: OnceLock<Instant>,
    alarm: Mutex<Alarm>,
    wake: Condvar,
}

struct Alarm {
    queue: ConstGenericQueue<TIMERS>,
    /// The tick the alarm thread sleeps until (`u64::MAX`: none).
    armed: u64,
    started: bool,
}

embassy_time_driver::time_driver_impl!(static CLOCK: HostClock = HostClock {
    zero: OnceLock::new(),
    alarm: Mutex::new(Alarm {
        queue: ConstGenericQueue::new(),
        armed: u64::MAX,
        started: false,
    }),
    wake: Condvar::new(),
});

impl HostClock {
    fn alarm(&self) -> MutexGuard<'_, Alarm> {
        // A panic while holding it cannot leave the queue inconsistent
        // (its operations do not unwind half-way).
        self.alarm.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Driver for HostClock {
    fn now(&self) -> u64 {
        let zero = *self.zero.get_or_init(Instant::now);
        u64::try_from(zero.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    fn schedule_wake(&self, at: u64, waker: &Waker) {
        let mut a = self.alarm();
        if !a.started {
            // If the thread cannot be started now, the next registration
            // tries again.
            a.started = std::thread::Builder::new()
                .name("aimdb-clock".into())
                .spawn(alarm_thread)
                .is_ok();
        }
        if a.queue.schedule_wake(at, waker) && at < a.armed {
            self.wake.notify_one();
        }
    }
}

/// Wakes what is due, then sleeps until the next deadline or until an
/// earlier one is registered.
fn alarm_thread() {
    let mut a = CLOCK.alarm();
    loop {
        let now = CLOCK.now();
        let next = a.queue.next_expiration(now);
        a.armed = next;
        a = if next == u64::MAX {
            CLOCK.wake.wait(a).unwrap_or_else(PoisonError::into_inner)
        } else {
            let sleep = Duration::from_micros(next.saturating_sub(now));
            CLOCK
                .wake
                .wait_timeout(a, sleep)
                .unwrap_or_else(PoisonError::into_inner)
                .0
        };
    }
}

#[cfg(test)]
mod tests {
    use embassy_time::{Duration, Instant, Timer};

    /// Timers on two worker threads fire (the alarm thread is woken for a
    /// deadline earlier than the hour it sleeps towards), never before
    /// their deadline.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn timers_fire_not_before_their_deadline() {
        let long = tokio::spawn(async move {
            Timer::after(Duration::from_secs(3600)).await;
        });
        tokio::task::yield_now().await;
        let t0 = Instant::now();
        let (a, b) = tokio::join!(
            async {
                Timer::after(Duration::from_millis(30)).await;
                Instant::now()
            },
            async {
                Timer::after(Duration::from_millis(5)).await;
                Instant::now()
            }
        );
        assert!(a - t0 >= Duration::from_millis(30));
        assert!(b - t0 >= Duration::from_millis(5));
        assert!(!long.is_finished());
        long.abort();
    }
}
