//! Atomic and cell shim: portable-atomic normally, loom under `--cfg aimdb_loom`.

#[cfg(aimdb_loom)]
pub(crate) use loom::sync::atomic::AtomicU32;
#[cfg(not(aimdb_loom))]
pub(crate) use portable_atomic::AtomicU32;

pub(crate) use core::sync::atomic::Ordering;

/// An `UnsafeCell` with loom's closure-based access API on every build, so
/// the model checker sees each access.
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(
    #[cfg(not(aimdb_loom))] core::cell::UnsafeCell<T>,
    #[cfg(aimdb_loom)] loom::cell::UnsafeCell<T>,
);

impl<T> UnsafeCell<T> {
    #[cfg(not(aimdb_loom))]
    pub(crate) const fn new(v: T) -> Self {
        Self(core::cell::UnsafeCell::new(v))
    }
    #[cfg(aimdb_loom)]
    pub(crate) fn new(v: T) -> Self {
        Self(loom::cell::UnsafeCell::new(v))
    }

    /// Runs `f` with a raw pointer to the contents, for reading only
    /// (several readers may overlap; loom checks that no writer does).
    #[cfg(not(aimdb_loom))]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }
    #[cfg(aimdb_loom)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        self.0.with(f)
    }

    /// Runs `f` with a raw mutable pointer to the contents.
    #[cfg(not(aimdb_loom))]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
    #[cfg(aimdb_loom)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        self.0.with_mut(f)
    }
}

/// A spin-wait hint; under loom it lets the model schedule another thread.
#[inline]
pub(crate) fn spin_loop() {
    #[cfg(aimdb_loom)]
    loom::hint::spin_loop();
    #[cfg(not(aimdb_loom))]
    core::hint::spin_loop();
}
