//! Which ready route the transport serves next: the order of service over
//! the set the readiness layer keeps (`sync`'s `Pending`), which only takes
//! bits and parks.

use core::task::Waker;

use crate::sync::{Pending, Readiness};

/// The transport's order of service: round-robin from a rotating cursor,
/// with two priority classes.
///
/// Routes `0..urgent` (at most 32, so all in word 0) are urgent. A pull
/// serves a pending urgent route before any normal one, round-robin among
/// them, except that after `burst` urgent routes in a row while a normal
/// one is pending, one normal route goes next. The class is decided here
/// only, by index, so markers, parking and `set` do not know it. A take
/// stops after word 0 when it holds a ready urgent route (the untaken
/// groups go back to the summary), so the urgent pull does not wait for
/// every other word to be swapped. A table without urgent routes pays a
/// zero mask test per `pop` and one masked test per word taken.
#[derive(Clone, Debug, Default)]
pub(crate) struct Scheduler<const W: usize> {
    /// Routes taken from the bitmap and not served yet, and the parking
    /// state.
    pending: Pending<W>,
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
}

impl<const W: usize> Scheduler<W> {
    /// Nothing pending, cursor at route 0, no urgent route.
    pub(crate) const fn new() -> Self {
        Self {
            pending: Pending::new(),
            urgent_mask: 0,
            urgent_cursor: 0,
            streak: 0,
            burst: 0,
        }
    }

    /// The transport's pull: take the ready bits, then [`Self::pop`], in
    /// the same order of service. A route handed over with `DIRECT` while
    /// nothing else is pending (the parked case: every pull of
    /// `b1_outbound_wakeup`'s `parked` cells) is served without passing
    /// through the set: the cursor moves past it as `pop` would move it, so
    /// the rotation is the same, and the wrap-around search `pop` would do
    /// to find the one bit behind the cursor is skipped.
    ///
    /// Always inlined: at the firmware's `opt-level = "s"` it is otherwise
    /// called, which costs instructions on every ready pull (`b3_on_target`,
    /// `cortex-m3/outbound_next_static_topic`).
    #[inline(always)]
    pub(crate) fn take(&mut self, ready: &Readiness<W>) -> Option<usize> {
        match self.pending.absorb_or_only(ready, &self.urgent_mask) {
            Err(i) => Some(self.serve_only(i)),
            Ok(_) => self.pop(),
        }
    }

    /// Parks the transport task (see [`Pending::park`]): `true` when the
    /// caller may return `Pending`, `false` when a route became ready
    /// meanwhile (take again).
    #[inline]
    pub(crate) fn park(&mut self, ready: &Readiness<W>, waker: &Waker) -> bool {
        self.pending.park(ready, waker)
    }

    /// Marks route `i` pending (it may have more to deliver).
    #[inline]
    pub(crate) fn set(&mut self, i: usize) {
        self.pending.set(i);
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

    /// Route `i`, the only one pending, is served: the cursor of its class
    /// moves past it as [`Self::pop`] would move it.
    #[inline]
    fn serve_only(&mut self, i: usize) -> usize {
        if self.urgent_mask != 0 {
            self.serve_only_classes(i);
        } else {
            self.pending.bits().move_past(i);
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
            self.pending.bits().move_past(i);
            self.streak = 0;
        }
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
        self.pending.bits().pop()
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
        let bits = self.pending.bits();
        let u = bits.word0() & mask;
        // The urgent bits hidden from the normal round-robin below.
        let mut hidden = 0;
        if u != 0 {
            if self.streak < self.burst || !bits.any_outside0(mask) {
                // Round-robin from the urgent cursor, wrapping.
                let from = u & (!0u32).checked_shl(self.urgent_cursor).unwrap_or(0);
                let i = if from != 0 { from } else { u }.trailing_zeros();
                bits.clear0(i);
                self.served_urgent(i);
                return Some(i as usize);
            }
            // A burst is over and a normal route waits: it goes next.
            hidden = bits.take_word0(mask);
        }
        // No urgent route pending, or a normal one's turn: a burst is over.
        self.streak = 0;
        let bits = self.pending.bits();
        let normal = bits.pop();
        bits.put_word0(hidden);
        normal
    }
}

#[cfg(all(test, not(aimdb_loom)))]
mod tests;
