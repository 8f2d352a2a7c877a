//! The framed-stream connector with [`Faulty`] in the path: what survives
//! each fault, per buffer kind (the README's "Failure model" section is
//! written from these tests).
//!
//! Every test runs sender and receiver on one current-thread runtime over
//! the in-memory loopback pair, so the byte stream (and with it every
//! fault's effect) is the same on every run.

mod common;

use std::cell::Cell;
use std::future::Future;

use aimdb_connectors::fault::{Fault, Faulty, Kinds, Plan, Random};
use aimdb_connectors::framed::{frame, Counters, Error, Framed};
use aimdb_connectors::loopback::Pair;
use aimdb_core::codec::Postcard;
use aimdb_core::inbound;
use aimdb_core::inbound::Dispatch;
use aimdb_core::outbound;
use aimdb_core::outbound::Routes;
use aimdb_core::record::{Buffer, Latest, Mailbox, Reader, Record, Ring, TryRecvError};
use aimdb_core::sync::Readiness;
use common::{block_on, dispatch_over, leak, out_links, routes_over};
use embassy_futures::join::join3;
use embassy_sync::blocking_mutex::raw::{CriticalSectionRawMutex as Cs, NoopRawMutex};

type Wire = Pair<NoopRawMutex, 4096>;
type Rec64 = Record<Cs, Ring<u32, 64>, 1>;

fn ready() -> &'static Readiness<1> {
    leak(Readiness::new())
}

/// One connection: runs `send` (the sender's `Framed::run`) and `recv`
/// (the receiver's) until `done()` holds or the sender's run ends; either
/// way the pair is closed, the receiver drains what is buffered and both
/// runs return. Returns the sender's end.
async fn connection(
    wire: &Wire,
    send: impl Future<Output = Error>,
    recv: impl Future<Output = Error>,
    mut done: impl FnMut() -> bool,
) -> Error {
    let ended = Cell::new(false);
    let send = async {
        let e = send.await;
        ended.set(true);
        wire.close();
        e
    };
    let watch = async {
        while !ended.get() && !done() {
            tokio::task::yield_now().await;
        }
        wire.close();
    };
    let (e, _, ()) = join3(send, recv, watch).await;
    e
}

/// The bytes `frame::encode` makes of `("t", postcard(v))`.
fn wire_frame(topic: &str, v: u32) -> Vec<u8> {
    let mut buf = [0u8; 64];
    let p = postcard::to_allocvec(&v).unwrap();
    let n = frame::encode(topic, &p, &mut buf).unwrap();
    buf[..n].to_vec()
}

fn leak_mut<T>(v: T) -> &'static mut T {
    Box::leak(Box::new(v))
}

/// Route `t` from `out` to `inn`: the sender's routes, the receiver's
/// dispatch, and the empty other halves (the sender's dispatch, the
/// receiver's routes).
fn wiring<B: Buffer<Item = u32> + Send>(
    out: &'static Record<Cs, B, 1>,
    inn: &'static Record<Cs, B, 1>,
) -> (
    Routes<'static, &'static Readiness<1>, 1, 1>,
    Dispatch<'static, 1, 1>,
    Dispatch<'static, 1, 1>,
    Routes<'static, &'static Readiness<1>, 1, 1>,
) {
    let link = leak_mut(outbound::Link::new(out.subscribe().unwrap(), "t", Postcard));
    let mut b = Routes::<_, 1, 1>::builder(ready(), leak_mut([0u8; 16]))
        .written_topics(leak_mut([0u8; 16]));
    b.link(link);
    let routes = b.build().unwrap();
    let mut b = Dispatch::<1, 1>::builder();
    b.link("t", leak(inbound::Link::new(inn, Postcard)));
    let dispatch = b.build().unwrap();
    let nothing = Dispatch::<1, 1>::builder().build().unwrap();
    let none = Routes::<_, 1, 1>::builder(ready(), &mut [])
        .build()
        .unwrap();
    (routes, dispatch, nothing, none)
}

/// One route, topic `t`, from `out` to `inn` (both `Ring<u32, 64>`)
/// through a plan applied on the sending side (`on_write`) or the
/// receiving side: `before()` runs once the route is set up, then one
/// connection until `done()` holds (see [`connection`]). Returns the
/// receiver's counters and the sender's lagged count.
fn one_route(
    out: &'static Rec64,
    inn: &'static Rec64,
    plan: Plan<'_>,
    on_write: bool,
    before: impl FnOnce(),
    done: impl FnMut() -> bool,
) -> (Counters, u64) {
    let (mut routes, mut dispatch, mut nothing, mut none) = wiring(out, inn);
    before();
    let (a_stats, b_stats) = (Counters::new(), Counters::new());
    let (mut a, mut b) = (
        Framed::<64, 256>::with_sizes(&a_stats),
        Framed::<64, 256>::with_sizes(&b_stats),
    );
    let wire = Wire::new();
    let ((a_rx, a_tx), (b_rx, b_tx)) = (wire.a(), wire.b());
    block_on(async {
        let end = if on_write {
            let send = a.run(a_rx, Faulty::new(a_tx, plan), &mut nothing, &mut routes);
            let recv = b.run(b_rx, b_tx, &mut dispatch, &mut none);
            connection(&wire, send, recv, done).await
        } else {
            let send = a.run(a_rx, a_tx, &mut nothing, &mut routes);
            let recv = b.run(Faulty::new(b_rx, plan), b_tx, &mut dispatch, &mut none);
            connection(&wire, send, recv, done).await
        };
        assert_eq!(end, Error::Closed, "the sender ran until the end");
    });
    (b_stats, routes.stats().lagged)
}

/// The two leaked `Ring<u32, 64>` records of [`one_route`], and a reader
/// of the inbound one.
fn one_route_records() -> (
    &'static Rec64,
    &'static Rec64,
    Reader<'static, Cs, Ring<u32, 64>, 1>,
) {
    let out: &'static Rec64 = leak(Record::new("out"));
    let inn: &'static Rec64 = leak(Record::new("in"));
    (out, inn, inn.subscribe().unwrap())
}

/// Sends `0..COUNT` on topic `t` through a plan applied on the sending
/// side (`on_write`) or the receiving side, and returns what arrived and
/// the receiver's counters.
fn one_route_through(plan: Plan<'_>, on_write: bool, count: u32) -> (Vec<u32>, Counters) {
    let (out, inn, mut reader) = one_route_records();
    let mut got = Vec::new();
    let write_all = || {
        for v in 0..count {
            out.write(v);
        }
    };
    // The last frame is never damaged by the plans used here: once it
    // arrived, everything that will arrive has.
    let done = || {
        while let Ok(v) = reader.try_recv() {
            got.push(v);
        }
        got.last() == Some(&(count - 1))
    };
    let (b_stats, _) = one_route(out, inn, plan, on_write, write_all, done);
    while let Ok(v) = reader.try_recv() {
        got.push(v);
    }
    (got, b_stats)
}

#[test]
fn each_kind_of_damage_costs_only_the_frames_it_touches() {
    const COUNT: u32 = 40;
    // Where each frame starts on the wire (batching does not change the
    // bytes: frames are written back to back).
    let mut at = Vec::new();
    let mut off = 0u64;
    for v in 0..COUNT {
        at.push(off);
        off += wire_frame("t", v).len() as u64;
    }
    let faults = [
        // Frame 3 cut short: its delimiter still comes.
        Fault::Truncate { at: at[3] + 1 },
        // Frame 5 loses its delimiter: 5 and 6 arrive as one bad frame.
        Fault::Drop {
            at: at[6] - 1,
            len: 1,
        },
        // Frame 8 arrives twice.
        Fault::Duplicate {
            at: at[8],
            len: (at[9] - at[8]) as u32,
        },
        // Frame 10's topic byte `t` becomes `u`: an unknown topic.
        Fault::Corrupt {
            at: at[10] + 2,
            xor: 1,
        },
        // From the middle of frame 12 into frame 13.
        Fault::Drop {
            at: at[12] + 2,
            len: 5,
        },
        // A stall changes nothing.
        Fault::Delay {
            at: at[15] + 1,
            polls: 5,
        },
    ];
    let mut want: Vec<u32> = (0..COUNT)
        .filter(|v| ![3, 5, 6, 10, 12, 13].contains(v))
        .collect();
    want.insert(want.iter().position(|&v| v == 8).unwrap(), 8);

    for on_write in [true, false] {
        for split in [0, 1, 4] {
            let plan = Plan::new().script(&faults).split(split);
            let (got, stats) = one_route_through(plan, on_write, COUNT);
            let s = stats.snapshot();
            let ctx = format!("on_write {on_write} split {split}: {s:?}");
            assert_eq!(got, want, "{ctx}");
            assert_eq!(s.rejected, 1, "the unknown topic: {ctx}");
            assert_eq!(s.received - s.rejected, want.len() as u32, "{ctx}");
            assert_eq!(s.cobs_errors, 2, "cut short, cut across: {ctx}");
            assert_eq!(s.malformed, 1, "two frames glued: {ctx}");
            assert_eq!(s.errors_in(), 4, "{ctx}");
        }
    }
}

#[test]
fn a_corrupted_payload_byte_that_keeps_the_framing_is_not_detected() {
    // COBS and postcard carry no checksum: this is the documented limit.
    let at = (0..17u32)
        .map(|v| wire_frame("t", v).len() as u64)
        .sum::<u64>();
    // Frame 17 is [5, 1, 't', 1, 17, 0]: byte 4 is the value.
    let faults = [Fault::Corrupt {
        at: at + 4,
        xor: 0x40,
    }];
    let (got, stats) = one_route_through(Plan::new().script(&faults), true, 20);
    let mut want: Vec<u32> = (0..20).collect();
    want[17] = 17 ^ 0x40;
    assert_eq!(got, want);
    assert_eq!(stats.snapshot().errors_in(), 0);
}

#[test]
fn random_damage_never_stops_the_connector_and_it_resynchronises() {
    const COUNT: u32 = 3000;
    let clean_from = (0..COUNT - 100)
        .map(|v| wire_frame("t", v).len() as u64)
        .sum::<u64>();
    for seed in [1, 2, 3] {
        let plan = Plan::new()
            .random(Random {
                seed,
                mean_gap: 40,
                max_len: 12,
                kinds: Kinds::DROP | Kinds::TRUNCATE | Kinds::DUPLICATE | Kinds::DELAY,
                end: clean_from,
            })
            .split_random(16, seed);
        for on_write in [true, false] {
            let (got, stats) = one_route_through_in_rounds(plan, on_write, COUNT);
            let s = stats.snapshot();
            let ctx = format!("seed {seed} on_write {on_write}: {s:?}");
            // Resynchronised: everything after the damage arrived, in
            // order (the last faults may reach 12 bytes into the clean
            // part, so the last 90 frames are checked).
            assert!(
                got.ends_with(&(COUNT - 90..COUNT).collect::<Vec<_>>()),
                "{ctx}"
            );
            // Damage loses frames, or repeats them; with no checksum, a
            // damaged frame that still decodes is delivered as whatever it
            // decodes to (see the corruption test), so only bounds hold.
            assert!(got.iter().all(|&v| v < COUNT), "{ctx}");
            assert!(got.len() < COUNT as usize + 200, "{ctx}");
            assert!(s.errors_in() > 20, "the plan did damage: {ctx}");
            assert_eq!((s.received - s.rejected) as usize, got.len(), "{ctx}");
        }
    }
}

/// As [`one_route_through`], with the values written while the connector
/// runs (one per yield), so that a Ring of 64 holds them.
fn one_route_through_in_rounds(plan: Plan<'_>, on_write: bool, count: u32) -> (Vec<u32>, Counters) {
    let (out, inn, mut reader) = one_route_records();
    let mut got = Vec::new();
    let written = Cell::new(0u32);
    let done = || {
        // One value per poll of the watcher: the connector keeps up.
        if written.get() < count {
            out.write(written.get());
            written.set(written.get() + 1);
        }
        loop {
            match reader.try_recv() {
                Ok(v) => got.push(v),
                Err(TryRecvError::Empty) => break,
                Err(e) => panic!("the receiving Ring lagged: {e}"),
            }
        }
        got.last() == Some(&(count - 1))
    };
    let (b_stats, lagged) = one_route(out, inn, plan, on_write, || {}, done);
    assert_eq!(lagged, 0, "the sender's Ring kept up");
    (got, b_stats)
}

/// Ring routes across many broken connections, each closed by the fault
/// transport at a different byte (most of them inside a frame): every
/// value arrives exactly once, in order.
#[test]
fn ring_values_survive_connections_closed_mid_frame_exactly_once_in_order() {
    const ROUTES: usize = 8;
    const ROUNDS: u32 = 300;
    const PER_CONNECTION: u32 = 7;
    let outs: Vec<&'static Record<Cs, Ring<u32, 64>, 1>> =
        (0..ROUTES).map(|_| leak(Record::new("out"))).collect();
    let inns: Vec<&'static Record<Cs, Ring<u32, 64>, 1>> =
        (0..ROUTES).map(|_| leak(Record::new("in"))).collect();
    let topics: Vec<String> = (0..ROUTES).map(|i| format!("ring/{i}")).collect();
    let mut links = out_links(&outs, &topics);
    let (mut payload, mut topic) = ([0u8; 16], [0u8; 16]);
    let mut routes = routes_over::<_, 1, ROUTES>(ready(), &mut payload, &mut topic, &mut links);
    let in_links: Vec<_> = inns
        .iter()
        .map(|r| inbound::Link::new(*r, Postcard))
        .collect();
    let mut dispatch = dispatch_over::<ROUTES, 4>(&topics, &in_links);
    let mut nothing = Dispatch::<1, 1>::builder().build().unwrap();
    let mut none = Routes::<_, 1, 1>::builder(ready(), &mut [])
        .build()
        .unwrap();
    let mut readers: Vec<_> = inns.iter().map(|r| r.subscribe().unwrap()).collect();

    let (a_stats, b_stats) = (Counters::new(), Counters::new());
    // A transmit buffer of 40 bytes: batches of a few frames, so closes
    // land in every position of a batch.
    let mut a = Framed::<64, 40>::with_sizes(&a_stats);
    let mut b = Framed::<64, 256>::with_sizes(&b_stats);
    let wire = Wire::new();
    let mut next = [0u32; ROUTES];
    let mut written = 0u32;
    let (mut connections, mut cut_mid_frame, mut closed_by_fault) = (0, 0, 0);
    block_on(async {
        while next.iter().any(|&n| n < ROUNDS) {
            // New values once the last ones are all through (the Rings
            // hold 64: this stays within capacity).
            if next.iter().all(|&n| n == written) {
                let round_end = (written + PER_CONNECTION).min(ROUNDS);
                for v in written..round_end {
                    for r in &outs {
                        r.write(v);
                    }
                }
                written = round_end;
            }
            wire.reopen();
            a.reset();
            b.reset();
            routes.replay_latest();
            // Close after 20..=116 bytes: always past the longest frame
            // plus the resync byte, so every connection makes progress.
            let close = [Fault::Close {
                at: 20 + (connections * 37 % 97) as u64,
            }];
            let ((a_rx, a_tx), (b_rx, b_tx)) = (wire.a(), wire.b());
            let mut tx = Faulty::new(a_tx, Plan::new().script(&close).split(7));
            let send = a.run(a_rx, &mut tx, &mut nothing, &mut routes);
            let recv = b.run(b_rx, b_tx, &mut dispatch, &mut none);
            let mut done = || {
                for (i, r) in readers.iter_mut().enumerate() {
                    loop {
                        match r.try_recv() {
                            Ok(v) => {
                                assert_eq!(v, next[i], "route {i}: exactly once, in order");
                                next[i] += 1;
                            }
                            Err(TryRecvError::Empty) => break,
                            Err(e) => panic!("route {i}: {e}"),
                        }
                    }
                }
                next.iter().all(|&n| n == written)
            };
            let end = connection(&wire, send, recv, &mut done).await;
            // What the receiver took in after the watcher's last look.
            done();
            connections += 1;
            if tx.injected().closed {
                closed_by_fault += 1;
                assert_eq!(end, Error::Write(embedded_io_async::ErrorKind::BrokenPipe));
                if a.unsent_frames() > 0 {
                    cut_mid_frame += 1;
                }
            }
            assert!(connections < 10_000, "no progress");
        }
    });
    for (i, r) in readers.iter_mut().enumerate() {
        assert_eq!(
            r.try_recv(),
            Err(TryRecvError::Empty),
            "route {i}: extra value"
        );
    }
    assert_eq!(routes.stats().lagged, 0);
    assert!(closed_by_fault > 20, "{closed_by_fault} of {connections}");
    assert!(cut_mid_frame > 10, "{cut_mid_frame} of {closed_by_fault}");
    let total = ROUTES as u32 * ROUNDS;
    assert_eq!(b_stats.snapshot().received, total);
    // Every fragment of a frame cut off was dropped by the receiver's
    // reset (none reached dispatch as a bad frame).
    assert_eq!(b_stats.snapshot().errors_in(), 0);
}

/// A frame cut off mid-way is re-sent after a lone delimiter, so a peer
/// that did *not* reset its decoder (a UART with no notion of a
/// connection) loses only the fragment, counted as one bad frame.
#[test]
fn a_peer_that_keeps_the_fragment_drops_it_and_gets_the_frame_again() {
    let out: &'static Record<Cs, Ring<u32, 8>, 1> = leak(Record::new("out"));
    let inn: &'static Record<Cs, Ring<u32, 8>, 1> = leak(Record::new("in"));
    let (mut routes, mut dispatch, mut nothing, mut none) = wiring(out, inn);
    let mut reader = inn.subscribe().unwrap();
    let (a_stats, b_stats) = (Counters::new(), Counters::new());
    let mut a = Framed::<64, 256>::with_sizes(&a_stats);
    let mut b = Framed::<64, 256>::with_sizes(&b_stats);
    for v in 1..=5 {
        out.write(v);
    }
    // Frames are 6 bytes: close inside the third.
    let close = [Fault::Close { at: 14 }];
    let wire = Wire::new();
    let mut got = Vec::new();
    block_on(async {
        for round in 0..2 {
            wire.reopen();
            // No `b.reset()`: the receiver keeps the fragment.
            let ((a_rx, a_tx), (b_rx, b_tx)) = (wire.a(), wire.b());
            let plan = if round == 0 {
                Plan::new().script(&close)
            } else {
                Plan::new()
            };
            let send = a.run(a_rx, Faulty::new(a_tx, plan), &mut nothing, &mut routes);
            let recv = b.run(b_rx, b_tx, &mut dispatch, &mut none);
            connection(&wire, send, recv, || {
                while let Ok(v) = reader.try_recv() {
                    got.push(v);
                }
                got.len() == 5
            })
            .await;
            if round == 0 {
                assert_eq!(a.unsent_frames(), 3, "frames 3, 4 and 5 wait");
            }
        }
    });
    assert_eq!(got, [1, 2, 3, 4, 5]);
    assert_eq!(a.unsent_frames(), 0);
    let s = b_stats.snapshot();
    assert_eq!((s.received, s.errors_in()), (5, 1), "{s:?}");
    assert_eq!(
        a_stats.snapshot().sent,
        5,
        "a frame counts once, when whole"
    );
}

/// While the transport is down: a `Ring` keeps its last `N` values and
/// reports the exact number lost; `Latest` and `Mailbox` coalesce to the
/// newest value, sent once.
#[test]
fn while_disconnected_ring_reports_exact_lag_and_latest_and_mailbox_coalesce() {
    let ring: &'static Record<Cs, Ring<u32, 8>, 1> = leak(Record::new("ring"));
    let state: &'static Record<Cs, Latest<u32>, 1> = leak(Record::new("state"));
    let cmd: &'static Record<Cs, Mailbox<u32>, 1> = leak(Record::new("cmd"));
    let ring_in: &'static Record<Cs, Ring<u32, 64>, 1> = leak(Record::new("ring-in"));
    let state_in: &'static Record<Cs, Ring<u32, 64>, 1> = leak(Record::new("state-in"));
    let cmd_in: &'static Record<Cs, Ring<u32, 64>, 1> = leak(Record::new("cmd-in"));

    let mut l1 = outbound::Link::new(ring.subscribe().unwrap(), "ring", Postcard);
    let mut l2 = outbound::Link::new(state.subscribe().unwrap(), "state", Postcard);
    let mut l3 = outbound::Link::new(cmd.subscribe().unwrap(), "cmd", Postcard);
    let (mut payload, mut topic) = ([0u8; 16], [0u8; 16]);
    let mut b = Routes::<_, 1, 3>::builder(ready(), &mut payload).written_topics(&mut topic);
    b.link(&mut l1).link(&mut l2).link(&mut l3);
    let mut routes = b.build().unwrap();
    let (i1, i2, i3) = (
        inbound::Link::new(ring_in, Postcard),
        inbound::Link::new(state_in, Postcard),
        inbound::Link::new(cmd_in, Postcard),
    );
    let mut b = Dispatch::<3, 1>::builder();
    b.link("ring", &i1).link("state", &i2).link("cmd", &i3);
    let mut dispatch = b.build().unwrap();
    let mut nothing = Dispatch::<1, 1>::builder().build().unwrap();
    let mut none = Routes::<_, 1, 1>::builder(ready(), &mut [])
        .build()
        .unwrap();
    let (mut r_ring, mut r_state, mut r_cmd) = (
        ring_in.subscribe().unwrap(),
        state_in.subscribe().unwrap(),
        cmd_in.subscribe().unwrap(),
    );
    let (a_stats, b_stats) = (Counters::new(), Counters::new());
    let mut a = Framed::<64, 256>::with_sizes(&a_stats);
    let mut b = Framed::<64, 256>::with_sizes(&b_stats);
    let wire = Wire::new();

    let drain = |r: &mut aimdb_core::record::Reader<'static, Cs, Ring<u32, 64>, 1>| {
        let mut v = Vec::new();
        while let Ok(x) = r.try_recv() {
            v.push(x);
        }
        v
    };
    let mut got = (Vec::new(), Vec::new(), Vec::new());
    block_on(async {
        // Connected: one of each goes through.
        ring.write(0);
        state.write(100);
        cmd.write(1000);
        for phase in 0..2 {
            wire.reopen();
            a.reset();
            b.reset();
            routes.replay_latest();
            let ((a_rx, a_tx), (b_rx, b_tx)) = (wire.a(), wire.b());
            let send = a.run(a_rx, a_tx, &mut nothing, &mut routes);
            let recv = b.run(b_rx, b_tx, &mut dispatch, &mut none);
            let want = if phase == 0 { (1, 1, 1) } else { (9, 2, 2) };
            connection(&wire, send, recv, || {
                got.0.extend(drain(&mut r_ring));
                got.1.extend(drain(&mut r_state));
                got.2.extend(drain(&mut r_cmd));
                (got.0.len(), got.1.len(), got.2.len()) == want
            })
            .await;
            if phase == 0 {
                // Down: 13 Ring values (5 more than it holds), 9 states,
                // 3 commands.
                for v in 1..=13 {
                    ring.write(v);
                }
                for v in 101..=109 {
                    state.write(v);
                }
                for v in 1001..=1003 {
                    cmd.write(v);
                }
            }
        }
    });
    assert_eq!(got.0, [0, 6, 7, 8, 9, 10, 11, 12, 13], "Ring: the newest 8");
    assert_eq!(routes.stats().lagged, 5, "Ring: exactly 5 lost, reported");
    assert_eq!(got.1, [100, 109], "Latest: the newest, once");
    assert_eq!(got.2, [1000, 1003], "Mailbox: the newest, once");
    assert_eq!(b_stats.snapshot().errors_in(), 0);
}
