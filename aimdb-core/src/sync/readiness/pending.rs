//! The transport's side of the readiness protocol: what it took from the
//! shared bitmap and not served yet, its parking (the waker cell it
//! writes), and the `DIRECT` hand-over it receives. Which pending route is
//! served next is the caller's policy (`outbound`'s scheduler); this module
//! only moves bits and parks.

use core::fmt;
use core::task::Waker;

use super::super::atomic::{spin_loop, Ordering};
use super::bits::Bits;
use super::{Readiness, DIRECT, GROUPS, PARKED};

/// The transport task's private copy of taken readiness bits (a plain
/// [`Bits`] set), and the waker it last stored in the [`Readiness`]. Not
/// shared, not atomic.
#[derive(Clone)]
pub(crate) struct Pending<const W: usize> {
    /// Routes taken from the bitmap and not served yet.
    bits: Bits<W>,
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
            waker: None,
            seen_vtable: 0,
            direct_due: false,
        }
    }

    /// The routes taken and not served yet, for the caller's policy.
    #[inline(always)]
    pub(crate) fn bits(&mut self) -> &mut Bits<W> {
        &mut self.bits
    }

    /// [`Self::absorb_or_only`] without an early stop, a handed-over route
    /// put in the set: whether anything was taken. The unit tests look at
    /// the set after it.
    #[cfg(all(test, not(aimdb_loom)))]
    pub(crate) fn absorb(&mut self, ready: &Readiness<W>) -> bool {
        match self.absorb_or_only(ready, &0) {
            Err(i) => {
                self.set(i);
                true
            }
            Ok(any) => any,
        }
    }

    /// Moves every ready bit of `ready` into this set: one swap per
    /// non-empty word. `Ok(any)`: whether anything was taken. `Err(i)`:
    /// route `i` was handed over with `DIRECT` while nothing else was
    /// pending or ready; it is left out of the set for the caller to serve.
    ///
    /// `stop0`: bits of word 0 that end the take early. When word 0 (taken
    /// first) holds one of them, the groups not swapped yet go back to the
    /// summary ([`Readiness::republish`]) and their words keep their bits
    /// for a later take. Zero never stops early. By reference: it is read
    /// only when word 0 was taken, not on every call.
    #[inline(always)]
    pub(crate) fn absorb_or_only(
        &mut self,
        ready: &Readiness<W>,
        stop0: &u32,
    ) -> Result<bool, usize> {
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
                    if taken & *stop0 != 0 && w == 0 {
                        // A stopping bit of word 0 (the first word taken)
                        // is ready: hand it to the caller before swapping
                        // the rest.
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
    /// Call it after [`Self::absorb_or_only`] and the caller's set found
    /// nothing. One transport per
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
