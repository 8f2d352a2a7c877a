//! [`HostRawMutex`]: a lock per record for threaded hosts (feature `std`).
//!
//! On a host, `CriticalSectionRawMutex` goes through `critical-section`'s
//! `std` implementation: **one process-wide lock** (a global
//! `std::sync::Mutex` plus a thread-local re-entrancy flag) shared by every
//! record operation on every thread, so two threads writing two unrelated
//! records still queue behind each other. `HostRawMutex` is one atomic flag
//! per record instead: records on different threads never contend, and an
//! uncontended section costs one compare-and-swap to take and one release
//! store to give back (`b1_outbound_wakeup`'s `host_lock` rows measure both
//! locks, see `docs/BENCHMARKS.md`).
//!
//! It is a spin lock that yields: a record's critical sections are a few
//! dozen instructions (copy a value, move a cursor, clone or take a waker;
//! wakes run after the section), so a waiter spins briefly and then hands
//! its time slice back with `std::thread::yield_now` rather than burning it
//! while a preempted holder waits to run.
//!
//! Pick it for records written from threads or from more than one tokio
//! worker. Keep `CriticalSectionRawMutex` where a record is shared with an
//! interrupt handler or the code must also build for an MCU, and
//! `NoopRawMutex` where a record never leaves one thread.
//!
//! Keep records that different threads write on cache lines of their
//! own (a `#[repr(align(128))]` wrapper, or statics that are not declared
//! side by side): the lock is per record, but two records in one line
//! still bounce that line between the writers' cores. `b1_outbound_wakeup`'s
//! `host_lock` rows pad their records for that reason.
//!
//! Not re-entrant: code running inside a section (a `Waker::clone` of a
//! custom waker) must not lock the same record again; it would spin for
//! ever where `critical-section` would have panicked in the record's
//! `RefCell`. No waker this workspace or tokio makes does.

use core::sync::atomic::{AtomicBool, Ordering};

use embassy_sync::blocking_mutex::raw::RawMutex;

/// Spins before a waiter starts yielding its time slice.
const SPINS: u32 = 64;

/// A `RawMutex` for std hosts: one atomic flag per mutex, spin then yield.
/// `const`-constructible, so records over it stay `static`. See the module
/// doc for when to pick it.
///
/// ```
/// use aimdb_core::record::{Latest, Record};
/// use aimdb_core::sync::HostRawMutex;
///
/// static TEMP: Record<HostRawMutex, Latest<i16>, 1> = Record::new("temp");
///
/// let mut r = TEMP.subscribe().unwrap();
/// std::thread::spawn(|| TEMP.write(21)).join().unwrap();
/// assert_eq!(r.try_recv(), Ok(21));
/// ```
#[derive(Debug)]
pub struct HostRawMutex {
    locked: AtomicBool,
}

impl HostRawMutex {
    /// An unlocked mutex.
    pub const fn new() -> Self {
        Self {
            locked: AtomicBool::new(false),
        }
    }

    #[inline]
    fn acquire(&self) {
        if self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.contended();
        }
    }

    /// The slow path, kept out of line so the uncontended section inlines
    /// into the record's code.
    #[cold]
    #[inline(never)]
    fn contended(&self) {
        let mut spins = 0u32;
        loop {
            if self
                .locked
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
            // Wait on a plain load, so waiters do not bounce the line
            // between cores while the holder works.
            while self.locked.load(Ordering::Relaxed) {
                if spins < SPINS {
                    spins += 1;
                    core::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }
}

impl Default for HostRawMutex {
    fn default() -> Self {
        Self::new()
    }
}

/// Gives the lock back when the section ends, also by unwinding.
struct Unlock<'a>(&'a AtomicBool);

impl Drop for Unlock<'_> {
    #[inline]
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

// SAFETY: `RawMutex` requires that no two threads run inside `lock` on the
// same mutex at once. `acquire` returns only after its compare-and-swap
// changed `locked` from `false` to `true`, which exactly one thread can do
// until the flag is `false` again; the flag is set back to `false` only by
// the `Unlock` guard of the thread that set it, after `f` returned or
// unwound. The Acquire swap pairs with the Release store, so everything `f`
// did under the lock is visible to the next holder.
unsafe impl RawMutex for HostRawMutex {
    const INIT: Self = Self::new();

    #[inline]
    fn lock<R>(&self, f: impl FnOnce() -> R) -> R {
        self.acquire();
        let _unlock = Unlock(&self.locked);
        f()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Four threads each add to a plain counter under the lock; any overlap
    /// of two sections would lose increments.
    #[test]
    fn sections_exclude_each_other() {
        struct Shared {
            m: HostRawMutex,
            n: core::cell::UnsafeCell<u64>,
        }
        // SAFETY: (test) `n` is only touched inside `m.lock`.
        unsafe impl Sync for Shared {}
        let s = Arc::new(Shared {
            m: HostRawMutex::new(),
            n: core::cell::UnsafeCell::new(0),
        });
        let threads: std::vec::Vec<_> = (0..4)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for _ in 0..50_000 {
                        // SAFETY: (test) inside the section.
                        s.m.lock(|| unsafe { *s.n.get() += 1 });
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // SAFETY: (test) inside the section.
        assert_eq!(s.m.lock(|| unsafe { *s.n.get() }), 200_000);
    }

    #[test]
    fn unlocks_when_the_section_panics() {
        let m = HostRawMutex::new();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            m.lock(|| panic!("inside"));
        }));
        assert!(r.is_err());
        assert_eq!(m.lock(|| 7), 7);
    }
}
