use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::vec::Vec;

use embassy_sync::blocking_mutex::raw::{CriticalSectionRawMutex, NoopRawMutex};

use super::*;

struct CountWake(AtomicUsize);
impl Wake for CountWake {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}
fn counting_waker() -> (Arc<CountWake>, Waker) {
    let c = Arc::new(CountWake(AtomicUsize::new(0)));
    (c.clone(), Waker::from(c))
}

#[test]
fn latest_coalesces_and_sees_each_value_once() {
    let rec: Record<NoopRawMutex, Latest<u32>, 2> = Record::new("state");
    let mut r = rec.subscribe().unwrap();
    assert_eq!(r.try_recv(), Err(TryRecvError::Empty));
    rec.write(1);
    rec.write(2);
    rec.write(3);
    assert_eq!(r.try_recv(), Ok(3), "writes between reads coalesce");
    assert_eq!(r.try_recv(), Err(TryRecvError::Empty), "seen at most once");
    rec.write(3);
    assert_eq!(r.try_recv(), Ok(3), "an equal value is still a new write");
    // A late subscriber sees the current value once.
    let mut late = rec.subscribe().unwrap();
    assert_eq!(late.try_recv(), Ok(3));
    assert_eq!(late.try_recv(), Err(TryRecvError::Empty));
    assert_eq!(rec.writes(), 4);
}

#[test]
fn ring_exact_lag_at_and_past_capacity() {
    let rec: Record<NoopRawMutex, Ring<u32, 4>, 2> = Record::new("telemetry");
    let mut a = rec.subscribe().unwrap();
    let mut b = rec.subscribe().unwrap();
    // Exactly at capacity: nothing lost.
    for v in 0..4 {
        rec.write(v);
    }
    let got: Vec<_> = core::iter::from_fn(|| a.try_recv().ok()).collect();
    assert_eq!(got, [0, 1, 2, 3]);
    // Reader b is 4 behind: still at capacity, nothing lost; then 3 more
    // writes put it 7 behind a ring of 4: it lost exactly 3.
    for v in 4..7 {
        rec.write(v);
    }
    assert_eq!(b.try_recv(), Err(TryRecvError::Lagged(3)));
    let got: Vec<_> = core::iter::from_fn(|| b.try_recv().ok()).collect();
    assert_eq!(got, [3, 4, 5, 6]);
    // Reader a was independent: lost nothing.
    let got: Vec<_> = core::iter::from_fn(|| a.try_recv().ok()).collect();
    assert_eq!(got, [4, 5, 6]);
    // Far behind: lag counts every lost value.
    for v in 0..1000 {
        rec.write(v);
    }
    assert_eq!(a.try_recv(), Err(TryRecvError::Lagged(996)));
    assert_eq!(a.try_recv(), Ok(996));
}

#[test]
fn ring_new_reader_starts_at_next_write() {
    let rec: Record<NoopRawMutex, Ring<u8, 2>, 1> = Record::new("r");
    rec.write(1);
    let mut r = rec.subscribe().unwrap();
    assert_eq!(r.try_recv(), Err(TryRecvError::Empty));
    rec.write(2);
    assert_eq!(r.try_recv(), Ok(2));
}

#[test]
fn mailbox_latest_wins_each_taken_once_across_readers() {
    let rec: Record<NoopRawMutex, Mailbox<u32>, 3> = Record::new("cmd");
    let mut rs: Vec<_> = (0..3).map(|_| rec.subscribe().unwrap()).collect();
    rec.write(1);
    rec.write(2);
    let taken: Vec<_> = rs.iter_mut().filter_map(|r| r.try_recv().ok()).collect();
    assert_eq!(taken, [2], "latest wins, taken by exactly one reader");
    for v in 10..20 {
        rec.write(v);
        let taken: Vec<_> = rs
            .iter_mut()
            .rev()
            .filter_map(|r| r.try_recv().ok())
            .collect();
        assert_eq!(taken, [v]);
    }
}

#[test]
fn subscribe_past_capacity_is_an_error_and_drop_frees_the_slot() {
    let rec: Record<NoopRawMutex, Latest<u8>, 2> = Record::new("x");
    let a = rec.subscribe().unwrap();
    let _b = rec.subscribe().unwrap();
    assert_eq!(rec.subscribe().map(|_| ()), Err(SubscribeError::Full));
    drop(a);
    assert!(rec.subscribe().is_ok());
}

#[test]
fn poll_recv_registers_and_write_wakes_only_waiters() {
    let rec: Record<NoopRawMutex, Ring<u8, 4>, 2> = Record::new("r");
    let mut r = rec.subscribe().unwrap();
    let _idle = rec.subscribe().unwrap();
    let (count, waker) = counting_waker();
    let mut cx = Context::from_waker(&waker);
    assert_eq!(r.poll_recv(&mut cx), Poll::Pending);
    rec.write(7);
    assert_eq!(count.0.load(Ordering::SeqCst), 1);
    rec.write(8);
    assert_eq!(
        count.0.load(Ordering::SeqCst),
        1,
        "no re-wake without re-poll"
    );
    assert_eq!(r.poll_recv(&mut cx), Poll::Ready(Ok(7)));
    assert_eq!(r.poll_recv(&mut cx), Poll::Ready(Ok(8)));
    assert_eq!(r.poll_recv(&mut cx), Poll::Pending);
    drop(r);
    rec.write(9);
    assert_eq!(
        count.0.load(Ordering::SeqCst),
        1,
        "dropped reader is not woken"
    );
}

#[test]
fn writer_thread_wakes_parked_readers() {
    use std::sync::atomic::AtomicU32;
    static REC: Record<CriticalSectionRawMutex, Ring<u32, 64>, 2> = Record::new("threads");
    static ACK: [AtomicU32; 2] = [AtomicU32::new(0), AtomicU32::new(0)];
    const N: u32 = 5_000;
    let readers: Vec<_> = (0..2)
        .map(|k| {
            let mut r = REC.subscribe().unwrap();
            std::thread::spawn(move || {
                let mut got = Vec::new();
                while got.len() < N as usize {
                    match futures::executor::block_on(r.recv()) {
                        Ok(v) => got.push(v),
                        Err(RecvError::Lagged(n)) => panic!("lagged {n} with a paced writer"),
                    }
                    ACK[k].store(got.len() as u32, Ordering::SeqCst);
                }
                got
            })
        })
        .collect();
    for v in 0..N {
        // Back-pressure through the acks keeps the ring from overflowing, so
        // every value must arrive; readers park whenever they catch up.
        while ACK.iter().any(|a| v - a.load(Ordering::SeqCst) >= 60) {
            std::thread::yield_now();
        }
        REC.write(v);
    }
    for h in readers {
        let got = h.join().unwrap();
        assert_eq!(got, (0..N).collect::<Vec<_>>());
    }
}

#[test]
fn mailbox_counts_commands_replaced_before_they_were_taken() {
    let rec: Record<NoopRawMutex, Mailbox<u32>, 1> = Record::new("cmd");
    rec.write(1);
    rec.write(2);
    assert_eq!(rec.replaced(), 0, "nobody subscribed: nothing to lose");
    let mut r = rec.subscribe().unwrap();
    rec.write(3); // replaces 2, which no reader took
    assert_eq!(rec.replaced(), 1);
    assert_eq!(r.try_recv(), Ok(3));
    rec.write(4); // the slot was empty
    assert_eq!(rec.replaced(), 1);
    for v in 5..25 {
        rec.write(v); // a burst: 20 writes, the first lands on 4
    }
    assert_eq!(rec.replaced(), 21);
    assert_eq!(r.try_recv(), Ok(24), "latest wins");
    assert_eq!(rec.writes(), 24);
}

#[test]
fn latest_counts_values_no_reader_took() {
    let rec: Record<NoopRawMutex, Latest<u32>, 2> = Record::new("state");
    let mut a = rec.subscribe().unwrap();
    let mut b = rec.subscribe().unwrap();
    rec.write(1);
    assert_eq!(a.try_recv(), Ok(1));
    rec.write(2); // 1 was taken by a
    assert_eq!(rec.replaced(), 0);
    rec.write(3); // 2 was taken by nobody
    assert_eq!(rec.replaced(), 1);
    assert_eq!(b.try_recv(), Ok(3));
    rec.write(4);
    assert_eq!(rec.replaced(), 1, "one reader taking it is enough");
}

#[test]
fn ring_never_counts_replaced_its_readers_see_lagged() {
    let rec: Record<NoopRawMutex, Ring<u32, 2>, 1> = Record::new("stream");
    let mut r = rec.subscribe().unwrap();
    for v in 0..5 {
        rec.write(v);
    }
    assert_eq!(rec.replaced(), 0);
    assert_eq!(r.try_recv(), Err(TryRecvError::Lagged(3)));
}

#[test]
fn latest_value_is_readable_without_a_reader() {
    let rec: Record<NoopRawMutex, Latest<u32>, 1> = Record::new("state");
    assert_eq!(rec.latest(), None);
    rec.write(4);
    assert_eq!(rec.latest(), Some(4));
    // No slot taken: the one reader slot is still free, and a reader still
    // sees the value as new.
    let mut r = rec.subscribe().unwrap();
    assert_eq!(r.try_recv(), Ok(4));
    assert_eq!(rec.latest(), Some(4), "reading does not consume it");
}

#[test]
fn keyed_write_hands_the_value_back_when_full_and_for_each_refs_outlive_the_call() {
    static TABLE: Keyed<CriticalSectionRawMutex, Latest<u32>, 2, 1> = Keyed::new("fleet");
    TABLE.write("a", 1).unwrap();
    TABLE.write("b", 2).unwrap();
    let e = TABLE.write("c", 3).unwrap_err();
    assert_eq!(
        (e.error, e.value),
        (KeyError::Full, 3),
        "the value comes back"
    );
    let e = TABLE.write("", 4).unwrap_err();
    assert_eq!((e.error, e.value), (KeyError::Empty, 4));
    // Slot references taken in `for_each` live as long as the table.
    let mut slots = Vec::new();
    TABLE.for_each(|_, r| slots.push(r));
    assert_eq!(slots.len(), 2);
    assert_eq!(slots[1].writes(), 1);
}

#[cfg(feature = "alloc")]
#[test]
fn keyed_vec_lists_its_keys_in_claim_order() {
    let t: KeyedVec<NoopRawMutex, Latest<u32>, 1> = KeyedVec::with_capacity("fleet", 4);
    t.write("dev2", 1).unwrap();
    t.write("dev1", 2).unwrap();
    t.write("dev2", 3).unwrap();
    let keys: Vec<_> = t
        .slots()
        .iter()
        .map(|s| std::string::String::from(s.key()))
        .collect();
    assert_eq!(keys, ["dev2", "dev1"]);
    assert_eq!(t.write("", 5).unwrap_err().value, 5);
}

#[test]
fn keyed_changes_wake_on_new_and_known_keys_and_say_which_key() {
    let t: Keyed<NoopRawMutex, Latest<u32>, 4, 2> = Keyed::new("fleet");
    t.write("a", 1).unwrap();
    let mut ch = t.changes().unwrap();
    // As a reader subscribed now: a `Latest` slot's current value first.
    let (k, v) = ch.try_recv().unwrap();
    assert_eq!((k.as_str(), v), ("a", Ok(1)));
    assert!(ch.try_recv().is_none());
    let (count, w) = counting_waker();
    let mut cx = Context::from_waker(&w);
    assert!(ch.poll_recv(&mut cx).is_pending());

    // A key claimed while parked wakes it, and its first value is there.
    t.write("b", 2).unwrap();
    assert_eq!(count.0.load(Ordering::SeqCst), 1, "new key wakes");
    match ch.poll_recv(&mut cx) {
        Poll::Ready((k, v)) => assert_eq!((k.as_str(), v), ("b", Ok(2))),
        Poll::Pending => panic!("new key's value missed"),
    }
    assert!(ch.poll_recv(&mut cx).is_pending());

    // A write to a known key wakes it too.
    t.write("a", 3).unwrap();
    assert!(count.0.load(Ordering::SeqCst) >= 2, "known key wakes");
    match ch.poll_recv(&mut cx) {
        Poll::Ready((k, v)) => assert_eq!((k.as_str(), v), ("a", Ok(3))),
        Poll::Pending => panic!("known key's value missed"),
    }
    // Writes through a slot reference count as well.
    t.get("b").unwrap().write(5);
    let (k, v) = ch.try_recv().unwrap();
    assert_eq!((k.as_str(), v), ("b", Ok(5)));
    assert!(ch.try_recv().is_none());
}

#[test]
fn keyed_changes_are_round_robin_and_report_ring_lag() {
    let t: Keyed<NoopRawMutex, Ring<u32, 4>, 3, 1> = Keyed::new("s");
    let mut ch = t.changes().unwrap();
    for v in 0..3 {
        t.write("busy", v).unwrap();
    }
    t.write("quiet", 100).unwrap();
    let order: Vec<_> = core::iter::from_fn(|| ch.try_recv())
        .map(|(k, v)| (std::string::String::from(k.as_str()), v))
        .collect();
    assert_eq!(
        order,
        [
            ("busy".into(), Ok(0)),
            ("quiet".into(), Ok(100)),
            ("busy".into(), Ok(1)),
            ("busy".into(), Ok(2)),
        ],
        "the quiet key is not starved by the busy one"
    );
    for v in 0..6 {
        t.write("busy", v).unwrap();
    }
    let (k, v) = ch.try_recv().unwrap();
    assert_eq!((k.as_str(), v), ("busy", Err(RecvError::Lagged(2))));
}

#[test]
fn keyed_changes_one_at_a_time_and_release_their_reader_slots() {
    let t: Keyed<NoopRawMutex, Latest<u32>, 2, 1> = Keyed::new("t");
    t.write("a", 1).unwrap();
    let ch = t.changes().unwrap();
    assert_eq!(
        t.changes().unwrap_err(),
        SubscribeError::Full,
        "one watcher"
    );
    t.write("b", 2).unwrap();
    // R = 1: the watcher holds each slot's only reader.
    assert!(t.get("a").unwrap().subscribe().is_err());
    assert!(
        t.get("b").unwrap().subscribe().is_err(),
        "claimed while watched"
    );
    drop(ch);
    assert!(t.get("a").unwrap().subscribe().is_ok());
    assert!(t.get("b").unwrap().subscribe().is_ok(), "released on drop");
    // Readers elsewhere take the slots now: a watcher cannot subscribe.
    let _ra = t.get("a").unwrap().subscribe().unwrap();
    assert_eq!(t.changes().unwrap_err(), SubscribeError::Full);
    assert!(t.get("b").unwrap().subscribe().is_ok(), "rolled back");
}

#[cfg(feature = "alloc")]
#[test]
fn keyed_vec_changes_see_new_and_known_keys_and_release_on_drop() {
    let t: KeyedVec<NoopRawMutex, Latest<u32>, 1> = KeyedVec::with_capacity("fleet", 4);
    t.write("a", 1).unwrap();
    let mut ch = t.changes().unwrap();
    assert_eq!(
        t.changes().unwrap_err(),
        SubscribeError::Full,
        "one watcher"
    );
    let (k, v) = ch.try_recv().unwrap();
    assert_eq!((k.as_str(), v), ("a", Ok(1)), "current value first");
    let (count, w) = counting_waker();
    let mut cx = Context::from_waker(&w);
    assert!(ch.poll_recv(&mut cx).is_pending());
    t.write("b", 2).unwrap();
    assert_eq!(count.0.load(Ordering::SeqCst), 1, "new key wakes");
    t.write("a", 3).unwrap();
    let got: Vec<_> = core::iter::from_fn(|| ch.try_recv())
        .map(|(k, v)| (std::string::String::from(k.as_str()), v))
        .collect();
    assert_eq!(got, [("b".into(), Ok(2)), ("a".into(), Ok(3))]);
    assert!(
        t.get("b").unwrap().record().subscribe().is_err(),
        "R = 1 taken"
    );
    drop(ch);
    assert!(t.get("b").unwrap().record().subscribe().is_ok(), "released");
}

#[cfg(feature = "alloc")]
#[test]
fn keyed_vec_changes_release_their_own_reader_not_the_users() {
    // R = 2: the user holds reader 0 of "a"; a watcher made later takes
    // reader 1, and its drop must release 1, not 0.
    let t: KeyedVec<NoopRawMutex, Ring<u32, 4>, 2> = KeyedVec::with_capacity("fleet", 4);
    t.write("a", 1).unwrap();
    let slot = t.get("a").unwrap();
    let mut mine = slot.record().subscribe().unwrap();
    let ch = t.changes().unwrap();
    t.write("b", 2).unwrap(); // claimed while watched, never looked at
    drop(ch);
    t.write("a", 3).unwrap();
    assert_eq!(
        mine.try_recv(),
        Ok(3),
        "the user's reader is still subscribed"
    );
    // Both watcher readers came back: one more reader fits on each key.
    let _a = slot.record().subscribe().unwrap();
    let b = t.get("b").unwrap();
    let _b1 = b.record().subscribe().unwrap();
    let _b2 = b.record().subscribe().unwrap();
}
