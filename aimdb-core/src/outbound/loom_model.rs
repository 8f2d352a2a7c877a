//! Loom model of the outbound wake-up path: a writer thread and the
//! transport's `next()`, across all interleavings (bounded by
//! `LOOM_MAX_PREEMPTIONS`). Run with `make loom`:
//! `RUSTFLAGS="--cfg aimdb_loom" cargo test -p aimdb-core --features std --lib --release outbound::loom_model`.
//! It lives in the crate (not in `tests/`) so it can reach the
//! crate-private `Scheduler`.
//!
//! What fails if the protocol is wrong: a lost wake-up leaves `block_on`
//! parked forever, which loom reports as a deadlock; a duplicate delivery
//! or a reordering fails the assertions.

use std::boxed::Box;
use std::sync::Arc;
use std::vec::Vec;

use crate::codec::{Decode, Postcard};
use crate::outbound::{Link, Routes};
use crate::record::{Latest, Record, Ring};
use crate::sync::Readiness;
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;

fn leak<T>(v: T) -> &'static T {
    Box::leak(Box::new(v))
}

/// A `block_on` whose waker is the same (`will_wake`) across polls of one
/// call and differs between calls. (`loom::future::block_on`'s clones
/// compare unequal, which would hide the re-park path.)
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    struct Unpark(loom::sync::Notify);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.notify();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.notify();
        }
    }
    let unpark = Arc::new(Unpark(loom::sync::Notify::new()));
    let waker = std::task::Waker::from(unpark.clone());
    let mut cx = std::task::Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        unpark.0.wait();
    }
}

#[test]
fn latest_write_racing_with_park_is_never_lost() {
    loom::model(|| {
        let rec: &'static Record<Cs, Latest<u8>, 1> = leak(Record::new("l"));
        let ready = Arc::new(Readiness::<1>::new());
        let mut link = Link::new(rec.subscribe().unwrap(), "l", Postcard);
        let (mut p, mut t) = ([0u8; 4], [0u8; 4]);
        let mut b = Routes::<_, 1, 1>::builder(ready.clone(), &mut p).written_topics(&mut t);
        b.link(&mut link);
        let mut routes = b.build().unwrap();

        let writer = loom::thread::spawn(move || {
            rec.write(1);
            rec.write(2);
        });
        let mut seen: Vec<u8> = Vec::new();
        while seen.last() != Some(&2u8) {
            let m = loom::future::block_on(routes.next());
            seen.push(Postcard.decode(m.payload).unwrap());
        }
        writer.join().unwrap();
        // Coalescing may drop 1, never duplicate or reorder.
        assert!(seen == [2] || seen == [1, 2], "{seen:?}");
    });
}

#[test]
fn ring_values_arrive_exactly_once_in_order() {
    loom::model(|| {
        let rec: &'static Record<Cs, Ring<u8, 4>, 1> = leak(Record::new("r"));
        let ready = Arc::new(Readiness::<1>::new());
        let mut link = Link::new(rec.subscribe().unwrap(), "r", Postcard);
        let (mut p, mut t) = ([0u8; 4], [0u8; 4]);
        let mut b = Routes::<_, 1, 1>::builder(ready.clone(), &mut p).written_topics(&mut t);
        b.link(&mut link);
        let mut routes = b.build().unwrap();

        let writer = loom::thread::spawn(move || {
            for v in 0..3 {
                rec.write(v);
            }
        });
        let mut seen: Vec<u8> = Vec::new();
        while seen.len() < 3 {
            let m = loom::future::block_on(routes.next());
            seen.push(Postcard.decode(m.payload).unwrap());
        }
        writer.join().unwrap();
        assert_eq!(seen, [0u8, 1, 2]);
    });
}

#[test]
fn two_routes_two_writers() {
    loom::model(|| {
        let a: &'static Record<Cs, Latest<u8>, 1> = leak(Record::new("a"));
        let b_rec: &'static Record<Cs, Latest<u8>, 1> = leak(Record::new("b"));
        let ready = Arc::new(Readiness::<1>::new());
        let mut la = Link::new(a.subscribe().unwrap(), "a", Postcard);
        let mut lb = Link::new(b_rec.subscribe().unwrap(), "b", Postcard);
        let (mut p, mut t) = ([0u8; 4], [0u8; 4]);
        let mut b = Routes::<_, 1, 2>::builder(ready.clone(), &mut p).written_topics(&mut t);
        b.link(&mut la).link(&mut lb);
        let mut routes = b.build().unwrap();

        let wa = loom::thread::spawn(move || a.write(7));
        let wb = loom::thread::spawn(move || b_rec.write(9));
        let mut got = [false; 2];
        while !(got[0] && got[1]) {
            let m = loom::future::block_on(routes.next());
            assert!(!got[m.route], "route {} delivered twice", m.route);
            got[m.route] = true;
        }
        wa.join().unwrap();
        wb.join().unwrap();
    });
}

/// The parking protocol on its own (no records): two markers, a transport
/// that re-parks with the same waker (one `block_on`), then parks with a
/// new waker (a second `block_on`), so the waker cell is rewritten while a
/// marker may own it. A lost wake-up deadlocks; a data race on the cell is
/// reported by loom's `UnsafeCell`.
#[test]
fn parked_two_markers_waker_replaced() {
    use super::Scheduler;
    use crate::sync::ReadinessHandle;
    use std::future::poll_fn;
    use std::task::Poll;

    fn next<'a>(
        p: &'a mut Scheduler<1>,
        r: &'a Readiness<1>,
    ) -> impl std::future::Future<Output = usize> + 'a {
        poll_fn(move |cx| loop {
            if let Some(i) = p.take(r) {
                return Poll::Ready(i);
            }
            if p.park(r, cx.waker()) {
                return Poll::Pending;
            }
        })
    }

    loom::model(|| {
        let ready = Arc::new(Readiness::<1>::new());
        let mut pending = Scheduler::<1>::new();
        let (ra, rb) = (ready.clone(), ready.clone());
        let a = loom::thread::spawn(move || {
            ra.route_waker(0).wake_by_ref();
            ra.route_waker(2).wake();
        });
        let b = loom::thread::spawn(move || rb.route_waker(1).wake());
        // One waker for the first two routes: parks, is woken, re-parks.
        let mut got = block_on(async {
            let mut got = 0u32;
            while got.count_ones() < 2 {
                got |= 1 << next(&mut pending, &ready).await;
            }
            got
        });
        // A new waker (a new `block_on`) for the rest.
        while got != 0b111 {
            let i = block_on(next(&mut pending, &ready));
            assert_eq!(got & (1 << i), 0, "route {i} delivered twice");
            got |= 1 << i;
        }
        a.join().unwrap();
        b.join().unwrap();
    });
}

/// Liveness of the parking protocol: after marks that raced with its parks
/// (some of its compare-and-swaps fail), the transport must still be able
/// to park for real, not poll forever: once the markers are done, a park
/// with a fresh waker wakes nobody by itself, and the next mark wakes it
/// exactly once.
#[test]
fn transport_parks_for_real_after_racing_marks() {
    use super::Scheduler;
    use crate::sync::ReadinessHandle;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Wake, Waker};

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    loom::model(|| {
        let ready = Arc::new(Readiness::<1>::new());
        let mut pending = Scheduler::<1>::new();
        let (ra, rb) = (ready.clone(), ready.clone());
        let a = loom::thread::spawn(move || ra.route_waker(0).wake());
        let b = loom::thread::spawn(move || rb.route_waker(1).wake());
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut got = 0u32;
        // Spin on the public pieces as a transport would (the count may
        // move while the markers run).
        while got != 0b11 {
            while let Some(i) = pending.take(&ready) {
                got |= 1 << i;
            }
            if got != 0b11 && pending.park(&ready, &waker) {
                loom::thread::yield_now();
            }
        }
        a.join().unwrap();
        b.join().unwrap();
        let fresh = Arc::new(Count(AtomicUsize::new(0)));
        let fresh_waker = Waker::from(fresh.clone());
        // A group bit may outlive the word it announced (a marker set it
        // after the transport had already swapped the word): one more look.
        assert_eq!(pending.take(&ready), None, "every route was delivered once");
        assert!(pending.park(&ready, &fresh_waker), "nothing is ready");
        assert_eq!(
            fresh.0.load(Ordering::SeqCst),
            0,
            "parked, not polling again"
        );
        ready.route_waker(0).wake();
        assert_eq!(fresh.0.load(Ordering::SeqCst), 1, "the next mark wakes it");
    });
}

/// An urgent route (word 0) and a normal one in another word, written from
/// two threads: when both are ready, the transport stops after word 0 to
/// serve the urgent one and gives the other group back to the summary
/// (`republish`); neither value may be lost or delivered twice, and the
/// transport must not park on the given-back group.
#[test]
fn urgent_early_stop_gives_back_the_rest() {
    loom::model(|| {
        let recs: &'static [Record<Cs, Latest<u8>, 1>] = Box::leak(
            (0..33)
                .map(|_| Record::new("r"))
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        let ready = Arc::new(Readiness::<2>::new());
        let mut links: Vec<_> = recs
            .iter()
            .map(|r| Link::new(r.subscribe().unwrap(), "t", Postcard))
            .collect();
        let (mut p, mut t) = ([0u8; 4], [0u8; 4]);
        let mut b = Routes::<_, 2, 33>::builder(ready.clone(), &mut p).written_topics(&mut t);
        let (urgent, normal) = links.split_at_mut(1);
        b.link_urgent(&mut urgent[0]);
        for l in normal {
            b.link(l);
        }
        let mut routes = b.build().unwrap();

        let wu = loom::thread::spawn(move || recs[0].write(1));
        let wn = loom::thread::spawn(move || recs[32].write(2));
        let mut got = [0u8; 2];
        while got != [1, 1] {
            let m = block_on(routes.next());
            match m.route {
                0 => got[0] += 1,
                32 => got[1] += 1,
                r => panic!("route {r} was never written"),
            }
            assert!(got[0] <= 1 && got[1] <= 1, "{got:?}");
        }
        wu.join().unwrap();
        wn.join().unwrap();
    });
}
