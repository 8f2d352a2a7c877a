//! Route wakers without allocation: the data pointer of route `i`'s waker
//! is the address of its tag inside the [`Readiness`], and two vtables
//! (a `&'static` bitmap, or an `Arc` one with feature `alloc`) turn a wake
//! into [`Readiness::mark`]. [`ReadinessHandle`] is how the outbound table
//! reaches them.

use core::mem::{offset_of, ManuallyDrop};
use core::task::{RawWaker, RawWakerVTable, Waker};

use super::Readiness;

impl<const W: usize> Readiness<W> {
    fn tag_ptr(this: *const Self, i: usize) -> *const () {
        // Pointer arithmetic only; derived from a pointer to the whole struct
        // so the result keeps provenance over all of it.
        this.cast::<u8>()
            .wrapping_add(offset_of!(Self, tags) + 2 * i)
            .cast()
    }

    /// # Safety
    ///
    /// `data` must come from [`Self::tag_ptr`] on a `Readiness<W>` that is
    /// still alive.
    unsafe fn from_tag<'a>(data: *const ()) -> (&'a Self, usize) {
        // SAFETY: per the contract `data` points at a tag inside a live
        // `Readiness<W>`; tags are plain `u16`s never written after `new`.
        let i = unsafe { *data.cast::<u16>() } as usize;
        // SAFETY: `tag_ptr` added exactly `offset + 2 * i` bytes to the
        // struct's address, derived from a pointer to the whole struct, so
        // subtracting them gives back that address with full provenance.
        let this = unsafe {
            &*data
                .cast::<u8>()
                .sub(offset_of!(Self, tags) + 2 * i)
                .cast::<Self>()
        };
        (this, i)
    }

    const STATIC_VTABLE: RawWakerVTable = RawWakerVTable::new(
        Self::static_clone,
        Self::static_wake,
        Self::static_wake,
        Self::static_drop,
    );

    unsafe fn static_clone(data: *const ()) -> RawWaker {
        RawWaker::new(data, &Self::STATIC_VTABLE)
    }
    unsafe fn static_wake(data: *const ()) {
        // SAFETY: static-vtable wakers are only built by the
        // `&'static Readiness` handle, so the struct is alive forever.
        let (this, i) = unsafe { Self::from_tag(data) };
        this.mark(i);
    }
    unsafe fn static_drop(_: *const ()) {}
}

#[cfg(feature = "alloc")]
impl<const W: usize> Readiness<W> {
    const ARC_VTABLE: RawWakerVTable = RawWakerVTable::new(
        Self::arc_clone,
        Self::arc_wake,
        Self::arc_wake_by_ref,
        Self::arc_drop,
    );

    /// # Safety
    ///
    /// `data` must come from an Arc-vtable waker, which owns one strong
    /// count of the `Arc<Readiness<W>>`.
    unsafe fn arc_ptr(data: *const ()) -> *const Self {
        // SAFETY: forwarded contract; the owned strong count keeps it alive.
        let (this, _) = unsafe { Self::from_tag(data) };
        this
    }
    unsafe fn arc_clone(data: *const ()) -> RawWaker {
        // SAFETY: the waker being cloned owns a strong count, so the Arc is
        // alive; the clone takes a count of its own, released in `arc_drop`.
        unsafe { alloc::sync::Arc::increment_strong_count(Self::arc_ptr(data)) };
        RawWaker::new(data, &Self::ARC_VTABLE)
    }
    unsafe fn arc_wake(data: *const ()) {
        // SAFETY: `wake` consumes the waker: mark, then release its count.
        unsafe {
            Self::arc_wake_by_ref(data);
            Self::arc_drop(data);
        }
    }
    unsafe fn arc_wake_by_ref(data: *const ()) {
        // SAFETY: the waker owns a strong count, so the struct is alive.
        let (this, i) = unsafe { Self::from_tag(data) };
        this.mark(i);
    }
    unsafe fn arc_drop(data: *const ()) {
        // SAFETY: releases the one strong count this waker owned, taken by
        // `ReadinessHandle::route_waker` or `arc_clone`.
        unsafe { alloc::sync::Arc::decrement_strong_count(Self::arc_ptr(data)) };
    }
}

/// How the outbound routes reach their [`Readiness`]: a handle that keeps it
/// alive for as long as any route waker exists.
pub trait ReadinessHandle<const W: usize> {
    /// The bitmap.
    fn readiness(&self) -> &Readiness<W>;
    /// A waker that marks route `i` ready. Allocates nothing.
    fn route_waker(&self, i: usize) -> Waker;
    /// Runs `f` with route `i`'s waker lent by reference (what the
    /// outbound table polls a route with). A clone of it is an owned route
    /// waker. The default lends [`Self::route_waker`]; the `&'static` and
    /// `Arc` handles lend one that is never dropped, so a pull pays no
    /// drop call (and, for `Arc`, no reference count) for it.
    #[inline]
    fn with_route_waker<R>(&self, i: usize, f: impl FnOnce(&Waker) -> R) -> R {
        f(&self.route_waker(i))
    }
}

impl<const W: usize> ReadinessHandle<W> for &'static Readiness<W> {
    fn readiness(&self) -> &Readiness<W> {
        self
    }
    fn route_waker(&self, i: usize) -> Waker {
        let data = Readiness::<W>::tag_ptr(*self, i.min(Readiness::<W>::CAPACITY - 1));
        // SAFETY: the vtable functions uphold the RawWaker contract: clone
        // copies the pointer, wake/wake_by_ref only perform atomic
        // operations, drop does nothing. The data pointer is valid for as
        // long as any clone exists because the struct is `'static`, and the
        // struct is `Sync`, so wakers may travel to any thread.
        unsafe { Waker::from_raw(RawWaker::new(data, &Readiness::<W>::STATIC_VTABLE)) }
    }
    #[inline]
    fn with_route_waker<R>(&self, i: usize, f: impl FnOnce(&Waker) -> R) -> R {
        // Dropping a static-vtable waker does nothing: skip the call.
        f(&ManuallyDrop::new(self.route_waker(i)))
    }
}

#[cfg(feature = "alloc")]
impl<const W: usize> ReadinessHandle<W> for alloc::sync::Arc<Readiness<W>> {
    fn readiness(&self) -> &Readiness<W> {
        self
    }
    fn route_waker(&self, i: usize) -> Waker {
        let ptr = alloc::sync::Arc::as_ptr(self);
        let data = Readiness::<W>::tag_ptr(ptr, i.min(Readiness::<W>::CAPACITY - 1));
        // SAFETY: this waker owns one strong count (taken here, released by
        // its drop or wake), so the struct outlives it and every clone (each
        // clone takes its own count). The vtable functions only do atomic
        // operations on a `Sync` struct.
        unsafe {
            alloc::sync::Arc::increment_strong_count(ptr);
            Waker::from_raw(RawWaker::new(data, &Readiness::<W>::ARC_VTABLE))
        }
    }
    #[inline]
    fn with_route_waker<R>(&self, i: usize, f: impl FnOnce(&Waker) -> R) -> R {
        let ptr = alloc::sync::Arc::as_ptr(self);
        let data = Readiness::<W>::tag_ptr(ptr, i.min(Readiness::<W>::CAPACITY - 1));
        // SAFETY: this waker owns no strong count and is never dropped
        // (`ManuallyDrop`) nor woken by value: `f` only borrows it, while
        // `self`, whose count keeps the struct alive, is borrowed too. A
        // clone takes a count of its own (`arc_clone`), released by its
        // drop or wake, as for any Arc-vtable waker.
        let lent = unsafe {
            ManuallyDrop::new(Waker::from_raw(RawWaker::new(
                data,
                &Readiness::<W>::ARC_VTABLE,
            )))
        };
        f(&lent)
    }
}
