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
use core::task::Waker;

use embassy_sync::blocking_mutex::raw::RawMutex;
use embassy_sync::blocking_mutex::Mutex;

pub use buffer::{Buffer, Kind, Latest, Mailbox, Ring, Take};
pub use keyed::{Key, KeyError, KeyWriteError, Keyed, KeyedChanges, KeyedSink, KEY_MAX_LEN};
#[cfg(feature = "alloc")]
pub use keyed::{KeySlot, KeyedVec, KeyedVecChanges};
pub use reader::{Reader, Recv, Source};

use crate::sync::loom_const_fn;

/// A named, typed value slot with buffer kind `B` and room for `R` readers.
///
/// `R` is at most 32. Subscribing past `R` readers returns
/// [`SubscribeError::Full`].
pub struct Record<M: RawMutex, B: Buffer, const R: usize> {
    name: &'static str,
    state: Mutex<M, RefCell<State<B, R>>>,
}

/// Everything a write and a read touch, behind the record's one lock.
///
/// The readers' wakers live here rather than in atomic waker slots: a read
/// that finds nothing stores its waker and sets its `waiting` bit in the
/// same critical section as the look, and a write takes the wakers of the
/// waiting readers in the critical section of the push. One section per
/// read and one per write, no extra atomics; wakes (and drops of replaced
/// wakers) still run after the section ends.
struct State<B: Buffer, const R: usize> {
    buf: B,
    cursors: [Option<B::Cursor>; R],
    /// Reader `i`'s waker, stored while it waits. A write takes it out to
    /// wake it, so a reader that parks again stores a fresh clone; a reader
    /// polled again while still waiting (a spurious poll) finds its own
    /// waker here and `will_wake` saves the clone.
    wakers: [Option<Waker>; R],
    /// Bit `i`: reader `i`'s waker is stored and it waits for a write.
    waiting: u32,
    writes: u64,
    /// Writes that replaced a value no reader took, while some reader was
    /// subscribed.
    replaced: u64,
}

impl<B: Buffer, const R: usize> State<B, R> {
    /// Stores `w` as reader `i`'s waker (a clone only if it would not wake
    /// the same task) and sets its waiting bit; the waker it replaced, to
    /// be dropped after the critical section.
    #[inline(always)]
    fn park(&mut self, i: usize, w: &Waker) -> Option<Waker> {
        let old = match &self.wakers[i] {
            Some(old) if old.will_wake(w) => None,
            _ => self.wakers[i].replace(w.clone()),
        };
        self.waiting |= 1 << i;
        old
    }
}

/// The result of one receive attempt: what was taken and whether the
/// reader is now registered for the next write (see [`Record::take`]).
pub(crate) struct Taken<T> {
    pub(crate) take: Take<T>,
    /// The waker is stored and the waiting bit set: no need to look again
    /// before that waker is woken.
    pub(crate) armed: bool,
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
                    wakers: [const { None }; R],
                    waiting: 0,
                    writes: 0,
                    replaced: 0,
                })),
            }
        }
    }

    /// The record's name (its key).
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// Writes a value and wakes the readers waiting for one. Never blocks on
    /// a reader and never fails.
    pub fn write(&self, value: B::Item) {
        let mut woken: [Option<Waker>; R] = [const { None }; R];
        let waiting = self.state.lock(|s| {
            let mut s = s.borrow_mut();
            let s = &mut *s;
            if s.buf.untaken(&s.cursors) && s.cursors.iter().any(Option::is_some) {
                s.replaced += 1;
            }
            s.buf.push(value);
            s.writes += 1;
            let waiting = core::mem::take(&mut s.waiting);
            let mut m = waiting;
            while m != 0 {
                let i = m.trailing_zeros() as usize;
                m &= m - 1;
                woken[i] = s.wakers[i].take();
            }
            waiting
        });
        // Outside the critical section: a wake runs foreign code.
        let mut m = waiting;
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            if let Some(w) = woken[i].take() {
                w.wake();
            }
        }
    }

    /// Total number of writes so far.
    pub fn writes(&self) -> u64 {
        self.state.lock(|s| s.borrow().writes)
    }

    /// Writes that replaced a value no reader took (`Latest`, `Mailbox`)
    /// while at least one reader was subscribed: commands overwritten
    /// before the consumer ran ("latest wins" made visible), state updates
    /// coalesced. A `Ring` reports lost values as [`RecvError::Lagged`]
    /// to the reader instead; this stays 0 for it.
    pub fn replaced(&self) -> u64 {
        self.state.lock(|s| s.borrow().replaced)
    }

    /// Runs `f` on the newest value held (`Ring`: the last written;
    /// `Mailbox`: the pending command), inside the record's critical
    /// section: keep `f` short (encode it, copy it). Nothing is taken and
    /// no reader's position changes.
    pub fn with_newest<O>(&self, f: impl FnOnce(Option<&B::Item>) -> O) -> O {
        self.state.lock(|s| f(s.borrow().buf.newest()))
    }

    /// A cheap copyable write handle.
    pub fn producer(&self) -> Producer<'_, M, B, R> {
        Producer { record: self }
    }

    /// Claims a reader slot.
    pub fn subscribe(&self) -> Result<Reader<'_, M, B, R>, SubscribeError> {
        self.subscribe_slot().map(|i| Reader::new(self, i))
    }

    /// Claims a reader slot by index; released by [`Self::unsubscribe`].
    pub(crate) fn subscribe_slot(&self) -> Result<u8, SubscribeError> {
        self.state.lock(|s| {
            let mut s = s.borrow_mut();
            let cursor = s.buf.subscribe();
            let free = s.cursors.iter().position(Option::is_none);
            match free {
                Some(i) => {
                    s.cursors[i] = Some(cursor);
                    Ok(i as u8)
                }
                None => Err(SubscribeError::Full),
            }
        })
    }

    /// One receive attempt for reader `i`, in one critical section.
    ///
    /// With `register`, a reader that finds nothing stores the waker and
    /// sets its waiting bit before the section ends: a write lands either
    /// before (and its value is taken here) or after (and sees the bit and
    /// wakes). With `arm` as well, a reader that takes a value and has
    /// nothing more behind it registers the same way, so an outbound route
    /// need not poll again just to park (`armed` says it did).
    ///
    /// A waker clone may run inside the section (a refcount increment for
    /// every executor we know of); a replaced waker is dropped after it.
    pub(crate) fn take(&self, i: usize, register: Option<&Waker>, arm: bool) -> Taken<B::Item> {
        let mut old = None;
        let t = self.state.lock(|s| {
            let mut s = s.borrow_mut();
            let s = &mut *s;
            let Some(cursor) = s.cursors[i].as_mut() else {
                return Taken {
                    take: Take::Empty,
                    armed: false,
                };
            };
            let take = s.buf.take(cursor);
            let Some(w) = register else {
                return Taken { take, armed: false };
            };
            let park = match take {
                Take::Empty => true,
                Take::Value(_) => arm && !s.buf.has_more(cursor),
                Take::Lagged(_) => false,
            };
            if park {
                old = s.park(i, w);
            }
            Taken { take, armed: park }
        });
        drop(old);
        t
    }

    /// For a remote watch on slot `i` (claimed with `subscribe_slot`,
    /// released with `unsubscribe`; it never takes a value, so a `Mailbox`
    /// command stays for its consumer, and while held it counts as a
    /// subscribed reader for [`Self::replaced`]): the write count if it
    /// differs from `seen`; otherwise `None`, with `w` stored to be woken by
    /// the next write (in the same critical section as the look, as
    /// [`Self::take`] does).
    #[cfg(feature = "remote")]
    pub(crate) fn poll_changed(&self, i: usize, seen: u64, w: &Waker) -> Option<u64> {
        let mut old = None;
        let changed = self.state.lock(|s| {
            let mut s = s.borrow_mut();
            if s.writes != seen {
                return Some(s.writes);
            }
            if s.cursors[i].is_some() {
                old = s.park(i, w);
            }
            None
        });
        drop(old);
        changed
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

    pub(crate) fn unsubscribe(&self, i: usize) {
        let old = self.state.lock(|s| {
            let mut s = s.borrow_mut();
            s.cursors[i] = None;
            s.waiting &= !(1 << i);
            s.wakers[i].take()
        });
        drop(old);
    }
}

impl<M: RawMutex, T: Clone, const R: usize> Record<M, Latest<T>, R> {
    /// The current value of a `Latest` record, without a reader: no slot
    /// is used and no reader's "seen" state changes (as `watch`'s
    /// `borrow` in tokio or embassy).
    pub fn latest(&self) -> Option<T> {
        self.state.lock(|s| s.borrow().buf.current().cloned())
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
    /// The record's buffer kind (`Latest` unless said otherwise).
    fn kind(&self) -> Kind {
        Kind::Latest
    }
}

impl<M: RawMutex, B: Buffer, const R: usize> Sink<B::Item> for Record<M, B, R> {
    fn name(&self) -> &'static str {
        self.name
    }
    fn write(&self, value: B::Item) {
        Record::write(self, value);
    }
    fn kind(&self) -> Kind {
        B::KIND
    }
}

#[cfg(all(test, not(aimdb_loom)))]
mod tests;
