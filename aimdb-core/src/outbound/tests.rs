use core::future::Future;
use std::boxed::Box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::vec::Vec;

use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;

use super::*;
use crate::codec::{EncodeError, Postcard};
use crate::record::{Latest, Mailbox, Record, Ring};

fn leak<T>(v: T) -> &'static T {
    Box::leak(Box::new(v))
}

/// `n` leaked records of buffer kind `B`.
fn records<B: crate::record::Buffer>(n: usize) -> &'static [Record<Cs, B, 1>] {
    Box::leak(
        (0..n)
            .map(|_| Record::new("r"))
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    )
}

/// One postcard link on topic `t` per record.
fn links<B: crate::record::Buffer>(
    recs: &'static [Record<Cs, B, 1>],
) -> Vec<Link<crate::record::Reader<'static, Cs, B, 1>, &'static str, Postcard>> {
    recs.iter()
        .map(|r| Link::new(r.subscribe().unwrap(), "t", Postcard))
        .collect()
}

struct CountWake(AtomicUsize);
impl Wake for CountWake {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn poll<H: ReadinessHandle<W>, const W: usize, const N: usize>(
    r: &mut Routes<'_, H, W, N>,
    w: &Waker,
) -> Option<(usize, std::string::String, Vec<u8>, u64)> {
    match r.poll_next(&mut Context::from_waker(w)) {
        Poll::Ready(m) => Some((m.route, m.topic.into(), m.payload.to_vec(), m.lagged)),
        Poll::Pending => None,
    }
}

#[test]
fn static_topic_message_then_park_then_wake() {
    let rec: &'static Record<Cs, Latest<u16>, 1> = leak(Record::new("temp"));
    let ready: &'static Readiness<1> = leak(Readiness::new());
    let mut link = Link::new(rec.subscribe().unwrap(), "sensors/temp", Postcard);
    let (mut p, mut t) = ([0u8; 16], [0u8; 16]);
    let mut b = Routes::<_, 1, 4>::builder(ready, &mut p).written_topics(&mut t);
    b.link(&mut link);
    let mut routes = b.build().unwrap();
    let count = Arc::new(CountWake(AtomicUsize::new(0)));
    let w = Waker::from(count.clone());
    assert_eq!(poll(&mut routes, &w), None, "nothing written yet");
    rec.write(300);
    assert_eq!(
        count.0.load(Ordering::SeqCst),
        1,
        "write woke the parked transport"
    );
    assert_eq!(
        poll(&mut routes, &w),
        Some((0, "sensors/temp".into(), std::vec![0xac, 0x02], 0))
    );
    assert_eq!(poll(&mut routes, &w), None);
    assert_eq!(routes.stats().sent, 1);
}

#[derive(Clone, serde::Serialize)]
struct Reading {
    id: u8,
    v: u16,
}

#[test]
fn written_topic_and_its_errors() {
    let rec: &'static Record<Cs, Ring<Reading, 8>, 1> = leak(Record::new("readings"));
    let ready: &'static Readiness<1> = leak(Readiness::new());
    let topic = Written(|r: &Reading, w: &mut TopicWriter<'_>| {
        use core::fmt::Write;
        match r.id {
            0 => write!(w, "bad/+/{}", r.id),
            _ => write!(w, "sensors/{}/temp", r.id),
        }
    });
    let mut link = Link::new(rec.subscribe().unwrap(), topic, Postcard);
    let (mut p, mut t) = ([0u8; 16], [0u8; 16]);
    let mut b = Routes::<_, 1, 4>::builder(ready, &mut p).written_topics(&mut t);
    b.link(&mut link);
    let mut routes = b.build().unwrap();
    let w = Waker::noop();
    rec.write(Reading { id: 7, v: 1 });
    rec.write(Reading { id: 0, v: 2 }); // wildcard in the written topic
    rec.write(Reading { id: 200, v: 3 }); // "sensors/200/temp" is 16 bytes: fits
    rec.write(Reading { id: 1, v: 4 });
    let got: Vec<_> = core::iter::from_fn(|| poll(&mut routes, w))
        .map(|m| m.1)
        .collect();
    assert_eq!(
        got,
        ["sensors/7/temp", "sensors/200/temp", "sensors/1/temp"]
    );
    assert_eq!(routes.stats().topic_invalid, 1);
    assert_eq!(routes.route(0).unwrap().errors(), 1);
    // A topic longer than the scratch is an error, not a truncation.
    let rec2: &'static Record<Cs, Latest<u32>, 1> = leak(Record::new("long"));
    let long = Written(|v: &u32, w: &mut TopicWriter<'_>| {
        use core::fmt::Write;
        write!(w, "a/very/long/topic/{v}")
    });
    let mut link2 = Link::new(rec2.subscribe().unwrap(), long, Postcard);
    let (mut p2, mut t2) = ([0u8; 16], [0u8; 8]);
    let mut b =
        Routes::<_, 1, 4>::builder(leak(Readiness::<1>::new()), &mut p2).written_topics(&mut t2);
    b.link(&mut link2);
    let mut routes2 = b.build().unwrap();
    rec2.write(1);
    assert_eq!(poll(&mut routes2, w), None);
    assert_eq!(routes2.stats().topic_too_long, 1);
}

type BigRec = Record<Cs, Ring<[u8; 8], 4>, 1>;
type SmallRec = Record<Cs, Ring<u8, 4>, 1>;

/// Route 0 over `big` (8-byte values, which a 4-byte payload scratch
/// cannot hold: every value is an encode error), route 1 over `small`.
fn big_and_small() -> (
    &'static BigRec,
    &'static SmallRec,
    Routes<'static, &'static Readiness<1>, 1, 4>,
) {
    let big: &'static BigRec = leak(Record::new("big"));
    let small: &'static SmallRec = leak(Record::new("small"));
    let l0 = Box::leak(Box::new(Link::new(
        big.subscribe().unwrap(),
        "big",
        Postcard,
    )));
    let l1 = Box::leak(Box::new(Link::new(
        small.subscribe().unwrap(),
        "small",
        Postcard,
    )));
    let (p, t) = (Box::leak(Box::new([0u8; 4])), Box::leak(Box::new([0u8; 4])));
    let mut b = Routes::<_, 1, 4>::builder(leak(Readiness::new()), p).written_topics(t);
    b.link(l0).link(l1);
    (big, small, b.build().unwrap())
}

#[test]
fn encode_error_skips_value_and_other_routes_continue() {
    let (big, small, mut routes) = big_and_small();
    big.write([1; 8]); // 8 bytes into a 4-byte scratch
    small.write(5);
    big.write([2; 8]);
    small.write(6);
    let got: Vec<_> = core::iter::from_fn(|| poll(&mut routes, Waker::noop()))
        .map(|m| (m.0, m.2))
        .collect();
    assert_eq!(got, [(1, std::vec![5]), (1, std::vec![6])]);
    assert_eq!(routes.stats().encode_errors, 2);
    assert_eq!(routes.route(0).unwrap().errors(), 2);
    assert_eq!(routes.route(1).unwrap().errors(), 0);
    let _ = EncodeError::BufferTooSmall;
}

#[test]
fn ring_lag_is_reported_with_exact_count() {
    let rec: &'static Record<Cs, Ring<u8, 4>, 1> = leak(Record::new("r"));
    let mut link = Link::new(rec.subscribe().unwrap(), "r", Postcard);
    let (mut p, mut t) = ([0u8; 4], [0u8; 4]);
    let mut b =
        Routes::<_, 1, 1>::builder(leak(Readiness::<1>::new()), &mut p).written_topics(&mut t);
    b.link(&mut link);
    let mut routes = b.build().unwrap();
    for v in 0..10 {
        rec.write(v);
    }
    let got: Vec<_> = core::iter::from_fn(|| poll(&mut routes, Waker::noop()))
        .map(|m| (m.2[0], m.3))
        .collect();
    assert_eq!(got, [(6, 6), (7, 0), (8, 0), (9, 0)]);
    assert_eq!(routes.stats().lagged, 6);
}

#[test]
fn round_robin_over_eight_always_ready_routes() {
    let recs: &'static [Record<Cs, Ring<u32, 64>, 1>] = records(8);
    let mut links = links(recs);
    let (mut p, mut t) = ([0u8; 8], [0u8; 4]);
    let mut b =
        Routes::<_, 1, 8>::builder(leak(Readiness::<1>::new()), &mut p).written_topics(&mut t);
    for l in &mut links {
        b.link(l);
    }
    let mut routes = b.build().unwrap();
    // Every route always has values; route 3 is hot (many more).
    for (i, r) in recs.iter().enumerate() {
        for v in 0..if i == 3 { 60 } else { 6 } {
            r.write(v);
        }
    }
    let order: Vec<usize> = (0..48)
        .map(|_| poll(&mut routes, Waker::noop()).unwrap().0)
        .collect();
    for round in order.chunks(8) {
        let mut sorted = round.to_vec();
        sorted.sort();
        assert_eq!(
            sorted,
            (0..8).collect::<Vec<_>>(),
            "each round serves every route once: {order:?}"
        );
    }
    // Once the cold routes are drained, the hot one continues alone.
    let rest: Vec<usize> =
        core::iter::from_fn(|| poll(&mut routes, Waker::noop()).map(|m| m.0)).collect();
    assert_eq!(rest, std::vec![3; 54]);
}

#[test]
fn hot_route_delays_cold_route_by_at_most_one_round() {
    let hot: &'static Record<Cs, Ring<u32, 1024>, 1> = leak(Record::new("hot"));
    let cold: &'static Record<Cs, Latest<u32>, 1> = leak(Record::new("cold"));
    let mut lh = Link::new(hot.subscribe().unwrap(), "hot", Postcard);
    let mut lc = Link::new(cold.subscribe().unwrap(), "cold", Postcard);
    let (mut p, mut t) = ([0u8; 8], [0u8; 4]);
    let mut b =
        Routes::<_, 1, 2>::builder(leak(Readiness::<1>::new()), &mut p).written_topics(&mut t);
    b.link(&mut lh).link(&mut lc);
    let mut routes = b.build().unwrap();
    for v in 0..1000 {
        hot.write(v);
    }
    for k in 0..20 {
        cold.write(k);
        // The cold value must come out within two pulls (one hot message
        // at most before it).
        let a = poll(&mut routes, Waker::noop()).unwrap().0;
        let b = poll(&mut routes, Waker::noop()).unwrap().0;
        assert!(a == 1 || b == 1, "cold route starved at round {k}");
    }
}

#[test]
fn mailbox_route_takes_each_command_once() {
    let rec: &'static Record<Cs, Mailbox<u8>, 2> = leak(Record::new("cmd"));
    let mut link = Link::new(rec.subscribe().unwrap(), "cmd", Postcard);
    let (mut p, mut t) = ([0u8; 4], [0u8; 4]);
    let mut b =
        Routes::<_, 1, 1>::builder(leak(Readiness::<1>::new()), &mut p).written_topics(&mut t);
    b.link(&mut link);
    let mut routes = b.build().unwrap();
    rec.write(1);
    rec.write(2);
    assert_eq!(
        poll(&mut routes, Waker::noop()).map(|m| m.2),
        Some(std::vec![2])
    );
    assert_eq!(poll(&mut routes, Waker::noop()), None);
}

#[test]
fn pull_parks_and_is_woken_by_another_task() {
    let rec: &'static Record<Cs, Ring<u32, 4>, 1> = leak(Record::new("r"));
    let mut link = Link::new(rec.subscribe().unwrap(), "r", Postcard);
    let (mut p, mut t) = ([0u8; 8], [0u8; 4]);
    let mut b =
        Routes::<_, 1, 1>::builder(leak(Readiness::<1>::new()), &mut p).written_topics(&mut t);
    b.link(&mut link);
    let mut routes = b.build().unwrap();
    let consumer = async {
        let mut got = Vec::new();
        for _ in 0..100 {
            got.push(routes.next().await.payload[0]);
        }
        got
    };
    let producer = async {
        for v in 0..100u32 {
            rec.write(v);
            // Yield so the consumer parks between writes.
            let mut yielded = false;
            poll_fn(|cx| {
                if yielded {
                    Poll::Ready(())
                } else {
                    yielded = true;
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
            })
            .await;
        }
    };
    let (got, ()) = futures::executor::block_on(futures::future::join(consumer, producer));
    assert_eq!(got, (0..100).collect::<Vec<u8>>());
}

#[test]
fn pull_parks_and_is_woken_by_another_thread() {
    static REC: Record<Cs, Ring<u32, 1024>, 1> = Record::new("r");
    static READY: Readiness<4> = Readiness::new();
    let mut link = Link::new(REC.subscribe().unwrap(), "r", Postcard);
    let (mut p, mut t) = ([0u8; 8], [0u8; 4]);
    let mut b = Routes::<_, 4, 1>::builder(&READY, &mut p).written_topics(&mut t);
    b.link(&mut link);
    let mut routes = b.build().unwrap();
    let writer = std::thread::spawn(|| {
        for v in 0..1000u32 {
            REC.write(v);
            if v % 7 == 0 {
                std::thread::yield_now();
            }
        }
    });
    let mut got = Vec::new();
    while got.len() < 1000 {
        let m = futures::executor::block_on(routes.next());
        let v: u32 = crate::codec::Decode::decode(&Postcard, m.payload).unwrap();
        got.push(v);
    }
    writer.join().unwrap();
    assert_eq!(got, (0..1000).collect::<Vec<_>>());
}

#[test]
fn dropping_a_pending_next_loses_nothing() {
    let rec: &'static Record<Cs, Ring<u8, 4>, 1> = leak(Record::new("r"));
    let mut link = Link::new(rec.subscribe().unwrap(), "r", Postcard);
    let (mut p, mut t) = ([0u8; 4], [0u8; 4]);
    let mut b =
        Routes::<_, 1, 1>::builder(leak(Readiness::<1>::new()), &mut p).written_topics(&mut t);
    b.link(&mut link);
    let mut routes = b.build().unwrap();
    {
        let fut = routes.next();
        let mut fut = core::pin::pin!(fut);
        assert!(fut
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_pending());
    }
    rec.write(9);
    assert_eq!(
        poll(&mut routes, Waker::noop()).map(|m| m.2),
        Some(std::vec![9])
    );
}

#[test]
fn configuration_errors_are_all_reported() {
    let rec: &'static Record<Cs, Latest<u8>, 4> = leak(Record::new("x"));
    let mut l: Vec<_> = ["ok", "bad/+", "", "ok2"]
        .into_iter()
        .map(|t| Link::new(rec.subscribe().unwrap(), t, Postcard))
        .collect();
    let (mut p, mut t) = ([0u8; 4], [0u8; 4]);
    let mut b =
        Routes::<_, 1, 1>::builder(leak(Readiness::<1>::new()), &mut p).written_topics(&mut t);
    for x in &mut l {
        b.link(x);
    }
    let e = b.build().unwrap_err();
    let got: Vec<_> = e.issues.iter().map(|i| (i.index, i.error)).collect();
    assert_eq!(
        got,
        [
            (1, ConfigError::InvalidTopic(TopicError::WildcardInName)),
            (2, ConfigError::InvalidTopic(TopicError::Empty)),
            (3, ConfigError::TooManyRoutes),
        ]
    );
}

#[cfg(feature = "alloc")]
#[test]
fn owned_encoder_and_arc_handle() {
    let rec: &'static Record<Cs, Latest<u16>, 1> = leak(Record::new("o"));
    let ready = Arc::new(Readiness::<1>::new());
    let mut link = Link::owned(rec.subscribe().unwrap(), "o", Postcard);
    let (mut p, mut t) = ([0u8; 1], [0u8; 1]);
    let mut b = Routes::<_, 1, 1>::builder(ready.clone(), &mut p).written_topics(&mut t);
    b.link(&mut link);
    let mut routes = b.build().unwrap();
    rec.write(1000);
    assert_eq!(
        poll(&mut routes, Waker::noop()).map(|m| m.2),
        Some(std::vec![0xe8, 0x07])
    );
    assert_eq!(poll(&mut routes, Waker::noop()), None);
    drop(routes);
    drop(link);
    assert_eq!(
        Arc::strong_count(&ready),
        1,
        "route wakers released the Arc"
    );
}

#[test]
fn many_routes_one_busy() {
    let (recs, mut routes) = table_4096(&[]);
    assert_eq!(poll(&mut routes, Waker::noop()), None);
    for k in [4095usize, 0, 2000, 31, 32, 1024] {
        recs[k].write(k as u32);
        assert_eq!(poll(&mut routes, Waker::noop()).map(|m| m.0), Some(k));
        assert_eq!(poll(&mut routes, Waker::noop()), None);
    }
}

#[test]
fn replay_latest_republishes_state_only() {
    let state: &'static Record<Cs, Latest<u8>, 1> = leak(Record::new("s"));
    let stream: &'static Record<Cs, Ring<u8, 4>, 1> = leak(Record::new("t"));
    let mut ls = Link::new(state.subscribe().unwrap(), "s", Postcard);
    let mut lt = Link::new(stream.subscribe().unwrap(), "t", Postcard);
    let mut p = [0u8; 4];
    let mut b = Routes::<_, 1, 2>::builder(leak(Readiness::<1>::new()), &mut p);
    b.link(&mut ls).link(&mut lt);
    let mut routes = b.build().unwrap();
    state.write(1);
    stream.write(2);
    let first: Vec<_> = core::iter::from_fn(|| poll(&mut routes, Waker::noop()))
        .map(|m| m.1)
        .collect();
    assert_eq!(first, ["s", "t"]);
    routes.replay_latest();
    let again: Vec<_> = core::iter::from_fn(|| poll(&mut routes, Waker::noop()))
        .map(|m| (m.1, m.2))
        .collect();
    assert_eq!(
        again,
        [("s".into(), std::vec![1])],
        "state again, stream not"
    );
    stream.write(3);
    let source = &mut routes as &mut dyn MessageSource;
    let m = futures::executor::block_on(crate::connector::next(source));
    assert_eq!(
        (m.topic, m.payload),
        ("t", &[3u8][..]),
        "connector::next pulls as Routes::next does"
    );
}

/// The retry path of a connector whose write failed: the `Ready` of the
/// last poll gives the same message again after polls that found nothing
/// (and after `replay_latest`, which polls no route).
#[test]
fn a_kept_ready_gives_the_same_message_until_a_route_is_polled() {
    let state: &'static Record<Cs, Latest<u16>, 1> = leak(Record::new("state"));
    let stream: &'static Record<Cs, Ring<u16, 4>, 1> = leak(Record::new("stream"));
    let ready: &'static Readiness<1> = leak(Readiness::new());
    let mut a = Link::new(state.subscribe().unwrap(), "s", Postcard);
    let mut b = Link::new(stream.subscribe().unwrap(), "t", Postcard);
    let mut p = [0u8; 8];
    let mut bld = Routes::<_, 1, 2>::builder(ready, &mut p);
    bld.link(&mut a).link(&mut b);
    let mut routes = bld.build().unwrap();
    stream.write(7);
    let source = &mut routes as &mut dyn MessageSource;
    let mut cx = Context::from_waker(Waker::noop());
    let Poll::Ready(kept) = source.poll_ready(&mut cx) else {
        panic!("the stream value is ready");
    };
    assert_eq!(kept.route(), 1);
    assert!(source.poll_ready(&mut cx).is_pending());
    source.replay_latest();
    let m = source.message(kept);
    assert_eq!((m.route, m.topic, m.payload), (1, "t", &[7u8][..]));
}

/// Retain and QoS follow the record's kind unless the link sets them,
/// each independently of the other.
#[test]
fn retain_and_qos_follow_the_kind_unless_the_link_sets_them() {
    use crate::connector::QoS::{self, AtLeastOnce, AtMostOnce, ExactlyOnce};
    let state: &'static Record<Cs, Latest<u16>, 2> = leak(Record::new("state"));
    let stream: &'static Record<Cs, Ring<u16, 4>, 3> = leak(Record::new("stream"));
    let cmd: &'static Record<Cs, Mailbox<u16>, 1> = leak(Record::new("cmd"));
    let quiet: &'static Record<Cs, Latest<u16>, 1> = leak(Record::new("quiet"));
    let ready: &'static Readiness<1> = leak(Readiness::new());
    let mut a = Link::new(state.subscribe().unwrap(), "s", Postcard);
    let mut b = Link::new(stream.subscribe().unwrap(), "r", Postcard);
    let mut c = Link::new(cmd.subscribe().unwrap(), "c", Postcard);
    let mut d = Link::new(quiet.subscribe().unwrap(), "q", Postcard).retained(false);
    let mut e = Link::new(stream.subscribe().unwrap(), "r2", Postcard).retained(true);
    let mut f = Link::new(stream.subscribe().unwrap(), "r0", Postcard).qos(AtMostOnce);
    let mut g = Link::new(state.subscribe().unwrap(), "s2", Postcard)
        .retained(false)
        .qos(ExactlyOnce);
    let mut p = [0u8; 16];
    let mut bld = Routes::<_, 1, 8>::builder(ready, &mut p);
    bld.link(&mut a)
        .link(&mut b)
        .link(&mut c)
        .link(&mut d)
        .link(&mut e)
        .link(&mut f)
        .link(&mut g);
    let mut routes = bld.build().unwrap();
    state.write(1);
    stream.write(2);
    cmd.write(3);
    quiet.write(4);
    let mut seen = Vec::new();
    let mut cx = Context::from_waker(Waker::noop());
    while let Poll::Ready(m) = routes.poll_next(&mut cx) {
        seen.push((std::string::String::from(m.topic), m.retain, m.qos));
    }
    seen.sort();
    let want: Vec<(std::string::String, bool, QoS)> = [
        ("c", false, AtLeastOnce),
        ("q", false, AtLeastOnce),
        ("r", false, AtLeastOnce),
        ("r0", false, AtMostOnce),
        ("r2", true, AtLeastOnce),
        ("s", true, AtLeastOnce),
        ("s2", false, ExactlyOnce),
    ]
    .iter()
    .map(|&(t, r, q)| (std::string::String::from(t), r, q))
    .collect();
    assert_eq!(seen, want);
}

#[test]
fn one_table_per_readiness_until_it_is_dropped() {
    let rec: &'static Record<Cs, Latest<u16>, 2> = leak(Record::new("temp"));
    let ready: &'static Readiness<1> = leak(Readiness::new());
    let mut a = Link::new(rec.subscribe().unwrap(), "a", Postcard);
    let mut b = Link::new(rec.subscribe().unwrap(), "b", Postcard);
    let mut p1 = [0u8; 8];
    let mut p2 = [0u8; 8];
    let mut first = Routes::<_, 1, 1>::builder(ready, &mut p1);
    first.link(&mut a);
    let first = first.build().unwrap();
    let mut second = Routes::<_, 1, 1>::builder(ready, &mut p2);
    second.link(&mut b);
    let e = second.build().unwrap_err();
    assert_eq!(e.issues[0].error, ConfigError::ReadinessInUse);
    assert!(std::format!("{e}").contains("one consumer per bitmap"));
    drop(first);
    // Dropped: the bitmap is free again (a connector rebuilding its table
    // per connection, as the device app does).
    let mut again = Routes::<_, 1, 1>::builder(ready, &mut p2);
    again.link(&mut b);
    assert!(again.build().is_ok());
}

/// 4,096 `Latest` routes over one bitmap; the routes in `urgent` (the
/// first ones) linked urgent.
type Table4096 = Box<Routes<'static, &'static Readiness<128>, 128, 4096>>;

fn table_4096(urgent: &[usize]) -> (&'static [Record<Cs, Latest<u32>, 1>], Table4096) {
    let recs: &'static [Record<Cs, Latest<u32>, 1>] = records(4096);
    let links: &'static mut [_] = Box::leak(links(recs).into_boxed_slice());
    let ready: &'static Readiness<128> = leak(Readiness::new());
    let (p, t) = (Box::leak(Box::new([0u8; 8])), Box::leak(Box::new([0u8; 4])));
    let mut b = Routes::<_, 128, 4096>::builder(ready, p).written_topics(t);
    for (i, l) in links.iter_mut().enumerate() {
        if urgent.contains(&i) {
            b.link_urgent(l);
        } else {
            b.link(l);
        }
    }
    let mut routes = Box::new(b.build().unwrap());
    // The build marks every route ready: drain that first look.
    while poll(&mut routes, Waker::noop()).is_some() {}
    (recs, routes)
}

#[test]
fn urgent_route_written_among_4095_ready_normal_routes_comes_out_on_the_next_pull() {
    const URGENT: usize = 0;
    let (recs, mut routes) = table_4096(&[URGENT]);
    assert!(routes.is_urgent(URGENT) && !routes.is_urgent(1));
    for (i, r) in recs.iter().enumerate() {
        if i != URGENT {
            r.write(i as u32);
        }
    }
    // Part way through the round of normal routes.
    for _ in 0..100 {
        let m = poll(&mut routes, Waker::noop()).unwrap();
        assert_ne!(m.0, URGENT);
    }
    recs[URGENT].write(7);
    let m = routes.poll_next(&mut Context::from_waker(Waker::noop()));
    match m {
        Poll::Ready(m) => assert!(m.route == URGENT && m.urgent, "{m:?}"),
        Poll::Pending => panic!("nothing ready"),
    }
    // The other 3,995 normal routes still all come out, once each.
    let mut rest = std::collections::BTreeSet::new();
    while let Some(m) = poll(&mut routes, Waker::noop()) {
        assert!(rest.insert(m.0), "route {} twice", m.0);
    }
    assert_eq!(rest.len(), 4095 - 100);
    assert!(!rest.contains(&URGENT));
}

#[test]
fn normal_routes_progress_while_an_urgent_route_is_always_ready() {
    // One urgent Ring route that always holds more, 63 normal routes ready.
    let hot: &'static Record<Cs, Ring<u32, 64>, 1> = leak(Record::new("hot"));
    let recs: &'static [Record<Cs, Latest<u32>, 1>] = records(63);
    let mut hot_link = Link::new(hot.subscribe().unwrap(), "hot", Postcard);
    let mut links = links(recs);
    let ready: &'static Readiness<2> = leak(Readiness::new());
    let (mut p, mut t) = ([0u8; 8], [0u8; 4]);
    let mut b = Routes::<_, 2, 64>::builder(ready, &mut p).written_topics(&mut t);
    b.link_urgent(&mut hot_link);
    for l in &mut links {
        b.link(l);
    }
    let mut routes = b.build().unwrap();
    while poll(&mut routes, Waker::noop()).is_some() {}

    for r in recs {
        r.write(1);
    }
    let burst = URGENT_BURST as usize;
    let mut normal_seen = 0;
    let mut urgent_run = 0;
    let mut pulls = 0;
    while normal_seen < recs.len() {
        // Keep the urgent route ready on every pull.
        hot.write(pulls as u32);
        let (route, ..) = poll(&mut routes, Waker::noop()).expect("something is ready");
        pulls += 1;
        assert!(
            pulls <= 2 * (burst + 1) * recs.len(),
            "normal routes starved"
        );
        if route == 0 {
            urgent_run += 1;
            assert!(urgent_run <= burst, "{urgent_run} urgent in a row");
        } else {
            assert_eq!(urgent_run, burst, "a normal route only after a full burst");
            urgent_run = 0;
            normal_seen += 1;
        }
    }
    // The documented bound: k ready normal routes are all served within
    // (URGENT_BURST + 1) * k pulls.
    assert_eq!(pulls, (burst + 1) * recs.len());
}

#[test]
fn urgent_routes_are_round_robin_among_themselves() {
    let (recs, mut routes) = table_4096(&[0, 1, 2]);
    // Normal routes on both sides of the cursor, urgent ones always first
    // and in turn.
    for round in 0..3 {
        recs[3000].write(round);
        recs[40].write(round);
        for u in [2usize, 0, 1] {
            recs[u].write(round);
        }
        let order: Vec<_> = core::iter::from_fn(|| poll(&mut routes, Waker::noop()))
            .map(|m| m.0)
            .collect();
        assert_eq!(&order[..3], [0, 1, 2], "round {round}");
        let mut rest = order[3..].to_vec();
        rest.sort();
        assert_eq!(rest, [40, 3000], "round {round}");
    }
}

#[test]
fn urgent_routes_come_first_and_are_bounded() {
    let recs: &'static [Record<Cs, Latest<u32>, 1>] = records(34);
    let mut links = links(recs);
    let mut late = Link::new(
        leak(Record::<Cs, Latest<u32>, 1>::new("late"))
            .subscribe()
            .unwrap(),
        "t",
        Postcard,
    );
    let ready: &'static Readiness<2> = leak(Readiness::new());
    let (mut p, mut t) = ([0u8; 8], [0u8; 4]);
    let mut b = Routes::<_, 2, 64>::builder(ready, &mut p).written_topics(&mut t);
    let (first, rest) = links.split_at_mut(33);
    for l in first.iter_mut() {
        b.link_urgent(l);
    }
    b.link(&mut rest[0]);
    b.link_urgent(&mut late);
    let e = b.build().unwrap_err();
    let got: Vec<_> = e.issues.iter().map(|i| (i.index, i.error)).collect();
    assert_eq!(
        got,
        [
            (32, ConfigError::TooManyUrgent),
            (34, ConfigError::UrgentAfterNormal)
        ]
    );
    assert_eq!(
        std::string::ToString::to_string(&ConfigError::UrgentAfterNormal),
        "urgent routes must be linked before any normal route"
    );
}

#[test]
fn urgent_route_ready_with_4095_others_in_one_absorb_comes_first_and_none_is_lost() {
    let (recs, mut routes) = table_4096(&[0]);
    // Everything becomes ready before the transport looks: its first
    // absorb stops after word 0 for the urgent route and gives the other
    // groups back.
    for (i, r) in recs.iter().enumerate().rev() {
        r.write(i as u32);
    }
    assert_eq!(poll(&mut routes, Waker::noop()).map(|m| m.0), Some(0));
    let mut rest = std::collections::BTreeSet::new();
    while let Some(m) = poll(&mut routes, Waker::noop()) {
        assert!(rest.insert(m.0), "route {} twice", m.0);
    }
    assert_eq!(rest.len(), 4095, "every normal route once");
    assert!(!rest.contains(&0));
}

/// `last()` is the message of the last successful poll for as long as its
/// scratches are untouched: a poll that finds nothing ready keeps it (a
/// transport retrying a failed write after an idle poll still has it), a
/// poll that polls a route forgets it first (an encode error may have
/// overwritten the payload scratch).
#[test]
fn last_survives_an_idle_poll_not_a_route_poll() {
    let (big, small, mut routes) = big_and_small();
    assert!(routes.last().is_none(), "nothing produced yet");
    small.write(5);
    assert_eq!(
        poll(&mut routes, Waker::noop()).map(|m| m.2),
        Some(std::vec![5])
    );
    assert!(poll(&mut routes, Waker::noop()).is_none(), "nothing ready");
    let m = routes.last().expect("kept across the idle poll");
    assert_eq!((m.route, m.topic, m.payload), (1, "small", &[5u8][..]));
    big.write([1; 8]); // 8 bytes into a 4-byte scratch: skipped
    assert!(poll(&mut routes, Waker::noop()).is_none());
    assert_eq!(routes.stats().encode_errors, 1);
    assert!(
        routes.last().is_none(),
        "a polled route may have written the scratch"
    );
}

#[test]
fn a_written_topic_without_a_scratch_is_a_configuration_error() {
    let rec: &'static Record<Cs, Latest<u16>, 2> = leak(Record::new("temp"));
    let ready: &'static Readiness<1> = leak(Readiness::new());
    let topic = Written(|v: &u16, w: &mut TopicWriter<'_>| {
        use core::fmt::Write;
        write!(w, "t/{v}")
    });
    let mut fixed = Link::new(rec.subscribe().unwrap(), "t", Postcard);
    let mut written = Link::new(rec.subscribe().unwrap(), topic, Postcard);
    let mut p = [0u8; 8];
    let mut b = Routes::<_, 1, 2>::builder(ready, &mut p);
    b.link(&mut fixed).link(&mut written);
    let e = b.build().unwrap_err();
    assert_eq!(e.total, 1);
    assert_eq!(
        (e.issues[0].index, e.issues[0].name, e.issues[0].error),
        (1, "temp", ConfigError::NoTopicScratch)
    );
}
