//! One definition for a connector's counter set: the live atomics
//! (`Counters`, one writer, readable anywhere) and their plain copy
//! (`Stats`), generated from one field list so the two never drift.
//!
//! Each counter has one writer (its connector), so a bump is a load and a
//! store, not a read-modify-write: no compare-and-swap, which `thumbv6m`
//! lacks. Counters wrap at `u32::MAX`.

use portable_atomic::{AtomicU32, Ordering};

/// Adds `by` to a single-writer counter.
pub(crate) fn bump(c: &AtomicU32, by: u32) {
    c.store(
        c.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

/// `counter_set! { /// docs  pub struct Counters; /// docs  pub struct
/// Stats { /// doc  field, ... } }`: the atomics with `const fn new()` and
/// `snapshot()`, and the `#[non_exhaustive]` copy with one `u32` per
/// field.
macro_rules! counter_set {
    (
        $(#[$cm:meta])* $cvis:vis struct $counters:ident;
        $(#[$sm:meta])* $svis:vis struct $stats:ident {
            $( $(#[$fm:meta])* $field:ident ),* $(,)?
        }
    ) => {
        $(#[$cm])*
        #[derive(Debug, Default)]
        $cvis struct $counters {
            $( $field: portable_atomic::AtomicU32, )*
        }

        $(#[$sm])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        #[non_exhaustive]
        $svis struct $stats {
            $( $(#[$fm])* pub $field: u32, )*
        }

        impl $counters {
            /// All zero; `const` so it can live in a `static`.
            pub const fn new() -> Self {
                Self { $( $field: portable_atomic::AtomicU32::new(0), )* }
            }

            /// The counters now.
            pub fn snapshot(&self) -> $stats {
                $stats {
                    $( $field: self.$field.load(portable_atomic::Ordering::Relaxed), )*
                }
            }
        }
    };
}
pub(crate) use counter_set;
