//! [`WakerSlot`]: one registered waker, safe to register from one task and
//! wake from any thread or interrupt.

use core::fmt;
use core::task::Waker;

use super::atomic::{spin_loop, AtomicU32, Ordering, UnsafeCell};
use super::loom_const_fn;

/// No one is touching the cell.
const IDLE: u32 = 0;
/// `register` is writing the cell.
const REGISTERING: u32 = 0b01;
/// `take` is reading the cell (or asked `register` to wake on its behalf).
const WAKING: u32 = 0b10;

/// A slot holding at most one [`Waker`].
///
/// Every async piece of the crate is built on this type: a record keeps one
/// per reader, the outbound routes keep one for the transport task. It is the
/// algorithm of `futures::task::AtomicWaker`: `register` and `wake` race
/// through a three-state word, so a wake that arrives while a waker is being
/// registered is never lost (the registering side wakes it instead).
///
/// Registration must come from one task at a time (the owner of the reader
/// or of the routes); waking may come from anywhere.
pub struct WakerSlot {
    state: AtomicU32,
    waker: UnsafeCell<Option<Waker>>,
}

// SAFETY: the `waker` cell is only accessed by the party that moved `state`
// out of IDLE (REGISTERING for `register`, WAKING for `take`); the state word
// grants that access exclusively, with acquire/release ordering on entry and
// exit, so the cell is never aliased mutably across threads. `Waker` itself
// is `Send + Sync`.
unsafe impl Send for WakerSlot {}
// SAFETY: see the `Send` argument above: shared access is serialised by
// `state`.
unsafe impl Sync for WakerSlot {}

impl WakerSlot {
    loom_const_fn! {
        /// An empty slot.
        pub fn new() -> Self {
            Self {
                state: AtomicU32::new(IDLE),
                waker: UnsafeCell::new(None),
            }
        }
    }

    /// Stores `waker`, replacing the previous one unless it would wake the
    /// same task. If a wake raced with this call, `waker` is woken at once.
    pub fn register(&self, waker: &Waker) {
        match self
            .state
            .compare_exchange(IDLE, REGISTERING, Ordering::Acquire, Ordering::Acquire)
        {
            Ok(_) => {
                // SAFETY: we moved the state IDLE -> REGISTERING, which gives
                // this call exclusive access to the cell until we leave
                // REGISTERING below; `take` only touches the cell after its own
                // IDLE -> WAKING transition, which cannot happen meanwhile.
                let old = self.waker.with_mut(|cell| unsafe {
                    match &*cell {
                        Some(w) if w.will_wake(waker) => None,
                        _ => (*cell).replace(waker.clone()),
                    }
                });
                match self.state.compare_exchange(
                    REGISTERING,
                    IDLE,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => drop(old),
                    Err(_) => {
                        // A `take` arrived while we held the cell and set
                        // WAKING; it left the waker to us.
                        // SAFETY: the state is REGISTERING|WAKING, set by us
                        // and by a `take` that then backed off; no one else
                        // touches the cell until we store IDLE below.
                        let w = self.waker.with_mut(|cell| unsafe { (*cell).take() });
                        self.state.swap(IDLE, Ordering::AcqRel);
                        drop(old);
                        if let Some(w) = w {
                            w.wake();
                        }
                    }
                }
            }
            Err(WAKING) => {
                // A wake is in progress: the caller must run again.
                waker.wake_by_ref();
                spin_loop();
            }
            Err(_) => {
                // Concurrent `register` calls violate the one-registrant
                // contract; the other call wins, nothing unsafe happens.
            }
        }
    }

    /// Removes and returns the stored waker, or `None` if there is none or a
    /// registration is in progress (that registration then wakes instead).
    pub fn take(&self) -> Option<Waker> {
        match self.state.fetch_or(WAKING, Ordering::AcqRel) {
            IDLE => {
                // SAFETY: we moved IDLE -> WAKING, which gives exclusive access
                // to the cell until WAKING is cleared below; `register` backs
                // off while WAKING is set.
                let w = self.waker.with_mut(|cell| unsafe { (*cell).take() });
                self.state.fetch_and(!WAKING, Ordering::Release);
                w
            }
            _ => None,
        }
    }

    /// Wakes the stored waker, if any, and empties the slot.
    pub fn wake(&self) {
        if let Some(w) = self.take() {
            w.wake();
        }
    }
}

#[cfg(not(loom))]
impl Default for WakerSlot {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for WakerSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WakerSlot")
            .field("state", &self.state.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}
