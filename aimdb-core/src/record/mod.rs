//! Records: named, typed value slots with one of three buffer kinds.
//!
//! | kind | keeps | readers see |
//! | --- | --- | --- |
//! | [`Latest`] | the newest value | each value at most once; writes between reads coalesce |
//! | [`Ring<T, N>`](Ring) | the last `N` values | every value, or [`Lagged(n)`](RecvError::Lagged) with the exact count lost |
//! | [`Mailbox`] | one pending value | each value taken by exactly one reader |
//!
//! Writes are synchronous, never block and never fail because a reader is
//! slow. Reads are poll-based ([`Reader::poll_recv`], [`Reader::try_recv`],
//! [`Reader::recv`]) and allocate nothing. Records are `const fn`
//! constructible, so firmware keeps them in `static`s; interrupt safety comes
//! from the `M: RawMutex` parameter (`CriticalSectionRawMutex` for
//! interrupts and threads, `NoopRawMutex` for one executor).
//!
//! ```
//! use aimdb_core::record::{Latest, Record};
//! use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex;
//!
//! static LED: Record<CriticalSectionRawMutex, Latest<bool>, 2> = Record::new("led");
//!
//! let mut reader = LED.subscribe().unwrap();
//! LED.write(true);
//! LED.write(false); // coalesces with the write above
//! assert_eq!(reader.try_recv(), Ok(false));
//! assert!(reader.try_recv().is_err());
//! ```
#![forbid(unsafe_code)]

mod buffer;
mod keyed;
mod reader;

use core::cell::RefCell;
use core::fmt;

use embassy_sync::blocking_mutex::raw::RawMutex;
use embassy_sync::blocking_mutex::Mutex;

pub use buffer::{Buffer, Latest, Mailbox, Ring, Take};
pub use keyed::{KeyError, Keyed, KeyedSink, KEY_MAX_LEN};
#[cfg(feature = "alloc")]
pub use keyed::{KeySlot, KeyedVec};
pub use reader::{Reader, Recv, Source};

use crate::sync::{loom_const_fn, WakerSlot};

/// A named, typed value slot with buffer kind `B` and room for `R` readers.
///
/// `R` is at most 32. Subscribing past `R` readers returns
/// [`SubscribeError::Full`].
pub struct Record<M: RawMutex, B: Buffer, const R: usize> {
    name: &'static str,
    state: Mutex<M, RefCell<State<B, R>>>,
    wakers: [WakerSlot; R],
}

struct State<B: Buffer, const R: usize> {
    buf: B,
    cursors: [Option<B::Cursor>; R],
    /// Bit `i`: reader `i` registered a waker and waits for a write.
    waiting: u32,
    writes: u64,
}

/// Subscribing to a record failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SubscribeError {
    /// All `R` reader slots are taken.
    Full,
}

impl fmt::Display for SubscribeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full => f.write_str("record has no free reader slot"),
        }
    }
}

impl core::error::Error for SubscribeError {}

/// Receiving from a record failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecvError {
    /// The reader fell behind a `Ring` and lost this many values; the next
    /// receive returns the oldest value still held.
    Lagged(u64),
}

/// A non-blocking receive found nothing or lagged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TryRecvError {
    /// No new value for this reader.
    Empty,
    /// See [`RecvError::Lagged`].
    Lagged(u64),
}

impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Lagged(n) => write!(f, "reader lagged and lost {n} values"),
        }
    }
}
impl core::error::Error for RecvError {}

impl fmt::Display for TryRecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("no new value"),
            Self::Lagged(n) => write!(f, "reader lagged and lost {n} values"),
        }
    }
}
impl core::error::Error for TryRecvError {}

impl<M: RawMutex, B: Buffer, const R: usize> Record<M, B, R> {
    const CHECK: () = assert!(R >= 1 && R <= 32, "Record<_, _, R>: R must be in 1..=32");

    loom_const_fn! {
        /// An empty record called `name`.
        #[allow(clippy::let_unit_value)]
        pub fn new(name: &'static str) -> Self {
            let () = Self::CHECK;
            Self {
                name,
                state: Mutex::new(RefCell::new(State {
                    buf: B::EMPTY,
                    cursors: [None; R],
                    waiting: 0,
                    writes: 0,
                })),
                wakers: Self::slots(),
            }
        }
    }

    #[cfg(not(loom))]
    const fn slots() -> [WakerSlot; R] {
        [const { WakerSlot::new() }; R]
    }
    #[cfg(loom)]
    fn slots() -> [WakerSlot; R] {
        core::array::from_fn(|_| WakerSlot::new())
    }

    /// The record's name (its key).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Writes a value and wakes the readers waiting for one. Never blocks on
    /// a reader and never fails.
    pub fn write(&self, value: B::Item) {
        let waiting = self.state.lock(|s| {
            let mut s = s.borrow_mut();
            s.buf.push(value);
            s.writes += 1;
            core::mem::take(&mut s.waiting)
        });
        self.wake(waiting);
    }

    /// Total number of writes so far.
    pub fn writes(&self) -> u64 {
        self.state.lock(|s| s.borrow().writes)
    }

    /// A cheap copyable write handle.
    pub fn producer(&self) -> Producer<'_, M, B, R> {
        Producer { record: self }
    }

    /// Claims a reader slot.
    pub fn subscribe(&self) -> Result<Reader<'_, M, B, R>, SubscribeError> {
        self.state
            .lock(|s| {
                let mut s = s.borrow_mut();
                let cursor = s.buf.subscribe();
                let free = s.cursors.iter().position(Option::is_none);
                match free {
                    Some(i) => {
                        s.cursors[i] = Some(cursor);
                        Ok(i)
                    }
                    None => Err(SubscribeError::Full),
                }
            })
            .map(|i| Reader::new(self, i as u8))
    }

    fn wake(&self, mut mask: u32) {
        while mask != 0 {
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            self.wakers[i].wake();
        }
    }

    /// One receive attempt for reader `i`. With `register`, an empty result
    /// registers the waker and then looks again under the lock, setting the
    /// reader's waiting bit there: a write either lands before that second
    /// look (and is returned) or after it (and sees the bit and wakes).
    /// The waker slot is touched outside the lock so the critical section
    /// stays short and never performs a wake.
    fn take(&self, i: usize, register: Option<&core::task::Waker>) -> Take<B::Item> {
        let first = self.take_locked(i, false);
        match (first, register) {
            (Take::Empty, Some(w)) => {
                self.wakers[i].register(w);
                self.take_locked(i, true)
            }
            (t, _) => t,
        }
    }

    fn take_locked(&self, i: usize, set_waiting: bool) -> Take<B::Item> {
        self.state.lock(|s| {
            let mut s = s.borrow_mut();
            let s = &mut *s;
            let Some(cursor) = s.cursors[i].as_mut() else {
                return Take::Empty;
            };
            let t = s.buf.take(cursor);
            if set_waiting && matches!(t, Take::Empty) {
                s.waiting |= 1 << i;
            }
            t
        })
    }

    fn replay(&self, i: usize) {
        self.state.lock(|s| {
            let mut s = s.borrow_mut();
            let s = &mut *s;
            if let Some(c) = s.cursors[i].as_mut() {
                s.buf.replay(c);
            }
        });
    }

    fn unsubscribe(&self, i: usize) {
        self.state.lock(|s| {
            let mut s = s.borrow_mut();
            s.cursors[i] = None;
            s.waiting &= !(1 << i);
        });
        drop(self.wakers[i].take());
    }
}

impl<M: RawMutex, B: Buffer, const R: usize> fmt::Debug for Record<M, B, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Record")
            .field("name", &self.name)
            .field("writes", &self.writes())
            .finish_non_exhaustive()
    }
}

/// A write handle to a record; `Copy`, so any number of producers can share
/// a record.
pub struct Producer<'a, M: RawMutex, B: Buffer, const R: usize> {
    record: &'a Record<M, B, R>,
}

impl<M: RawMutex, B: Buffer, const R: usize> Clone for Producer<'_, M, B, R> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<M: RawMutex, B: Buffer, const R: usize> Copy for Producer<'_, M, B, R> {}

impl<'a, M: RawMutex, B: Buffer, const R: usize> Producer<'a, M, B, R> {
    /// See [`Record::write`].
    pub fn write(&self, value: B::Item) {
        self.record.write(value);
    }
    /// The record written to.
    pub fn record(&self) -> &'a Record<M, B, R> {
        self.record
    }
}

/// Write access to a record whose value type is known but whose buffer kind
/// and mutex are erased: what an inbound link writes through.
pub trait Sink<T> {
    /// The record's name.
    fn name(&self) -> &'static str;
    /// Writes `value` (see [`Record::write`]).
    fn write(&self, value: T);
}

impl<M: RawMutex, B: Buffer, const R: usize> Sink<B::Item> for Record<M, B, R> {
    fn name(&self) -> &'static str {
        self.name
    }
    fn write(&self, value: B::Item) {
        Record::write(self, value);
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
