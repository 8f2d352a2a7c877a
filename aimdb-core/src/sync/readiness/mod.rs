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
//! nothing else is pending, [`Pending::take`] serves the handed-over route
//! at once instead of setting it in its private set and searching the set
//! for it.
//!
//! The transport keeps a clone of the waker it stored (in [`Pending`]), so
//! re-parking with the same waker is one compare-and-swap and never touches
//! the cell.

use core::fmt;
use core::task::Waker;

use super::atomic::{spin_loop, AtomicU32, Ordering, UnsafeCell};
use super::loom_const_fn;

mod bits;
#[cfg(all(test, not(aimdb_loom)))]
mod tests;
mod waker;

use bits::Bits;
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
    /// whose words it did not swap (it stopped early for an urgent route):
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

/// The transport task's private copy of taken readiness bits, with a
/// rotating cursor for round-robin service, and the waker it last stored
/// in the [`Readiness`]. Not shared, not atomic.
///
/// Two priority classes: routes `0..urgent` (at most 32, so all in word 0)
/// are urgent. A pull serves a pending urgent route before any normal one,
/// round-robin among them, except that after `burst` urgent routes
/// in a row while a normal one is pending, one normal route goes next. The
/// class is decided here only, by index, so markers, parking and `set` do
/// not know it. `absorb` stops after word 0 when it holds a ready urgent
/// route (the untaken groups go back to the summary, see
/// [`Readiness::republish`]), so the urgent pull does not wait for every
/// other word to be swapped. A table without urgent routes pays a zero
/// mask test per `pop` and one masked test per word taken.
#[derive(Clone)]
pub(crate) struct Pending<const W: usize> {
    /// Routes taken from the bitmap and not served yet.
    bits: Bits<W>,
    /// Bits of word 0 that are urgent routes (`0..urgent`).
    urgent_mask: u32,
    /// Cursor of the round-robin among the urgent routes.
    urgent_cursor: u32,
    /// Urgent routes served in a row; reset by a pull that finds no
    /// urgent route pending, or that serves a normal one.
    streak: u8,
    /// Urgent routes served in a row while a normal one is pending before
    /// one normal route goes next (the owner's policy, see
    /// [`Self::set_urgent`]).
    burst: u8,
    /// A clone of the waker this transport stored in the readiness cell:
    /// comparing against it tells whether the cell needs rewriting without
    /// touching the cell.
    waker: Option<Waker>,
    /// The vtable address of the waker `waker` was cloned from, which may
    /// differ from the clone's (see [`Self::is_stored`]).
    seen_vtable: usize,
    /// Parked, and the route a marker may hand over with `DIRECT` is not
    /// taken yet.
    direct_due: bool,
}

impl<const W: usize> Pending<W> {
    const GROUP: usize = Readiness::<W>::GROUP;

    /// Nothing pending, cursor at route 0.
    pub(crate) const fn new() -> Self {
        Self {
            bits: Bits::new(),
            urgent_mask: 0,
            urgent_cursor: 0,
            streak: 0,
            burst: 0,
            waker: None,
            seen_vtable: 0,
            direct_due: false,
        }
    }

    /// The transport's pull: take the ready bits (`absorb`), then
    /// [`Self::pop`], in the same order of service. A route handed over
    /// with `DIRECT` while nothing else is pending (the parked case: every
    /// pull of `b1_outbound_wakeup`'s `parked` cells) is served without
    /// passing through the set: the cursor moves past it as `pop` would
    /// move it, so the rotation is the same, and the wrap-around search
    /// `pop` would do to find the one bit behind the cursor is skipped.
    ///
    /// Always inlined: at the firmware's `opt-level = "s"` it is otherwise
    /// called, which costs instructions on every ready pull (`b3_on_target`,
    /// `cortex-m3/outbound_next_static_topic`).
    #[inline(always)]
    pub(crate) fn take(&mut self, ready: &Readiness<W>) -> Option<usize> {
        match self.absorb_or_only(ready) {
            Err(i) => Some(self.serve_only(i)),
            Ok(_) => self.pop(),
        }
    }

    /// Moves every ready bit of `ready` into this set: one swap per
    /// non-empty word. Returns whether anything was taken. The transport
    /// pulls with [`Self::take`]; the tests look at the set between the
    /// two steps.
    #[cfg(all(test, not(aimdb_loom)))]
    pub(crate) fn absorb(&mut self, ready: &Readiness<W>) -> bool {
        match self.absorb_or_only(ready) {
            Err(i) => {
                self.set(i);
                true
            }
            Ok(any) => any,
        }
    }

    /// Route `i`, the only one pending, is served: the cursor of its class
    /// moves past it as [`Self::pop`] would move it.
    #[inline]
    fn serve_only(&mut self, i: usize) -> usize {
        if self.urgent_mask != 0 {
            self.serve_only_classes(i);
        } else {
            self.bits.move_past(i);
        }
        i
    }

    /// [`Self::serve_only`] for a table with urgent routes: what
    /// [`Self::pop_classes`] does when `i` is the only route pending.
    #[cold]
    fn serve_only_classes(&mut self, i: usize) {
        if i < 32 && self.urgent_mask & (1 << i) != 0 {
            self.served_urgent(i as u32);
        } else {
            self.bits.move_past(i);
            self.streak = 0;
        }
    }

    /// `absorb`, except that `Err(i)` is route `i` handed over with
    /// `DIRECT` while nothing else is pending or ready, left out of the set
    /// for the caller to serve.
    #[inline(always)]
    fn absorb_or_only(&mut self, ready: &Readiness<W>) -> Result<bool, usize> {
        let s = ready.summary.load(Ordering::Acquire);
        let mut any = false;
        if self.direct_due && s & PARKED == 0 {
            if s & DIRECT == 0 {
                // Our episode ended without a hand-over (a marker that took
                // the bitmap path, or a poke): only that one CAS can set
                // `DIRECT`, so none will come.
                self.direct_due = false;
            } else if let Some(i) = ready.take_direct() {
                // The marker that woke us handed its route over (on another
                // thread it may not have stored it yet: `park` then polls
                // again).
                self.direct_due = false;
                if s & GROUPS == 0 && self.bits.is_empty() {
                    return Err(i);
                }
                self.set(i);
                any = true;
            }
        }
        if s & GROUPS == 0 {
            return Ok(any);
        }
        // Clear the group bits only. `PARKED` is never set alongside group
        // bits, and only its own parking sets it.
        let mut groups = ready.summary.fetch_and(!GROUPS, Ordering::AcqRel) & GROUPS;
        while groups != 0 {
            let g = groups.trailing_zeros() as usize;
            groups &= groups - 1;
            let end = ((g + 1) * Self::GROUP).min(W);
            for w in g * Self::GROUP..end {
                // With one word per group, the summary bit says the word is
                // set: swap without looking first.
                if Self::GROUP > 1 && ready.words[w].load(Ordering::Relaxed) == 0 {
                    continue;
                }
                let taken = ready.words[w].swap(0, Ordering::AcqRel);
                if taken != 0 {
                    self.bits.or_word(w, g, taken);
                    any = true;
                    if taken & self.urgent_mask != 0 && w == 0 {
                        // An urgent route is ready (urgent routes are all
                        // in word 0, the first word taken): serve it
                        // before swapping the rest.
                        ready.republish(groups | u32::from(Self::GROUP > 1));
                        return Ok(true);
                    }
                }
            }
        }
        Ok(any)
    }

    /// Parks the transport task: stores `waker` in `ready` (unless the
    /// stored one would wake the same task) and sets `PARKED`, in one
    /// compare-and-swap that also checks the bitmap one last time. Returns
    /// `true` when the caller may return `Pending` (a later mark wakes
    /// `waker`), `false` when a route became ready meanwhile (absorb again).
    ///
    /// Call it after [`Self::take`] found nothing. One transport per
    /// [`Readiness`]: a second one parking on the same bitmap may miss
    /// wake-ups (never memory safety).
    pub(crate) fn park(&mut self, ready: &Readiness<W>, waker: &Waker) -> bool {
        let mut same = self.is_stored(waker);
        let mut s = ready.summary.load(Ordering::Acquire);
        loop {
            if s & PARKED != 0 {
                if same {
                    // Parked with this waker (a spurious poll): no marker
                    // came, nothing to write.
                    return true;
                }
                // Parked with another waker, or by a transport before us:
                // end that episode ourselves, so no marker reads the cell.
                match ready.summary.compare_exchange_weak(
                    s,
                    s & !PARKED,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        ready.woken.fetch_add(1, Ordering::AcqRel);
                        self.direct_due = false;
                        s &= !PARKED;
                    }
                    Err(x) => {
                        s = x;
                        continue;
                    }
                }
            }
            if s & GROUPS != 0 {
                return false;
            }
            if self.direct_due {
                // `DIRECT` is set (`take` clears `direct_due` otherwise) and
                // its route not taken: absorb again once it is readable. The
                // marker that set it stores it right after its
                // compare-and-swap; on another thread it may not have yet:
                // poll again rather than park over it.
                if ready.direct.load(Ordering::Acquire) != 0 {
                    return false;
                }
                waker.wake_by_ref();
                spin_loop();
                return true;
            }
            if !same {
                if ready.woken.load(Ordering::Acquire) != ready.episode.load(Ordering::Relaxed) {
                    // The marker of an earlier episode is still waking
                    // through the cell (on another thread): the cell cannot
                    // be rewritten yet. Poll again.
                    waker.wake_by_ref();
                    spin_loop();
                    return true;
                }
                self.replace_waker(ready, waker);
                same = true;
            }
            // `DIRECT`, if set, was taken (above): the park clears it.
            match ready
                .summary
                .compare_exchange(s, PARKED, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    // Only the transport writes `episode`; markers never
                    // read it.
                    let e = ready.episode.load(Ordering::Relaxed);
                    ready.episode.store(e.wrapping_add(1), Ordering::Relaxed);
                    self.direct_due = true;
                    return true;
                }
                Err(x) => s = x,
            }
        }
    }

    /// Whether the cell already holds a waker that wakes the same task as
    /// `waker`. `will_wake` against our clone, or the clone shares
    /// `waker`'s data and `waker` has the vtable of the waker we cloned
    /// (then `waker` is the waker we cloned, again: the clone keeps that
    /// data alive, so it names the same object). The second test is for
    /// executors whose by-reference waker has another vtable than its
    /// clones: tokio's `block_on` (`tokio_io::run_on_thread`) lends one,
    /// and `will_wake` alone rewrote the cell on every park there.
    #[inline]
    fn is_stored(&self, waker: &Waker) -> bool {
        self.waker.as_ref().is_some_and(|w| {
            w.will_wake(waker)
                || (w.data() == waker.data()
                    && core::ptr::from_ref(waker.vtable()) as usize == self.seen_vtable)
        })
    }

    /// Stores `waker` in the cell (the first park, or the task's waker
    /// changed). The caller saw `PARKED` clear and `woken == episode`.
    #[cold]
    #[inline(never)]
    fn replace_waker(&mut self, ready: &Readiness<W>, waker: &Waker) {
        let new = Some(waker.clone());
        // SAFETY: `PARKED` is clear and every ended episode was counted in
        // `woken` (acquired by the caller), so no marker reads the cell,
        // and none will before our next park publishes the write (see the
        // `Sync` argument).
        let old = ready
            .waker
            .with_mut(|cell| unsafe { core::mem::replace(&mut *cell, new) });
        // Dropping a waker runs foreign code: after the cell is consistent.
        drop(old);
        self.waker = Some(waker.clone());
        self.seen_vtable = core::ptr::from_ref(waker.vtable()) as usize;
    }

    /// Marks route `i` pending (it may have more to deliver).
    #[inline]
    pub(crate) fn set(&mut self, i: usize) {
        self.bits.set(i);
    }

    /// Whether nothing is pending (the unit tests check it).
    #[cfg(all(test, not(aimdb_loom)))]
    pub(crate) fn is_empty(&self) -> bool {
        self.bits.is_empty()
    }

    /// Makes routes `0..n` urgent (`n` at most 32), served `burst` in a
    /// row at most while a normal route is pending.
    pub(crate) fn set_urgent(&mut self, n: usize, burst: u8) {
        self.burst = burst;
        self.urgent_mask = match n {
            0 => 0,
            n if n >= 32 => u32::MAX,
            n => (1 << n) - 1,
        };
    }

    /// Takes the next pending route: an urgent one if any is pending
    /// (see the type's doc for the bound that keeps normal routes moving),
    /// else the next at or after the cursor (wrapping), moving the cursor
    /// past it.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<usize> {
        if self.urgent_mask != 0 {
            return self.pop_classes();
        }
        self.bits.pop()
    }

    /// Urgent route `i` is served: the urgent round-robin moves past it and
    /// the burst grows (both ways a pull serves an urgent route).
    fn served_urgent(&mut self, i: u32) {
        self.urgent_cursor = i + 1;
        self.streak = self.streak.saturating_add(1);
    }

    /// [`Self::pop`] for a table with urgent routes.
    #[cold]
    fn pop_classes(&mut self) -> Option<usize> {
        let mask = self.urgent_mask;
        let u = self.bits.word0() & mask;
        // The urgent bits hidden from the normal round-robin below.
        let mut hidden = 0;
        if u != 0 {
            if self.streak < self.burst || !self.bits.any_outside0(mask) {
                // Round-robin from the urgent cursor, wrapping.
                let from = u & (!0u32).checked_shl(self.urgent_cursor).unwrap_or(0);
                let i = if from != 0 { from } else { u }.trailing_zeros();
                self.bits.clear0(i);
                self.served_urgent(i);
                return Some(i as usize);
            }
            // A burst is over and a normal route waits: it goes next.
            hidden = self.bits.take_word0(mask);
        }
        // No urgent route pending, or a normal one's turn: a burst is over.
        self.streak = 0;
        let normal = self.bits.pop();
        self.bits.put_word0(hidden);
        normal
    }
}

impl<const W: usize> Default for Pending<W> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const W: usize> fmt::Debug for Pending<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pending")
            .field("bits", &self.bits)
            .finish_non_exhaustive()
    }
}
