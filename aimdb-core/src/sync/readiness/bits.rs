//! The transport's plain (not shared, not atomic) set of taken routes:
//! the same two levels as the bitmap, and a rotating cursor for
//! round-robin service.

use core::fmt;

use super::Readiness;

/// Routes taken from a [`Readiness`] and not served yet.
#[derive(Clone)]
pub(crate) struct Bits<const W: usize> {
    bits: [u32; W],
    /// Bit `g`: some word of group `g` may be non-zero.
    summary: u32,
    cursor: usize,
}

impl<const W: usize> Bits<W> {
    const GROUP: usize = Readiness::<W>::GROUP;

    pub(super) const fn new() -> Self {
        Self {
            bits: [0; W],
            summary: 0,
            cursor: 0,
        }
    }

    /// Word 0.
    #[inline]
    pub(crate) fn word0(&self) -> u32 {
        self.bits[0]
    }

    /// Clears route `i` (in word 0), and the summary bit of group 0 if its
    /// words are all zero now.
    pub(crate) fn clear0(&mut self, i: u32) {
        self.bits[0] &= !(1 << i);
        self.fix_group(0);
    }

    /// Whether a route is pending outside `mask` (of word 0).
    pub(crate) fn any_outside0(&self, mask: u32) -> bool {
        self.bits[0] & !mask != 0
            || self.summary & !1 != 0
            || self.bits[1..Self::GROUP.min(W)].iter().any(|&b| b != 0)
    }

    /// Takes the bits of `mask` out of word 0 (hidden from `pop`).
    pub(crate) fn take_word0(&mut self, mask: u32) -> u32 {
        let taken = self.bits[0] & mask;
        self.bits[0] &= !mask;
        self.fix_group(0);
        taken
    }

    /// Puts back what [`Self::take_word0`] took.
    pub(crate) fn put_word0(&mut self, bits: u32) {
        if bits != 0 {
            self.bits[0] |= bits;
            self.summary |= 1;
        }
    }

    /// Clears the summary bit of group `g` if its words are all zero.
    #[inline]
    fn fix_group(&mut self, g: usize) {
        let end = ((g + 1) * Self::GROUP).min(W);
        if self.bits[g * Self::GROUP..end].iter().all(|&b| b == 0) {
            self.summary &= !(1 << g);
        }
    }

    /// Adds the non-zero word `taken` to word `w`, of group `g`.
    #[inline]
    pub(super) fn or_word(&mut self, w: usize, g: usize, taken: u32) {
        self.bits[w] |= taken;
        self.summary |= 1 << g;
    }

    /// Marks route `i` pending (it may have more to deliver).
    #[inline]
    pub(super) fn set(&mut self, i: usize) {
        let w = i / 32;
        if w < W {
            self.bits[w] |= 1 << (i % 32);
            self.summary |= 1 << (w / Self::GROUP);
        }
    }

    /// Whether nothing is pending.
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.summary == 0
    }

    /// Moves the cursor past route `i`, as [`Self::pop`] does when it takes
    /// `i`.
    #[inline]
    pub(crate) fn move_past(&mut self, i: usize) {
        self.cursor = if i + 1 >= 32 * W { 0 } else { i + 1 };
    }

    /// Takes the next pending route at or after the cursor (wrapping), and
    /// moves the cursor past it. The empty test is inlined: every parked
    /// pull makes it once, after the message it was woken for.
    #[inline(always)]
    pub(crate) fn pop(&mut self) -> Option<usize> {
        if self.summary == 0 {
            return None;
        }
        self.pop_some()
    }

    /// [`Self::pop`] with something pending.
    #[inline]
    fn pop_some(&mut self) -> Option<usize> {
        let i = match self.find_from(self.cursor) {
            Some(i) => i,
            None => self.find_from(0)?,
        };
        let w = i / 32;
        self.bits[w] &= !(1 << (i % 32));
        if self.bits[w] == 0 {
            self.fix_group(w / Self::GROUP);
        }
        self.move_past(i);
        Some(i)
    }

    fn find_from(&self, start: usize) -> Option<usize> {
        let w0 = start / 32;
        if w0 >= W {
            return None;
        }
        let first = self.bits[w0] & (!0u32 << (start % 32));
        if first != 0 {
            return Some(w0 * 32 + first.trailing_zeros() as usize);
        }
        let g0 = w0 / Self::GROUP;
        // The rest of the cursor's group, unless the group is empty.
        if self.summary & (1 << g0) != 0 {
            let group_end = ((g0 + 1) * Self::GROUP).min(W);
            for w in w0 + 1..group_end {
                if self.bits[w] != 0 {
                    return Some(w * 32 + self.bits[w].trailing_zeros() as usize);
                }
            }
        }
        let mut groups = if g0 >= 31 {
            0
        } else {
            self.summary & (!0u32 << (g0 + 1))
        };
        while groups != 0 {
            let g = groups.trailing_zeros() as usize;
            groups &= groups - 1;
            let end = ((g + 1) * Self::GROUP).min(W);
            for w in g * Self::GROUP..end {
                if self.bits[w] != 0 {
                    return Some(w * 32 + self.bits[w].trailing_zeros() as usize);
                }
            }
        }
        None
    }
}

impl<const W: usize> fmt::Debug for Bits<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bits")
            .field("summary", &self.summary)
            .field("cursor", &self.cursor)
            .finish_non_exhaustive()
    }
}
