use super::bits::Bits;
use super::*;

#[test]
fn pop_round_robin_from_cursor() {
    let mut p = Bits::<4>::new();
    for i in [3, 40, 100, 127] {
        p.set(i);
    }
    assert_eq!(p.pop(), Some(3));
    p.set(3);
    assert_eq!(p.pop(), Some(40));
    assert_eq!(p.pop(), Some(100));
    assert_eq!(p.pop(), Some(127));
    assert_eq!(p.pop(), Some(3), "wraps to the start");
    assert_eq!(p.pop(), None);
    assert!(p.is_empty());
}

#[test]
fn grouped_summary_at_4096_routes() {
    let mut p = Pending::<128>::new();
    let r: &'static Readiness<128> = std::boxed::Box::leak(std::boxed::Box::new(Readiness::new()));
    for i in [0usize, 127, 128, 2000, 4095] {
        r.route_waker(i).wake();
    }
    assert!(p.absorb(r));
    assert!(!p.absorb(r), "bits were taken");
    let got: std::vec::Vec<_> = core::iter::from_fn(|| p.bits().pop()).collect();
    assert_eq!(got, [0, 127, 128, 2000, 4095]);
}

#[cfg(feature = "alloc")]
#[test]
fn route_waker_marks_and_wakes_transport() {
    use std::sync::atomic::{AtomicUsize, Ordering as O};
    use std::sync::Arc;
    struct Count(AtomicUsize);
    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, O::SeqCst);
        }
    }
    let count = Arc::new(Count(AtomicUsize::new(0)));
    let transport = Waker::from(count.clone());
    let r = Arc::new(Readiness::<2>::new());
    let mut p = Pending::<2>::new();
    assert!(p.park(&r, &transport));
    let w = r.route_waker(33);
    let w2 = w.clone();
    w.wake();
    w2.wake_by_ref();
    assert_eq!(count.0.load(O::SeqCst), 1, "second mark finds the bit set");
    drop(w2);
    assert_eq!(Arc::strong_count(&r), 1, "wakers released their counts");
    assert!(p.absorb(&r));
    assert_eq!(p.bits().pop(), Some(33));
}

#[cfg(feature = "alloc")]
#[test]
fn park_stores_a_waker_once_and_wakes_the_latest() {
    use std::sync::atomic::{AtomicUsize, Ordering as O};
    use std::sync::Arc;
    struct Count(AtomicUsize);
    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, O::SeqCst);
        }
    }
    let (ca, cb) = (
        Arc::new(Count(AtomicUsize::new(0))),
        Arc::new(Count(AtomicUsize::new(0))),
    );
    let (a, b) = (Waker::from(ca.clone()), Waker::from(cb.clone()));
    let r = Arc::new(Readiness::<128>::new());
    let mut p = Pending::<128>::new();
    assert!(p.park(&r, &a));
    // `ca`, `a`, the cell's clone and the one `Pending` keeps.
    assert_eq!(Arc::strong_count(&ca), 4);
    assert!(p.park(&r, &a), "a spurious re-poll stays parked");
    r.mark(4095);
    r.mark(4094);
    assert_eq!(ca.0.load(O::SeqCst), 1, "one wake per park");
    assert!(!p.park(&r, &a), "a route is ready: do not park");
    assert!(p.absorb(&r));
    assert_eq!(
        [p.bits().pop(), p.bits().pop(), p.bits().pop()],
        [Some(4094), Some(4095), None]
    );
    assert!(p.park(&r, &a));
    assert_eq!(Arc::strong_count(&ca), 4, "same waker: no new clone");
    r.mark(7);
    assert_eq!(ca.0.load(O::SeqCst), 2);
    assert!(p.absorb(&r));
    assert_eq!(p.bits().pop(), Some(7));
    // The task's waker changed: the cell is rewritten, the old clone
    // dropped.
    assert!(p.park(&r, &b));
    assert_eq!(Arc::strong_count(&ca), 2);
    r.wake_transport();
    assert_eq!(cb.0.load(O::SeqCst), 1);
    assert!(!r.maybe_ready());
    r.mark(0);
    assert_eq!(
        (ca.0.load(O::SeqCst), cb.0.load(O::SeqCst)),
        (2, 1),
        "not parked"
    );
    assert!(!p.park(&r, &b));
}

/// A transport polled with a by-reference waker whose clones have another
/// vtable (tokio's `block_on` lends one): re-parking with it must not
/// rewrite the cell, which would clone on every park and, after a
/// cross-thread wake, wait for the marker's wake to return. Counts the
/// clones: two per rewrite (the cell's and `Pending`'s own).
#[test]
fn lent_waker_with_another_vtable_is_stored_once() {
    use core::task::{RawWaker, RawWakerVTable};
    use std::sync::atomic::{AtomicUsize, Ordering as O};

    static CLONES: AtomicUsize = AtomicUsize::new(0);
    static WAKES: AtomicUsize = AtomicUsize::new(0);
    unsafe fn clone(data: *const ()) -> RawWaker {
        CLONES.fetch_add(1, O::SeqCst);
        RawWaker::new(data, &OWNED)
    }
    unsafe fn wake(_: *const ()) {
        WAKES.fetch_add(1, O::SeqCst);
    }
    unsafe fn drop(_: *const ()) {}
    static LENT: RawWakerVTable = RawWakerVTable::new(clone, wake, wake, drop);
    static OWNED: RawWakerVTable = RawWakerVTable::new(clone, wake, wake, drop);
    static TASK: u8 = 0;

    // SAFETY: the vtable functions only touch the counters; the data
    // pointer is a `static`'s, never dereferenced.
    let lent = unsafe { Waker::from_raw(RawWaker::new(core::ptr::from_ref(&TASK).cast(), &LENT)) };
    let r: &'static Readiness<1> = std::boxed::Box::leak(std::boxed::Box::new(Readiness::new()));
    let mut p = Pending::<1>::new();
    for round in 0..5 {
        assert!(p.park(r, &lent), "nothing ready");
        r.route_waker(round % 32).wake();
        assert_eq!(p.absorb_or_only(r, &0), Err(round % 32), "handed over");
        assert_eq!(p.absorb_or_only(r, &0), Ok(false));
    }
    assert_eq!(WAKES.load(O::SeqCst), 5, "one wake per park");
    assert_eq!(CLONES.load(O::SeqCst), 2, "the cell was written once");
}
