//! The readiness bitmap: one bit per outbound route, set by the route's
//! waker, taken in bulk by the transport task.
//!
//! Two levels keep `take` and the search for the next ready route O(1) in the
//! route count: `W` atomic words (32 routes each) and one summary word whose
//! bit `g` means "some word of group `g` may be non-zero", a group being
//! `ceil(W / 30)` consecutive words (one word per group up to 960 routes,
//! five words per group at 4,096).
//!
//! The summary's top bit, `PARKED`, is the transport's parking protocol, so
//! the read-modify-write that publishes a route's group also decides, in the
//! same instruction, whether the transport must be woken. `PARKED` is set
//! only by the transport, only while no group bit is set (the same
//! compare-and-swap is its last look at the bitmap), and cleared by the one
//! marker that finds it (or by the transport itself).
//!
//! The waker cell is read by markers and written by the transport, with
//! no lock. A marker reads it only after the compare-and-swap that
//! cleared `PARKED` (which ends the transport's current *episode*: one
//! episode per successful park), and it wakes *by reference*, straight
//! from the cell, then counts the episode as finished (`woken`, one
//! `fetch_add`). The transport counts the episodes it started
//! (`episode`) and rewrites the cell only when the two counts agree and
//! `PARKED` is clear: then no marker is reading it, and none can start
//! before the next park publishes the write. Parking again with the same
//! waker (every park but the first, for a tokio or embassy task) does not
//! touch the cell, so it never waits for a marker: markers of successive
//! episodes may overlap in the cell, as readers only.
//!
//! Why by reference: on tokio, a waker clone is a reference-count
//! increment and waking by value hands it back with a decrement, so
//! clone-then-wake is three read-modify-writes on the task's state where
//! `wake_by_ref` is one. A task per route pays those three per message (its
//! record takes the stored waker and wakes it by value; its next `recv`
//! clones `cx`'s waker back); the marker pays `wake_by_ref` and the `woken`
//! count, so the readiness layer costs one read-modify-write fewer per
//! message than a clone and a wake would (`b2_cells`, `b1_outbound_wakeup`
//! parked rows). The count comes after the wake, and the transport never
//! waits for it on the hot path, so a transport woken on another core does
//! not wait for the marker's futex or eventfd syscall to return (it would
//! spin through that syscall on every cross-thread wake). Only a change of
//! waker waits for `woken`, which is why [`Pending`] recognises the waker
//! it stored even when the executor lends one with another vtable.
//!
//! The marker that clears `PARKED` does not touch the bitmap at all: when
//! the summary is exactly `PARKED` (nothing else pending), it hands its
//! route index over in the compare-and-swap that ends the episode
//! (`PARKED` → `DIRECT`, then the index plus one in `direct`, stored
//! before the wake), and the transport takes it from there without a
//! swap, resetting `direct` to zero. A parked hand-over then costs two
//! read-modify-writes of the bitmap in all (that one and the transport's
//! next park) instead of five (word, summary, the transport's summary and
//! word takes, its park). `DIRECT` is cleared by the next park. When
//! nothing else is pending, [`Pending::absorb_or_only`] returns the
//! handed-over route for the caller to serve at once, instead of setting
//! it in the private set and searching the set for it.
//!
//! The transport keeps a clone of the waker it stored (in [`Pending`]), so
//! re-parking with the same waker is one compare-and-swap and never touches
//! the cell.
//!
//! One primitive per file: [`Readiness`] (here, shared, atomic), the route
//! wakers that mark it (`waker`), the transport's side of the protocol
//! ([`Pending`]: taking, parking, the hand-over) and its plain set of taken
//! routes ([`Bits`](bits::Bits)). Which pending route is served next
//! (urgent routes, their burst bound) is `outbound`'s scheduler, outside
//! this module.

use core::fmt;
use core::task::Waker;

use super::atomic::{AtomicU32, Ordering, UnsafeCell};
use super::loom_const_fn;

mod bits;
mod pending;
#[cfg(all(test, not(aimdb_loom)))]
mod tests;
mod waker;

pub(crate) use pending::Pending;
pub use waker::ReadinessHandle;

/// The transport is parked; the waker cell holds its waker.
const PARKED: u32 = 1 << 31;
/// The marker that ended the transport's last episode left its route index
/// in `direct` instead of the bitmap (see the module doc).
const DIRECT: u32 = 1 << 30;
/// Summary bits that are group bits.
const GROUPS: u32 = DIRECT - 1;
/// Number of group bits.
const GROUP_BITS: usize = 30;

/// Atomic readiness bits for up to `32 * W` routes, plus the parked
/// transport's waker.
///
/// Route `i`'s waker (from [`ReadinessHandle::route_waker`]) sets bit `i` and
/// wakes the transport; it allocates nothing. Its data pointer points into
/// this struct, so the struct must outlive every waker clone: it is reached
/// through a [`ReadinessHandle`], either `&'static Readiness` (firmware, a
/// `static`) or `Arc<Readiness>` (hosts, feature `alloc`).
pub struct Readiness<const W: usize> {
    words: [AtomicU32; W],
    /// Group bits, then `DIRECT`, `PARKED` (see the module doc).
    summary: AtomicU32,
    /// The route handed over with `DIRECT`, plus one: stored by the marker
    /// that ended the episode (before it wakes), reset to 0 by the
    /// transport when it takes the route.
    direct: AtomicU32,
    /// Episodes started (successful parks), wrapping; written by the
    /// transport only.
    episode: AtomicU32,
    /// Episodes ended and finished with, wrapping: counted by the marker
    /// that cleared `PARKED` once its wake is over, or by the transport for
    /// an episode it ended itself.
    woken: AtomicU32,
    /// The transport's waker: read (woken by reference) by the marker that
    /// ended an episode until it counts `woken`, written by the transport
    /// only while `PARKED` is clear and `woken == episode`.
    waker: UnsafeCell<Option<Waker>>,
    /// `tags[w][b] == 32 * w + b`. A route waker's data pointer is the
    /// address of its tag: the tag gives the route index, and index plus
    /// field offset give back the struct. Two bytes of RAM per route.
    tags: [[u16; 32]; W],
    /// 1 while a [`Routes`](crate::outbound::Routes) table consumes this
    /// bitmap: one consumer per bitmap (a second `Pending` on it could
    /// miss wake-ups), enforced when the table is built.
    consumer: AtomicU32,
}

// SAFETY: `words`, `summary`, `direct`, `episode`, `woken` are atomics and
// `tags` is never written after `new`. The `waker` cell: a marker reads it
// (through a shared reference, `wake_by_ref`) only after its
// compare-and-swap cleared `PARKED` (acquire: it sees the cell the
// transport wrote before its releasing park), and only until it adds one
// to `woken` (release). Each successful park adds one to `episode` and can
// be ended by one compare-and-swap only, whose winner (a marker, or the
// transport) adds one to `woken` when it is done with the cell. The
// transport writes the cell only after loading `PARKED` clear and
// `woken == episode` (acquire: every read of every ended episode happened
// before), and it sets `PARKED` again only after the write, so no reader
// overlaps the writer. Readers of successive episodes may overlap each
// other: they only read. `Waker` is `Send + Sync`, so the waker may be
// woken by reference from any thread.
unsafe impl<const W: usize> Sync for Readiness<W> {}

impl<const W: usize> Readiness<W> {
    /// Words per summary bit.
    const GROUP: usize = W.div_ceil(GROUP_BITS);
    const CHECK: () = assert!(W >= 1 && W <= 2048, "Readiness<W>: W must be in 1..=2048");
    /// Number of routes this bitmap can serve.
    pub const CAPACITY: usize = 32 * W;

    loom_const_fn! {
        /// An empty bitmap (no route ready, no transport waker).
        #[allow(clippy::let_unit_value)]
        pub fn new() -> Self {
            let () = Self::CHECK;
            let mut tags = [[0u16; 32]; W];
            let mut w = 0;
            while w < W {
                let mut b = 0;
                while b < 32 {
                    tags[w][b] = (w * 32 + b) as u16;
                    b += 1;
                }
                w += 1;
            }
            Self {
                words: Self::zero_words(),
                summary: AtomicU32::new(0),
                direct: AtomicU32::new(0),
                episode: AtomicU32::new(0),
                woken: AtomicU32::new(0),
                waker: UnsafeCell::new(None),
                tags,
                consumer: AtomicU32::new(0),
            }
        }
    }

    /// Claims the bitmap for one consumer; `false` if a table holds it.
    pub(crate) fn claim(&self) -> bool {
        self.consumer
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Gives the bitmap back (the consuming table is dropped).
    pub(crate) fn release(&self) {
        self.consumer.store(0, Ordering::Release);
    }

    #[cfg(not(aimdb_loom))]
    const fn zero_words() -> [AtomicU32; W] {
        [const { AtomicU32::new(0) }; W]
    }
    #[cfg(aimdb_loom)]
    fn zero_words() -> [AtomicU32; W] {
        core::array::from_fn(|_| AtomicU32::new(0))
    }

    /// Marks route `i` ready and wakes the transport if it is parked.
    /// Out-of-range indices are ignored.
    ///
    /// Why one wake per park is enough: the transport only parks with a
    /// compare-and-swap that finds no group bit set. The mark that next sets
    /// a group bit therefore finds `PARKED`, clears it and wakes; every mark
    /// after it, until the transport takes the summary, finds its group bit
    /// set or `PARKED` clear, and the transport, already woken, will take
    /// those words. So a burst of writes costs the transport one wake, not
    /// one per route.
    pub(crate) fn mark(&self, i: usize) {
        let w = i / 32;
        let Some(word) = self.words.get(w) else {
            return;
        };
        if self.summary.load(Ordering::Acquire) == PARKED && self.mark_direct(i) {
            return;
        }
        let bit = 1u32 << (i % 32);
        if word.fetch_or(bit, Ordering::AcqRel) & bit != 0 {
            // Whoever set the bit first did the summary update below; the
            // transport has not taken the bit yet, so it will see it.
            return;
        }
        self.signal(1u32 << (w / Self::GROUP));
    }

    /// The transport is parked with nothing pending: hand it route `i` in
    /// the compare-and-swap that ends its episode. `false`: the summary
    /// changed meanwhile, take the bitmap path.
    fn mark_direct(&self, i: usize) -> bool {
        if self
            .summary
            .compare_exchange(PARKED, DIRECT, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        // The transport reads it once non-zero (it reset it to zero when it
        // took the last one, before the park we just ended).
        self.direct.store(i as u32 + 1, Ordering::Release);
        self.end_episode();
        true
    }

    /// Ends the current episode, for the marker that cleared `PARKED`:
    /// wakes the cell's waker by reference, then counts the episode in
    /// `woken`, after which the transport may rewrite the cell.
    fn end_episode(&self) {
        // SAFETY: the caller cleared `PARKED` and has not counted `woken`
        // yet: the transport does not write the cell until it has (see the
        // `Sync` argument). Other markers may read it at the same time
        // (shared reads only).
        self.waker.with(|cell| {
            if let Some(w) = unsafe { &*cell } {
                w.wake_by_ref();
            }
        });
        self.woken.fetch_add(1, Ordering::AcqRel);
    }

    /// The route a marker handed over with `DIRECT`, if it has stored it
    /// yet; taking it resets the slot for the next hand-over. Transport
    /// only, while `DIRECT` is set and its route not taken.
    #[inline(always)]
    fn take_direct(&self) -> Option<usize> {
        let d = self.direct.load(Ordering::Acquire);
        if d == 0 {
            return None;
        }
        // The next marker stores only after our next park, which comes
        // after this store.
        self.direct.store(0, Ordering::Relaxed);
        Some(d as usize - 1)
    }

    /// Sets `group` in the summary and wakes the transport if it was
    /// parked. `group == 0` (a poke, [`Self::wake_transport`]): wakes a
    /// parked transport, or sets group bit 0 so a running one looks again
    /// before it parks.
    fn signal(&self, group: u32) {
        let bit = if group == 0 { 1 } else { group };
        let mut s = self.summary.load(Ordering::Acquire);
        loop {
            if s & PARKED == 0 {
                // The group bit already set: the transport has not taken the
                // summary since it was set (if it had taken this word since,
                // our `fetch_or` in `mark` read its swap, which comes after
                // its summary update, and this load could not see the old
                // bit), so it will look at this word. A load, no write: a
                // burst across one group costs one read-modify-write per
                // route.
                if s & bit != 0 {
                    return;
                }
                // Running: its parking compare-and-swap will see our bit.
                match self.summary.compare_exchange_weak(
                    s,
                    s | bit,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return,
                    Err(x) => s = x,
                }
                continue;
            }
            // Parked (so no group bit is set): clear `PARKED`; waking this
            // episode is then ours alone.
            match self.summary.compare_exchange_weak(
                s,
                (s & !PARKED) | group,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.end_episode();
                    return;
                }
                Err(x) => s = x,
            }
        }
    }

    /// Whether any bit may be set (a hint: the summary word is not cleared
    /// eagerly).
    #[cfg(all(test, feature = "alloc", not(aimdb_loom)))]
    pub(crate) fn maybe_ready(&self) -> bool {
        self.summary.load(Ordering::Acquire) & (GROUPS | DIRECT) != 0
    }

    /// Makes the transport look again without marking a route (shutdown, a
    /// new route): wakes it if it is parked; if it is running, its next
    /// park finds a group bit set and polls once more instead.
    #[cfg(all(test, feature = "alloc", not(aimdb_loom)))]
    pub(crate) fn wake_transport(&self) {
        self.signal(0);
    }

    /// The transport gives back group bits it took from the summary but
    /// whose words it did not swap (it stopped early, see
    /// [`Pending::absorb_or_only`]):
    /// those words still hold their bits, so the groups are marked again,
    /// as a marker would. Only the running transport calls it, so
    /// `PARKED` is clear and nobody needs waking; a marker's concurrent
    /// `fetch_or` commutes with this one.
    #[cold]
    fn republish(&self, groups: u32) {
        if groups != 0 {
            self.summary.fetch_or(groups & GROUPS, Ordering::AcqRel);
        }
    }
}

impl<const W: usize> Default for Readiness<W> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const W: usize> fmt::Debug for Readiness<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Readiness")
            .field("capacity", &Self::CAPACITY)
            .field("summary", &self.summary.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}
