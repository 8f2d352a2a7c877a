//! One definition for a counter set: the live atomics (`Counters`, one
//! writer, readable anywhere) and their plain copy (`Stats`), generated
//! from one field list by [`counter_set!`](crate::counter_set) so the two
//! never drift. Used by this crate's inbound and remote counters and by
//! the connectors; not an API of its own (hidden from the docs).
//!
//! Each counter has one writer (its connector, dispatch or responder), so
//! a bump is a load and a store, not a read-modify-write: no
//! compare-and-swap, which `thumbv6m` lacks. Counters wrap at `u32::MAX`.

pub use portable_atomic::{AtomicU32, Ordering};

/// Adds `by` to a single-writer counter (wrapping).
#[inline]
pub fn bump(c: &AtomicU32, by: u32) {
    c.store(
        c.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

/// Declares a counter set:
///
/// ```text
/// counter_set! {
///     /// docs
///     pub struct Counters;          // or `{ extra: Type = init, ... }`
///     /// docs
///     pub struct Stats {
///         /// doc
///         field, ...
///         ; /// doc
///         extra_field: Type = getter, ...   // optional
///     }
/// }
/// ```
///
/// `Counters` gets one `AtomicU32` per field (`pub(crate)`, bumped with
/// [`bump`]), then the extra fields as given; `const fn new()` (all zero,
/// extras from their initialisers), `snapshot()` and a crate-private
/// `store(&Stats)` that mirrors a whole copy. `Stats` is
/// `#[non_exhaustive]`, with one `pub u32` per field, then the extra
/// fields, which `snapshot` fills from `Counters`' method `getter()`.
/// Attributes before either struct are kept (more derives for `Stats`
/// among them).
#[doc(hidden)]
#[macro_export]
macro_rules! counter_set {
    (
        $(#[$cm:meta])* $cvis:vis struct $counters:ident {
            $( $(#[$xm:meta])* $xfield:ident : $xty:ty = $xinit:expr ),* $(,)?
        }
        $(#[$sm:meta])* $svis:vis struct $stats:ident {
            $( $(#[$fm:meta])* $field:ident ),* $(,)?
            $( ; $( $(#[$em:meta])* $efield:ident : $ety:ty = $eget:ident ),* $(,)? )?
        }
    ) => {
        $(#[$cm])*
        #[derive(Debug, Default)]
        $cvis struct $counters {
            $( pub(crate) $field: $crate::counters::AtomicU32, )*
            $( $(#[$xm])* $xfield: $xty, )*
        }

        $(#[$sm])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        #[non_exhaustive]
        $svis struct $stats {
            $( $(#[$fm])* pub $field: u32, )*
            $($( $(#[$em])* pub $efield: $ety, )*)?
        }

        impl $counters {
            /// All zero; `const` so it can live in a `static`.
            pub const fn new() -> Self {
                Self {
                    $( $field: $crate::counters::AtomicU32::new(0), )*
                    $( $xfield: $xinit, )*
                }
            }

            /// The counters now (each read on its own; not one atomic
            /// picture).
            pub fn snapshot(&self) -> $stats {
                $stats {
                    $( $field: self.$field.load($crate::counters::Ordering::Relaxed), )*
                    $($( $efield: self.$eget(), )*)?
                }
            }

            /// Mirrors every counter of `stats` (the single writer keeps
            /// its own copy and publishes it).
            #[allow(dead_code)]
            pub(crate) fn store(&self, stats: &$stats) {
                $( self.$field.store(stats.$field, $crate::counters::Ordering::Relaxed); )*
            }
        }
    };
    (
        $(#[$cm:meta])* $cvis:vis struct $counters:ident;
        $($rest:tt)*
    ) => {
        $crate::counter_set! { $(#[$cm])* $cvis struct $counters {} $($rest)* }
    };
}
