//! The outbound parking protocol under real threads: what
//! the loom model (`src/outbound/loom_model.rs`) checks exhaustively for two or three threads
//! and a few preemptions, here with four writer threads and tens of
//! thousands of hand-overs.
//!
//! Four writers, each on its own `Ring` route (two sharing a bitmap word,
//! two in other words), and one transport on the test thread that blocks
//! (parks the thread) whenever nothing is ready, so marks race with parks,
//! with the direct hand-over of a parked transport and with the transport
//! being polled again while a marker is still waking it. Every 97 messages
//! the transport polls with the other of two wakers, so the waker cell is
//! rewritten while markers run. A lost wake-up hangs the test (bounded by
//! the harness timeout); a lost, repeated or reordered value fails it.
//! Bounded: 4 × 5,000 values, each writer at most 32 values ahead of the
//! transport, so no `Ring` ever lags.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

use aimdb_core::codec::{Decode, Postcard};
use aimdb_core::outbound::{Link, Routes};
use aimdb_core::record::{Record, Ring};
use aimdb_core::sync::Readiness;
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;

const PER_WRITER: u32 = 5_000;
/// How far a writer may run ahead of the transport (the rings hold 64).
const AHEAD: u32 = 32;
/// Route indices of the four busy routes among 128 (words 0, 0, 1, 3).
const BUSY: [usize; 4] = [0, 5, 40, 127];

type Rec = Record<Cs, Ring<u32, 64>, 1>;

struct Unpark(Thread);
impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `f` to completion with `waker`, parking the thread in between.
fn block_on<F: Future>(f: F, waker: &Waker) -> F::Output {
    let mut cx = Context::from_waker(waker);
    let mut f = pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        thread::park();
    }
}

#[test]
fn four_writer_threads_every_value_once_in_order() {
    let records: &'static [Rec] = Box::leak((0..128).map(|_| Record::new("r")).collect());
    let ready: &'static Readiness<4> = Box::leak(Box::new(Readiness::new()));
    let mut links: Vec<_> = records
        .iter()
        .map(|r| Link::new(r.subscribe().unwrap(), "t", Postcard))
        .collect();
    let (mut payload, mut topic) = ([0u8; 8], [0u8; 4]);
    let mut b = Routes::<_, 4, 128>::builder(ready, &mut payload).written_topics(&mut topic);
    for l in &mut links {
        b.link(l);
    }
    let mut routes = b.build().unwrap();
    // The build marks every route ready once: drain that.
    let noop = Waker::noop();
    while routes.poll_next(&mut Context::from_waker(noop)).is_ready() {}

    let delivered: &'static [AtomicU32; 4] = Box::leak(Box::new([const { AtomicU32::new(0) }; 4]));
    let writers: Vec<_> = BUSY
        .iter()
        .enumerate()
        .map(|(w, &route)| {
            let rec = &records[route];
            thread::spawn(move || {
                for v in 0..PER_WRITER {
                    while v >= delivered[w].load(Ordering::Acquire) + AHEAD {
                        thread::yield_now();
                    }
                    rec.write(v);
                }
            })
        })
        .collect();

    let wakers = [
        Waker::from(Arc::new(Unpark(thread::current()))),
        Waker::from(Arc::new(Unpark(thread::current()))),
    ];
    let mut next = [0u32; 4];
    let mut total = 0u32;
    while total < 4 * PER_WRITER {
        let waker = &wakers[(total / 97 % 2) as usize];
        let m = block_on(routes.next(), waker);
        let w = BUSY
            .iter()
            .position(|&r| r == m.route)
            .unwrap_or_else(|| panic!("idle route {} delivered", m.route));
        assert_eq!(m.lagged, 0, "route {}: no ring may lag", m.route);
        let v: u32 = Postcard.decode(m.payload).unwrap();
        assert_eq!(v, next[w], "route {}: every value once, in order", m.route);
        next[w] += 1;
        delivered[w].store(next[w], Ordering::Release);
        total += 1;
    }
    for t in writers {
        t.join().unwrap();
    }
    assert_eq!(next, [PER_WRITER; 4]);
    assert_eq!(routes.stats().sent, 4 * PER_WRITER);
}
