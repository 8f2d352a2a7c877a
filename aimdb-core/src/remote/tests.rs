//! The responder through the real tables: requests dispatched on a topic,
//! answers pulled from the routes, decoded as a host decodes them.

use std::string::String;
use std::vec::Vec;

use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
use postcard_schema::schema::owned::OwnedNamedType;

use super::proto::{Body, Host, Response};
use super::*;
use crate::connector::{FrameSink, MessageSource};
use crate::inbound::Dispatch;
use crate::outbound::{self, Routes};
use crate::record::{Latest, Mailbox, Ring};
use crate::sync::Readiness;

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, Schema)]
struct Reading {
    seq: u32,
    millideg: i32,
}

const REQ: &str = proto::REQUEST;
const RSP: &str = proto::RESPONSE;

/// An answer as a host decodes it. The tests keep every answer's bytes
/// (leaked) for as long as they run.
type Answer = Response<Body<'static, Host>>;

fn decode_bytes(bytes: Vec<u8>) -> Answer {
    postcard::from_bytes(bytes.leak()).unwrap()
}

fn led_stats(writes: u64, replaced: u64) -> proto::RecordStats<'static> {
    proto::RecordStats {
        name: "led",
        writes,
        replaced,
    }
}

/// A node: three described records, a responder, and the two tables it
/// is linked into. Each test has its own statics (tests run in parallel).
macro_rules! node {
    ($readings:ident, $led:ident, $cmd:ident, $responder:ident, $ready:ident) => {
        // One reader for a route, one for a watch.
        static $readings: Record<Cs, Ring<Reading, 4>, 2> = Record::new("readings");
        static $led: Record<Cs, Latest<bool>, 1> = Record::new("led");
        static $cmd: Record<Cs, Mailbox<u8>, 1> = Record::new("cmd");
        static TABLE: [Description; 3] = [
            Description::of(&$readings).topics(&["dev/readings"]),
            Description::of(&$led).topics(&["dev/led"]).writable(),
            Description::of(&$cmd),
        ];
        static $responder: Responder<Cs, 64> = Responder::new(&TABLE);
        static $ready: Readiness<1> = Readiness::new();
    };
}

/// The node's two tables around `$responder`: requests dispatched on
/// `REQ`, answers pulled from a route on `RSP` with a `$len`-byte buffer.
macro_rules! tables {
    ($responder:ident, $ready:ident, $len:expr, $dispatch:ident, $routes:ident) => {
        let mut b = Dispatch::<2, 2>::builder();
        b.link(REQ, &$responder);
        let mut $dispatch = b.build().unwrap();
        let mut answers = outbound::Link::new($responder.requests(), RSP, $responder.answers());
        let mut payload = [0u8; $len];
        let mut b = Routes::<_, 1, 1>::builder(&$ready, &mut payload);
        b.link(&mut answers);
        let mut $routes = b.build().unwrap();
    };
}

fn request(id: u32, op: Op<'_>) -> Vec<u8> {
    postcard::to_allocvec(&Request { id, op }).unwrap()
}

/// Dispatches `req` and pulls one answer.
fn ask<S: MessageSource + ?Sized>(
    dispatch: &mut impl FrameSink,
    routes: &mut S,
    req: &[u8],
) -> Answer {
    dispatch.dispatch(REQ.as_bytes(), req).unwrap();
    let m = futures_lite_next(routes);
    assert_eq!(m.0, RSP);
    decode_bytes(m.1)
}

/// The next message, polled once (an answer is ready as soon as the
/// request was dispatched).
fn futures_lite_next<S: MessageSource + ?Sized>(routes: &mut S) -> (String, Vec<u8>) {
    let waker = std::task::Waker::noop();
    let mut cx = Context::from_waker(waker);
    match routes.poll_next(&mut cx) {
        Poll::Ready(m) => (m.topic.into(), m.payload.to_vec()),
        Poll::Pending => panic!("no answer ready"),
    }
}

#[test]
fn lists_describes_gets_and_sets_through_the_tables() {
    node!(READINGS, LED, CMD, RESPONDER, READY);
    tables!(RESPONDER, READY, 256, dispatch, routes);

    // list
    let r = ask(
        &mut dispatch,
        &mut routes,
        &request(1, Op::List { from: 0 }),
    );
    assert_eq!(r.id, 1);
    let Ok(Body::List {
        total,
        from,
        entries,
    }) = r.result
    else {
        panic!("{r:?}")
    };
    assert_eq!((total, from), (3, 0));
    let names: Vec<_> = entries.iter().map(|e| e.name).collect();
    assert_eq!(names, ["readings", "led", "cmd"]);
    assert_eq!(entries[0].kind, Kind::Ring);
    assert_eq!(entries[0].capacity, 4);
    assert!(!entries[0].writable && entries[1].writable);
    assert_eq!(entries[0].schema_hash, schema_hash::<Reading>());
    assert_ne!(entries[0].schema_hash, entries[1].schema_hash);

    // describe: the schema a host decodes values with
    let r = ask(
        &mut dispatch,
        &mut routes,
        &request(2, Op::Describe { record: "readings" }),
    );
    let Ok(Body::Describe(info)) = r.result else {
        panic!("{r:?}")
    };
    assert_eq!(info.topics, ["dev/readings"]);
    assert_eq!(info.schema, OwnedNamedType::from(Reading::SCHEMA));

    // get: a Ring's newest value, and its write count
    for seq in 0..6 {
        READINGS.write(Reading { seq, millideg: -5 });
    }
    let r = ask(
        &mut dispatch,
        &mut routes,
        &request(3, Op::Get { record: "readings" }),
    );
    let Ok(Body::Value { writes, value }) = r.result else {
        panic!("{r:?}")
    };
    assert_eq!(writes, 6);
    let v: Reading = postcard::from_bytes(value.unwrap()).unwrap();
    assert_eq!(
        v,
        Reading {
            seq: 5,
            millideg: -5
        }
    );

    // get of a record with no value yet
    let r = ask(
        &mut dispatch,
        &mut routes,
        &request(4, Op::Get { record: "led" }),
    );
    assert_eq!(
        r.result,
        Ok(Body::Value {
            writes: 0,
            value: None
        })
    );

    // set on a writable record
    let on = postcard::to_allocvec(&true).unwrap();
    let r = ask(
        &mut dispatch,
        &mut routes,
        &request(
            5,
            Op::Set {
                record: "led",
                value: &on,
            },
        ),
    );
    assert_eq!(r.result, Ok(Body::Written));
    assert_eq!(LED.latest(), Some(true));

    // stats
    let r = ask(
        &mut dispatch,
        &mut routes,
        &request(6, Op::Stats { from: 1 }),
    );
    let Ok(Body::Stats { entries, .. }) = r.result else {
        panic!("{r:?}")
    };
    assert_eq!(entries[0], led_stats(1, 0));
}

#[test]
fn a_read_only_record_refuses_set_and_keeps_its_value() {
    node!(READINGS, LED, CMD, RESPONDER, READY);
    tables!(RESPONDER, READY, 256, dispatch, routes);

    READINGS.write(Reading {
        seq: 1,
        millideg: 1,
    });
    let forged = postcard::to_allocvec(&Reading {
        seq: 99,
        millideg: 99,
    })
    .unwrap();
    let r = ask(
        &mut dispatch,
        &mut routes,
        &request(
            7,
            Op::Set {
                record: "readings",
                value: &forged,
            },
        ),
    );
    assert_eq!((r.id, r.result), (7, Err(RequestError::NotWritable)));
    assert_eq!(READINGS.writes(), 1);
    assert_eq!(RESPONDER.stats().denied, 1);

    let r = ask(
        &mut dispatch,
        &mut routes,
        &request(8, Op::Get { record: "nope" }),
    );
    assert_eq!(r.result, Err(RequestError::UnknownRecord));
    // A `set` value that is not the record's type changes nothing.
    let r = ask(
        &mut dispatch,
        &mut routes,
        &request(
            9,
            Op::Set {
                record: "led",
                value: &[7],
            },
        ),
    );
    assert_eq!(r.result, Err(RequestError::Malformed));
    assert_eq!(LED.writes(), 0);
}

#[test]
fn a_set_value_with_bytes_left_over_is_malformed_and_writes_nothing() {
    node!(READINGS, LED, CMD, RESPONDER, READY);
    tables!(RESPONDER, READY, 256, dispatch, routes);

    // A `bool` and one byte more (found by the `responder` fuzz target).
    let r = ask(
        &mut dispatch,
        &mut routes,
        &request(
            1,
            Op::Set {
                record: "led",
                value: &[0, 0],
            },
        ),
    );
    assert_eq!((r.id, r.result), (1, Err(RequestError::Malformed)));
    assert_eq!(LED.writes(), 0);
    // A value of another type whose first field reads as the record's
    // (`seq` 1 as `true`): a host with a drifted type is refused, as the
    // inbound link refuses it.
    let reading = postcard::to_allocvec(&Reading {
        seq: 1,
        millideg: 7,
    })
    .unwrap();
    let r = ask(
        &mut dispatch,
        &mut routes,
        &request(
            2,
            Op::Set {
                record: "led",
                value: &reading,
            },
        ),
    );
    assert_eq!(r.result, Err(RequestError::Malformed));
    assert_eq!(LED.writes(), 0);
    // The exact value is still written.
    let r = ask(
        &mut dispatch,
        &mut routes,
        &request(
            3,
            Op::Set {
                record: "led",
                value: &[1],
            },
        ),
    );
    assert_eq!(r.result, Ok(Body::Written));
    assert_eq!(LED.latest(), Some(true));
}

#[test]
fn a_request_with_bytes_left_over_is_malformed_counted_and_not_run() {
    node!(READINGS, LED, CMD, RESPONDER, READY);
    tables!(RESPONDER, READY, 256, dispatch, routes);

    // A whole `set` and one byte more behind it.
    let mut req = request(
        5,
        Op::Set {
            record: "led",
            value: &[1],
        },
    );
    req.push(0);
    let r = ask(&mut dispatch, &mut routes, &req);
    assert_eq!((r.id, r.result), (5, Err(RequestError::Malformed)));
    assert_eq!(LED.writes(), 0);
    assert_eq!(RESPONDER.stats().malformed, 1);
    // Without the extra byte it runs.
    req.pop();
    let r = ask(&mut dispatch, &mut routes, &req);
    assert_eq!((r.id, r.result), (5, Ok(Body::Written)));
    assert_eq!(LED.latest(), Some(true));
    assert_eq!(RESPONDER.stats().malformed, 1);
}

/// Dispatches `req`, then pulls answers until the one with `id` came;
/// every answer pulled, in order.
fn ask_collecting<S: MessageSource + ?Sized>(
    dispatch: &mut impl FrameSink,
    routes: &mut S,
    req: &[u8],
    id: u32,
) -> Vec<Answer> {
    dispatch.dispatch(REQ.as_bytes(), req).unwrap();
    let mut got = Vec::new();
    loop {
        let r = decode(&futures_lite_next(routes));
        let done = r.id == id;
        got.push(r);
        if done {
            return got;
        }
    }
}

#[test]
fn every_end_notice_is_sent_however_many_wait() {
    node!(READINGS, LED, CMD, RESPONDER, READY);
    tables!(RESPONDER, READY, 256, dispatch, routes);

    // Each round starts a watch and stops it from another id, so the
    // watch's own stream is told its end too; one round more than the
    // responder has watches.
    let mut answers = Vec::new();
    let rounds = WATCHES as u32 + 1;
    for k in 0..rounds {
        let (watch, stop) = (10 + 2 * k, 11 + 2 * k);
        let op = Op::Watch {
            record: "led",
            credit: 5,
        };
        answers.extend(ask_collecting(
            &mut dispatch,
            &mut routes,
            &request(watch, op),
            watch,
        ));
        let op = Op::Unwatch { record: "led" };
        answers.extend(ask_collecting(
            &mut dispatch,
            &mut routes,
            &request(stop, op),
            stop,
        ));
    }
    // Whatever is still due.
    let waker = std::task::Waker::noop();
    while let Poll::Ready(m) = routes.poll_next(&mut Context::from_waker(waker)) {
        answers.push(decode(&(m.topic.into(), m.payload.to_vec())));
    }
    let mut ended: Vec<u32> = answers
        .iter()
        .filter(|r| r.result == Ok(Body::Ended) && r.id % 2 == 0)
        .map(|r| r.id)
        .collect();
    ended.sort_unstable();
    let want: Vec<u32> = (0..rounds).map(|k| 10 + 2 * k).collect();
    assert_eq!(ended, want, "every watch's stream heard its end");
}

#[test]
fn a_renewed_watch_does_not_send_its_value_again() {
    node!(READINGS, LED, CMD, RESPONDER, READY);
    tables!(RESPONDER, READY, 256, dispatch, routes);

    LED.write(true);
    let watch = |id| {
        request(
            id,
            Op::Watch {
                record: "led",
                credit: 5,
            },
        )
    };
    let r = ask(&mut dispatch, &mut routes, &watch(1));
    assert_eq!(
        r.result,
        Ok(Body::Value {
            writes: 1,
            value: Some(&[1][..])
        })
    );
    // Renewed: acknowledged under the new id, no value.
    let r = ask(&mut dispatch, &mut routes, &watch(2));
    assert_eq!((r.id, r.result), (2, Ok(Body::Renewed)));
    let waker = std::task::Waker::noop();
    assert!(routes
        .poll_next(&mut Context::from_waker(waker))
        .is_pending());
    assert_eq!(RESPONDER.stats().updates, 0);
    // The next write goes out under the new id.
    LED.write(false);
    let r = decode(&futures_lite_next(&mut routes));
    assert_eq!((r.id, value_of_led(&r)), (2, (2, Some(false))));
}

fn value_of_led(r: &Answer) -> (u64, Option<bool>) {
    match &r.result {
        Ok(Body::Value { writes, value }) => {
            (*writes, value.map(|v| postcard::from_bytes(v).unwrap()))
        }
        other => panic!("not a value: {other:?}"),
    }
}

#[test]
fn a_small_answer_buffer_still_carries_a_small_value() {
    node!(READINGS, LED, CMD, RESPONDER, READY);
    // Room for the answer (7 bytes with this id and write count), far
    // less than the largest header.
    tables!(RESPONDER, READY, 12, dispatch, routes);

    // No value yet: said so.
    let r = ask(
        &mut dispatch,
        &mut routes,
        &request(3, Op::Get { record: "cmd" }),
    );
    assert_eq!(
        (r.id, r.result),
        (
            3,
            Ok(Body::Value {
                writes: 0,
                value: None
            })
        )
    );
    LED.write(true);
    let r = ask(
        &mut dispatch,
        &mut routes,
        &request(1, Op::Get { record: "led" }),
    );
    assert_eq!((r.id, value_of_led(&r)), (1, (1, Some(true))));
    // A value that does not fit is still refused, typed.
    for seq in 0..3 {
        READINGS.write(Reading {
            seq: u32::MAX - seq,
            millideg: i32::MIN,
        });
    }
    let r = ask(
        &mut dispatch,
        &mut routes,
        &request(2, Op::Get { record: "readings" }),
    );
    assert_eq!((r.id, r.result), (2, Err(RequestError::TooLarge)));
}

#[test]
fn the_value_header_is_the_derived_encoding_s_start() {
    for (id, writes, len) in [
        (0, 0, 0),
        (1, 1, 1),
        (300, 1 << 40, 200),
        (u32::MAX, u64::MAX, 70_000),
    ] {
        let value = std::vec![0xA5u8; len];
        let whole = postcard::to_allocvec(&Response::<Body<'_, proto::Node>> {
            id,
            result: Ok(Body::Value {
                writes,
                value: Some(&value),
            }),
        })
        .unwrap();
        let mut buf = [0u8; 23];
        let h = proto::ValueHeader { id, writes, len }
            .encode(&mut buf)
            .unwrap();
        let header = buf[..h].to_vec();
        assert_eq!(&whole[..header.len()], &header[..]);
        // One byte short: no header.
        let short = proto::ValueHeader { id, writes, len }.encode(&mut buf[..h - 1]);
        assert_eq!(short, None);
        assert_eq!(&whole[header.len()..], &value[..]);
        // The room kept for it is exact for a value of the buffer's size.
        assert_eq!(proto::ValueHeader::room(id, writes, len), header.len());
    }
}

#[test]
fn malformed_busy_and_oversized_requests_get_typed_answers() {
    node!(READINGS, LED, CMD, RESPONDER, READY);
    tables!(RESPONDER, READY, 256, dispatch, routes);

    // id 12, then an op tag no version has
    let r = ask(&mut dispatch, &mut routes, &[12, 0x7f]);
    assert_eq!((r.id, r.result), (12, Err(RequestError::Malformed)));
    assert_eq!(RESPONDER.stats().malformed, 1);

    // Two requests before the connector pulls: the second is busy.
    dispatch
        .dispatch(REQ.as_bytes(), &request(20, Op::List { from: 0 }))
        .unwrap();
    dispatch
        .dispatch(REQ.as_bytes(), &request(21, Op::List { from: 0 }))
        .unwrap();
    let first = decode_bytes(futures_lite_next(&mut routes).1);
    let second = decode_bytes(futures_lite_next(&mut routes).1);
    let mut got = [
        (first.id, first.result.is_ok()),
        (second.id, second.result.is_ok()),
    ];
    got.sort();
    assert_eq!(got, [(20, true), (21, false)]);
    assert_eq!(RESPONDER.stats().busy, 1);

    // Over the responder's 64 bytes: refused by the table, nothing queued.
    let big = [0u8; 65];
    assert_eq!(
        dispatch.dispatch(REQ.as_bytes(), &big),
        Err(DispatchError::PayloadTooLarge)
    );
    let waker = std::task::Waker::noop();
    assert!(routes
        .poll_next(&mut Context::from_waker(waker))
        .is_pending());
}

#[test]
fn a_page_shrinks_to_the_answer_buffer_and_too_large_is_typed() {
    node!(READINGS, LED, CMD, RESPONDER, READY);
    // Room for one or two entries, not three; and not for a description.
    tables!(RESPONDER, READY, 48, dispatch, routes);

    let r = ask(
        &mut dispatch,
        &mut routes,
        &request(1, Op::List { from: 0 }),
    );
    let Ok(Body::List { total, entries, .. }) = r.result else {
        panic!("{r:?}")
    };
    assert_eq!(total, 3);
    assert!(!entries.is_empty() && entries.len() < 3, "{entries:?}");
    let r = ask(
        &mut dispatch,
        &mut routes,
        &request(2, Op::Describe { record: "readings" }),
    );
    assert_eq!(r.result, Err(RequestError::TooLarge));
}

/// A waker that records that it was woken.
struct Flag(std::sync::atomic::AtomicBool);

impl std::task::Wake for Flag {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

fn flag() -> (std::sync::Arc<Flag>, std::task::Waker) {
    let f = std::sync::Arc::new(Flag(std::sync::atomic::AtomicBool::new(false)));
    (f.clone(), std::task::Waker::from(f))
}

fn decode(m: &(String, Vec<u8>)) -> Answer {
    assert_eq!(m.0, RSP);
    decode_bytes(m.1.clone())
}

fn value_of(r: &Answer) -> (u64, Option<Reading>) {
    match &r.result {
        Ok(Body::Value { writes, value }) => {
            (*writes, value.map(|v| postcard::from_bytes(v).unwrap()))
        }
        other => panic!("not a value: {other:?}"),
    }
}

#[test]
fn a_watch_sends_the_value_then_each_write_until_its_credit_is_used() {
    node!(READINGS, LED, CMD, RESPONDER, READY);
    tables!(RESPONDER, READY, 256, dispatch, routes);
    let reading = |seq| Reading { seq, millideg: -5 };

    READINGS.write(reading(1));
    let r = ask(
        &mut dispatch,
        &mut routes,
        &request(
            40,
            Op::Watch {
                record: "readings",
                credit: 2,
            },
        ),
    );
    // At once: the current value, under the request's id.
    assert_eq!(r.id, 40);
    assert_eq!(value_of(&r), (1, Some(reading(1))));
    assert_eq!(RESPONDER.watching(), 1);

    // Nothing written: nothing to send, and the route waits for a write.
    let (woken, waker) = flag();
    let mut cx = Context::from_waker(&waker);
    assert!(routes.poll_next(&mut cx).is_pending());
    READINGS.write(reading(2));
    assert!(
        woken.0.load(std::sync::atomic::Ordering::SeqCst),
        "a write wakes the watch"
    );
    let r = decode(&futures_lite_next(&mut routes));
    assert_eq!((r.id, value_of(&r)), (40, (2, Some(reading(2)))));

    // Two writes between pulls: one update, the newest, covering both.
    READINGS.write(reading(3));
    READINGS.write(reading(4));
    let r = decode(&futures_lite_next(&mut routes));
    assert_eq!((r.id, value_of(&r)), (40, (4, Some(reading(4)))));

    // Credit 2 used: the watch ends, says so, and frees its reader slot.
    let r = decode(&futures_lite_next(&mut routes));
    assert_eq!((r.id, r.result), (40, Ok(Body::Ended)));
    assert_eq!(RESPONDER.watching(), 0);
    READINGS.write(reading(5));
    assert!(routes
        .poll_next(&mut Context::from_waker(std::task::Waker::noop()))
        .is_pending());
    let (_a, _b) = (READINGS.subscribe().unwrap(), READINGS.subscribe().unwrap());
    assert_eq!(RESPONDER.stats().updates, 2);
}

#[test]
fn a_watch_is_renewed_stopped_and_ended_by_a_new_link() {
    node!(READINGS, LED, CMD, RESPONDER, READY);
    tables!(RESPONDER, READY, 256, dispatch, routes);

    let watch = |id, credit| {
        request(
            id,
            Op::Watch {
                record: "led",
                credit,
            },
        )
    };
    assert_eq!(ask(&mut dispatch, &mut routes, &watch(1, 1)).id, 1);
    // Renewed before its credit ran out: one watch, the new id.
    assert_eq!(ask(&mut dispatch, &mut routes, &watch(2, 5)).id, 2);
    assert_eq!(RESPONDER.watching(), 1);
    LED.write(true);
    LED.write(false);
    let r = decode(&futures_lite_next(&mut routes));
    assert_eq!(r.id, 2);
    assert!(
        matches!(r.result, Ok(Body::Value { writes: 2, .. })),
        "{r:?}"
    );

    // Unwatch from another request: both ids hear the end.
    let r = ask(
        &mut dispatch,
        &mut routes,
        &request(3, Op::Unwatch { record: "led" }),
    );
    assert_eq!((r.id, r.result), (3, Ok(Body::Ended)));
    let r = decode(&futures_lite_next(&mut routes));
    assert_eq!((r.id, r.result), (2, Ok(Body::Ended)));
    assert_eq!(RESPONDER.watching(), 0);

    // A reconnect (the routes replayed) ends watches without a word.
    ask(&mut dispatch, &mut routes, &watch(4, 5));
    assert_eq!(RESPONDER.watching(), 1);
    routes.replay_latest();
    assert_eq!(RESPONDER.watching(), 0);
    LED.write(true);
    assert!(routes
        .poll_next(&mut Context::from_waker(std::task::Waker::noop()))
        .is_pending());
    // Its slot is free again.
    let _reader = LED.subscribe().unwrap();
}

#[test]
fn a_watch_leaves_commands_to_their_consumer_and_needs_a_free_slot() {
    node!(READINGS, LED, CMD, RESPONDER, READY);
    tables!(RESPONDER, READY, 256, dispatch, routes);

    let watch = |id, record| request(id, Op::Watch { record, credit: 5 });
    // The command record's one slot is the consumer's: not watchable.
    let consumer = CMD.subscribe().unwrap();
    let r = ask(&mut dispatch, &mut routes, &watch(1, "cmd"));
    assert_eq!(r.result, Err(RequestError::NotWatchable));
    drop(consumer);

    // With the slot free the watch runs; a command written is shown and
    // still taken by the consumer that comes for it.
    let r = ask(&mut dispatch, &mut routes, &watch(2, "cmd"));
    assert!(r.result.is_ok(), "{r:?}");
    CMD.write(9);
    let r = decode(&futures_lite_next(&mut routes));
    let Ok(Body::Value { value: Some(v), .. }) = r.result else {
        panic!("{r:?}")
    };
    assert_eq!(postcard::from_bytes::<u8>(v).unwrap(), 9);
    assert_eq!(CMD.with_newest(|v| v.copied()), Some(9), "not taken");
    let r = ask(&mut dispatch, &mut routes, &watch(3, "nope"));
    assert_eq!(r.result, Err(RequestError::UnknownRecord));
}

struct FakeCounters;

struct FakeBacklog;

impl BacklogView for FakeBacklog {
    fn backlog_counters(&self) -> BacklogCounters {
        BacklogCounters {
            depth: 12,
            bytes: 384,
            behind_ms: 720_000,
            dropped: 1,
            erases: 9,
            flash_errors: 0,
        }
    }
}

impl Counted for FakeCounters {
    fn link_counters(&self) -> LinkCounters {
        LinkCounters {
            sent: 7,
            received: 5,
            rejected: 1,
            dropped: 0,
            lagged: 3,
            reconnects: 2,
        }
    }
}

#[test]
fn stats_report_records_and_connectors_with_their_link_state() {
    static LED: Record<Cs, Latest<bool>, 1> = Record::new("led");
    static LINK: Record<Cs, Latest<crate::presence::LinkState>, 1> = Record::new("link");
    static COUNTERS: FakeCounters = FakeCounters;
    static BACKLOG: FakeBacklog = FakeBacklog;
    static TABLE: [Description; 1] = [Description::of(&LED).writable()];
    static CONNECTORS: [Connector; 2] = [
        Connector::new("mqtt", &COUNTERS)
            .link(&LINK)
            .backlog(&BACKLOG),
        Connector::new("uart", &COUNTERS),
    ];
    static RESPONDER: Responder<Cs, 64> = Responder::new(&TABLE).with_connectors(&CONNECTORS);
    static READY: Readiness<1> = Readiness::new();
    tables!(RESPONDER, READY, 256, dispatch, routes);

    LINK.write(crate::presence::LinkState::online(4));
    LED.write(true);
    // A malformed request first: counted, and the count is in the stats.
    ask(&mut dispatch, &mut routes, &[9, 0x7f]);
    let r = ask(
        &mut dispatch,
        &mut routes,
        &request(1, Op::Stats { from: 0 }),
    );
    let Ok(Body::Stats {
        entries,
        connectors,
        responder,
        ..
    }) = r.result
    else {
        panic!("{r:?}")
    };
    assert_eq!(entries, [led_stats(1, 0)]);
    assert_eq!(connectors.len(), 2);
    assert_eq!(connectors[0].name, "mqtt");
    assert_eq!(connectors[0].counters, FakeCounters.link_counters());
    assert_eq!(
        connectors[0].link,
        Some(crate::presence::LinkState::online(4))
    );
    assert_eq!(connectors[1].link, None);
    // The backlog's counters beside its connector's, as the node had them.
    assert_eq!(connectors[0].backlog, Some(FakeBacklog.backlog_counters()));
    assert_eq!(connectors[1].backlog, None);
    assert_eq!((responder.requests, responder.malformed), (2, 1));
    // Later pages carry records only.
    let r = ask(
        &mut dispatch,
        &mut routes,
        &request(2, Op::Stats { from: 1 }),
    );
    assert!(
        matches!(&r.result, Ok(Body::Stats { connectors, .. }) if connectors.is_empty()),
        "{r:?}"
    );
}

#[test]
fn the_manifest_is_json_sent_once_per_link_and_retained() {
    node!(READINGS, LED, CMD, RESPONDER, READY);
    let mut manifest =
        outbound::Link::new(RESPONDER.manifest(), "dev/aimdb/manifest", ManifestJson);
    let mut payload = [0u8; 512];
    let mut b = Routes::<_, 1, 1>::builder(&READY, &mut payload);
    b.link(&mut manifest);
    let mut routes = b.build().unwrap();
    let noop = std::task::Waker::noop();
    let mut cx = Context::from_waker(noop);

    let Poll::Ready(m) = routes.poll_next(&mut cx) else {
        panic!("the manifest goes out at start")
    };
    assert_eq!(m.topic, "dev/aimdb/manifest");
    assert!(m.retain, "a plain subscriber sees it later");
    let v: serde_json::Value = serde_json::from_slice(m.payload).unwrap();
    let records = v["records"].as_array().unwrap();
    let names: Vec<_> = records
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["readings", "led", "cmd"]);
    assert_eq!(records[0]["kind"], "ring");
    assert_eq!(records[0]["type"], "Reading");
    assert_eq!(records[0]["topics"], serde_json::json!(["dev/readings"]));
    let hash: String = schema_hash::<Reading>()
        .iter()
        .map(|b| std::format!("{b:02x}"))
        .collect();
    assert_eq!(records[0]["schema_hash"], hash.as_str());
    assert_eq!(records[1]["writable"], true);
    assert!(records[0].get("writable").is_none());
    // No connector handed to the responder: none keeps a backlog.
    assert_eq!(v["backlogs"], serde_json::json!([]));

    // Once per link: nothing more until the transport reconnects.
    assert!(routes.poll_next(&mut cx).is_pending());
    routes.replay_latest();
    assert!(routes.poll_next(&mut cx).is_ready());
}

#[test]
fn the_manifest_names_the_connectors_with_a_durable_backlog() {
    static LED: Record<Cs, Latest<bool>, 1> = Record::new("led");
    static COUNTERS: FakeCounters = FakeCounters;
    static BACKLOG: FakeBacklog = FakeBacklog;
    static TABLE: [Description; 1] = [Description::of(&LED)];
    static CONNECTORS: [Connector; 3] = [
        Connector::new("framed", &COUNTERS),
        Connector::new("mqtt", &COUNTERS).backlog(&BACKLOG),
        Connector::new("mqtt-\"b\"", &COUNTERS).backlog(&BACKLOG),
    ];
    static RESPONDER: Responder<Cs, 64> = Responder::new(&TABLE).with_connectors(&CONNECTORS);
    let noop = std::task::Waker::noop();
    let mut cx = Context::from_waker(noop);
    let Poll::Ready(Ok(m)) = RESPONDER.manifest().poll_recv(&mut cx) else {
        panic!("the manifest is due at start")
    };
    let mut buf = [0u8; 256];
    let n = ManifestJson.encode(&m, &mut buf).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&buf[..n]).unwrap();
    // Those given a backlog, in table order, names escaped; not the others.
    assert_eq!(v["backlogs"], serde_json::json!(["mqtt", "mqtt-\"b\""]));
    assert_eq!(v["records"][0]["name"], "led");
    // Its last byte counts too: one short is an error, never a cut list.
    assert_eq!(
        ManifestJson.encode(&m, &mut buf[..n - 1]),
        Err(EncodeError::BufferTooSmall)
    );
}

#[test]
fn manifest_strings_are_escaped_json() {
    static ODD: Record<Cs, Latest<bool>, 1> = Record::new("a\"b\\c\u{1}");
    static TABLE: [Description; 1] = [Description::of(&ODD).topics(&["t/\"q\""])];
    let mut buf = [0u8; 256];
    let m = Manifest {
        table: &TABLE,
        connectors: &[],
    };
    let n = ManifestJson.encode(&m, &mut buf).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&buf[..n]).unwrap();
    assert_eq!(v["records"][0]["name"], "a\"b\\c\u{1}");
    assert_eq!(v["records"][0]["topics"][0], "t/\"q\"");
    // Too small a buffer is an error, never a cut manifest.
    assert_eq!(
        ManifestJson.encode(&m, &mut buf[..n - 1]),
        Err(EncodeError::BufferTooSmall)
    );
}

#[test]
fn topics_under_a_prefix_agree_at_compile_and_run_time() {
    assert_eq!(proto::topic("dev/", proto::REQUEST), "dev/aimdb/req");
    assert_eq!(
        crate::remote_topic!("dev", request),
        proto::topic("dev", proto::REQUEST)
    );
    assert_eq!(
        crate::remote_topic!("dev", response),
        proto::topic("dev", proto::RESPONSE)
    );
    assert_eq!(
        crate::remote_topic!("dev", manifest),
        proto::topic("dev", proto::MANIFEST)
    );
    assert_eq!(
        proto::prefix_of("a/b/aimdb/rsp", proto::RESPONSE),
        Some("a/b")
    );
    assert_eq!(proto::prefix_of("a/baimdb/rsp", proto::RESPONSE), None);
}
