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
//! The waker cell is guarded by *episodes* rather than a lock bit: before
//! each park the transport numbers the episode (`episode`); the marker that
//! clears `PARKED` clones the cell's waker, stores that number in `done` (a
//! plain release store, not a read-modify-write), and only then wakes the
//! clone. The transport writes the cell, or parks again, only when it sees
//! `PARKED` clear and `done == episode`, so at most one marker reads the
//! cell at a time and never while the transport writes it. Compared with
//! releasing a lock bit in the summary, this saves one read-modify-write
//! per wake: the `b1_outbound_wakeup` parked rows pay it on every message.
//! A transport polled between the marker's compare-and-swap and its `done`
//! store (a few instructions on another thread) polls again instead of
//! parking. The wake comes after `done` because on a host it is a syscall
//! (futex, eventfd): a transport woken on another core used to find its
//! episode still open for the whole syscall and spin, and on an
//! oversubscribed host it could spin through the marker's time slice
//! (`xthread_parked`/`outbound_routes_thread` in `b1_outbound_wakeup`:
//! about 60-80 µs per message before, see `aimdb-bench/README.md`).
//!
//! The marker that clears `PARKED` does not touch the bitmap at all: when
//! the summary is exactly `PARKED` (nothing else pending), it hands its
//! route index over in the compare-and-swap that ends the episode
//! (`PARKED` → `DIRECT`, the index in `direct`, published by the `done`
//! store), and the transport takes it from there without a swap. A parked
//! hand-over then costs two read-modify-writes in all (that one and the
//! transport's next park) instead of five (word, summary, the transport's
//! summary and word takes, its park). `DIRECT` is cleared by the next park.
//! When nothing else is pending, [`Pending::take`] serves the handed-over
//! route at once instead of setting it in its private set and searching
//! the set for it (with the plain-field message of `outbound`, b2
//! `outbound_next_parked` went from 665 to 537 instructions at 80c7fb6).
//!
//! The transport keeps a clone of the waker it stored (in [`Pending`]), so
//! re-parking with the same waker is one compare-and-swap and never touches
//! the cell.

use core::fmt;
use core::task::Waker;

use super::atomic::{spin_loop, AtomicU32, Ordering, UnsafeCell};
use super::loom_const_fn;
use crate::outbound::URGENT_BURST;

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
    /// The route handed over with `DIRECT`: written by the marker that ended
    /// the episode before it stores `done`.
    direct: AtomicU32,
    /// Number of the transport's latest park; written by the transport only.
    episode: AtomicU32,
    /// Latest episode whose waking is over: stored by the marker that
    /// cleared `PARKED`, or by the transport for an episode no marker ended.
    done: AtomicU32,
    /// The transport's waker: read by the marker that ended an episode
    /// until it stores `done`, written by the transport only while `PARKED`
    /// is clear and `done == episode`.
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

// SAFETY: `words`, `summary`, `episode`, `done` are atomics and `tags` is
// never written after `new`. The `waker` cell: a marker reads it only after
// its compare-and-swap cleared `PARKED` (acquire: it sees the cell the
// transport wrote before its releasing park), and only until it stores
// `done` (release), cloning the waker to wake after that store. The
// transport writes it only after loading `PARKED`
// clear and `done == episode` (acquire: every read by the marker of that
// episode happened before), and it sets `PARKED` again only after the
// write. Only one marker can clear `PARKED` per episode and no new episode
// starts before `done` caught up, so readers never overlap each other or
// the writer. `Waker` is `Send + Sync`, so the waker may be cloned, woken
// and dropped from any thread.
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
                done: AtomicU32::new(0),
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
    pub fn mark(&self, i: usize) {
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
        // Read by the transport only after it acquires our `done` store.
        self.direct.store(i as u32, Ordering::Relaxed);
        self.end_episode(true);
        true
    }

    /// Ends the current episode: with `wake`, wakes the cell's waker first
    /// (the marker that cleared `PARKED`); then stores the episode in
    /// `done`, after which the transport may rewrite the cell or park again.
    /// Every way an episode ends goes through here: the marker that cleared
    /// `PARKED` (with `wake`), or the transport for an episode no marker
    /// ended (it cleared `PARKED` itself, or its park failed).
    fn end_episode(&self, wake: bool) {
        // `episode` is the transport's: it wrote it before the releasing
        // park a marker's compare-and-swap acquired, or it is the caller.
        let e = self.episode.load(Ordering::Relaxed);
        let waker = if wake { self.take_cell_clone() } else { None };
        self.done.store(e, Ordering::Release);
        // Woken after `done`: a transport on another thread that runs as
        // soon as the wake lands finds its episode over (and a `DIRECT`
        // route readable) instead of polling until this thread returns
        // from the wake, which on a host is a futex or eventfd syscall.
        if let Some(w) = waker {
            w.wake();
        }
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
                    self.end_episode(true);
                    return;
                }
                Err(x) => s = x,
            }
        }
    }

    /// A clone of the stored waker, to wake once `done` is stored. Only
    /// the marker that cleared `PARKED`, before it stores `done`.
    ///
    /// Cloning then waking by value costs what waking by reference does on
    /// tokio (its by-reference wake takes a task reference to schedule, the
    /// by-value wake hands the clone's over) and nothing on embassy (a
    /// clone is a pointer copy).
    fn take_cell_clone(&self) -> Option<Waker> {
        // SAFETY: the caller cleared `PARKED` for the current episode and
        // has not stored `done` yet: the transport does not write the cell
        // until it has (see the `Sync` argument), and no other marker can
        // clear `PARKED` before the transport parks again, which also waits
        // for `done`. The clone is ours; the cell is not touched after.
        self.waker.with_mut(|cell| unsafe { (*cell).clone() })
    }

    /// Whether any bit may be set (a hint: the summary word is not cleared
    /// eagerly).
    pub fn maybe_ready(&self) -> bool {
        self.summary.load(Ordering::Acquire) & (GROUPS | DIRECT) != 0
    }

    /// Makes the transport look again without marking a route (shutdown, a
    /// new route): wakes it if it is parked; if it is running, its next
    /// park finds a group bit set and polls once more instead.
    pub fn wake_transport(&self) {
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
/// round-robin among them, except that after [`URGENT_BURST`] urgent routes
/// in a row while a normal one is pending, one normal route goes next. The
/// class is decided here only, by index, so markers, parking and `set` do
/// not know it. `absorb` stops after word 0 when it holds a ready urgent
/// route (the untaken groups go back to the summary, see
/// [`Readiness::republish`]), so the urgent pull does not wait for every
/// other word to be swapped. A table without urgent routes pays a zero
/// mask test per `pop` and one masked test per word taken.
#[derive(Clone)]
pub struct Pending<const W: usize> {
    /// Routes taken from the bitmap and not served yet.
    bits: Bits<W>,
    /// Bits of word 0 that are urgent routes (`0..urgent`).
    urgent_mask: u32,
    /// Cursor of the round-robin among the urgent routes.
    urgent_cursor: u32,
    /// Urgent routes served in a row; reset by a pull that finds no
    /// urgent route pending, or that serves a normal one.
    streak: u8,
    /// A clone of the waker this transport stored in the readiness cell:
    /// comparing against it tells whether the cell needs rewriting without
    /// touching the cell.
    waker: Option<Waker>,
    /// Parked, and the route a marker may hand over with `DIRECT` is not
    /// taken yet.
    direct_due: bool,
}

impl<const W: usize> Pending<W> {
    const GROUP: usize = Readiness::<W>::GROUP;

    /// Nothing pending, cursor at route 0.
    pub const fn new() -> Self {
        Self {
            bits: Bits::new(),
            urgent_mask: 0,
            urgent_cursor: 0,
            streak: 0,
            waker: None,
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
    /// Always inlined: at the firmware's `opt-level = "s"` it was otherwise
    /// called, 15 instructions more on every ready pull (`b3_on_target`,
    /// `cortex-m3/outbound_next_static_topic`).
    #[inline(always)]
    pub fn take(&mut self, ready: &Readiness<W>) -> Option<usize> {
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
    pub fn absorb(&mut self, ready: &Readiness<W>) -> bool {
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
            } else if ready.done.load(Ordering::Acquire) == ready.episode.load(Ordering::Relaxed) {
                // The marker that woke us handed its route over; it is ours
                // to read once its `done` store is visible (on another
                // thread it may not have stored it yet: `park` then polls
                // again).
                self.direct_due = false;
                let i = ready.direct.load(Ordering::Relaxed) as usize;
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
    pub fn park(&mut self, ready: &Readiness<W>, waker: &Waker) -> bool {
        let mut same = self.waker.as_ref().is_some_and(|w| w.will_wake(waker));
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
                        ready.end_episode(false);
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
            let e = ready.episode.load(Ordering::Relaxed);
            if self.direct_due || ready.done.load(Ordering::Acquire) != e {
                // The marker that ended episode `e` has cleared `PARKED`
                // on another thread but not yet stored `done` (a few
                // instructions: it wakes only after that store), so its
                // `DIRECT` route is not readable yet: neither rewrite the
                // cell nor start an episode under it. Poll again.
                waker.wake_by_ref();
                spin_loop();
                return true;
            }
            if !same {
                self.replace_waker(ready, waker);
                same = true;
            }
            let e = e.wrapping_add(1);
            ready.episode.store(e, Ordering::Relaxed);
            // `DIRECT`, if set, was taken (above): the park clears it.
            match ready
                .summary
                .compare_exchange(s, PARKED, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    self.direct_due = true;
                    return true;
                }
                Err(x) => {
                    // Not parked after all, so no marker will end episode
                    // `e`: end it here.
                    ready.end_episode(false);
                    s = x;
                }
            }
        }
    }

    /// Stores `waker` in the cell (the first park, or the task's waker
    /// changed). The caller saw `PARKED` clear and `done == episode`.
    #[cold]
    #[inline(never)]
    fn replace_waker(&mut self, ready: &Readiness<W>, waker: &Waker) {
        let new = Some(waker.clone());
        // SAFETY: `PARKED` is clear and the last episode's marker stored
        // `done` (acquired by the caller), so no marker reads the cell, and
        // none will before our next park publishes the write (see the
        // `Sync` argument).
        let old = ready
            .waker
            .with_mut(|cell| unsafe { core::mem::replace(&mut *cell, new) });
        // Dropping a waker runs foreign code: after the cell is consistent.
        drop(old);
        self.waker = Some(waker.clone());
    }

    /// Marks route `i` pending (it may have more to deliver).
    #[inline]
    pub fn set(&mut self, i: usize) {
        self.bits.set(i);
    }

    /// Whether nothing is pending (the unit tests check it).
    #[cfg(all(test, not(aimdb_loom)))]
    pub fn is_empty(&self) -> bool {
        self.bits.is_empty()
    }

    /// Makes routes `0..n` urgent (`n` at most 32).
    pub fn set_urgent(&mut self, n: usize) {
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
    pub fn pop(&mut self) -> Option<usize> {
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
            if self.streak < URGENT_BURST || !self.bits.any_outside0(mask) {
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
