//! A 28-bit value, an `Option<bool>` and a two-bit choice in one `u32`:
//! how links keep their overrides (retain, apply retained, QoS) without
//! growing. RAM per route
//! is budgeted (`make footprint`: under 32 bytes per outbound route on the
//! Cortex-M3), and a separate `Option<bool>` costs 4 bytes of padding.

const SET: u32 = 1 << 30;
const ON: u32 = 1 << 31;
const CHOICE_SHIFT: u32 = 28;
const CHOICE: u32 = 0b11 << CHOICE_SHIFT;
const MASK: u32 = (1 << CHOICE_SHIFT) - 1;

/// See the module docs. The value saturates (on `new`) or wraps (on
/// `wrapping_inc`) within 28 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Packed(u32);

impl Packed {
    /// `value` (saturated to 28 bits), no flag, no choice.
    pub(crate) const fn new(value: usize) -> Self {
        Self(if value > MASK as usize {
            MASK
        } else {
            value as u32
        })
    }

    pub(crate) const fn value(self) -> u32 {
        self.0 & MASK
    }

    /// The value with `value` (saturated), the flag kept.
    pub(crate) const fn with_value(self, value: usize) -> Self {
        Self(self.0 & !MASK | Self::new(value).0)
    }

    /// The value plus one, wrapping within 28 bits.
    pub(crate) const fn wrapping_inc(self) -> Self {
        Self(self.0 & !MASK | (self.0.wrapping_add(1) & MASK))
    }

    pub(crate) const fn flag(self) -> Option<bool> {
        if self.0 & SET == 0 {
            None
        } else {
            Some(self.0 & ON != 0)
        }
    }

    pub(crate) const fn with_flag(self, on: bool) -> Self {
        Self(self.0 & !(SET | ON) | SET | if on { ON } else { 0 })
    }

    /// Whether the flag is set and on (`flag() == Some(true)`, one test).
    pub(crate) const fn on(self) -> bool {
        self.0 & ON != 0
    }

    /// The choice, 1 to 3, or 0 if none was made.
    pub(crate) const fn choice(self) -> u32 {
        (self.0 & CHOICE) >> CHOICE_SHIFT
    }

    /// Choice `c` (1 to 3; 0 takes it back).
    pub(crate) const fn with_choice(self, c: u32) -> Self {
        Self(self.0 & !CHOICE | (c << CHOICE_SHIFT) & CHOICE)
    }
}

#[cfg(test)]
mod tests {
    use super::Packed;

    #[test]
    fn value_and_flag_are_independent() {
        let p = Packed::new(1024);
        assert_eq!((p.value(), p.flag()), (1024, None));
        let p = p.with_flag(true);
        assert_eq!((p.value(), p.flag()), (1024, Some(true)));
        let p = p.with_value(7).with_flag(false);
        assert_eq!((p.value(), p.flag()), (7, Some(false)));
        let p = Packed::new(usize::MAX).with_flag(true).with_choice(2);
        assert_eq!(
            (p.value(), p.flag(), p.choice()),
            ((1 << 28) - 1, Some(true), 2)
        );
        let p = p.wrapping_inc();
        assert_eq!(
            (p.value(), p.flag(), p.choice()),
            (0, Some(true), 2),
            "wraps within 28 bits"
        );
        let p = p.with_choice(3).with_flag(false).with_value(9);
        assert_eq!((p.value(), p.flag(), p.choice()), (9, Some(false), 3));
        assert_eq!(p.with_choice(0).choice(), 0);
    }
}
