//! b3_on_target: instructions per operation on the Cortex-M itself.
//!
//! Run under QEMU with `-icount shift=0,sleep=off`: virtual time then
//! advances exactly 1 ns per executed instruction, so SysTick (free-running
//! on the core clock, no interrupt) counts instructions, identically on an
//! idle or a loaded host. Each row runs a warm-up, then [`OPS`] and
//! `2 * OPS` operations; the difference of the two tick counts over `OPS`
//! operations cancels the set-up and the timer reads. A calibration row
//! runs [`spin`] (a two-instruction `subs`/`bne` loop of our own) for `CAL`
//! and `2 * CAL` iterations: `2 * CAL` instructions apart, which gives the
//! ticks per instruction without assuming the board's clock (QEMU's
//! lm3s6965evb runs SysTick at 12.5 MHz, 80 instructions per tick).
//!
//! Output over semihosting, one line per row, raw counts only (the host
//! runner, `aimdb-bench`'s `b3_on_target`, does the arithmetic and the
//! gate):
//!
//! ```text
//! B3CAL <instructions between the two> <ticks for cal> <ticks for 2*cal>
//! B3 <row> <ops> <ticks for ops> <ticks for 2*ops>
//! B3END <rows>
//! ```
//!
//! The MQTT rows run `Mqtt::run` (the device's connector) over an
//! in-memory stream whose other end this binary plays as the broker.
//!
//! The record rows use the demo device's record types with one reader
//! (`STATUS`, `READINGS` here; the device gives its own a second reader
//! slot for remote watches, which costs each write a little more) and the
//! device's `device_app::CMD`; the routing rows mirror b2's host fixtures
//! (8 routes over `Latest<u32>`, the same topics), so the two can be read
//! side by side. The transport's waker is a no-op waker: the parked row
//! counts the readiness hand-over, not an executor's enqueue.
#![no_std]
#![no_main]

use core::fmt::Write as _;
use core::future::{poll_fn, Future};
use core::hint::black_box;
use core::pin::pin;
use core::task::{Context, Poll, Waker};

use aimdb_connectors::framed::frame::{self, Decoder, Event};
use aimdb_connectors::loopback::Pair;
use aimdb_connectors::mqtt::{self, Counters, Mqtt, QoS};
use aimdb_core::codec::{Encode, Postcard};
use aimdb_core::inbound;
use aimdb_core::inbound::{Dispatch, KeyedLink};
use aimdb_core::outbound;
use aimdb_core::outbound::{Routes, TopicWriter, Written};
use aimdb_core::record::{Keyed, Latest, Record, Ring};
use aimdb_core::remote::{Op, Request};
use aimdb_core::sync::Readiness;
use cortex_m_rt::entry;
use cortex_m_semihosting::hprintln;
use device_protocol::{Command, Reading, Status};
use embassy_executor::Executor;
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
use embedded_io_async::{Read, Write};
use firmware_qemu::measure::{calibrate, ready, row, step, value};

/// The record every routing fixture uses (b2's `Rec`, with the firmware's
/// mutex).
type Rec = Record<Cs, Latest<u32>, 1>;
type KeyTable = Keyed<Cs, Latest<u32>, 4, 1>;

static IN_RECS: [Rec; 8] = [const { Record::new("b3/in") }; 8];
static OUT_RECS: [Rec; 8] = [const { Record::new("b3/out") }; 8];
static WRITTEN_REC: Rec = Record::new("b3/written");
static KEYED: [KeyTable; 8] = [const { Keyed::new("b3/fleet") }; 8];
/// The demo's `Ring`, with room for four readers (the upstream figure).
static RING4: Record<Cs, Ring<Reading, { device_app::READINGS_DEPTH }>, 4> =
    Record::new("b3/ring4");
static READY_STATIC: Readiness<1> = Readiness::new();
/// The demo device's status and readings records, with one reader.
static STATUS: Record<Cs, Latest<Status>, 1> = Record::new("status");
static READINGS: Record<Cs, Ring<Reading, { device_app::READINGS_DEPTH }>, 1> =
    Record::new("readings");
/// The MQTT rows: the connector on one end of an in-memory stream, this
/// binary playing the broker on the other.
static MQTT_PAIR: Pair<Cs, 256> = Pair::new();
static MQTT_OUT: Rec = Record::new("b3/mqtt/out");
static MQTT_IN: Rec = Record::new("b3/mqtt/in");
static MQTT_READY: Readiness<1> = Readiness::new();
static MQTT_COUNTERS: Counters = Counters::new();
static READY_WRITTEN: Readiness<1> = Readiness::new();

const EXACT: [&str; 8] = [
    "dev/0000/value",
    "dev/0001/value",
    "dev/0002/value",
    "dev/0003/value",
    "dev/0004/value",
    "dev/0005/value",
    "dev/0006/value",
    "dev/0007/value",
];
const PATTERN_FILTERS: [&str; 8] = [
    "site/0000/+/temp",
    "site/0001/+/temp",
    "site/0002/+/temp",
    "site/0003/+/temp",
    "site/0004/+/temp",
    "site/0005/+/temp",
    "site/0006/+/temp",
    "site/0007/+/temp",
];
const PATTERN_TOPICS: [&str; 8] = [
    "site/0000/room/temp",
    "site/0001/room/temp",
    "site/0002/room/temp",
    "site/0003/room/temp",
    "site/0004/room/temp",
    "site/0005/room/temp",
    "site/0006/room/temp",
    "site/0007/room/temp",
];
const KEYED_FILTERS: [&str; 8] = [
    "fleet/0000/+/v",
    "fleet/0001/+/v",
    "fleet/0002/+/v",
    "fleet/0003/+/v",
    "fleet/0004/+/v",
    "fleet/0005/+/v",
    "fleet/0006/+/v",
    "fleet/0007/+/v",
];
const KEYED_TOPICS: [&str; 8] = [
    "fleet/0000/dev1/v",
    "fleet/0001/dev1/v",
    "fleet/0002/dev1/v",
    "fleet/0003/dev1/v",
    "fleet/0004/dev1/v",
    "fleet/0005/dev1/v",
    "fleet/0006/dev1/v",
    "fleet/0007/dev1/v",
];
const OUT_TOPICS: [&str; 8] = [
    "out/0", "out/1", "out/2", "out/3", "out/4", "out/5", "out/6", "out/7",
];
/// The framed rows' topics, `dev/{k}/value` (11 bytes, as in b2).
const FRAME_TOPICS: [&str; 8] = [
    "dev/0/value",
    "dev/1/value",
    "dev/2/value",
    "dev/3/value",
    "dev/4/value",
    "dev/5/value",
    "dev/6/value",
    "dev/7/value",
];

fn written(v: &u32, w: &mut TopicWriter<'_>) -> core::fmt::Result {
    write!(w, "dev/{}/value", v % 100)
}

#[entry]
fn main() -> ! {
    let Some(p) = cortex_m::Peripherals::take() else {
        fail("peripherals taken")
    };
    firmware_qemu::measure::start(p.SYST);

    let mut payload = [0u8; 8];
    let Ok(n) = Postcard.encode(&0x0101_0101u32, &mut payload) else {
        fail("payload")
    };
    let payload = &payload[..n];

    calibrate();
    records();
    inbound(payload);
    outbound();
    framed(payload);
    remote();
    // The MQTT rows run inside an embassy task: the connector's timers
    // (embassy-time's queue is the executor's) need a task's waker.
    let Some(executor) = cortex_m::singleton!(: Executor = Executor::new()) else {
        fail("executor")
    };
    executor.run(|spawner| match mqtt_task() {
        Ok(t) => spawner.spawn(t),
        Err(_) => fail("mqtt task"),
    })
}

#[embassy_executor::task]
async fn mqtt_task() {
    let waker = poll_fn(|cx| Poll::Ready(cx.waker().clone())).await;
    mqtt_rows(&waker);
    hprintln!("B3END");
    firmware_qemu::exit(cortex_m_semihosting::debug::EXIT_SUCCESS)
}

/// The record paths alone: one write and the read that sees it.
fn records() {
    let Ok(mut status) = STATUS.subscribe() else {
        fail("status reader")
    };
    row("latest_write_read", |i| {
        STATUS.write(Status {
            led: i & 1 == 1,
            interval_ms: 100,
            commands: value(i),
            last_ping: 7,
        });
        let Ok(s) = status.try_recv() else {
            fail("latest value")
        };
        black_box(s);
    });
    drop(status);

    let Ok(mut readings) = READINGS.subscribe() else {
        fail("ring reader")
    };
    row("ring_write_read", |i| {
        READINGS.write(Reading {
            seq: value(i),
            centi_celsius: 2100,
        });
        let Ok(r) = readings.try_recv() else {
            fail("ring value")
        };
        black_box(r);
    });
    drop(readings);

    let Ok(mut cmds) = device_app::CMD.subscribe() else {
        fail("mailbox reader")
    };
    row("mailbox_write_take", |i| {
        device_app::CMD.write(Command::Ping(value(i)));
        let Ok(c) = cmds.try_recv() else {
            fail("mailbox value")
        };
        black_box(c);
    });
    drop(cmds);

    let mut readers = [const { None }; 4];
    for r in readers.iter_mut() {
        *r = RING4.subscribe().ok();
    }
    row("ring_write_read_4_readers", |i| {
        RING4.write(Reading {
            seq: value(i),
            centi_celsius: 2100,
        });
        for r in readers.iter_mut() {
            let Some(Ok(v)) = r.as_mut().map(|r| r.try_recv()) else {
                fail("ring4 value")
            };
            black_box(v);
        }
    });
}

fn inbound(payload: &[u8]) {
    let exact_links: [inbound::Link<'static, Rec, Postcard, u32>; 8] =
        core::array::from_fn(|k| inbound::Link::new(&IN_RECS[k], Postcard));
    let mut b = Dispatch::<8, 26>::builder();
    for (t, l) in EXACT.iter().zip(&exact_links) {
        b.link(t, l);
    }
    let Ok(mut d) = b.build() else {
        fail("exact table")
    };
    row("inbound_dispatch", |i| {
        if d.dispatch(EXACT[i % 8].as_bytes(), payload).is_err() {
            fail("exact hit");
        }
    });

    let mut b = Dispatch::<8, 26>::builder();
    for (t, l) in PATTERN_FILTERS.iter().zip(&exact_links) {
        b.link(t, l);
    }
    let Ok(mut d) = b.build() else {
        fail("pattern table")
    };
    row("inbound_dispatch_pattern", |i| {
        if d.dispatch(PATTERN_TOPICS[i % 8].as_bytes(), payload)
            .is_err()
        {
            fail("pattern hit");
        }
    });

    let keyed_links: [KeyedLink<'static, KeyTable, Postcard, u32>; 8] =
        core::array::from_fn(|k| KeyedLink::new(&KEYED[k], Postcard));
    let mut b = Dispatch::<8, 26>::builder();
    for (t, l) in KEYED_FILTERS.iter().zip(&keyed_links) {
        b.link_keyed(t, 2, l);
    }
    let Ok(mut d) = b.build() else {
        fail("keyed table")
    };
    for t in KEYED_TOPICS {
        if d.dispatch(t.as_bytes(), payload).is_err() {
            fail("claim the known key");
        }
    }
    row("inbound_dispatch_keyed_known", |i| {
        if d.dispatch(KEYED_TOPICS[i % 8].as_bytes(), payload).is_err() {
            fail("known key");
        }
    });
}

/// Runs `f` on a fresh table of 8 static-topic routes over [`OUT_RECS`]
/// with nothing ready (b2's `outbound_static(8)`): each row starts from
/// the same cursor.
fn static_table(f: impl FnOnce(&mut Routes<'_, &'static Readiness<1>, 1, 8>)) {
    let mut links: [_; 8] = core::array::from_fn(|k| {
        let Ok(r) = OUT_RECS[k].subscribe() else {
            fail("out reader")
        };
        outbound::Link::new(r, OUT_TOPICS[k], Postcard)
    });
    let mut scratch = [0x5au8; 64];
    let mut b = Routes::<_, 1, 8>::builder(&READY_STATIC, &mut scratch);
    for l in links.iter_mut() {
        b.link(l);
    }
    let Ok(mut routes) = b.build() else {
        fail("outbound table")
    };
    // The build marks every route ready once.
    let mut cx = Context::from_waker(Waker::noop());
    while routes.poll_next(&mut cx).is_ready() {}
    f(&mut routes);
}

fn outbound() {
    static_table(|routes| {
        row("outbound_next_static_topic", |i| {
            OUT_RECS[0].write(value(i));
            let m = ready(routes.next());
            if m.route != 0 {
                fail("route 0");
            }
            black_box(m.payload);
        })
    });
    static_table(|routes| {
        row("outbound_next_round_robin", |i| {
            if i % 8 == 0 {
                for (k, r) in OUT_RECS.iter().enumerate() {
                    r.write(value(i + k));
                }
            }
            let m = ready(routes.next());
            if m.route != i % 8 {
                fail("served in rotation");
            }
            black_box(m.payload);
        })
    });
    static_table(|routes| {
        row("outbound_next_parked", |i| {
            let mut cx = Context::from_waker(Waker::noop());
            let mut pull = pin!(routes.next());
            if pull.as_mut().poll(&mut cx).is_ready() {
                fail("parks");
            }
            OUT_RECS[3].write(value(i));
            let Poll::Ready(m) = pull.as_mut().poll(&mut cx) else {
                fail("ready after the wake")
            };
            if m.route != 3 {
                fail("route 3");
            }
            black_box(m.payload);
        })
    });

    type WrittenFn = fn(&u32, &mut TopicWriter<'_>) -> core::fmt::Result;
    let Ok(r) = WRITTEN_REC.subscribe() else {
        fail("written reader")
    };
    let mut link = outbound::Link::new(r, Written(written as WrittenFn), Postcard);
    let (mut scratch, mut topic) = ([0x5au8; 64], [0x5au8; 64]);
    let mut b = Routes::<_, 1, 1>::builder(&READY_WRITTEN, &mut scratch).written_topics(&mut topic);
    b.link(&mut link);
    let Ok(mut routes) = b.build() else {
        fail("written table")
    };
    row("outbound_next_written_topic", |i| {
        WRITTEN_REC.write(value(i));
        let m = ready(routes.next());
        if !m.topic.starts_with("dev/") {
            fail("written topic");
        }
        black_box(m.payload);
    });
}

fn framed(payload: &[u8]) {
    let mut out = [0x5au8; 64];
    row("framed_encode", |i| {
        let Ok(n) = frame::encode(FRAME_TOPICS[i % 8], payload, &mut out) else {
            fail("fits")
        };
        black_box(&out[..n]);
    });

    let mut frames = [([0u8; 32], 0usize); 8];
    for (k, (buf, len)) in frames.iter_mut().enumerate() {
        let Ok(n) = frame::encode(FRAME_TOPICS[k], payload, buf) else {
            fail("fits")
        };
        *len = n;
    }
    let mut decoder = Decoder::<64>::new();
    row("framed_decode", |i| {
        let (buf, len) = &frames[i % 8];
        match decoder.push(&buf[..*len]) {
            Event::Frame(f, n) if n == *len => {
                black_box(f);
            }
            _ => fail("expected one whole frame"),
        }
    });
}

/// The device's remote-access responder on its own description table: a
/// request taken from the slot, decoded and run, and its answer encoded,
/// which is what the connector's pull of the answer route does.
fn remote() {
    let answers = device_app::REMOTE.answers();
    let request = |op: Op<'_>| {
        let mut buf = [0u8; 64];
        let Ok(bytes) = postcard::to_slice(&Request { id: 7, op }, &mut buf) else {
            fail("request fits")
        };
        let Ok(v) = heapless::Vec::<u8, 64>::from_slice(bytes) else {
            fail("request fits the slot")
        };
        v
    };
    // A value to get (the record rows above use records of their own).
    device_app::READINGS.write(Reading {
        seq: 1,
        centi_celsius: 2100,
    });
    let get = request(Op::Get { record: "readings" });
    let describe = request(Op::Describe { record: "readings" });
    let mut out = [0u8; 192];
    for (name, r) in [("remote_get", &get), ("remote_describe", &describe)] {
        row(name, |_| {
            let job = device_app::REMOTE.run_request(r);
            let Ok(n) = answers.encode(&job, &mut out) else {
                fail("answer fits")
            };
            black_box(&out[..n]);
        });
    }
}

/// The MQTT connector (`Mqtt::run`, as the device runs it) over an
/// in-memory stream, its future polled by hand: a record write published
/// at QoS 0, and a QoS 0 PUBLISH dispatched into a record. Keep-alive and
/// the acknowledgement timeout are off and the time driver never ticks, so
/// no timer fires and every count repeats exactly. `waker` is the
/// calling task's (the connector's timers register with it).
fn mqtt_rows(waker: &Waker) {
    const IN_TOPIC: &[u8; 5] = b"b3/in";
    let (client_rx, client_tx) = MQTT_PAIR.a();
    let (mut broker_rx, mut broker_tx) = MQTT_PAIR.b();
    let in_link: inbound::Link<'static, Rec, Postcard, u32> =
        inbound::Link::new(&MQTT_IN, Postcard);
    let mut b = Dispatch::<1, 4>::builder();
    b.link("b3/in", &in_link);
    let Ok(mut inbound) = b.build() else {
        fail("mqtt inbound table")
    };
    let Ok(r) = MQTT_OUT.subscribe() else {
        fail("mqtt out reader")
    };
    let mut out = outbound::Link::new(r, "b3/out", Postcard).qos(QoS::AtMostOnce);
    let mut scratch = [0x5au8; 32];
    let mut b = Routes::<_, 1, 1>::builder(&MQTT_READY, &mut scratch);
    b.link(&mut out);
    let Ok(mut outbound) = b.build() else {
        fail("mqtt outbound table")
    };
    let Ok(mut received) = MQTT_IN.subscribe() else {
        fail("mqtt in reader")
    };
    let mut c = mqtt::Config::new("b3");
    c.keep_alive = None;
    c.ack_timeout = None;
    c.subscribe_qos = QoS::AtMostOnce;
    let (mut rx, mut tx) = ([0u8; 256], [0u8; 512]);
    let connect = (client_rx, client_tx);
    let clock = aimdb_connectors::clock::EmbassyClock;
    let parts = mqtt::Parts {
        connect,
        clock,
        rx: &mut rx,
        tx: &mut tx,
        counters: &MQTT_COUNTERS,
    };
    let Ok(mut m) = Mqtt::new(c, parts) else {
        fail("mqtt config")
    };
    let mut run = pin!(m.run(&mut inbound, &mut outbound));

    // The handshake, broker side: CONNACK, then SUBACK for its packet id.
    let mut buf = [0u8; 64];
    for _ in 0..8 {
        step(run.as_mut(), waker);
        while !MQTT_PAIR.a_to_b().is_empty() {
            let Ok(n) = ready(broker_rx.read(&mut buf)) else {
                fail("broker read")
            };
            // MQTT 5 CONNACK (no session, success) or SUBACK (granted QoS 0).
            let connack = [0x20, 0x03, 0x00, 0x00, 0x00, 0x00];
            let suback = [0x90, 0x04, buf[2], buf[3], 0x00, 0x00];
            let reply = match buf[0] & 0xf0 {
                0x10 => &connack[..5],
                0x80 if n >= 4 => &suback[..],
                _ => fail("unexpected packet in the handshake"),
            };
            if ready(broker_tx.write(reply)) != Ok(reply.len()) {
                fail("broker write");
            }
        }
        if MQTT_COUNTERS.is_connected() {
            break;
        }
    }
    if !MQTT_COUNTERS.is_connected() {
        fail("mqtt handshake");
    }

    row("mqtt_publish", |i| {
        MQTT_OUT.write(value(i));
        step(run.as_mut(), waker);
        let Ok(n) = ready(broker_rx.read(&mut buf)) else {
            fail("broker read")
        };
        black_box(&buf[..n]);
    });

    // PUBLISH, QoS 0: topic b3/in, no properties, the postcard of value(k).
    let mut packets = [[0u8; 12]; 8];
    for (k, p) in packets.iter_mut().enumerate() {
        let mut payload = [0u8; 2];
        let Ok(body) = Postcard.encode(&value(k), &mut payload) else {
            fail("payload")
        };
        if body != 2 {
            fail("two-byte payload");
        }
        p[..4].copy_from_slice(&[0x30, 10, 0, IN_TOPIC.len() as u8]);
        p[4..9].copy_from_slice(IN_TOPIC);
        p[9] = 0;
        p[10..].copy_from_slice(&payload);
    }
    row("mqtt_receive", |i| {
        if ready(broker_tx.write(&packets[i % 8])) != Ok(12) {
            fail("broker write");
        }
        step(run.as_mut(), waker);
        let Ok(v) = received.try_recv() else {
            fail("dispatched into the record")
        };
        black_box(v);
    });
}

firmware_qemu::handlers!("b3");
