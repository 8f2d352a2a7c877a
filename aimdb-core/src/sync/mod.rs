//! The one low-level module: the readiness bitmap (with the transport's
//! waker cell folded into its summary word), the atomic shim it is built
//! on, and [`HostRawMutex`] (feature `std`), the per-record lock for
//! threaded hosts.
//!
//! There is no separate waker-slot type: a record keeps its readers'
//! wakers under its own lock (one critical section per read, see
//! `record`), and the transport's waker is parked through the readiness
//! summary word (`PARKED`, with an episode count guarding the waker cell),
//! which spares a separate slot's atomics on every parked message.
//!
//! Everything `unsafe` in `aimdb-core` lives below this module, behind safe
//! APIs; every block carries a `// SAFETY:` argument. The routing modules
//! (`record`, `inbound`, `outbound`) forbid `unsafe` code.
//!
//! Atomics go through the private `atomic` shim so that
//! `RUSTFLAGS="--cfg aimdb_loom"` swaps them for loom's model-checked versions
//! (a crate-specific switch, as tokio has: a downstream crate running its
//! own loom tests with `--cfg loom` does not change ours). Outside loom they
//! come from `portable-atomic`, so `thumbv6m-none-eabi` (no compare-and-swap)
//! builds: the *firmware* enables portable-atomic's `critical-section` or
//! single-core option, never this library.

mod ascii;
pub(crate) mod atomic;
#[cfg(feature = "std")]
mod host_mutex;
mod readiness;

pub(crate) use ascii::ascii_str;
#[cfg(feature = "std")]
pub use host_mutex::HostRawMutex;
pub(crate) use readiness::Pending;
pub use readiness::{Readiness, ReadinessHandle};

/// Declares a constructor that is `const fn` normally and a plain `fn` under
/// `--cfg aimdb_loom`, whose atomics cannot be built in a constant.
macro_rules! loom_const_fn {
    ($(#[$m:meta])* $vis:vis fn $name:ident $($rest:tt)*) => {
        #[cfg(not(aimdb_loom))]
        $(#[$m])* $vis const fn $name $($rest)*
        #[cfg(aimdb_loom)]
        $(#[$m])* $vis fn $name $($rest)*
    };
}
pub(crate) use loom_const_fn;
