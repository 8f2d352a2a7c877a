//! The one low-level module: waker slots, the readiness bitmap and the atomic
//! shim they are built on.
//!
//! Everything `unsafe` in `aimdb-core` lives below this module, behind safe
//! APIs; every block carries a `// SAFETY:` argument. The routing modules
//! (`record`, `inbound`, `outbound`) forbid `unsafe` code.
//!
//! Atomics go through [`atomic`] so that `RUSTFLAGS="--cfg loom"` swaps them
//! for loom's model-checked versions (the tokio pattern). Outside loom they
//! come from `portable-atomic`, so `thumbv6m-none-eabi` (no compare-and-swap)
//! builds: the *firmware* enables portable-atomic's `critical-section` or
//! single-core option, never this library.

mod ascii;
pub(crate) mod atomic;
mod readiness;
mod waker_slot;

pub(crate) use ascii::ascii_str;
pub use readiness::{Pending, Readiness, ReadinessHandle};
pub use waker_slot::WakerSlot;

/// Declares a constructor that is `const fn` normally and a plain `fn` under
/// `--cfg loom`, whose atomics cannot be built in a constant.
macro_rules! loom_const_fn {
    ($(#[$m:meta])* $vis:vis fn $name:ident $($rest:tt)*) => {
        #[cfg(not(loom))]
        $(#[$m])* $vis const fn $name $($rest)*
        #[cfg(loom)]
        $(#[$m])* $vis fn $name $($rest)*
    };
}
pub(crate) use loom_const_fn;
