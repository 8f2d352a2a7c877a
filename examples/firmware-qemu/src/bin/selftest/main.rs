//! aimdb-core self-test firmware for QEMU's `lm3s6965evb`.
//!
//! Runs every check below against `static` records guarded by
//! `CriticalSectionRawMutex`, prints `PASS name` / `FAIL name` through
//! semihosting, and ends QEMU with exit code 0 when all pass, 1 otherwise
//! (a panic or a hard fault also exits 1). Built and run by
//! `cargo xtask firmware smoke [--cpu cortex-m3|cortex-m0]`.
//!
//! The last check, `device_app`, runs the demo device (`firmware_qemu::app`:
//! sensor, control and connector tasks, as on UART0) against a scripted
//! peer over an in-memory pipe: readings arrive exactly once and in order,
//! garbage on the line is counted and skipped, and commands round-trip to
//! a status.
//!
//! Adding a check: write `fn my_check() -> bool` (use [`ensure!`] for each
//! condition) and add it to [`SYNC_CHECKS`]; an async check is an
//! `async fn(Spawner) -> bool` called from `main` through [`Tally::check`].
//!
//! `framed_link_state` runs two framed connectors with the heartbeat over
//! an in-memory pipe: a task awaiting the `Latest<LinkState>` record wakes
//! when the link comes up and again when the peer stops (silence).
//!
//! Besides the record kinds, the checks cover inbound routing
//! (`inbound_dispatch`: exact, pattern and keyed routes, every bad-frame
//! kind counted and harmless) and outbound routing (`outbound_routes`:
//! round-robin pulls, a pull that parks and is woken by a producer task, an
//! encode error skipped while the other routes go on), all without a heap.
#![no_std]
#![no_main]

use core::fmt::Write as _;
use core::future::{poll_fn, Future};
use core::pin::pin;
use core::task::Poll;

use aimdb_core::codec::{DecodeError, Encode, Postcard};
use aimdb_core::inbound;
use aimdb_core::connector::{DispatchError, Message};
use aimdb_core::inbound::{Dispatch, KeyedLink};
use aimdb_core::outbound;
use aimdb_core::outbound::{Routes, TopicWriter, Written};
use aimdb_core::record::{Keyed, Latest, Mailbox, Record, Ring, SubscribeError, TryRecvError};
use aimdb_core::sync::Readiness;
use cortex_m_semihosting::{debug, hprintln};
use embassy_executor::Spawner;
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
use firmware_qemu::time;

/// Fails the enclosing `fn() -> bool` check, printing the condition and line.
macro_rules! ensure {
    ($cond:expr) => {
        if !$cond {
            hprintln!("  failed at line {}: {}", line!(), stringify!($cond));
            return false;
        }
    };
}

mod link;
mod peer;

/// Counts check results.
#[derive(Default)]
struct Tally {
    passed: u32,
    failed: u32,
}

impl Tally {
    /// Records and prints one check's result.
    fn check(&mut self, name: &str, ok: bool) {
        if ok {
            self.passed += 1;
            hprintln!("PASS {}", name);
        } else {
            self.failed += 1;
            hprintln!("FAIL {}", name);
        }
    }
}

/// Synchronous checks, run in order.
const SYNC_CHECKS: &[(&str, fn() -> bool)] = &[
    ("latest_coalesces", latest_coalesces),
    ("ring_lag_exact", ring_lag_exact),
    ("mailbox_taken_once", mailbox_taken_once),
    ("subscribe_full_and_release", subscribe_full_and_release),
    ("inbound_dispatch", inbound_dispatch),
];

// ---------------------------------------------------------------- Latest

static LATEST: Record<Cs, Latest<u32>, 2> = Record::new("fw/latest");

/// Writes between reads coalesce; each value is seen at most once; a late
/// subscriber sees the current value once.
fn latest_coalesces() -> bool {
    let Ok(mut r) = LATEST.subscribe() else {
        return false;
    };
    ensure!(r.try_recv() == Err(TryRecvError::Empty));
    LATEST.write(1);
    LATEST.write(2);
    LATEST.write(3);
    ensure!(r.try_recv() == Ok(3));
    ensure!(r.try_recv() == Err(TryRecvError::Empty));
    LATEST.write(3);
    ensure!(r.try_recv() == Ok(3)); // an equal value is still a new write
    let Ok(mut late) = LATEST.subscribe() else {
        return false;
    };
    ensure!(late.try_recv() == Ok(3));
    ensure!(late.try_recv() == Err(TryRecvError::Empty));
    ensure!(LATEST.writes() == 4);
    true
}

// ---------------------------------------------------------------- Ring

static RING: Record<Cs, Ring<u32, 4>, 2> = Record::new("fw/ring");

/// A reader that falls behind a ring of 4 is told exactly how many values it
/// lost, then reads the oldest one still held; other readers are unaffected.
fn ring_lag_exact() -> bool {
    // The `inject-failure` feature expects a wrong lag count here.
    const LOST_AFTER_7: u64 = if cfg!(feature = "inject-failure") {
        4
    } else {
        3
    };

    let (Ok(mut a), Ok(mut b)) = (RING.subscribe(), RING.subscribe()) else {
        return false;
    };
    for v in 0..4 {
        RING.write(v);
    }
    // Exactly at capacity: nothing lost.
    for v in 0..4 {
        ensure!(a.try_recv() == Ok(v));
    }
    ensure!(a.try_recv() == Err(TryRecvError::Empty));
    for v in 4..7 {
        RING.write(v);
    }
    // b is 7 behind a ring of 4.
    ensure!(b.try_recv() == Err(TryRecvError::Lagged(LOST_AFTER_7)));
    for v in 3..7 {
        ensure!(b.try_recv() == Ok(v));
    }
    ensure!(b.try_recv() == Err(TryRecvError::Empty));
    for v in 4..7 {
        ensure!(a.try_recv() == Ok(v));
    }
    // Far behind: the lag counts every lost value.
    for v in 0..1000 {
        RING.write(v);
    }
    ensure!(a.try_recv() == Err(TryRecvError::Lagged(996)));
    ensure!(a.try_recv() == Ok(996));
    ensure!(RING.writes() == 1007);
    true
}

// ---------------------------------------------------------------- Mailbox

static MAILBOX: Record<Cs, Mailbox<u32>, 2> = Record::new("fw/mailbox");

/// The latest write wins and each value is taken by exactly one of two
/// readers.
fn mailbox_taken_once() -> bool {
    let (Ok(mut a), Ok(mut b)) = (MAILBOX.subscribe(), MAILBOX.subscribe()) else {
        return false;
    };
    MAILBOX.write(1);
    MAILBOX.write(2);
    ensure!(a.try_recv() == Ok(2));
    ensure!(b.try_recv() == Err(TryRecvError::Empty));
    ensure!(a.try_recv() == Err(TryRecvError::Empty));
    let mut taken = [0u32; 2];
    for v in 10..20 {
        MAILBOX.write(v);
        // Alternate who tries first; exactly one reader gets each value.
        let (first, second) = if v % 2 == 0 {
            (&mut a, &mut b)
        } else {
            (&mut b, &mut a)
        };
        let x = first.try_recv();
        let y = second.try_recv();
        ensure!(x == Ok(v));
        ensure!(y == Err(TryRecvError::Empty));
        taken[(v % 2) as usize] += 1;
    }
    ensure!(taken == [5, 5]);
    true
}

// ---------------------------------------------------------------- slots

static SLOTS: Record<Cs, Latest<u8>, 2> = Record::new("fw/slots");

/// Subscribing past `R` readers fails; dropping a reader frees its slot.
fn subscribe_full_and_release() -> bool {
    let (Ok(a), Ok(_b)) = (SLOTS.subscribe(), SLOTS.subscribe()) else {
        return false;
    };
    ensure!(SLOTS.subscribe().map(|_| ()) == Err(SubscribeError::Full));
    drop(a);
    ensure!(SLOTS.subscribe().is_ok());
    true
}

// ---------------------------------------------------------------- inbound

/// Exact route `ctl/setpoint`; a postcard `i16` is at most 3 bytes, so the
/// link refuses anything longer unread.
static SETPOINT: Record<Cs, Latest<i16>, 1> = Record::new("fw/setpoint");
static SETPOINT_IN: inbound::Link<'static, Record<Cs, Latest<i16>, 1>, Postcard, i16> =
    inbound::Link::new(&SETPOINT, Postcard).with_max_payload(3);
/// Pattern route `cmd/+/led`: every LED command lands in one ring.
static LEDS: Record<Cs, Ring<bool, 4>, 1> = Record::new("fw/leds");
static LEDS_IN: inbound::Link<'static, Record<Cs, Ring<bool, 4>, 1>, Postcard, bool> =
    inbound::Link::new(&LEDS, Postcard);
/// Keyed route `sensors/+/temp`: level 1 names the slot; room for 2 keys.
static TEMPS: Keyed<Cs, Latest<i16>, 2, 1> = Keyed::new("fw/temps");
static TEMPS_IN: KeyedLink<'static, Keyed<Cs, Latest<i16>, 2, 1>, Postcard, i16> =
    KeyedLink::new(&TEMPS, Postcard);

/// Postcard-encodes `v` into `buf` through the `Encode` trait (an empty
/// payload, which no route accepts, if it does not fit).
fn enc<'b, T>(v: &T, buf: &'b mut [u8]) -> &'b [u8]
where
    Postcard: Encode<T>,
{
    match Postcard.encode(v, buf) {
        Ok(n) => &buf[..n],
        Err(_) => &[],
    }
}

/// Every write the inbound records have taken, and the claimed key count.
fn inbound_writes() -> (u64, u64, u64, usize) {
    let mut keyed = 0;
    TEMPS.for_each(|_, r| keyed += r.writes());
    (SETPOINT.writes(), LEDS.writes(), keyed, TEMPS.len())
}

/// An exact, a pattern and a keyed route: good frames reach their records;
/// each bad frame returns its error, bumps its own counter, writes nothing,
/// and the next good frame is delivered.
fn inbound_dispatch() -> bool {
    let mut b = Dispatch::<'static, 4, 8>::builder();
    b.link("ctl/setpoint", &SETPOINT_IN);
    b.link("cmd/+/led", &LEDS_IN);
    b.link_keyed("sensors/+/temp", 1, &TEMPS_IN);
    let Ok(mut d) = b.build() else { return false };
    ensure!(d.len() == 3);
    let mut filters = d.filters();
    ensure!(filters.next() == Some("ctl/setpoint"));
    ensure!(filters.next() == Some("cmd/+/led"));
    ensure!(filters.next() == Some("sensors/+/temp"));
    ensure!(filters.next().is_none());
    drop(filters);

    let (Ok(mut setpoint), Ok(mut leds)) = (SETPOINT.subscribe(), LEDS.subscribe()) else {
        return false;
    };
    let mut buf = [0u8; 8];
    ensure!(d.dispatch(b"ctl/setpoint", enc(&-215i16, &mut buf)) == Ok(1));
    ensure!(setpoint.try_recv() == Ok(-215));
    ensure!(d.dispatch(b"cmd/kitchen/led", enc(&true, &mut buf)) == Ok(1));
    ensure!(d.dispatch(b"cmd/hall/led", enc(&false, &mut buf)) == Ok(1));
    ensure!(leds.try_recv() == Ok(true));
    ensure!(leds.try_recv() == Ok(false));
    ensure!(d.dispatch(b"sensors/a/temp", enc(&215i16, &mut buf)) == Ok(1));
    ensure!(d.dispatch(b"sensors/b/temp", enc(&190i16, &mut buf)) == Ok(1));
    ensure!(TEMPS.len() == 2);
    let (Some(a), Some(bslot)) = (TEMPS.get("a"), TEMPS.get("b")) else {
        return false;
    };
    let (Ok(mut temp_a), Ok(mut temp_b)) = (a.subscribe(), bslot.subscribe()) else {
        return false;
    };
    // Late subscribers to `Latest` slots see the current value once.
    ensure!(temp_a.try_recv() == Ok(215));
    ensure!(temp_b.try_recv() == Ok(190));
    ensure!(d.stats().delivered == 5);
    ensure!(d.stats().total_rejected() == 0);

    let mut one = [0u8; 4];
    let one = enc(&1i16, &mut one);
    let bad: [(&[u8], &[u8], DispatchError); 11] = [
        (b"ctl/nope", one, DispatchError::UnknownTopic),
        (b"cmd/+/led", &[1], DispatchError::WildcardInTopic),
        (b"sensors/#", one, DispatchError::WildcardInTopic),
        (b"ctl/\xffpoint", one, DispatchError::TopicNotUtf8),
        // A varint cut short.
        (
            b"ctl/setpoint",
            &[0x80],
            DispatchError::MalformedPayload(DecodeError::Truncated),
        ),
        // 1, then a stray byte.
        (
            b"ctl/setpoint",
            &[2, 0],
            DispatchError::MalformedPayload(DecodeError::TrailingBytes),
        ),
        // 2 is not a bool.
        (
            b"cmd/hall/led",
            &[2],
            DispatchError::MalformedPayload(DecodeError::Malformed),
        ),
        // 4 bytes: over the link's 3-byte limit, refused before decoding.
        (
            b"ctl/setpoint",
            &[0x80, 0x80, 0x80, 0],
            DispatchError::PayloadTooLarge,
        ),
        (b"sensors/c/temp", one, DispatchError::KeyTableFull),
        // Decoded before the key is claimed: malformed, not "table full".
        (
            b"sensors/c/temp",
            &[0x80],
            DispatchError::MalformedPayload(DecodeError::Truncated),
        ),
        (b"sensors//temp", one, DispatchError::KeyInvalid),
    ];
    for (i, &(topic, payload, want)) in bad.iter().enumerate() {
        let before = *d.stats();
        let writes = inbound_writes();
        let got = d.dispatch(topic, payload);
        if got != Err(want) {
            hprintln!("  case {}: got {:?}, want {:?}", i, got, want);
            return false;
        }
        ensure!(d.stats().rejected(want) == before.rejected(want) + 1);
        ensure!(d.stats().total_rejected() == before.total_rejected() + 1);
        ensure!(d.stats().delivered == before.delivered);
        // Nothing written anywhere.
        ensure!(inbound_writes() == writes);
        ensure!(setpoint.try_recv() == Err(TryRecvError::Empty));
        ensure!(leds.try_recv() == Err(TryRecvError::Empty));
        ensure!(temp_a.try_recv() == Err(TryRecvError::Empty));
        ensure!(temp_b.try_recv() == Err(TryRecvError::Empty));
        // The next good frame, on each route in turn, is delivered.
        let v = i as i16 * 7 - 30;
        match i % 3 {
            0 => {
                ensure!(d.dispatch(b"ctl/setpoint", enc(&v, &mut buf)) == Ok(1));
                ensure!(setpoint.try_recv() == Ok(v));
            }
            1 => {
                ensure!(d.dispatch(b"cmd/porch/led", enc(&(i % 2 == 0), &mut buf)) == Ok(1));
                ensure!(leds.try_recv() == Ok(i % 2 == 0));
            }
            _ => {
                ensure!(d.dispatch(b"sensors/b/temp", enc(&v, &mut buf)) == Ok(1));
                ensure!(temp_b.try_recv() == Ok(v));
            }
        }
    }
    let s = d.stats();
    ensure!(s.unknown_topic == 1);
    ensure!(s.wildcard_in_topic == 2);
    ensure!(s.topic_not_utf8 == 1);
    ensure!(s.malformed_payload == 4);
    ensure!(s.payload_too_large == 1);
    ensure!(s.key_table_full == 1);
    ensure!(s.key_invalid == 1);
    ensure!(s.invalid_topic == 0 && s.topic_too_long == 0);
    ensure!(s.total_rejected() == bad.len() as u32);
    ensure!(s.delivered == 5 + bad.len() as u32);
    ensure!(TEMPS.len() == 2 && TEMPS.get("c").is_none());
    true
}

// ---------------------------------------------------------------- async

/// Values the producer sends; the ring (4) never overflows because the
/// producer waits for each acknowledgement.
static DATA: Record<Cs, Ring<u32, 4>, 1> = Record::new("fw/data");
/// The consumer's acknowledgements.
static ACK: Record<Cs, Mailbox<u32>, 1> = Record::new("fw/ack");
/// The producer's verdict, written once when it is done.
static DONE: Record<Cs, Latest<bool>, 1> = Record::new("fw/done");
const ROUNDS: u32 = 32;

#[embassy_executor::task]
async fn producer() {
    let mut ok = true;
    match ACK.subscribe() {
        Ok(mut ack) => {
            for i in 0..ROUNDS {
                DATA.write(i);
                ok &= ack.recv().await == Ok(i);
            }
        }
        Err(_) => ok = false,
    }
    DONE.write(ok);
}

/// A producer task and this (consumer) task exchange `ROUNDS` values through
/// `recv().await` both ways; the consumer must park (poll `Pending`) and be
/// woken by the producer's write every round.
async fn async_recv_ping_pong(spawner: Spawner) -> bool {
    // Subscribe before the producer runs: a ring reader starts at the next
    // write.
    let (Ok(mut data), Ok(mut done)) = (DATA.subscribe(), DONE.subscribe()) else {
        return false;
    };
    spawner.spawn(match producer() {
        Ok(token) => token,
        Err(_) => return false,
    });
    let mut received_ok = true;
    let mut parked = 0u32;
    for i in 0..ROUNDS {
        let mut first = true;
        let got = poll_fn(|cx| {
            let p = data.poll_recv(cx);
            if p.is_pending() && first {
                parked += 1;
                first = false;
            }
            p
        })
        .await;
        received_ok &= got == Ok(i);
        ACK.write(got.unwrap_or(u32::MAX));
    }
    let producer_ok = done.recv().await == Ok(true);
    // Nothing left over.
    let empty = poll_fn(|cx| Poll::Ready(data.poll_recv(cx).is_pending())).await;
    ensure!(received_ok);
    ensure!(producer_ok);
    ensure!(parked == ROUNDS);
    ensure!(empty);
    ensure!(DATA.writes() == ROUNDS as u64 && ACK.writes() == ROUNDS as u64);
    true
}

// ---------------------------------------------------------------- outbound

/// Route 0: a `Ring` with a static topic.
static OUT_RING: Record<Cs, Ring<u16, 8>, 1> = Record::new("fw/out/ring");
/// Route 1: a `Latest` whose topic is written from the value (`id`, `temp`).
static OUT_TEMP: Record<Cs, Latest<(u8, i16)>, 1> = Record::new("fw/out/temp");
/// Route 2: a `Ring` whose largest values do not fit the payload scratch.
static OUT_COUNT: Record<Cs, Ring<u64, 4>, 1> = Record::new("fw/out/count");
/// One readiness bit per route; the transport (main task) parks on it.
static READY: Readiness<1> = Readiness::new();
/// Acknowledgements from the transport to the producer, one per round.
static OUT_ACK: Record<Cs, Mailbox<u32>, 1> = Record::new("fw/out/ack");
/// The route producer's verdict.
static OUT_DONE: Record<Cs, Latest<bool>, 1> = Record::new("fw/out/done");
/// Shared encode scratch: a `u64` above 2^56 needs 9 or 10 bytes.
const OUT_PAYLOAD: usize = 8;

/// One write of the producer.
#[derive(Clone, Copy)]
enum Put {
    Ring(u16),
    Temp(u8, i16),
    Count(u64),
}

/// One producer round: its writes and the one message the transport must
/// pull for them (route, topic, postcard bytes worked out by hand).
struct Round {
    puts: &'static [Put],
    route: usize,
    topic: &'static str,
    payload: &'static [u8],
}

const ROUTE_ROUNDS: &[Round] = &[
    Round {
        puts: &[Put::Ring(300)],
        route: 0,
        topic: "fw/out/ring",
        payload: &[0xac, 0x02],
    },
    // zigzag(-40) = 79
    Round {
        puts: &[Put::Temp(3, -40)],
        route: 1,
        topic: "fw/out/3/temp",
        payload: &[3, 0x4f],
    },
    Round {
        puts: &[Put::Count(42)],
        route: 2,
        topic: "fw/out/count",
        payload: &[42],
    },
    // u64::MAX is 10 bytes: skipped with an encode error; the ring value
    // still goes out.
    Round {
        puts: &[Put::Count(u64::MAX), Put::Ring(7)],
        route: 0,
        topic: "fw/out/ring",
        payload: &[7],
    },
    // zigzag(1000) = 2000 = varint d0 0f
    Round {
        puts: &[Put::Temp(200, 1000)],
        route: 1,
        topic: "fw/out/200/temp",
        payload: &[200, 0xd0, 0x0f],
    },
    // The route that hit the encode error goes on.
    Round {
        puts: &[Put::Count(43)],
        route: 2,
        topic: "fw/out/count",
        payload: &[43],
    },
];

fn put(p: Put) {
    match p {
        Put::Ring(v) => OUT_RING.write(v),
        Put::Temp(id, t) => OUT_TEMP.write((id, t)),
        Put::Count(v) => OUT_COUNT.write(v),
    }
}

/// Every write the outbound records have taken.
fn out_writes() -> u64 {
    OUT_RING.writes() + OUT_TEMP.writes() + OUT_COUNT.writes()
}

#[embassy_executor::task]
async fn route_producer() {
    let mut ok = true;
    match OUT_ACK.subscribe() {
        Ok(mut ack) => {
            for (i, round) in ROUTE_ROUNDS.iter().enumerate() {
                for &p in round.puts {
                    put(p);
                }
                ok &= ack.recv().await == Ok(i as u32);
            }
        }
        Err(_) => ok = false,
    }
    OUT_DONE.write(ok);
}

type OutRoutes<'a> = Routes<'a, &'static Readiness<1>, 1, 3>;

/// `routes.next().await`, counting the polls that returned `Pending`.
async fn pull<'r>(routes: &'r mut OutRoutes<'_>, parked: &mut u32) -> Message<'r> {
    let mut next = pin!(routes.next());
    poll_fn(|cx| {
        let p = next.as_mut().poll(cx);
        if p.is_pending() {
            *parked += 1;
        }
        p
    })
    .await
}

/// Whether `m` is the expected message; prints it if not.
fn is_msg(m: &Message<'_>, route: usize, topic: &str, payload: &[u8]) -> bool {
    let ok = m.route == route && m.topic == topic && m.payload == payload && m.lagged == 0;
    if !ok {
        hprintln!(
            "  got route {} `{}` {:?} lag {}",
            m.route,
            m.topic,
            m.payload,
            m.lagged
        );
        hprintln!("  want route {} `{}` {:?}", route, topic, payload);
    }
    ok
}

/// Three routes pulled with `routes.next().await` from this (transport)
/// task: ready routes are served round-robin; a pull that finds nothing
/// parks and is woken by the producer task's write; a value too large for
/// the payload scratch is skipped and counted while the routes go on.
async fn outbound_routes(spawner: Spawner) -> bool {
    let (Ok(ring), Ok(temp), Ok(count)) = (
        OUT_RING.subscribe(),
        OUT_TEMP.subscribe(),
        OUT_COUNT.subscribe(),
    ) else {
        return false;
    };
    let Ok(mut done) = OUT_DONE.subscribe() else {
        return false;
    };
    let mut l_ring = outbound::Link::new(ring, "fw/out/ring", Postcard);
    let mut l_temp = outbound::Link::new(
        temp,
        Written(|v: &(u8, i16), w: &mut TopicWriter<'_>| write!(w, "fw/out/{}/temp", v.0)),
        Postcard,
    );
    let mut l_count = outbound::Link::new(count, "fw/out/count", Postcard);
    let (mut payload, mut topic) = ([0u8; OUT_PAYLOAD], [0u8; 24]);
    let mut b = OutRoutes::builder(&READY, &mut payload).written_topics(&mut topic);
    b.link(&mut l_ring).link(&mut l_temp).link(&mut l_count);
    let Ok(mut routes) = b.build() else {
        return false;
    };
    ensure!(routes.len() == 3);

    // 1. Everything ready at once: served round-robin from route 0; the
    //    `Latest` route has one value, so it drops out after its turn.
    for v in 1..=3 {
        OUT_RING.write(v);
    }
    OUT_TEMP.write((4, -5));
    OUT_COUNT.write(10);
    OUT_COUNT.write(11);
    let expected: [(usize, &str, &[u8]); 6] = [
        (0, "fw/out/ring", &[1]),
        (1, "fw/out/4/temp", &[4, 9]), // zigzag(-5) = 9
        (2, "fw/out/count", &[10]),
        (0, "fw/out/ring", &[2]),
        (2, "fw/out/count", &[11]),
        (0, "fw/out/ring", &[3]),
    ];
    let mut parked = 0;
    for (route, topic, payload) in expected {
        let m = pull(&mut routes, &mut parked).await;
        ensure!(is_msg(&m, route, topic, payload));
    }
    ensure!(parked == 0);

    // 2. Nothing ready: each pull parks, the producer task runs and its
    //    write wakes this task.
    spawner.spawn(match route_producer() {
        Ok(token) => token,
        Err(_) => return false,
    });
    for (i, round) in ROUTE_ROUNDS.iter().enumerate() {
        let (writes, parked_before) = (out_writes(), parked);
        let m = pull(&mut routes, &mut parked).await;
        ensure!(is_msg(&m, round.route, round.topic, round.payload));
        // Parked exactly once, and the producer wrote in the meantime.
        ensure!(parked == parked_before + 1);
        ensure!(out_writes() == writes + round.puts.len() as u64);
        OUT_ACK.write(i as u32);
    }
    ensure!(done.recv().await == Ok(true));
    // Drained: one more pull would park.
    ensure!(poll_fn(|cx| Poll::Ready(routes.poll_next(cx).is_pending())).await);

    let s = *routes.stats();
    ensure!(s.sent == (expected.len() + ROUTE_ROUNDS.len()) as u32);
    ensure!(s.encode_errors == 1);
    ensure!(s.topic_too_long == 0 && s.topic_invalid == 0 && s.lagged == 0);
    let errors = |i| routes.route(i).map(|r| r.errors());
    ensure!(errors(0) == Some(0) && errors(1) == Some(0) && errors(2) == Some(1));
    ensure!(routes.route(1).map(|r| r.name()) == Some("fw/out/temp"));
    true
}

// ---------------------------------------------------------------- main

#[embassy_executor::main]
async fn main(spawner: Spawner) {
    hprintln!("aimdb-core firmware self-test");
    let Some(p) = cortex_m::Peripherals::take() else {
        hprintln!("FAIL peripherals");
        debug::exit(debug::EXIT_FAILURE);
        return;
    };
    time::init(p.SYST);
    let mut t = Tally::default();
    for &(name, run) in SYNC_CHECKS {
        t.check(name, run());
    }
    t.check("async_recv_ping_pong", async_recv_ping_pong(spawner).await);
    t.check("outbound_routes", outbound_routes(spawner).await);
    t.check("framed_link_state", link::framed_link_state().await);
    t.check("device_app", peer::device_app(spawner).await);

    hprintln!("firmware: {} passed, {} failed", t.passed, t.failed);
    firmware_qemu::exit(if t.failed == 0 {
        debug::EXIT_SUCCESS
    } else {
        debug::EXIT_FAILURE
    })
}

firmware_qemu::handlers!("firmware");
