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
//! The timer queue keeps one entry per waiting task (its earliest
//! deadline) and grows with the number of such tasks instead of waking
//! one early when full. A task is recognised by its waker's data and
//! vtable contents, not only by `Waker::will_wake`: in an optimised build
//! a vtable can exist twice, and a current-thread tokio runtime's
//! `block_on` waker and its clone then compare unequal, so every poll of a pending `Timer` would add an
//! entry; a bounded queue, once full, would wake the polling task itself,
//! which spins.
//!
//! It is the program's one embassy-time driver: do not also turn on
//! `embassy-time`'s `std` feature (the link fails with two). Ticks are
//! microseconds (embassy-time's default tick rate).

use core::task::Waker;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};
use std::vec::Vec;

use embassy_time_driver::Driver;

struct HostClock {
    zero: OnceLock<Instant>,
    alarm: Mutex<Alarm>,
    wake: Condvar,
}

struct Alarm {
    queue: Queue,
    /// The tick the alarm thread sleeps until (`u64::MAX`: none).
    armed: u64,
    started: bool,
}

embassy_time_driver::time_driver_impl!(static CLOCK: HostClock = HostClock {
    zero: OnceLock::new(),
    alarm: Mutex::new(Alarm {
        queue: Queue::new(),
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

/// Deadlines and the wakers to wake at them, one entry per task.
struct Queue {
    entries: Vec<(u64, Waker)>,
}

impl Queue {
    const fn new() -> Self {
        Self {
            entries: Vec::new(),
        }
    }

    /// Asks for `waker` to be woken at `at` (or at the earlier deadline
    /// its task already has); `true` if its deadline moved earlier.
    fn schedule_wake(&mut self, at: u64, waker: &Waker) -> bool {
        match self.entries.iter_mut().find(|(_, w)| same_task(w, waker)) {
            Some((due, _)) if at < *due => *due = at,
            Some(_) => return false,
            None => self.entries.push((at, waker.clone())),
        }
        true
    }

    /// Wakes (and forgets) what is due at `now`; the next deadline.
    fn next_expiration(&mut self, now: u64) -> u64 {
        let mut next = u64::MAX;
        let mut i = 0;
        while i < self.entries.len() {
            if self.entries[i].0 <= now {
                self.entries.swap_remove(i).1.wake();
            } else {
                next = next.min(self.entries[i].0);
                i += 1;
            }
        }
        next
    }
}

/// Whether `a` and `b` wake the same task: `will_wake`, or the same data
/// and a vtable with the same functions (a second copy of one vtable).
fn same_task(a: &Waker, b: &Waker) -> bool {
    a.will_wake(b) || (a.data() == b.data() && a.vtable() == b.vtable())
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
    use core::future::{poll_fn, Future};
    use core::pin::pin;
    use core::task::Poll;

    use embassy_time::{Duration, Instant, Timer};

    use super::CLOCK;

    /// A pending `Timer` polled again and again by one task holds one
    /// queue entry and does not wake its task. Meaningful in an optimised
    /// build (`make test` runs it with `--release`), where a current-thread
    /// runtime's `block_on` waker and its clone do not `will_wake` each
    /// other.
    #[test]
    fn a_timer_polled_again_keeps_one_entry_and_wakes_nobody() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let mut timer = pin!(Timer::after(Duration::from_secs(3600)));
            let mut polls = 0;
            let spin = poll_fn(|cx| {
                polls += 1;
                for _ in 0..100 {
                    assert!(timer.as_mut().poll(cx).is_pending());
                }
                let data = cx.waker().data();
                let queue = &CLOCK.alarm().queue;
                let mine = queue.entries.iter().filter(|(_, w)| w.data() == data);
                assert_eq!(mine.count(), 1, "entries for this task");
                if polls == 100 {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            });
            // The paused clock moves on only when the runtime is idle: the
            // sleep ends unless the spinning task keeps being woken.
            tokio::select! {
                biased;
                () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
                () = spin => panic!("woken 100 times with nothing due"),
            }
        });
    }

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
